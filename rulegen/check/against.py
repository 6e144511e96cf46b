"""Checking code people already have: hand-written JAX and torch rules audited against a rule file.

`rulegen test RULE --against jax=MODULE:ATTR --against torch=MODULE:ATTR`
holds the user's callables (a JAX function with or without `custom_jvp` or
`custom_vjp`; a torch function, an `autograd.Function`'s `apply`, a
`torch.library` custom op) to the rule's mathematics.  They are presented to
the battery as the implementation under test: a subject whose JAX and torch
functions are the user's where given, rulegen's generated code where not, so
every check of the registry runs on them unchanged.  Four checks are added
for what hand-written code gets wrong and generated code cannot:
`generated` (each implementation against rulegen's own code of the rule, on
the sample and far from it, in float64 and float32), `grad_dtype` (float32
in, float32 gradients out: no float64 constant leaks into a gradient),
`saved` (tensors kept for the backward are saved with `save_for_backward`,
never kept as attributes of `ctx`; the forward leaves its inputs as they
were) and `opcheck` (`torch.library.opcheck` of a custom op).

A framework that is not installed is one the audit does without: a
one-framework audit runs every check that does not need the other, and says
of the rest that they need it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import os
import sys
import tempfile
import threading
import types
from collections.abc import Callable, Collection, Iterator, Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np

from rulegen.check.derivatives import cotangents, vjp_jax, vjp_torch
from rulegen.check.numerical import WIDE_POINTS, wide_point
from rulegen.check.outcome import CheckFailed, NotApplicable, Outcome, brief, compare
from rulegen.check.points import flat_call
from rulegen.check.registry import REGISTRY, Check
from rulegen.check.subject import Subject, from_numpy, subject_of, to_numpy
from rulegen.spec.rules import Rule, SympyBody

BACKENDS = ("jax", "torch")


class AgainstError(Exception):
    """An `--against` that cannot be used (a malformed one, a module or attribute that does not import)."""


def parse_against(values: Sequence[str]) -> dict[str, str]:
    """`["jax=mod:attr", ...]` as `{"jax": "mod:attr"}`; AgainstError for a malformed or repeated one."""
    found: dict[str, str] = {}
    for value in values:
        backend, sep, target = value.partition("=")
        backend = backend.strip()
        if not sep or backend not in BACKENDS:
            raise AgainstError(f"--against {value!r}: expected jax=MODULE:ATTR or torch=MODULE:ATTR")
        module, colon, attribute = target.partition(":")
        if not colon or not module or not attribute:
            raise AgainstError(f"--against {value!r}: expected {backend}=MODULE:ATTR (a module, a colon, a name)")
        if backend in found:
            raise AgainstError(f"--against {backend} given twice ({found[backend]} and {target})")
        found[backend] = target
    if not found:
        raise AgainstError("--against: no implementation given")
    return found


def load_callable(target: str) -> Callable[..., Any]:
    """`MODULE:ATTR` imported, the current directory importable; AgainstError with the reason where it is not."""
    module_name, _, attribute = target.partition(":")
    here = os.getcwd()
    if here not in sys.path and "" not in sys.path:
        sys.path.insert(0, here)
    try:
        found: Any = importlib.import_module(module_name)
    except Exception as exc:
        raise AgainstError(f"{target}: cannot import {module_name}: {type(exc).__name__}: {brief(str(exc))}") from None
    for part in attribute.split("."):
        try:
            found = getattr(found, part)
        except AttributeError:
            raise AgainstError(f"{target}: {module_name} has no attribute {attribute!r}") from None
    if not callable(found):
        raise AgainstError(f"{target}: {attribute} is a {type(found).__name__}, not a callable")
    return found


def installed(backend: str) -> bool:
    """Whether the framework imports here (a `sys.modules` entry of None stands for one that is not installed)."""
    try:
        importlib.import_module(backend)
    except ImportError:
        return False
    return True


def _not_installed(backend: str) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        raise ModuleNotFoundError(f"No module named {backend!r}", name=backend)

    return call


@dataclasses.dataclass
class Audit:
    """One rule, the implementations under test, and rulegen's generated code of the rule in each installed
    framework."""

    rule: Rule
    targets: dict[str, str]  # backend: MODULE:ATTR, as given
    implementations: dict[str, Callable[..., Any]]
    generated: dict[str, Callable[..., Any]]
    known: tuple[str, ...]

    @property
    def label(self) -> str:
        """The table's row: the implementations and the rule they are held to."""
        given = ", ".join(f"{b}={t}" for b, t in self.targets.items())
        return f"{given} vs {self.rule.name}"

    def under_test(self, backend: str) -> str:
        return f"{backend}={self.targets[backend]}" if backend in self.targets else f"rulegen's generated {backend}"

    def subject(self, seed: int) -> Subject:
        """The battery's subject: the user's callables where given, rulegen's code where not."""
        functions = {}
        for backend in BACKENDS:
            fn = self.implementations.get(backend) or self.generated.get(backend)
            functions[backend] = fn if fn is not None else _not_installed(backend)
        s = subject_of(
            self.rule,
            types.SimpleNamespace(**{self.rule.name: functions["jax"]}),
            types.SimpleNamespace(**{self.rule.name: functions["torch"]}),
            seed,
            self.known,
            absent={b: f"{b} is not installed" for b in BACKENDS if not installed(b)},
        )
        for backend in self.implementations:
            s.no_forward_mode.pop(backend, None)
            why = _refused_forward_mode(s, backend)
            if why:
                s.no_forward_mode[backend] = why
        for backend in s.absent:
            s.no_forward_mode[backend] = s.absent[backend]
        s.memo["audit"] = self
        return s


