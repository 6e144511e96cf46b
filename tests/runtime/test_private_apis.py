"""The private framework APIs the runtime helpers use: each probed as the runtime uses it.

`rulegen.derive.floors.PRIVATE_APIS` lists them with the releases they were
checked on and what happens without them.  A probe that fails names the
installed release, the checked one and that fallback; the table must list
every private API a runtime helper uses (a scan of their source), and a torch
or JAX that lacks one fails at the package's import, saying which.
"""

from __future__ import annotations

import importlib
import pathlib
import sys
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from rulegen.derive import functions
from rulegen.derive.floors import (
    PRIVATE_APIS,
    PRIVATE_APIS_CHECKED_ON,
    floors_of,
    private_api_row,
    private_apis_used,
)
from rulegen.render.layout import RUNTIME
from rulegen.runtime import _private

FRAMEWORKS = {"torch": torch, "jax": jax}
X = torch.tensor([0.3, -1.2, 2.5], dtype=torch.float64)


def _inside(transform: Callable, probe: Callable[[torch.Tensor], None]) -> None:
    """Run `probe` on the tensor a torch.func transform hands its function."""

    def function(x):
        probe(x)
        return x

    if transform is torch.func.jvp:
        torch.func.jvp(function, (X,), (torch.ones_like(X),))
    else:
        transform(function)(X)


def _transforms_active():
    from torch._C import _are_functorch_transforms_active

    assert _are_functorch_transforms_active() is False
    _inside(torch.func.vmap, lambda x: _is(_are_functorch_transforms_active(), True))


def _is(value, expected):
    assert value is expected, f"{value!r} where {expected!r} was expected"


def _peek():
    from torch._C._functorch import peek_interpreter_stack

    assert peek_interpreter_stack() is None
    _inside(torch.func.vmap, lambda x: _is(peek_interpreter_stack() is not None, True))


def _interpreter_stack():
    from torch._C._functorch import TransformType, get_interpreter_stack

    def inner(x):
        assert [i.key() for i in get_interpreter_stack()] == [TransformType.Jvp, TransformType.Jvp]
        return x

    torch.func.jvp(lambda t: torch.func.jvp(inner, (t,), (t,))[1], (X,), (X,))
    _inside(torch.func.vmap, lambda x: _is([i.key() for i in get_interpreter_stack()] == [TransformType.Vmap], True))


def _wrapped():
    from torch._C._functorch import is_functorch_wrapped_tensor

    assert not is_functorch_wrapped_tensor(X)
    _inside(torch.func.vmap, lambda x: _is(is_functorch_wrapped_tensor(x), True))
    _inside(torch.func.jvp, lambda x: _is(is_functorch_wrapped_tensor(x), True))


def _legacy_batched():
    from torch._C._functorch import is_legacy_batchedtensor
    from torch._vmap_internals import _vmap

    assert not is_legacy_batchedtensor(X)
    seen = []
    _vmap(lambda t: seen.append(is_legacy_batchedtensor(t)) or t, 0, 0)(torch.ones(2, 3))
    assert seen == [True]


def _layer_stack():
    from torch._C._functorch import peek_interpreter_stack, pop_dynamic_layer_stack, push_dynamic_layer_stack

    def probe(x):
        popped = pop_dynamic_layer_stack()
        assert peek_interpreter_stack() is None
        push_dynamic_layer_stack(popped)
        assert peek_interpreter_stack() is not None

    _inside(torch.func.vmap, probe)


def _batch_dims():
    from torch._C._functorch import _add_batch_dim, _unwrap_batched
    from torch._functorch.vmap import vmap_increment_nesting

    with vmap_increment_nesting(3, "error") as level:
        assert isinstance(level, int)
        batched = _add_batch_dim(X, 0, level)
        value, dim = _unwrap_batched(batched, level)
    assert dim == 0 and torch.equal(value, X)


