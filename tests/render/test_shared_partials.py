"""A torch Function whose backward and jvp multiply the same partials computes them once, in one function
both call, where the partials share a subexpression; elsewhere each method computes what it multiplies."""

from __future__ import annotations

from rulegen.render.build import generate
from rulegen.spec.rules import read_rule_file

POLAR = "name: pol\ninputs: [x, y]\noutputs: [r, theta]\nforward:\n  r: hypot(x, y)\n  theta: atan2(y, x)\n"
# Partials that share hypot(x, y): log(x**2 + y**2)'s 2 x / hypot**2 and 2 y / hypot**2.
SHARING = "name: pol\ninputs: [x, y]\noutputs: [r, theta]\nforward:\n  r: log(x**2 + y**2)\n  theta: atan(y / x)\n"


def _module(tmp_path, text: str, backend: str) -> str:
    path = tmp_path / "r.yaml"
    path.write_text(text)
    (rule,) = read_rule_file(path, "r.yaml")
    (module,) = (
        t for rel, t in generate(rule).modules.items() if str(rel).startswith(backend) and "__init__" not in str(rel)
    )
    return module


def _torch_module(tmp_path, text: str) -> str:
    return _module(tmp_path, text, "torch")


def test_backward_and_jvp_call_one_function_for_the_partials_they_share(tmp_path):
    text = _torch_module(tmp_path, SHARING)
    # dr/dx and dr/dy over one hypot, once in the module.
    assert text.count("torch.hypot(x, y)") == 1
    assert text.count("def _partials(x, y):") == 1
    backward, jvp = text.split("def backward")[1].split("def jvp")
    call = "dr_dx, dr_dy, dtheta_dx, dtheta_dy = _partials(x, y)"
    assert call in backward and call in jvp
    # Each gradient a sum of present cotangents times named partials, on one line.
    assert "x_bar = summed_like(x, (r_bar, dr_dx), (theta_bar, dtheta_dx))" in backward
    # The in-place body checks what the partials are computed from.
    assert "plain(x, y, r_bar, theta_bar)" in backward


def test_hypot_and_atan2_partials_of_a_point_are_one_runtime_call(tmp_path):
    # The four partials of (x, y) from one call on one scaling: the runtime's plane_slopes, inline where nothing
    # differentiates them and differentiated by their stated derivatives where something does.  Each partial the
    # runtime's call of its own, scaling anew, polar's backward ran 131 kernels where one scaling runs 31.
    text = _torch_module(tmp_path, POLAR)
    helper = text.split("def _partials(x, y):")[1].split("class ")[0]
    assert "s0, s1, s2, s3 = plane_slopes(x, y)" in helper
    assert "return s0, s1, -s3, s2" in helper
    backward, jvp = text.split("def backward")[1].split("def jvp")
    call = "dr_dx, dr_dy, dtheta_dx, dtheta_dy = _partials(x, y)"
    assert call in backward and call in jvp
    assert "from ._special import plane_slopes" in text
    # JAX's rule calls the same joint function (a custom_jvp): eagerly, one scaling for the four.
    jax_text = _module(tmp_path, POLAR, "jax")
    assert "s0, s1, s2, s3 = plane_slopes(x, y)" in jax_text
    # hypot's alone take the joint function of hypot's partials alone: no quotient atan2's partials need.
    alone = _torch_module(tmp_path, "name: r\ninputs: [x, y]\nforward: hypot(x, y)\n")
    assert "s0, s1 = hypot_slopes(x, y)" in alone


def test_partials_that_share_nothing_are_computed_where_they_are_multiplied(tmp_path):
    text = _torch_module(tmp_path, "name: r\ninputs: [x, y]\nforward: sin(x) + cosh(y)\n")
    assert "_partials" not in text
    assert "torch.cos(x)" in text.split("def backward")[1].split("def jvp")[0]


def test_a_partial_takes_a_name_no_name_of_the_rule_is(tmp_path):
    rule = "name: r\ninputs: [x, dout_dx]\nforward: log(x**2 + dout_dx**2)\n"
    text = _torch_module(tmp_path, rule)
    assert "_dout_dx, dout_ddout_dx = _partials(x, dout_dx)" in text
