"""Generated torch Functions against autodiff and hand-written Functions, forward + backward.

    python -m benchmarks.torch_eager [log2 of the element count, default 22] [--quick: 5 rounds] [--markdown]
                                     [--accuracy best|balanced|fast]

float32 on the CPU. The four implementations of a case (generated, autodiff
of the composite, hand-written in the torch-docs style, generated with
`fuse: true`) run interleaved (A B C D A B C D ...); each column shows the
median of the per-round ratios, with their min and max, so a noisy shared
machine moves all alike. "jvp gen/autodiff" is forward mode
(`torch.func.jvp`) of the generated Function against that of the composite,
interleaved the same way (the hand-written Functions have no `jvp`). The last
columns are the bytes each saves for backward (saved_tensors_hooks). The
last line measures the floor under every generated Function: a minimal
torch.func-style Function running the very kernels autodiff runs.
`--markdown` prints the medians and the saved bytes as docs/performance.md's table.
`--accuracy POLICY` builds rules/ under that accuracy policy into a temporary
folder and measures it in generated/'s place; each row ends with the policy
its rule was built under.
"""

from __future__ import annotations

import importlib
import math
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F  # noqa: N812 - the conventional alias

from benchmarks import bundled, rule_policies, size_and_quick
from benchmarks.table import Layout, Table, quiet_if, request
from rulegen.render.build import build

#: The bundled rules: generated/, or rules/ built under `--accuracy POLICY`.
gen = bundled("torch")

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


class FloorSoftplus(torch.autograd.Function):
    """The least a torch.func-style Function can do for softplus: the kernels autodiff runs, nothing else."""

    @staticmethod
    def forward(x):
        return F.softplus(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return torch.ops.aten.softplus_backward(g, x, 1.0, 20.0)


# The same forwards as the bundled rules, with `fuse: true`.
FUSED_RULES = """
rules:
  - {name: mish, inputs: [x], forward: x * tanh(softplus(x)), fuse: true}
  - {name: gelu, inputs: [x], forward: x * (1 + erf(x / sqrt(2))) / 2, fuse: true}
  - {name: gelu_tanh, inputs: [x], forward: x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x**3))) / 2, fuse: true}
  - {name: swish, inputs: [x], forward: x * sigmoid(x), fuse: true}
  - {name: softplus, inputs: [x], forward: softplus(x), fuse: true}
  - {name: log1pexp, inputs: [x], forward: log(1 + exp(x)), derivatives: {x: 1 - 1/(1 + exp(x))}, fuse: true}
  - {name: sin_exp_mul, inputs: [x, y], forward: sin(x) * exp(-x**2) * y, fuse: true}
  - name: softplus_beta
    inputs: {x: {}, beta: {static: true, default: 1.0}}
    forward: softplus(beta * x) / beta
    fuse: true
"""


def fused_package(folder: Path):
    (folder / "fused.yaml").write_text(FUSED_RULES)
    build([folder / "fused.yaml"], folder / "bench_fused")
    sys.path.insert(0, str(folder))
    package = importlib.import_module("bench_fused.torch")
    # Each rule's module is imported when the rule is first read: read them all while `folder` exists.
    for name in package.__all__:
        getattr(package, name)
    return package


CASES: list[tuple[str, int, Callable, Callable, Callable, str]] = [
    ("mish", 1, gen.f_mish, lambda x: x * torch.tanh(F.softplus(x)), HandMish.apply, "mish"),
    ("gelu (erf)", 1, gen.gelu, lambda x: x * (1 + torch.erf(x / math.sqrt(2))) / 2, HandGelu.apply, "gelu"),
    (
        "gelu (tanh)",
        1,
        gen.f_gelu_tanh,
        lambda x: 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))),
        HandGeluTanh.apply,
        "gelu_tanh",
    ),
    ("swish", 1, gen.f_swish, lambda x: x * torch.sigmoid(x), HandSwish.apply, "swish"),
    ("softplus", 1, gen.f_softplus, F.softplus, HandSoftplus.apply, "softplus"),
    ("log1pexp", 1, gen.log1pexp, lambda x: torch.log(1 + torch.exp(x)), HandLog1pexp.apply, "log1pexp"),
    (
        "sin(x)*exp(-x^2)*y",
        2,
        gen.sin_exp_mul,
        lambda x, y: torch.sin(x) * torch.exp(-x * x) * y,
        HandSinExpMul.apply,
        "sin_exp_mul",
    ),
    (
        "softplus(beta x)/beta",
        1,
        lambda x: gen.softplus_beta(x, 1.5),
        lambda x: F.softplus(1.5 * x) / 1.5,
        lambda x: HandSoftplusBeta.apply(x, 1.5),
        "softplus_beta",
    ),
]


