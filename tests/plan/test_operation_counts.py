"""What eager torch runs for the printed code, one kernel where one does (counted by torch's dispatcher), and how
a JAX tangent is summed.

A reciprocal is `torch.reciprocal` (`1 / t` is `t.reciprocal() * 1`), a difference a subtraction (`-t0 + x` is a
negation and a sum), a negated tangent term subtracted, and the cost model that decides what torch saves and
how it chains tangents counts a subtraction as the one pass it is.  Under `fast`, a JAX tangent whose partials
share a factor multiplies it once, as autodiff does.
"""

from __future__ import annotations

from collections import Counter

import sympy as sp
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from rulegen.computation.cost import eager_passes, recompute_cost
from rulegen.derive import functions as fn
from rulegen.derive.partials import derive_rule
from rulegen.plan import Result, plan_jax, plan_torch
from rulegen.plan.emit import Emitter
from rulegen.plan.forms import torch_forms
from rulegen.plan.printers import print_jax, print_torch, print_torch_framework
from rulegen.runtime.torch._function import summed_like
from rulegen.spec.rules import read_rule_file
from tests.conftest import rules_from

X, Y = sp.symbols("x y", real=True)
T0 = sp.Symbol("t0", real=True)  # a name cse gives, which sympy orders before x


class _Kernels(TorchDispatchMode):
    """The aten operations that write an array, by name."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if isinstance(out, torch.Tensor) and out.numel() > 1 and not func.is_view:
            self.ops[func.__name__.split(".")[0]] += 1
        return out


def _kernels(code: str, names: dict[str, torch.Tensor]) -> Counter[str]:
    env = {"torch": torch, **names}
    with _Kernels() as counted:
        eval(code, env)
    return counted.ops


def _values() -> dict[str, torch.Tensor]:
    return {n: torch.linspace(0.5, 2.0, 16, dtype=torch.float64) + k for k, n in enumerate(("x", "y", "t0"))}


def test_a_reciprocal_of_an_array_is_one_kernel():
    text = print_torch(1 / (X + Y))[0].text
    assert text == "torch.reciprocal(x + y)"
    assert sum(_kernels(text, _values()).values()) == 2  # the sum, the reciprocal (1 / t: reciprocal, mul)
    # What a user writes stays as written: autodiff of the forward as written is measured so.
    assert print_torch_framework(1 / (X + Y))[0].text == "1 / (x + y)"
    assert print_jax(1 / (X + Y))[0].text == "1 / (x + y)"  # one divide under jit


def test_a_difference_is_one_kernel_and_the_same_number():
    expr = X - T0
    text = print_torch(expr)[0].text
    assert text == "x - t0"  # not sympy's order, -t0 + x
    assert _kernels(text, _values()) == Counter({"sub": 1})
    assert print_jax(expr)[0].text == "x - t0"
    # Three terms: only the first two change places, so the sum is added as before, to the bit.
    values = {"x": torch.tensor([1e17, 0.1]), "t0": torch.tensor([3.0, 0.3]), "y": torch.tensor([-1e17, 0.7])}
    three = print_torch(-T0 + X + Y)[0].text
    assert eval(three, {"torch": torch, **values}).tolist() == ((-values["t0"] + values["x"]) + values["y"]).tolist()


def test_an_in_place_difference_of_names_is_not_a_negation_then_a_sum():
    # (x - y)**2 / 2 beside x - y, as squared error's forward: t0 = (-y).add_(x) was two kernels for x - y.
    emit = Emitter(print_torch, {"x", "y"}, torch_forms((), ()))
    results = [Result("r0", (X - Y) ** 2 / 2), Result("r1", X - Y)]
    in_place = emit.in_place_block(results, {"x", "y"}, min_spared=1)
    out_of_place = emit.block([], results)
    for block in filter(None, (in_place, out_of_place)):
        text = "\n".join(a.line for a in block.lines)
        env = {"torch": torch, **_values()}
        with _Kernels() as counted:
            exec(text, env)
            eval(block.result, env)
        assert "neg" not in counted.ops, text


def test_a_negated_tangent_term_is_subtracted(tmp_path):
    # Poisson NLL's tangent: r_dot * (saved_exp - y) + y_dot * (-r) was a negation, a product and a sum.
    (rule,) = rules_from(tmp_path, "name: nll\ninputs: [r, y]\nforward: exp(r) - y * r\n", "r.yaml")
    jvp = plan_torch(derive_rule(rule)).jvp
    text = "\n".join([*(a.line for a in jvp.lines), jvp.result]).replace(" ", "")
    assert "(-r)" not in text and "-r*y_dot" in text, text


def test_the_cost_model_counts_a_subtraction_as_one_pass():
    arrays = {X, Y}
    assert recompute_cost(X - Y, arrays) == 1
    assert recompute_cost(1 - X, arrays) == 1  # torch.rsub
    assert recompute_cost(-X - Y, arrays) == 2  # one negation stays
    assert recompute_cost(1 - X * Y, arrays) == 2
    # tanhshrink's tangent: x_dot - t_dot beside t_dot = tanh_backward(x_dot, t) is one pass fewer than t**2 * x_dot.
    x_dot, t, t_dot = sp.symbols("x_dot t t_dot", real=True)
    chained = eager_passes([x_dot - t_dot, fn.tanh_backward(x_dot, t)], set())
    direct = eager_passes([t**2 * x_dot, fn.tanh_backward(x_dot, t)], set())
    assert chained < direct


def _jax_tangent(tmp_path, forward: str, accuracy: str) -> str:
    (rule,) = rules_from(
        tmp_path, f"name: sq\ninputs: [x, y]\naccuracy: {accuracy}\nforward: {forward}\n", f"r_{accuracy}.yaml"
    )
    jvp = plan_jax(derive_rule(rule)).jvp
    assert jvp is not None
    return jvp.result.replace(" ", "")


def test_under_fast_a_factor_the_partials_share_multiplies_the_tangents_once(tmp_path):
    # Autodiff's t0 * (x_dot - y_dot): transposed under jit, y's cotangent is the negation of x's, where
    # x_dot * t0 + y_dot * (-t0) made XLA compute t0 and a product for each (three fusions reading x and y, not
    # two and a negation: grad 1.3x autodiff's).
    assert _jax_tangent(tmp_path, "(x - y)**2 / 2", "fast").endswith("t0*summed_like(out,x_dot,(y_dot,-1))")
    # Under `best` each partial multiplies its own tangent, as measured.
    assert _jax_tangent(tmp_path, "(x - y)**2 / 2", "best").endswith("summed_like(out,(x_dot,t0),(y_dot,-t0))")
    # Partials that share no factor are summed as they are.
    assert "(x_dot," in _jax_tangent(tmp_path, "exp(x) * y", "fast")


def test_a_negated_function_times_the_cotangent_is_one_native_kernel_negated(tmp_path):
    # softplus(1 - z)'s partial -sigmoid(1 - z): out_bar * (-sigmoid(1 - z)) was a sigmoid, a negation and a
    # product; as -(out_bar * sigmoid(1 - z)) it is softplus's own backward kernel, negated.  With the residual
    # 1 - z kept, the lone output's term is that product too, not a pair summed_like multiplies (sigmoid, neg, mul).
    (rule,) = rules_from(tmp_path, "name: hinge\ninputs: [z]\nforward: softplus(1 - z)\n", "r.yaml")
    plan = plan_torch(derive_rule(rule))
    backward = plan.backward.result.replace(" ", "")
    assert "else-torch.ops.aten.softplus_backward(out_bar,saved_value,1.0," in backward, backward
    values = {"z": torch.linspace(-2.0, 2.0, 16, dtype=torch.float64)}
    values["saved_value"], values["out_bar"] = 1 - values["z"], torch.ones(16, dtype=torch.float64)
    counted = _kernels(plan.backward.result, {"summed_like": summed_like, "saved_value_bar": None, **values})
    assert counted == Counter({"softplus_backward": 1, "neg": 1}), counted  # autodiff's two
    # gradcheck calls backward with the output's cotangent absent too: the residual's term alone.
    values["out_bar"], values["saved_value_bar"] = None, torch.ones(16, dtype=torch.float64)
    assert eval(plan.backward.result, {"torch": torch, "summed_like": summed_like, **values}).tolist() == [-1.0] * 16


def test_a_one_operation_argument_autodiff_keeps_is_kept_where_it_stands_in_for_the_input(tmp_path):
    # softplus(1 - z): recomputing 1 - z in backward was a kernel more than autodiff, which keeps it (backward
    # 3 kernels against 2, torch.func.jvp 5 against 4).  The backward reads it in place of z, and forward mode
    # chains through its tangent, -z_dot, into softplus's backward kernel: 4 kernels, as autodiff.
    path = tmp_path / "r.yaml"
    path.write_text("name: hinge\ninputs: [z]\nforward: softplus(1 - z)\n")
    (rule,) = read_rule_file(path)
    plan = plan_torch(derive_rule(rule))
    assert plan.saved == ("z", "saved_value")
    assert "z-1" not in plan.backward.result.replace(" ", "")  # z only for summed_like's shape
    jvp = "\n".join([*(a.line for a in plan.jvp.lines), plan.jvp.result]).replace(" ", "")
    assert "saved_value_dot=-z_dot" in jvp and "softplus_backward(saved_value_dot,saved_value,1.0," in jvp, jvp
    # Beside its input it would spare one pass of backward for one more tangent: log1p(x**2)'s partial 2x/(1 + x**2)
    # reads x, so x**2 is recomputed.
    path.write_text("name: r\ninputs: [x]\nforward: log1p(x**2)\n")
    (rule,) = read_rule_file(path)
    assert plan_torch(derive_rule(rule)).saved == ("x",)


def test_a_shared_negation_is_shared_as_the_value_it_negates():
    # sp.cse names -exp(x) of exp(x) - x*y and exp(x) - y; each use then negates it again (-x*y - t0).
    from rulegen.computation.sharing import shared_subexpressions

    replacements, reduced = shared_subexpressions([sp.exp(X) - X * Y, sp.exp(X) - Y], sp.numbered_symbols("t"))
    ((name, value),) = replacements
    assert value == sp.exp(X) and reduced == [name - X * Y, name - Y], (replacements, reduced)
    assert eager_passes(reduced, set()) < eager_passes([-X * Y + name, -name - Y], set())
    # A negated name stays shared as the negation: t0 = y would be no value, each use negating it again.
    selections = [sp.Piecewise((1, X > 0), (-Y, True)), X * sp.Piecewise((2, X < 0), (-Y, True))]
    replacements, _ = shared_subexpressions(selections, sp.numbered_symbols("t"))
    assert [v for _, v in replacements] == [-Y], replacements
