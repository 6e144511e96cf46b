"""NumpyTake whose backward returns two gradients for its four inputs."""

import torch
from right_numpy_sort import NumpyTake as DocsNumpyTake

RULE = "numpy_take"
AGAINST = {"torch": "numpy_take"}
CAUGHT_BY = "cross_backend"


class NumpyTake(DocsNumpyTake):
    @staticmethod
    def backward(ctx, grad_output):
        ind, ind_inv = ctx.saved_tensors
        result = DocsNumpyTake.apply(grad_output, ind_inv, ind, ctx.dim)
        return result, None


numpy_take = NumpyTake.apply
del torch
