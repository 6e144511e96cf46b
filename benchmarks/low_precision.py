"""bfloat16 and float16: the generated rules' error against the frameworks' native ops, and their speed.

    python -m benchmarks.low_precision [log2 of the element count for the timings, default 20] [--quick]
                                       [--markdown [--table errors|speed]]

The 8 elementwise cases of `benchmarks.torch_eager`, in torch and JAX. Error:
the largest difference over 4001 points of [-6, 6] (y on [0.5, 3]) from the
float64 value at the rounded inputs, in eps of the dtype, relative to
max(|exact|, 1) (relative where the value is large, absolute near a zero,
where no rounding of the result is meaningful), for the value and the
gradient. "native" is the framework's own op where it has one (`F.gelu`,
`jax.nn.gelu`, ...), else the composite, computed in the dtype. Speed:
forward + backward of the generated function, which computes in float32 and
rounds once, over the same rule computed in the dtype (its Function or
custom_jvp called directly), interleaved, the median of the per-round ratios
with their min and max: eager torch (`.sum().backward()`), and beside it the
same Function on float32 copies over the rule in the dtype (the lifted body
without its casts, which in eager are kernels of their own); torch.compile
(`dynamic=False`) of `benchmarks.torch_compile`'s step, forward and
`autograd.grad` with a random cotangent, each step compiled, checked against
its eager self and warmed up before timing, dynamo reset for each case and
dtype; JAX jit(grad).  `--quick` (the slow lane's run, to see that it all
runs) times 5 rounds and compiles the first case only, the others' compiled
cells "-": compiling 16 steps was most of its two minutes. `--markdown` prints one of
docs/performance.md's tables alone: the errors (`--table errors`, the default, which times nothing) or
the speed (`--table speed`).
"""

from __future__ import annotations

import math
import statistics
import sys
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import scipy.special as sps
import torch
import torch._dynamo
import torch.nn.functional as F  # noqa: N812 - the conventional alias

import generated.jax as gj
import generated.torch as gt
from benchmarks.table import Layout, Table, quiet_if, request
from benchmarks.torch_compile import step_of

BETA = 1.5


def _softplus64(x):
    return np.logaddexp(0.0, x)


# name: (value, gradient in x) in float64; a two-input case takes y too.
EXACT: dict[str, tuple[Callable, Callable]] = {
    "mish": (
        lambda x, y: x * np.tanh(_softplus64(x)),
        lambda x, y: np.tanh(_softplus64(x)) + x * sps.expit(x) / np.cosh(_softplus64(x)) ** 2,
    ),
    "gelu (erf)": (
        lambda x, y: x * sps.ndtr(x),
        lambda x, y: sps.ndtr(x) + x * np.exp(-x * x / 2) / math.sqrt(2 * math.pi),
    ),
    "gelu (tanh)": (
        lambda x, y: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))),
        lambda x, y: (
            0.5 * (1 + np.tanh(u := math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
            + 0.5 * x * (1 - np.tanh(u) ** 2) * math.sqrt(2 / math.pi) * (1 + 3 * 0.044715 * x**2)
        ),
    ),
    "swish": (lambda x, y: x * sps.expit(x), lambda x, y: sps.expit(x) * (1 + x * (1 - sps.expit(x)))),
    "softplus": (lambda x, y: _softplus64(x), lambda x, y: sps.expit(x)),
    "log1pexp": (lambda x, y: _softplus64(x), lambda x, y: sps.expit(x)),
    "sin(x)*exp(-x^2)*y": (
        lambda x, y: np.sin(x) * np.exp(-x * x) * y,
        lambda x, y: (np.cos(x) - 2 * x * np.sin(x)) * np.exp(-x * x) * y,
    ),
    "softplus(beta x)/beta": (lambda x, y: _softplus64(BETA * x) / BETA, lambda x, y: sps.expit(BETA * x)),
}

