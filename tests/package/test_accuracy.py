"""`rulegen accuracy` on built rules: autodiff of the forward as written, the verdict, the table and the plots."""

from __future__ import annotations

import math
import re
import types
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from typer.testing import CliRunner

from rulegen.check.accuracy import PROBES, measure_rule
from rulegen.cli import app
from rulegen.derive.measure import bits_of_error
from rulegen.spec.rules import read_rule_file
from tests.conftest import built_package, rules_from

# ---------------------------------------------------------------- one rule, and the command

CANCELLATIONS = """\
rules:
  - name: acc_log1pexp
    inputs: [x]
    forward: log(1 + exp(x))
  - name: acc_quadratic
    inputs: {a: {domain: {exclude: [0]}}, b: {}, c: {}}
    domain: b * b >= 4 * (a * c)
    forward: (-b + sqrt(b * b - 4 * (a * c))) / (2 * a)
  - name: acc_scaled
    inputs: [x]
    forward: x
    derivatives: {x: 2}
    checks: {true_derivative: false}
"""


@pytest.fixture(scope="module")
def cancellations(tmp_path_factory):
    import importlib

    root = tmp_path_factory.mktemp("accuracy")
    with built_package(root, CANCELLATIONS, "rg_accuracy") as folder:
        rules = {r.name: r for r in read_rule_file(root / "rg_accuracy.yaml")}
        yield rules, importlib.import_module("rg_accuracy.jax"), importlib.import_module("rg_accuracy.torch")
    del folder


def test_autodiff_is_of_the_forward_as_written_not_as_rulegen_rewrites_it(cancellations):
    rules, jax_pkg, torch_pkg = cancellations
    result = measure_rule(rules["acc_log1pexp"], jax_pkg, torch_pkg, points=64, known=list(rules))
    for backend in ("jax", "torch"):
        # log(1 + exp(x)) overflows for x above 710 (89 in float32), a quarter of the float line;
        # the generated softplus does not.
        generated = result.mean_bits(partials=False, dtype="float64", backend=backend, source="generated")
        autodiff = result.mean_bits(partials=False, dtype="float64", backend=backend, source="autodiff")
        assert generated < 1 and autodiff > 8, (backend, generated, autodiff)


def test_points_meet_the_joint_domain_condition(cancellations):
    rules, jax_pkg, torch_pkg = cancellations
    result = measure_rule(rules["acc_quadratic"], jax_pkg, torch_pkg, points=32, known=list(rules))
    assert not result.skipped
    for dtype, inputs in result.inputs.items():
        a, b, c = (inputs[n].astype(np.float64) for n in "abc")
        # 32 drawn, each of the three inputs at each probe magnitude of either sign (the others drawn), and the
        # mixed magnitudes (one input a power of two below another) that meet the condition.
        assert len(a) >= 32 + 3 * 2 * len(PROBES) and (a != 0).all(), dtype
        with np.errstate(over="ignore"):
            assert (b * b >= 4 * (a * c)).all(), dtype
    labels = [q.label for q in result.quantities]
    assert labels == ["out", "dout/da", "dout/db", "dout/dc", "dout/da (jvp)", "dout/db (jvp)", "dout/dc (jvp)"]


def test_a_derivative_that_deliberately_is_not_the_forward_s_is_not_measured_against_it(cancellations):
    rules, jax_pkg, torch_pkg = cancellations
    result = measure_rule(rules["acc_scaled"], jax_pkg, torch_pkg, points=8, known=list(rules))
    assert [q.label for q in result.quantities] == ["out"]
    assert all(s.mean == 0 for s in result.series)


