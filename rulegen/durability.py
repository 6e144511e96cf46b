"""The durability check: a rule survives the framework transforms that rebuild a program.

Eager calls pass every other check; these transforms trace the program into
another form, where a custom derivative can be dropped without an error
(`torch.compile` of `torch.func.grad` ignored a Function's backward:
clip_gradient's gradient came out 3.0 where eager gives 0.5).  Each part is
compared against the eager result:

- `torch.compile` of `torch.func.grad`, `torch.func.vmap` and (where torch
  has forward mode) `torch.func.jvp`;
- `torch.export` of a module calling the rule, then differentiated;
- `jax.export` serialized and deserialized, then called and differentiated;
- `shard_map` over two host devices (`check_vma=True`), in a process of its
  own, since JAX reads the device count once.

It runs with `rulegen test --compile`: compiling and exporting every rule
takes minutes.
"""

from __future__ import annotations

import functools
import json
import os
import pickle
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from rulegen.check import (
    CheckFailed,
    NotApplicable,
    _derived,
    _jax_grad,
    _Subject,
    _sum_of,
    _to_numpy,
    _torch_grads,
    _torch_total,
    compare,
)
from rulegen.routes import JaxRoute


def check_durability(s: _Subject, include: bool, jax_pkg: Any) -> str:
    if not include:
        raise NotApplicable("checked with --compile (compiling and exporting every rule takes minutes)")
    if not s.diff:
        raise NotApplicable("no differentiable input")
    done: list[str] = []
    missing: list[str] = []
    parts: list[Callable[[_Subject], str]] = [
        _compiled_torch_func,
        _exported_torch,
        _exported_jax,
        functools.partial(_sharded_jax, jax_pkg=jax_pkg),
    ]
    for part in parts:
        why = part(s)
        if why:
            missing.append(why)
        else:
            # What each part checks is the head of its docstring.
            done.append((getattr(part, "func", part).__doc__ or "").split(":")[0])
    return "match eager: " + ", ".join(done) + (f" (n/a: {'; '.join(missing)})" if missing else "")


def _eager_grads(s: _Subject, f: Callable[..., Any], xs: tuple[Any, ...]) -> list[np.ndarray]:
    leaves = [x.clone().requires_grad_() for x in xs]
    return [_to_numpy(g) for g in _torch_grads(s, _sum_of(f)(*leaves), leaves)]


def _compiled_torch_func(s: _Subject) -> str:
    """compiled torch.func.grad, vmap and jvp: each against its eager self."""
    import torch

    torch._dynamo.reset()
    f = s.bound(s.torch_fn, torch.from_numpy)
    xs = tuple(torch.from_numpy(x) for x in s.xs())
    argnums = tuple(range(len(xs)))
    grad = torch.func.grad(_torch_total(s, f), argnums)
    for k, (a, b) in enumerate(zip(torch.compile(grad)(*xs), grad(*xs), strict=True)):
        s.compare(f"compiled torch.func.grad, {s.partial(k)} vs eager", _to_numpy(a), _to_numpy(b), s.rtol, s.atol)
    if not s.skipped("vmap"):
        batch = tuple(torch.stack([x, x * 0.75 + 0.1 * torch.sgn(x)]) for x in xs)
        mapped = torch.func.vmap(f)
        for k, (a, b) in enumerate(zip(torch.compile(mapped)(*batch), mapped(*batch), strict=True)):
            compare(
                f"compiled torch.func.vmap, output {s.output_name(k)} vs eager",
                _to_numpy(a),
                _to_numpy(b),
                s.rtol,
                s.atol,
            )
    if s.torch_forward_mode:
        ones = tuple(torch.ones_like(x) for x in xs)

        def jvp(*args: Any) -> Any:
            return torch.func.jvp(f, args, ones)[1]

        try:
            compiled = torch.compile(jvp)(*xs)
        except Exception as exc:  # refused loudly is what a route without forward mode under compile may do
            return f"compiled torch.func.jvp raises ({type(exc).__name__}: {str(exc).splitlines()[0][:160]})"
        for k, (a, b) in enumerate(zip(compiled, jvp(*xs), strict=True)):
            s.compare(
                f"compiled torch.func.jvp, output {s.output_name(k)} vs eager",
                _to_numpy(a),
                _to_numpy(b),
                s.rtol,
                s.atol,
            )
    return ""


