"""The generated functions take what users pass: Python numbers for arrays, defaults, and refuse complex.

torch's `apply` hands Python numbers on as they are, and torch functions
refuse them (`clip_gradient(-0.75, 0.75, x)`, the JAX docs' own call, raised
in torch); JAX took complex inputs and computed wrong derivatives silently.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from rulegen.check import flat_call
from rulegen.spec.rules import Rule, SympyBody, read_rules, rule_files
from tests.conftest import RULES


def _scalar_rules() -> list[Rule]:
    """Elementwise rules of rules/ (symbolic forward, or batched elementwise): a number is an array for them."""
    rules = {r.name: r for r in read_rules(rule_files([RULES]))}
    return [
        r
        for r in rules.values()
        if (isinstance(r.forward, SympyBody) or r.batching == "elementwise")
        and r.checks.sample is None
        and any(not i.static for i in r.inputs)
    ]


SCALAR_RULES = _scalar_rules()


def _midpoints(rule: Rule) -> dict[str, float]:
    return {i.name: float(sum(i.domain) / 2 + 0.125) for i in rule.inputs if not i.static}


def _numbers(rule: Rule, position: int, as_tensor) -> list:
    """Arguments of `rule` with the array at `position` a Python number, the others tensors; statics left out."""
    points = _midpoints(rule)
    arrays = [i for i in rule.inputs if not i.static]
    args = []
    for i in arrays:
        value = points[i.name] if i.dtype in ("float", "complex") else 1
        args.append(value if i is arrays[position] else as_tensor(value, i.dtype))
    return args


def _torch_tensor(value, dtype):
    dtypes = {"float": torch.float64, "complex": torch.complex128, "int": torch.int64, "bool": torch.bool}
    return torch.tensor(value, dtype=dtypes[dtype])


def _jax_array(value, dtype):
    return jnp.asarray(
        value, dtype={"float": jnp.float64, "complex": jnp.complex128, "int": jnp.int64, "bool": bool}[dtype]
    )


def _statics_have_defaults(rule: Rule) -> bool:
    return all(i.has_default for i in rule.inputs if i.static)


def _flat(result) -> np.ndarray:
    parts = result if isinstance(result, tuple) else (result,)
    return np.concatenate([np.ravel(np.asarray(p.detach() if isinstance(p, torch.Tensor) else p)) for p in parts])


@pytest.mark.parametrize("rule", [r for r in SCALAR_RULES if _statics_have_defaults(r)], ids=lambda r: r.name)
def test_a_python_number_for_each_array_input(built, rule):
    jax_pkg, torch_pkg, _ = built
    arrays = [i for i in rule.inputs if not i.static]
    tensors = [_torch_tensor(v, i.dtype) for v, i in zip(_numbers(rule, 0, lambda v, d: v), arrays, strict=True)]
    torch_f, jax_f = flat_call(rule, getattr(torch_pkg, rule.name)), flat_call(rule, getattr(jax_pkg, rule.name))
    reference = _flat(torch_f(*tensors))
    for position in range(len(arrays)):
        got_torch = _flat(torch_f(*_numbers(rule, position, _torch_tensor)))
        got_jax = _flat(jax_f(*_numbers(rule, position, _jax_array)))
        rtol = 1e-6 if len(arrays) == 1 else 1e-15  # a lone number computes in the default float dtype
        np.testing.assert_allclose(got_torch, reference, rtol=rtol, atol=rtol)
        np.testing.assert_allclose(got_jax, reference, rtol=1e-15, atol=1e-15)


@pytest.mark.parametrize(
    "rule",
    [
        r
        for r in SCALAR_RULES
        if _statics_have_defaults(r) and all(i.dtype == "float" for i in r.inputs if not i.static) and not r.complex
    ],
    ids=lambda r: r.name,
)
def test_jax_grad_of_python_numbers_is_grad_of_arrays_at_every_magnitude(built, rule):
    """Under `jax.grad(f)(3.0)` the tracer's primal is a Python float, which the JVP rule computed with:
    `x**2` raised OverflowError at 1e200 (sin_exp_mul) where the array's is inf, and its arithmetic ran in
    Python's float64 whatever JAX's dtype.  The generated function makes every argument an array."""
    jax_pkg, _, _ = built
    fn = flat_call(rule, getattr(jax_pkg, rule.name))
    arrays = [k for k, i in enumerate(i for i in rule.inputs if not i.static)]
    grad = jax.grad(lambda *a: jnp.sum(jnp.asarray(fn(*a))), argnums=tuple(arrays))
    for value in (1e200, -1e200, 0.7, -3e-300):
        got = grad(*[value for _ in arrays])
        want = grad(*[jnp.float64(value) for _ in arrays])
        for g, w in zip(got, want, strict=True):
            np.testing.assert_array_equal(np.asarray(g), np.asarray(w), err_msg=f"{rule.name} at {value}")


def test_clip_gradient_as_the_jax_docs_call_it(built):
    jax_pkg, torch_pkg, _ = built
    assert float(jax.grad(lambda x: 3 * jax_pkg.clip_gradient(-0.75, 0.75, x))(2.0)) == 0.75
    x = torch.tensor(2.0, dtype=torch.float64, requires_grad=True)
    (3 * torch_pkg.clip_gradient(-0.75, 0.75, x)).backward()
    assert x.grad.item() == 0.75
    grad = torch.func.grad(lambda x: 3 * torch_pkg.clip_gradient(-0.75, 0.75, x))(torch.tensor(2.0))
    assert grad.item() == 0.75


def test_numbers_take_the_float_dtype_of_the_tensors(built):
    _, torch_pkg, _ = built
    r, theta = torch_pkg.polar(torch.tensor([1.0], dtype=torch.float64), 0.1)
    assert r.dtype == theta.dtype == torch.float64
    assert r.item() == np.hypot(1.0, 0.1)
    r, _ = torch_pkg.polar(torch.tensor([1.0], dtype=torch.float32), 0.1)
    assert r.dtype == torch.float32
    r, _ = torch_pkg.polar(2, 1)  # Python ints for float arrays
    assert r.dtype == torch.get_default_dtype()
    assert torch_pkg.numpy_sort([3.0, 1.0, 2.0]).tolist() == [1.0, 2.0, 3.0]
    assert torch_pkg.scipy_erfcx(np.array([1.0, 2.0])).dtype == torch.float64  # a NumPy array keeps its dtype


@pytest.mark.parametrize("name", ["log1pexp", "polar", "l2_normalize", "numpy_sort", "scipy_erfcx", "torch_mish"])
def test_complex_inputs_are_refused(built, name):
    jax_pkg, torch_pkg, rules = built
    arrays = [i for i in rules[name].inputs if not i.static]
    complex_args = [np.array([1.0 + 1.0j, 2.0]) for _ in arrays]
    with pytest.raises(TypeError, match=f"{name}: complex inputs are not supported for"):
        getattr(torch_pkg, name)(*[torch.as_tensor(a) for a in complex_args])
    with pytest.raises(TypeError, match=f"{name}: complex inputs are not supported for"):
        getattr(jax_pkg, name)(*[jnp.asarray(a) for a in complex_args])
    with pytest.raises(TypeError, match="complex inputs are not supported for"):
        jax.jit(getattr(jax_pkg, name))(*[jnp.asarray(a) for a in complex_args])


@pytest.mark.parametrize("name", ["scipy_erfcx", "log1pexp", "numpy_sort"])
def test_integer_arrays_for_float_inputs_are_computed_as_floats(built, name):
    jax_pkg, torch_pkg, _ = built
    ints = np.array([1, -2, 3], dtype=np.int32)
    expected = _flat(getattr(torch_pkg, name)(torch.tensor(ints, dtype=torch.float64)))
    got = getattr(torch_pkg, name)(torch.tensor(ints))
    assert got.is_floating_point()
    np.testing.assert_allclose(_flat(got), expected, rtol=1e-6)
    np.testing.assert_allclose(_flat(getattr(jax_pkg, name)(jnp.asarray(ints))), expected, rtol=1e-6)


def test_logsumexp_of_infinities_is_what_the_frameworks_give(built):
    jax_pkg, torch_pkg, _ = built
    for values in ([0.5, np.inf, 3.0], [-np.inf, -np.inf], [1.0, -np.inf]):
        x = torch.tensor(values, dtype=torch.float64, requires_grad=True)
        out = torch_pkg.logsumexp(x)
        (grad,) = torch.autograd.grad(out, x)
        native = torch.tensor(values, dtype=torch.float64, requires_grad=True)
        (native_grad,) = torch.autograd.grad(torch.logsumexp(native, -1), native)
        assert out.item() == torch.logsumexp(native, -1).item()
        np.testing.assert_array_equal(grad.numpy(), native_grad.numpy())
        assert float(jax_pkg.logsumexp(jnp.asarray(values))) == out.item()
        np.testing.assert_array_equal(jax.grad(jax_pkg.logsumexp)(jnp.asarray(values)), native_grad.numpy())
