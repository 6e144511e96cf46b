"""Generated torch Functions against autodiff and hand-written Functions, forward + backward.

    python -m benchmarks.torch_eager [log2 of the element count, default 22]

float32 on the CPU. The three implementations of a case run interleaved
(A B C A B C ...); each row shows the median of the per-round ratios, with
their min and max, so a noisy shared machine moves all three alike. The
last columns are the bytes each saves for backward (saved_tensors_hooks).
"""

from __future__ import annotations

import math
import statistics
import sys
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F  # noqa: N812 - the conventional alias

import generated.torch as gen

torch.set_num_threads(max(1, torch.get_num_threads()))


class HandMish(torch.autograd.Function):
    """The torch-docs style: save the input, recompute in backward."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * torch.tanh(F.softplus(x))

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        t = torch.tanh(F.softplus(x))
        return g * (t + x * (1 - t * t) * torch.sigmoid(x))


class HandGelu(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 0.5 * (1 + torch.erf(x / math.sqrt(2)))

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        cdf = 0.5 * (1 + torch.erf(x / math.sqrt(2)))
        pdf = torch.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
        return g * (cdf + x * pdf)


class HandGeluTanh(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        k = math.sqrt(2 / math.pi)
        t = torch.tanh(k * (x + 0.044715 * x**3))
        return g * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * 0.044715 * x * x))


class HandSwish(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * torch.sigmoid(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        s = torch.sigmoid(x)
        return g * (s + x * s * (1 - s))


class HandSoftplus(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return F.softplus(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * torch.sigmoid(x)


class HandLog1pexp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.log1p(torch.exp(x))

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * (1 - 1 / (1 + torch.exp(x)))


class HandSinExpMul(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, y):
        ctx.save_for_backward(x, y)
        return torch.sin(x) * torch.exp(-x * x) * y

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        e = torch.exp(-x * x)
        return g * y * e * (torch.cos(x) - 2 * x * torch.sin(x)), g * torch.sin(x) * e


class HandSoftplusBeta(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, beta):
        ctx.save_for_backward(x)
        ctx.beta = beta
        return F.softplus(beta * x) / beta

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * torch.sigmoid(ctx.beta * x), None


CASES: list[tuple[str, int, Callable, Callable, Callable]] = [
    ("mish", 1, gen.f_mish, lambda x: x * torch.tanh(F.softplus(x)), HandMish.apply),
    ("gelu (erf)", 1, gen.gelu, lambda x: x * (1 + torch.erf(x / math.sqrt(2))) / 2, HandGelu.apply),
    (
        "gelu (tanh)",
        1,
        gen.f_gelu_tanh,
        lambda x: 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))),
        HandGeluTanh.apply,
    ),
    ("swish", 1, gen.f_swish, lambda x: x * torch.sigmoid(x), HandSwish.apply),
    ("softplus", 1, gen.f_softplus, F.softplus, HandSoftplus.apply),
    ("log1pexp", 1, gen.log1pexp, lambda x: torch.log(1 + torch.exp(x)), HandLog1pexp.apply),
    ("sin(x)*exp(-x^2)*y", 2, gen.sin_exp_mul, lambda x, y: torch.sin(x) * torch.exp(-x * x) * y, HandSinExpMul.apply),
    (
        "softplus(beta x)/beta",
        1,
        lambda x: gen.softplus_beta(x, 1.5),
        lambda x: F.softplus(1.5 * x) / 1.5,
        lambda x: HandSoftplusBeta.apply(x, 1.5),
    ),
]


def fwd_bwd(f: Callable, xs: list[torch.Tensor]) -> float:
    leaves = [x.detach().requires_grad_() for x in xs]
    start = time.perf_counter()
    out = f(*leaves)
    out.backward(torch.ones_like(out))
    return time.perf_counter() - start


def saved_bytes(f: Callable, xs: list[torch.Tensor]) -> int:
    total = 0
    seen: set[int] = set()

    def pack(t: torch.Tensor) -> torch.Tensor:
        nonlocal total
        key = t.untyped_storage().data_ptr()
        if key not in seen:  # an input saved twice costs its memory once
            seen.add(key)
            total += t.untyped_storage().nbytes()
        return t

    leaves = [x.detach().requires_grad_() for x in xs]
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        f(*leaves)
    # The inputs themselves are alive anyway; count what backward adds.
    return total - sum(x.untyped_storage().nbytes() for x in xs if x.untyped_storage().data_ptr() in seen)


def main(log2n: int) -> None:
    n = 1 << log2n
    rounds = 15
    print(f"torch eager, float32, {n} elements, forward+backward, {rounds} interleaved rounds")
    header = f"{'case':<22} {'gen/autodiff':>22} {'gen/hand':>22} {'saved MB gen/auto/hand':>24}"
    print(header)
    for name, arity, generated, autodiff, hand in CASES:
        gen_ = torch.Generator().manual_seed(0)
        xs = [torch.randn(n, generator=gen_) for _ in range(arity)]
        impls = [generated, autodiff, hand]
        for f in impls:  # warm-up
            fwd_bwd(f, xs)
        times: list[list[float]] = [[], [], []]
        for _ in range(rounds):
            for k, f in enumerate(impls):
                times[k].append(fwd_bwd(f, xs))
        vs_auto = [g / a for g, a in zip(times[0], times[1], strict=True)]
        vs_hand = [g / h for g, h in zip(times[0], times[2], strict=True)]

        def cell(r: list[float]) -> str:
            return f"{statistics.median(r):.2f} [{min(r):.2f}, {max(r):.2f}]"

        mb = [saved_bytes(f, xs) / 2**20 for f in impls]
        print(f"{name:<22} {cell(vs_auto):>22} {cell(vs_hand):>22} {mb[0]:>8.0f}/{mb[1]:.0f}/{mb[2]:.0f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 22)
