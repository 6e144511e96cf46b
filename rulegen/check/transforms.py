"""The transform checks: JAX's and torch's transforms, broadcasting, structured arguments, torch.compile."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from rulegen.check.derivatives import jax_grad, normal_like, sum_of, torch_grads, torch_total, vjp_jax, vjp_torch
from rulegen.check.outcome import CheckFailed, NotApplicable, brief, compare
from rulegen.check.points import leaves_of_arguments, structured_arguments
from rulegen.check.subject import Subject, forward_kind, from_numpy, smaller, to_numpy
from rulegen.spec.rules import Structured, SympyBody


def _linear_derivative(s: Subject) -> bool:
    """Whether derivatives obey linearity (grad = summed jacrev rows): not for a deliberate, non-linear VJP."""
    return s.rule.checks.true_derivative


def check_transforms_jax(s: Subject) -> str:
    if "jax" in s.absent:
        raise NotApplicable(s.absent["jax"])
    import jax
    import jax.numpy as jnp

    small = smaller(s)
    xs = [jnp.asarray(x) for x in small.xs()]
    if not xs:
        raise NotApplicable("no differentiable input")
    argnums = tuple(range(len(xs)))
    eager = small.jax_f(*xs)
    names = ["jit"]
    for k, (a, b) in enumerate(zip(jax.jit(small.jax_f)(*xs), eager, strict=True)):
        small.compare(f"jit, output {s.output_name(k)}", a, b, s.rtol, s.atol)
    if not s.skipped("vmap"):
        batch = [jnp.stack([x, x * 0.75 + 0.1 * jnp.sign(x)]) for x in xs]
        mapped = jax.vmap(small.jax_f)(*batch)
        for j in range(2):
            looped = small.jax_f(*[b[j] for b in batch])
            for k, (a, b) in enumerate(zip(mapped, looped, strict=True)):
                compare(f"vmap, output {s.output_name(k)}, batch {j}", a[j], b, s.rtol, s.atol)
        names.append("vmap")
    total = sum_of(small.jax_f)
    # A complex rule's derivatives are complex derivatives: every transform takes holomorphic=True.
    holomorphic = s.rule.complex
    grads = jax.grad(total, argnums, holomorphic=holomorphic)(*xs)
    for k, (a, b) in enumerate(
        zip(jax.jit(jax.grad(total, argnums, holomorphic=holomorphic))(*xs), grads, strict=True)
    ):
        small.compare(f"jit(grad) vs grad, {s.partial(k)}", a, b, s.rtol, s.atol)
    names.append("grad")
    _compare_shard_map_jax(s, small, xs, grads)
    names.append("shard_map(grad)")
    rev = jax.jacrev(small.jax_f, argnums, holomorphic=holomorphic)(*xs)
    if _linear_derivative(s):
        for k, g in enumerate(grads):
            summed = sum(np.sum(to_numpy(rev[o][k]), axis=tuple(range(np.ndim(eager[o])))) for o in range(len(eager)))
            small.compare(f"grad vs jacrev, {s.partial(k)}", g, summed, s.rtol, s.atol)
    names.append("jacrev")
    if s.jax_forward_mode:
        fwd = jax.jacfwd(small.jax_f, argnums, holomorphic=holomorphic)(*xs)
        for o in range(len(eager)):
            for k in range(len(xs)):
                compare(
                    f"jacfwd vs jacrev, d{s.output_name(o)}/d{s.input_name(k)}", fwd[o][k], rev[o][k], s.rtol, s.atol
                )
        hess = jax.hessian(total, argnums, holomorphic=holomorphic)(*xs)
        hess_rr = jax.jacrev(jax.grad(total, argnums, holomorphic=holomorphic), argnums, holomorphic=holomorphic)(*xs)
        for i in range(len(xs)):
            for k in range(len(xs)):
                compare(
                    f"hessian vs jacrev(grad), block {s.input_name(i)},{s.input_name(k)}",
                    hess[i][k],
                    hess_rr[i][k],
                    max(s.rtol, 1e-9),
                    s.atol,
                )
        names += ["jacfwd", "hessian"]
    else:
        names.append(f"(no jacfwd, hessian: {s.no_forward_mode['jax']})")
    return ", ".join(names) + " consistent" + s.note


def _compare_shard_map_jax(s: Subject, small: Subject, xs: Sequence[Any], grads: Sequence[Any]) -> None:
    """grad under `shard_map` on a mesh of one device, against grad.

    One device types every value as varying along the mesh axis as many
    do, which is what a rule's tangents must match (an integer output's
    float0 tangent did not); the durability check (`--compile`) runs two.
    As there, every array input is sharded, the differentiated ones and
    the others.
    """
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh
    from jax.sharding import PartitionSpec as P

    shard_map = getattr(jax, "shard_map", None)
    if shard_map is None:  # before JAX 0.7 it lived in jax.experimental, which --compile checks
        return
    mesh = Mesh(np.array(jax.devices()[:1]), ("calls",))

    arrays = [k for k, v in enumerate(small.values) if isinstance(v, np.ndarray)]
    call = small.bound(small.jax_fn, jnp.asarray, over=arrays)

    def per_shard(*shards: Any) -> tuple[Any, ...]:
        return tuple(o[None] for o in call(*[x[0] for x in shards]))

    sharded = shard_map(per_shard, mesh=mesh, in_specs=tuple(P("calls") for _ in arrays), out_specs=P("calls"))
    wrt = tuple(arrays.index(k) for k in small.diff)
    # Under jit: eager, every primitive inside shard_map is compiled on its own (hundreds of XLA compilations).
    found = jax.jit(jax.grad(sum_of(sharded), wrt, holomorphic=s.rule.complex))(
        *[jnp.asarray(small.values[k])[None] for k in arrays]
    )
    for k, (a, b) in enumerate(zip(found, grads, strict=True)):
        small.compare(f"shard_map(grad) vs grad, {s.partial(k)}", a[0], b, s.rtol, s.atol)


def check_transforms_torch(s: Subject) -> str:
    if "torch" in s.absent:
        raise NotApplicable(s.absent["torch"])
    import torch

    small = smaller(s)
    xs = tuple(torch.from_numpy(x) for x in small.xs())
    if not xs:
        raise NotApplicable("no differentiable input")
    names = []
    if not s.skipped("vmap"):
        _compare_vmap_torch(s, small, xs)
        names.append("vmap")
    leaves = _compare_grad_torch(s, small, xs)
    names.append("grad")
    # torch.func's jacrev, jacfwd and hessian batch with vmap, and refuse complex inputs.
    batching = not s.skipped("vmap") and not s.rule.complex
    if batching:
        rev = torch.func.jacrev(small.torch_f, tuple(range(len(xs))))(*xs)
        names.append("jacrev")
    if s.torch_forward_mode and batching:
        _compare_forward_mode_torch(s, small, xs, rev)
        names += ["jacfwd", "jvp", "hessian", "jacfwd(jacfwd)", "jvp(jvp)"]
    if _linear_derivative(s):
        _gradcheck_torch(s, small, leaves)
        names.append("gradcheck" + ("" if s.torch_forward_mode else " (reverse mode)"))
    if not s.torch_forward_mode:
        names.append(f"(no jacfwd, jvp, hessian: {s.no_forward_mode['torch']})")
    elif s.rule.complex:
        names.append("(no jacrev, jacfwd, hessian: torch.func's refuse complex inputs)")
    elif not batching:
        names.append(f"(no jacrev, jacfwd, hessian: they use vmap, skipped: {s.rule.checks.skip['vmap']})")
    return ", ".join(names) + " consistent" + s.note


def _compare_vmap_torch(s: Subject, small: Subject, xs: tuple[Any, ...]) -> None:
    import torch

    # sgn, the sign of a real number and x / |x| of a complex one.
    batch = tuple(torch.stack([x, x * 0.75 + 0.1 * torch.sgn(x)]) for x in xs)
    mapped = torch.func.vmap(small.torch_f)(*batch)
    for j in range(2):
        looped = small.torch_f(*[b[j] for b in batch])
        for k, (a, b) in enumerate(zip(mapped, looped, strict=True)):
            compare(f"vmap, output {s.output_name(k)}, batch {j}", to_numpy(a[j]), to_numpy(b), s.rtol, s.atol)


def _compare_grad_torch(s: Subject, small: Subject, xs: tuple[Any, ...]) -> tuple[Any, ...]:
    """torch.func.grad against autograd.grad; the leaves autograd differentiated."""
    import torch

    total = torch_total(s, small.torch_f)
    grads = torch.func.grad(total, tuple(range(len(xs))))(*xs)
    leaves = tuple(x.clone().requires_grad_() for x in xs)
    autograd = torch.autograd.grad(total(*leaves), leaves, allow_unused=True, materialize_grads=True)
    for k, (a, b) in enumerate(zip(grads, autograd, strict=True)):
        small.compare(f"torch.func.grad vs autograd.grad, {s.partial(k)}", to_numpy(a), to_numpy(b), s.rtol, s.atol)
    return leaves


def _compare_forward_mode_torch(s: Subject, small: Subject, xs: tuple[Any, ...], rev: Any) -> None:
    """jacfwd against jacrev, jvp against jacfwd, hessian (and forward over forward) against jacrev of jacrev."""
    import torch

    argnums = tuple(range(len(xs)))
    eager = small.torch_f(*xs)
    fwd = torch.func.jacfwd(small.torch_f, argnums)(*xs)
    for o in range(len(eager)):
        for k in range(len(xs)):
            label = f"jacfwd vs jacrev, d{s.output_name(o)}/d{s.input_name(k)}"
            compare(label, to_numpy(fwd[o][k]), to_numpy(rev[o][k]), s.rtol, s.atol)
    tangent = torch.func.jvp(small.torch_f, xs, tuple(torch.ones_like(x) for x in xs))[1]
    for o in range(len(eager)):
        shape = np.shape(to_numpy(eager[o]))
        by_jac = sum(
            to_numpy(fwd[o][k]).reshape(np.prod(shape, dtype=int), -1).sum(axis=1).reshape(shape) for k in argnums
        )
        small.compare(f"jvp vs jacfwd, output {s.output_name(o)}", to_numpy(tangent[o]), by_jac, s.rtol, s.atol)
    total = sum_of(small.torch_f)
    hess = torch.func.hessian(total, argnums)(*xs)
    hess_rr = torch.func.jacrev(torch.func.jacrev(total, argnums), argnums)(*xs)
    for i in argnums:
        for k in argnums:
            label = f"hessian vs jacrev(jacrev), block {s.input_name(i)},{s.input_name(k)}"
            compare(label, to_numpy(hess[i][k]), to_numpy(hess_rr[i][k]), max(s.rtol, 1e-9), s.atol)
    _compare_forward_over_forward_torch(s, small, xs, eager)


def _compare_forward_over_forward_torch(s: Subject, small: Subject, xs: tuple[Any, ...], eager: Any) -> None:
    """jacfwd of jacfwd and jvp of jvp against jacrev of jacrev, of a weighted sum of the outputs.

    torch runs a Function's jvp with forward mode off, which an outer jvp
    level took for a constant tangent: forward over forward was 0 for every
    generated rule (the runtime's `seen_by_outer_levels` mends it), where
    hessian, forward over reverse, was right.  Weights, not the plain sum,
    so that outputs whose sum is constant (softmax's) are seen too.
    """
    import torch

    argnums = tuple(range(len(xs)))
    rng = np.random.default_rng(0)
    weights = [torch.from_numpy(normal_like(rng, to_numpy(o))) for o in eager]

    def weighted(*ys: Any) -> Any:
        return sum((o * w).sum() for o, w in zip(small.torch_f(*ys), weights, strict=True))

    want = torch.func.jacrev(torch.func.jacrev(weighted, argnums), argnums)(*xs)
    got = torch.func.jacfwd(torch.func.jacfwd(weighted, argnums), argnums)(*xs)
    for i in argnums:
        for k in argnums:
            label = f"jacfwd(jacfwd) vs jacrev(jacrev), block {s.input_name(i)},{s.input_name(k)}"
            compare(label, to_numpy(got[i][k]), to_numpy(want[i][k]), max(s.rtol, 1e-9), s.atol)
    ones = tuple(torch.ones_like(x) for x in xs)
    twice = torch.func.jvp(lambda *ys: torch.func.jvp(weighted, ys, ones)[1], xs, ones)[1]
    # d2/dt2 weighted(xs + t): the sum of every block's entries.
    by_blocks = sum(np.sum(to_numpy(want[i][k])) for i in argnums for k in argnums)
    compare("jvp(jvp) vs jacrev(jacrev)", to_numpy(twice), by_blocks, max(s.rtol, 1e-9), s.atol)


def _gradcheck_torch(s: Subject, small: Subject, leaves: tuple[Any, ...]) -> None:
    import torch

    # torch's batched-gradient check runs backward under its legacy
    # batching, which cannot batch a host (NumPy) body.
    host = not s.elementwise and "numpy" in forward_kind(s.rule)
    try:
        torch.autograd.gradcheck(
            small.torch_f,
            leaves,
            check_forward_ad=s.torch_forward_mode,
            check_batched_grad=not host and not s.skipped("vmap"),
            raise_exception=True,
        )
    except Exception as exc:
        raise CheckFailed(f"gradcheck ({s.positions()}): {brief(str(exc))}") from None


def check_broadcast(s: Subject) -> str:
    arrays = [k for k, i in enumerate(s.rule.inputs) if not i.static]
    if len(arrays) < 2:
        raise NotApplicable("fewer than two array inputs: nothing broadcasts")
    if not s.diff:
        raise NotApplicable("no differentiable input")
    shapes = [(3, 1), (1, 4), (4,), (3, 4)]
    values = list(s.values)
    for n, k in enumerate(arrays):
        values[k] = np.asarray(s.values[k]).reshape(-1)[: int(np.prod(shapes[n % len(shapes)]))]
        values[k] = np.resize(values[k], shapes[n % len(shapes)])
    full = np.broadcast_shapes(*[np.shape(values[k]) for k in arrays])
    expanded = list(values)
    for k in arrays:
        expanded[k] = np.broadcast_to(values[k], full).copy()
    if not isinstance(s.rule.forward, SympyBody):
        # Elementwise (sympy) rules promise broadcasting; a snippet rule is
        # held to it only where its forward broadcasts like array code, that
        # is, gives on stretchable shapes what it gives on the stretched
        # arrays.  Its cotangents must then be those of the stretched
        # inputs summed back, whatever its VJP body does by hand.
        reason = _not_broadcasting(s, values, expanded)
        if reason:
            raise NotApplicable(f"the forward does not broadcast its inputs: {reason}")
    for name in s.backends:
        small, big = _broadcast_grads(s, name, values, expanded)
        for k, g, b in zip(s.diff, small, big, strict=True):
            shape = np.shape(values[k])
            got_shape = np.shape(to_numpy(g))
            if tuple(got_shape) != tuple(shape):
                what = f"cotangent of {s.rule.inputs[k].name}"
                raise CheckFailed(f"{name}: {what} has shape {got_shape}, the input has {shape}")
            lead = len(full) - len(shape)
            axes = tuple(range(lead)) + tuple(lead + i for i, n in enumerate(shape) if n == 1 and full[lead + i] != 1)
            expected = np.sum(to_numpy(b), axis=axes).reshape(shape)
            compare(f"{name}: cotangent of {s.rule.inputs[k].name}", to_numpy(g), expected, s.rtol, s.atol)
    return f"inputs of shapes {[np.shape(values[k]) for k in arrays]} get cotangents of their own shapes"


def _broadcast_grads(s: Subject, name: str, values: list[Any], expanded: list[Any]) -> tuple[Any, Any]:
    """One backend's gradients at inputs of stretchable shapes, and at the same inputs stretched."""
    diff = list(s.diff)
    fn, convert = s.fn(name), from_numpy(name)

    def total(*xs: Any, base: list[Any]) -> Any:
        args = [convert(v) if isinstance(v, np.ndarray) else v for v in base]
        for k, x in zip(diff, xs, strict=True):
            args[k] = x
        out = fn(*args)
        outs = out if isinstance(out, tuple) else (out,)
        return sum(outs[o].sum() for o in s.outputs)

    def grads(base: list[Any]) -> Any:
        if name == "jax":
            return jax_grad(s, lambda *xs: total(*xs, base=base), tuple(range(len(diff))))(
                *[convert(base[k]) for k in diff]
            )
        leaves = [convert(base[k]).requires_grad_() for k in diff]
        return torch_grads(s, total(*leaves, base=base), leaves)

    return grads(values), grads(expanded)


def _not_broadcasting(s: Subject, values: list[Any], expanded: list[Any]) -> str:
    """Why the rule's forward does not act on `values` as on their broadcast `expanded`; empty if it does."""
    for name in s.backends:
        fn, convert = s.fn(name), from_numpy(name)
        try:
            with _quiet_host_callbacks():
                small = fn(*[convert(v) if isinstance(v, np.ndarray) else v for v in values])
                big = fn(*[convert(v) if isinstance(v, np.ndarray) else v for v in expanded])
            pairs = zip(*(o if isinstance(o, tuple) else (o,) for o in (small, big)), strict=True)
            for k, (a, b) in enumerate(pairs):
                compare(
                    f"output {s.rule.outputs[k].name} vs the broadcast inputs'",
                    to_numpy(a),
                    to_numpy(b),
                    s.rtol,
                    s.atol,
                )
        except Exception as exc:
            # The last line of a host callback's error is the host's own exception.
            lines = str(exc).strip().splitlines() or [""]
            return f"{name}: {type(exc).__name__}: {brief(lines[-1], 200)}"
    return ""


@contextmanager
def _quiet_host_callbacks() -> Iterator[None]:
    """Keep JAX from logging the traceback of a host body that raises where the caller expects it may."""
    logger = logging.getLogger("jax._src.callback")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


def check_structures(s: Subject) -> str:
    """Gradients with respect to structured arguments come in those structures, equal to the inputs' gradients."""
    rule = s.rule
    if not rule.structured:
        raise NotApplicable("the rule takes and returns arrays, no structures")
    # What grad can take: arrays and structures all of whose arrays are differentiable.
    wrt = [
        k
        for k, p in enumerate(rule.parameters)
        if all(i.differentiable for i in (p.leaves if isinstance(p, Structured) else (p,)))
    ]
    if not wrt:
        raise NotApplicable("no argument is differentiable as a whole")
    first = s.backends[0]
    weights = [normal_like(s.rng, to_numpy(o)) for o in s.f(first)(*map(from_numpy(first), s.xs()))]
    flat = (vjp_jax if first == "jax" else vjp_torch)(s, s.xs(), weights)
    by_input = dict(zip((rule.inputs[k].name for k in s.diff), flat, strict=True))
    for backend in s.backends:
        convert = from_numpy(backend)
        values = [convert(v) if isinstance(v, np.ndarray) else v for v in s.values]
        arguments = structured_arguments(rule, values)
        grads = _structured_grads(s, backend, weights, arguments, wrt)
        got = dict(zip(wrt, grads, strict=True))
        wrong = next((k for k, g in got.items() if type(g) is not type(arguments[k])), None)
        if wrong is not None:
            raise CheckFailed(
                f"{backend}: the gradient for {rule.parameters[wrong].name!r} is {type(got[wrong]).__name__}, "
                f"not {type(arguments[wrong]).__name__}"
            )
        parts = leaves_of_arguments(rule, [got.get(k, a) for k, a in enumerate(arguments)])
        for leaf, part in zip(rule.inputs, parts, strict=True):
            if leaf.name in by_input:
                found = to_numpy(part)
                found = np.conj(found) if backend == "torch" and rule.complex else found
                compare(f"{backend} gradient of {leaf.name}", found, by_input[leaf.name], s.rtol, s.atol)
    kinds = ", ".join(f"{p.name} ({p.kind})" for p in rule.parameters if isinstance(p, Structured))
    shapes = f"{kinds} in" + (", " if rule.returns else "") if kinds else ""
    grads = " and ".join({"jax": "jax.grad", "torch": "torch.func.grad"}[b] for b in s.backends)
    return f"{grads} through the structures ({shapes}{'results' if rule.returns else ''})"


def _structured_grads(
    s: Subject, backend: str, weights: Sequence[np.ndarray], arguments: Sequence[Any], wrt: Sequence[int]
) -> Any:
    """The backend's gradient of sum(w * out) with respect to the arguments `wrt`, structures as they are passed."""
    rule = s.rule
    convert = from_numpy(backend)

    def total(*args: Any) -> Any:
        # The structures as the user passes them: rebuilt from whatever the transform hands in.
        outs = s.fn(backend)(*leaves_of_arguments(rule, args))
        outs = outs if isinstance(outs, tuple) else (outs,)
        summed = sum((outs[k] * convert(w)).sum() for k, w in zip(s.outputs, weights, strict=True))
        # torch differentiates a complex rule's real part (conjugate Wirtinger), JAX holomorphically.
        return summed.real if backend == "torch" and rule.complex else summed

    if backend == "jax":
        import jax

        return jax.grad(total, argnums=tuple(wrt), holomorphic=rule.complex)(*arguments)
    import torch

    return torch.func.grad(total, argnums=tuple(wrt))(*arguments)


def check_compile(s: Subject, include_compile: bool) -> str:
    import torch

    if not include_compile:
        raise NotApplicable("torch.compile is checked with --compile (it takes ~30 s)")
    xs = tuple(torch.from_numpy(x) for x in s.xs())
    compiled = torch.compile(sum_of(s.torch_f), fullgraph=True)
    leaves = tuple(x.clone().requires_grad_() for x in xs)
    try:
        got = torch_grads(s, compiled(*leaves), leaves)
    except torch._dynamo.exc.Unsupported as exc:
        if "custom jvp" in str(exc).lower():
            raise NotApplicable(
                "torch.compile(fullgraph=True) refuses an autograd.Function that defines jvp; rulegen's generated "
                "code applies a copy of its Function without jvp while compiling, the Function with jvp in eager"
            ) from None
        if "data-dependent" not in str(exc).lower():
            raise
        raise NotApplicable(
            "fullgraph=True cannot trace the data-dependent control flow of the rule's own body (a Python loop or "
            "branch on tensor values); without fullgraph, torch.compile breaks the graph there (see durability)"
        ) from None
    leaves = tuple(x.clone().requires_grad_() for x in xs)
    want = torch_grads(s, sum_of(s.torch_f)(*leaves), leaves)
    for k, (a, b) in enumerate(zip(got, want, strict=True)):
        s.compare(f"compiled gradient {s.partial(k)} vs eager", to_numpy(a), to_numpy(b), s.rtol, s.atol)
    return "torch.compile(fullgraph=True) matches eager"
