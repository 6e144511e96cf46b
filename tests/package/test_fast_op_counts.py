"""Under `fast`, a rule whose written forward is admissible runs no more operations than autodiff of it.

Eager torch: the aten operations that write an array (torch's dispatcher), forward and backward together and
under `torch.func.jvp`.  JAX: the array operations of the compiled `jit(value_and_grad)`, fusions' bodies
included.  Each against the forward as written in plain torch or jax.numpy: a deterministic stand-in for the
times `python -m benchmarks.zoo_speed` measures (docs/performance.md, "The zoo under `fast`").
"""

from __future__ import annotations

import importlib
import math
import re
import sys
from collections import Counter
from collections.abc import Callable

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from rulegen.render.build import build

# From benchmarks/zoo/zoo.yaml, each with autodiff's forward as a user writes it.
RULES = """\
rules:
  - {name: z_squared_error, inputs: [x, y], forward: (x - y)**2 / 2}
  - {name: z_silu, inputs: [x], forward: x * sigmoid(x)}
  - {name: z_tanhshrink, inputs: [x], forward: x - tanh(x)}
  - {name: z_gamma2_log_prob, inputs: {x: {domain: [0.01, 10], assume: positive}}, forward: log(x) - x}
  - {name: z_poisson_nll, inputs: {r: {}, y: {domain: [0, 10]}}, forward: exp(r) - y * r}
  - {name: z_normal_log_prob, inputs: [x, mu], forward: -(x - mu)**2 / 2 - log(sqrt(2 * pi))}
  - {name: z_hinge_smooth, inputs: [z], forward: softplus(1 - z)}
  - {name: z_gaussian, inputs: [x], forward: exp(-x**2)}
  - {name: z_gelu_tanh, inputs: [x], forward: x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x**3))) / 2}
  - {name: z_logistic_log_prob, inputs: [x], forward: -x - 2 * log(1 + exp(-x))}
"""
WRITTEN: dict[str, Callable[..., torch.Tensor]] = {
    "z_squared_error": lambda x, y: (x - y) ** 2 / 2,
    "z_silu": lambda x: x * torch.sigmoid(x),
    "z_tanhshrink": lambda x: x - torch.tanh(x),
    "z_gamma2_log_prob": lambda x: torch.log(x) - x,
    "z_poisson_nll": lambda r, y: torch.exp(r) - y * r,
    "z_normal_log_prob": lambda x, mu: -((x - mu) ** 2) / 2 - math.log(math.sqrt(2 * math.pi)),
    "z_hinge_smooth": lambda z: torch.nn.functional.softplus(1 - z),
    "z_gaussian": lambda x: torch.exp(-(x**2)),
    "z_gelu_tanh": lambda x: x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))) / 2,
}
WRITTEN_JAX = {
    "z_squared_error": lambda x, y: (x - y) ** 2 / 2,
    "z_normal_log_prob": lambda x, mu: -((x - mu) ** 2) / 2 - math.log(math.sqrt(2 * math.pi)),
}
#: Written forms that are inadmissible as autodiff differentiates them (nan where the exact derivative is 0:
#: -2 x exp(-x**2) past half the largest float, x**2 inf beside a tanh of 1), whose admissible forms read the
#: forward's function: the partial multiplies its integer last, and clamps only the factors that overflow.
READING = {
    "z_gaussian": lambda x: jnp.exp(-(x**2)),
    "z_gelu_tanh": lambda x: x * (1 + jnp.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))) / 2,
}


