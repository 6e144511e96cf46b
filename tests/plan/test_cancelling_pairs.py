"""A sum's pair of like terms that cancel is added first, in the code the planners emit and as the search measures
it, whatever subexpressions the body shares."""

from __future__ import annotations

import math

import numpy as np
import sympy as sp
import torch

from rulegen.computation.sharing import added, shared_subexpressions
from rulegen.derive import functions as fn
from rulegen.derive.stabilise.gate import as_computed
from rulegen.derive.stabilise.points import _numpy_function
from rulegen.plan import Result
from rulegen.plan.code import Import, import_statements
from rulegen.plan.emit import Emitter
from rulegen.plan.forms import torch_forms
from rulegen.plan.printers import print_torch

K, LOGITS = sp.symbols("k logits", real=True)
R = sp.Symbol("r", positive=True)
# A negative binomial's partials in r and k, as derived: digamma(k + r) is in both, and a body shares it.
D_R = -fn.softplus(LOGITS) - sp.polygamma(0, R) + sp.polygamma(0, K + R)
D_K = -fn.softplus(-LOGITS) - sp.polygamma(0, K + 1) + sp.polygamma(0, K + R)
# Where k is negligible beside r: digamma(k + r) - digamma(r) is 1e-60, and the partial is -softplus(logits).
POINT = {"k": 7.515205075876123e-110, "r": 2.6091218465861878e-25, "logits": -2.74}
EXACT = -math.log1p(math.exp(-2.74))


def test_sharing_keeps_a_cancelling_pair_one_term():
    replacements, (reduced, _) = shared_subexpressions([D_R, D_K], sp.numbered_symbols("t"))
    pairs = [a for a in sp.preorder_traversal(reduced) if isinstance(a, added)]
    assert len(pairs) == 1, reduced
    # cse names digamma(k + r), which both partials read: the pair reads the name and the other digamma.
    values = dict(replacements)
    written = [sp.Add(*pairs[0].args).xreplace(values)]
    while written[-1].has(*values):
        written.append(written[-1].xreplace(values))
    assert sp.simplify(written[-1] - (sp.polygamma(0, K + R) - sp.polygamma(0, R))) == 0


def test_the_torch_body_adds_the_pair_before_the_softplus():
    # As torch's backward reads it: the softplus saved by the forward, a name like the one cse gives digamma(k + r).
    saved = sp.Symbol("saved_softplus", real=True)
    d_r, d_k = (d.xreplace({fn.softplus(LOGITS): saved}) for d in (D_R, D_K))
    forms = torch_forms(set(), ())
    emit = Emitter(print_torch, {"k", "r", "logits", "saved_softplus"}, forms)
    block = emit.block([], [Result("d_r", d_r), Result("d_k", d_k)])
    env = {name: torch.tensor([value], dtype=torch.float64) for name, value in POINT.items()}
    env["saved_softplus"] = torch.nn.functional.softplus(env["logits"])
    imports = import_statements(emit.imports | {Import("torch")})
    relative = [line.replace("from ._", "from generated.torch._") for line in imports]
    exec("\n".join(line.replace("from . import", "from generated.torch import") for line in relative), env)
    exec("\n".join([*(a.line for a in block.lines), f"__result = ({block.result},)"]), env)
    d_r = float(env["__result"][0])
    # Added left to right as sympy orders the terms, the saved softplus and the name first, it was lost: 0.0.
    assert math.isclose(d_r, EXACT, rel_tol=1e-15), d_r


def test_the_search_measures_the_pair_added_first():
    # The gate measures a form as the planners compute it (`as_computed`): the same pairs, the same order.
    saved = sp.Symbol("saved_softplus", real=True)
    computed = as_computed(D_R.xreplace({fn.softplus(LOGITS): saved}))
    fn_ = _numpy_function(computed, (K, R, saved))
    assert fn_ is not None
    columns = (np.asarray([POINT["k"]]), np.asarray([POINT["r"]]), np.asarray([-EXACT]))
    value = float(np.asarray(fn_(*columns)).reshape(-1)[0])
    assert math.isclose(value, EXACT, rel_tol=1e-15), value


