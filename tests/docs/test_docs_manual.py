"""The docs are a manual in the present tense: history goes to CHANGELOG.md, not into README.md or docs/*.md."""

from __future__ import annotations

import re

import pytest

from tests.conftest import ROOT

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

_MONTH = r"(?:january|february|march|april|may|june|july|august|september|october|november|december)"
_ORDINAL = r"(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth)"

#: Words and marks of the project's history, each with what it catches.  "Round" is history only as a round of
#: the work ("the ninth round", "round 3", "rounds of the search"): "rounded", "round-off", "correctly rounded"
#: and "40 interleaved rounds" are the manual's own words.
HISTORY = {
    "a stop of the work": re.compile(r"\bstop [0-9]", re.I),
    "an issue number": re.compile(r"\bissue [0-9]", re.I),
    "a round of the work": re.compile(rf"\b{_ORDINAL} round\b|\bround [0-9]|\brounds? of the search\b", re.I),
    "a date": re.compile(
        rf"\b20[0-9][0-9]-[0-9][0-9]-[0-9][0-9]\b|\b[0-9]{{1,2}} {_MONTH} 20[0-9][0-9]\b|\b{_MONTH} 20[0-9][0-9]\b",
        re.I,
    ),
}
#: A commit hash: 7 to 40 hex digits with at least one digit and one letter (so neither 1234567 nor "defaced").
_HEX = re.compile(r"\b[0-9a-f]{7,40}\b", re.I)


def _commit_hashes(line: str) -> list[str]:
    return [m for m in _HEX.findall(line) if re.search(r"[0-9]", m) and re.search(r"[a-f]", m, re.I)]


def _history(line: str) -> list[str]:
    found = [what for what, pattern in HISTORY.items() if pattern.search(line)]
    return found + (["a commit hash"] if _commit_hashes(line) else [])


def test_the_history_patterns_catch_history_and_spare_the_manual():
    for line in [
        "at stop 44's end",
        "issue 26's bars",
        "Second round of the search",
        "Ninth round (the tail)",
        "round 3 of it",
        "two rounds of the search",
        "26 November 2026",
        "November 2026",
        "2026-11-27",
        "at 1f9a4c0",
        "fixed in 9af6a26",
    ]:
        assert _history(line), line
    for line in [
        "correctly rounded",
        "rounded once",
        "round-off",
        "40 interleaved rounds",
        "median of the per-round ratios",
        "1e308 and 1e-300",
        "the 1234567 points",
        "a defaced value",
        "jax-ml/jax#23620",
    ]:
        assert not _history(line), line


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_the_docs_carry_no_history(path):
    found = [
        f"{path.name}:{number}: {', '.join(_history(line))}: {line.strip()}"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if _history(line)
    ]
    assert not found, "history belongs in CHANGELOG.md:\n" + "\n".join(found)


def test_the_history_has_a_changelog():
    text = (ROOT / "CHANGELOG.md").read_text()
    assert text.startswith("# Changelog")
    assert "## [Unreleased]" in text and "## [0.1.0]" in text


def test_the_readme_is_short():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 150
