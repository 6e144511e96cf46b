"""The JAX helpers (`jax/_*.py` of a generated package)."""

# A generated package has its own copy, jax/_numbers.py: here both backends'
# `from . import _numbers` reach the one module.
from rulegen.runtime import _numbers

__all__ = ["_numbers"]
