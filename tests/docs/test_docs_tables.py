"""The numbers tables of docs/performance.md and docs/accuracy.md are the benchmarks' own.

Each table is preceded by the command that writes it, `<!-- python -m benchmarks.X --markdown ... -->`,
or by `<!-- table: not measured... -->` and a reason. A command's module must take those flags, and its
`layout()` (known without measuring) must be the table's header and first column; a table computed
without timing is run and compared whole, so that it cannot go stale.
"""

from __future__ import annotations

import importlib
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from benchmarks.table import Table, parse_markdown, request

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "docs" / "performance.md", ROOT / "docs" / "accuracy.md"]
COMMAND = re.compile(r"^<!-- (python -m (benchmarks\.\w+)(?: [^>]*)?) -->$")
NOT_MEASURED = re.compile(r"^<!-- table: not measured\b.*\S.* -->$")
#: Tables computed without timing, by the command in the docs: run and compared whole. The slow ones (they
#: import the frameworks or measure rules) run in the slow lane.
EXACT = {"python -m benchmarks.code_lines --markdown"}
EXACT_SLOW = {
    "python -m benchmarks.jax_jit --markdown --table errors",
    "python -m benchmarks.low_precision --markdown --table errors",
    "python -m benchmarks.model --markdown --table gelu_tail",
    "python -m benchmarks.accuracy --markdown --table tanh_sigmoid",
    "python -m benchmarks.accuracy --markdown --table gelu_tanh",
    "python -m benchmarks.accuracy --markdown --table bessel_ie",
}


@dataclass(frozen=True)
class DocTable:
    doc: str
    line: int  # 1-based, the table's header
    comment: str  # the line above it
    text: str  # the table's lines

    @property
    def table(self) -> Table:
        return parse_markdown(self.text)

    def __str__(self) -> str:
        return f"{self.doc}:{self.line}"


def doc_tables(text: str, doc: str) -> list[DocTable]:
    """Every markdown table of `text` (outside fenced blocks), with the non-blank line above it."""
    lines = text.splitlines()
    tables, fenced, k = [], False, 0
    while k < len(lines):
        if lines[k].startswith("```"):
            fenced = not fenced
        if not fenced and lines[k].startswith("|") and k + 1 < len(lines) and lines[k + 1].startswith("|---"):
            end = k
            while end < len(lines) and lines[end].startswith("|"):
                end += 1
            above = next((lines[j] for j in range(k - 1, -1, -1) if lines[j].strip()), "")
            tables.append(DocTable(doc, k + 1, above, "\n".join(lines[k:end])))
            k = end
            continue
        k += 1
    return tables


ALL = [t for path in DOCS for t in doc_tables(path.read_text(), path.name)]
MEASURED = [t for t in ALL if COMMAND.match(t.comment)]


def _module_and_request(table: DocTable):
    match = COMMAND.match(table.comment)
    assert match, table
    args = shlex.split(match.group(1))[3:]
    module = importlib.import_module(match.group(2))
    assert "--markdown" in args, f"{table}: the command must print markdown"
    return module, request(args, module.TABLES), args


def test_every_table_says_what_writes_it():
    assert len(MEASURED) >= 10
    loose = [f"{t}: {t.comment!r}" for t in ALL if not COMMAND.match(t.comment) and not NOT_MEASURED.match(t.comment)]
    assert not loose, "tables preceded by neither a benchmark command nor `<!-- table: not measured ... -->`"
    assert len(ALL) - len(MEASURED) <= 2, "keep the tables not written by a benchmark few"


@pytest.mark.parametrize("table", MEASURED, ids=str)
def test_the_table_is_laid_out_as_its_benchmark_prints_it(table):
    module, asked, _ = _module_and_request(table)
    assert asked.markdown
    layout = module.layout(asked.table)
    assert table.table.layout.header == layout.header, table
    assert table.table.layout.labels == layout.labels, table


def _run(table: DocTable) -> None:
    match = COMMAND.match(table.comment)
    assert match
    out = subprocess.run(
        [sys.executable, *shlex.split(match.group(1))[1:]], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == table.text, f"{table} is stale: `{match.group(1)}` prints\n{out}"


def _exact(commands: set[str]) -> list[DocTable]:
    found = [t for t in MEASURED if COMMAND.match(t.comment).group(1) in commands]  # type: ignore[union-attr]
    assert len(found) == len(commands), "each table computed without timing is in the docs"
    return found


@pytest.mark.parametrize("table", _exact(EXACT), ids=str)
def test_a_table_computed_without_timing_is_what_its_command_prints(table):
    _run(table)


@pytest.mark.slow
@pytest.mark.costly
@pytest.mark.parametrize("table", _exact(EXACT_SLOW), ids=str)
def test_an_error_table_is_what_its_command_prints(table):
    _run(table)


def test_markdown_tables_read_back_as_written():
    table = Table(["case", "a | b", "c"])
    table.add("gelu (erf)", "1.0 [0.9, 1.1]", "")
    table.add("  indented", 2, "3 (composite)")
    back = parse_markdown(table.markdown())
    assert back.header == ["case", "a | b", "c"]
    assert back.rows == [["gelu (erf)", "1.0 [0.9, 1.1]", ""], ["indented", "2", "3 (composite)"]]
    assert table.text().splitlines()[1].startswith("gelu (erf)")


def test_a_benchmark_refuses_a_table_it_does_not_print():
    with pytest.raises(SystemExit):
        request(["--markdown", "--table", "speeds"], ("errors", "speed"))
    assert request(["18", "--markdown", "--table", "speed", "--quick"], ("errors", "speed")).rest == ["18", "--quick"]


#: Measured tables whose `layout()` is written apart from the code that fills the table: a quick run of
#: each prints the labels `layout()` says (the header's first cell names the size, which a quick run shrinks).
#: benchmarks.model checks its rows against `layout()` itself, on every run (tests/docs/test_benchmarks.py).
QUICK_RUNS = [["benchmarks.jax_eager_host", "10"]]


@pytest.mark.slow
@pytest.mark.costly
@pytest.mark.parametrize("command", QUICK_RUNS, ids=lambda command: command[0])
def test_a_measured_table_prints_the_layout_its_module_gives(command):
    module = importlib.import_module(command[0])
    out = subprocess.run(
        [sys.executable, "-m", *command, "--markdown"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    printed = parse_markdown(out).layout
    assert printed.labels == module.layout().labels
    assert printed.header[1:] == module.layout().header[1:]
