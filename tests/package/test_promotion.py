"""Every generated wrapper promotes its float arguments as the framework's own arithmetic would.

torch reads a 0-d tensor and a Python number as weaker than a dimensioned
tensor (`torch.result_type`): `x_bf16 * torch.tensor(2.0)` is bfloat16, and
`x_f32 * torch.tensor(2.0, dtype=torch.float64)` float32.  JAX reads a Python
number as weakly typed: `x_f32 * 2` is float32, and `2.0 * 3.0` the default
float dtype, weakly typed.  The wrappers once promoted a 0-d tensor like a
dimensioned one and made Python numbers strongly typed arrays.
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from rulegen.spec.rules import Rule, SympyBody, read_rules, rule_files
from tests.conftest import RULES

#: How each argument is given: (dtype, or the type of a Python number; whether it has dimensions).
KINDS: dict[str, tuple[str | type, bool]] = {
    "f32": ("float32", True),
    "f64": ("float64", True),
    "bf16": ("bfloat16", True),
    "f16": ("float16", True),
    "0d_f32": ("float32", False),
    "0d_f64": ("float64", False),
    "0d_bf16": ("bfloat16", False),
    "float": (float, False),
    "int": (int, False),
}

#: Values for statics that have no default.
STATICS = {"clip_gradient": {}, "pointwise": {"f": lambda x: 2 * x, "df": lambda x: 2 + 0 * x}}


#: Rules whose JAX forward is a function JAX itself types strongly for a Python number
#: (`jax.scipy.special.ndtr(0.5)`), or a host callback (its results are typed as declared).
STRONG_RESULTS = {
    "f_gamma",
    "f_ndtr",
    "f_ndtri",
    "f_log_ndtr",
    "f_erfcx",
    "scipy_erfcx",
    "host_mul_sin_jvp",
    "host_mul_sin_vjp",
}


def _rules() -> list[Rule]:
    """Rules of rules/ whose array inputs are all real floats, flat (a structure's arrays are tested elsewhere)."""
    return [
        r
        for r in read_rules(rule_files([RULES]))
        if not r.structured
        and all(i.dtype == "float" for i in r.inputs if not i.static)
        and all(i.has_default or i.name in STATICS.get(r.name, {}) for i in r.inputs if i.static)
    ]


RULE_LIST = _rules()


def _elementwise(rule: Rule) -> bool:
    """A rule that takes 0-d arrays (a reduction or a sort of a 0-d array is the frameworks' own error)."""
    return isinstance(rule.forward, SympyBody) or rule.batching == "elementwise"


def _cases(rule: Rule) -> list[tuple[str, ...]]:
    """The kinds of the first float array and of the others: every ordered pair, one kind for a lone array."""
    kinds = [k for k in KINDS if _elementwise(rule) or KINDS[k][1]]
    arrays = [i for i in rule.inputs if not i.static]
    return [(k,) for k in kinds] if len(arrays) == 1 else list(itertools.product(kinds, repeat=2))


def _argument(kind: str, backend: str):
    dtype, dimensioned = KINDS[kind]
    if isinstance(dtype, type):
        return dtype(2)
    value = np.array([0.5, 0.75]) if dimensioned else np.array(0.5)
    if backend == "torch":
        return torch.tensor(value, dtype=getattr(torch, dtype))
    return jnp.asarray(value, dtype=getattr(jnp, dtype))


def _arguments(rule: Rule, case: tuple[str, ...], backend: str) -> list:
    arrays = [i for i in rule.inputs if not i.static]
    return [_argument(case[0] if k == 0 else case[-1], backend) for k in range(len(arrays))]


def _call(rule: Rule, fn, arrays: list):
    statics = STATICS.get(rule.name, {})
    values = iter(arrays)
    args = [
        statics[i.name] if i.static and i.name in statics else None if i.static else next(values) for i in rule.inputs
    ]
    while args and args[-1] is None:
        args.pop()
    return fn(*args)


def _first(result):
    return result[0] if isinstance(result, tuple) else result


def _torch_expected(arrays: list) -> torch.dtype:
    """The dtype of torch's own arithmetic of the arguments (a sum keeps each argument's category)."""
    total = arrays[0]
    for a in arrays[1:]:
        total = total + a
    return total.dtype if isinstance(total, torch.Tensor) else torch.get_default_dtype()


def _jax_expected(arrays: list) -> tuple[np.dtype, bool]:
    """The dtype and weak type of jnp's own arithmetic of the arguments (+ 0.0: the rule's result is a float)."""
    total = jax.eval_shape(lambda *a: sum(a[1:], a[0]) + 0.0, *arrays)
    return total.dtype, total.weak_type


def _wrong(pkg, backend: str) -> list[str]:
    wrong = []
    for rule in RULE_LIST:
        fn = getattr(pkg, rule.name)
        for case in _cases(rule):
            arrays = _arguments(rule, case, backend)
            if backend == "torch":
                got = _first(_call(rule, fn, arrays)).dtype
                want = _torch_expected(arrays)
                if got != want:
                    wrong.append(f"{rule.name}{case}: {got}, torch gives {want}")
            else:
                out = _first(jax.eval_shape(lambda *a, r=rule, f=fn: _call(r, f, list(a)), *arrays))
                want = _jax_expected(arrays)
                if rule.name in STRONG_RESULTS:
                    want = (want[0], False)
                if (out.dtype, out.weak_type) != want:
                    wrong.append(f"{rule.name}{case}: {out.dtype} weak={out.weak_type}, jnp gives {want}")
    return wrong


@pytest.mark.parametrize("backend", ["torch", "jax"])
def test_every_rule_promotes_its_arguments_as_the_framework_does(built, backend):
    jax_pkg, torch_pkg, _ = built
    wrong = _wrong(torch_pkg if backend == "torch" else jax_pkg, backend)
    assert not wrong, f"{len(wrong)} cases:\n" + "\n".join(wrong)


def test_a_0d_tensor_beside_a_bfloat16_one_keeps_bfloat16_for_the_next_layer(built):
    _, torch_pkg, _ = built
    x = torch.linspace(-1, 1, 4, dtype=torch.bfloat16)
    out = torch_pkg.sin_exp_mul(x, torch.tensor(2.0))
    assert out.dtype == (torch.sin(x) * torch.exp(-(x**2)) * torch.tensor(2.0)).dtype == torch.bfloat16
    torch.nn.Linear(4, 2, dtype=torch.bfloat16)(out)  # raised with a float32 result


def test_a_0d_float64_exponent_leaves_float32_float32_and_gets_a_float64_gradient(built):
    _, torch_pkg, _ = built
    x = torch.tensor([0.5, 2.0], requires_grad=True)
    y = torch.tensor(1.5, dtype=torch.float64, requires_grad=True)
    out = torch_pkg.f_pow(x, y)
    assert out.dtype == torch.float32
    out.sum().backward()
    assert x.grad.dtype == torch.float32 and y.grad.dtype == torch.float64
    torch.testing.assert_close(y.grad, (x.detach() ** 1.5 * torch.log(x.detach())).sum().double())


def test_python_numbers_stay_weakly_typed_in_jax(built):
    jax_pkg, _, _ = built
    x = jnp.asarray([0.5, 2.0], dtype=jnp.float32)
    for args in ((x, 2), (x, 2.0), (2, x), (jnp.float32(1.5), 2)):
        out = jax_pkg.f_pow(*args)
        assert (out.dtype, out.weak_type) == (jnp.float32, False), args
        assert jax.jit(jax_pkg.f_pow)(*args).dtype == jnp.float32
    for args in ((2.0, 3.0), (2, 3), (2, 3.0)):
        out = jax_pkg.f_pow(*args)
        assert (out.dtype, out.weak_type) == (jnp.result_type(float), True), args
        assert (jnp.asarray(out, dtype=jnp.bfloat16) * out).dtype == jnp.bfloat16
    assert jax_pkg.sin_exp_mul(jnp.ones(2, jnp.bfloat16), 2).dtype == jnp.bfloat16


def test_numpy_scalars_and_arrays_are_strongly_typed_as_in_jnp(built):
    jax_pkg, torch_pkg, _ = built
    x = jnp.asarray([0.5, 2.0], dtype=jnp.float32)
    for other in (np.float64(2.0), np.array(2.0), np.array([2.0, 3.0])):
        out = jax_pkg.f_pow(x, other)
        assert (out.dtype, out.weak_type) == (jnp.result_type(x, other), False)
    # In torch a NumPy array ranks as the tensor it becomes: 0-d below a dimensioned tensor.
    xt = torch.tensor([0.5, 2.0])
    assert torch_pkg.f_pow(xt, np.array(2.0)).dtype == torch.float32
    assert torch_pkg.f_pow(xt, np.array([2.0, 3.0])).dtype == torch.float64


@pytest.mark.slow
def test_compiled_calls_promote_as_eager_ones_with_numbers_dynamo_makes_symbolic(built):
    # After a recompile Dynamo passes a Python number as a symbolic int or float, whose attributes it
    # cannot look up: the check for a NumPy array raised "Unsupported hasattr call" under fullgraph=True.
    _, torch_pkg, _ = built
    x = torch.linspace(0.1, 1, 5, requires_grad=True)
    compiled = torch.compile(torch_pkg.f_pow, fullgraph=True)
    for other in (torch.tensor(1.5, dtype=torch.float64), 2, 3, 2.5, 3.5):
        out = compiled(x, other)
        assert out.dtype == torch.float32
        torch.testing.assert_close(out, torch_pkg.f_pow(x, other))