# The transcendental functions each case computes (forward or backward), timed alone on its first input: one
# read and one write each, the floor's traffic for one op.  Where the fused time is a multiple of the floor, the
# slowest of them says which kernel keeps it away (on a CPU, libm-style vector code, not memory).
TRANSCENDENTALS: dict[str, tuple[tuple[str, Callable], ...]] = {
    "mish": (("softplus", F.softplus), ("tanh", torch.tanh), ("sigmoid", torch.sigmoid)),
    "gelu (erf)": (("erfc", torch.special.erfc), ("exp", torch.exp)),  # the generated gelu computes 1 + erf as erfc
    "gelu (tanh)": (("sigmoid", torch.sigmoid),),  # x sigmoid(2u) since stop 44, no tanh
    "swish": (("sigmoid", torch.sigmoid),),
    "softplus": (("softplus", F.softplus), ("sigmoid", torch.sigmoid)),
    "log1pexp": (("softplus", F.softplus), ("sigmoid", torch.sigmoid)),
    "sin(x)*exp(-x^2)*y": (("sin", torch.sin), ("cos", torch.cos), ("exp", torch.exp)),
    "softplus(beta x)/beta": (("softplus", F.softplus), ("sigmoid", torch.sigmoid)),
}


def slowest_op(name: str, x: torch.Tensor, rounds: int) -> str:
    """`op ms` of the slowest of the case's transcendental functions, the median of `rounds` calls each."""
    timed = []
    for op_name, op in TRANSCENDENTALS[name]:
        op(x)
        seconds = []
        for _ in range(rounds):
            start = time.perf_counter()
            op(x)
            seconds.append(time.perf_counter() - start)
        timed.append((statistics.median(seconds), op_name))
    seconds, op_name = max(timed)
    return f"{op_name} {seconds * 1e3:.2f}"


def fwd_bwd(f: Callable, xs: list[torch.Tensor]) -> float:
    leaves = [x.detach().requires_grad_() for x in xs]
    start = time.perf_counter()
    out = f(*leaves)
    out.backward(torch.ones_like(out))
    return time.perf_counter() - start


def forward_mode(f: Callable, xs: list[torch.Tensor]) -> float:
    """One JVP (torch.func.jvp, forward-mode AD), every input with a tangent."""
    start = time.perf_counter()
    torch.func.jvp(f, tuple(xs), tuple(torch.ones_like(x) for x in xs))
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


def copy_bandwidth(n: int, rounds: int = 20) -> float:
    """Bytes per second this machine moves in a float32 copy of n elements (read + write), the best of `rounds`.

    The best, not the median: the floor is what the machine can do, and a busy machine only slows a copy.
    """
    src, dst = torch.randn(n), torch.empty(n)
    dst.copy_(src)
    seconds = []
    for _ in range(rounds):
        start = time.perf_counter()
        dst.copy_(src)
        seconds.append(time.perf_counter() - start)
    return 2 * 4 * n / min(seconds)


def ideal_bytes(arity: int, n: int) -> int:
    """What a forward+backward of an elementwise rule must move at least, in float32.

    Forward: read the inputs, write the output. Backward: read the inputs (saved) and the
    output's cotangent, write one gradient per input.
    """
    return 4 * n * ((arity + 1) + (arity + 1) + arity)


def _ratio_cell(times: list[float], base: list[float]) -> str:
    """The median of the per-round ratios, with their min and max."""
    ratios = [a / b for a, b in zip(times, base, strict=True)]
    return f"{statistics.median(ratios):.2f} [{min(ratios):.2f}, {max(ratios):.2f}]"


TABLES = ("torch_eager",)
COLUMNS = ("gen/autodiff", "gen/hand", "`fuse`/autodiff", "jvp gen/autodiff", "saved MB gen/autodiff/hand/fused")


def layout(table: str = TABLES[0], log2n: int = 22) -> Layout:
    return Layout((f"torch eager, fwd+bwd, 2^{log2n} float32", *COLUMNS), tuple(case[0] for case in CASES))


