"""A transformer-style training step with generated rules against the frameworks' native ops.

    python -m benchmarks.model [--quick] [--rounds N] [--markdown [--table model|gelu_tail]]

One pre-norm block (attention with a softmax, an MLP whose hidden layer is
gelu(x W1) * swish(x W2)) and a logsumexp cross-entropy loss, float32 on the
CPU, batch x sequence x width = 4 x 128 x 256 (4 heads, 1024 classes; `--quick`:
2 x 32 x 64). Two variants of each model differ only in four functions:
`F.gelu`, `F.silu`, `torch.softmax`, `torch.logsumexp` (JAX: `jax.nn.*`)
against `generated.torch.gelu`, `f_swish`, `softmax`, `logsumexp`.

Rows: one training step (forward, backward, an SGD update) in torch eager,
under `torch.compile`, and in JAX under `jit`; then forward-mode lines,
`jacfwd` of the loss with respect to a small input slice and a Hessian-vector
product (forward over reverse). The torch lines indented under them compare
with the native model but for its gelu, `F.gelu` replaced by the erfc form
JAX's exact gelu computes: `F.gelu`'s own formula is thousands to millions of
eps off below x = -4, the generated one within 1 eps, and that accuracy has a
price that the lines against `F.gelu` include. The JAX lines indented so
compare with `jax.nn.gelu` differentiated by the density of x itself
(`jax.nn.gelu`'s autodiff reads it at the rounded x/sqrt(2), 63 eps off at
x = -12 where the generated derivative keeps 1.4). The "alone" lines
generate one of the four functions at a time in the native model: where a
step's ratio comes from. Each row runs the two variants interleaved
(native, generated, native, ...) and shows the median of the per-round ratios
generated / native with their min and max, so a noisy machine moves both
alike. Peak memory: torch, the rise of the process's resident set during one
step (Linux's peak-RSS counter, reset before the step; the benchmark runs
itself again with a fixed glibc mmap threshold, so that a freed tensor leaves
the resident set); JAX, the compiled step's temporary buffers
(`memory_analysis`). `--markdown` prints the rows as docs/performance.md's table; with
`--table gelu_tail` it prints instead (timing nothing) the float32 relative error, in eps, of
`F.gelu`, autodiff of its formula and the generated gelu against mpmath in gelu's left tail.
"""

from __future__ import annotations

import gc
import math
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812 - the conventional alias

import generated.jax as gen_jax
import generated.torch as gen_torch
from benchmarks.table import Layout, Table, quiet_if, request


@dataclass(frozen=True)
class Size:
    batch: int
    sequence: int
    width: int
    heads: int
    classes: int


FULL = Size(batch=4, sequence=128, width=256, heads=4, classes=1024)
QUICK = Size(batch=2, sequence=32, width=64, heads=2, classes=128)


@dataclass(frozen=True)
class Ops:
    """The four functions the variants differ in, each over the last axis where it reduces."""

    gelu: Callable
    swish: Callable
    softmax: Callable
    logsumexp: Callable


TORCH_NATIVE = Ops(F.gelu, F.silu, lambda s: torch.softmax(s, dim=-1), lambda z: torch.logsumexp(z, dim=-1))
TORCH_GENERATED = Ops(gen_torch.gelu, gen_torch.f_swish, gen_torch.softmax, gen_torch.logsumexp)
# F.gelu computes 1 + erf(x / sqrt(2)), whose cancellation puts its value and gradient 140 to 8.4e6 eps off
# from x = -4 down in float32; the generated gelu is within 1 eps of exact there.  JAX's exact gelu is the erfc
# form, within 82 eps: the same formula in torch is the native reference of (nearly) equal accuracy, as
# issue 28 takes a hand-written softplus/sigmoid rule for log1pexp.
TORCH_NATIVE_ERFC_GELU = replace(TORCH_NATIVE, gelu=lambda x: 0.5 * x * torch.special.erfc(-x * math.sqrt(0.5)))
# jax.nn.logsumexp reduces over every axis unless told otherwise (jax.nn.softmax takes the last by default).
JAX_NATIVE = Ops(
    lambda x: jax.nn.gelu(x, approximate=False),
    jax.nn.silu,
    jax.nn.softmax,
    lambda z: jax.nn.logsumexp(z, axis=-1),
)
JAX_GENERATED = Ops(gen_jax.gelu, gen_jax.f_swish, gen_jax.softmax, gen_jax.logsumexp)


@jax.custom_jvp
def _gelu_exact_density(x: jax.Array) -> jax.Array:
    return jax.nn.gelu(x, approximate=False)


