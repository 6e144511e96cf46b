"""NumpyTake as the torch docs write it."""

from right_numpy_sort import NumpyTake

RULE = "numpy_take"
AGAINST = {"torch": "numpy_take"}

numpy_take = NumpyTake.apply
