"""rulegen: one YAML rule per differentiable function, compiled into JAX and PyTorch custom derivatives."""

__version__ = "0.1.0"