#: What a framework says when it refuses forward mode of a construct, and what rulegen generates instead.
_REFUSALS = {
    "jax": (
        "forward-mode autodiff (jvp) to a custom_vjp",
        "JAX refuses forward mode of a custom_vjp; rulegen generates a custom_jvp, which has both modes, "
        "wherever the rule's derivative can be transposed",
    ),
    "torch": (
        "must implement the jvp function",
        "the autograd.Function defines no jvp, and torch refuses its forward mode; rulegen's generated "
        "Function defines jvp wherever the rule's derivative allows",
    ),
}


def _refused_forward_mode(s: Subject, backend: str) -> str:
    """Why the framework refuses forward mode of the user's callable ("" where it does not)."""
    from rulegen.check.derivatives import jvp_jax, jvp_torch

    if backend in s.absent or not s.diff:
        return ""
    xs = s.xs()
    try:
        (jvp_jax if backend == "jax" else jvp_torch)(s, xs, [np.ones_like(x) for x in xs])
    except Exception as exc:
        marker, why = _REFUSALS[backend]
        if marker in str(exc):
            return why
    return ""


@contextlib.contextmanager
def generated_code(rules: Sequence[Rule]) -> Iterator[dict[str, Any]]:
    """rulegen's own code of `rules`, built into a temporary package: its module per installed framework."""
    from rulegen.render.build import build

    package = "rulegen_audited"
    with tempfile.TemporaryDirectory(prefix="rulegen-audit-") as folder:
        build(sorted({Path(r.source) for r in rules}), Path(folder) / package)
        sys.path.insert(0, folder)
        try:
            modules = {}
            for backend in BACKENDS:
                if installed(backend):
                    if backend == "jax":
                        import jax

                        jax.config.update("jax_enable_x64", True)
                    modules[backend] = importlib.import_module(f"{package}.{backend}")
            yield modules
        finally:
            sys.path.remove(folder)
            for name in [m for m in sys.modules if m == package or m.startswith(f"{package}.")]:
                del sys.modules[name]


# The checks hand-written code needs beside the registry's.


def _audit_of(s: Subject) -> Audit:
    audit = s.memo.get("audit")
    if audit is None:
        raise NotApplicable("it audits hand-written code (rulegen test --against)")
    return audit


def _call(s: Subject, backend: str, fn: Callable[..., Any], values: Sequence[Any]) -> list[np.ndarray]:
    convert = from_numpy(backend)
    out = fn(*[convert(v) if isinstance(v, np.ndarray) else v for v in values])
    return [to_numpy(o) for o in (out if isinstance(out, tuple) else (out,))]


