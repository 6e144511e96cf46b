"""A benchmark's table: printed as plain columns, or as the GitHub markdown table the docs hold.

Every benchmark whose table is in docs/performance.md or docs/accuracy.md takes
`--markdown` (and `--table NAME` where it prints more than one) and then prints
that table alone on stdout, its progress going to stderr. Each also has
`layout(table)`: the table's header and row labels, known without measuring,
which tests/docs/test_docs_tables.py compares with the docs.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Layout:
    """What a table holds before anything is measured: its header and the label of each row."""

    header: tuple[str, ...]
    labels: tuple[str, ...]


@dataclass
class Table:
    """A header and rows of cells, the first cell of each row its label."""

    header: list[str]
    rows: list[list[str]] = field(default_factory=list)

    def add(self, label: str, *cells: object) -> None:
        row = [label, *(str(c) for c in cells)]
        if len(row) != len(self.header):
            raise ValueError(f"row {row} has {len(row)} cells, the header {len(self.header)}")
        self.rows.append(row)

    @property
    def layout(self) -> Layout:
        return Layout(tuple(h.strip() for h in self.header), tuple(row[0].strip() for row in self.rows))

    def text(self) -> str:
        """Plain columns: the labels left-aligned, the cells right-aligned, each column as wide as it needs."""
        widths = [max(len(row[k]) for row in [self.header, *self.rows]) for k in range(len(self.header))]
        lines = []
        for row in [self.header, *self.rows]:
            cells = [row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)]
            lines.append("  ".join(cells).rstrip())
        return "\n".join(lines)

    def markdown(self) -> str:
        """A GitHub markdown table (cells stripped; a `|` in a cell escaped)."""

        def line(cells: list[str]) -> str:
            return "| " + " | ".join(c.strip().replace("|", "\\|") for c in cells) + " |"

        return "\n".join([line(self.header), "|" + "---|" * len(self.header), *(line(row) for row in self.rows)])


def parse_markdown(text: str) -> Table:
    """The table of markdown `text` (its lines from the header on; it ends at the first line not a row)."""
    rows = []
    for line in text.strip().splitlines():
        if not line.startswith("|"):
            break
        cells = [c.strip().replace("\\|", "|") for c in _split_row(line.strip())]
        rows.append(cells)
    if len(rows) < 2 or not all(set(c) <= set("-: ") for c in rows[1]):
        raise ValueError(f"not a markdown table: {text[:80]!r}")
    return Table(rows[0], rows[2:])


def _split_row(line: str) -> list[str]:
    cells, cell, escaped = [], "", False
    for char in line[1:]:
        if char == "|" and not escaped:
            cells.append(cell)
            cell = ""
        else:
            cell += char
        escaped = char == "\\" and not escaped
    return cells


@dataclass(frozen=True)
class Request:
    """What `--markdown [--table NAME]` asks of a benchmark; `rest` is the rest of its arguments."""

    markdown: bool
    table: str
    rest: list[str]


def request(argv: list[str], tables: tuple[str, ...]) -> Request:
    """`--markdown` and `--table NAME` (one of `tables`, the first by default) taken out of `argv`."""
    rest = list(argv)
    markdown = "--markdown" in rest
    if markdown:
        rest.remove("--markdown")
    table = option(rest, "--table", tables) or tables[0]
    return Request(markdown, table, rest)


def option(rest: list[str], flag: str, choices: Sequence[str]) -> str | None:
    """`flag CHOICE` taken out of `rest` (in place): the choice, or None where `flag` is absent; a value not among
    `choices` exits with status 2."""
    if flag not in rest:
        return None
    at = rest.index(flag)
    if at + 1 == len(rest) or rest[at + 1] not in choices:
        print(f"{flag} takes one of: {', '.join(choices)}", file=sys.stderr)
        raise SystemExit(2)
    value = rest[at + 1]
    del rest[at : at + 2]
    return value


@contextlib.contextmanager
def quiet_if(markdown: bool) -> Iterator[None]:
    """With `--markdown`, what a benchmark prints as it runs goes to stderr: stdout holds the table alone."""
    if not markdown:
        yield
        return
    with contextlib.redirect_stdout(sys.stderr):
        yield
