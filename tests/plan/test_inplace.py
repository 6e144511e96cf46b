"""In-place torch bodies compute what the out-of-place ones do, and write only the buffers they allocate."""

from __future__ import annotations

import ast
import textwrap

import pytest
import sympy as sp
import torch

from rulegen.derive import functions as fn
from rulegen.plan import Result
from rulegen.plan.code import Expr, Import, import_statements, printed
from rulegen.plan.emit import Emitter
from rulegen.plan.forms import torch_forms
from rulegen.plan.printers import print_torch

X, Y, S, G = sp.symbols("x y s g", real=True)
BETA = sp.Symbol("beta", positive=True)  # a static input: a Python float, not a tensor
TENSORS = {"x", "y", "s", "g"}


def _run(block, imports, values):
    env = dict(values)
    # The runtime helpers a generated module imports from its package (`from ._native import ...`).
    relative = [line.replace("from ._", "from generated.torch._") for line in imports]
    exec("\n".join(line.replace("from . import", "from generated.torch import") for line in relative), env)
    exec("\n".join([*(a.line for a in block.lines), f"__result = ({block.result},)"]), env)
    return env["__result"]


TORCH_FORMS = torch_forms({"beta"}, ())


def _both(exprs, forms=TORCH_FORMS):
    results = [Result(f"r{k}", e) for k, e in enumerate(exprs)]
    # beta is a static input, as plan_torch tells the emitter: a function of
    # beta alone is Python arithmetic, math.sqrt(beta**2 + 1), where torch.sqrt
    # of the Python float would raise out of place too (hypothesis seed 44).
    emit = Emitter(print_torch, {"x", "y", "s", "g", "beta"}, forms, scalars={"beta"})
    out_of_place = emit.block([], results)
    # The writer's mechanics, on bodies small enough that a generated module would keep them out of place.
    in_place = emit.in_place_block(results, TENSORS, min_spared=1)
    return out_of_place, in_place, import_statements(emit.imports | {Import("torch")})


def _inputs():
    generator = torch.Generator().manual_seed(0)
    values = {n: torch.randn(5, dtype=torch.float64, generator=generator) for n in sorted(TENSORS)}
    values["beta"] = 1.5
    return values


MASK = sp.Piecewise((1, X > 0), (0, True))  # torch.where(x > 0, 1, 0): int64


def _written(block) -> tuple[set[str], set[str], list[ast.expr]]:
    """The names `block` binds to a `torch.where(...)` (a mask), those it binds to what reads a mask, and the
    receiver of each in-place method it calls."""
    tree = _tree(block)
    masks: set[str] = set()
    from_masks: set[str] = set()
    for node in ast.walk(tree):  # statements in order: a name is bound before it is read
        if isinstance(node, ast.Assign):
            names = {t.id for t in node.targets if isinstance(t, ast.Name)}
            if "torch.where" in ast.unparse(node.value):
                masks |= names
            elif {n.id for n in ast.walk(node.value) if isinstance(n, ast.Name)} & (masks | from_masks):
                from_masks |= names
    receivers = [node.func.value for node in ast.walk(tree) if _in_place_call(node)]
    return masks, from_masks, receivers


@pytest.mark.parametrize(
    ("exprs", "written_in_place"),
    [
        # sp.cse names the shared mask t0, and what reads it has no Piecewise
        # left in it: these built a buffer from t0 (hypothesis seeds 16, 27).
        ([MASK, X - MASK], False),  # t1 = -t0, int64: t1.add_(x) raised
        ([MASK, sp.log(MASK + 1)], False),  # t1 = t0 + 1, int64: t1.log_() raised
        # t1 = beta*t0 was float32: t1.sub_(x/beta) rounded the float64 result; now the buffer is -x/beta's
        ([MASK, BETA * MASK - X / BETA], True),
    ],
)
def test_a_shared_mask_is_never_a_buffer(exprs, written_in_place):
    out_of_place, in_place, imports = _both(exprs)
    values = _inputs()
    expected = _run(out_of_place, imports, values)
    got = _run(in_place or out_of_place, imports, values)
    for e, g in zip(expected, got, strict=True):
        torch.testing.assert_close(g, e)  # dtypes too
    assert (in_place is not None) == written_in_place
    if in_place is None:
        return
    # The structure, not the spelling: the mask is computed once and shared, and no buffer written in place is
    # the mask, a name bound from it, or an input.
    masks, from_masks, receivers = _written(in_place)
    assert len(masks) == 1, printed(in_place.statements)
    assert receivers, printed(in_place.statements)
    for receiver in receivers:
        written = receiver.id if isinstance(receiver, ast.Name) else None
        assert written not in masks | from_masks | TENSORS, printed(in_place.statements)