def _grads(s: Subject, backend: str, fn: Callable[..., Any], values: Sequence[Any]) -> list[np.ndarray]:
    """The gradient of the sum of the differentiable outputs of `fn` at `values`, for each differentiable input."""
    point = dataclasses.replace(s, values=list(values), jax_fn=fn, torch_fn=fn)
    xs = point.xs()
    ones = [np.ones_like(to_numpy(o)) for o in point.f(backend)(*map(from_numpy(backend), xs))]
    return (vjp_jax if backend == "jax" else vjp_torch)(point, xs, ones)


def check_generated(s: Subject) -> str:
    """Each implementation under test against rulegen's own code of the rule in the same framework.

    On the sample in float64: values and VJPs.  For a rule whose forward is
    an expression, also at the wide points (±0.61 to ±1e4, inside each
    written domain) in float64 and float32: wherever rulegen's code gives a
    finite value or gradient, the implementation must too, and in float64
    close to it.
    """
    audit = _audit_of(s)
    compared = []
    for backend, given in audit.implementations.items():
        if audit.generated.get(backend) is None or backend in s.absent:
            continue
        # Called as the subject calls them: a structured rule's arguments and results in its structures.
        fn, mine = flat_call(s.rule, given), flat_call(s.rule, audit.generated[backend])
        who = audit.under_test(backend)
        theirs = _call(s, backend, fn, s.values)
        ours = _call(s, backend, mine, s.values)
        for k, (a, b) in enumerate(zip(theirs, ours, strict=True)):
            s.compare(f"{who}: output {s.rule.outputs[k].name} vs rulegen's {s.rule.name}", a, b, s.rtol, s.atol)
        if s.diff:
            outs = [theirs[k] for k in s.outputs]
            cs = cotangents(s, outs)
            got = _vjp(s, backend, fn, cs)
            want = _vjp(s, backend, mine, cs)
            for k, (a, b) in enumerate(zip(got, want, strict=True)):
                s.compare(f"{who}: VJP for {s.input_name(k)} vs rulegen's {s.rule.name}", a, b, s.rtol, s.atol)
        if isinstance(s.rule.forward, SympyBody) and not s.rule.complex:
            _compare_wide(s, backend, who, fn, mine)
        compared.append(backend)
    if not compared:
        raise NotApplicable("no implementation under test has rulegen's code in its framework to compare with")
    return f"{', '.join(audit.under_test(b) for b in compared)} agree with rulegen's own {s.rule.name}"


def _vjp(s: Subject, backend: str, fn: Callable[..., Any], cs: Sequence[np.ndarray]) -> list[np.ndarray]:
    point = dataclasses.replace(s, jax_fn=fn, torch_fn=fn)
    return (vjp_jax if backend == "jax" else vjp_torch)(point, point.xs(), cs)


def _compare_wide(s: Subject, backend: str, who: str, fn: Callable[..., Any], mine: Callable[..., Any]) -> None:
    for c in WIDE_POINTS:
        values = wide_point(s, c)
        if values is None:
            continue
        for dtype in (np.float64, np.float32):
            point = [v.astype(dtype) if isinstance(v, np.ndarray) and v.dtype.kind == "f" else v for v in values]
            at = dataclasses.replace(s, values=point).where()
            width = "float32" if dtype == np.float32 else "float64"
            for what, got, want in _values_and_grads(s, backend, fn, mine, point):
                if not np.isfinite(want).all() or (np.isfinite(got).all() and dtype == np.float32):
                    continue
                if not np.isfinite(got).all():
                    raise CheckFailed(
                        f"{who}: {what} in {width} at {at} is {_show(got)}; rulegen's {s.rule.name} gives {_show(want)}"
                    )
                scale = max(1.0, float(np.max(np.abs(want))))
                compare(f"{who}: {what} in {width} at {at} vs rulegen's {s.rule.name}", got, want, 1e-6, 1e-12 * scale)


def _values_and_grads(
    s: Subject, backend: str, fn: Callable[..., Any], mine: Callable[..., Any], values: list[Any]
) -> Iterator[tuple[str, np.ndarray, np.ndarray]]:
    with np.errstate(all="ignore"):
        theirs, ours = _call(s, backend, fn, values), _call(s, backend, mine, values)
        for k, (a, b) in enumerate(zip(theirs, ours, strict=True)):
            yield f"output {s.rule.outputs[k].name}", a, b
        if s.diff and s.rule.checks.true_derivative:
            got, want = _grads(s, backend, fn, values), _grads(s, backend, mine, values)
            for k, (a, b) in enumerate(zip(got, want, strict=True)):
                yield f"gradient {s.partial(k)}", a, b


