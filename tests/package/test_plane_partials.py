"""Built rules whose torch `_partials` chooses between hypot's and atan2's partials inline (one scaling, where
nothing differentiates them) and the runtime's (`plane_slopes`, with stated derivatives, where something does)."""

from __future__ import annotations

import importlib
import math

import pytest
import torch

from tests.conftest import built_package

RULES = """
rules:
  - name: static_pair
    inputs: {x: {}, y: {}, z: {static: true}}
    forward: hypot(x, z) + hypot(y, z)
  - name: scaled_polar
    inputs: {x: {}, y: {}, z: {static: true}}
    forward: hypot(x, y * z) + atan2(x, y)
"""


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    with built_package(tmp_path_factory.mktemp("plane_partials"), RULES, "rg_plane_partials") as folder:
        yield folder, importlib.import_module("rg_plane_partials.torch")


@pytest.mark.parametrize("create_graph", [False, True])
def test_a_static_input_beside_the_partials_is_a_python_number(package, create_graph):
    # `differentiated(x, y, z)` reads the tensors among its arguments: z, a static, is a Python number
    # (`.requires_grad` of a float raised where the partials were differentiated).
    _, module = package
    x = torch.tensor([0.6, 3.0, 0.0], dtype=torch.float64, requires_grad=True)
    y = torch.tensor([1.5, -2.0, 5e-324], dtype=torch.float64, requires_grad=True)
    gx, gy = torch.autograd.grad(module.static_pair(x, y, 0.8).sum(), (x, y), create_graph=create_graph)
    z = torch.tensor(0.8, dtype=torch.float64)
    torch.testing.assert_close(gx.detach(), x.detach() / torch.hypot(x.detach(), z), rtol=1e-15, atol=0)
    torch.testing.assert_close(gy.detach(), y.detach() / torch.hypot(y.detach(), z), rtol=1e-15, atol=0)


def test_two_pairs_of_arguments_are_two_calls(package):
    # hypot(x, y z)'s partials and atan2(x, y)'s are of two points: one joint call each, differentiated as
    # autodiff of the composite is away from special values.
    folder, module = package
    source = (folder / "torch" / "scaled_polar.py").read_text()
    assert "s0, s1 = atan2_slopes(x, y)" in source and "s2, s3 = hypot_slopes(x, y * z)" in source
    x = torch.tensor([0.6, 3.0], dtype=torch.float64, requires_grad=True)
    y = torch.tensor([1.5, -2.0], dtype=torch.float64, requires_grad=True)

    def composite(x, y):
        return torch.hypot(x, y * 0.8) + torch.atan2(x, y)

    got = torch.autograd.functional.hessian(lambda x, y: module.scaled_polar(x, y, 0.8).sum(), (x, y))
    want = torch.autograd.functional.hessian(lambda x, y: composite(x, y).sum(), (x, y))
    for i in range(2):
        for k in range(2):
            torch.testing.assert_close(got[i][k], want[i][k], rtol=1e-12, atol=1e-14)
    assert math.isfinite(float(got[0][0].sum()))
