"""The torch helpers (`torch/_*.py` of a generated package)."""

# A generated package has its own copies, torch/_asymptotic.py, torch/_host_shapes.py,
# torch/_numbers.py, torch/_scaling.py and torch/_structures.py: here both backends' relative
# imports of them reach the one module of each.
from rulegen.runtime import _asymptotic, _host_shapes, _numbers, _private, _scaling, _structures

__all__ = ["_asymptotic", "_host_shapes", "_numbers", "_private", "_scaling", "_structures"]
