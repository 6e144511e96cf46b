"""Generated JAX rules under jit against the hand-written rules of the JAX docs and jax.grad of the composite.

    python -m benchmarks.jax_jit [log2 of the element count, default 20] [--quick: 5 rounds]
                                 [--markdown [--table jax_jit|errors]] [--accuracy best|balanced|fast]

float32 on the CPU, value and gradient of the sum of squares (reverse mode)
and `jax.jvp` with a tangent of ones for every input (forward mode),
interleaved rounds; each cell shows the median of the per-round ratios with
their min and max. A second table shows what each costs in accuracy: the
largest relative error, in float32 epsilons, of value and derivative on a
grid over [-100, 100] against float64 references, where the exact result is at least 2**-100 (XLA
flushes subnormal intermediates). softmax and logsumexp work on rows of 1024 (their
hand-written rules are `custom_vjp`s, which have no forward mode: "n/a"). The softplus row is the
generated log1pexp again, against a rule as accurate as it (`jax.nn.softplus`, derivative
`jax.nn.sigmoid`) and autodiff of `jax.nn.softplus`: the docs' rule overflows above x = 88. The
softmax_ad row is the generated softmax again, against autodiff of its forward as written (the maximum
differentiated): the composite's `stop_gradient` on the maximum leaves autodiff the hand-written rule's
cancellation where one output is nearly 1, which the generated rule and this autodiff do not have. The
hand-written gelu computes Phi(x) as `jax.nn.gelu` does, `erfc(-x/sqrt(2))/2`, as accurate as the
generated rule; the gelu row's composite is the rule's forward as written (`1 + erf`, which cancels below
x = -5), the gelu_nn row's is `jax.nn.gelu`. `--markdown` prints one of docs/performance.md's
tables: the timings' medians (`--table jax_jit`, the default) or the errors (`--table errors`, which
times nothing). `--accuracy POLICY` builds rules/ under that accuracy policy into a temporary folder and
measures it in generated/'s place; each row of timings ends with the policy its rule was built under.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import jax.scipy.special as jss
import numpy as np
import scipy.special as sps

from benchmarks import bundled, rule_policies, size_and_quick
from benchmarks.table import Layout, Table, quiet_if, request

#: The bundled rules: generated/, or rules/ built under `--accuracy POLICY`.
gen = bundled("jax")


@jax.custom_jvp
def hand_log1pexp(x):
    return jnp.log(1.0 + jnp.exp(x))


hand_log1pexp.defjvps(lambda t, ans, x: (1.0 - 1.0 / (1.0 + jnp.exp(x))) * t)


# A hand-written rule as accurate as the generated one (issue 28: the docs' rule above overflows at x = 88).
@jax.custom_jvp
def hand_softplus(x):
    return jax.nn.softplus(x)


hand_softplus.defjvps(lambda t, ans, x: jax.nn.sigmoid(x) * t)


@jax.custom_jvp
def hand_tanh(x):
    return jnp.tanh(x)


@hand_tanh.defjvp
def _hand_tanh_jvp(primals, tangents):
    (x,), (x_dot,) = primals, tangents
    out = hand_tanh(x)
    return out, (1 - out * out) * x_dot


@jax.custom_jvp
def hand_tanh_exact(x):
    return jnp.tanh(x)


@hand_tanh_exact.defjvp
def _hand_tanh_exact_jvp(primals, tangents):
    # 1 - tanh(x)**2 without its cancellation (0 past |x| = 19 in float64), as the generated rule computes it.
    (x,), (x_dot,) = primals, tangents
    return hand_tanh_exact(x), 4 * jax.nn.sigmoid(2 * x) * jax.nn.sigmoid(-2 * x) * x_dot


@jax.custom_jvp
def hand_sin_mul(x, y):
    return jnp.sin(x) * y


@hand_sin_mul.defjvp
def _hand_sin_mul_jvp(primals, tangents):
    x, y = primals
    x_dot, y_dot = tangents
    return hand_sin_mul(x, y), jnp.cos(x) * x_dot * y + jnp.sin(x) * y_dot


@jax.custom_jvp
def hand_sin_exp_mul(x, y):
    return jnp.sin(x) * jnp.exp(-x * x) * y


@hand_sin_exp_mul.defjvp
def _hand_sin_exp_mul_jvp(primals, tangents):
    x, y = primals
    x_dot, y_dot = tangents
    s, e = jnp.sin(x), jnp.exp(-x * x)
    return hand_sin_exp_mul(x, y), e * (jnp.cos(x) - 2 * x * s) * y * x_dot + s * e * y_dot


# Written as jax.nn.gelu computes Phi(x): erfc(-x / sqrt(2)) / 2, not (1 + erf(x / sqrt(2))) / 2, whose every
# bit cancels below x = -5 in float32 (the generated gelu is as accurate: a rule of equal accuracy).
@jax.custom_jvp
def hand_gelu(x):
    return x * jss.erfc(-x / jnp.sqrt(2.0)) / 2


@hand_gelu.defjvp
def _hand_gelu_jvp(primals, tangents):
    (x,), (x_dot,) = primals, tangents
    cdf = jss.erfc(-x / jnp.sqrt(2.0)) / 2
    pdf = jnp.exp(-x * x / 2) / jnp.sqrt(2 * jnp.pi)
    return x * cdf, (cdf + x * pdf) * x_dot


@jax.custom_vjp
def hand_softmax(x):
    e = jnp.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _hand_softmax_fwd(x):
    y = hand_softmax(x)
    return y, y


def _hand_softmax_bwd(y, g):
    return (y * (g - (y * g).sum(axis=-1, keepdims=True)),)


hand_softmax.defvjp(_hand_softmax_fwd, _hand_softmax_bwd)


@jax.custom_vjp
def hand_logsumexp(x):
    m = x.max(axis=-1, keepdims=True)
    return m[..., 0] + jnp.log(jnp.exp(x - m).sum(axis=-1))


def _hand_logsumexp_fwd(x):
    y = hand_logsumexp(x)
    return y, (x, y)


def _hand_logsumexp_bwd(saved, g):
    x, y = saved
    return (g[..., None] * jnp.exp(x - y[..., None]),)


hand_logsumexp.defvjp(_hand_logsumexp_fwd, _hand_logsumexp_bwd)


def composite_softmax(x):
    e = jnp.exp(x - jax.lax.stop_gradient(x.max(axis=-1, keepdims=True)))
    return e / e.sum(axis=-1, keepdims=True)


def written_softmax(x):
    e = jnp.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def composite_logsumexp(x):
    m = jax.lax.stop_gradient(x.max(axis=-1, keepdims=True))
    return m[..., 0] + jnp.log(jnp.exp(x - m).sum(axis=-1))


ROWS = 1024  # the softmax and logsumexp cases work on rows of this length

CASES: list[tuple[str, int, Callable, Callable, Callable]] = [
    ("log1pexp", 1, gen.log1pexp, hand_log1pexp, lambda x: jnp.log(1.0 + jnp.exp(x))),
    # The same, against a rule of equal accuracy and autodiff of JAX's own stable softplus.
    ("softplus", 1, gen.log1pexp, hand_softplus, jax.nn.softplus),
    ("tanh", 1, gen.f_tanh, hand_tanh, jnp.tanh),
    # The same, against a rule of equal accuracy (autodiff's 1 - tanh(x)**2 loses 13 bits at x = 5).
    ("tanh_exact", 1, gen.f_tanh, hand_tanh_exact, jnp.tanh),
    ("sin_mul", 2, gen.sin_mul, hand_sin_mul, lambda x, y: jnp.sin(x) * y),
    ("sin_exp_mul", 2, gen.sin_exp_mul, hand_sin_exp_mul, lambda x, y: jnp.sin(x) * jnp.exp(-x * x) * y),
    ("gelu", 1, gen.gelu, hand_gelu, lambda x: x * (1 + jss.erf(x / jnp.sqrt(2.0))) / 2),
    # The same, against autodiff of JAX's own exact gelu, the erfc form: as accurate as the rule.
    ("gelu_nn", 1, gen.gelu, hand_gelu, lambda x: jax.nn.gelu(x, approximate=False)),
    ("softmax", 1, gen.softmax, hand_softmax, composite_softmax),
    # The same, against autodiff of the forward as written: the maximum differentiated, as accurate as the rule.
    ("softmax_ad", 1, gen.softmax, hand_softmax, written_softmax),
    ("logsumexp", 1, gen.logsumexp, hand_logsumexp, composite_logsumexp),
]


def _interleaved(impls: list[Callable], xs: list[jax.Array], rounds: int) -> list[list[float]]:
    for f in impls:
        jax.block_until_ready(f(*xs))
    times: list[list[float]] = [[] for _ in impls]
    for _ in range(rounds):
        for k, f in enumerate(impls):
            start = time.perf_counter()
            jax.block_until_ready(f(*xs))
            times[k].append(time.perf_counter() - start)
    return times


def _cell(times: list[float], base: list[float]) -> str:
    ratios = [a / b for a, b in zip(times, base, strict=True)]
    return f"{statistics.median(ratios):.2f} [{min(ratios):.2f}, {max(ratios):.2f}]"


# Elementwise cases: the exact value and derivative in float64.
REFERENCES = {
    "log1pexp": (lambda x: np.logaddexp(0.0, x), sps.expit),
    "softplus": (lambda x: np.logaddexp(0.0, x), sps.expit),
    "gelu": (
        lambda x: x * sps.ndtr(x),
        lambda x: sps.ndtr(x) + x * np.exp(-x * x / 2) / np.sqrt(2 * np.pi),
    ),
}
REFERENCES["gelu_nn"] = REFERENCES["gelu"]
REFERENCES["tanh"] = REFERENCES["tanh_exact"] = (np.tanh, lambda x: 1 / np.cosh(x) ** 2)
#: The smallest exact result compared: XLA flushes subnormal intermediates on the CPU, so a result just above
#: float32's normals (gelu's x * Phi(x) at x = -13, exp(-x**2/2) subnormal) is 0 in every variant alike.
SMALLEST = 2.0**-100


def _relative_error(got: jax.Array, exact: np.ndarray) -> str:
    got = np.asarray(got, dtype=np.float64)
    if not np.isfinite(got).all():
        return "inf"
    normal = np.abs(exact) >= SMALLEST
    error = np.abs(got - exact)[normal] / np.abs(exact)[normal]
    return f"{error.max() / np.finfo(np.float32).eps:.3g}"


TABLES = ("jax_jit", "errors")
COLUMNS = ("grad gen/hand", "grad gen/composite", "jvp gen/hand", "jvp gen/composite")


def layout(table: str = TABLES[0], log2n: int = 20) -> Layout:
    if table == "errors":
        labels = tuple(case[0] for case in CASES if case[0] in REFERENCES)
        return Layout(("value, derivative", "generated", "hand", "composite"), labels)
    return Layout((f"JAX jit, 2^{log2n} float32", *COLUMNS), tuple(case[0] for case in CASES))


def accuracy() -> Table:
    """Prints the errors table, and returns it."""
    table = Table(list(layout("errors").header))
    x = np.linspace(-100.0, 100.0, 200_001)
    x32 = jnp.asarray(x, dtype=jnp.float32)
    x = np.asarray(x32, dtype=np.float64)  # the points float32 can hold
    print(
        "max relative error / float32 eps on [-100, 100] where the exact result is at least 2**-100:"
        " value, derivative (inf: overflow or nan)"
    )
    print(f"{'case':<12} " + " ".join(f"{c:>22}" for c in ("generated", "hand", "composite")))
    for name, _, generated, hand, composite in CASES:
        if name not in REFERENCES:
            continue
        value, derivative = REFERENCES[name]
        cells = []
        for f in (generated, hand, composite):
            got, grad = jax.jit(jax.vmap(jax.value_and_grad(f)))(x32)
            cells.append(f"{_relative_error(got, value(x))}, {_relative_error(grad, derivative(x))}")
        print(f"{name:<12} " + " ".join(f"{c:>22}" for c in cells))
        table.add(name, *cells)
    return table


def main(log2n: int, quick: bool = False) -> tuple[Table, Table]:
    """Prints both tables as it measures; returns them (the timings' medians, the errors)."""
    table = Table(list(layout(log2n=log2n).header))
    n = 1 << log2n
    rounds = 5 if quick else 30
    print(f"jax.jit, float32, {n} elements, {rounds} interleaved rounds")
    columns = ["grad gen/hand", "grad gen/composite", "jvp gen/hand", "jvp gen/composite"]
    print(f"{'case':<12} " + " ".join(f"{c:>22}" for c in columns) + " policy")
    policies = rule_policies()
    for name, arity, generated, hand, composite in CASES:
        keys = jax.random.split(jax.random.key(0), arity)
        shape = (n // ROWS, ROWS) if name in ("softmax", "softmax_ad", "logsumexp") else (n,)
        xs = [jax.random.normal(k, shape, dtype=jnp.float32) for k in keys]
        argnums = tuple(range(arity))
        grads = [
            jax.jit(jax.value_and_grad(lambda *a, f=f: (f(*a) ** 2).sum(), argnums))
            for f in (generated, hand, composite)
        ]
        times = _interleaved(grads, xs, rounds)
        cells = [_cell(times[0], times[1]), _cell(times[0], times[2])]
        hand_has_jvp = not isinstance(hand, jax.custom_vjp)
        jvps = [
            jax.jit(lambda *a, f=f: jax.jvp(f, a, tuple(jnp.ones_like(x) for x in a)))
            for f in ((generated, hand, composite) if hand_has_jvp else (generated, composite))
        ]
        times = _interleaved(jvps, xs, rounds)
        cells += [_cell(times[0], times[1]), _cell(times[0], times[2])] if hand_has_jvp else ["n/a", _cell(*times)]
        print(f"{name:<12} " + " ".join(f"{c:>22}" for c in cells) + f" {policies[generated.__name__]}")
        table.add(name, *(cell.split()[0] for cell in cells))
    return table, accuracy()


if __name__ == "__main__":
    asked = request(sys.argv[1:], TABLES)
    size, quick = size_and_quick(asked.rest, 20, __doc__ or "")
    with quiet_if(asked.markdown):
        measured = accuracy() if asked.markdown and asked.table == "errors" else main(size, quick=quick)
    if asked.markdown:
        print((measured if isinstance(measured, Table) else measured[0]).markdown())
