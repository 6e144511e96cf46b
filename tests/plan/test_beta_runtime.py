"""A rule that calls beta prints a call of the runtime's `beta_slope`, not beta's cases."""


def test_a_rule_calling_beta_prints_the_runtime_s_partial():
    import sympy as sp

    from rulegen.derive import functions as fn
    from rulegen.plan.printers import print_jax, print_torch

    a, b = sp.symbols("a b", real=True)
    for printer in (print_jax, print_torch):
        value, imports = printer(fn.beta_slope(a, b))
        assert value.text == "beta_slope(a, b)"
        assert {(i.module, i.name) for i in imports} == {("._beta", "beta_slope")}
