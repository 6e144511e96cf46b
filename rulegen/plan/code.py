"""The code model of a generated module: its imports and its statements, as data.

A planner or printer says which name a module takes from where (`Import`);
the import block is printed from these (`import_statements`), and what the
module needs from its package and its environment (helpers, distributions)
is read off their fields (`rulegen.plan.model.needs_of`).  Nothing reads a
printed import statement back.

A module's definitions and their bodies are statements (`Assign`,
`Return`, `If`, `Def`, `Class` ...), which `printed` writes: the one place
that writes a generated statement.  Expressions inside them are code, as
the printers (`rulegen.plan.printers`) and planners print them; where
code goes inside other code, it is a `Value`, which says how tightly it
binds, so that no one parses printed text to place parentheses.
"""

from __future__ import annotations

import builtins
import textwrap
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from sympy.printing.precedence import PRECEDENCE

from rulegen.spec import names


@dataclass(frozen=True, order=True)
class Import:
    """`import module [as alias]` (`name` None), or `from module import name [as alias]`.

    A module starting with `.` is the generated package's own: a runtime
    helper (`._util`), or with `module` `.` alone, `name` is one (`from .
    import _numbers`).
    """

    module: str
    name: str | None = None
    alias: str | None = None

    @property
    def bound(self) -> str:
        """The name the statement binds in the importing module."""
        return self.alias or self.name or self.module.split(".")[0]

    @property
    def helper(self) -> str | None:
        """The runtime helper of the package it reads (`_util`); None for an installed module."""
        if not self.module.startswith("."):
            return None
        return self.module.lstrip(".") or self.name

    @property
    def distribution(self) -> str | None:
        """The top-level module to install (`jax` of `jax.numpy`); None for a helper of the package."""
        return None if self.module.startswith(".") else self.module.split(".")[0]


def imported(module: str, *names_: str) -> frozenset[Import]:
    """`from module import` each of `names_`."""
    return frozenset(Import(module, name) for name in names_)


def spelled(imports: Iterable[Import], own: Mapping[str, str]) -> frozenset[Import]:
    """`imports`, each name they bind spelled as the module spells it (`Rule.own_names`).

    `import torch` becomes `import torch as torch_` in a module where the rule
    takes `torch`; a dotted `import jax.scipy.special` stays (it loads the
    submodule) beside `import jax as jax_`, through which the code reaches it.
    A builtin the rule takes a name of is reached through an import of its
    own (`from builtins import float as float_`).
    """
    found: set[Import] = set()
    for item in imports:
        wanted = own.get(item.bound, item.bound)
        if item.name is not None:
            found.add(Import(item.module, item.name, None if wanted == item.name else wanted))
        elif wanted == item.bound:
            found.add(item)
        elif item.alias is None and "." in item.module:
            found |= {item, Import(item.module.split(".")[0], alias=wanted)}
        else:
            found.add(Import(item.module, alias=wanted))
    found |= {
        Import("builtins", name, own[name])
        for name in names.BUILTIN_NAMES
        if hasattr(builtins, name) and own.get(name, name) != name
    }
    return frozenset(found)


def import_statements(imports: Iterable[Import]) -> tuple[str, ...]:
    """The import block: one statement per module imported whole, one per module names are taken from."""
    whole: set[str] = set()
    taken: dict[str, set[str]] = {}
    for item in imports:
        if item.name is None:
            whole.add(f"import {item.module}" + (f" as {item.alias}" if item.alias else ""))
        else:
            taken.setdefault(item.module, set()).add(item.name + (f" as {item.alias}" if item.alias else ""))
    joined = {f"from {module} import {', '.join(sorted(found))}" for module, found in taken.items()}
    return tuple(sorted(whole | joined))


# -- expressions

#: How tightly a primary binds (a name, a call, an attribute, a subscript): tightest of all, on the scale of
#: sympy's `PRECEDENCE` (a sum "Add", a product "Mul", a power "Pow"), which the printers rank their code on.
PRIMARY = PRECEDENCE["Atom"]
#: A number literal: bare beside every operator, but not before `.attr` (`(2.0).clone()`, `2.real` is an error).
LITERAL = PRIMARY - 1
#: A conditional expression or a tuple: looser than every operator.
LOOSEST = PRECEDENCE["Lambda"]


@dataclass(frozen=True)
class Value:
    """An expression's code, and how tightly it binds (`precedence`, on the printers' scale: see PRIMARY).

    Set by whoever writes the code (a printer, from the expression it
    prints; a planner, for the call it writes), and asked by whoever places
    it inside other code.
    """

    text: str
    precedence: int = PRIMARY

    def __str__(self) -> str:
        return self.text

    def within(self, level: int) -> str:
        """The code where an operator of precedence `level` takes it: parenthesised if it binds more loosely."""
        return self.text if self.precedence >= level else f"({self.text})"

    @property
    def receiver(self) -> str:
        """The code before `.attr` or `.method(...)`: bare only if it is a primary."""
        return self.within(PRIMARY)

    def method(self, call: str) -> Value:
        """`self.call`: a method called on the value (`t0.mul_(x)`), a primary."""
        return Value(f"{self.receiver}.{call}", PRIMARY)


