"""Use the functions `rulegen build` generated from rules/: values, gradients, both backends."""

import collections
import inspect
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import torch

from generated.jax import c_exp as c_exp_jax
from generated.jax import gelu as gelu_jax
from generated.jax import log1pexp as log1pexp_jax
from generated.jax import my_cube as my_cube_jax
from generated.jax import point_vjp as point_vjp_jax
from generated.jax import sin_mul as sin_mul_jax
from generated.jax import to_polar as to_polar_jax
from generated.torch import c_exp as c_exp_torch
from generated.torch import gelu as gelu_torch
from generated.torch import log1pexp as log1pexp_torch
from generated.torch import my_cube as my_cube_torch
from generated.torch import point_vjp as point_vjp_torch
from generated.torch import sin_mul as sin_mul_torch
from generated.torch import to_polar as to_polar_torch

jax.config.update("jax_enable_x64", True)


def plain(value):
    """`value` (arrays, in tuples, named tuples and dicts) with every array as plain numbers, for printing."""
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        fields = ", ".join(f"{field}={plain(v)}" for field, v in zip(value._fields, value, strict=True))
        return f"{type(value).__name__}({fields})"
    if isinstance(value, (tuple, list)):
        return f"({', '.join(plain(v) for v in value)})"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {plain(v)}" for k, v in value.items()) + "}"
    numbers = torch.as_tensor(value).tolist() if isinstance(value, torch.Tensor) else jnp.asarray(value).tolist()
    # + 0.0: -0.0 and 0.0 are the same gradient.
    return repr([round(n, 6) + 0.0 for n in numbers] if isinstance(numbers, list) else round(numbers, 6) + 0.0)


def torch_grads(f, *args, dtype=torch.float64):
    """The gradient of `f` (summed) with respect to each argument, by torch's backward."""
    tensors = [torch.tensor(a, dtype=dtype, requires_grad=True) for a in args]
    f(*tensors).sum().backward()
    return tuple(t.grad for t in tensors)


def naive_log1pexp_jax(x):
    return jnp.log(1 + jnp.exp(x))


def naive_log1pexp_torch(x):
    return torch.log(1 + torch.exp(x))


# Why a rule: in float32, exp(100) overflows and plain autodiff of log(1 + exp(x)) divides inf by inf.
# The generated gradient is the rule's 1 - 1/(1 + exp(x)), computed so that it cannot overflow.
print("log1pexp'(100) in float32 (exactly 1 - 3.7e-44):")
print("                 plain autodiff   rulegen")
x32 = jnp.float32(100.0)
print(f"  jax.grad       {plain(jax.grad(naive_log1pexp_jax)(x32)):>14}   {plain(jax.grad(log1pexp_jax)(x32))}")
(naive,), (ruled,) = (torch_grads(f, 100.0, dtype=torch.float32) for f in (naive_log1pexp_torch, log1pexp_torch))
print(f"  torch backward {plain(naive):>14}   {plain(ruled)}")
# The generated function's docstring names what is computed in another form; `--why` says which and why.
doc = inspect.getdoc(log1pexp_jax).splitlines()
print("help(log1pexp) says, in part:")
print(*(f"    {line}" for line in doc[doc.index("Forward:") : doc.index("Inputs:")] if line), sep="\n")
print("`rulegen show log1pexp --why` prints:")
why = [sys.executable, "-m", "rulegen", "show", "log1pexp", "--why", "rules/"]
print(subprocess.run(why, capture_output=True, text=True, check=True, env={**os.environ, "COLUMNS": "100"}).stdout)

# In float64 from here on, the same dtype and the same transform on both sides of each row.
two, three, four = (torch.tensor(v, dtype=torch.float64) for v in (2.0, 3.0, 4.0))
print("sin_mul(2, 3):     jax", plain(sin_mul_jax(2.0, 3.0)), " torch", plain(sin_mul_torch(two, three)))
print(
    "  grads:           jax",
    plain(jax.grad(sin_mul_jax, (0, 1))(2.0, 3.0)),
    " torch",
    plain(torch_grads(sin_mul_torch, 2.0, 3.0)),
)
print("gelu'(1):          jax", plain(jax.grad(gelu_jax)(1.0)), " torch", plain(torch_grads(gelu_torch, 1.0)[0]))
print("my_cube'' = 6x at (1, 2, 3):")
print("                   jax", plain(jax.vmap(jax.grad(jax.grad(my_cube_jax)))(jnp.array([1.0, 2.0, 3.0]))))
second = torch.func.vmap(torch.func.grad(torch.func.grad(my_cube_torch)))
print("                   torch", plain(second(torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64))))

# A named tuple in, a dict holding a tuple out (rules/structures.yaml): gradients come back as a Point.
Point = collections.namedtuple("Point", ["x", "y"])
print("point_vjp, grad of b[0] at Point(0.5, 2):")
print("                   jax", plain(jax.grad(lambda p: point_vjp_jax(p)["b"][0])(Point(0.5, 2.0))))
point = Point(torch.tensor(0.5, dtype=torch.float64), torch.tensor(2.0, dtype=torch.float64))
print("                   torch", plain(torch.func.grad(lambda p: point_vjp_torch(p)["b"][0])(point)))
# A named tuple out: the class each backend's module defines, a pytree to both.
print("to_polar(3, 4):    jax", plain(to_polar_jax(3.0, 4.0)))
print("                   torch", plain(to_polar_torch(three, four)))
print("  its jacrev:      jax", plain(jax.jacrev(to_polar_jax, (0, 1))(3.0, 4.0)))
print("                   torch", plain(torch.func.jacrev(to_polar_torch, (0, 1))(three, four)))
# A holomorphic rule (rules/complex.yaml): JAX's transpose convention, torch's conjugate Wirtinger one.
z = 0.5 + 1.0j
print("c_exp'(z):         jax", jax.grad(c_exp_jax, holomorphic=True)(jnp.asarray(z)).item())
tz = torch.tensor(z, dtype=torch.complex128, requires_grad=True)
c_exp_torch(tz).real.backward()
print("                   torch (the conjugate)", tz.grad.item())
