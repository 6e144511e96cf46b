"""What the two snippet planners share: the bodies as private functions, and the calls that glue them."""

from __future__ import annotations

from collections.abc import Sequence

from rulegen.plan.emit import Emitter
from rulegen.plan.model import Function, Result
from rulegen.printers import print_jax, print_torch
from rulegen.snippet import Code, SnippetDerivation

_BODY_NAMES = {"forward": "_forward", "jvp": "_jvp", "vjp": "_vjp"}


_XP_IMPORT = {"jax": "import jax.numpy as xp", "torch": "import array_api_compat.torch as xp"}


_MODULE_IMPORTS = {
    "np": "import numpy as np",
    "math": "import math",
    "scipy": "import scipy",
    "jax": "import jax",
    "jnp": "import jax.numpy as jnp",
    "lax": "from jax import lax",
    "torch": "import torch",
}


def _body_name(role: str) -> str:
    return _BODY_NAMES.get(role) or "_" + role.replace(" ", "_")


def body_call(code: Code) -> str:
    return f"{_body_name(code.role)}({', '.join(code.params)})"


def tuple_text(names: Sequence[str]) -> str:
    """`a` for one name, `a, b` for several: unpacking targets or a returned tuple."""
    return ", ".join(names)


def packed(names: Sequence[str]) -> str:
    """`a` for one name, `(a, b)` for several: a value inside a larger expression."""
    return names[0] if len(names) == 1 else f"({', '.join(names)})"


def tuple_literal(names: Sequence[str]) -> str:
    return f"({names[0]},)" if len(names) == 1 else f"({', '.join(names)})"


def str_tuple_literal(names: Sequence[str]) -> str:
    """A tuple literal of the names; no trailing comma that would keep the formatter from joining it."""
    if len(names) == 1:
        return f"({names[0]!r},)"
    return "(" + ", ".join(repr(n) for n in names) + ")"


def body_function(code: Code, backend: str, imports: set[str], statics: Sequence[str] = ()) -> Function:
    if code.kind == "sympy":
        printer = print_jax if backend == "jax" else print_torch
        emit = Emitter(printer, code.params, scalars=() if backend == "jax" else statics)
        block = emit.block([], [Result(r, e) for r, e in zip(code.results, code.exprs, strict=True)])
        imports |= emit.imports
        lines = [a.line for a in block.lines] + [f"return {block.result}"]
    else:
        lines = code.text.splitlines()
        for module in code.modules:
            imports.add(_XP_IMPORT[backend] if module == "xp" else _MODULE_IMPORTS[module])
    return Function(_body_name(code.role), code.params, tuple(lines))


class SnippetPlanner:
    """The shared facts about one snippet rule that both backends' plans use."""

    def __init__(self, d: SnippetDerivation, backend: str) -> None:
        self.d = d
        self.backend = backend
        rule = d.rule
        self.rule = rule
        self.arrays = tuple(i.name for i in rule.inputs if not i.static)
        self.statics = tuple(i.name for i in rule.inputs if i.static)
        self.inputs = tuple(i.name for i in rule.inputs)
        self.outputs = tuple(o.name for o in rule.outputs)
        self.diff_inputs = tuple(i.name for i in d.diff_inputs)
        self.diff_outputs = tuple(o.name for o in rule.outputs if o.differentiable)
        self.returned = d.returned_residuals
        self.imports: set[str] = set()
        codes = [d.forward, d.jvp, d.vjp, *(c for _, c in d.residuals)]
        self.bodies = tuple(
            body_function(c[backend], backend, self.imports, self.statics) for c in codes if c and backend in c
        )
        calls = {name for c in codes if c and backend in c for name in c[backend].calls}
        self.requires = tuple(sorted({m for c in codes if c and backend in c for m in c[backend].imports}))
        self.called = tuple(sorted(calls - {rule.name}))
        self.broadcastable = len(self.arrays) > 1

    def code(self, role: str) -> Code | None:
        d = self.d
        found = {"forward": d.forward, "jvp": d.jvp, "vjp": d.vjp}.get(role)
        if role.startswith("residual "):
            found = dict(d.residuals)[role.split(" ", 1)[1]]
        return found[self.backend] if found and self.backend in found else None

    def given(self, role: str) -> Code:
        """The body `role`, which the route guarantees the rule gives."""
        code = self.code(role)
        if code is None:
            raise AssertionError(f"{self.rule.name}: its route needs a {role} body for {self.backend}")
        return code

    def forward_targets(self) -> str:
        return tuple_text([*self.outputs, *(f"_{r}" for r in self.returned)])

    def residual_lines(self, needed: set[str], *, forward_call: bool) -> list[str]:
        """Compute the residuals a body reads: returned ones by calling the forward body, the rest by theirs."""
        lines = []
        if forward_call and needed & set(self.returned):
            targets = ["_" if n in self.outputs else n for n in (*self.outputs, *self.returned)]
            targets = [t if t in needed or t == "_" else "_" for t in targets]
            lines.append(f"{tuple_text(targets)} = {body_call(self.given('forward'))}")
        for name, _ in self.d.residuals:
            if name in needed:
                lines.append(f"{name} = {body_call(self.given(f'residual {name}'))}")
        return lines

    def reads(self, *roles: str) -> set[str]:
        names: set[str] = set()
        for role in roles:
            code = self.code(role)
            if code is not None:
                names |= set(code.params)
        # A residual's body reads names too.
        for name, _ in self.d.residuals:
            if name in names:
                names |= set(self.given(f"residual {name}").params)
        return names
