"""Built modules read as an expert writes them: code lines, help text per backend, only what is read is saved."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.render.test_generated_style import _torch_functions


def test_code_lines_count_neither_docstrings_nor_comments_nor_blank_lines():
    from benchmarks.code_lines import code_lines

    text = '"""Module.\n\nMore."""\n\nimport torch  # why\n\n\n'
    text += 'def f(x):\n    """Doc."""\n    # why\n    return (\n        x\n    )\n'
    assert code_lines(text) == 5


#: Code lines (benchmarks.code_lines) of generated torch modules, at most: issue 27's acceptance.
_TORCH_CODE_LINES = {"gelu": 40, "fixed_point": 40, "sin_mul": 50, "sin_exp_mul": 60, "point_jvp": 40}
#: 70% of the 3,352 code lines all torch rule modules held when issue 27 was filed.
_TORCH_CODE_LINES_IN_ALL = 3352 * 7 // 10


#: Where the code lines stand (stop 37): a ceiling while issue 27's targets above are not met.  The total took 8
#: lines for tanh's backward as one kernel (an import of `tanh_backward` in four modules, calls ruff wraps),
#: sin_exp_mul 2 for its output tangent from its saved intermediates' (`_chained_terms`: 15 kernels -> 12), and
#: 61 in the 16 modules of two differentiable inputs for a correct tangent where one is held constant (an
#: absent tangent read as torch's efficient zero, `tangent_or_zero`, and its import; grads unmaterialised, so
#: backward returns nothing for an absent cotangent): a dense zero times an overflowing partial was nan.
#: Stop 38: softmax 3 for its VJP's second centring (0 where one output is nearly 1 and the entry is 3e-10).
#: Stop 39: 3,201 -> 3,000: an in-place chain starts where its buffer is made and a returned one is returned as
#: built (`return torch.cos(x).mul_(out_bar)`), setup_context saves `*inputs` and `output` without renaming them;
#: 3,000 -> 2,833: `jvp = backward` in the 43 real rules of one input and one output (no copy of backward);
#: 2,813: a gradient nobody asked for skipped as the PyTorch docs write it (`if ctx.needs_input_grad[0]:`);
#: 2,797: a saved input's shape read from the saved tensor, a snippet's lone gradient returned where computed.
#: Stop 40: 2,797 -> 2,765: the in-place and out-of-place bodies write what they share once (`code.either`);
#: 2,754: a static input read from ctx where a derivative method uses it (`ctx.dim`, not `dim = ctx.dim`).
#: Stop 42: 2,621 -> 2,573: a Function's op named after it (`routed(Gelu, schema)`, where 14 calls wrapped onto
#: three lines for a name), a jvp's absent tangents made zero in one statement where it fits a line, and a
#: tangent broadcast from the inputs backward keeps (no output shape kept on ctx for it); 2,574: f_log_ndtr
#: imports the runtime's erfcx, whose derivative is the registry's.
#: Stop 43: 2,574 -> 2,568: jvp broadcasts the inputs' tangents against each other before any output's tangent
#: (`torch.broadcast_tensors`), where each output's tangent was broadcast after it (point_jvp 43 -> 40, point_vjp).
#: 2,575: f_bessel_i1e's derivative is its asymptotic series beyond |x| = 25 (14 bits lost at 1e4 before), a
#: `where` of three branches in place of the in-place body.  2,577: f_tanh's and f_sigmoid's derivatives as products
#: of sigmoids (4 sigmoid(2x) sigmoid(-2x), sigmoid(x) sigmoid(-x)), where 1 - tanh(x)**2 and 1 - sigmoid(x) cancel.
_TORCH_CODE_LINES_NOW = {"gelu": 39, "fixed_point": 40, "sin_mul": 43, "sin_exp_mul": 59, "point_jvp": 40}


def _torch_code_lines() -> dict[str, int]:
    from benchmarks.code_lines import rule_modules

    return rule_modules(Path(__file__).resolve().parents[2] / "generated", "torch")


def test_generated_torch_modules_grow_no_longer():
    counts = _torch_code_lines()
    over = {name: counts[name] for name, most in _TORCH_CODE_LINES_NOW.items() if counts[name] > most}
    assert not over, f"code lines over {_TORCH_CODE_LINES_NOW}: {over}"
    assert sum(counts.values()) <= 2577


def test_generated_torch_modules_are_as_lean_as_hand_written_ones():
    counts = _torch_code_lines()
    over = {name: counts[name] for name, most in _TORCH_CODE_LINES.items() if counts[name] > most}
    assert not over, f"code lines over {_TORCH_CODE_LINES}: {over}"


def test_all_generated_torch_modules_together_are_as_lean_as_issue_27_asks():
    assert sum(_torch_code_lines().values()) <= _TORCH_CODE_LINES_IN_ALL


def test_each_backends_help_speaks_of_that_backend():
    from generated.jax import fixed_point as jax_fixed_point
    from generated.torch import fixed_point as torch_fixed_point

    assert "JAX recompiles" in jax_fixed_point.__doc__
    assert "JAX" not in torch_fixed_point.__doc__
    assert "f: static" in torch_fixed_point.__doc__


def _saves_inputs(cls: ast.ClassDef) -> int | None:
    """How many of forward's values the class's setup_context saves after the inputs where it is the runtime's
    `saves_inputs(residuals=k, outputs=(...))`; else None."""
    for statement in cls.body:
        if (
            isinstance(statement, ast.Assign)
            and ast.unparse(statement.targets[0]) == "setup_context"
            and isinstance(statement.value, ast.Call)
        ):
            keywords = {k.arg: ast.literal_eval(k.value) for k in statement.value.keywords}
            return int(keywords.get("residuals", 0)) + len(keywords.get("outputs", ()))
    return None


def test_every_torch_function_saves_only_what_its_derivative_methods_read():
    """Of what setup_context saves, every tensor is read by backward or jvp (a name each unpacks and uses)."""
    checked = 0
    for name, cls, methods in _torch_functions():
        saves = [
            c
            for c in ast.walk(methods.get("setup_context", cls))
            if isinstance(c, ast.Call) and isinstance(c.func, ast.Name) and c.func.id == "save_for_derivatives"
        ]
        residuals = None if saves else _saves_inputs(cls)
        if not saves and residuals is None:
            continue
        # `*inputs` saves each of forward's parameters.
        forward = [a.arg for a in methods["forward"].args.args]
        if saves:
            args = [
                ast.Name(n) if isinstance(a, ast.Starred) else a
                for a in saves[0].args[1:]
                for n in (forward if isinstance(a, ast.Starred) else [None])
            ]
        else:
            # The runtime's `saves_inputs(residuals=k)`: forward's parameters, then its last k outputs.
            args = [*map(ast.Name, forward), *(ast.Name(f"residual {k}") for k in range(residuals or 0))]
        read = [False] * len(args)
        for name in ("backward", "jvp"):
            method = methods.get(name)
            if method is None:
                continue
            loads = {n.id for n in ast.walk(method) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
            for statement in method.body:
                if isinstance(statement, ast.Assign) and ast.unparse(statement.value).endswith(".saved_tensors"):
                    target = statement.targets[0]
                    names = target.elts if isinstance(target, ast.Tuple) else [target]
                    for k, element in enumerate(names):
                        read[k] |= isinstance(element, ast.Name) and element.id in loads
        unread = [ast.unparse(a) for a, r in zip(args, read, strict=True) if not r]
        assert not unread, (name, unread)
        checked += 1
    assert checked > 40


#: JAX code lines of the shared examples' eight rules together, at most (issue 49's bar; a hand-written package
#: takes 94).  171 before the dividend of a quotient kept whole went bare (`-t2 / t3 / t0 / t3`, polar 25 -> 23).
_JAX_CODE_LINES_OF_THE_EXAMPLES = 170


def test_the_examples_jax_modules_stay_under_their_bar():
    from benchmarks.code_lines import EXAMPLES, rule_modules

    counts = rule_modules(Path(__file__).resolve().parents[2] / "generated", "jax")
    assert sum(counts[name] for name in EXAMPLES) <= _JAX_CODE_LINES_OF_THE_EXAMPLES, {n: counts[n] for n in EXAMPLES}