def test_the_accuracy_command_prints_a_table_per_rule_and_writes_a_plot_page(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cube.yaml").write_text("name: acc_cube\ninputs: [x]\nforward: x**3 / 3\n")
    plots = tmp_path / "plots"
    result = CliRunner().invoke(
        app, ["accuracy", str(tmp_path / "cube.yaml"), "--points", "8", "--plot", str(plots)], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    out = result.output
    assert "acc_cube: bits of error, mean / max" in out
    rows = (
        "out +│ float64",
        "out +│ float32",
        "dout/dx +│ float64",
        "dout/dx +│ float32",
        r"dout/dx \(jvp\) +│ float64",
    )
    for row in rows:
        assert re.search(rf"│ {row} +│(?: +\d+\.\d\d / \d+ │){{4}}", out), row
    # Every line but the written page's path (a path folded across lines cannot be copied; its length is the
    # temporary folder's: 106 columns under a TMPDIR of 16 characters).
    assert max(len(line) for line in out.splitlines() if not line.startswith("wrote ")) <= 100
    assert f"wrote {plots / 'acc_cube.html'}" in out
    page = (plots / "acc_cube.html").read_text()
    svgs = re.findall(r"<svg .*?</svg>", page, re.S)
    assert len(svgs) == 6  # (value, partial by a VJP, partial by a JVP) x (float64, float32)
    for svg in svgs:
        circles = ET.fromstring(svg).findall("{http://www.w3.org/2000/svg}circle")
        # 8 drawn points, the probes, and the special floats (±0, ±smallest subnormal and normal, ±largest)
        assert len(circles) == 4 * (8 + 2 * len(PROBES) + 8)


def test_the_accuracy_command_writes_a_png_per_rule(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cube.yaml").write_text("name: acc_png\ninputs: [x]\nforward: x**3 / 3\n")
    plots = tmp_path / "plots"
    args = ["accuracy", str(tmp_path / "cube.yaml"), "--points", "8", "--plot", str(plots), "--format", "png"]
    result = CliRunner().invoke(app, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert (plots / "acc_png.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_accuracy_command_refuses_a_bad_joint_domain_at_its_place(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.yaml").write_text("name: acc_bad\ninputs: [x, y]\ndomain: x > unknown\nforward: x * y\n")
    result = CliRunner().invoke(app, ["accuracy", str(tmp_path / "bad.yaml")], catch_exceptions=False)
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert re.search(r"bad\.yaml:3:\d+: error: .*unknown", result.output), result.output


def test_the_accuracy_verdict_fails_a_worse_mean_or_one_point_where_autodiff_is_right():
    from rulegen.check.accuracy import worse_than_autodiff

    assert worse_than_autodiff(np.array([3.0, 3.0]), np.array([2.5, 2.5])) is None
    # Worse on the mean, at no point where autodiff is right (it is 10 bits off there).
    mean = worse_than_autodiff(np.array([20.0, 20.0]), np.array([10.0, 10.0]))
    assert mean is not None and mean.point is None and (mean.generated_bits, mean.autodiff_bits) == (20.0, 10.0)
    # Better on the mean, yet 9 bits off at the point where autodiff is exact.
    point = worse_than_autodiff(np.array([0.0, 9.0, 0.0]), np.array([30.0, 0.0, 30.0]))
    assert point is not None and point.point == 1 and (point.generated_bits, point.autodiff_bits) == (9.0, 0.0)
    # 7 bits off there is chance where the partial cancels: another order of the same operations.
    assert worse_than_autodiff(np.array([0.0, 7.0, 0.0]), np.array([30.0, 0.0, 30.0])) is None
    assert worse_than_autodiff(np.array([]), np.array([])) is None
    # Points left out (subnormals) count neither at a point nor in the mean; a point keeps its index.
    assert worse_than_autodiff(np.array([9.0, 0.0]), np.array([0.0, 0.0]), np.array([False, True])) is None
    kept = worse_than_autodiff(np.array([0.0, 9.0]), np.array([0.0, 0.0]), np.array([False, True]))
    assert kept is not None and kept.point == 1


# ---------------------------------------------------------------- what the accuracy check found in generated code


def test_a_partial_is_computed_whole_before_the_tangent_multiplies_it(built):
    """JAX transposed `t0 * x_dot * y * c` into `((ct * c) * y) * t0`: at x = -4.3e177, y = 6.8e283 that is
    inf * 0 = nan where the partial's own order, `(t0 * y) * c`, underflows to the right 0 (autodiff's 0)."""
    import jax
    import jax.numpy as jnp
    import torch

    jax_pkg, torch_pkg, _ = built
    x, y = -4.3154862830369751e177, 6.7695351546410122e283
    assert jax.grad(jax_pkg.sin_exp_mul)(jnp.float64(x), jnp.float64(y)) == 0.0
    tx = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    (gx,) = torch.autograd.grad(torch_pkg.sin_exp_mul(tx, torch.tensor(y, dtype=torch.float64)), tx)
    assert gx.item() == 0.0


def test_a_shared_divisor_is_divided_by_never_multiplied_by_its_reciprocal(built):
    """d hypot/dy = y / hypot(x, y) was `t0 = 1 / hypot(x, y)` shared and `t0 * y`: in float32 at y = -1.27e38
    the reciprocal is subnormal, and the gradient kept 2 of its 24 bits (30 bits of error; -1 exactly now)."""
    import jax
    import jax.numpy as jnp
    import torch

    jax_pkg, torch_pkg, _ = built
    x, y = np.float32(-1.1566816657633307e-33), np.float32(-1.2684797451328267e38)
    assert jax.grad(jax_pkg.f_hypot, argnums=1)(jnp.float32(x), jnp.float32(y)) == -1.0
    tx, ty = torch.tensor(x, requires_grad=True), torch.tensor(y, requires_grad=True)
    (gy,) = torch.autograd.grad(torch_pkg.f_hypot(tx, ty), ty)
    assert gy.item() == -1.0


def _split3_functions():
    """split3 in JAX, and as a custom_jvp whose rule multiplies each tangent by its partial computed whole."""
    import jax
    import jax.numpy as jnp

    def split3(x, y):
        return x, 2 * x + 1, jnp.exp(x) * y + x

    @jax.custom_jvp
    def rule_like(x, y):
        return split3(x, y)

    @rule_like.defjvp
    def _(primals, tangents):
        x, y = primals
        x_dot, y_dot = tangents
        partial = jnp.exp(x) * y + 1
        return split3(x, y), (x_dot, 2 * x_dot, partial * x_dot + jnp.exp(x) * y_dot)

    return split3, rule_like


def _split3_plan(tmp_path):
    """What the evaluations read of a measurement's plan, for split3: a = x, b = 2x + 1, c = exp(x) y + x."""
    (rule,) = rules_from(
        tmp_path,
        "name: split3\ninputs: [x, y]\noutputs: [a, b, c]\nforward: {a: x, b: 2*x + 1, c: exp(x)*y + x}\n",
        "r.yaml",
    )
    return types.SimpleNamespace(rule=rule)


def test_a_partial_is_measured_as_the_gradient_of_its_output_alone(tmp_path):
    # split3's a = x beside c = exp(x)*y + x: in float32 at x = 9, y = -3.8e36, c's partial y*exp(x) + 1 is -inf.
    # The JAX measure took d a/dx from one VJP of every output with zero arrays for the others' cotangents, and
    # 0 * -inf made it nan (32 bits wrong, seed 17 of the 20-seed run); jax.grad of a alone, as torch's backward of
    # a alone, never multiplies c's partial at all.
    import jax

    from rulegen.check.accuracy import Quantity, _evaluate_jax

    jax.config.update("jax_enable_x64", True)

    plan = _split3_plan(tmp_path)
    args = [np.asarray([9.0168361663818359], dtype=np.float32), np.asarray([-3.7692212027758653e36], dtype=np.float32)]
    _, rule_like = _split3_functions()
    found = _evaluate_jax(rule_like, plan, args)
    assert found[Quantity("a", "x")] == 1.0
    assert found[Quantity("b", "x")] == 2.0


def test_forward_mode_is_measured_an_input_at_a_time_and_a_zero_for_the_other_counts(tmp_path):
    # Reverse mode alone was measured: a JVP that gave an input held constant a zero tangent, times a partial
    # that overflows, was nan where autodiff's tangent (no term for a constant) is right, and no check saw it
    # (split3's dc/dy at x = 800: exp(x) = inf; sin_exp_mul's tangent in y alone at x near float max).
    import jax
    import torch

    from rulegen.check.accuracy import Quantity, _forward_partials

    jax.config.update("jax_enable_x64", True)
    plan = _split3_plan(tmp_path)
    args = [np.asarray([800.0, 1.0]), np.asarray([2.0, 3.0])]
    split3, zero_for_the_held = _split3_functions()  # JAX gives the input held constant a zero array
    found = _forward_partials("jax")(zero_for_the_held, plan, args)
    autodiff = _forward_partials("jax")(split3, plan, args)
    assert set(found) == {Quantity(o, i, "forward") for o in "abc" for i in "xy"}
    assert np.isnan(found[Quantity("c", "y", "forward")][0]) and np.isinf(autodiff[Quantity("c", "y", "forward")][0])
    assert np.isnan(found[Quantity("c", "x", "forward")][0]) and np.isinf(autodiff[Quantity("c", "x", "forward")][0])
    assert found[Quantity("b", "x", "forward")].tolist() == [2.0, 2.0]

    def split3_torch(x, y):
        return x.clone(), 2 * x + 1, torch.exp(x) * y + x

    torch_found = _forward_partials("torch")(split3_torch, plan, args)
    assert torch_found[Quantity("c", "x", "forward")].tolist() == [math.inf, 3 * math.exp(1) + 1]
    assert torch_found[Quantity("a", "y", "forward")].tolist() == [0.0, 0.0]


def test_a_flushed_subnormal_counts_as_correctly_rounded_for_jax_alone(tmp_path):
    # XLA flushes subnormal results to zero (JAX's 5e-324 / 2 is 0): no JAX code computes 1e-320, whose zero is
    # the platform's correctly rounded value.  torch computes subnormals, and its zero is as wrong as it looks.
    import jax.numpy as jnp

    from rulegen.check.accuracy import Quantity, measure_functions

    assert float(jnp.asarray(np.float64(1e-320)) * 1.0) == 0.0
    (rule,) = rules_from(
        tmp_path, "name: tiny_scale\ninputs: {x: {domain: {ge: 1.0e-20, le: 1.0e-10}}}\nforward: x * 1e-300\n", "r.yaml"
    )
    flushed = {"jax": lambda x: x * 1e-300 * 0.0, "torch": lambda x: x * 1e-300 * 0.0}
    measured = measure_functions(rule, flushed, points=16, dtypes=("float64",))
    value = Quantity("out")
    assert measured.find(value, "float64", "jax", "generated").max == 0
    assert measured.find(value, "float64", "torch", "generated").mean > 10
    # A wrong nonzero is as wrong for JAX as for torch.
    off = {"jax": lambda x: x * 1e-290, "torch": lambda x: x * 1e-290}
    measured = measure_functions(rule, off, points=16, dtypes=("float64",))
    assert measured.find(value, "float64", "jax", "generated").mean > 10


def test_a_rational_power_is_within_an_ulp_where_pow_s_rounded_exponent_is_not(built):
    """x**(1/3) through pow with the exponent 0.333...3 (1/3 rounded) is off by |ln x| * 2**-54 relative: 60 ulps
    at 1e300.  The runtime's nth_root refines it by one Newton step, value and partial alike (f_cbrt)."""
    import jax
    import jax.numpy as jnp
    import mpmath
    import torch

    jax_pkg, torch_pkg, _ = built
    for x in (1e300, 3e-300, 7.0, 1.5e-10):
        root = mpmath.cbrt(mpmath.mpf(x))
        exact = np.array([float(root), float(1 / (3 * root**2))])
        tx = torch.tensor(x, dtype=torch.float64, requires_grad=True)
        value = torch_pkg.f_cbrt(tx)
        (grad,) = torch.autograd.grad(value, tx)
        for got in (
            np.array([float(value), float(grad)]),
            np.array([float(jax_pkg.f_cbrt(jnp.float64(x))), float(jax.grad(jax_pkg.f_cbrt)(jnp.float64(x)))]),
        ):
            assert bits_of_error(got, exact, np.float64).max() <= 1.6, (x, got, exact)
    assert float(jax_pkg.f_cbrt(jnp.float64(-8.0))) != float(jax_pkg.f_cbrt(jnp.float64(-8.0)))  # nan, as pow's


def test_a_backend_that_loses_what_the_other_keeps_is_found_though_autodiff_loses_it_too():
    """JAX's gelu computed 1 + erf(x/sqrt 2) where torch's computed erfc: every bit lost below x = -6 in float32,
    as autodiff of the forward as written loses them, so the check (generated against autodiff) passed it.
    Against the other backend's generated code, by the same rule, at the check's own points, it is found."""
    from pathlib import Path

    import jax
    import jax.scipy.special as jss

    from generated.jax import gelu as jax_gelu
    from generated.torch import gelu as torch_gelu
    from rulegen.check.accuracy import CHECK_POINTS, accuracy_failures, backend_gaps, measure_functions

    (rule,) = read_rule_file(Path(__file__).resolve().parents[2] / "rules" / "gelu.yaml")

    @jax.custom_jvp
    def erf_gelu(x):
        return x * (1 + jss.erf(x / math.sqrt(2))) / 2

    @erf_gelu.defjvp
    def _erf_gelu_jvp(primals, tangents):
        (x,), (x_dot,) = primals, tangents
        cdf = (1 + jss.erf(x / math.sqrt(2))) / 2
        return x * cdf, x_dot * (cdf + x * jax.numpy.exp(-(x**2) / 2) / math.sqrt(2 * math.pi))

    def measured(jax_fn):
        # At the check's own points: CHECK_POINTS drawn over every binade, which miss the band from x = -13 to -5,
        # and the probe magnitudes, which do not.
        generated = {"jax": jax_fn, "torch": torch_gelu}
        return measure_functions(rule, generated, points=CHECK_POINTS, seed=0, dtypes=("float32",))

    erf_form = measured(erf_gelu)
    assert not accuracy_failures(erf_form)  # autodiff loses the same bits
    said = backend_gaps(erf_form)
    assert said and all("(jax)" in s and "torch's generated code" in s for s in said), said
    assert not backend_gaps(measured(jax_gelu))


def test_the_check_is_finite_wherever_the_exact_value_is_whatever_autodiff_does(tmp_path):
    """The logistic as exp(x) / (exp(x) + 1) is nan past x = 709 (88 in float32), where it is 1, and autodiff of
    it just as nan: "no worse than autodiff" passed it.  The check's points reach the whole line, and a result inf
    or nan where the exact value is a finite float fails, whatever autodiff does."""
    from rulegen.check.accuracy import CHECK_POINTS, accuracy_failures, measure_functions

    (rule,) = rules_from(
        tmp_path, "name: logistic\ninputs: {x: {domain: [-3, 3]}}\nforward: exp(x) / (exp(x) + 1)\n", "r.yaml"
    )

    def written(exp):
        return lambda x: exp(x) / (exp(x) + 1)

    import jax.numpy as jnp
    import torch

    generated = {"jax": written(jnp.exp), "torch": written(torch.exp)}
    measured = measure_functions(rule, generated, points=CHECK_POINTS, where="both")
    failures = accuracy_failures(measured)
    assert failures and all("where the exact value is" in f and "autodiff nan" in f for f in failures), failures
    # Inside its domain alone, as the check sampled before, nothing is found.
    assert not accuracy_failures(measure_functions(rule, generated, points=CHECK_POINTS))


def test_the_checks_sample_each_input_s_special_floats(tmp_path):
    """0, the smallest subnormal and normal and the largest float, of either sign, inside the line sampled: a
    derivative nan at 0 alone (sin(x) / tan(x), exactly cos(x)) is found there and nowhere else."""
    import jax.numpy as jnp
    import torch

    from rulegen.check.accuracy import inadmissible_results

    (rule,) = rules_from(tmp_path, "name: at_zero\ninputs: [x]\nforward: sin(x)\n", "r.yaml")

    def custom(backend):
        if backend == "jax":
            import jax

            @jax.custom_jvp
            def f(x):
                return jnp.sin(x)

            f.defjvp(lambda p, t: (jnp.sin(p[0]), t[0] * jnp.sin(p[0]) / jnp.tan(p[0])))
            return f

        class F(torch.autograd.Function):
            @staticmethod
            def forward(x):
                return torch.sin(x)

            @staticmethod
            def setup_context(ctx, inputs, output):
                ctx.save_for_backward(inputs[0])

            @staticmethod
            def backward(ctx, g):
                (x,) = ctx.saved_tensors
                return g * torch.sin(x) / torch.tan(x)

            @staticmethod
            def jvp(ctx, t):
                raise NotImplementedError

        return F.apply

    found = inadmissible_results(rule, {"jax": custom("jax"), "torch": custom("torch")}, points=64)
    assert any("dout/dx in float64 (jax): nan at x=0 " in f for f in found), found
    assert any("dout/dx in float32 (torch): nan at x=0 " in f for f in found), found


def test_an_overflow_far_beyond_the_floats_is_proved_at_low_precision():
    import mpmath

    from rulegen.check.accuracy import beyond_the_floats

    assert beyond_the_floats(mpmath.exp, [1e300], np.float64)
    assert beyond_the_floats(mpmath.exp, [100.0], np.float32) and not beyond_the_floats(mpmath.exp, [80.0], np.float32)
    assert beyond_the_floats(mpmath.asin, [2.0], np.float64)  # off the real line
    assert beyond_the_floats(lambda x: mpmath.mpf(5.48) ** x, [9.9e132], np.float64)  # an exponent itself huge

    # A cancellation's remainder is no overflow: e^x - (e^(x/2))^2 + 1 is 1, but at x = 1200 both low precisions
    # leave remainders beyond the largest float, 96 binades apart.
    def cancels(x):
        return mpmath.exp(x) - mpmath.exp(x / 2) ** 2 + 1

    with mpmath.workprec(96):
        assert mpmath.mag(cancels(mpmath.mpf(1200))) > 1100
    assert not beyond_the_floats(cancels, [1200.0], np.float64)
    assert not beyond_the_floats(lambda x: 1 / ((x + mpmath.mpf(2) ** -300) - x), [1.0], np.float64)
