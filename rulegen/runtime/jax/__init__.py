"""The JAX helpers (`jax/_*.py` of a generated package)."""

# A generated package has its own copies, jax/_asymptotic.py, jax/_host_shapes.py,
# jax/_numbers.py, jax/_scaling.py and jax/_structures.py: here both backends' relative imports of
# them reach the one module of each.
from rulegen.runtime import _asymptotic, _host_shapes, _numbers, _private, _scaling, _structures

__all__ = ["_asymptotic", "_host_shapes", "_numbers", "_private", "_scaling", "_structures"]