def _grad_wrappers():
    from torch._C._functorch import _unwrap_for_grad, _wrap_for_grad, is_functorch_wrapped_tensor
    from torch._functorch.pyfunctorch import retrieve_all_functorch_interpreters

    def probe(x):
        (jvp_level,) = retrieve_all_functorch_interpreters()
        level = jvp_level.level()
        assert isinstance(jvp_level.prev_fwd_grad_mode(), bool)
        plain = _unwrap_for_grad(x, level)
        assert not is_functorch_wrapped_tensor(plain) and torch.equal(plain, X)
        assert is_functorch_wrapped_tensor(_wrap_for_grad(plain, level))

    _inside(torch.func.jvp, probe)


def _vmap_interpreters():
    from torch._functorch.pyfunctorch import retrieve_all_functorch_interpreters

    def probe(x):
        (vmap_level,) = retrieve_all_functorch_interpreters()
        assert vmap_level.batch_size() == len(X) and vmap_level.randomness() == "error"

    _inside(torch.func.vmap, probe)


def _interpreters():
    _grad_wrappers()
    _vmap_interpreters()


def _fwd_grad_enabled():
    from torch.autograd.forward_ad import _set_fwd_grad_enabled

    with _set_fwd_grad_enabled(False):
        assert not torch._C._is_fwd_grad_enabled()
    assert torch._C._is_fwd_grad_enabled()


def _frame_strategy():
    from torch._C._dynamo.eval_frame import _FrameAction, _FrameExecStrategy, set_code_exec_strategy

    def skipped():
        return 1

    set_code_exec_strategy(skipped.__code__, _FrameExecStrategy(_FrameAction.SKIP, _FrameAction.SKIP))
    assert skipped() == 1


def _read_by_dynamo(attribute: str) -> Callable[[], None]:
    def probe():
        sources = (pathlib.Path(torch.__file__).parent / "_dynamo").rglob("*.py")
        readers = [p.name for p in sources if f'"{attribute}"' in p.read_text() or f".{attribute}" in p.read_text()]
        assert readers, f"no module of torch._dynamo reads {attribute}"

    return probe


def _is_view():
    assert X.view(3)._is_view() and not X.clone()._is_view()


def _efficient_zero():
    zero = torch._efficientzerotensor(X.shape, dtype=X.dtype, device=X.device)
    assert zero._is_zerotensor()
    assert torch.equal(zero * torch.tensor([np.inf, np.nan, 1.0], dtype=X.dtype), torch.zeros_like(X))


def _aten(name: str) -> Callable[[], None]:
    def probe():
        grad = torch.tensor([1.0, -2.0, 0.5], dtype=X.dtype)
        op = getattr(torch.ops.aten, name)
        s, t = torch.sigmoid(X), torch.tanh(X)
        found, expected = {
            "tanh_backward": (lambda: op(grad, t), lambda: grad * (1 - t**2)),
            "sigmoid_backward": (lambda: op(grad, s), lambda: grad * s * (1 - s)),
            "silu_backward": (lambda: op(grad, X), lambda: grad * s * (1 + X * (1 - s))),
            "softplus_backward": (lambda: op(grad, X, 1.0, 20.0), lambda: grad * s),
        }[name]
        torch.testing.assert_close(found(), expected())

    return probe


