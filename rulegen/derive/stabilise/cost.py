"""What a form costs to compute, per backend: a model of eager torch's kernels and of XLA's fused code, as data.

`cost(expr, backend)` walks the expression once per distinct subexpression
(the planner's `cse` computes a repeated one once) and adds up the weights of
`WEIGHTS[backend]`:

- `torch` (eager): every elementwise operation is a kernel of its own, one pass
  over memory; a function the registry knows as one torch kernel (softplus,
  log1p, expm1, erfcx, xlogy, sigmoid, ...) is one kernel, whatever it computes
  inside.  A kernel costs 1, and a transcendental kernel a tenth of its
  measured time over an add's on top.
- `jax` (under `jax.jit`): XLA fuses the elementwise operations into one loop,
  so arithmetic is nearly free and the transcendental calls dominate; a unit
  is one `exp`.

A `Piecewise` (a `where`) costs its branches, its conditions (one comparison
each) and a select per branch after the first.  A function of Python numbers
alone costs nothing (the printers compute it once, as a number).

The weights are data beside the function registry
(`rulegen/derive/cost_weights.json`), written by `python -m
benchmarks.cost_weights --write`, which times each function as the
generated code calls it, interleaved, on the CPU machine the benchmarks run
on, and records there what it measured (times, load average, versions).
Arithmetic, a `where` and the fallbacks are set by hand.  Names left out are
weighed like their nearest measured kin (`function`, `composite`).
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType

import sympy as sp

from rulegen.derive.functions import BY_NAME

#: The backends a form is costed for, in the order reports print them.
BACKENDS = ("torch", "jax")

#: Per backend: the weight of each kind of operation. `arithmetic` is a binary +, -, *, /, or a comparison;
#: `unary` a negation, reciprocal, square or absolute value; `sqrt`/`rsqrt` a half power; `pow` any other
#: power; `select` one `where`; each function by its registry name (the sympy class's name); `function` a
#: registered function not listed, `composite` one torch computes in several kernels (the registry's
#: `one_torch_kernel` is false).  Read from `WEIGHTS_FILE`.
WEIGHTS_FILE = Path(__file__).resolve().parent.parent / "cost_weights.json"
WEIGHTS: Mapping[str, Mapping[str, float]] = MappingProxyType(
    {
        backend: MappingProxyType({name: float(w) for name, w in weights.items()})
        for backend, weights in json.loads(WEIGHTS_FILE.read_text())["weights"].items()
    }
)


def _power(exponent: sp.Expr, weights: Mapping[str, float]) -> float:
    """What raising to `exponent` costs as the printers write it (`rulegen.plan.printers`): repeated
    multiplication for small integers, a root for 1/2 and -1/2, and `pow` for any other fraction (x**(3/2)
    prints as one power, which both backends compute as an exponential of a logarithm)."""
    if exponent.is_Integer:
        n = abs(int(exponent))
        if n == 1:
            return weights["unary"]  # a reciprocal
        if n > 64:
            return weights["pow"]
        multiplications = n.bit_length() + bin(n).count("1") - 2
        return multiplications * weights["unary"] + (weights["unary"] if exponent < 0 else 0.0)
    if exponent == sp.S.Half:
        return weights["sqrt"]
    if exponent == -sp.S.Half:
        return weights["rsqrt"]
    return weights["pow"]


def _own(node: sp.Basic, weights: Mapping[str, float]) -> float:
    """What `node` itself costs, its arguments aside."""
    if isinstance(node, sp.Add):
        return (len(node.args) - 1) * weights["arithmetic"]
    if isinstance(node, sp.Mul):
        coefficient, factors = node.as_coeff_mul()
        # A coefficient of -1 is the subtraction an enclosing sum does anyway.
        return (len(factors) - 1 + (coefficient not in (1, -1))) * weights["arithmetic"]
    if isinstance(node, sp.Pow):
        return _power(node.exp, weights)
    if isinstance(node, sp.Piecewise):
        return (len(node.args) - 1) * weights["select"]
    if isinstance(node, (sp.And, sp.Or, sp.Not, sp.core.relational.Relational)):
        return max(len(node.args) - 1, 1) * weights["arithmetic"]
    if isinstance(node, sp.Function):
        return _call(type(node).__name__, weights)
    return 0.0


def _call(name: str, weights: Mapping[str, float]) -> float:
    """What a call of the function named `name` costs."""
    if name in weights:
        return weights[name]
    known = BY_NAME.get(name)
    return weights["function" if known is None or known.one_torch_kernel else "composite"]


@functools.lru_cache(maxsize=4096)
def cost(expr: sp.Basic, backend: str) -> float:
    """What computing `expr` costs in `backend` ("torch" eager or "jax" under jit), in `WEIGHTS`' units."""
    weights = WEIGHTS[backend]
    seen: set[sp.Basic] = set()
    total = 0.0
    stack = [expr]
    while stack:
        node = stack.pop()
        if node in seen or node.is_Atom or not node.free_symbols:
            continue
        seen.add(node)
        total += _own(node, weights)
        stack.extend(node.args)
    return total


def costs(expr: sp.Basic) -> tuple[float, ...]:
    """`cost` of `expr` in each of `BACKENDS`."""
    return tuple(cost(expr, b) for b in BACKENDS)


def relative(expr: sp.Basic, reference: sp.Basic) -> float:
    """`expr`'s cost over `reference`'s, the larger ratio of the backends' (1 where both cost nothing)."""
    return max(
        (c / r if r > 0 else (1.0 if c <= 0 else math.inf)) for c, r in zip(costs(expr), costs(reference), strict=True)
    )