# name: (generated, native) in each backend; the generated ones' `fn(x)` or `fn(x, y)`.
TORCH: dict[str, tuple[Callable, Callable]] = {
    "mish": (gt.f_mish, F.mish),
    "gelu (erf)": (gt.gelu, F.gelu),
    "gelu (tanh)": (gt.f_gelu_tanh, lambda x: F.gelu(x, approximate="tanh")),
    "swish": (gt.f_swish, F.silu),
    "softplus": (gt.f_softplus, F.softplus),
    "log1pexp": (gt.log1pexp, F.softplus),
    "sin(x)*exp(-x^2)*y": (gt.sin_exp_mul, lambda x, y: torch.sin(x) * torch.exp(-x * x) * y),
    "softplus(beta x)/beta": (lambda x: gt.softplus_beta(x, BETA), lambda x: F.softplus(x, beta=BETA)),
}
JAX: dict[str, tuple[Callable, Callable]] = {
    "mish": (gj.f_mish, jax.nn.mish),
    "gelu (erf)": (gj.gelu, lambda x: jax.nn.gelu(x, approximate=False)),
    "gelu (tanh)": (gj.f_gelu_tanh, lambda x: jax.nn.gelu(x, approximate=True)),
    "swish": (gj.f_swish, jax.nn.silu),
    "softplus": (gj.f_softplus, jax.nn.softplus),
    "log1pexp": (gj.log1pexp, jax.nn.softplus),
    "sin(x)*exp(-x^2)*y": (gj.sin_exp_mul, lambda x, y: jnp.sin(x) * jnp.exp(-x * x) * y),
    "softplus(beta x)/beta": (lambda x: gj.softplus_beta(x, BETA), lambda x: jax.nn.softplus(BETA * x) / BETA),
}


# The same rule computed in the dtype: its Function, or its custom_jvp, called past the float32 lift.
def _in_dtype(function: type[torch.autograd.Function], *static: object) -> Callable:
    """`function` applied to the tensors as they come, returning its output (not the residuals after it).

    It goes through the module's `_apply_<rule>` (the runtime's `routed`), as the public function
    does: under torch.compile that applies the Function without `jvp`, which dynamo would break the
    graph around.
    """
    module = sys.modules[function.__module__]
    apply = getattr(module, f"_apply_{module.__name__.rsplit('.', 1)[-1]}")

    def in_dtype(*xs: torch.Tensor) -> torch.Tensor:
        result = apply(*xs, *static)
        return result[0] if isinstance(result, tuple) else result

    return in_dtype


TORCH_IN_DTYPE: dict[str, Callable] = {
    "mish": _in_dtype(gt.FMish),
    "gelu (erf)": _in_dtype(gt.Gelu),
    "gelu (tanh)": _in_dtype(gt.FGeluTanh),
    "swish": _in_dtype(gt.FSwish),
    "softplus": _in_dtype(gt.FSoftplus),
    "log1pexp": _in_dtype(gt.Log1pexp),
    "sin(x)*exp(-x^2)*y": _in_dtype(gt.SinExpMul),
    "softplus(beta x)/beta": _in_dtype(gt.SoftplusBeta, BETA),
}
TWO_INPUTS = {"sin(x)*exp(-x^2)*y"}


def _error(got: np.ndarray, exact: np.ndarray, eps: float) -> float:
    return float(np.max(np.abs(got.astype(np.float64) - exact) / np.maximum(np.abs(exact), 1.0)) / eps)


def _torch_value_and_grad(f: Callable, xs: list[torch.Tensor]) -> tuple[np.ndarray, np.ndarray]:
    leaves = [x.clone().requires_grad_() for x in xs]
    out = f(*leaves)
    out.sum().backward()
    return out.detach().double().numpy(), leaves[0].grad.double().numpy()


def _jax_value_and_grad(f: Callable, xs: list[jax.Array]) -> tuple[np.ndarray, np.ndarray]:
    value = jax.jit(f)(*xs)
    grad = jax.jit(jax.vmap(jax.grad(f)))(*xs)
    return np.asarray(value, np.float64), np.asarray(grad, np.float64)


Errors = dict[tuple[str, str, str, str], tuple[float, float]]  # (case, dtype, backend, gen/native) -> errors


def error_table() -> Errors:
    """Each case's (value, gradient) error in eps, per dtype, backend, and generated or native."""
    x64 = np.linspace(-6.0, 6.0, 4001)
    y64 = np.linspace(0.5, 3.0, 4001)
    table: Errors = {}
    for name, (value, gradient) in EXACT.items():
        for torch_dtype, jax_dtype, label in (
            (torch.bfloat16, jnp.bfloat16, "bf16"),
            (torch.float16, jnp.float16, "f16"),
        ):
            eps = float(jnp.finfo(jax_dtype).eps)
            xs = [torch.tensor(x64, dtype=torch_dtype), torch.tensor(y64, dtype=torch_dtype)]
            rounded = [t.double().numpy() for t in xs]
            n = 2 if name in TWO_INPUTS else 1
            exact = value(*rounded), gradient(*rounded)
            for kind, f in zip(("gen", "native"), TORCH[name], strict=True):
                got = _torch_value_and_grad(f, xs[:n])
                table[name, label, "torch", kind] = (_error(got[0], exact[0], eps), _error(got[1], exact[1], eps))
            jxs = [jnp.asarray(r, dtype=jax_dtype) for r in rounded[:n]]
            for kind, f in zip(("gen", "native"), JAX[name], strict=True):
                got = _jax_value_and_grad(f, jxs)
                table[name, label, "jax", kind] = (_error(got[0], exact[0], eps), _error(got[1], exact[1], eps))
    return table


