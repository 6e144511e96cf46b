"""The runtime helpers of generated packages: real modules, linted and tested here.

`jax/_util.py` here is `DIR/jax/_util.py` of a package that `rulegen build`
writes, copied as it is under a "generated" header; a package gets the
helpers its rules import (and those the helpers import in turn).  Each folder
is laid out as in a generated package, so relative imports mean the same in both.
`_asymptotic.py`, `_host_shapes.py`, `_numbers.py`, `_scaling.py` and `_structures.py` here are each
backend's: a package gets them as `jax/_numbers.py`, `torch/_numbers.py` and so on
(`render.helper_source`).
"""