def _show(value: np.ndarray) -> str:
    flat = np.ravel(value)
    return f"{flat[0]:.8g}" if flat.size == 1 else np.array2string(flat, precision=8)


def check_grad_dtype(s: Subject) -> str:
    """float32 inputs get float32 gradients from the derivative rule itself, before any framework casts them.

    A float64 constant in a hand-written backward (`np.array([...])`,
    `torch.tensor(..., dtype=torch.float64)`) makes a float64 gradient:
    JAX hands it on, torch casts it back after computing in float64.  The
    torch Functions' own backwards are called here directly to see it.
    """
    audit = _audit_of(s)
    if not s.diff:
        raise NotApplicable("no differentiable input")
    done = []
    for backend in audit.implementations:
        if backend in s.absent:
            continue
        who = audit.under_test(backend)
        narrow = [v.astype(np.float32) if isinstance(v, np.ndarray) and v.dtype == np.float64 else v for v in s.values]
        point = dataclasses.replace(s, values=narrow)
        found = _raw_gradients_torch(point) if backend == "torch" else _gradients_jax(point)
        for what, dtype in found:
            if str(dtype).rpartition(".")[2] not in ("float32", "complex64"):
                raise CheckFailed(f"{who}: {what} is {str(dtype).rpartition('.')[2]} for float32 inputs")
        done.append(f"{who} ({len(found)} gradient(s))")
    if not done:
        raise NotApplicable("no implementation under test whose framework is installed")
    return "float32 gradients for float32 inputs: " + ", ".join(done)


def _gradients_jax(s: Subject) -> list[tuple[str, Any]]:
    import jax
    import jax.numpy as jnp

    xs = [jnp.asarray(x) for x in s.xs()]
    grads = jax.grad(lambda *a: sum(jnp.sum(o) for o in s.jax_f(*a)).real, tuple(range(len(xs))))(*xs)
    return [(f"gradient {s.partial(k)}", g.dtype) for k, g in enumerate(grads)]


def _custom_nodes(outs: Sequence[Any]) -> list[Any]:
    """The nodes of `autograd.Function`s in the graph that made `outs`, nearest first."""
    seen, found, pending = set(), [], [o.grad_fn for o in outs if getattr(o, "grad_fn", None) is not None]
    while pending:
        node = pending.pop(0)
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if hasattr(node, "_forward_cls"):
            found.append(node)
        pending += [n for n, _ in node.next_functions]
    return found