# -- statements


def unpacking(names: Sequence[str]) -> str:
    """Targets that unpack a tuple of `names`: `a,` for one name, `a, b` for several ("" for none)."""
    return f"{names[0]}," if len(names) == 1 else ", ".join(names)


def unpacked_pairs(*pairs: tuple[Sequence[str], str]) -> tuple[Assign, ...]:
    """Each of `pairs` (targets, a tuple's code) unpacked: one statement where it fits a line, else one each.

    `(x, y), (x_dot, y_dot) = primals, tangents`: a JAX rule's arguments,
    said once.
    """
    joined = Assign(", ".join(f"({unpacking(t)})" for t, _ in pairs), ", ".join(c for _, c in pairs))
    if len(pairs) > 1 and fits_a_line(joined.line):
        return (joined,)
    return tuple(Assign(unpacking(t), c) for t, c in pairs)


@dataclass(frozen=True)
class Assign:
    """`target = code`; with `also`, `target = also... = code`: several names bound to one value."""

    target: str
    code: str
    also: tuple[str, ...] = ()

    @property
    def line(self) -> str:
        return " = ".join((self.target, *self.also, self.code))


@dataclass(frozen=True)
class Expr:
    """A statement that is one expression: a call, an in-place update (`t0.mul_(x)`)."""

    code: str

    @property
    def line(self) -> str:
        return self.code


@dataclass(frozen=True)
class Field:
    """`name: annotation`, a field of a class (a NamedTuple's)."""

    name: str
    annotation: str


@dataclass(frozen=True)
class Return:
    """`return value`."""

    value: str


@dataclass(frozen=True)
class Raise:
    """`raise value`."""

    value: str


@dataclass(frozen=True)
class Imported:
    """An import inside a module's code, not its import block (names from one module); `noqa` names the lint rule
    it knowingly breaks."""

    items: tuple[Import, ...]
    noqa: str = ""


@dataclass(frozen=True)
class Comment:
    """`# text`: why the next statements are as they are."""

    text: str


@dataclass(frozen=True)
class Docstring:
    """The docstring of the function, class or module it opens, wrapped where it is printed."""

    text: str


@dataclass(frozen=True)
class Pass:
    """`pass`: a body with nothing else to do."""


@dataclass(frozen=True)
class Given:
    """Lines a rule's snippet gives, as the rule file has them (a body's statements)."""

    lines: tuple[str, ...]


@dataclass(frozen=True)
class If:
    """`if test:` and its body; with `orelse`, `else:` and that."""

    test: str
    body: tuple[Statement, ...]
    orelse: tuple[Statement, ...] = ()


@dataclass(frozen=True)
class Def:
    """A function: decorators, signature, body."""

    name: str
    params: tuple[str, ...]
    body: tuple[Statement, ...]
    decorators: tuple[str, ...] = ()
    returns: str = ""  # the return annotation, if any


@dataclass(frozen=True)
class Class:
    """A class: its bases and its body (a docstring, attributes, methods)."""

    name: str
    bases: tuple[str, ...]
    body: tuple[Statement, ...]


Statement = Assign | Expr | Field | Return | Raise | Imported | Comment | Docstring | Pass | Given | If | Def | Class


@dataclass(frozen=True)
class Block:
    """Straight-line code: assignments, then the values it returns.

    `reads` are the names it reads that it does not assign: what a method
    running it must have at hand (saved, unpacked, passed).
    """

    lines: tuple[Assign | Expr | If, ...]
    results: tuple[Value, ...]
    reads: frozenset[str] = frozenset()

    @property
    def result(self) -> str:
        return ", ".join(r.text for r in self.results)

    @property
    def statements(self) -> tuple[Statement, ...]:
        """The block as a body's statements: its lines, then the return of its results."""
        return (*self.lines, Return(self.result))


def either(test: str, then: Sequence[Statement], otherwise: Sequence[Statement]) -> tuple[Statement, ...]:
    """`then` where `test` holds, else `otherwise`: the statements they share written once, around what differs.

    Both are complete bodies (each ends in its return).  What they share at
    the start runs before the test, so the test must read none of it: its
    names are the method's parameters.  One assignment that differs in its
    value alone is a conditional expression where that fits a line; `then`'s
    value must bind tighter than one (an in-place chain, a call does).
    """
    then, otherwise = tuple(then), tuple(otherwise)
    start = 0
    while start < min(len(then), len(otherwise)) - 1 and then[start] == otherwise[start]:
        start += 1
    end = 0
    while end < min(len(then), len(otherwise)) - start and then[-1 - end] == otherwise[-1 - end]:
        end += 1
    one, other = then[start : len(then) - end], otherwise[start : len(otherwise) - end]
    apart = (If(test, then), *otherwise)
    if not one or not other:
        return apart
    shared, after = then[:start], then[len(then) - end :]
    if not after:  # each body returns on its own, after what they share
        return (*shared, If(test, one), *other)
    if len(one) == len(other) == 1 and isinstance(one[0], Assign) and isinstance(other[0], Assign):
        a, b = one[0], other[0]
        chosen = f"{a.code} if {test} else {b.code}"
        if (a.target, a.also) == (b.target, b.also) and fits_a_line(chosen):
            return (*shared, Assign(a.target, chosen, a.also), *after)
    merged = (*shared, If(test, one, other), *after)
    # A shared part too short to pay for the `else:` is better written twice.
    return merged if _statement_count(merged) < _statement_count(apart) else apart