def test_a_number_over_a_shared_square_divides_each_use():
    # A KL divergence of two normals as the logs-apart form writes it: cse shared 0.5/s**2 between the two
    # quotients, inf where s**2 is subnormal (s = 1.2e-156) though 0.5 (x - y)**2/s**2 is 1.7e273; the gate then
    # turned down the form that keeps its log finite where (p/s)**2 underflows.
    p, s = sp.symbols("p s", positive=True)
    x, y = sp.symbols("x y", real=True)
    quotient = fn.divided(p, s) ** 2
    expr = (
        0.5 * p**2 / s**2 + 0.5 * (x - y) ** 2 / s**2 - 0.5 * sp.Piecewise((sp.log(quotient), quotient > 0), (0, True))
    )
    computed = as_computed(expr)
    fn_ = _numpy_function(computed, (x, p, y, s))
    assert fn_ is not None
    point = (1.4649389862981735e-126, 1.991833634434781e-153, -6.764943453036454e-20, 1.176823319272837e-156)
    with np.errstate(all="ignore"):
        value = float(np.asarray(fn_(*(np.asarray([v]) for v in point))).reshape(-1)[0])
    assert math.isfinite(value) and math.isclose(value, 1.6522502063060107e273, rel_tol=1e-12), value


def test_a_pair_of_static_inputs_is_python_arithmetic():
    # beta of static inputs in torch: cse kept a cancelling pair of the static a and b whole, and the printers, which
    # write a function of static inputs alone as Python's math, took `added` for a tensor function:
    # torch.exp((a - b) + ...) of a Python float raised TypeError.
    a, b, c = sp.symbols("a b c", real=True)
    emit = Emitter(print_torch, {"a", "b", "c"}, torch_forms({"a", "b", "c"}, ()), scalars={"a", "b", "c"})
    pair = sp.exp(sp.loggamma(a) - sp.loggamma(b) + c)
    block = emit.block([], [Result("r", pair)])
    env: dict[str, object] = {"a": 3.5, "b": 2.5, "c": 0.25}
    imports = import_statements(emit.imports | {Import("torch"), Import("math")})
    relative = [line.replace("from ._", "from generated.torch._") for line in imports]
    exec("\n".join(line.replace("from . import", "from generated.torch import") for line in relative), env)
    exec("\n".join([*(a.line for a in block.lines), f"__result = ({block.result},)"]), env)
    (value,) = env["__result"]  # type: ignore[misc]
    assert math.isclose(float(value), 2.5 * math.exp(0.25), rel_tol=1e-14), block


def test_an_irrational_number_over_a_shared_name_divides_each_use():
    # A normal's log-cdf's partials in x and loc, sqrt(2)/(sqrt(pi) s erfcx(sqrt(2)(loc - x)/(2s))), share
    # sqrt(2)/s with the argument: cse named it, inf at s = 5e-324, and the partial was inf / erfcx(-inf) = nan
    # where it is 0 (x - loc = 2.3e19).  sqrt(2) is a number that 1/s is times, as 0.5 is.
    x, loc = sp.symbols("x loc", real=True)
    s = sp.Symbol("s", positive=True)
    u = sp.sqrt(2) * (loc - x) / (2 * s)
    slope = sp.sqrt(2) / (sp.sqrt(sp.pi) * s * fn.erfcx(u))
    replacements, reduced = shared_subexpressions([slope, -slope, u * slope], sp.numbered_symbols("t"))
    named = dict(replacements)
    assert not any(v.free_symbols == {s} for v in named.values()), replacements  # no sqrt(2)/s named
    point = (2.3119009046119e19, 10.96, 5e-324)
    for form in reduced[:2]:
        whole = form
        for symbol, value in reversed(replacements):
            whole = whole.xreplace({symbol: value})
        fn_ = _numpy_function(as_computed(whole), (x, loc, s))
        assert fn_ is not None
        with np.errstate(all="ignore"):
            value = float(np.asarray(fn_(*(np.asarray([v]) for v in point))).reshape(-1)[0])
        assert value == 0, (whole, value)