class _Kernels(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.count = Counter[str]()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if isinstance(out, torch.Tensor) and out.numel() > 1 and not func.is_view:
            self.count[func.__name__] += 1
        return out


def _fwd_bwd(f: Callable[..., torch.Tensor], arrays: list[torch.Tensor]) -> int:
    leaves = [a.clone().requires_grad_() for a in arrays]
    g = torch.ones_like(arrays[0])
    with _Kernels() as counted:
        f(*leaves).backward(g)
    return sum(counted.count.values())


def _jvp(f: Callable[..., torch.Tensor], arrays: list[torch.Tensor]) -> int:
    tangents = tuple(torch.ones_like(a) for a in arrays)
    with _Kernels() as counted:
        torch.func.jvp(f, tuple(arrays), tangents)
    return sum(counted.count.values())


@pytest.fixture(scope="module")
def fast(tmp_path_factory):
    root = tmp_path_factory.mktemp("fast")
    (root / "zoo.yaml").write_text(RULES)
    build([root / "zoo.yaml"], root / "zoo_fast_kernels", accuracy="fast")
    sys.path.insert(0, str(root))
    try:
        yield importlib.import_module("zoo_fast_kernels.torch"), importlib.import_module("zoo_fast_kernels.jax")
    finally:
        sys.path.remove(str(root))


@pytest.mark.parametrize("name", sorted(WRITTEN))
def test_no_more_kernels_than_autodiff_of_the_written_forward(fast, name):
    generated, written = getattr(fast[0], name), WRITTEN[name]
    count = written.__code__.co_argcount
    arrays = [torch.linspace(0.5, 3.0, 64, dtype=torch.float32) + k for k in range(count)]
    assert _fwd_bwd(generated, arrays) <= _fwd_bwd(written, arrays)
    # z_gamma2_log_prob's partial 1/x - 1 multiplies a tangent term by term, x_dot / x - x_dot, as autodiff's
    # does: computed whole, then multiplied, it was a reciprocal, a subtraction and a product (6 kernels to 5).
    assert _jvp(generated, arrays) <= _jvp(written, arrays)


def _compiled_operations(f: Callable, arrays: list) -> int:
    """The array operations of `jit(value_and_grad(sum of f**2))` as XLA compiles it: each fusion's body counted,
    so an input read again by a second fusion is counted again."""
    return sum(_compiled_operation_names(f, arrays).values())


def _compiled_operation_names(f: Callable, arrays: list) -> Counter[str]:
    import jax

    grad = jax.jit(jax.value_and_grad(lambda *a: (f(*a) ** 2).sum(), tuple(range(len(arrays)))))
    text = grad.lower(*arrays).compile().as_text()
    operation = re.compile(rf"= f32\[{arrays[0].size}\]\S* (\w[\w-]*)\(")
    ignored = {"parameter", "broadcast", "constant", "fusion", "bitcast", "copy"}
    return Counter(m.group(1) for m in map(operation.search, text.splitlines()) if m and m.group(1) not in ignored)


@pytest.mark.parametrize("name", sorted(WRITTEN_JAX))
def test_a_shared_factor_is_multiplied_once_under_jit(fast, name):
    import jax.numpy as jnp

    arrays = [jnp.linspace(0.5, 3.0, 4096, dtype=jnp.float32) + k for k in range(2)]
    generated = getattr(fast[1], name)
    assert _compiled_operations(generated, arrays) <= _compiled_operations(WRITTEN_JAX[name], arrays)


#: Written forms that overflow (exp(-x) past x = -88 in float32), whose stable forms are as cheap under jit.
STABLE_JAX = {"z_logistic_log_prob": lambda x: -x - 2 * jnp.log(1 + jnp.exp(-x))}
#: XLA's transcendental operations, which cost as much as tens of arithmetic ones.
TRANSCENDENTAL = frozenset({"exponential", "log", "log-plus-one", "exponential-minus-one", "logistic", "tanh"})


def _split(counted: Counter[str]) -> tuple[int, int]:
    """(transcendental operations, the others)."""
    calls = sum(n for name, n in counted.items() if name in TRANSCENDENTAL)
    return calls, sum(counted.values()) - calls


@pytest.mark.parametrize("name", sorted(STABLE_JAX))
def test_an_even_stable_form_runs_no_more_operations_under_jit(fast, name):
    # The logistic log-density by the sign of x was a `where` of two forms, each with its softplus as a `where`
    # of its own (24 operations for grad, 21 for jvp, against autodiff's 16 and 12): even in x, it is one form
    # at |x|, -|x| - 2 log1p(exp(-|x|)), its softplus of an argument below 0 one log1p of the exp its partial's
    # sigmoid reads (without it, two exps).  One arithmetic operation more than autodiff's is the |x| that the
    # primal function, which a custom_jvp calls apart, computes beside the tangent's.
    arrays = [jnp.linspace(-3.0, 3.0, 4096, dtype=jnp.float32)]
    generated = getattr(fast[1], name)
    for count in (_compiled_operation_names, _compiled_jvp_operation_names):
        calls, others = _split(count(generated, arrays))
        written_calls, written_others = _split(count(STABLE_JAX[name], arrays))
        assert calls <= written_calls and others <= written_others + 1, (count.__name__, calls, others)


def _compiled_jvp_operations(f: Callable, arrays: list) -> int:
    """The array operations of `jit(jvp(f))` as XLA compiles it (as `_compiled_operations` counts them)."""
    return sum(_compiled_jvp_operation_names(f, arrays).values())


def _compiled_jvp_operation_names(f: Callable, arrays: list) -> Counter[str]:
    import jax

    jvp = jax.jit(lambda *a: jax.jvp(f, a, tuple(jnp.ones_like(b) for b in a)))
    text = jvp.lower(*arrays).compile().as_text()
    operation = re.compile(rf"= f32\[{arrays[0].size}\]\S* (\w[\w-]*)\(")
    ignored = {"parameter", "broadcast", "constant", "fusion", "bitcast", "copy"}
    return Counter(m.group(1) for m in map(operation.search, text.splitlines()) if m and m.group(1) not in ignored)


def test_a_shared_negated_value_is_subtracted_under_jit(fast):
    # cse shared -exp(r) of the Poisson NLL's exp(r) - r y and its partial exp(r) - y, read back as -r y - t0 and
    # -t0 - y: three negations where autodiff's jvp has none (8 operations against 5).  Shared as exp(r), each
    # use subtracts it; the one negation left is the held input's partial, -r, which `summed_like` multiplies.
    arrays = [jnp.linspace(0.5, 3.0, 4096, dtype=jnp.float32) + k for k in range(2)]
    generated = _compiled_jvp_operation_names(fast[1].z_poisson_nll, arrays)
    written = _compiled_jvp_operation_names(lambda r, y: jnp.exp(r) - y * r, arrays)
    assert generated["negate"] <= 1, generated
    assert sum(generated.values()) - generated["negate"] <= sum(written.values()) - written["negate"], generated


@pytest.mark.parametrize("name", sorted(READING))
def test_a_partial_that_reads_the_forward_runs_no_more_operations_under_jit(fast, name):
    arrays = [jnp.linspace(0.5, 3.0, 4096, dtype=jnp.float32)]
    generated = getattr(fast[1], name)
    assert _compiled_operations(generated, arrays) <= _compiled_operations(READING[name], arrays)
    assert _compiled_jvp_operations(generated, arrays) <= _compiled_jvp_operations(READING[name], arrays)


@pytest.mark.parametrize("name", sorted(READING))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_partial_that_reads_the_forward_is_finite_far_out(fast, name, dtype):
    # Where autodiff of the written forward is nan, at the largest floats and past x**2's overflow, the exact
    # value and derivative round to 0 or x and 1.
    import jax

    top = float(torch.finfo(dtype).max)
    values = [v for m in (1.0, 3.0, 1e4, math.sqrt(top) * 2, top / 1.5, top) for v in (m, -m)]
    x = torch.tensor(values, dtype=dtype, requires_grad=True)
    (slope,) = torch.autograd.grad(getattr(fast[0], name)(x).sum(), x)
    _, tangent = torch.func.jvp(getattr(fast[0], name), (x.detach(),), (torch.ones_like(x.detach()),))
    assert torch.isfinite(slope).all() and torch.isfinite(tangent).all()
    point = jnp.asarray(values, dtype=jnp.float32 if dtype == torch.float32 else jnp.float64)  # x64: conftest
    generated = getattr(fast[1], name)
    _, jax_tangent = jax.jvp(generated, (point,), (jnp.ones_like(point),))
    assert np.isfinite(np.asarray(jax.vmap(jax.grad(generated))(point))).all()
    assert np.isfinite(np.asarray(jax_tangent)).all()