def _raw_gradients_torch(s: Subject) -> list[tuple[str, Any]]:
    """The gradients each `autograd.Function` of the graph returns, as its backward returns them.

    Each Function's `backward` is wrapped for the one call to record its
    results' dtypes before torch casts them to the inputs' dtypes.
    """
    import torch

    leaves = [torch.from_numpy(x).requires_grad_() for x in s.xs()]
    outs = s.torch_f(*leaves)
    classes = list(dict.fromkeys(node._forward_cls for node in _custom_nodes(outs)))
    raw: list[tuple[str, Any]] = []

    def recording(cls: Any, backward: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(ctx: Any, *grads: Any) -> Any:
            found = backward(ctx, *grads)
            results = found if isinstance(found, tuple) else (found,)
            for k, g in enumerate(results):
                if isinstance(g, torch.Tensor):
                    raw.append((f"{cls.__name__}.backward's gradient {k}", g.dtype))
            return found

        return wrapped

    originals = {cls: cls.__dict__.get("backward") for cls in classes}
    try:
        for cls in classes:
            cls.backward = staticmethod(recording(cls, cls.backward))
        total = sum(o.sum() for o in outs)
        grads = torch.autograd.grad(total, leaves, allow_unused=True)
    finally:
        for cls, original in originals.items():
            if original is None:
                del cls.backward
            else:
                cls.backward = original
    return [(f"gradient {s.partial(k)}", g.dtype) for k, g in enumerate(grads) if g is not None] + raw


def check_saved(s: Subject) -> str:
    """torch: tensors a Function keeps for its backward are saved (`save_for_backward`), not `ctx` attributes;
    and the forward leaves its inputs as they were.

    A tensor kept as an attribute has no version counter: an input changed
    in place after the forward silently changes the gradient, where a saved
    one makes the backward raise.
    """
    import torch

    audit = _audit_of(s)
    if "torch" not in audit.implementations:
        raise NotApplicable("no torch implementation under test (it checks torch's autograd.Function)")
    if "torch" in s.absent:
        raise NotApplicable(s.absent["torch"])
    who = audit.under_test("torch")
    before = [v.copy() if isinstance(v, np.ndarray) else v for v in s.values]
    leaves = [torch.from_numpy(x.copy()).requires_grad_() for x in s.xs()]
    arguments = [torch.from_numpy(v.copy()) if isinstance(v, np.ndarray) else v for v in s.values]
    for k, leaf in zip(s.diff, leaves, strict=True):
        arguments[k] = leaf
    kept = [a.detach().clone() if isinstance(a, torch.Tensor) else a for a in arguments]
    out = s.torch_fn(*arguments)
    outs = [o for o in (out if isinstance(out, tuple) else (out,)) if isinstance(o, torch.Tensor)]
    for spec, a, b in zip(s.rule.inputs, arguments, kept, strict=True):
        if isinstance(a, torch.Tensor) and not torch.equal(a.detach(), b):
            raise CheckFailed(f"{who}: the forward changes its input {spec.name} in place")
    del before
    nodes = _custom_nodes(outs)
    for node in nodes:
        attributes = sorted(k for k, v in vars(node).items() if isinstance(v, torch.Tensor))
        if attributes:
            named = ", ".join(f"ctx.{a}" for a in attributes)
            raise CheckFailed(
                f"{who}: {node._forward_cls.__name__} keeps {named} as an attribute of ctx, not with "
                "ctx.save_for_backward: an input changed in place after the forward changes the gradient silently"
            )
    if not s.diff or not outs:
        return f"{len(nodes)} Function(s): no tensor kept on ctx"
    # An input changed in place after the forward: the backward raises or gives the gradient at the old input.
    total = sum(o.sum() for o in outs if o.requires_grad)
    if not isinstance(total, torch.Tensor):
        return f"{len(nodes)} Function(s): no tensor kept on ctx"
    want = torch.autograd.grad(total, leaves, allow_unused=True, retain_graph=True)
    with torch.no_grad():
        for leaf in leaves:
            leaf.mul_(1.5).add_(0.25)
    try:
        got = torch.autograd.grad(total, leaves, allow_unused=True)
    except RuntimeError as exc:
        if "modified by an inplace operation" in str(exc):
            return f"{len(nodes)} Function(s): tensors saved, an input changed in place after the forward is refused"
        raise
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        if g is not None and w is not None and not torch.equal(g, w):
            raise CheckFailed(
                f"{who}: the gradient {s.partial(k)} changes when its input changes in place after the forward: "
                "the backward reads a tensor that is not saved (no version-counter check)"
            )
    return f"{len(nodes)} Function(s): no tensor kept on ctx, the backward reads nothing an input change alters"


def check_opcheck(s: Subject) -> str:
    """torch.library.opcheck of a custom op (registration, fake tensor, autograd) at the sample."""
    import torch

    audit = _audit_of(s)
    fn = audit.implementations.get("torch")
    op = getattr(fn, "_opoverload", fn)
    if fn is None or not isinstance(op, torch._ops.OpOverload | torch._ops.OpOverloadPacket):
        raise NotApplicable("the torch implementation under test is no torch.library custom op")
    arguments = tuple(torch.from_numpy(v) if isinstance(v, np.ndarray) else v for v in s.values)
    arguments = tuple(a.requires_grad_() if k in s.diff else a for k, a in enumerate(arguments))
    try:
        torch.library.opcheck(op, arguments)
    except Exception as exc:
        raise CheckFailed(f"{audit.under_test('torch')}: torch.library.opcheck: {brief(str(exc))}") from None
    return "torch.library.opcheck passes"


AUDIT_CHECKS: tuple[Check, ...] = (
    *REGISTRY,
    Check("generated", "ge", check_generated),
    Check("grad_dtype", "gd", check_grad_dtype),
    Check("saved", "sv", check_saved),
    Check("opcheck", "oc", check_opcheck),
)


def chosen_audit_checks(only: Collection[str] | None) -> tuple[Check, ...]:
    if only is None:
        return AUDIT_CHECKS
    names = [c.name for c in AUDIT_CHECKS]
    unknown = sorted(set(only) - set(names))
    if unknown:
        raise ValueError(f"no check named {', '.join(map(repr, unknown))}; the checks are {', '.join(names)}")
    return tuple(c for c in AUDIT_CHECKS if c.name in only)


def _needs(exc: BaseException, absent: dict[str, str]) -> str:
    """The reason a check is n/a where it failed only for a framework that is not installed."""
    if isinstance(exc, ImportError) and exc.name is not None:
        top = exc.name.partition(".")[0]
        if top in absent:
            return f"it needs {top}, which is not installed"
    return ""


def _not_for_hand_written(audit: Audit, check: str) -> str | None:
    """Why a check of generated code's promises does not hold hand-written code to them (None: it does)."""
    if check == "scalars" and "torch" in audit.implementations:
        return (
            "a hand-written torch callable is not held to taking Python numbers for tensors "
            "(rulegen's generated functions take them)"
        )
    return None


#: How long one check of hand-written code may run, in seconds, before it fails as not finishing.
CHECK_TIMEOUT = 300.0


class _TimedOut(BaseException):
    """Raised inside a check's thread that ran past its time: a BaseException, so no `except Exception` of the
    code under test swallows it."""


#: How long a timed-out check's thread is given to stop once told to, in seconds.
_STOP_GRACE = 5.0


def _within(seconds: float, function: Callable[..., str], *args: Any, **kwargs: Any) -> str:
    """`function(*args, **kwargs)`, or CheckFailed where it runs longer than `seconds`.

    Hand-written code may loop forever at some dtype (an absolute tolerance
    that bfloat16 never reaches): the check runs in a daemon thread, which
    is stopped where it does not finish (an exception raised in it at its
    next Python instruction), so that it does not run on beside the checks
    after it, on the same frameworks.  A loop inside one native call ends
    only when the call does; the failure says so.
    """
    result: dict[str, Any] = {}

    def run() -> None:
        try:
            result["value"] = function(*args, **kwargs)
        except _TimedOut:
            pass
        except BaseException as exc:
            result["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        _raise_in(thread, _TimedOut)
        thread.join(_STOP_GRACE)
        left = "stopped" if not thread.is_alive() else "still running, inside a native call"
        raise CheckFailed(f"did not finish in {seconds:.0f} s (a loop that never ends at some dtype or point?); {left}")
    if "error" in result:
        raise result["error"]
    return cast(str, result["value"])


def _raise_in(thread: threading.Thread, exception: type[BaseException]) -> None:
    """Raise `exception` in `thread` at its next Python instruction (CPython's asynchronous exception)."""
    import ctypes

    if thread.ident is not None:
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident), ctypes.py_object(exception))


