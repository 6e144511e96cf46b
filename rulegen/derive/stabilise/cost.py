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

A subexpression the forward computes (`reused`: its function calls and what holds one) costs nothing: the
backward reads it as autodiff reads what the forward saved (`exp(-x**2)` in `-2 x exp(-x**2)`, the forward's
value), where a form that computes the same value of another argument (the input clamped) computes it again.

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
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import NamedTuple

import sympy as sp

from rulegen.derive.functions import BY_NAME, isfinite, power_product, where_finite

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
    if isinstance(node, sp.Piecewise | where_finite):
        return _selects(node, weights)
    if isinstance(node, (sp.And, sp.Or, sp.Not, sp.core.relational.Relational, isfinite)):
        return max(len(node.args) - 1, 1) * weights["arithmetic"]
    if isinstance(node, power_product):
        return _power_product(node, weights)
    if isinstance(node, sp.Function):
        return _call(type(node).__name__, weights)
    return 0.0


def _selects(node: sp.Piecewise | where_finite, weights: Mapping[str, float]) -> float:
    """What a `where` costs: a select per branch after the first; `where_finite`'s one select and its test."""
    if isinstance(node, where_finite):
        return weights["select"] + weights["arithmetic"]
    return (len(node.args) - 1) * weights["select"]


def _power_product(node: power_product, weights: Mapping[str, float]) -> float:
    """What the runtime's `power_product` computes (`_scaling.power_product`): per base its exponent (a log2, a
    floor, a select), two powers of two and the products, and two powers of two more at the end."""
    bases = node.args[0::2]
    per_base = weights["log"] + 2 * weights["pow"] + 2 * weights["select"] + 8 * weights["arithmetic"]
    powers = sum(_power(k, weights) for k in node.args[1::2] if abs(k) != 1)
    return len(bases) * per_base + powers + 2 * weights["pow"] + 5 * weights["arithmetic"]


def _call(name: str, weights: Mapping[str, float]) -> float:
    """What a call of the function named `name` costs."""
    if name in weights:
        return weights[name]
    known = BY_NAME.get(name)
    return weights["function" if known is None or known.one_torch_kernel else "composite"]


class Free(NamedTuple):
    """What a search's forms read of a forward for nothing (`reused`): `forms` of the forward the backends
    compute, `written` of the forward as written, which autodiff of it (a policy's reference) reads; `roots`
    the bases of the written forward's square roots (`roots`), whose powers autodiff multiplies out of them."""

    forms: frozenset[sp.Expr] = frozenset()
    written: frozenset[sp.Expr] = frozenset()
    roots: frozenset[sp.Expr] = frozenset()


#: Nothing read for nothing: `best`'s searches, and a form no forward computes a part of.
NOTHING_FREE = Free()


def reused(forward: Sequence[sp.Expr]) -> frozenset[sp.Expr]:
    """What the backward may read of what the `forward` forms compute: each subexpression in the inputs that calls
    a function (`exp(-x**2)`, `x*sigmoid(u)` and `sigmoid(u)`, not `x**2`, which is as cheap to compute again as
    to keep)."""
    return frozenset(
        node
        for expr in forward
        for node in sp.preorder_traversal(expr)
        if isinstance(node, sp.Expr) and node.free_symbols and not node.is_Atom and node.has(sp.Function)
    )


def roots(forward: Sequence[sp.Expr]) -> frozenset[sp.Expr]:
    """The bases whose square root, or its reciprocal, the `forward` computes (`x**2 + 1` of `x/sqrt(x**2 + 1)`)."""
    return frozenset(
        node.base
        for expr in forward
        for node in sp.preorder_traversal(expr)
        if isinstance(node, sp.Pow) and abs(node.exp) == sp.S.Half and node.base.free_symbols
    )


def _multiplied_out_of_a_root(node: sp.Basic, roots: frozenset[sp.Expr]) -> tuple[sp.Expr, sp.Expr] | None:
    """(the root, the integer power beside it) where `node` is a power of one of `roots`' bases by an odd
    multiple of 1/2 other than +-1/2: u**(-3/2) as rsqrt(u) times 1/u."""
    if not (isinstance(node, sp.Pow) and node.base in roots):
        return None
    twice = 2 * node.exp
    if not (twice.is_Integer and twice % 2 == 1) or abs(node.exp) == sp.S.Half:
        return None
    half = sp.S.Half if node.exp > 0 else -sp.S.Half
    return sp.Pow(node.base, half, evaluate=False), node.exp - half


@functools.lru_cache(maxsize=4096)
def cost(
    expr: sp.Basic, backend: str, free: frozenset[sp.Expr] = frozenset(), roots: frozenset[sp.Expr] = frozenset()
) -> float:
    """What computing `expr` costs in `backend` ("torch" eager or "jax" under jit), in `WEIGHTS`' units, the
    subexpressions in `free` (`reused`) for nothing.

    `roots` prices `expr` as autodiff of a forward that computes the square roots of those bases does
    (`roots`): sympy's derivative of 1/sqrt(u) is u**(-3/2), which the printers write as one power (an
    exponential of a logarithm under XLA, 60 times a square root), where autodiff divides the root it has by u.
    """
    weights = WEIGHTS[backend]
    seen: set[sp.Basic] = set()
    total = 0.0
    stack = [expr]
    while stack:
        node = stack.pop()
        if node in seen or node.is_Atom or not node.free_symbols or node in free:
            continue
        seen.add(node)
        split = _multiplied_out_of_a_root(node, roots) if roots else None
        if split is not None:
            root, exponent = split
            # A division where the power beside the root is 1/u, a product with that power otherwise.
            total += weights["arithmetic"] + (0.0 if exponent == -1 else _power(exponent, weights))
            stack.append(root)
            continue
        total += _own(node, weights)
        stack.extend(node.args)
    return total


def costs(
    expr: sp.Basic, free: frozenset[sp.Expr] = frozenset(), roots: frozenset[sp.Expr] = frozenset()
) -> tuple[float, ...]:
    """`cost` of `expr` in each of `BACKENDS`."""
    return tuple(cost(expr, b, free, roots) for b in BACKENDS)


def relative(
    expr: sp.Basic,
    reference: sp.Basic,
    free: frozenset[sp.Expr] = frozenset(),
    reference_free: frozenset[sp.Expr] = frozenset(),
    reference_roots: frozenset[sp.Expr] = frozenset(),
) -> float:
    """`expr`'s cost over `reference`'s (`free` and `reference_free` what each reads of its forward,
    `reference_roots` the roots autodiff multiplies powers out of, `cost`), the larger ratio of the backends'
    (1 where both cost nothing)."""
    return max(
        (c / r if r > 0 else (1.0 if c <= 0 else math.inf))
        for c, r in zip(costs(expr, free), costs(reference, reference_free, reference_roots), strict=True)
    )