@_gelu_exact_density.defjvp
def _gelu_exact_density_jvp(primals, tangents):
    # jax.nn.gelu's autodiff reads exp(-u*u) of the rounded u = x/sqrt(2) (XLA shares it with erfc's own), 63
    # float32 eps off at x = -12; the density of x itself keeps 1.4, as the generated gelu's does.
    (x,), (x_dot,) = primals, tangents
    cdf = 0.5 * jax.scipy.special.erfc(-x * math.sqrt(0.5))
    return x * cdf, x_dot * (cdf + x * jnp.exp(-0.5 * x * x) / math.sqrt(2 * math.pi))


# jax.nn.gelu with a derivative as accurate as the generated one's, the JAX twin of TORCH_NATIVE_ERFC_GELU.
JAX_NATIVE_EXACT_DENSITY = replace(JAX_NATIVE, gelu=_gelu_exact_density)
FUNCTIONS = ("gelu", "swish", "softmax", "logsumexp")
KINDS = ("eager", "compile")  # torch's two ways of running a step


def one_generated(native: Ops, generated: Ops) -> list[tuple[str, Ops]]:
    """The native ops with one function generated, for each of the four: where a step's ratio comes from."""
    return [(name, replace(native, **{name: getattr(generated, name)})) for name in FUNCTIONS]


