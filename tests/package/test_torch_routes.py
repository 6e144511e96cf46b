"""Built rules under torch.compile, torch.func and torch.export, and what importing the package imports.

On torch 2.13, Dynamo inlines an autograd.Function's forward when it runs
under a torch.func transform and drops its backward and jvp: before,
`torch.compile(torch.func.grad(lambda x: 3 * clip_gradient(-0.5, 0.5, x)))`
gave 3.0 where eager gives 0.5, and numpy_sort under a compiled
`torch.func.jvp` gave zero tangents.  torch.export inlined the Function too:
the exported module's gradient was 3.0.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from generated.torch import clip_gradient, gelu, numpy_sort, sin_mul, softmax
from tests.runtime.test_torch_routes import X

ROOT = Path(__file__).resolve().parents[2]
Y = torch.linspace(0.5, 2.0, 12, dtype=torch.float64).reshape(3, 4)
WEIGHTS = 3 + torch.linspace(0, 1, 12, dtype=torch.float64).reshape(3, 4)

# Each rule as a function of x, weighted so that clip_gradient's clipping shows.
RULES = {
    "clip_gradient": lambda x: WEIGHTS * clip_gradient(-0.5, 0.5, x),
    "gelu": lambda x: WEIGHTS * gelu(x),
    "sin_mul": lambda x: WEIGHTS * sin_mul(x, Y),
    "softmax": lambda x: WEIGHTS * softmax(x),
    "numpy_sort": lambda x: WEIGHTS * numpy_sort(x),
}
FORWARD_MODE = ("gelu", "sin_mul", "softmax", "numpy_sort")  # clip_gradient has none by design


def _transforms(f):
    """torch.func transforms of `f`, each a function of x."""

    def summed(x):
        return f(x).sum()

    return {
        "grad": torch.func.grad(summed),
        "vjp": lambda x: torch.func.vjp(f, x)[1](torch.ones_like(x))[0],
        "vmap(grad)": torch.func.vmap(torch.func.grad(lambda row: f(row[None])[0].sum())),
        "grad(grad)": torch.func.grad(lambda x: torch.func.grad(summed)(x).sum()),
    }


@pytest.mark.slow
def test_compiled_torch_func_transforms_keep_the_rule():
    wrong = []
    for name, f in RULES.items():
        transforms = _transforms(f)
        if name == "numpy_sort":
            del transforms["grad(grad)"]  # its backward is the host rule numpy_take, tested by itself
        if name in FORWARD_MODE:
            transforms["jvp"] = lambda x, f=f: torch.func.jvp(f, (x,), (torch.ones_like(x),))[1]
        for label, transform in transforms.items():
            eager = transform(X)
            torch._dynamo.reset()  # each transform is its own frame, not a recompilation of one lambda
            try:
                compiled = torch.compile(transform)(X)
            except Exception as error:  # every failure is listed at the end
                wrong.append(f"{name} {label}: {type(error).__name__} {str(error)[:200]}")
                continue
            if not torch.allclose(compiled, eager):
                wrong.append(f"{name} {label}: compiled {compiled.flatten()[:3]} eager {eager.flatten()[:3]}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.slow
def test_a_transform_inside_a_compiled_function_keeps_the_rule():
    torch._dynamo.reset()
    x = torch.tensor(2.0, dtype=torch.float64)

    def clipped(x):
        return 3 * clip_gradient(-0.5, 0.5, x)

    plain = torch.compile(clipped, fullgraph=True)
    leaf = x.clone().requires_grad_()
    plain(leaf).backward()
    assert leaf.grad.item() == 0.5
    # The frame compiled without a transform, now called under one: guards tell them apart.
    assert torch.compile(torch.func.grad(clipped))(x).item() == 0.5
    assert torch.compile(lambda x: torch.func.grad(clipped)(x))(x).item() == 0.5
    # Under vmap too: autograd differentiates through the batched rule afterwards.
    batched = torch.compile(lambda x: torch.func.vmap(clipped)(x))
    leaf = X.clone().requires_grad_()
    batched(leaf).sum().backward()
    torch.testing.assert_close(leaf.grad, torch.full_like(X, 0.5))
    # fullgraph cannot keep the rule under a transform: an error says so.
    with pytest.raises(torch._dynamo.exc.Unsupported, match=r"torch\.func"):
        torch.compile(lambda x: torch.func.grad(clipped)(x), fullgraph=True)(x)


class _Clipped(torch.nn.Module):
    def forward(self, x):
        return 3 * clip_gradient(-0.5, 0.5, x)


def test_an_exported_module_keeps_the_rule():
    exported = torch.export.export(_Clipped(), (X,)).module()
    leaf = X.clone().requires_grad_()
    exported(leaf).sum().backward()
    torch.testing.assert_close(leaf.grad, torch.full_like(X, 0.5))
    torch.testing.assert_close(exported(X), 3 * X)


class _First(torch.nn.Module):
    """A rule's first output."""

    def __init__(self, function):
        super().__init__()
        self.function = function

    def forward(self, *arguments):
        out = self.function(*arguments)
        return out if isinstance(out, torch.Tensor) else out[0]


