"""Numbers and static inputs where the frameworks want floats or tensors.

`xlogy(1, y)` printed the integer 1, an integer array to JAX, whose xlogy
rule then gave it a float0 tangent at second order; `Max(x, lo)` with a
static `lo` printed `torch.maximum(lo, x)`, which refuses the Python float;
a `Piecewise` of numbers came back from JAX as a float64 (or integer) array
for float32 inputs; `sqrt((2*beta - 2/beta)**2 + 1) / beta` shared `t0 = 1 /
beta` and printed `torch.sqrt` of that Python float.
"""

from __future__ import annotations


def test_numbers_in_exponent_form_are_numbers_as_yaml_1_2_reads_them(tmp_path):
    # PyYAML (YAML 1.1) reads `1e-3` and `1.5e3` as strings: the static's default was the string "1e-3".
    from rulegen.spec.rules import read_rule_file

    path = tmp_path / "r.yaml"
    path.write_text(
        "name: r\ninputs:\n  x: {domain: [1e-7, 1.5e3]}\n  eps: {static: true, default: 1e-3}\n"
        "forward: x + eps\nchecks: {points: [{at: {x: 2e0}, value: 2.001}]}\n"
    )
    (rule,) = read_rule_file(path)
    x, eps = rule.inputs
    assert x.domain == (1e-7, 1500.0)
    assert eps.default == 1e-3 and isinstance(eps.default, float)
    assert rule.checks.points[0].at == {"x": 2.0}
    text = path.read_text().replace("default: 1e-3", 'default: "1e-3"')
    path.write_text(text)  # quoted, it stays the string the author wrote
    assert read_rule_file(path)[0].inputs[1].default == "1e-3"
