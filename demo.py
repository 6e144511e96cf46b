"""Use the functions `rulegen build` generated from rules/: values, gradients, both backends."""

import collections

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


def torch_grad(f, *args):
    tensors = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in args]
    f(*tensors).sum().backward()
    return [t.grad.item() for t in tensors]


print("log1pexp at 100:  jax grad", jax.grad(log1pexp_jax)(100.0), " torch grad", torch_grad(log1pexp_torch, 100.0))
print("sin_mul at (2, 3): value", float(sin_mul_jax(2.0, 3.0)), " jax grads", jax.grad(sin_mul_jax, (0, 1))(2.0, 3.0))
print("                   torch grads", torch_grad(sin_mul_torch, 2.0, 3.0))
print("gelu'(1):         jax", jax.grad(gelu_jax)(1.0), " torch", torch_grad(gelu_torch, 1.0))
x = jnp.array([1.0, 2.0, 3.0])
print("my_cube'' = 6x:   jax", jax.vmap(jax.grad(jax.grad(my_cube_jax)))(x))
print(
    "                  torch",
    torch.func.vmap(torch.func.grad(torch.func.grad(my_cube_torch)))(
        torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    ),
)

# A named tuple in, a dict holding a tuple out (rules/structures.yaml): gradients come back as a Point.
Point = collections.namedtuple("Point", ["x", "y"])
print("point_vjp:        jax grad", jax.grad(lambda p: point_vjp_jax(p)["b"][0])(Point(0.5, 2.0)))
print(
    "                  torch grad",
    torch.func.grad(lambda p: point_vjp_torch(p)["b"][0])(Point(torch.tensor(0.5), torch.tensor(2.0))),
)
# A named tuple out: the class each backend's module defines, a pytree to both.
print("to_polar(3, 4):   jax jacrev", jax.jacrev(to_polar_jax)(3.0, 4.0))
print("                  torch", to_polar_torch(torch.tensor(3.0), torch.tensor(4.0)))
# A holomorphic rule (rules/complex.yaml): JAX's transpose convention, torch's conjugate Wirtinger one.
z = 0.5 + 1.0j
print("c_exp'(z):        jax", jax.grad(c_exp_jax, holomorphic=True)(jnp.asarray(z)))
tz = torch.tensor(z, requires_grad=True)
c_exp_torch(tz).real.backward()
print("                  torch (the conjugate)", tz.grad)