def _refused_dtype(audit: Audit, check: str, exc: BaseException) -> str:
    """Why `low_precision` is n/a where the implementation raises for bfloat16 or float16 inputs ("" otherwise).

    A refusal is loud: NumPy has no bfloat16, and code that computes on the
    host (the torch docs' NumpySort) cannot take it.  Wrong numbers in those
    dtypes are what the check is for, and they still fail it.
    """
    if check != "low_precision" or not isinstance(exc, TypeError | RuntimeError | ValueError):
        return ""
    given = ", ".join(audit.under_test(b) for b in audit.implementations)
    return (
        f"{given} refuses bfloat16 or float16 inputs ({type(exc).__name__}: {brief(str(exc), 160)}); "
        "rulegen's generated code takes them"
    )


def audit_outcomes(
    audit: Audit,
    *,
    seed: int = 0,
    include_compile: bool = False,
    checks: Sequence[Check] = AUDIT_CHECKS,
    timeout: float = CHECK_TIMEOUT,
) -> list[Outcome]:
    """Every check of `checks` on the implementations of `audit`, at the points of `seed`; a check that runs past
    `timeout` seconds fails."""
    from rulegen.check.outcome import NotApplicable as Refused

    label = audit.label
    try:
        built: Subject | Exception = audit.subject(seed)
    except Exception as exc:
        built = exc
    absent = {b: f"{b} is not installed" for b in BACKENDS if not installed(b)}
    outcomes = []
    for check in checks:
        skip = audit.rule.checks.skip.get(check.name) or _not_for_hand_written(audit, check.name)
        if skip is not None:
            why = skip if check.name not in audit.rule.checks.skip else f"skipped by the rule: {skip}"
            outcomes.append(Outcome(label, check.name, "n/a", why))
            continue
        # No built package of the user's code: durability's shard_map part, which imports one, says so.
        available = {"include_compile": include_compile, "jax_package": None}
        try:
            if isinstance(built, Exception):
                raise built
            arguments = {need: available[need] for need in check.needs}
            detail = _within(timeout, check.function, built.fresh(), **arguments)
            outcomes.append(Outcome(label, check.name, "pass", detail))
        except Refused as why:
            outcomes.append(Outcome(label, check.name, "n/a", str(why)))
        except CheckFailed as failure:
            outcomes.append(Outcome(label, check.name, "fail", str(failure)))
        except Exception as exc:
            needs = _needs(exc, absent) or _refused_dtype(audit, check.name, exc)
            if needs:
                outcomes.append(Outcome(label, check.name, "n/a", needs))
            else:
                outcomes.append(Outcome(label, check.name, "fail", f"{type(exc).__name__}: {brief(str(exc))}"))
    return outcomes