@pytest.mark.parametrize(
    "exprs",
    [
        # t0 = 1 / beta, then torch.sqrt((2*beta - 2*t0)**2 + 1) of a Python float raised (hypothesis seed 72);
        # a reciprocal is no temporary now (x / beta), so the shared static here is a square root
        [BETA * X - sp.sqrt((2 * BETA - 2 * sp.sqrt(BETA)) ** 2 + 1) * sp.sqrt(BETA)],
        # t0 = math.sqrt(2), then torch.exp(t0) and torch.erf(t0 + 1) raised
        [sp.exp(sp.sqrt(2)) * X, sp.sqrt(2) * X + sp.erf(sp.sqrt(2) + 1)],
    ],
)
def test_a_temporary_of_statics_and_numbers_alone_is_a_python_number(exprs):
    out_of_place, in_place, imports = _both(exprs)
    assert out_of_place.lines, "sp.cse shares no temporary: nothing is tested"
    values = _inputs()
    x = values["x"].numpy()
    expected = [torch.from_numpy(sp.lambdify((X, BETA), e, "numpy")(x, values["beta"])) for e in exprs]
    for block in (out_of_place, in_place or out_of_place):
        for e, g in zip(expected, _run(block, imports, values), strict=True):
            torch.testing.assert_close(g, e)


def _tree(block) -> ast.Module:
    return ast.parse("def body():\n" + textwrap.indent(printed(block.statements), "    "))


def _in_place_call(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr.endswith("_")
        and not node.func.attr.startswith("_")
    )


def _allocations(block) -> int:
    """The tensors `block` allocates: each operator and each call but an in-place method's that reads a tensor."""
    return sum(
        isinstance(node, (ast.BinOp, ast.UnaryOp, ast.Call))
        and not _in_place_call(node)
        and any(isinstance(n, ast.Name) and n.id in TENSORS for n in ast.walk(node))
        for node in ast.walk(_tree(block))
    )


def _statements(block) -> list[ast.stmt]:
    (function,) = _tree(block).body
    assert isinstance(function, ast.FunctionDef)
    return function.body


def test_mish_backward_allocates_two_buffers():
    expr = G * (S + X * (1 - S**2) * fn.sigmoid(X))
    out_of_place, in_place, imports = _both([expr])
    values = _inputs()
    torch.testing.assert_close(_run(in_place, imports, values), _run(out_of_place, imports, values))
    # The buffer made where it is first computed, updated and returned in one chain: one statement, two buffers
    # (s * s and silu(x)), every other step in place.
    (returned,) = _statements(in_place)
    assert isinstance(returned, ast.Return) and _in_place_call(returned.value), ast.unparse(returned)
    assert _allocations(in_place) == 2 < _allocations(out_of_place), printed(in_place.statements)