def _arguments(rule):
    """Arrays for `rule`'s inputs, inside their domains."""
    arguments = []
    for i in rule.inputs:
        if i.dtype != "float":
            arguments.append(torch.ones(3, 4, dtype=torch.int64 if i.dtype == "int" else torch.bool))
            continue
        lo, hi = max(i.domain[0], -3), min(i.domain[1], 3)
        inner = torch.linspace(lo + (hi - lo) / 10, hi - (hi - lo) / 10, 12, dtype=torch.float64)
        arguments.append(inner.reshape(3, 4))
    return arguments


def test_every_rule_with_an_op_exports_its_value_and_gradient():
    import generated.torch as package
    from rulegen.spec.rules import read_rules, rule_files

    exported_rules = 0
    for rule in read_rules(rule_files([ROOT / "rules"])):
        if any(i.static for i in rule.inputs) or not hasattr(package, rule.torch_class):
            continue
        if rule.complex or rule.structured:
            continue  # real arrays only; the durability check exports those (tests/package/test_durability.py)
        first = _First(getattr(package, rule.name))
        arguments = _arguments(rule)
        program = torch.export.export(first, tuple(arguments))
        # The op is the Function's name in its module's namespace (generated_torch_gelu.Gelu).
        assert f"{rule.name}.{rule.torch_class}.default" in str(program.graph), rule.name
        leaves = [a.clone().requires_grad_() if a.is_floating_point() else a for a in arguments]
        references = [a.clone().requires_grad_() if a.is_floating_point() else a for a in arguments]
        got, want = program.module()(*leaves), first(*references)
        torch.testing.assert_close(got, want, msg=rule.name)
        got.sum().backward()
        want.sum().backward()
        for leaf, reference in zip(leaves, references, strict=True):
            if leaf.is_floating_point():
                torch.testing.assert_close(leaf.grad, reference.grad, equal_nan=True, msg=rule.name)
        exported_rules += 1
    assert exported_rules >= 60


class _Sorted(torch.nn.Module):
    def forward(self, x):
        return WEIGHTS * numpy_sort(x, 0)


class _Erfcx(torch.nn.Module):
    def forward(self, x):
        from generated.torch import scipy_erfcx

        return scipy_erfcx(x)


