"""The JAX helpers (`jax/_*.py` of a generated package)."""
