"""The generated code now against the generated code of another commit: is anything slower?

    python -m benchmarks.against_commit REV [log2 of the element count, default 20] [--quick: 5 rounds]
                                            [--no-compile]

REV's generated/, as committed there, is imported beside today's as the
package `generated_at_rev` (its modules import one another relatively, and
its torch ops are named after their modules, so the two coexist in one
process). Every row runs the two interleaved (then, now, then, now ...) and
shows the median of the per-round ratios now / then, with their min and max,
so a loaded machine moves both alike (each side keeps its least time of
three tries a round): below 1 is faster now. The rows: the
elementwise cases of `benchmarks.torch_eager` (eager forward + backward,
`torch.func.jvp`, and forward + backward under `torch.compile` unless
`--no-compile`), those of `benchmarks.jax_jit` (`grad` and `jvp` under
`jax.jit`), and `polar`, all float32; then `benchmarks.model`'s training
step with its four functions from each commit (torch eager, torch.compile,
JAX jit). A function missing at either commit is named and skipped.
"""

from __future__ import annotations

import atexit
import importlib
import io
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import jax
import jax.numpy as jnp
import torch

from benchmarks import ROOT
from benchmarks.model import (
    FULL,
    JAX_GENERATED,
    QUICK,
    TORCH_GENERATED,
    Ops,
    _bound,
    _jax_loss,
    _jax_params,
    _torch_data,
    _torch_models,
    _torch_step,
)
from benchmarks.zoo_speed import _interleaved, _ratio_cell

#: The name REV's generated/ is imported under.
PACKAGE = "generated_at_rev"

#: (row, function, arity, statics) of the eager and compiled torch rows: torch_eager's cases and polar.
TORCH_CASES: tuple[tuple[str, str, int, tuple[float, ...]], ...] = (
    ("mish", "f_mish", 1, ()),
    ("gelu (erf)", "gelu", 1, ()),
    ("gelu (tanh)", "f_gelu_tanh", 1, ()),
    ("swish", "f_swish", 1, ()),
    ("softplus", "f_softplus", 1, ()),
    ("log1pexp", "log1pexp", 1, ()),
    ("sin(x)*exp(-x^2)*y", "sin_exp_mul", 2, ()),
    ("softplus(beta x)/beta", "softplus_beta", 1, (1.5,)),
    ("polar", "polar", 2, ()),
)

#: (row, function, arity) of the JAX rows: jax_jit's generated functions and polar; softmax and logsumexp on rows
#: of 1024.
JAX_CASES: tuple[tuple[str, str, int], ...] = (
    ("log1pexp", "log1pexp", 1),
    ("tanh", "f_tanh", 1),
    ("sin_mul", "sin_mul", 2),
    ("sin_exp_mul", "sin_exp_mul", 2),
    ("gelu", "gelu", 1),
    ("softmax", "softmax", 1),
    ("logsumexp", "logsumexp", 1),
    ("polar", "polar", 2),
)

ROWS_OF = {"softmax", "logsumexp"}


