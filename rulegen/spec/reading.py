"""Reading rule files: YAML to validated rules, every problem located at `file:line:col`.

pydantic's errors are mapped back to the YAML document's places; the
rules of a file are checked by `rulegen.spec.consistency`, those of a
build against one another by `rulegen.spec.ruleset`.
"""

from __future__ import annotations

import difflib
import hashlib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError
from pydantic_core import ErrorDetails

from rulegen.spec.consistency import consistency_errors
from rulegen.spec.errors import Loc, SpecError, SpecErrors
from rulegen.spec.model import (
    INPUT_TAG,
    SNIPPET_TAG,
    STRUCTURE_TAG,
    SYMPY_TAG,
    Checks,
    Domain,
    Input,
    Output,
    Point,
    PointJvp,
    Rule,
    RuleFile,
    SnippetBody,
    Structured,
    Tolerance,
)
from rulegen.spec.normalise import UNKNOWN
from rulegen.spec.ruleset import clash_errors
from rulegen.spec.source import YamlMap, load_yaml, locate


def _yaml_path(root: object, path: Sequence[str | int]) -> list[str | int]:
    """Turn a pydantic error path into a path through the YAML document.

    Inputs and outputs are validated as lists even when the YAML gives a
    mapping; an index into such a mapping stands for its index-th key.
    """
    node = root
    out: list[str | int] = []
    for part in path:
        if isinstance(node, dict):
            key = part
            if isinstance(part, int) and part not in node:
                keys = list(node)
                if part >= len(keys):
                    break
                key = keys[part]
            if key not in node:
                out.append(key)
                break
            out.append(key)
            node = node[key]
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            out.append(part)
            node = node[part]
        else:
            break
    return out


def _message(error: ErrorDetails) -> str:
    kind = error["type"]
    msg = str(error["msg"])
    for prefix in ("Value error, ", "Assertion failed, "):
        if msg.startswith(prefix):
            msg = msg[len(prefix) :]
    if kind == "extra_forbidden":
        return f"unknown key {error['loc'][-1]!r}"
    if kind == "missing":
        return f"missing required key {error['loc'][-1]!r}"
    if error["loc"][-1:] == ("[key]",):
        return f"key {error['loc'][-2]!r}: {msg}"
    field = next((p for p in reversed(error["loc"]) if isinstance(p, str) and not p.startswith("<")), None)
    return f"{field}: {msg}" if field and msg.startswith("Input should") else msg


def _located_errors(root: object, error: ValidationError, path_prefix: Sequence[str | int]) -> list[SpecError]:
    found: list[SpecError] = []
    seen: set[tuple[Loc, str]] = set()
    for e in error.errors():
        # Tagged unions add their tag to the path; it is no key of the document.
        loc_path = [p for p in e["loc"] if p not in (SYMPY_TAG, SNIPPET_TAG, INPUT_TAG, STRUCTURE_TAG)]
        yaml_path = _yaml_path(root, [*path_prefix, *loc_path])
        loc = locate(root, yaml_path) or getattr(root, "loc", None) or UNKNOWN
        if loc_path[-1:] == ["[key]"] and yaml_path:
            # A key refused as a key: its place, not its value's.
            parent = root
            for part in yaml_path[:-1]:
                parent = parent[part]  # type: ignore[index]
            if isinstance(parent, YamlMap) and yaml_path[-1] in parent.key_locs:
                loc = parent.key_locs[yaml_path[-1]]
        if e["type"] == "extra_forbidden":
            parent = locate(root, yaml_path[:-1])
            node = root
            for part in yaml_path[:-1]:
                node = node[part]  # type: ignore[index]
            key = yaml_path[-1] if yaml_path else None
            if isinstance(node, YamlMap) and isinstance(key, str) and key in node.key_locs:
                loc = node.key_locs[key]
                message = f"unknown key {key!r}"
                close = difflib.get_close_matches(key, _allowed_keys(), n=1)
                if close and close[0] != key:
                    message += f"; did you mean {close[0]!r}?"
                _add(found, seen, loc, message)
                continue
            loc = parent or loc
        _add(found, seen, loc, _message(e))
    return found