def _exported_torch(s: _Subject) -> str:
    """torch.export: the exported module's gradient against eager."""
    import torch

    why = _host_without_fake(s)
    if why:
        return why
    f = s.bound(s.torch_fn, torch.from_numpy)
    xs = tuple(torch.from_numpy(x) for x in s.xs())

    class Calling(torch.nn.Module):
        def forward(self, *args: Any) -> Any:
            return f(*args)

    from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

    try:
        exported = torch.export.export(Calling(), xs).module()
    except GuardOnDataDependentSymNode as exc:
        return (
            "torch.export cannot trace the data-dependent control flow of the rule's own body "
            f"(a Python loop or branch on tensor values; torch.cond and torch.while_loop can): "
            f"{str(exc).splitlines()[0]}"
        )
    leaves = [x.clone().requires_grad_() for x in xs]
    got = _torch_grads(s, _sum_of(exported)(*leaves), leaves)
    for k, (a, b) in enumerate(zip(got, _eager_grads(s, f, xs), strict=True)):
        s.compare(f"torch.export, gradient {s.partial(k)} vs eager", _to_numpy(a), b, s.rtol, s.atol)
    return ""


def _host_without_fake(s: _Subject) -> str:
    """Why torch.export cannot see a host rule's NumPy forward as an op ("" where it can)."""
    from rulegen.plan.torch_route import static_type
    from rulegen.snippet import SnippetDerivation

    derivation = _derived(s.rule, s.known)
    if not isinstance(derivation, SnippetDerivation) or not derivation.forward["torch"].host:
        return ""
    untyped = [i.name for i in s.rule.inputs if i.static and static_type(i) is None]
    if untyped:
        return (
            f"torch.export of a numpy forward needs it as an op, whose schema types each static: give "
            f"{', '.join(untyped)} a bool, int, float or str default"
        )
    return ""


def _host_route(s: _Subject) -> bool:
    routes = _derived(s.rule, s.known).routes
    return routes.jax in (JaxRoute.PRIMITIVE, JaxRoute.BRIDGE)


def _exported_jax(s: _Subject) -> str:
    """jax.export: serialized, deserialized, called and differentiated against eager."""
    import jax
    import jax.numpy as jnp
    from jax import export

    if _host_route(s):
        return (
            "jax.export cannot serialize the host callbacks of a numpy or torch body "
            "(call the rule under jax.jit instead of exporting it)"
        )
    xs = [jnp.asarray(x) for x in s.xs()]
    exported = export.deserialize(export.export(jax.jit(s.jax_f))(*xs).serialize(vjp_order=1))
    for k, (a, b) in enumerate(zip(exported.call(*xs), s.jax_f(*xs), strict=True)):
        s.compare(
            f"jax.export round trip, output {s.output_name(k)} vs eager", _to_numpy(a), _to_numpy(b), s.rtol, s.atol
        )
    argnums = tuple(range(len(xs)))

    def call(*args: Any) -> Any:
        return exported.call(*args)

    got = _jax_grad(s, _sum_of(call), argnums)(*xs)
    want = _jax_grad(s, _sum_of(s.jax_f), argnums)(*xs)
    for k, (a, b) in enumerate(zip(got, want, strict=True)):
        s.compare(
            f"jax.export round trip, gradient {s.partial(k)} vs eager", _to_numpy(a), _to_numpy(b), s.rtol, s.atol
        )
    return ""


