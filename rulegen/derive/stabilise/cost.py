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

Calibrated once, with a timing script on the 2-core CPU machine the
benchmarks run on (torch 2.13 eager, `torch.set_num_threads(1)`; jax 0.10 under
`jax.jit`; 1e5 float32 elements, the least of five repeats): in torch an add
takes 23.8 us, neg 15.5, sqrt 72, rsqrt 36, pow(x, 1.5) 806, exp 145, log 169,
log1p 216, expm1 289, tanh 443, sigmoid 100, softplus 374, erf 156, erfc 319,
erfcx 3597, gammaln 1321, digamma 2944, sin 206, atan 399, xlogy 562, ndtr 227,
log_ndtr 2445; under jit, per call of 8 fused, exp 25.7 us, log 59.8, log1p 103,
expm1 97, tanh 68, sigmoid 61, softplus 305, erf 43, erfc 122, gammaln 932,
digamma 1838, sin 421, atan 913, ndtr 149, log_ndtr 442, sqrt 21.6, x**1.5 826,
where 2.5, add and mul below the noise.  Names left out are weighed like their
nearest measured kin (cos as sin, asinh as log).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from types import MappingProxyType

import sympy as sp

from rulegen.derive.functions import BY_NAME

#: The backends a form is costed for, in the order reports print them.
BACKENDS = ("torch", "jax")

#: Per backend: the weight of each kind of operation. `arithmetic` is a binary +, -, *, /, or a comparison;
#: `unary` a negation, reciprocal, square or absolute value; `sqrt`/`rsqrt` a half power; `pow` any other
#: power; `select` one `where`; each function by its registry name (the sympy class's name); `function` a
#: registered function not listed, `composite` one torch computes in several kernels (the registry's
#: `one_torch_kernel` is false).
WEIGHTS: Mapping[str, Mapping[str, float]] = MappingProxyType(
    {
        "torch": MappingProxyType(
            {
                "arithmetic": 1.0,
                "unary": 1.0,
                "sqrt": 1.2,
                "rsqrt": 1.1,
                "pow": 4.3,
                "select": 2.0,  # a comparison's kernel and the where's
                "exp": 1.5,
                "log": 1.6,
                "log1p": 1.8,
                "expm1": 2.1,
                "tanh": 2.8,
                "sigmoid": 1.3,
                "softplus": 2.5,
                "logaddexp": 2.5,
                "erf": 1.6,
                "erfc": 2.2,
                "erfcx": 16.0,
                "loggamma": 6.5,
                "digamma": 13.3,
                "polygamma": 13.3,
                "sin": 1.8,
                "cos": 1.8,
                "tan": 2.0,
                "atan": 2.6,
                "atan2": 2.8,
                "sinh": 2.0,
                "cosh": 2.0,
                "asinh": 2.0,
                "acosh": 2.0,
                "atanh": 2.0,
                "xlogy": 3.3,
                "xlog1py": 3.3,
                "ndtr": 1.9,
                "log_ndtr": 11.3,
                "function": 2.0,
                "composite": 4.0,
            }
        ),
        "jax": MappingProxyType(
            {
                "arithmetic": 0.05,
                "unary": 0.05,
                "sqrt": 0.85,
                "rsqrt": 0.85,
                "pow": 32.0,
                "select": 0.1,
                "exp": 1.0,
                "log": 2.3,
                "log1p": 4.0,
                "expm1": 3.8,
                "tanh": 2.65,
                "sigmoid": 2.4,
                "softplus": 11.8,
                "logaddexp": 11.8,
                "erf": 1.7,
                "erfc": 4.7,
                "erfcx": 6.0,
                "loggamma": 36.0,
                "digamma": 71.0,
                "polygamma": 71.0,
                "sin": 16.4,
                "cos": 16.4,
                "tan": 17.0,
                "atan": 35.5,
                "atan2": 36.0,
                "sinh": 2.5,
                "cosh": 2.5,
                "asinh": 5.0,
                "acosh": 5.0,
                "atanh": 5.0,
                "xlogy": 2.4,
                "xlog1py": 4.1,
                "ndtr": 5.8,
                "log_ndtr": 17.2,
                "function": 10.0,
                "composite": 10.0,
            }
        ),
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
