"""Stage 0: load one rule file as YAML, keeping where every value came from.

Rule files are untrusted input.  PyYAML's loaders are made for trusted
documents: they keep the last of two duplicate keys, expand aliases (an
alias bomb of a few hundred bytes becomes gigabytes), construct objects from
tags, and recurse once per nesting level.  Here the event stream is scanned
first (no recursion, no expansion), anything a rule never needs is refused,
and only then is the document composed and converted into plain containers
that carry their `Loc`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from rulegen.spec.errors import Loc, SpecError, SpecErrors

MAX_BYTES = 1 << 20
MAX_DEPTH = 64

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_STANDARD_TAGS = {
    "tag:yaml.org,2002:str",
    "tag:yaml.org,2002:int",
    "tag:yaml.org,2002:float",
    "tag:yaml.org,2002:bool",
    "tag:yaml.org,2002:null",
    "tag:yaml.org,2002:map",
    "tag:yaml.org,2002:seq",
}


class YamlMap(dict):
    """A mapping with the location of itself, of each key and of each value."""

    loc: Loc
    key_locs: dict[str, Loc]
    value_locs: dict[str, Loc]

    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        return (_rebuild_map, (dict(self), self.__dict__))


class YamlList(list):
    """A sequence with the location of itself and of each item."""

    loc: Loc
    item_locs: list[Loc]

    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        return (_rebuild_list, (list(self), self.__dict__))


class YamlStr(str):
    """A string with the location of its first content character.

    For a block scalar (`|`, `>`) that is the first content line at its
    indentation, so `loc.offset(line, col)` maps a position inside the text
    (as `ast` reports it) to the file.
    """

    loc: Loc
    block: bool

    def __new__(cls, value: str, loc: Loc, block: bool = False) -> YamlStr:
        obj = super().__new__(cls, value)
        obj.loc = loc
        obj.block = block
        return obj

    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        return (YamlStr, (str(self), self.loc, self.block))


class YamlInt(int):
    """An integer with its location (a number may stand for an expression, `x: 1`)."""

    loc: Loc

    def __new__(cls, value: int, loc: Loc) -> YamlInt:
        obj = super().__new__(cls, value)
        obj.loc = loc
        return obj

    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        return (YamlInt, (int(self), self.loc))


class YamlFloat(float):
    """A float with its location."""

    loc: Loc

    def __new__(cls, value: float, loc: Loc) -> YamlFloat:
        obj = super().__new__(cls, value)
        obj.loc = loc
        return obj

    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        return (YamlFloat, (float(self), self.loc))


def _rebuild_map(items: dict, state: dict) -> YamlMap:
    m = YamlMap(items)
    m.__dict__.update(state)
    return m


def _rebuild_list(items: list, state: dict) -> YamlList:
    lst = YamlList(items)
    lst.__dict__.update(state)
    return lst


def _loc(file: str, mark: Any) -> Loc:
    # A yaml.Mark, of the pure-Python or the C parser (their stubs are two classes), or None.
    if mark is None:
        return Loc(file)
    return Loc(file, mark.line + 1, mark.column + 1)


def _scan_events(text: str, file: str) -> list[SpecError]:
    """Refuse what a rule file never needs, before anything is built."""
    errors: list[SpecError] = []
    depth = 0
    documents = 0
    try:
        for event in yaml.parse(text, Loader=_Loader):
            loc = _loc(file, event.start_mark)
            if isinstance(event, yaml.DocumentStartEvent):
                documents += 1
                if documents > 1:
                    errors.append(SpecError(loc, "a rule file holds one YAML document; use `rules:` for several rules"))
                    return errors
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
                errors.append(SpecError(loc, "rule files may not use YAML anchors or aliases (&name, *name)"))
                return errors
            tag = getattr(event, "tag", None)
            if tag is not None and tag not in ("!", *_STANDARD_TAGS):
                errors.append(SpecError(loc, f"rule files may not use YAML tags ({tag})"))
                return errors
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    errors.append(SpecError(loc, f"nested deeper than {MAX_DEPTH} levels"))
                    return errors
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        errors.append(SpecError(_loc(file, mark), f"invalid YAML: {exc.problem or exc.context}"))
    except yaml.YAMLError as exc:
        errors.append(SpecError(Loc(file), f"invalid YAML: {exc}"))
    return errors


_YAML12_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?")


class _Converter:
    def __init__(self, file: str, lines: list[str]) -> None:
        self.file = file
        self.lines = lines
        self.errors: list[SpecError] = []
        self.scalars = yaml.SafeLoader("")

    def convert(self, node: yaml.Node) -> object:
        if isinstance(node, yaml.MappingNode):
            return self.mapping(node)
        if isinstance(node, yaml.SequenceNode):
            items = YamlList(self.convert(item) for item in node.value)
            items.loc = _loc(self.file, node.start_mark)
            items.item_locs = [self.value_loc(item) for item in node.value]
            return items
        assert isinstance(node, yaml.ScalarNode)  # a YAML node is a mapping, a sequence or a scalar
        return self.scalar(node)

    def mapping(self, node: yaml.MappingNode) -> YamlMap:
        result = YamlMap()
        result.loc = _loc(self.file, node.start_mark)
        result.key_locs, result.value_locs = {}, {}
        for key_node, value_node in node.value:
            key_loc = _loc(self.file, key_node.start_mark)
            if key_node.tag == "tag:yaml.org,2002:merge":
                self.errors.append(SpecError(key_loc, "merge keys (<<) are not allowed in rule files"))
                continue
            key = self.convert(key_node)
            if not isinstance(key, str):
                self.errors.append(SpecError(key_loc, f"keys must be strings, not {key!r}; quote the key"))
                continue
            if key in result:
                first = result.key_locs[key]
                self.errors.append(SpecError(key_loc, f"duplicate key {key!r} (first at line {first.line})"))
                continue
            result[str(key)] = self.convert(value_node)
            result.key_locs[key] = key_loc
            result.value_locs[key] = self.value_loc(value_node)
        return result

    def value_loc(self, node: yaml.Node) -> Loc:
        if isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:str":
            return self.text_loc(node)
        return _loc(self.file, node.start_mark)

    def text_loc(self, node: yaml.ScalarNode) -> Loc:
        start = node.start_mark
        if node.style in ("'", '"'):
            return Loc(self.file, start.line + 1, start.column + 2)
        if node.style in ("|", ">"):
            for index in range(start.line + 1, min(node.end_mark.line + 1, len(self.lines))):
                line = self.lines[index]
                if line.strip():
                    indent = len(line) - len(line.lstrip(" "))
                    return Loc(self.file, index + 1, indent + 1)
        return _loc(self.file, start)

    def scalar(self, node: yaml.ScalarNode) -> object:
        tag = node.tag
        if tag == "tag:yaml.org,2002:str" and not node.style and _YAML12_FLOAT.fullmatch(node.value):
            # YAML 1.2 (and so an editor's schema check) reads `1e-7` and `1.5e3` as numbers; PyYAML's 1.1 as strings.
            return YamlFloat(float(node.value), _loc(self.file, node.start_mark))
        if tag == "tag:yaml.org,2002:str" or tag == "tag:yaml.org,2002:timestamp":
            return YamlStr(str(node.value), self.text_loc(node), block=node.style in ("|", ">"))
        if tag in _STANDARD_TAGS:
            loc = _loc(self.file, node.start_mark)
            try:
                value = self.scalars.construct_object(node, deep=False)
            except ValueError:
                # Python refuses to read integers of more than 4300 digits.
                self.errors.append(SpecError(loc, f"a number of {len(str(node.value))} characters is too large"))
                return None
            if isinstance(value, int) and not isinstance(value, bool):
                return YamlInt(value, loc)
            if isinstance(value, float):
                return YamlFloat(value, loc)
            return value
        # Implicit resolution of the safe schema gives only the tags above
        # (and binary/set/omap only when written explicitly, refused earlier).
        self.errors.append(SpecError(_loc(self.file, node.start_mark), f"unsupported YAML value ({tag})"))
        return None


def load_yaml(path: Path, text: str | None = None) -> object:
    """The document of a rule file as YamlMap/YamlList/YamlStr/YamlInt/YamlFloat, bools and None.

    SpecErrors if the file is refused.
    """
    file = str(path)
    if text is None:
        try:
            raw = path.read_bytes()
        except OSError as exc:
            raise SpecErrors([SpecError(Loc(file), f"cannot read: {exc.strerror}")]) from None
        if len(raw) > MAX_BYTES:
            raise SpecErrors(
                [SpecError(Loc(file), f"a rule file is at most {MAX_BYTES} bytes; this one has {len(raw)}")]
            )
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SpecErrors([SpecError(Loc(file), f"not UTF-8 text (byte {exc.start})")]) from None
    elif len(text) > MAX_BYTES:
        raise SpecErrors([SpecError(Loc(file), f"a rule file is at most {MAX_BYTES} bytes")])
    if not text.strip():
        raise SpecErrors([SpecError(Loc(file), "empty rule file")])
    errors = _scan_events(text, file)
    if errors:
        raise SpecErrors(errors)
    node = yaml.compose(text, Loader=_Loader)
    if node is None:
        raise SpecErrors([SpecError(Loc(file), "empty rule file")])
    converter = _Converter(file, text.splitlines())
    document = converter.convert(node)
    if converter.errors:
        raise SpecErrors(converter.errors)
    return document


def locate(root: object, path: Sequence[str | int]) -> Loc | None:
    """The location of the deepest value reached along `path` (a YAML path)."""
    node = root
    found = getattr(root, "loc", None)
    for part in path:
        if isinstance(node, YamlMap) and isinstance(part, str) and part in node:
            found = node.value_locs[part]
            node = node[part]
        elif isinstance(node, YamlList) and isinstance(part, int) and 0 <= part < len(node):
            found = node.item_locs[part]
            node = node[part]
        else:
            break
    return found