@pytest.mark.parametrize(
    ("expr", "code"),
    [
        (G * fn.sigmoid(X), "torch.ops.aten.softplus_backward(g, x, 1.0, 40.0)"),
        (G * fn.sigmoid(BETA * X), "torch.ops.aten.softplus_backward(g, x, beta, 40.0)"),
        (G * fn.sigmoid(Y - X), "torch.ops.aten.softplus_backward(g, x - y, -1.0, 40.0)"),
        (G * S * fn.sigmoid(X), "s*torch.ops.aten.softplus_backward(g, x, 1.0, 40.0)"),
        (X * fn.sigmoid(X), "torch.nn.functional.silu(x)"),
        (G * X * fn.sigmoid(X), "g*torch.nn.functional.silu(x)"),
        (G * fn.silu_derivative(X), "silu_backward(g, x)"),
        # An integer multiplies last (rulegen.computation.quotients.scaled_product): as many kernels.
        (2 * G * S * fn.silu_derivative(2 * X), "2 * (s*silu_backward(g, 2*x))"),
        (-G * fn.silu_derivative(Y - X), "-silu_backward(g, y - x)"),
        # In a sum the derivative has no tensor factor: the product is multiplied out.
        (G * (sp.cos(X) + fn.silu_derivative(X)), "g*torch.cos(x) + silu_backward(g, x)"),
        (
            G * fn.sigmoid(Y) * fn.silu_derivative(X),
            "torch.ops.aten.softplus_backward(silu_backward(g, x), y, 1.0, 40.0)",
        ),
        (fn.softplus(BETA * X) / BETA, "torch.nn.functional.softplus(x, beta=beta, threshold=40.0)"),
        (G * fn.softplus(2 * X) / 2, "g*torch.nn.functional.softplus(x, beta=2.0, threshold=40.0)"),
        (-fn.softplus(-X), "torch.nn.functional.softplus(x, beta=-1.0, threshold=40.0)"),
        (3 * fn.softplus(2 * BETA * X) / BETA, "6*torch.nn.functional.softplus(x, beta=2*beta, threshold=40.0)"),
    ],
)
def test_a_product_with_a_sigmoid_is_one_native_kernel(expr, code):
    rewritten, _, imports = _both([expr])
    named = {a.target: a.code for a in rewritten.lines}  # a long result is named first
    assert named.get(rewritten.result, rewritten.result) == code
    plain_code, _, _ = _both([expr], forms=lambda e: e)
    values = _inputs()
    values["x"] = torch.tensor([-800.0, -50.0, -1.0, 0.0, 1e-3, 30.0, 39.5, 40.5, 800.0], dtype=torch.float64)
    values["y"] = torch.linspace(-45, 45, 9, dtype=torch.float64)
    values["g"] = torch.linspace(-2, 2, 9, dtype=torch.float64)
    values["s"] = torch.linspace(-3, 1, 9, dtype=torch.float64)
    expected = _run(plain_code, imports, values)
    torch.testing.assert_close(_run(rewritten, imports, values), expected, rtol=1e-15, atol=0)


@pytest.mark.parametrize(
    ("expr", "fused", "allocations"),
    [
        (sp.exp(X) + 2 * G * S, "addcmul_", 1),  # torch.exp(x).addcmul_(g, s, value=2)
        (sp.exp(X) - G * S / Y, "addcdiv_", 2),  # torch.exp(x).addcdiv_(g*s, y, value=-1)
        (sp.exp(X) + BETA * G * S * Y, "addcmul_", 2),  # torch.exp(x).addcmul_(g*s, y, value=beta)
        (G * S + X * Y, "addcmul_", 1),  # (g*s).addcmul_(x, y)
    ],
)
def test_a_product_added_to_a_buffer_takes_one_pass(expr, fused, allocations):
    out_of_place, in_place, imports = _both([expr])
    values = _inputs()
    torch.testing.assert_close(_run(in_place, imports, values), _run(out_of_place, imports, values))
    # One statement: the product is added to a buffer the body allocated, by one fused in-place kernel.
    (returned,) = _statements(in_place)
    assert isinstance(returned, ast.Return), ast.unparse(returned)
    call = returned.value
    assert isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute), ast.unparse(returned)
    assert call.func.attr == fused, ast.unparse(returned)
    assert not isinstance(call.func.value, ast.Name), ast.unparse(returned)  # not an input written
    assert _allocations(in_place) == allocations < _allocations(out_of_place), ast.unparse(returned)


def test_no_native_kernel_for_statics_masks_or_integer_silu():
    exprs = [
        G * fn.sigmoid(BETA),  # a Python float: torch.sigmoid(beta) would raise too
        G * fn.sigmoid(sp.Piecewise((1, X > 0), (0, True))),  # an integer mask
        sp.Piecewise((1, X > 0), (0, True)) * fn.sigmoid(X),
    ]
    forms = torch_forms({"beta"}, ())
    assert [forms(e) for e in exprs] == exprs
    assert torch_forms((), {"x"})(X * fn.sigmoid(X)) == fn.sigmoid_product(X, X, 1)
    # No product to fold into softplus's beta, nor one whose scale would cost the pass it saves.
    assert [forms(e) for e in (fn.softplus(X), G * fn.softplus(2 * X), G * fn.softplus(-X))] == [
        fn.softplus(X),
        G * fn.softplus(2 * X),
        G * fn.softplus(-X),
    ]