def main(log2n: int, quick: bool = False) -> Table:
    """Prints the table as it measures; returns docs/performance.md's (medians, saved bytes)."""
    table = Table(list(layout(log2n=log2n).header))
    n = 1 << log2n
    rounds = 5 if quick else 40
    with tempfile.TemporaryDirectory() as tmp:
        fused = fused_package(Path(tmp))
    print(f"torch eager, float32, {n} elements, forward+backward, {rounds} interleaved rounds")
    columns = ["gen/autodiff", "gen/hand", "fused/autodiff", "jvp gen/autodiff"]
    bandwidth = copy_bandwidth(n)
    print(f"copy bandwidth {bandwidth / 1e9:.1f} GB/s (the floor: an ideal forward+backward's bytes at that rate)")
    print(
        f"{'case':<22} "
        + " ".join(f"{c:>22}" for c in columns)
        + f" {'saved MB gen/auto/hand/fused':>30} {'floor/gen/fused ms':>20} {'fused/floor':>11}"
        + f" {'slowest op alone, ms':>21} policy"
    )
    policies = rule_policies()
    for name, arity, generated, autodiff, hand, fused_name in CASES:
        gen_ = torch.Generator().manual_seed(0)
        xs = [torch.randn(n, generator=gen_) for _ in range(arity)]
        fused_rule = getattr(fused, fused_name)
        if fused_name == "softplus_beta":
            fused_rule = lambda x, f=fused_rule: f(x, 1.5)  # noqa: E731
        impls = [generated, autodiff, hand, fused_rule]
        for f in impls:  # warm-up; the fused rule compiles here
            for _ in range(2):
                fwd_bwd(f, xs)
        times: list[list[float]] = [[] for _ in impls]
        for _ in range(rounds):
            for k, f in enumerate(impls):
                times[k].append(fwd_bwd(f, xs))

        cells = [_ratio_cell(times[k], times[base]) for k, base in ((0, 1), (0, 2), (3, 1))]
        jvp_times: list[list[float]] = [[], []]
        for f in impls[:2]:
            forward_mode(f, xs)
        for _ in range(rounds):
            for k, f in enumerate(impls[:2]):
                jvp_times[k].append(forward_mode(f, xs))
        cells.append(_ratio_cell(jvp_times[0], jvp_times[1]))
        mb = "/".join(f"{saved_bytes(f, xs) / 2**20:.0f}" for f in impls)
        floor = ideal_bytes(arity, n) / bandwidth
        gen_s, fused_s = statistics.median(times[0]), statistics.median(times[3])
        ms = f"{floor * 1e3:.2f}/{gen_s * 1e3:.2f}/{fused_s * 1e3:.2f}"
        print(
            f"{name:<22} "
            + " ".join(f"{c:>22}" for c in cells)
            + f" {mb:>30} {ms:>20} {fused_s / floor:>10.1f}x {slowest_op(name, xs[0], rounds):>21}"
            + f" {policies[fused_name if generated.__name__ == '<lambda>' else generated.__name__]}"
        )
        table.add(name, *(cell.split()[0] for cell in cells), mb)
    function_floor(n, rounds)
    return table


def function_floor(n: int, rounds: int) -> None:
    """What an autograd.Function costs on a rule that autodiff already runs as one kernel each way."""
    xs = [torch.randn(n, generator=torch.Generator().manual_seed(0))]
    impls = [gen.f_softplus, F.softplus, FloorSoftplus.apply]
    for f in impls:
        fwd_bwd(f, xs)
    times: list[list[float]] = [[] for _ in impls]
    for _ in range(rounds):
        for k, f in enumerate(impls):
            times[k].append(fwd_bwd(f, xs))
    print(
        "softplus, the same two kernels (softplus, softplus_backward) everywhere: "
        f"minimal torch.func-style Function/autodiff {_ratio_cell(times[2], times[1])}, "
        f"generated/autodiff {_ratio_cell(times[0], times[1])}"
    )


if __name__ == "__main__":
    asked = request(sys.argv[1:], TABLES)
    size, quick = size_and_quick(asked.rest, 22, __doc__ or "")
    with quiet_if(asked.markdown):
        measured = main(size, quick=quick)
    if asked.markdown:
        print(measured.markdown())
