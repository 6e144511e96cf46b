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

from rulegen.check.derivatives import jax_grad, sum_of, torch_grads, torch_total
from rulegen.check.outcome import CheckFailed, NotApplicable, brief, compare
from rulegen.check.shard_map_worker import ShardedCall
from rulegen.check.subject import Subject, derived, to_numpy
from rulegen.derive.routes import JaxRoute


def check_durability(s: Subject, include_compile: bool, jax_package: Any) -> str:
    if not include_compile:
        raise NotApplicable("checked with --compile (compiling and exporting every rule takes minutes)")
    if not s.diff:
        raise NotApplicable("no differentiable input")
    done: list[str] = []
    missing: list[str] = []
    parts: list[Callable[[Subject], str]] = [
        _compiled_torch_func,
        _exported_torch,
        _exported_jax,
        functools.partial(_sharded_jax, jax_package=jax_package),
    ]
    for part in parts:
        why = part(s)
        if why:
            missing.append(why)
        else:
            # What each part checks is the head of its docstring.
            done.append((getattr(part, "func", part).__doc__ or "").split(":")[0])
    return "match eager: " + ", ".join(done) + (f" (n/a: {'; '.join(missing)})" if missing else "")


def _eager_grads(s: Subject, f: Callable[..., Any], xs: tuple[Any, ...]) -> list[np.ndarray]:
    leaves = [x.clone().requires_grad_() for x in xs]
    return [to_numpy(g) for g in torch_grads(s, sum_of(f)(*leaves), leaves)]


def _compiled_torch_func(s: Subject) -> str:
    """compiled torch.func.grad, vmap and jvp: each against its eager self."""
    import torch

    torch._dynamo.reset()
    f = s.bound(s.torch_fn, torch.from_numpy)
    xs = tuple(torch.from_numpy(x) for x in s.xs())
    argnums = tuple(range(len(xs)))
    grad = torch.func.grad(torch_total(s, f), argnums)
    for k, (a, b) in enumerate(zip(torch.compile(grad)(*xs), grad(*xs), strict=True)):
        s.compare(f"compiled torch.func.grad, {s.partial(k)} vs eager", to_numpy(a), to_numpy(b), s.rtol, s.atol)
    if not s.skipped("vmap"):
        batch = tuple(torch.stack([x, x * 0.75 + 0.1 * torch.sgn(x)]) for x in xs)
        mapped = torch.func.vmap(f)
        for k, (a, b) in enumerate(zip(torch.compile(mapped)(*batch), mapped(*batch), strict=True)):
            compare(
                f"compiled torch.func.vmap, output {s.output_name(k)} vs eager",
                to_numpy(a),
                to_numpy(b),
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
            return f"compiled torch.func.jvp raises ({type(exc).__name__}: {brief(str(exc), 160)})"
        for k, (a, b) in enumerate(zip(compiled, jvp(*xs), strict=True)):
            s.compare(
                f"compiled torch.func.jvp, output {s.output_name(k)} vs eager",
                to_numpy(a),
                to_numpy(b),
                s.rtol,
                s.atol,
            )
    return ""


def _exported_torch(s: Subject) -> str:
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
    got = torch_grads(s, sum_of(exported)(*leaves), leaves)
    for k, (a, b) in enumerate(zip(got, _eager_grads(s, f, xs), strict=True)):
        s.compare(f"torch.export, gradient {s.partial(k)} vs eager", to_numpy(a), b, s.rtol, s.atol)
    return ""


def _host_without_fake(s: Subject) -> str:
    """Why torch.export cannot see a host rule's NumPy forward as an op ("" where it can)."""
    from rulegen.derive.snippet import SnippetDerivation
    from rulegen.plan.torch_route import static_type

    derivation = derived(s.rule, s.known)
    if not isinstance(derivation, SnippetDerivation) or not derivation.forward["torch"].host:
        return ""
    untyped = [i.name for i in s.rule.inputs if i.static and static_type(i) is None]
    if untyped:
        return (
            f"torch.export of a numpy forward needs it as an op, whose schema types each static: give "
            f"{', '.join(untyped)} a bool, int, float or str default"
        )
    return ""


def _host_route(s: Subject) -> bool:
    routes = derived(s.rule, s.known).routes
    return routes.jax in (JaxRoute.PRIMITIVE, JaxRoute.BRIDGE)


def _exported_jax(s: Subject) -> str:
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
            f"jax.export round trip, output {s.output_name(k)} vs eager", to_numpy(a), to_numpy(b), s.rtol, s.atol
        )
    argnums = tuple(range(len(xs)))

    def call(*args: Any) -> Any:
        return exported.call(*args)

    got = jax_grad(s, sum_of(call), argnums)(*xs)
    want = jax_grad(s, sum_of(s.jax_f), argnums)(*xs)
    for k, (a, b) in enumerate(zip(got, want, strict=True)):
        s.compare(f"jax.export round trip, gradient {s.partial(k)} vs eager", to_numpy(a), to_numpy(b), s.rtol, s.atol)
    return ""


def _raised(stderr: str) -> str:
    """The last exception in `stderr`, every line of its message, not JAX's notes after it."""
    lines = stderr.strip().splitlines()
    starts = [k for k, line in enumerate(lines) if re.match(r"[\w.]+(Error|Exception)\b", line)]
    if not starts:
        return lines[-1] if lines else "no output"
    message = []
    for line in lines[starts[-1] :]:
        if not line.strip() or line.startswith("-----"):
            break
        message.append(line)
    return "\n".join(message)


def _sharded_jax(s: Subject, jax_package: Any) -> str:
    """shard_map on 2 host devices: values and gradients of each shard against eager."""
    import tempfile

    if jax_package is None:
        return "shard_map (it runs a built package in a process of its own; hand-written code is not one)"
    # JAX reads the device count once, at its first use: the worker is a process of its own.
    folder = str(Path(jax_package.__file__).resolve().parent.parent.parent)
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2", "JAX_PLATFORMS": "cpu"}
    with tempfile.NamedTemporaryFile(suffix=".pickle") as handle:
        pickle.dump(ShardedCall(folder, jax_package.__name__.rpartition(".")[0], s.rule, s.seed, s.known), handle)
        handle.flush()
        run = subprocess.run(
            [sys.executable, "-m", "rulegen.check.shard_map_worker", handle.name],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
            check=False,
        )
    if run.returncode != 0:
        raise CheckFailed(f"shard_map on 2 devices: {brief(_raised(run.stderr))}")
    off = json.loads(run.stdout.strip().splitlines()[-1])
    if off:
        raise CheckFailed(f"shard_map on 2 devices against eager: {'; '.join(off[:3])}")
    return ""