#: Run by `_sharded_jax` in a process with two host devices: argv[1] the pickled subject.
_SHARD_SCRIPT = """
import json, pickle, sys
with open(sys.argv[1], "rb") as f:
    folder, package, rule, seed, known = pickle.load(f)
sys.path.insert(0, folder)
import importlib
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, PartitionSpec as P
jax.config.update("jax_enable_x64", True)
from rulegen.check import _subject
shard_map = getattr(jax, "shard_map", None) or __import__("jax.experimental.shard_map").experimental.shard_map.shard_map
# The same sample as the checking process's (seed and name make it), rebuilt here: statics may be callables.
s = _subject(rule, importlib.import_module(package + ".jax"), importlib.import_module(package + ".torch"), seed, known)
fn, values, diff, outputs, rtol, atol = s.jax_fn, s.values, s.diff, s.outputs, s.rtol, s.atol

# Every array argument is split between the devices (as sharded data is), statics stay as they are.
arrays = [k for k, v in enumerate(values) if isinstance(v, np.ndarray)]
wrt = tuple(arrays.index(k) for k in diff)

def call(*xs):
    args = list(values)
    for k, x in zip(arrays, xs):
        args[k] = x
    out = fn(*args)
    outs = out if isinstance(out, tuple) else (out,)
    return tuple(outs[k] for k in outputs)

# Two calls, one per device: the sample and a moved copy of its differentiable arrays, stacked on a new axis.
batch = [
    jnp.stack([v, v * 0.75 + 0.1 * np.sign(v) if k in diff else v])
    for k, v in ((k, np.asarray(values[k])) for k in arrays)
]
mesh = Mesh(np.array(jax.devices()[:2]), ("calls",))
per_shard = lambda *b: tuple(o[None] for o in call(*[x[0] for x in b]))
sharded = shard_map(per_shard, mesh=mesh, in_specs=tuple(P("calls") for _ in batch), out_specs=P("calls"))
total = lambda f: lambda *b: sum(jnp.sum(o) for o in f(*b))
got = jax.jit(sharded)(*batch)
grads = jax.jit(jax.grad(total(sharded), wrt, holomorphic=rule.complex))(*batch)
off = []
for j in range(2):
    want = call(*[b[j] for b in batch])
    want_grads = jax.grad(total(call), wrt, holomorphic=rule.complex)(*[b[j] for b in batch])
    for named, found, expected in ((s.output_name, got, want), (s.partial, grads, want_grads)):
        for k, (g, w) in enumerate(zip(found, expected)):
            error = np.abs(np.asarray(g[j]) - np.asarray(w))
            if (error > atol + rtol * np.abs(np.asarray(w))).any():
                off.append(f"call {j} (device {j}), {named(k)}: off by {float(error.max()):.3g}")
print(json.dumps(off))
"""


def _sharded_jax(s: _Subject, jax_pkg: Any) -> str:
    """shard_map on 2 host devices: values and gradients of each shard against eager."""
    import tempfile

    folder = str(Path(jax_pkg.__file__).resolve().parent.parent.parent)
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2", "JAX_PLATFORMS": "cpu"}
    with tempfile.NamedTemporaryFile(suffix=".pickle") as handle:
        pickle.dump((folder, jax_pkg.__name__.rpartition(".")[0], s.rule, s.seed, s.known), handle)
        handle.flush()
        run = subprocess.run(
            [sys.executable, "-c", _SHARD_SCRIPT, handle.name],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
            check=False,
        )
    if run.returncode != 0:
        # The exception's own line, not JAX's notes after it.
        raised = [line for line in run.stderr.splitlines() if re.match(r"[\w.]+(Error|Exception)\b", line)]
        last = (raised or run.stderr.strip().splitlines() or ["no output"])[-1]
        raise CheckFailed(f"shard_map on 2 devices: {last[:400]}")
    off = json.loads(run.stdout.strip().splitlines()[-1])
    if off:
        raise CheckFailed(f"shard_map on 2 devices against eager: {'; '.join(off[:3])}")
    return ""