def _statement_count(statements: Iterable[Statement]) -> int:
    """Statements, counting those inside an `if` and its `else:` line: the lines of a body in short statements."""
    return sum(
        1 + _statement_count(s.body) + (1 + _statement_count(s.orelse) if s.orelse else 0) if isinstance(s, If) else 1
        for s in statements
    )


def is_short(text: str) -> bool:
    """Short enough to return inline, where a longer value among several is named first."""
    return len(text) <= 60


def fits_a_line(text: str) -> bool:
    """Whether an assignment of `text` fits a line of a generated method's body (100 columns, 12 to 16 in).

    What does not is better two statements: ruff lays out a long
    expression in parentheses, a chain of calls one call per line.
    """
    return len(text) <= 80


_INDENT = "    "


def printed(statements: Iterable[Statement], indent: int = 0) -> str:
    """The source of `statements` at `indent` levels: the one place generated statements are written.

    Definitions are set apart by blank lines as PEP 8 has it (two at module
    level, one in a class); `ruff format` lays out the lines themselves.
    """
    return "\n".join(_lines(tuple(statements), indent))


def _lines(statements: tuple[Statement, ...], indent: int, *, in_class: bool = False) -> Iterator[str]:
    apart = 1 if in_class else 0 if indent else 2  # blank lines around a definition
    for k, statement in enumerate(statements):
        if k and (isinstance(statement, Def | Class) or isinstance(statements[k - 1], Def | Class)):
            yield from [""] * apart
        elif k == 1 and in_class and isinstance(statements[0], Docstring):
            yield ""  # a class's docstring stands apart from its fields (as ruff keeps it)
        yield from _statement_lines(statement, indent)


def _statement_lines(statement: Statement, indent: int) -> Iterator[str]:
    pad = _INDENT * indent
    match statement:
        case Assign() | Expr():
            yield pad + statement.line
        case Field(name, annotation):
            yield f"{pad}{name}: {annotation}"
        case Return(value):
            yield f"{pad}return {value}".rstrip()
        case Raise(value):
            yield f"{pad}raise {value}"
        case Imported(items, noqa):
            (text,) = import_statements(items)
            yield f"{pad}{text}" + (f"  # noqa: {noqa}" if noqa else "")
        case Comment(text):
            yield f"{pad}# {text}"
        case Docstring(text):
            yield pad + docstring(text, len(pad))
        case Pass():
            yield f"{pad}pass"
        case Given(lines):
            yield from (pad + line if line else "" for line in lines)
        case If(test, body, orelse):
            yield f"{pad}if {test}:"
            yield from _lines(body, indent + 1)
            if orelse:
                yield f"{pad}else:"
                yield from _lines(orelse, indent + 1)
        case Def(name, params, body, decorators, returns):
            yield from (f"{pad}@{d}" for d in decorators)
            arrow = f" -> {returns}" if returns else ""
            yield f"{pad}def {name}({', '.join(params)}){arrow}:"
            yield from _lines(body, indent + 1)
        case Class(name, bases, body):
            yield f"{pad}class {name}({', '.join(bases)}):"
            yield from _lines(body, indent + 1, in_class=True)


#: The width generated docstrings are wrapped to, as ruff formats the code.
DOC_WIDTH = 100


def docstring(text: str, indent: int) -> str:
    """A docstring literal for `text` at `indent`, that no rule text can break out of.

    Paragraphs (separated by blank lines) are wrapped; a line that starts
    with spaces keeps its break and indent, its continuation indented further.
    """
    text = text.strip().replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
    if not text:
        return ""
    if text.endswith('"'):
        text = text[:-1] + '\\"'
    width = DOC_WIDTH - indent - 6
    lines: list[str] = []
    for paragraph in text.split("\n\n"):
        if lines:
            lines.append("")
        prose: list[str] = []
        for line in [*paragraph.splitlines(), ""]:
            if line.startswith(" ") or not line:
                lines += textwrap.wrap(" ".join(prose), width, break_long_words=False, break_on_hyphens=False)
                prose = []
            if line.startswith(" "):
                lead = " " * (len(line) - len(line.lstrip()))
                lines += textwrap.wrap(
                    line.strip(),
                    width,
                    initial_indent=lead,
                    subsequent_indent=lead + "    ",
                    break_long_words=False,
                    break_on_hyphens=False,
                )
            elif line:
                prose.append(line)
    if len(lines) == 1:
        return f'"""{lines[0]}"""'
    pad = " " * indent
    body = "\n".join(pad + line if line else "" for line in lines[1:])
    return f'"""{lines[0]}\n{body}\n{pad}"""'
