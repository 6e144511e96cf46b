"""The generated code reads as an expert writes it: what a reader needs is said, nothing is said twice."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from rulegen.render.build import generate
from rulegen.spec.rules import read_rule_file


def _modules(tmp_path, text):
    path = tmp_path / "r.yaml"
    path.write_text(text)
    (rule,) = read_rule_file(path, "r.yaml")
    return generate(rule).modules


def test_a_forward_rewritten_for_stability_says_so_where_it_is_computed(tmp_path):
    modules = _modules(tmp_path, "name: r\ninputs: [x]\nforward: log(1 + exp(x))\n")
    for text in modules.values():
        assert "# out = log(exp(x) + 1) is computed as softplus(x)" in text
    plain = _modules(tmp_path, "name: r\ninputs: [x]\nforward: x * sin(x)\n")
    assert not any("is computed as" in text for text in plain.values())


def test_a_one_line_body_is_written_where_it_is_called(tmp_path):
    rule = "name: r\ninputs: [lo, x]\nforward: x\nvjp:\n  python: return xp.clip(out_bar, lo, 1.0) + 0 * lo\n"
    for rel, text in _modules(tmp_path, rule).items():
        functions = {n.name for n in ast.walk(ast.parse(text)) if isinstance(n, ast.FunctionDef)}
        assert not functions & {"_forward", "_vjp"}, rel
        assert "xp.clip(out_bar, lo, 1.0)" in text, rel


def test_a_body_with_a_comment_keeps_its_function(tmp_path):
    rule = "name: r\ninputs: [x]\nforward: x\nvjp:\n  python: |\n"
    rule += "    return 2 * out_bar  # deliberately not the derivative\n"
    rule += "checks:\n  true_derivative: false\n"
    for text in _modules(tmp_path, rule).values():
        assert "# deliberately not the derivative" in text


def test_an_input_that_needs_no_gradient_gets_none_and_the_others_theirs():
    import torch

    from generated.torch import sin_exp_mul

    x = torch.linspace(-2, 2, 7, dtype=torch.float64)
    y = torch.linspace(0.5, 3, 7, dtype=torch.float64)
    for wants in ((True, False), (False, True), (True, True)):
        leaves = [t.clone().requires_grad_(w) for t, w in zip((x, y), wants, strict=True)]
        sin_exp_mul(*leaves).sum().backward()
        reference = [t.clone().requires_grad_(w) for t, w in zip((x, y), wants, strict=True)]
        (torch.sin(reference[0]) * torch.exp(-(reference[0] ** 2)) * reference[1]).sum().backward()
        for leaf, ref, want in zip(leaves, reference, wants, strict=True):
            assert (leaf.grad is not None) == want
            if want:
                torch.testing.assert_close(leaf.grad, ref.grad)
    # torch.func asks for one input's gradient at a time, through needs_input_grad too.
    gy = torch.func.grad(lambda y: sin_exp_mul(x, y).sum())(y)
    torch.testing.assert_close(gy, torch.sin(x) * torch.exp(-(x**2)))


def test_no_two_objects_of_a_generated_module_share_a_docstring():
    root = __import__("pathlib").Path(__file__).resolve().parents[2] / "generated"
    for path in sorted(root.glob("*/[!_]*.py")):
        tree = ast.parse(path.read_text())
        nodes = [tree, *(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.ClassDef))]
        # First lines: the function's help goes on with formulas, where the class once repeated its start.
        heads = [d.splitlines()[0] for d in map(ast.get_docstring, nodes) if d]
        assert len(heads) == len(set(heads)), path


def _torch_functions():
    """Each generated torch module's autograd.Functions: (module file name, class, its methods by name)."""
    for path in sorted((Path(__file__).resolve().parents[2] / "generated" / "torch").glob("[!_]*.py")):
        tree = ast.parse(path.read_text())
        for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
            yield path.name, cls, {f.name: f for f in cls.body if isinstance(f, ast.FunctionDef)}


def test_no_derivative_method_copies_a_static_out_of_ctx_only_to_pass_it_on():
    """`ctx.dim` where backward and jvp use a static input, not `dim = ctx.dim` first (12 lines in 6 modules)."""
    copies = []
    for name, _, methods in _torch_functions():
        for method in (methods.get("backward"), methods.get("jvp")):
            for statement in method.body if method is not None else ():
                value = statement.value if isinstance(statement, ast.Assign) else None
                of_ctx = isinstance(value, ast.Attribute) and ast.unparse(value.value) == "ctx"
                if of_ctx and value.attr not in ("saved_tensors", "needs_input_grad"):
                    copies.append(f"{name}: {ast.unparse(statement)}")
    assert not copies, copies


def test_setup_context_unpacks_nothing_only_to_rename_it():
    """`x = output` then `save(ctx, x)`, or `x, y = inputs` then `save(ctx, x, y)`: `output`, `*inputs`."""
    renames = []
    for name, _, methods in _torch_functions():
        if "setup_context" not in methods:
            continue
        body = methods["setup_context"].body
        for statement in body:
            if not (isinstance(statement, ast.Assign) and isinstance(statement.value, ast.Name)):
                continue
            target = statement.targets[0]
            if statement.value.id == "output" and isinstance(target, ast.Name):
                renames.append((name, ast.unparse(statement)))
            if statement.value.id != "inputs" or not isinstance(target, ast.Tuple):
                continue
            names = [getattr(e, "id", "_") for e in target.elts]
            loads = [
                (s, n.id)
                for s in body
                for n in ast.walk(s)
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in names
            ]
            saves = [
                c
                for s in body
                for c in ast.walk(s)
                if isinstance(c, ast.Call) and getattr(c.func, "id", "") == "save_for_derivatives"
            ]
            saved_first = saves and [getattr(a, "id", "") for a in saves[0].args[1 : len(names) + 1]] == names
            # Every input named, read only where they are saved, first and in order: `*inputs`.
            if "_" not in names and saved_first and len(loads) == len(names):
                renames.append((name, ast.unparse(statement)))
    assert not renames, renames