def generated_at(rev: str) -> Path:
    """Imports REV's committed generated/ as `PACKAGE` from a temporary folder (removed at exit); returns the
    package's folder."""
    folder = Path(tempfile.mkdtemp(prefix="rulegen-at-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "generated"], capture_output=True, check=True)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(folder, filter="data")
    (folder / "generated").rename(folder / PACKAGE)
    sys.path.insert(0, str(folder))
    return folder / PACKAGE


def _function(package: ModuleType, name: str, statics: tuple[float, ...] = ()) -> Callable | None:
    try:
        f = getattr(package, name)
    except AttributeError:
        return None
    return f if not statics else (lambda *xs: f(*xs, *statics))


def _outputs(out: object) -> tuple[torch.Tensor, ...]:
    return tuple(out) if isinstance(out, tuple | list) else (out,)  # type: ignore[arg-type]


def _torch_fwd_bwd(f: Callable, xs: list[torch.Tensor]) -> Callable[[], object]:
    def run() -> None:
        leaves = [x.detach().requires_grad_() for x in xs]
        outs = _outputs(f(*leaves))
        torch.autograd.backward(outs, [torch.ones_like(o) for o in outs])

    return run


def _torch_jvp(f: Callable, xs: list[torch.Tensor]) -> Callable[[], object]:
    return lambda: torch.func.jvp(f, tuple(xs), tuple(torch.ones_like(x) for x in xs))


def _torch_compiled(f: Callable, xs: list[torch.Tensor]) -> Callable[[], object]:
    def step(*leaves: torch.Tensor) -> tuple[torch.Tensor, ...]:
        outs = _outputs(f(*leaves))
        return torch.autograd.grad(outs, leaves, [torch.ones_like(o) for o in outs])

    compiled = torch.compile(step, dynamic=False)
    return lambda: compiled(*(x.detach().requires_grad_() for x in xs))


def _jax_summed(f: Callable) -> Callable:
    return lambda *xs: sum(jnp.sum(o) for o in jax.tree.leaves(f(*xs)))


def _jax_grad(f: Callable, xs: list[jax.Array]) -> Callable[[], object]:
    grad = jax.jit(jax.grad(_jax_summed(f), argnums=tuple(range(len(xs)))))
    return lambda: jax.block_until_ready(grad(*xs))


def _jax_jvp(f: Callable, xs: list[jax.Array]) -> Callable[[], object]:
    jvp = jax.jit(lambda *p: jax.jvp(f, p, tuple(jnp.ones_like(x) for x in p)))
    return lambda: jax.block_until_ready(jvp(*xs))


def _now_over_then(then: Callable[[], object], now: Callable[[], object], rounds: int) -> str:
    """The median of the per-round ratios now / then, with their min and max; each side keeps its least time
    of three tries a round."""
    times = _interleaved([then, now], rounds)
    return _ratio_cell(times[1], times[0])


def _row(name: str, cells: list[str]) -> None:
    print(f"{name:<28} " + " ".join(f"{c:>20}" for c in cells), flush=True)


def torch_rows(then: ModuleType, now: ModuleType, n: int, rounds: int, compile_too: bool) -> None:
    columns = ["eager fwd+bwd", "torch.func.jvp", *(["compile fwd+bwd"] if compile_too else [])]
    _row("torch, now / then", columns)
    rng = torch.Generator().manual_seed(0)
    for name, function, arity, statics in TORCH_CASES:
        pair = [_function(package, function, statics) for package in (then, now)]
        if None in pair:
            _row(name, ["absent at one commit"])
            continue
        xs = [torch.randn(n, generator=rng) * 3 for _ in range(arity)]
        ways = [_torch_fwd_bwd, _torch_jvp, *([_torch_compiled] if compile_too else [])]
        cells = []
        for way in ways:
            torch._dynamo.reset()
            cells.append(_now_over_then(*(way(f, xs) for f in pair), rounds))
        _row(name, cells)


def jax_rows(then: ModuleType, now: ModuleType, n: int, rounds: int) -> None:
    _row("JAX jit, now / then", ["grad", "jvp"])
    key = jax.random.PRNGKey(0)
    for name, function, arity in JAX_CASES:
        pair = [_function(package, function) for package in (then, now)]
        if None in pair:
            _row(name, ["absent at one commit"])
            continue
        shape = (n // 1024, 1024) if name in ROWS_OF else (n,)
        xs = [3 * jax.random.normal(k, shape, jnp.float32) for k in jax.random.split(key, arity)]
        _row(name, [_now_over_then(*(way(f, xs) for f in pair), rounds) for way in (_jax_grad, _jax_jvp)])


def model_rows(then_torch: ModuleType, then_jax: ModuleType, quick: bool, rounds: int) -> None:
    size = QUICK if quick else FULL
    _row("model step, now / then", ["time"])
    torch_then = Ops(then_torch.gelu, then_torch.f_swish, then_torch.softmax, then_torch.logsumexp)
    x, labels = _torch_data(size)
    for compiled in (False, True):
        torch._dynamo.reset()
        models = _torch_models(size, torch_then, TORCH_GENERATED)
        runs = [_bound(_torch_step(model, compiled), x, labels) for model in models]
        _row(f"torch {'compile' if compiled else 'eager'} step", [_now_over_then(*runs, rounds)])
    jax_then = Ops(then_jax.gelu, then_jax.f_swish, then_jax.softmax, then_jax.logsumexp)
    params = _jax_params(size)
    rng = jax.random.PRNGKey(1)
    x_jax = jax.random.normal(rng, (size.batch, size.sequence, size.width), jnp.float32)
    labels_jax = jax.random.randint(rng, (size.batch, size.sequence), 0, size.classes)

    def step_of(ops: Ops) -> Callable[[], object]:
        grad = jax.jit(jax.value_and_grad(_jax_loss(ops, size)))
        return lambda: jax.block_until_ready(grad(params, x_jax, labels_jax))

    _row("jax jit step", [_now_over_then(step_of(jax_then), step_of(JAX_GENERATED), rounds)])


USAGE = __doc__.split("\n\n")[1]


def main(argv: list[str]) -> int:
    quick, compile_too = "--quick" in argv, "--no-compile" not in argv
    rest = [a for a in argv if a not in ("--quick", "--no-compile")]
    if not rest or len(rest) > 2 or (len(rest) == 2 and not rest[1].isdigit()):
        print(USAGE.strip(), file=sys.stderr)
        return 2
    rev, log2n = rest[0], int(rest[1]) if len(rest) == 2 else 20
    generated_at(rev)
    named = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", rev], capture_output=True, check=True)
    short = named.stdout.decode().strip()
    then_torch, then_jax = (importlib.import_module(f"{PACKAGE}.{f}") for f in ("torch", "jax"))
    now_torch, now_jax = (importlib.import_module(f"generated.{f}") for f in ("torch", "jax"))
    rounds = 5 if quick else 30
    start = time.perf_counter()
    print(f"generated/ now against {short}'s: float32, 2^{log2n} elements, {rounds} interleaved rounds")
    torch_rows(then_torch, now_torch, 1 << log2n, rounds, compile_too)
    jax_rows(then_jax, now_jax, 1 << log2n, rounds)
    model_rows(then_torch, then_jax, quick, rounds)
    print(f"({time.perf_counter() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
