"""What importing the torch package does, and what it leaves to the first compile or export.

Registering each rule's export op and scanning each Function's bytecode for
the numbers it reads cost more at import than the rest of it; both wait for
the route that needs them (`_route.routed`).  A host op is registered at
import of its rule's module, from the runtime (`_host.host_op`): torch reads the source line of
the frame that registers an op's fake, and `inspect` finds a rule module that
is still being imported only by scanning every loaded module.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


_HAS_OP = """
def has_op(name):
    try:
        torch._C._dispatch_find_schema_or_throw(name, "")
    except RuntimeError:
        return False
    return True
"""


def test_import_registers_no_rule_op_and_reads_no_bytecode():
    out = _run(
        "import dis, inspect, types\n"
        "def refused(*args, **kwargs):\n"
        "    raise AssertionError('bytecode read at import')\n"
        "dis.get_instructions = refused\n"
        "frames = []\n"
        "getmodule = inspect.getmodule\n"
        "def spy(value, *args):\n"
        "    if isinstance(value, types.FrameType):\n"
        "        frames.append(value.f_code.co_filename)\n"
        "    return getmodule(value, *args)\n"
        "inspect.getmodule = spy\n"
        "import torch\n" + _HAS_OP + "import generated.torch\n"
        "rules = [getattr(generated.torch, name) for name in generated.torch.__all__]\n"
        "print(has_op('generated_torch_gelu::Gelu'), has_op('generated_torch_numpy_sort::NumpySort'))\n"
        "print(sorted({f for f in frames if '/generated/torch/' in f and '/generated/torch/_' not in f}))\n"
    )
    ops, rule_frames = out.splitlines()
    # gelu's export op waits for an export; numpy_sort's host op is its forward, registered when its module loads.
    assert ops == "False True"
    # No rule module's frame registers an op (each cost a scan of sys.modules).
    assert rule_frames == "[]"


def test_the_first_compile_and_export_make_what_import_left():
    out = _run(
        "import torch\n" + _HAS_OP + "from generated.torch import f_gelu_tanh, gelu, scipy_erfcx\n"
        "X = torch.linspace(-1.5, 1.5, 12, dtype=torch.float64)\n"
        # Each reads math.pi, found by the first compile; fullgraph: finding it breaks no graph.
        "def chain(x):\n"
        "    return (scipy_erfcx(f_gelu_tanh(x)) + f_gelu_tanh(x)).sum()\n"
        "leaf, reference = X.clone().requires_grad_(), X.clone().requires_grad_()\n"
        "torch.compile(chain, dynamic=True, fullgraph=True)(leaf).backward()\n"
        "chain(reference).backward()\n"
        "torch.testing.assert_close(leaf.grad, reference.grad)\n"
        "print(has_op('generated_torch_gelu::Gelu'))\n"
        "class Gelu(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        return gelu(x)\n"
        # strict: Dynamo runs the op's registration, not traces it.
        "program = torch.export.export(Gelu(), (X,), strict=True)\n"
        "print(has_op('generated_torch_gelu::Gelu'), 'generated_torch_gelu.Gelu' in str(program.graph))\n"
    )
    assert out.splitlines() == ["False", "True True"]


def test_once_fills_on_the_first_call_only():
    from generated.torch import _route

    calls = []
    call = _route.once(lambda: calls.append(1))
    assert call() is None and call() is None
    assert calls == [1]


def test_the_package_imports_a_rule_module_when_the_rule_is_first_read():
    out = _run(
        "import sys, torch, generated.torch as package\n"
        "loaded = lambda: sorted(m.rpartition('.')[2] for m in sys.modules if m.startswith('generated.torch.')\n"
        "                        and not m.rpartition('.')[2].startswith('_'))\n"
        "print(loaded())\n"
        # numpy_sort's module imports numpy_take's, which binds the package's numpy_take to that module.
        "sort = package.numpy_sort\n"
        "print(loaded(), type(package.numpy_take).__name__, type(package.NumpySort).__name__)\n"
        "from generated.torch import *\n"
        "print(len(loaded()), callable(gelu), 'gelu' in dir(package))\n"
    )
    before, after_sort, after_star = out.splitlines()
    assert before == "[]"
    assert after_sort == "['numpy_sort', 'numpy_take'] function FunctionMeta"
    assert after_star == "83 True True"