def test_no_torch_function_writes_backward_over_again_as_its_jvp():
    """A real elementwise derivative is one map for cotangents and tangents: `jvp = backward`, not a copy of it."""
    copies, shared = [], 0
    for name, cls, methods in _torch_functions():
        shared += any(isinstance(s, ast.Assign) and ast.unparse(s) == "jvp = backward" for s in cls.body)
        backward, jvp = methods.get("backward"), methods.get("jvp")
        if backward is None or jvp is None or len(backward.args.args) != len(jvp.args.args):
            continue

        def body(method: ast.FunctionDef) -> str:
            renamed = {a.arg: f"v{k}" for k, a in enumerate(method.args.args)}
            text = ast.unparse(ast.Module([s for s in method.body if not isinstance(s, ast.If)], []))
            for old, new in renamed.items():
                text = re.sub(rf"\b{old}\b", new, text)
            return text

        if body(backward) == body(jvp):
            copies.append(name)
    assert not copies, copies
    assert shared > 30


def test_a_gradient_nobody_asked_for_is_skipped_as_the_pytorch_docs_write_it():
    """`x_bar = y_bar = None`, then `if ctx.needs_input_grad[0]: x_bar = ...`: not a tuple of conditional
    expressions, which ruff spreads over a line per clause."""
    inline, idiom = [], 0
    for path in sorted((Path(__file__).resolve().parents[2] / "generated" / "torch").glob("[!_]*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.IfExp) and "needs_input_grad" in ast.unparse(node.test):
                inline.append(path.name)
            if isinstance(node, ast.If) and ast.unparse(node.test).startswith("ctx.needs_input_grad["):
                idiom += 1
    assert not inline, sorted(set(inline))
    assert idiom > 20


def test_a_saved_input_s_shape_is_the_saved_tensor_s_not_a_copy_on_ctx():
    """`ctx.a_shape = a.shape` beside `save_for_derivatives(ctx, a, ...)` keeps one fact twice."""
    twice = []
    for name, _, methods in _torch_functions():
        setup = methods.get("setup_context")
        if setup is None:
            continue
        forward = [a.arg for a in methods["forward"].args.args]
        saved: set[str] = set()
        for call in (c for c in ast.walk(setup) if isinstance(c, ast.Call)):
            if getattr(call.func, "id", "") == "save_for_derivatives":
                for arg in call.args[1:]:
                    saved |= set(forward) if isinstance(arg, ast.Starred) else {getattr(arg, "id", "")}
        for statement in setup.body:
            if isinstance(statement, ast.Assign) and ast.unparse(statement.value) in {f"{n}.shape" for n in saved}:
                twice.append((name, ast.unparse(statement)))
    assert not twice, twice


def test_a_one_line_body_reads_a_static_from_ctx_where_it_stands():
    """A derivative method writes a one-line body with each static read from ctx (`ctx.dim`), rewriting the
    names by their places: a keyword's name stays, text before it may be any UTF-8, and where the body binds
    the name itself (a lambda's parameter) or reads it inside an f-string, the body keeps its function."""
    from types import SimpleNamespace

    from rulegen.plan.code import LITERAL
    from rulegen.plan.snippet import inline_expression

    def written(text: str) -> str | None:
        value = inline_expression(SimpleNamespace(kind="python", text=text), {"dim": "ctx.dim"})
        return None if value is None else value.within(LITERAL)  # placed where it is called

    assert written('return take(x, "é", dim)') == 'take(x, "é", ctx.dim)'
    assert written("return g(dim=dim) + dim") == "(g(dim=ctx.dim) + ctx.dim)"
    assert written("return x.dim + y") == "(x.dim + y)"
    assert written("return (lambda dim: dim + 1)(dim)") is None
    assert written('return f"{dim}"') is None


def _saves(cls: ast.ClassDef, methods: dict[str, ast.FunctionDef]) -> bool:
    """Whether the Function's setup_context saves tensors: a `save_for_derivatives` call, or the runtime's
    `saves_inputs`, which saves every input."""
    calls = [c for c in ast.walk(methods.get("setup_context", cls)) if isinstance(c, ast.Call)]
    return any(isinstance(c.func, ast.Name) and c.func.id in ("save_for_derivatives", "saves_inputs") for c in calls)


def test_every_tensor_a_function_saves_is_one_its_backward_reads():
    """What setup_context keeps lives as long as the graph, for backward: a tensor jvp alone reads (an output kept
    only for the ones its transposed VJP is evaluated at) is kept by no Function of rules/.  Backward and jvp
    unpack `ctx.saved_tensors` whole, `_` for what a method does not read."""
    unread, checked = [], 0
    for name, cls, methods in _torch_functions():
        if not _saves(cls, methods):
            continue
        checked += 1
        backward = methods.get("backward")
        assert backward is not None, name
        loads = {n.id for n in ast.walk(backward) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        unpacked = [
            statement.targets[0]
            for statement in backward.body
            if isinstance(statement, ast.Assign) and ast.unparse(statement.value).endswith(".saved_tensors")
        ]
        assert len(unpacked) == 1, name
        targets = unpacked[0].elts if isinstance(unpacked[0], ast.Tuple) else [unpacked[0]]
        unread += [(name, k) for k, t in enumerate(targets) if not (isinstance(t, ast.Name) and t.id in loads)]
    assert checked > 40
    assert not unread, unread