def _custom_op_overload():
    @torch.library.custom_op("rulegen_private_probe::twice", mutates_args=())
    def twice(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x.clone(), x.clone()

    assert isinstance(twice._opoverload, torch._ops.OpOverload)
    assert len(twice._opoverload._schema.returns) == 2


def _dtensor_spec():
    from torch.distributed.tensor._dtensor_spec import DTensorSpec

    assert isinstance(DTensorSpec, type) and hasattr(DTensorSpec, "shape") and hasattr(DTensorSpec, "ndim")


def _jax_primitive():
    """A primitive with each rule the runtime registers: run, differentiated both ways, batched."""
    from jax.extend.core import Primitive
    from jax.interpreters import ad, batching, mlir

    seen = {}
    scale_p = Primitive("rulegen_private_probe_scale")

    def impl(a, x):
        return a * x

    def jvp(primals, tangents):
        a, x = primals
        da, dx = tangents
        seen["zero"] = type(da) is ad.Zero
        return scale_p.bind(a, x), scale_p.bind(a, ad.instantiate_zeros(dx))

    def transpose(cotangent, a, x):
        seen["undefined"] = (ad.is_undefined_primal(a), ad.is_undefined_primal(x))
        return None, scale_p.bind(a, cotangent)

    def batch(operands, dims):
        a, x = (jnp.moveaxis(v, d, 0) if d is not None else v for v, d in zip(operands, dims, strict=True))
        return scale_p.bind(a, x), 0

    scale_p.def_impl(impl)
    scale_p.def_abstract_eval(lambda a, x: x)
    mlir.register_lowering(scale_p, mlir.lower_fun(impl, multiple_results=False))
    ad.primitive_jvps[scale_p] = jvp
    ad.primitive_transposes[scale_p] = transpose
    batching.primitive_batchers[scale_p] = batch

    a, x = jnp.float32(3.0), jnp.arange(3.0)
    np.testing.assert_allclose(jax.jit(scale_p.bind)(a, x), 3 * x)
    _, tangent = jax.jvp(lambda x: scale_p.bind(a, x), (x,), (jnp.ones(3),))
    np.testing.assert_allclose(tangent, 3 * jnp.ones(3))
    assert seen.pop("zero") is True
    np.testing.assert_allclose(jax.grad(lambda x: scale_p.bind(a, x).sum())(x), 3 * jnp.ones(3))
    assert seen.pop("undefined") == (False, True)
    np.testing.assert_allclose(jax.vmap(lambda x: scale_p.bind(a, x))(jnp.ones((2, 3))), 3 * jnp.ones((2, 3)))


PROBES: dict[str, Callable[[], None]] = {
    "torch._C._are_functorch_transforms_active": _transforms_active,
    "torch._C._functorch.peek_interpreter_stack": _peek,
    "torch._C._functorch.get_interpreter_stack": _interpreter_stack,
    "torch._C._functorch.is_functorch_wrapped_tensor": _wrapped,
    "torch._C._functorch.is_legacy_batchedtensor": _legacy_batched,
    "torch._C._functorch.pop_dynamic_layer_stack": _layer_stack,
    "torch._C._functorch.push_dynamic_layer_stack": _layer_stack,
    "torch._C._functorch.TransformType": _interpreter_stack,
    "torch._C._functorch._add_batch_dim": _batch_dims,
    "torch._C._functorch._unwrap_batched": _batch_dims,
    "torch._C._functorch._unwrap_for_grad": _grad_wrappers,
    "torch._C._functorch._wrap_for_grad": _grad_wrappers,
    "torch._functorch.pyfunctorch.retrieve_all_functorch_interpreters": lambda: (
        _grad_wrappers(),
        _vmap_interpreters(),
    ),
    "torch._functorch.vmap.vmap_increment_nesting": _batch_dims,
    "torch.autograd.forward_ad._set_fwd_grad_enabled": _fwd_grad_enabled,
    "torch._C._dynamo.eval_frame._FrameAction": _frame_strategy,
    "torch._C._dynamo.eval_frame._FrameExecStrategy": _frame_strategy,
    "torch._C._dynamo.eval_frame.set_code_exec_strategy": _frame_strategy,
    "._torchdynamo_disable": _read_by_dynamo("_torchdynamo_disable"),
    "._torchdynamo_disable_recursive": _read_by_dynamo("_torchdynamo_disable_recursive"),
    "._torchdynamo_disable_msg": _read_by_dynamo("_torchdynamo_disable_msg"),
    "._dynamo_marked_constant": _read_by_dynamo("_dynamo_marked_constant"),
    "._is_view": _is_view,
    "torch._efficientzerotensor": _efficient_zero,
    **{f"torch.ops.aten.{name}": _aten(name) for name in ("tanh_backward", "sigmoid_backward", "silu_backward")},
    "torch.ops.aten.softplus_backward": _aten("softplus_backward"),
    "._opoverload": _custom_op_overload,
    "._schema": _custom_op_overload,
    "torch.distributed.tensor._dtensor_spec.DTensorSpec": _dtensor_spec,
    "jax.extend.core.Primitive": _jax_primitive,
    **{key: _jax_primitive for key in PRIVATE_APIS if key.startswith("jax.interpreters.")},
}


def _installed(framework: str) -> str:
    return FRAMEWORKS[framework].__version__


@pytest.mark.parametrize("api", sorted(PRIVATE_APIS))
def test_the_private_api_behaves_as_the_runtime_assumes(api):
    row = PRIVATE_APIS[api]
    try:
        PROBES[api]()
    except Exception as error:
        floor = floors_of([api]).get(row.framework)
        since = f", the package's floor for it {row.framework} {floor}" if floor else ""
        pytest.fail(
            f"{api} on {row.framework} {_installed(row.framework)} (checked on {row.framework} "
            f"{PRIVATE_APIS_CHECKED_ON[row.framework]}{since}) is not what {', '.join(row.used_in)} "
            f"assume: {error!r}. Without it: {row.fallback}"
        )


def test_every_row_has_a_probe():
    assert set(PROBES) == set(PRIVATE_APIS)


def _runtime_uses() -> dict[str, set[str]]:
    """Each private API the runtime helpers use, with the helpers (as `torch/_route.py`) using it."""
    uses: dict[str, set[str]] = {}
    for path in sorted(RUNTIME.rglob("*.py")):
        for api in private_apis_used(path.read_text()):
            uses.setdefault(api, set()).add(path.relative_to(RUNTIME).as_posix())
    return uses


def test_the_table_lists_every_private_api_the_runtime_uses():
    unlisted = sorted(api for api in _runtime_uses() if private_api_row(api) is None)
    assert not unlisted, f"private APIs without a row in rulegen.derive.floors.PRIVATE_APIS: {unlisted}"


def test_each_row_names_where_it_is_used():
    found: dict[str, set[str]] = {}
    for api, helpers in _runtime_uses().items():
        found.setdefault(private_api_row(api) or api, set()).update(helpers)
    for key, row in PRIVATE_APIS.items():
        if "rule modules" in row.used_in:
            # Printed by the function registry, and checked by name where a helper is imported.
            assert key in pathlib.Path(functions.__file__).read_text(), key
            for helper in set(row.used_in) - {"rule modules"}:
                assert key.rsplit(".", 1)[1] in (RUNTIME / helper).read_text(), (key, helper)
        else:
            assert found.get(key) == set(row.used_in), (key, found.get(key))


def test_the_scan_finds_a_new_private_api():
    code = "import torch\nfrom torch._C import _new_thing\n_new_thing(torch._C._other)\nvalue._secret\n"
    assert private_apis_used(code) == {"torch._C._new_thing", "torch._C._other", "._secret"}


def test_the_checked_releases_are_one_record_and_no_older_than_the_floors():
    """The releases the APIs were checked on, one record for the runtime and the table, within the floors.

    A newer framework installed here is no failure of its own: the probes above run on whatever is installed,
    and an API it lacks fails them, and the package's import, by name.
    """
    from packaging.version import Version

    from rulegen.derive.floors import API_FLOORS

    assert PRIVATE_APIS_CHECKED_ON == _private.CHECKED_ON
    assert set(PRIVATE_APIS_CHECKED_ON) == set(FRAMEWORKS)
    for framework, checked in PRIVATE_APIS_CHECKED_ON.items():
        floors = [Version(v) for f, v in API_FLOORS.values() if f == framework]
        assert Version(checked) >= max(floors), (framework, checked)


def test_a_torch_lacking_a_private_api_fails_at_import_saying_so(monkeypatch):
    monkeypatch.delattr(torch._C._functorch, "peek_interpreter_stack")
    monkeypatch.delitem(sys.modules, "rulegen.runtime.torch._plain", raising=False)
    lacking = r"torch \S+ lacks a private API .*peek_interpreter_stack.*checked on torch 2"
    with pytest.raises(ImportError, match=lacking):
        importlib.import_module("rulegen.runtime.torch._plain")


def test_a_jax_lacking_a_private_api_fails_at_import_saying_so(monkeypatch):
    from jax.interpreters import ad

    monkeypatch.delattr(ad, "is_undefined_primal")
    monkeypatch.delitem(sys.modules, "rulegen.runtime.jax._linear", raising=False)
    with pytest.raises(ImportError, match=r"jax \S+ lacks a private API .*is_undefined_primal.*checked on jax 0"):
        importlib.import_module("rulegen.runtime.jax._linear")
