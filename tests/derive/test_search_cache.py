"""The search cache on disk: what it reads back is what the search found, and a stale or bad entry is a miss."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import sympy as sp

from rulegen.derive.partials import derive_rule
from rulegen.derive.stabilise import search as search_module
from rulegen.derive.stabilise.cache import CACHE_ENV, search_key
from rulegen.spec.rules import Domain, Rule, read_rule_file

# f_cbrt's chosen derivative is a power of a Piecewise, which sympy's constructors fold again when an
# unpickled tree is rebuilt with evaluation on: read back that way, the generated code changed.
RULES = """\
rules:
  - name: cached_cbrt
    inputs: {x: {domain: [0.1, 4]}}
    forward: x**(1/3)
  - name: cached_tanh
    inputs: [x]
    forward: tanh(x)
"""


def _rules(folder: Path, text: str = RULES) -> list[Rule]:
    path = folder / "rules.yaml"
    path.write_text(text)
    return read_rule_file(path)


def _written(rule: Rule) -> tuple[str, ...]:
    d = derive_rule(rule, [rule.name])
    return (sp.srepr(d.forward), sp.srepr(d.jvp_partials), *(sp.srepr((c.derived, c.chosen)) for c in d.choices))


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv(CACHE_ENV, str(folder))
    monkeypatch.setattr(search_module, "_SEARCHED", {})
    return folder


def _no_search(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(*args: object) -> object:
        raise AssertionError("searched again")

    monkeypatch.setattr(search_module, "_search", refused)
    monkeypatch.setattr(search_module, "_SEARCHED", {})


def test_a_search_read_back_is_exactly_the_search_found(tmp_path, cache, monkeypatch):
    rules = _rules(tmp_path)
    found = [_written(r) for r in rules]
    assert any(path.is_file() for path in cache.rglob("*")), "nothing was stored"
    _no_search(monkeypatch)
    assert [_written(r) for r in rules] == found


def test_the_same_rule_elsewhere_in_a_file_is_not_searched_again(tmp_path, cache, monkeypatch):
    # The key holds no place in a file: a rebuild after editing the rule above searches only that one.
    (first, _) = _rules(tmp_path)
    found = _written(first)
    moved = _rules(tmp_path, "# a comment moves every rule down\n\n" + RULES)[0]
    assert moved.loc != first.loc
    _no_search(monkeypatch)
    assert _written(moved) == found


def test_a_damaged_entry_is_searched_again(tmp_path, cache, monkeypatch):
    (rule, _) = _rules(tmp_path)
    found = _written(rule)
    entries = [p for p in cache.rglob("*") if p.is_file()]
    for path in entries:
        path.write_bytes(b"\x80\x04not a pickle")
    monkeypatch.setattr(search_module, "_SEARCHED", {})
    assert _written(rule) == found
    # An entry whose tree does not match the text it was stored with (a sympy that rebuilds it otherwise).
    for path in entries:
        _, data = pickle.loads(path.read_bytes())
        path.write_bytes(pickle.dumps(("Integer(0)", data)))
    monkeypatch.setattr(search_module, "_SEARCHED", {})
    assert _written(rule) == found


def test_the_cache_turned_off_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, "off")
    monkeypatch.setattr(search_module, "_SEARCHED", {})
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home"))
    (rule, _) = _rules(tmp_path)
    _written(rule)
    assert not (tmp_path / "home").exists()


def test_the_key_holds_what_decides_the_search():
    x, positive = sp.Symbol("x", real=True), sp.Symbol("x", positive=True)
    base = search_key(sp.exp(x), (((x, Domain(ge=0)),), 0))
    assert base == search_key(sp.exp(x), (((x, Domain(ge=0)),), 0))
    assert base != search_key(sp.exp(positive), (((positive, Domain(ge=0)),), 0))  # assumptions
    assert base != search_key(sp.exp(x), (((x, Domain(gt=0)),), 0))  # an open bound
    assert base != search_key(sp.exp(x), (((x, Domain(ge=0)),), 1))  # the seed


def test_an_expression_by_cases_is_built_once_and_read_back_in_another_process(cache, monkeypatch):
    # beta's cases take seconds of sympy to build, in every process that prints them: kept on disk, a second
    # process reads them back, the same tree.
    from rulegen.derive import functions as fn

    a, b = sp.Symbol("a_kept", real=True), sp.Symbol("b_kept", real=True)
    built = fn.beta_by_cases(a, b)
    assert any(path.is_file() for path in cache.rglob("*")), "nothing was stored"
    fn.beta_by_cases.cache_clear()  # type: ignore[attr-defined]  # as a new process starts

    def refused(*args: object, **kwargs: object) -> object:
        raise AssertionError("built again")

    monkeypatch.setattr(fn, "_beta_pieces", refused)
    read = fn.beta_by_cases(a, b)
    assert sp.srepr(read) == sp.srepr(built)
    # Other arguments are another key: built, not read.
    with pytest.raises(AssertionError, match="built again"):
        fn.beta_by_cases(b, a)