def _allowed_keys() -> list[str]:
    keys: set[str] = set()
    for model in (Rule, Input, Domain, Structured, Output, Checks, Point, PointJvp, Tolerance, SnippetBody):
        keys |= {field.alias or name for name, field in model.model_fields.items()}
    return sorted(keys - {"loc", "source", "source_hash", "has_default", "domain_given"})


def _add(found: list[SpecError], seen: set[tuple[Loc, str]], loc: Loc, message: str) -> None:
    if (loc, message) not in seen:
        seen.add((loc, message))
        found.append(SpecError(loc, message))


def read_rule_file(path: Path, source_name: str | None = None) -> tuple[Rule, ...]:
    """Every rule of one file, or SpecErrors naming every problem in it.

    Errors name `path` as given; `source_name` (default: the same) is what
    generated code records as the rule's source.
    """
    try:
        raw_bytes = path.read_bytes()
    except OSError as exc:
        raise SpecErrors([SpecError(Loc(str(path)), f"cannot read: {exc.strerror}")]) from None
    digest = hashlib.sha256(raw_bytes).hexdigest()
    try:
        text = raw_bytes.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    root = load_yaml(path, text)
    file_loc = Loc(str(path))
    if not isinstance(root, YamlMap):
        raise SpecErrors(
            [
                SpecError(
                    getattr(root, "loc", file_loc), "a rule file holds a mapping: one rule, or `rules:` with a list"
                )
            ]
        )
    if "rules" in root:
        entries = root["rules"]
        if set(root) != {"rules"}:
            extra = sorted(set(root) - {"rules"})
            raise SpecErrors([SpecError(root.key_locs[extra[0]], "a file with `rules:` holds nothing else")])
        if not isinstance(entries, list) or not entries:
            raise SpecErrors([SpecError(root.value_locs["rules"], "`rules:` must be a non-empty list of rules")])
        items: list[tuple[object, list[str | int]]] = [(entry, ["rules", i]) for i, entry in enumerate(entries)]
    else:
        items = [(root, [])]
    rules: list[Rule] = []
    errors: list[SpecError] = []
    for entry, prefix in items:
        data = entry
        if isinstance(entry, YamlMap):
            data = YamlMap({**entry, "source": source_name or str(path), "source_hash": digest})
            data.loc, data.key_locs, data.value_locs = entry.loc, entry.key_locs, entry.value_locs
        try:
            rule = Rule.model_validate(data)
        except ValidationError as exc:
            errors.extend(_located_errors(root, exc, prefix))
            continue
        errors.extend(consistency_errors(rule))
        rules.append(rule)
    if errors:
        raise SpecErrors(errors)
    return tuple(rules)


def read_rules(paths: Iterable[Path]) -> tuple[Rule, ...]:
    """All rules of all files; SpecErrors lists the problems of every file."""
    rules: list[Rule] = []
    errors: list[SpecError] = []
    for path in paths:
        try:
            rules.extend(read_rule_file(path))
        except SpecErrors as exc:
            errors.extend(exc.errors)
    errors += clash_errors([(r.name, r.torch_class, r.loc) for r in rules])
    if errors:
        raise SpecErrors(errors)
    return tuple(rules)


def rule_files(paths: Iterable[Path]) -> list[Path]:
    """The rule files named by `paths`: files as given, directories searched for *.yaml.

    A file named twice (`rules/ rules/a.yaml`, or by two spellings of its
    path) is one file, read once: its rules are not another file's.
    """
    found: dict[Path, Path] = {}
    for path in paths:
        named = sorted(p for p in path.rglob("*") if p.suffix in (".yaml", ".yml")) if path.is_dir() else [path]
        for file in named:
            try:
                same = file.resolve()
            except (OSError, RuntimeError):
                same = file
            found.setdefault(same, file)
    return list(found.values())


def json_schema() -> dict[str, Any]:
    """The JSON Schema of a rule file (one rule, or `rules:` with several), for editors' YAML support."""
    schema = TypeAdapter(Rule | RuleFile).json_schema(mode="validation")
    schema["title"] = "rulegen rule file"
    return schema