TABLES = ("errors", "speed")
DTYPES = ("bf16", "f16")
#: Cases with no native op in the frameworks: their "native" is the composite, in the dtype.
COMPOSITE = {"sin(x)*exp(-x^2)*y"}
SPEED_COLUMNS = tuple(f"{b} {d}" for b in ("eager torch", "f32 body", "torch.compile", "JAX jit") for d in DTYPES)


def layout(table: str = TABLES[0], log2n: int = 20) -> Layout:
    if table == "speed":
        return Layout((f"2^{log2n}", *SPEED_COLUMNS), tuple(EXACT))
    columns = [f"{d} {c}" for d in DTYPES for c in ("generated (torch = JAX)", "native torch", "native JAX")]
    return Layout(("case", *columns), tuple(EXACT))


def error_markdown(table: Errors) -> Table:
    """docs/performance.md's errors table: value, gradient; the generated torch and JAX share a cell where equal."""

    def pair(key: tuple[str, str, str, str]) -> str:
        return f"{table[key][0]:.2g}, {table[key][1]:.2g}"

    out = Table(list(layout("errors").header))
    for name in EXACT:
        cells = []
        for d in DTYPES:
            torch_gen, jax_gen = pair((name, d, "torch", "gen")), pair((name, d, "jax", "gen"))
            cells.append(torch_gen if torch_gen == jax_gen else f"{torch_gen} (JAX {jax_gen})")
            composite = " (composite)" if name in COMPOSITE else ""
            cells += [pair((name, d, backend, "native")) + composite for backend in ("torch", "jax")]
        out.add(name, *cells)
    return out


def errors() -> Errors:
    table = error_table()
    print("max error / eps (value, gradient), relative to max(|exact|, 1)")
    columns = [(d, b, k) for d in ("bf16", "f16") for b in ("torch", "jax") for k in ("gen", "native")]
    print(f"{'case':<22} " + " ".join(f"{' '.join((b, d, k)):>18}" for d, b, k in columns))
    for name in EXACT:
        cells = [f"{table[name, d, b, k][0]:.2g}, {table[name, d, b, k][1]:.2g}" for d, b, k in columns]
        print(f"{name:<22} " + " ".join(f"{c:>18}" for c in cells))
    return table


def _interleaved(fs: list[Callable], rounds: int) -> list[list[float]]:
    for f in fs:
        f()
    times: list[list[float]] = [[] for _ in fs]
    for _ in range(rounds):
        for k, f in enumerate(fs):
            start = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - start)
    return times


def _cell(times: list[list[float]]) -> str:
    """The median of the per-round ratios of the first to the second, with their min and max."""
    ratios = [a / b for a, b in zip(times[0], times[1], strict=True)]
    return f"{statistics.median(ratios):.2f} [{min(ratios):.2f}, {max(ratios):.2f}]"


# A compiled step against its eager self, |compiled - eager| <= eps * (1 + |eager|) times these:
# the generated rule computes in float32 both ways and rounds once (measured at most 0.5 eps
# at 2^20 normal points); inductor computes a fused kernel's bf16/f16 intermediates in float32
# and rounds only what it stores, where eager rounds every op, so the rule in the dtype moves
# by up to 4.4 eps (gelu (tanh)'s float16 gradient).
COMPILED_TOLERANCE_EPS = {"generated": 1, "in the dtype": 8}