def test_a_lone_silu_derivative_is_its_composite():
    # No cotangent to hand silu_backward: the composite, its one sigmoid shared.
    rewritten, _, imports = _both([fn.silu_derivative(2 * X), 3 * fn.silu_derivative(X)])
    assert "silu_backward" not in rewritten.result
    values = _inputs()
    x = values["x"]
    expected = [torch.func.grad(lambda v: (v * torch.sigmoid(v)).sum())(u) for u in (2 * x, x)]
    got = _run(rewritten, imports, values)
    torch.testing.assert_close(got[0], expected[0], rtol=1e-15, atol=0)
    torch.testing.assert_close(got[1], 3 * expected[1], rtol=1e-15, atol=0)


@pytest.fixture(scope="module")
def plain():
    from generated.torch._inplace import plain

    return plain


def test_plain_holds_only_for_plain_tensors_of_one_shape(plain):
    x, y = torch.ones(3), torch.ones(3)
    assert plain(x, y)
    assert not plain(x, torch.ones(2, 3))
    assert not plain(x, torch.ones(3, dtype=torch.float64))
    leaf = torch.ones(3, requires_grad=True)
    assert not plain(leaf, y)
    with torch.no_grad():
        assert plain(leaf, y)
    seen = []
    torch.func.vmap(lambda row: seen.append(plain(row, row)) or row)(torch.ones(2, 3))
    torch.func.grad(lambda v: seen.append(plain(v)) or v.sum())(torch.ones(3))
    with torch.autograd.forward_ad.dual_level():
        dual = torch.autograd.forward_ad.make_dual(x, torch.ones(3))
        seen.append(plain(dual, y))
    assert seen == [False, False, False]


def test_the_two_bodies_share_what_they_have_in_common():
    """Where the in-place and out-of-place bodies differ in a line, only that line is chosen by `plain`.

    Before, the whole forward was written twice (sin_exp_mul, hypot_pair: 4 and 7 lines over again).
    """
    from rulegen.plan.code import Assign, Return, either

    shared, last = Assign("t1", "torch.sin(x)"), Return("t0 * t1 * y, t0, t1")
    then = (Assign("t0", "(x**2).neg_().exp_()"), shared, last)
    otherwise = (Assign("t0", "torch.exp(-(x**2))"), shared, last)
    assert printed(either("plain(x, y)", then, otherwise)).splitlines() == [
        "t0 = (x**2).neg_().exp_() if plain(x, y) else torch.exp(-(x**2))",
        "t1 = torch.sin(x)",
        "return t0 * t1 * y, t0, t1",
    ]
    # What differs in more than one line is an if/else between what the bodies share.
    prefix = tuple(Assign(f"u{k}", f"x + {k}") for k in range(3))
    two = (Assign("t0", "x.mul_(2)"), Expr("t0.add_(y)"))
    printed_lines = printed(either("plain(x)", (*prefix, *two, last), (*prefix, Assign("t0", "2 * x + y"), last)))
    assert printed_lines.splitlines()[3:] == [
        "if plain(x):",
        "    t0 = x.mul_(2)",
        "    t0.add_(y)",
        "else:",
        "    t0 = 2 * x + y",
        "return t0 * t1 * y, t0, t1",
    ]
    # Nothing shared at the end: the bodies stay apart, the in-place one returning first.
    apart = either("plain(x)", (Return("x.mul_(2)"),), (Return("2 * x"),))
    assert printed(apart).splitlines() == ["if plain(x):", "    return x.mul_(2)", "return 2 * x"]
    # Too little shared to pay for `else:`: apart as well.
    short = either("plain(x)", (*two, last), (Assign("t0", "2 * x + y"), last))
    assert printed(short).splitlines()[0] == "if plain(x):" and "else:" not in printed(short)


