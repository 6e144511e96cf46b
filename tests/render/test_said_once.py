"""What every generated module would say alike is said once, in the runtime: argument conversion, the
terms of a gradient or tangent whose cotangent may be absent, a JVP rule's arguments."""

from __future__ import annotations

from rulegen.render.build import generate
from rulegen.spec.rules import read_rule_file

TWO_INPUTS = "name: r\ninputs: [x, y]\nforward: sin(x) * exp(y)\n"
SAVED = "name: r\ninputs: [x]\nforward: x**3\nresiduals:\n  dx: 3 * x**2\nvjp:\n  x: out_bar * dx\n"


def _modules(tmp_path, text: str) -> dict[str, str]:
    path = tmp_path / "r.yaml"
    path.write_text(text)
    (rule,) = read_rule_file(path, "r.yaml")
    return {str(rel): module for rel, module in generate(rule).modules.items()}


def _module(modules: dict[str, str], backend: str) -> str:
    (text,) = (t for rel, t in modules.items() if rel.startswith(backend) and not rel.endswith("__init__.py"))
    return text


def test_a_jax_public_function_takes_and_lifts_its_arrays_in_one_call(tmp_path):
    text = _module(_modules(tmp_path, TWO_INPUTS), "jax")
    assert "(x, y), _low = as_lifted_arrays(" in text
    assert "in_float32" not in text
    assert "as_arrays(" not in text


def test_a_jax_jvp_rule_unpacks_its_primals_and_tangents_in_one_statement(tmp_path):
    text = _module(_modules(tmp_path, TWO_INPUTS), "jax")
    assert "(x, y), (x_dot, y_dot) = primals, present(tangents)" in text


def test_a_term_whose_cotangent_may_be_absent_is_a_pair_the_runtime_multiplies(tmp_path):
    modules = _modules(tmp_path, TWO_INPUTS)
    for text in modules.values():
        assert "is None else" not in text
    assert "summed_like(out, (x_dot, " in _module(modules, "jax")


def test_a_function_that_saves_its_inputs_and_residuals_takes_its_setup_context_from_the_runtime(tmp_path):
    text = _module(_modules(tmp_path, SAVED), "torch")
    assert "setup_context = saves_inputs(residuals=1, materialize_grads=False)" in text
    assert "def setup_context" not in text


def test_an_output_is_returned_as_computed_only_where_nothing_else_reads_it(tmp_path):
    text = _module(_modules(tmp_path, "name: r\ninputs: [x]\nforward: sin(x)\n"), "jax")
    assert "return jnp.sin(x), " in text
    # The tangent of two inputs sums its terms in the output's shape: the output is named first.
    text = _module(_modules(tmp_path, TWO_INPUTS), "jax")
    assert "    out = " in text and "summed_like(out, " in text


def test_a_function_that_saves_an_output_not_last_names_its_position(tmp_path):
    rule = "name: pol\ninputs: [x, y]\noutputs: [r, theta]\nforward:\n  r: exp(x)\n  theta: sin(y)\n"
    text = _module(_modules(tmp_path, rule), "torch")
    assert "outputs=(0,)" in text.split("setup_context = ")[1].split("\n")[0]
    assert "torch.exp(x)" not in text.split("def backward")[1]


def test_eager_torch_computes_a_partial_only_where_its_cotangent_may_be_absent_and_it_is(tmp_path):
    # The lone output's cotangent is present wherever backward runs: its term is a pair.  A residual's is
    # absent at first order, and its partial (6 * x, a kernel) is computed only where it is present.
    text = _module(_modules(tmp_path, SAVED), "torch")
    assert "summed_like(x, (out_bar, dx), None if dx_bar is None else dx_bar" in text
