"""bfloat16 and float16: the generated rules' error against the frameworks' native ops, and their speed.

    python -m benchmarks.low_precision [log2 of the element count for the timings, default 20]

The 8 elementwise cases of `benchmarks.torch_eager`, in torch and JAX. Error:
the largest difference over 4001 points of [-6, 6] (y on [0.5, 3]) from the
float64 value at the rounded inputs, in eps of the dtype, relative to
max(|exact|, 1) (relative where the value is large, absolute near a zero,
where no rounding of the result is meaningful), for the value and the
gradient. "native" is the framework's own op where it has one (`F.gelu`,
`jax.nn.gelu`, ...), else the composite, computed in the dtype. Speed:
forward + backward (torch) or jit(grad) (JAX) of the generated function,
which computes in float32 and rounds once, against the same rule computed
in the dtype (its Function or custom_jvp called directly), interleaved.
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
import torch.nn.functional as F  # noqa: N812 - the conventional alias

import generated.jax as gj
import generated.torch as gt

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
def _output(result: torch.Tensor | tuple[torch.Tensor, ...]) -> torch.Tensor:
    """The output of a Function's `apply`, which returns its hidden residuals after it."""
    return result[0] if isinstance(result, tuple) else result


TORCH_IN_DTYPE: dict[str, Callable] = {
    "mish": lambda x: _output(gt.FMish.apply(x)),
    "gelu (erf)": lambda x: _output(gt.Gelu.apply(x)),
    "gelu (tanh)": lambda x: _output(gt.FGeluTanh.apply(x)),
    "swish": lambda x: _output(gt.FSwish.apply(x)),
    "softplus": lambda x: _output(gt.FSoftplus.apply(x)),
    "log1pexp": lambda x: _output(gt.Log1pexp.apply(x)),
    "sin(x)*exp(-x^2)*y": lambda x, y: _output(gt.SinExpMul.apply(x, y)),
    "softplus(beta x)/beta": lambda x: _output(gt.SoftplusBeta.apply(x, BETA)),
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


def errors() -> None:
    table = error_table()
    print("max error / eps (value, gradient), relative to max(|exact|, 1)")
    columns = [(d, b, k) for d in ("bf16", "f16") for b in ("torch", "jax") for k in ("gen", "native")]
    print(f"{'case':<22} " + " ".join(f"{' '.join((b, d, k)):>18}" for d, b, k in columns))
    for name in EXACT:
        cells = [f"{table[name, d, b, k][0]:.2g}, {table[name, d, b, k][1]:.2g}" for d, b, k in columns]
        print(f"{name:<22} " + " ".join(f"{c:>18}" for c in cells))


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


def speed(log2n: int) -> None:
    n = 1 << log2n
    rounds = 20
    print(f"\nspeed, {n} elements, {rounds} interleaved rounds: generated (float32 inside) / the rule in the dtype")
    print(f"{'case':<22} {'torch bf16':>20} {'torch f16':>20} {'jax bf16':>20} {'jax f16':>20}")
    for name in EXACT:
        cells = []
        arity = 2 if name in TWO_INPUTS else 1
        for dtype in (torch.bfloat16, torch.float16):
            xs = [torch.randn(n, dtype=dtype).requires_grad_() for _ in range(arity)]

            def run(f: Callable, xs: list[torch.Tensor] = xs) -> Callable:
                return lambda: f(*xs).sum().backward()

            times = _interleaved([run(TORCH[name][0]), run(TORCH_IN_DTYPE[name])], rounds)
            ratios = [a / b for a, b in zip(*times, strict=True)]
            cells.append(f"{statistics.median(ratios):.2f} [{min(ratios):.2f}, {max(ratios):.2f}]")
        for dtype in (jnp.bfloat16, jnp.float16):
            jxs = [jax.random.normal(jax.random.key(k), (n,), dtype=dtype) for k in range(arity)]
            generated = jax.jit(jax.grad(lambda *a, f=JAX[name][0]: f(*a).astype(jnp.float32).sum()))
            private = _private_jax(name)
            in_dtype = jax.jit(jax.grad(lambda *a, f=private: f(*a).astype(jnp.float32).sum()))
            calls = [lambda g=g, a=jxs: g(*a).block_until_ready() for g in (generated, in_dtype)]
            times = _interleaved(calls, rounds)
            ratios = [a / b for a, b in zip(*times, strict=True)]
            cells.append(f"{statistics.median(ratios):.2f} [{min(ratios):.2f}, {max(ratios):.2f}]")
        print(f"{name:<22} " + " ".join(f"{c:>20}" for c in cells))


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
    errors()
    speed(int(argv[0]) if argv else 20)


if __name__ == "__main__":
    main(sys.argv[1:])