def test_an_exported_host_rule_is_its_host_op_alone():
    """A host rule exports as its host op given the Function's autograd (`_route.host_rule_op`): one op in
    its module's namespace, not an op around the Function's forward holding the host op, and the exported
    program's value, gradient and second derivative are eager's."""
    program = torch.export.export(_Sorted(), (X,))
    targets = [str(n.target) for n in program.graph.nodes if n.op == "call_function"]
    assert "generated_torch_numpy_sort.NumpySort.default" in targets
    registered = [n for n in torch._C._dispatch_get_all_op_names() if n.startswith("generated_torch_numpy_sort::")]
    assert registered == ["generated_torch_numpy_sort::NumpySort"]
    torch.library.opcheck(torch.ops.generated_torch_numpy_sort.NumpySort.default, (X.clone().requires_grad_(), 0))
    leaf, reference = X.clone().requires_grad_(), X.clone().requires_grad_()
    torch.testing.assert_close(program.module()(leaf), _Sorted()(reference))
    program.module()(leaf).sum().backward()
    _Sorted()(reference).sum().backward()
    torch.testing.assert_close(leaf.grad, reference.grad)

    exported = torch.export.export(_Erfcx(), (X,)).module()
    second = []
    for f in (exported, _Erfcx()):
        x = X.clone().requires_grad_()
        (first,) = torch.autograd.grad(f(x).sum(), x, create_graph=True)
        second.append(torch.autograd.grad(first.sum(), x)[0])
    torch.testing.assert_close(*second)


@pytest.mark.slow
def test_the_durability_check_differentiates_compiled_transforms_and_exports(monkeypatch):
    from rulegen.check import run_checks
    from rulegen.spec.rules import read_rules

    rules = read_rules([ROOT / "rules" / "clip_gradient.yaml"])
    details = {o.check: o for o in run_checks(rules, "generated", include_compile=True, only=("durability",))}
    assert details["durability"].status == "pass", details["durability"].detail
    assert "compiled torch.func.grad" in details["durability"].detail
    assert "torch.export" in details["durability"].detail
    # The route before this one: the compiled Function everywhere under torch.compile.
    module = sys.modules["generated.torch._route"]  # the package's name is the function's; `routed` calls `route`

    def before(function, compiled, exported=None):
        return (compiled if torch.compiler.is_compiling() else function).apply

    monkeypatch.setattr(module, "route", before)
    torch._dynamo.reset()
    details = {o.check: o for o in run_checks(rules, "generated", include_compile=True, only=("durability",))}
    assert details["durability"].status == "fail"
    assert "compiled torch.func.grad" in details["durability"].detail


@pytest.mark.slow
def test_dynamic_compile_of_rules_reading_the_same_constant_in_turn():
    # Each of these reads math.pi in its forward or backward.  Under dynamic=True Dynamo made
    # math.pi a graph input inside the first Function's subgraph and handed that subgraph's value
    # to the next: "lift_tracked_freevar_to_input should not be called on root SubgraphTracer".
    from generated.torch import f_gelu_tanh, scipy_erfcx

    def chain(x):
        return (scipy_erfcx(f_gelu_tanh(x)) + f_gelu_tanh(x)).sum()

    torch._dynamo.reset()
    compiled = torch.compile(chain, dynamic=True)
    leaf = X.clone().requires_grad_()
    compiled(leaf).backward()
    reference = X.clone().requires_grad_()
    chain(reference).backward()
    torch.testing.assert_close(leaf.grad, reference.grad)


def _in_a_fresh_process(code):
    import subprocess

    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_importing_the_package_imports_neither_dynamo_nor_dtensor():
    # Each costs a second or more of an import that needs neither: Dynamo until a route runs under
    # torch.compile, DTensor until the program imports it (the host ops' shardings wait for it).
    out = _in_a_fresh_process(
        "import sys, generated.torch\n"
        "rules = [getattr(generated.torch, name) for name in generated.torch.__all__]\n"
        "print(sorted(m for m in ('torch._dynamo', 'torch.distributed.tensor') if m in sys.modules))"
    )
    assert out.split() == ["[]"]


def test_the_host_ops_shardings_are_registered_when_dtensor_is_imported_later():
    if not torch.distributed.is_available():
        pytest.skip("torch without distributed")
    out = _in_a_fresh_process(
        "import generated.torch\n"
        "rules = [getattr(generated.torch, name) for name in generated.torch.__all__]\n"
        "from torch.distributed.tensor import DTensor\n"
        "found = DTensor._op_dispatcher.sharding_propagator.op_strategy_funcs\n"
        "print(sorted(str(op).split('.')[1] for op in found if str(op).startswith('generated_torch')))"
    )
    assert "HostMulSinJvp" in out and "NumpySort" in out, out