def _compiled_cell(name: str, dtype: torch.dtype, n: int, rounds: int) -> str:
    """torch.compile of forward + `autograd.grad`: the generated rule over the rule in the dtype."""
    # Each cell compiles afresh: both steps share one code object, whose cache holds
    # few entries (cache_size_limit) before dynamo falls back to eager.
    torch._dynamo.reset()
    arity = 2 if name in TWO_INPUTS else 1
    rng = torch.Generator().manual_seed(0)
    xs = [torch.randn(n, generator=rng, dtype=dtype).requires_grad_() for _ in range(arity)]
    g = torch.randn(n, generator=rng, dtype=dtype)
    fs = (TORCH[name][0], TORCH_IN_DTYPE[name])
    steps = [torch.compile(step_of(f), dynamic=False) for f in fs]
    for step, f, side in zip(steps, fs, ("generated", "in the dtype"), strict=True):
        tolerance = COMPILED_TOLERANCE_EPS[side] * torch.finfo(dtype).eps
        got = step(*xs, g)  # compiles here
        want = step_of(f)(*xs, g)  # eager
        for a, b, what in zip(got, want, ["value"] + [f"gradient {i}" for i in range(arity)], strict=True):
            label = f"{name} {dtype}, {side} {what}, compiled against eager"
            torch.testing.assert_close(a, b, rtol=tolerance, atol=tolerance, msg=lambda m, label=label: f"{label}: {m}")
        for _ in range(2):
            step(*xs, g)
    return _cell(_interleaved([lambda step=step: step(*xs, g) for step in steps], rounds))


def speed(log2n: int, quick: bool = False) -> Table:
    """Prints the speed table as it measures, and returns it."""
    table = Table(list(layout("speed", log2n).header))
    n = 1 << log2n
    rounds = 5 if quick else 40
    print(f"\nspeed, {n} elements, {rounds} interleaved rounds: generated (float32 inside) / the rule in the dtype")
    print("(f32 body: the rule in float32 on float32 copies, the lift without its casts; where it")
    print("is below 1.1 and generated is above, eager torch's separate cast kernels are the excess)")
    columns = [f"{b} {d}" for b in ("torch", "f32 body", "compiled", "jax") for d in ("bf16", "f16")]
    print(f"{'case':<22} " + " ".join(f"{c:>20}" for c in columns))
    for name in EXACT:
        eager, body = [], []
        arity = 2 if name in TWO_INPUTS else 1
        for dtype in (torch.bfloat16, torch.float16):
            xs = [torch.randn(n, dtype=dtype).requires_grad_() for _ in range(arity)]
            x32s = [x.detach().float().requires_grad_() for x in xs]

            def run(f: Callable, xs: list[torch.Tensor] = xs) -> Callable:
                return lambda: f(*xs).sum().backward()

            in_dtype = TORCH_IN_DTYPE[name]
            times = _interleaved([run(TORCH[name][0]), run(in_dtype), run(in_dtype, x32s)], rounds)
            eager.append(_cell(times))
            body.append(_cell([times[2], times[1]]))
        cells = [*eager, *body]
        compiled = not quick or name == next(iter(EXACT))
        cells += [
            _compiled_cell(name, dtype, n, rounds) if compiled else "-" for dtype in (torch.bfloat16, torch.float16)
        ]
        for dtype in (jnp.bfloat16, jnp.float16):
            jxs = [jax.random.normal(jax.random.key(k), (n,), dtype=dtype) for k in range(arity)]
            generated = jax.jit(jax.grad(lambda *a, f=JAX[name][0]: f(*a).astype(jnp.float32).sum()))
            private = _private_jax(name)
            in_dtype = jax.jit(jax.grad(lambda *a, f=private: f(*a).astype(jnp.float32).sum()))
            calls = [lambda g=g, a=jxs: g(*a).block_until_ready() for g in (generated, in_dtype)]
            cells.append(_cell(_interleaved(calls, rounds)))
        print(f"{name:<22} " + " ".join(f"{c:>20}" for c in cells))
        table.add(name, *cells)
    return table


def _private_jax(name: str) -> Callable:
    """The rule's custom_jvp in its module, past the public function's float32 lift."""
    import importlib

    module = {"mish": "f_mish", "gelu (erf)": "gelu", "gelu (tanh)": "f_gelu_tanh", "swish": "f_swish"}
    module |= {"softplus": "f_softplus", "log1pexp": "log1pexp", "sin(x)*exp(-x^2)*y": "sin_exp_mul"}
    if name == "softplus(beta x)/beta":
        private = importlib.import_module("generated.jax.softplus_beta")._softplus_beta
        return lambda x: private(x, BETA)
    rule = module[name]
    return getattr(importlib.import_module(f"generated.jax.{rule}"), f"_{rule}")


def main(argv: list[str]) -> None:
    asked = request(argv, TABLES)
    quick = "--quick" in asked.rest
    sizes = [a for a in asked.rest if a != "--quick"]
    log2n = int(sizes[0]) if sizes else 20
    if not asked.markdown:
        errors()
        speed(log2n, quick)
        return
    with quiet_if(True):
        measured = error_markdown(error_table()) if asked.table == "errors" else speed(log2n, quick)
    print(measured.markdown())


if __name__ == "__main__":
    main(sys.argv[1:])