def test_no_generated_forward_writes_its_lines_twice():
    """A forward's in-place and out-of-place bodies share no more than one statement written in both."""
    import ast
    from pathlib import Path

    twice = {}
    for path in sorted((Path(__file__).resolve().parents[2] / "generated" / "torch").glob("[!_]*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.FunctionDef) and node.name == "forward"):
                continue
            for k, statement in enumerate(node.body):
                if isinstance(statement, ast.If) and not statement.orelse and "plain(" in ast.unparse(statement.test):
                    one = [ast.unparse(s) for s in statement.body]
                    other = [ast.unparse(s) for s in node.body[k + 1 :]]
                    start = next(
                        (n for n, (a, b) in enumerate(zip(one, other, strict=False)) if a != b),
                        min(len(one), len(other)),
                    )
                    end = next((n for n, (a, b) in enumerate(zip(one[::-1], other[::-1], strict=False)) if a != b), 0)
                    if start + end > 1:
                        twice[path.stem] = start + end
    assert not twice, twice


@pytest.mark.parametrize(
    "expr",
    [
        # softsign's derivative as sympy leaves it: (|x| - x sign(x)) + 1 is 1; (1 - x sign(x)) + |x| is 0.
        (sp.Abs(X) - X * sp.sign(X) + 1) / (2 * sp.Abs(X) + X**2 + 1),
        X**2 - Y**2 + 1,
        sp.exp(X) - sp.exp(Y) + 1 + X * S,
    ],
)
def test_an_in_place_sum_adds_in_the_order_the_out_of_place_code_does(expr):
    out_of_place, in_place, imports = _both([expr])
    assert in_place is not None
    values = {n: torch.tensor([1e17, -3e16, 2.0**60, 0.5], dtype=torch.float64) for n in sorted(TENSORS)}
    values["y"] = values["x"].clone()
    values["beta"] = 1.5
    (expected,) = _run(out_of_place, imports, values)
    (got,) = _run(in_place, imports, values)
    torch.testing.assert_close(got, expected, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize(
    ("expr", "twin"),
    [
        (3 * X**2, False),  # (x*x).mul_(3): one allocation spared, not worth a guard and a second body
        (sp.exp(X) / 2, False),
        (sp.exp(X) + 2 * G * S, True),  # addcmul_ spares the product, its scaling and the sum
        (sp.exp(-(X**2) / 2) * X / 3 + S, True),
    ],
)
def test_an_in_place_twin_is_written_where_it_spares_two_allocations(expr, twin):
    emit = Emitter(print_torch, {"x", "y", "s", "g", "beta"}, TORCH_FORMS, scalars={"beta"})
    assert (emit.in_place_block([Result("r0", expr)], TENSORS) is not None) is twin


@pytest.mark.parametrize(
    "expr",
    [
        # A rule's 0.5 * 2 leaves sympy's Float 1.0 on each term of huber's partial: 1.0 * y printed as y was taken
        # for a buffer this writer allocated, and y.sub_(x) wrote into the input (a version-counter error in
        # gradcheck, and the next partial's sign flipped).
        sp.Float(1.0) * Y - sp.Float(1.0) * X,
        sp.Float(-1.0) * X + sp.Float(1.0) * Y * S,
        sp.exp(X) + sp.Float(1.0) * Y - sp.Float(1.0) * X,
    ],
)
def test_no_input_is_a_buffer_written_in_place(expr):
    out_of_place, in_place, imports = _both([expr, 2 * expr])
    assert in_place is not None
    values = _inputs()
    before = {n: v.clone() for n, v in values.items() if isinstance(v, torch.Tensor)}
    expected = _run(out_of_place, imports, values)
    got = _run(in_place, imports, values)
    for name, value in before.items():
        torch.testing.assert_close(values[name], value, rtol=0, atol=0)
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e, rtol=0, atol=0)


def test_a_power_over_a_power_is_written_as_the_printers_write_it():
    # The KL divergence of two normals' partial in q_scale: the in-place writer added -p_scale**2 / q_scale**3 as
    # addcdiv_(p_scale * p_scale, q_scale**3), inf where the square or the cube overflows and the value is finite
    # (-(p / q)**2 / q at p = 1e200, q = 1e110 is -1e70); the printers' (p / q) * ((p / q) / q) is not.
    expr = sp.exp(X) - G**2 / S**3
    out_of_place, in_place, imports = _both([expr])
    assert "addcdiv_" not in "\n".join(a.line for a in in_place.lines) + in_place.result
    values: dict[str, object] = {
        k: torch.tensor([v], dtype=torch.float64) for k, v in {"x": 0.0, "g": 1e200, "s": 1e110, "y": 1.0}.items()
    }
    values["beta"] = 1.5
    for block in (in_place, out_of_place):
        (got,) = _run(block, imports, values)
        torch.testing.assert_close(got, torch.tensor([1 - 1e70], dtype=torch.float64), rtol=1e-14, atol=0)