@contextlib.contextmanager
def audits(rules: Sequence[Rule], targets: dict[str, str], others: Sequence[Rule] = ()) -> Iterator[list[Audit]]:
    """An audit per rule of the implementations `targets` names, rulegen's code of the rules built once."""
    from rulegen.spec.rules import callees

    implementations = {backend: load_callable(target) for backend, target in targets.items()}
    everything = (*rules, *callees(rules, others))
    known = tuple(sorted(r.name for r in everything))
    with generated_code(everything) as modules:
        yield [
            Audit(
                rule,
                dict(targets),
                implementations,
                {b: getattr(m, rule.name) for b, m in modules.items()},
                known,
            )
            for rule in rules
        ]


def sibling_rules(path: Path) -> list[Rule]:
    """The rules of the other files in `path`'s folder that read without error: the callees a rule may name."""
    from rulegen.spec.errors import SpecErrors
    from rulegen.spec.rules import read_rule_file

    found: list[Rule] = []
    for other in sorted(path.parent.glob("*.y*ml")):
        if other.resolve() == path.resolve():
            continue
        try:
            found += read_rule_file(other)
        except SpecErrors:
            continue
    return found


def audit_file(
    path: Path,
    targets: dict[str, str],
    *,
    seed: int = 0,
    include_compile: bool = False,
    checks: Sequence[Check] = AUDIT_CHECKS,
    others: Sequence[Rule] = (),
) -> list[Outcome]:
    """The implementations `targets` names audited against the one rule of the rule file `path`.

    AgainstError where the file has another number of rules or a target does
    not import; the rules of the file's folder and `others` are the callees a
    rule may name.
    """
    from rulegen.spec.rules import read_rule_file

    found = read_rule_file(path)
    if len(found) != 1:
        names = ", ".join(r.name for r in found) or "none"
        raise AgainstError(f"{path}: an audit holds implementations to one rule; the file has {names}")
    with audits(found, targets, [*others, *sibling_rules(path)]) as audited:
        return audit_outcomes(audited[0], seed=seed, include_compile=include_compile, checks=checks)


def declared_audit_outcomes(
    rules: Sequence[Rule],
    others: Sequence[Rule] = (),
    *,
    seed: int = 0,
    include_compile: bool = False,
    checks: Sequence[Check] = AUDIT_CHECKS,
) -> list[Outcome]:
    """The audits the rules declare (`checks.against`): each rule's implementations held to it.

    AgainstError where a declared implementation does not import.
    """
    found: list[Outcome] = []
    for rule in rules:
        if rule.checks.against:
            with audits([rule], {str(b): t for b, t in rule.checks.against.items()}, others) as (audit,):
                found += audit_outcomes(audit, seed=seed, include_compile=include_compile, checks=checks)
    return found
