"""Printing sympy expressions into straight-line code for one backend, sharing subexpressions."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence, Set
from typing import TypeVar

import sympy as sp

from rulegen.computation.sharing import shared_subexpressions, summed_in_order
from rulegen.derive import functions as fn
from rulegen.plan.code import Assign, Block, If, Import, Value, fits_a_line, is_short
from rulegen.plan.inplace import InPlaceWriter
from rulegen.plan.model import Result

K = TypeVar("K")

# print_torch and its kind: an expression, and `scalars=`, the names of Python numbers in it.
Printer = Callable[..., tuple[Value, frozenset[Import]]]


#: The allocations an in-place twin of a body must spare to be written.
MIN_SAVED_ALLOCATIONS = 2


class Emitter:
    """Prints expressions for one backend, sharing subexpressions.

    `forms` rewrites each expression into the backend's own fused forms
    first.  `scalars` name the static inputs, Python numbers, which the
    printer is told of: `math.sqrt(beta)`, where `torch.sqrt(beta)` raises.
    `spelled` prints names so (a static as `ctx.beta` in a Function's method).
    """

    def __init__(
        self,
        printer: Printer,
        taken: Iterable[str],
        forms: Callable[[sp.Expr], sp.Expr] = lambda e: e,
        scalars: Iterable[str] = (),
        spelled: Mapping[str, str] | None = None,
    ) -> None:
        self.printer = printer
        self.forms = forms
        self.scalars = frozenset(scalars)
        self.spelled = dict(spelled or {})
        self.imports: set[Import] = set()
        self.taken = set(taken)

    def value(
        self, expr: sp.Expr, scalars: frozenset[str] = frozenset(), renamed: Mapping[str, str] | None = None
    ) -> Value:
        """`expr` printed; `scalars` name this block's temporaries that hold Python numbers too, `renamed` the
        temporaries printed under a let's name."""
        value, imports = self.printer(expr, scalars=self.scalars | scalars, renamed={**self.spelled, **(renamed or {})})
        self.imports |= imports
        return value

    def code(
        self, expr: sp.Expr, scalars: frozenset[str] = frozenset(), renamed: Mapping[str, str] | None = None
    ) -> str:
        """The text of `value`."""
        return self.value(expr, scalars, renamed).text

    def _scalar_temporaries(self, assigned: Iterable[tuple[sp.Symbol, sp.Expr]]) -> frozenset[str]:
        """The names `assigned` of static inputs and numbers alone: Python numbers, as the static inputs are.

        sp.cse shares `beta` of `x / beta` as `t0 = beta` (and `sqrt(2)` as `t0 =
        math.sqrt(2)`); `sqrt(beta - t0)` read as a function of a tensor t0
        would print `torch.sqrt` of a float, which raises.  An `in_float` is
        a tensor even of numbers alone.
        """
        found: set[str] = set()
        for sym, value in assigned:
            names = {s.name for s in value.free_symbols}
            if not value.has(fn.in_float) and names <= self.scalars | found:
                found.add(str(sym))
        return frozenset(found)

    def block(
        self,
        lets: Sequence[tuple[str, sp.Expr]],
        results: Sequence[Result],
        forms: Callable[[sp.Expr], sp.Expr] | None = None,
        *,
        named_by_lets: bool = False,
        returned_lets: Sequence[str] = (),
    ) -> Block:
        """Assign each `let` and compute each result, shared parts once.

        A lone result, or a short one, is returned inline; a long one among
        several is named first, as a person would write it.  `forms`, if given, replaces the emitter's own.
        `named_by_lets`: a shared subexpression that a let merely copies
        (`t0 = jnp.tanh(x)`, `out = t0`) takes the let's name instead.
        `returned_lets`: lets the block returns before its results, each as
        computed where nothing else reads it (`return x**3, ...`), else by name.
        """
        computed = [r for r in results if r.expr is not None]
        forms = forms or self.forms
        # Each sum pinned in its order before the forms and the sharing, as the derive stage measured it.
        exprs = [forms(summed_in_order(e)) for e in (*(e for _, e in lets), *(r.expr for r in computed))]
        replacements, reduced = shared_subexpressions(exprs, temp_symbols(self.taken))
        renamed = _named_by_lets(replacements, reduced, [name for name, _ in lets]) if named_by_lets else {}
        scalars = self._scalar_temporaries([*replacements, *zip((n for n, _ in lets), reduced, strict=False)])
        code = functools.partial(self.code, scalars=scalars, renamed=renamed)
        printed = functools.partial(self.value, scalars=scalars, renamed=renamed)
        lines: list[Assign | If] = [Assign(renamed.get(str(sym), str(sym)), code(e)) for sym, e in replacements]
        inlined = _read_once(returned_lets, lets, replacements, reduced, renamed)
        lines += [
            Assign(name, code(e))
            for (name, _), e in zip(lets, reduced, strict=False)
            if renamed.get(str(e)) != name and name not in inlined
        ]
        let_end = len(lines)
        let_values = {name: e for (name, _), e in zip(lets, reduced, strict=False)}
        texts = dict(zip((r.name for r in computed), (printed(e) for e in reduced[len(lets) :]), strict=True))
        returned: list[Value] = []
        guarded: list[If] = []  # each binds its result's name, which starts as None
        for r in results:
            self.imports |= r.imports
            if r.expr is None:
                returned.append(Value(r.code))
                continue
            text = texts[r.name]
            if r.guard:
                # Computed only where wanted: nothing of it but what it shares runs otherwise (as the
                # PyTorch docs write `if ctx.needs_input_grad[0]: grad_input = ...`).
                guarded.append(If(r.guard, (Assign(r.name, r.wrap.apply(text).text),)))
                returned.append(Value(r.name))
                continue
            if len(results) > 1 and not is_short(text.text):
                lines.append(Assign(r.name, text.text))
                text = Value(r.name)
            returned.append(r.wrap.apply(text))
        if guarded:
            first, *rest = (r.name for r in computed if r.guard)
            lines += [Assign(first, "None", tuple(rest)), *guarded]
        lets_returned = [printed(let_values[n]) if n in inlined else Value(n) for n in returned_lets]
        if inlined and not fits_a_line(", ".join(v.text for v in (*lets_returned, *returned))):
            # Returned as computed only where the return fits a line: ruff would wrap it otherwise.
            lines[let_end:let_end] = [Assign(n, code(let_values[n])) for n in returned_lets if n in inlined]
            lets_returned = [Value(n) for n in returned_lets]
        return Block(tuple(lines), (*lets_returned, *returned), _reads(exprs, results) - {name for name, _ in lets})

    def in_place_block(
        self, results: Sequence[Result], tensors: set[str], *, min_spared: int = MIN_SAVED_ALLOCATIONS
    ) -> Block | None:
        """`block` of `results` as torch code that updates the buffers it allocates (see rulegen.plan.inplace).

        None where it would spare fewer than `min_spared` of the out-of-place code's allocations: a twin that
        spares one costs its `plain()` guard (3.8 us against 2.6 us for gelu's whole forward at 16 elements)
        and a second body to read.
        """
        computed = [r for r in results if r.expr is not None]
        names = temp_symbols(self.taken)
        replacements, reduced = shared_subexpressions([self.forms(summed_in_order(r.expr)) for r in computed], names)
        printed = functools.partial(self.value, scalars=self._scalar_temporaries(replacements))
        writer = InPlaceWriter(printed, tensors, names)
        for sym, value in replacements:
            writer.assign(str(sym), value)
        texts = {r.name: writer.value(e) for r, e in zip(computed, reduced, strict=True)}
        if writer.spared < min_spared:
            return None
        for r in results:
            self.imports |= r.imports
        steps = list(writer.steps)
        returned = _returned(results, texts)
        last = steps[-1] if steps else None
        # The buffer the last step makes or updates, which an in-place update returns.
        built = last.target if isinstance(last, Assign) else writer.updated
        if last is not None and built and [t.text for t in texts.values()].count(built) == 1:
            # A returned value that nothing else reads: returned as the last step builds it, where that fits a line.
            made = writer.made(last)
            folded = _returned(results, {name: made if text.text == built else text for name, text in texts.items()})
            if fits_a_line(", ".join(v.text for v in folded)):
                steps.pop()
                returned = folded
        return Block(tuple(steps), tuple(returned), _reads([r.expr for r in computed], results))


def _read_once(
    returned: Sequence[str],
    lets: Sequence[tuple[str, sp.Expr]],
    replacements: Sequence[tuple[sp.Symbol, sp.Expr]],
    reduced: Sequence[sp.Expr],
    renamed: Mapping[str, str],
) -> frozenset[str]:
    """The `returned` lets that no other let, shared subexpression or result reads, nor a shared one is named by."""
    names = [name for name, _ in lets]
    found = set()
    for name in returned:
        if name not in names or name in renamed.values():
            continue
        own = names.index(name)
        others = [v for _, v in replacements] + [e for k, e in enumerate(reduced) if k != own]
        if not any(name in {s.name for s in e.free_symbols} for e in others):
            found.add(name)
    return frozenset(found)


def _returned(results: Sequence[Result], texts: Mapping[str, Value]) -> tuple[Value, ...]:
    """What a block returns: each computed result's value in its wrap, fixed code as it is."""
    return tuple(Value(r.code) if r.expr is None else r.wrap.apply(texts[r.name]) for r in results)


def _reads(exprs: Iterable[sp.Expr], results: Iterable[Result]) -> frozenset[str]:
    """The names code computing `exprs` and `results` reads: their symbols, and what fixed code reads."""
    symbols = {s.name for e in exprs for s in e.free_symbols}
    return frozenset(symbols.union(*(r.fixed_reads for r in results)))


def _named_by_lets(
    replacements: list[tuple[sp.Symbol, sp.Expr]], reduced: list[sp.Expr], lets: Sequence[str]
) -> dict[str, str]:
    """The shared subexpressions that the let of the same position merely is, each by the let's name."""
    temporaries = {str(sym) for sym, _ in replacements}
    renamed: dict[str, str] = {}
    for name, value in zip(lets, reduced, strict=False):
        if str(value) in temporaries and str(value) not in renamed:
            renamed[str(value)] = name
    return renamed


def temp_symbols(taken: set[str]) -> Iterator[sp.Symbol]:
    prefix = "t"
    while any(n.startswith(prefix) and n[len(prefix) :].isdigit() for n in taken):
        prefix = "_" + prefix
    return sp.numbered_symbols(prefix)


def joint_calls(
    partials: Mapping[K, sp.Expr], taken: Set[str], emit: Emitter, own: Mapping[str, str]
) -> tuple[tuple[Assign, ...], dict[K, sp.Expr], frozenset[str]]:
    """The runtime's calls computing `partials`' calls of registry functions of one pair of arguments together,
    on one scaling (`fn.JOINT_RUNTIME`: `plane_slopes(x, y)` for hypot_slope(x, y), atan2_slope(y, x), ...), each
    the one of fewest outputs that has them; the partials reading their outputs by name; the names they read."""
    members = {f for functions in fn.JOINT_RUNTIME.values() for f in functions}
    groups: dict[tuple[sp.Expr, ...], set[sp.Expr]] = {}
    for expr in partials.values():
        for call in expr.atoms(sp.Function):
            if type(call).__name__ in members and len(call.args) == 2 and call.args[0] != call.args[1]:
                groups.setdefault(tuple(sorted(call.args, key=sp.default_sort_key)), set()).add(call)
    lines: list[Assign] = []
    named: dict[sp.Expr, sp.Expr] = {}
    reads: set[str] = set()
    used = set(taken)
    for pair, calls in sorted(groups.items(), key=lambda g: sp.default_sort_key(g[0])):
        needed = {type(c).__name__ for c in calls}
        joint = min(
            (j for j, fs in fn.JOINT_RUNTIME.items() if needed <= set(fs)), key=lambda j: len(fn.JOINT_RUNTIME[j])
        )
        # Each function of the joint one has a call here (the fewest outputs that have them): its class from it.
        classes = {type(c).__name__: type(c) for c in calls}
        outputs = [classes[f](*args) for f in fn.JOINT_RUNTIME[joint] for args in (pair, pair[::-1])]
        targets = []
        for output in outputs:
            if output not in calls:
                targets.append("_")
                continue
            name = f"s{len(named)}"
            while name in used:
                name = "_" + name
            used.add(name)
            named[output] = sp.Symbol(name, real=True)
            targets.append(name)
        emit.imports.add(Import("._special", joint))
        reads |= {str(s) for a in pair for s in a.free_symbols}
        lines.append(Assign(", ".join(targets), f"{own[joint]}({', '.join(emit.code(a) for a in pair)})"))
    return tuple(lines), {k: e.xreplace(named) for k, e in partials.items()}, frozenset(reads)
