"""A torch Function whose backward and jvp multiply the same partials computes them once, in one function
both call, where the partials share a subexpression; elsewhere each method computes what it multiplies."""

from __future__ import annotations

from rulegen.render.build import generate
from rulegen.spec.rules import read_rule_file

POLAR = "name: pol\ninputs: [x, y]\noutputs: [r, theta]\nforward:\n  r: hypot(x, y)\n  theta: atan2(y, x)\n"


def _torch_module(tmp_path, text: str) -> str:
    path = tmp_path / "r.yaml"
    path.write_text(text)
    (rule,) = read_rule_file(path, "r.yaml")
    (module,) = (
        t for rel, t in generate(rule).modules.items() if str(rel).startswith("torch") and "__init__" not in str(rel)
    )
    return module


def test_backward_and_jvp_call_one_function_for_the_partials_they_share(tmp_path):
    text = _torch_module(tmp_path, POLAR)
    # The scaled quotients of dr/dx, dr/dy, dtheta/dx and dtheta/dy over one hypot, once in the module.
    assert text.count("torch.hypot(t1, t2)") == 1
    assert text.count("def _partials(x, y):") == 1
    backward, jvp = text.split("def backward")[1].split("def jvp")
    call = "dr_dx, dr_dy, dtheta_dx, dtheta_dy = _partials(x, y)"
    assert call in backward and call in jvp
    # Each gradient a sum of present cotangents times named partials, on one line.
    assert "x_bar = summed_like(x, (r_bar, dr_dx), (theta_bar, dtheta_dx))" in backward
    # The in-place body checks what the partials are computed from.
    assert "plain(x, y, r_bar, theta_bar)" in backward


def test_partials_that_share_nothing_are_computed_where_they_are_multiplied(tmp_path):
    text = _torch_module(tmp_path, "name: r\ninputs: [x, y]\nforward: sin(x) + cosh(y)\n")
    assert "_partials" not in text
    assert "torch.cos(x)" in text.split("def backward")[1].split("def jvp")[0]


def test_a_partial_takes_a_name_no_name_of_the_rule_is(tmp_path):
    rule = "name: r\ninputs: [x, dout_dx]\nforward: hypot(x, dout_dx)\n"
    text = _torch_module(tmp_path, rule)
    assert "_dout_dx, dout_ddout_dx = _partials(x, dout_dx)" in text