class Block(torch.nn.Module):
    def __init__(self, size: Size, ops: Ops) -> None:
        super().__init__()
        self.size, self.ops = size, ops
        w = size.width
        self.norm1, self.norm2 = torch.nn.LayerNorm(w), torch.nn.LayerNorm(w)
        self.qkv, self.proj = torch.nn.Linear(w, 3 * w), torch.nn.Linear(w, w)
        self.up_gelu, self.up_swish = torch.nn.Linear(w, 4 * w), torch.nn.Linear(w, 4 * w)
        self.down = torch.nn.Linear(4 * w, w)
        self.head = torch.nn.Linear(w, size.classes)

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        b, s, w = x.shape
        h = self.size.heads
        q, k, v = self.qkv(x).view(b, s, 3, h, w // h).permute(2, 0, 3, 1, 4)
        weights = self.ops.softmax(q @ k.transpose(-1, -2) / math.sqrt(w // h))
        return self.proj((weights @ v).transpose(1, 2).reshape(b, s, w))

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.norm1(x))
        y = self.norm2(x)
        x = x + self.down(self.ops.gelu(self.up_gelu(y)) * self.ops.swish(self.up_swish(y)))
        logits = self.head(x)
        picked = torch.gather(logits, -1, labels[..., None])[..., 0]
        return (self.ops.logsumexp(logits) - picked).mean()


def _torch_models(size: Size, reference: Ops = TORCH_NATIVE, candidate: Ops = TORCH_GENERATED) -> tuple[Block, Block]:
    torch.manual_seed(0)
    native = Block(size, reference)
    generated = Block(size, candidate)
    generated.load_state_dict(native.state_dict())
    return native, generated


def _torch_data(size: Size) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(size.batch, size.sequence, size.width, generator=g)
    labels = torch.randint(0, size.classes, (size.batch, size.sequence), generator=g)
    return x, labels


def _torch_step(model: Block, compiled: bool) -> Callable[[torch.Tensor, torch.Tensor], float]:
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    loss_of = torch.compile(model) if compiled else model

    def step(x: torch.Tensor, labels: torch.Tensor) -> float:
        optimizer.zero_grad(set_to_none=True)
        loss = loss_of(x, labels)
        loss.backward()
        optimizer.step()
        return float(loss.detach())

    return step


def _bound(step: Callable[[torch.Tensor, torch.Tensor], float], x, labels) -> Callable[[], float]:
    return lambda: step(x, labels)


def _seconds(run: Callable[[], object]) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def _interleaved(native: Callable[[], object], generated: Callable[[], object], rounds: int) -> list[float]:
    """Per-round ratios generated / native, each run once per round after a warm-up of both."""
    for _ in range(2):
        native(), generated()
    ratios = []
    for _ in range(rounds):
        base = _seconds(native)
        ratios.append(_seconds(generated) / base)
    return ratios


def _cell(ratios: list[float]) -> str:
    return f"{statistics.median(ratios):.2f} [{min(ratios):.2f}, {max(ratios):.2f}]"


def _peak_rss_rise(run: Callable[[], object]) -> int | None:
    """Bytes the resident set rose by at its peak during `run` (Linux: VmHWM reset by clear_refs)."""
    status, clear = Path("/proc/self/status"), Path("/proc/self/clear_refs")
    if not status.exists():
        return None

    def kib(field: str) -> int:
        line = next(line for line in status.read_text().splitlines() if line.startswith(field))
        return int(line.split()[1]) * 1024

    gc.collect()
    try:
        clear.write_text("5")
    except OSError:
        return None
    before = kib("VmRSS:")
    run()
    return max(0, kib("VmHWM:") - before)  # the counters move in pages: a step that frees can read a page below


def torch_rows(size: Size, rounds: int) -> list[tuple[str, str, str]]:
    x, labels = _torch_data(size)

    def step_row(name: str, reference: Ops, candidate: Ops, compiled: bool) -> tuple[str, str, str]:
        native, generated = _torch_models(size, reference, candidate)
        runs = [_bound(_torch_step(model, compiled), x, labels) for model in (native, generated)]
        ratios = _interleaved(*runs, rounds)  # warms up (and compiles) before the memory is read
        return name, _cell(ratios), _memory_cell(*map(_peak_rss_rise, runs))

    def forward_lines(reference: Ops, names: tuple[str, str]) -> list[tuple[str, str, str]]:
        native, generated = _torch_models(size, reference)
        return [
            (names[0], _cell(_torch_forward_mode(native, generated, x, labels, rounds)), ""),
            (names[1], _cell(_torch_hvp(native, generated, x, labels, rounds)), ""),
        ]

    rows = [step_row(f"torch {kind} step", TORCH_NATIVE, TORCH_GENERATED, kind == "compile") for kind in KINDS]
    rows += forward_lines(TORCH_NATIVE, ("torch jacfwd (input slice)", "torch hvp (fwd over rev)"))
    # The lines F.gelu's inaccurate formula decides, against its accurate form (TORCH_NATIVE_ERFC_GELU).
    erfc = TORCH_NATIVE_ERFC_GELU
    rows += [step_row(f"  {kind} step, erfc gelu", erfc, TORCH_GENERATED, kind == "compile") for kind in KINDS]
    rows += forward_lines(erfc, ("  jacfwd, erfc gelu", "  hvp, erfc gelu"))
    for name, ops in one_generated(TORCH_NATIVE, TORCH_GENERATED):
        rows.append(step_row(f"  eager step, {name} alone", TORCH_NATIVE, ops, False))
    return rows


def _torch_forward_mode(native: Block, generated: Block, x, labels, rounds: int) -> list[float]:
    # d loss / d x[0, 0, :8] over the first sequence: eight tangents pushed through the whole block.
    def jac(model: Block) -> Callable[[], object]:
        def loss_of_slice(piece: torch.Tensor) -> torch.Tensor:
            first = torch.cat([piece, x[0, 0, 8:]])
            return model(torch.cat([first[None], x[0, 1:]])[None], labels[:1])

        return lambda: torch.func.jacfwd(loss_of_slice)(x[0, 0, :8])

    with torch.no_grad():
        return _interleaved(jac(native), jac(generated), rounds)


def _torch_hvp(native: Block, generated: Block, x, labels, rounds: int) -> list[float]:
    def hvp(model: Block) -> Callable[[], object]:
        def loss_of_input(inp: torch.Tensor) -> torch.Tensor:
            return model(inp, labels)

        tangent = torch.ones_like(x)
        return lambda: torch.func.jvp(torch.func.grad(loss_of_input), (x,), (tangent,))

    return _interleaved(hvp(native), hvp(generated), rounds)


def _memory_cell(native: int | None, generated: int | None) -> str:
    if native is None or generated is None:
        return "n/a"
    return f"{generated / 2**20:.1f} / {native / 2**20:.1f} MiB"


def _jax_params(size: Size) -> dict[str, jax.Array]:
    rng = np.random.default_rng(0)
    w, c = size.width, size.classes

    def dense(n_in: int, n_out: int) -> jax.Array:
        return jnp.asarray(rng.standard_normal((n_in, n_out), dtype=np.float32) / math.sqrt(n_in))

    return {
        "qkv": dense(w, 3 * w),
        "proj": dense(w, w),
        "up_gelu": dense(w, 4 * w),
        "up_swish": dense(w, 4 * w),
        "down": dense(4 * w, w),
        "head": dense(w, c),
    }


def _layer_norm(x: jax.Array) -> jax.Array:
    mean = x.mean(-1, keepdims=True)
    return (x - mean) / jnp.sqrt(((x - mean) ** 2).mean(-1, keepdims=True) + 1e-5)


def _jax_loss(ops: Ops, size: Size) -> Callable:
    def loss(params: dict[str, jax.Array], x: jax.Array, labels: jax.Array) -> jax.Array:
        b, s, w = x.shape
        h = size.heads
        q, k, v = (_layer_norm(x) @ params["qkv"]).reshape(b, s, 3, h, w // h).transpose(2, 0, 3, 1, 4)
        weights = ops.softmax(q @ k.swapaxes(-1, -2) / math.sqrt(w // h))
        x = x + (weights @ v).swapaxes(1, 2).reshape(b, s, w) @ params["proj"]
        y = _layer_norm(x)
        x = x + (ops.gelu(y @ params["up_gelu"]) * ops.swish(y @ params["up_swish"])) @ params["down"]
        logits = x @ params["head"]
        picked = jnp.take_along_axis(logits, labels[..., None], -1)[..., 0]
        return (ops.logsumexp(logits) - picked).mean()

    return loss


def jax_rows(size: Size, rounds: int) -> list[tuple[str, str, str]]:
    params = _jax_params(size)
    rng = np.random.default_rng(1)
    x = jnp.asarray(rng.standard_normal((size.batch, size.sequence, size.width), dtype=np.float32))
    labels = jnp.asarray(rng.integers(0, size.classes, (size.batch, size.sequence)))

    def train_step(ops: Ops) -> Callable:
        loss = _jax_loss(ops, size)

        @jax.jit
        def step(params: dict[str, jax.Array]) -> tuple[dict[str, jax.Array], jax.Array]:
            value, grads = jax.value_and_grad(loss)(params, x, labels)
            return jax.tree.map(lambda p, g: p - 1e-3 * g, params, grads), value

        return step

    def step_row(name: str, reference: Ops, candidate: Ops) -> tuple[str, str, str]:
        steps = train_step(reference), train_step(candidate)
        ratios = _interleaved(*(lambda step=step: jax.block_until_ready(step(params)) for step in steps), rounds)
        temp = [step.lower(params).compile().memory_analysis() for step in steps]
        memory = "n/a" if None in temp else f"{_temp(temp[1]) / 2**20:.1f} / {_temp(temp[0]) / 2**20:.1f} MiB"
        return name, _cell(ratios), memory

    def forward_mode(ops: Ops) -> Callable[[], object]:
        loss = _jax_loss(ops, size)
        jac = jax.jit(jax.jacfwd(lambda piece: loss(params, x[:1].at[0, 0, :8].set(piece), labels[:1])))
        return lambda: jax.block_until_ready(jac(x[0, 0, :8]))

    def hvp(ops: Ops) -> Callable[[], object]:
        grad = jax.grad(lambda inp: _jax_loss(ops, size)(params, inp, labels))
        product = jax.jit(lambda inp: jax.jvp(grad, (inp,), (jnp.ones_like(inp),))[1])
        return lambda: jax.block_until_ready(product(x))

    def lines(reference: Ops, names: tuple[str, str, str]) -> list[tuple[str, str, str]]:
        jac = _interleaved(forward_mode(reference), forward_mode(JAX_GENERATED), rounds)
        product = _interleaved(hvp(reference), hvp(JAX_GENERATED), rounds)
        return [
            step_row(names[0], reference, JAX_GENERATED),
            (names[1], _cell(jac), ""),
            (names[2], _cell(product), ""),
        ]

    # The lines jax.nn.gelu's derivative decides, against one as accurate as the generated gelu's.
    rows = lines(JAX_NATIVE, ("jax jit step", "jax jacfwd (input slice)", "jax hvp (fwd over rev)"))
    rows += lines(
        JAX_NATIVE_EXACT_DENSITY, tuple(f"  {row}, exact-density gelu" for row in ("jit step", "jacfwd", "hvp"))
    )
    rows += [
        step_row(f"  jit step, {name} alone", JAX_NATIVE, ops) for name, ops in one_generated(JAX_NATIVE, JAX_GENERATED)
    ]
    return rows


def _temp(analysis: object) -> int:
    return int(getattr(analysis, "temp_size_in_bytes", 0))


TABLES = ("model", "gelu_tail")
HEADER = ("step, generated / native", "time: median [min, max]", "peak memory gen / native")
TAIL = (-12.0, -8.0, -6.0, -5.0, -4.0, -3.0)
TAIL_GELUS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "`F.gelu` (native)": F.gelu,
    "autodiff of `x (1 + erf(x/sqrt 2)) / 2`": lambda x: x * (1 + torch.erf(x / math.sqrt(2))) / 2,
    "generated `gelu`": gen_torch.gelu,
}


def _eps_cell(value: float) -> str:
    """An error in eps as docs/performance.md writes it: two digits, powers of ten from 10^4."""
    if value >= 1e4:
        mantissa, exponent = f"{value:.1e}".split("e")
        return f"{mantissa}e{int(exponent)}"
    if value >= 100:
        return f"{float(f'{value:.2g}'):.0f}"
    if value >= 10:
        return f"{value:.0f}"
    return f"{value:.1f}" if value >= 1 else f"{value:.1g}"


def gelu_tail() -> Table:
    """float32 relative error / eps of value and derivative at `TAIL`, against mpmath at the float32 points."""
    import mpmath

    mpmath.mp.dps = 50
    eps = torch.finfo(torch.float32).eps
    table = Table(list(layout("gelu_tail").header))
    for name, gelu in TAIL_GELUS.items():
        cells = []
        for point in TAIL:
            x = torch.tensor([point], dtype=torch.float32, requires_grad=True)
            out = gelu(x)
            (grad,) = torch.autograd.grad(out.sum(), x)
            m = mpmath.mpf(float(x.detach()))
            phi = mpmath.exp(-(m**2) / 2) / mpmath.sqrt(2 * mpmath.pi)
            cdf = mpmath.ncdf(m)
            errors = [
                float(abs((mpmath.mpf(float(got)) - exact) / exact)) / eps
                for got, exact in ((out.detach(), m * cdf), (grad, cdf + m * phi))
            ]
            cells.append(" / ".join(_eps_cell(e) for e in errors))
        table.add(name, *cells)
    return table


def layout(table: str = TABLES[0]) -> Layout:
    if table == "gelu_tail":
        return Layout(("x", *(f"{x:g}" for x in TAIL)), tuple(TAIL_GELUS))
    """The rows' labels, as `torch_rows` and `jax_rows` name them (the indented ones are stripped)."""
    labels = [f"torch {kind} step" for kind in KINDS] + ["torch jacfwd (input slice)", "torch hvp (fwd over rev)"]
    labels += [f"{kind} step, erfc gelu" for kind in KINDS] + ["jacfwd, erfc gelu", "hvp, erfc gelu"]
    names = [name for name, _ in one_generated(TORCH_NATIVE, TORCH_GENERATED)]
    labels += [f"eager step, {name} alone" for name in names]
    labels += ["jax jit step", "jax jacfwd (input slice)", "jax hvp (fwd over rev)"]
    labels += [f"{row}, exact-density gelu" for row in ("jit step", "jacfwd", "hvp")]
    labels += [f"jit step, {name} alone" for name in names]
    return Layout(HEADER, tuple(labels))


def _rows(size: Size, rounds: int) -> list[tuple[str, str, str]]:
    """Every row, in `layout()`'s order (checked: the docs' table is compared with `layout()`)."""
    rows = [*torch_rows(size, rounds), *jax_rows(size, rounds)]
    labels = tuple(name.strip() for name, _, _ in rows)
    if labels != layout().labels:
        raise AssertionError(f"the rows {labels} are not layout()'s {layout().labels}")
    return rows


def main(argv: list[str]) -> int:
    if os.environ.get("MALLOC_MMAP_THRESHOLD_") is None and sys.platform == "linux":
        # glibc raises its mmap threshold as large blocks are freed, after which freed tensors stay
        # resident and the peak-RSS rise reads 0: a fixed threshold returns each large block on free.
        env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": str(64 * 1024)}
        os.execve(sys.executable, [sys.executable, "-m", "benchmarks.model", *argv], env)
    asked = request(argv, TABLES)
    argv = asked.rest
    quick = "--quick" in argv
    rounds = int(argv[argv.index("--rounds") + 1]) if "--rounds" in argv else (3 if quick else 15)
    size = QUICK if quick else FULL
    if asked.markdown and asked.table == "gelu_tail":
        print(gelu_tail().markdown())
        return 0
    if asked.markdown:
        with quiet_if(True):
            rows = _rows(size, rounds)
        table = Table(list(HEADER))
        for row in rows:
            table.add(*row)
        print(table.markdown())
        return 0
    print(
        f"model step, float32, batch {size.batch} x sequence {size.sequence} x width {size.width}, "
        f"{size.heads} heads, {size.classes} classes; {rounds} interleaved rounds, generated / native"
    )
    rows = _rows(size, rounds)
    print(f"{'':32} {'time: median [min, max]':>26} {'peak memory gen / native':>26}")
    for name, time_cell, memory_cell in rows:
        print(f"{name:32} {time_cell:>26} {memory_cell:>26}".rstrip())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
