"""Which form of a rule's Function applies it at a call site, so that the rule survives.

Measured on torch 2.13: under a torch.func transform, Dynamo inlines an
autograd.Function's forward and drops its backward and jvp (a compiled
`torch.func.grad` of a gradient-clipping rule gave the unclipped gradient,
a host rule's compiled `torch.func.jvp` zero tangents), and torch.export
inlines the forward the same way.  A custom op keeps the rule through export,
but the autograd that `register_autograd` gives it fails under torch.func
("it must override the setup_context staticmethod", pytorch#168393), eager
or compiled, so it cannot stand in for the Function there.
"""

import contextlib
import dis
import functools
import inspect
import math
import sys
import types
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import torch

from . import _private
from ._util import fresh_outputs

with _private.guarded(torch):
    from torch._C import _are_functorch_transforms_active
    from torch._C._dynamo.eval_frame import (
        _FrameAction,
        _FrameExecStrategy,
        set_code_exec_strategy,
    )
    from torch._C._functorch import (
        TransformType,
        _add_batch_dim,
        _unwrap_batched,
        _unwrap_for_grad,
        _wrap_for_grad,
        get_interpreter_stack,
        is_functorch_wrapped_tensor,
        peek_interpreter_stack,
        pop_dynamic_layer_stack,
        push_dynamic_layer_stack,
    )
    from torch._functorch.pyfunctorch import retrieve_all_functorch_interpreters
    from torch._functorch.vmap import vmap_increment_nesting
    from torch.autograd.forward_ad import _set_fwd_grad_enabled


def _apply_eagerly(function: type[torch.autograd.Function], *args: Any) -> Any:
    """`eager(function).apply(*args)`, run as `torch.compiler.disable` runs a function.

    Made so without importing torch._dynamo, which `torch.compiler.disable`
    does (a second and more, at the generated package's import): Dynamo
    reads the marks below where it traces a call to it (a graph break there;
    under `fullgraph=True`, an error giving the reason), and the call runs
    with neither this frame nor any it calls compiled (the frame's strategy,
    read by the frame evaluator torch has loaded anyway).
    """
    return eager(function).apply(*args)


vars(_apply_eagerly).update(
    _torchdynamo_disable=True,
    _torchdynamo_disable_recursive=True,
    _torchdynamo_disable_msg=(
        "under torch.func, Dynamo inlines an autograd.Function's forward and drops its rule"
    ),
)
set_code_exec_strategy(
    _apply_eagerly.__code__, _FrameExecStrategy(_FrameAction.SKIP, _FrameAction.SKIP)
)


@functools.cache
def eager(function: type[torch.autograd.Function]) -> type[torch.autograd.Function]:
    """`function` as torch.func applies it: its derivative methods run eagerly, its `jvp` seen.

    Its `jvp` is seen by outer forward levels (`seen_by_outer_levels`).  A
    transform may call the derivative methods from a compiled frame (a vjp's
    function called after a graph break), where Dynamo would compile them
    as frames of their own on the transform's wrapped tensors, which
    inductor cannot read (torch 2.13: "Cannot access data pointer of Tensor
    that doesn't have storage").
    """
    methods = {
        "backward": staticmethod(torch.compiler.disable(function.backward)),
        "jvp": staticmethod(torch.compiler.disable(seen_by_outer_levels(function.jvp))),
    }
    return type(function.__name__, (function,), methods)


def seen_by_outer_levels(jvp: Callable[..., Any]) -> Callable[..., Any]:
    """An autograd.Function's `jvp` staticmethod whose computation outer forward levels see.

    torch runs a Function's `jvp` with forward-mode AD off, so that its own
    level computes no tangent of the tangent; functorch's outer jvp levels
    only ever turn it off on the way down, so under `torch.func.jvp` of
    `torch.func.jvp` (`jacfwd` of `jacfwd`) the outer level took the tangent
    for a constant and its derivative for 0 (torch 2.13, any Function with a
    `jvp`).  Where a jvp level below would see it, `jvp` runs below its own
    level instead (`_Lowered`), forward mode on as that level had it, as
    functorch runs a Function's `forward`; elsewhere `jvp` runs as it is.
    """

    @functools.wraps(jvp)
    def lowered(ctx: Any, *tangents: Any) -> Any:
        levels = _forward_over_forward()
        if levels is None:
            return jvp(ctx, *tangents)
        lowering = _Lowered(*levels)
        with lowering:
            result = jvp(_Unwrapped(ctx, lowering.down), *(lowering.down(t) for t in tangents))
            taken = lowering.taken_out(result)
        return lowering.put_back(taken)

    return lowered


def _forward_over_forward() -> tuple[Any, list[Any]] | None:
    """(the jvp level whose Function's jvp runs, the vmap levels above it), or None.

    None unless a jvp level lies below that one.  The vmap levels are those
    of torch's vmap rule (`generate_vmap_rule`), which runs a Function's jvp
    under a vmap of its own over the jvp level.
    """
    if peek_interpreter_stack() is None:
        return None
    stack = [i.key() for i in get_interpreter_stack()]
    if stack.count(TransformType.Jvp) < 2:
        return None
    current = len(stack) - 1
    while stack[current] == TransformType.Vmap:
        current -= 1
    if stack[current] != TransformType.Jvp:
        return None
    interpreters = retrieve_all_functorch_interpreters()
    return interpreters[current], interpreters[current + 1 :]


class _Lowered(contextlib.ExitStack):
    """Computing at the levels below a jvp level `current`, under vmap levels like `vmaps`.

    Entered, the stack is the levels below `current` with fresh vmap levels
    of the same sizes over them, and forward-mode AD is as `current` found
    it.  `down` takes a tensor of the caller's levels there (its batch
    dimensions and `current`'s wrapper removed, the fresh levels' batch
    dimensions added); `taken_out` (inside) and `put_back` (after leaving)
    take results back to the caller's levels.  Nothing is computed at
    `current`'s level: none of its tangents are read, so the vmap levels may
    as well lie below it.
    """

    def __init__(self, current: Any, vmaps: Sequence[Any]) -> None:
        super().__init__()
        self._current = current
        self._vmaps = vmaps
        self._fresh: list[int] = []

    def __enter__(self) -> "_Lowered":
        super().__enter__()
        try:
            self.enter_context(_set_fwd_grad_enabled(self._current.prev_fwd_grad_mode()))
            for _ in range(len(self._vmaps) + 1):
                popped = pop_dynamic_layer_stack()
                self.callback(push_dynamic_layer_stack, popped)
            self._fresh = [
                self.enter_context(vmap_increment_nesting(v.batch_size(), v.randomness()))
                for v in self._vmaps
            ]
        except BaseException:
            self.close()
            raise
        return self

    def down(self, value: Any) -> Any:
        if not isinstance(value, torch.Tensor):
            return value
        dims: list[int | None] = []
        for vmap in reversed(self._vmaps):
            value, dim = _unwrap_batched(value, vmap.level())
            dims.insert(0, dim)
        value = _unwrap_for_grad(value, self._current.level())
        for level, dim in zip(self._fresh, dims, strict=True):
            if dim is not None:
                value = _add_batch_dim(value, dim, level)
        return value

    def taken_out(self, result: Any) -> tuple[bool, list[tuple[Any, list[int | None]]]]:
        """`result` (a tensor, None or a tuple of them) off the fresh levels, with batch dims."""
        several = isinstance(result, tuple)
        return several, [self._taken(r) for r in (result if several else (result,))]

    def put_back(self, taken: tuple[bool, list[tuple[Any, list[int | None]]]]) -> Any:
        """What `taken_out` gave, at the caller's levels."""
        several, pairs = taken
        values = tuple(self._put(value, dims) for value, dims in pairs)
        return values if several else values[0]

    def _taken(self, value: Any) -> tuple[Any, list[int | None]]:
        dims: list[int | None] = []
        if isinstance(value, torch.Tensor):
            for level in reversed(self._fresh):
                value, dim = _unwrap_batched(value, level)
                dims.insert(0, dim)
        return value, dims

    def _put(self, value: Any, dims: Sequence[int | None]) -> Any:
        if not isinstance(value, torch.Tensor):
            return value
        value = _wrap_for_grad(value, self._current.level())
        for vmap, dim in zip(self._vmaps, dims, strict=True):
            if dim is not None:
                value = _add_batch_dim(value, dim, vmap.level())
        return value


class _Unwrapped:
    """A Function's context whose saved tensors and tensor attributes are taken `down`."""

    def __init__(self, ctx: Any, down: Callable[[Any], Any]) -> None:
        self._ctx = ctx
        self._down = down

    @property
    def saved_tensors(self) -> tuple[Any, ...]:
        return tuple(self._down(t) for t in self._ctx.saved_tensors)

    def __getattr__(self, name: str) -> Any:
        return self._down(getattr(self._ctx, name))


def route(
    function: type[torch.autograd.Function],
    compiled: type[torch.autograd.Function],
    exported: Callable[..., Any] | None = None,
) -> Callable[..., Any]:
    """What applies the Function `function` here, taking its arguments.

    Under a torch.func transform: `function`, run eagerly, derivative
    methods included (compiled, by a graph break; with `fullgraph=True`, an
    error).  Elsewhere, eagerly: `function`.  Under torch.export:
    `exported`, the rule as an op (`rule_op`, or a host rule's own op:
    `host_rule_op`); a rule without one (its statics have no schema type)
    is inlined, its gradient lost.  Elsewhere
    under torch.compile: `compiled`, the Function without `jvp` (which
    Dynamo refuses), which Dynamo traces with its backward.
    """
    if _are_functorch_transforms_active():
        if torch.compiler.is_compiling():
            return lambda *args: _apply_eagerly(function, *args)
        return eager(function).apply
    if not torch.compiler.is_compiling():
        return applied(function)
    if torch.compiler.is_exporting() and exported is not None:
        return exported
    return compiled.apply


@functools.cache
def applied(function: type[torch.autograd.Function]) -> Callable[..., Any]:
    """`function.apply` outside torch.func, less its binding of arguments to `forward`'s signature.

    `autograd.Function.apply` binds them by `inspect.signature(forward)` at
    every call (torch 2.13), to put in defaults a generated `forward` does
    not have: 22 of the 34 microseconds it adds to an eager forward and
    backward of one small tensor over autodiff's own.  A `forward` with a
    default or a keyword-only parameter, and a call with a functorch tensor
    left over from a transform (which `apply` unwraps), go through `apply`.
    """
    parameters = inspect.signature(function.forward).parameters.values()
    plain_parameters = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.VAR_POSITIONAL)
    if any(p.kind not in plain_parameters or p.default is not p.empty for p in parameters):
        return function.apply
    unbound = super(torch.autograd.Function, function).apply  # type: ignore[misc]

    def apply(*args: Any) -> Any:
        if any(isinstance(a, torch.Tensor) and is_functorch_wrapped_tensor(a) for a in args):
            return function.apply(*args)
        return unbound(*args)

    return apply


def without_jvp(function: type[torch.autograd.Function]) -> type[torch.autograd.Function]:
    """The Function `function` without `jvp`, which torch.compile(fullgraph=True) refuses.

    Dynamo traces its forward and backward; forward mode never runs under compile.
    """
    return type(
        f"{function.__name__}Compiled",
        (function,),
        {"__doc__": f"{function.__name__} without `jvp`.", "jvp": torch.autograd.Function.jvp},
    )


def routed(
    function: type[torch.autograd.Function], schema: str | None = None, *, op: Any = None
) -> Callable[..., Any]:
    """What a public function calls to apply the Function `function`, in the form `route` picks.

    The compiled form (`function` without `jvp`, which
    torch.compile(fullgraph=True) refuses) is made at import.  The numbers
    its methods read (`numbers_read`) are found under the first compile,
    and the exported form (`rule_op`, given the op's `schema`) made under
    the first export: a bytecode scan and an op registered for each rule
    would cost more at import than the rest of it.  A host rule passes its
    host op (`op`, its forward as a custom op: `_host.host_op`), which the
    first export gives the Function's autograd (`host_rule_op`): the rule's
    one op.  A rule with neither (a static no schema types) has no op.
    """
    compiled = without_jvp(function)
    numbers: list[tuple[Any, str]] = []
    exported: list[Any] = []
    find_numbers = once(lambda: numbers.extend(numbers_read(function)))
    make_op = None
    if op is not None:
        make_op = once(lambda: exported.append(host_rule_op(function, op)))
    elif schema is not None:
        make_op = once(lambda: exported.append(rule_op(function, schema)))

    def apply(*args: Any) -> Any:
        if torch.compiler.is_compiling():
            find_numbers()
            _read_here(numbers)
            if make_op is not None and torch.compiler.is_exporting():
                make_op()
        return route(function, compiled, exported[0] if exported else None)(*args)

    apply.__name__ = apply.__qualname__ = f"apply_{function.__name__}"
    apply.applies = function  # type: ignore[attr-defined]
    return apply


def once(fill: Callable[[], object]) -> Callable[[], None]:
    """A function of no arguments that calls `fill()` on its first call only, and returns None.

    Dynamo runs it as Python rather than tracing it
    (`torch._dynamo.assume_constant_result`, marked so without importing
    torch._dynamo): a bytecode scan or an op's registration is nothing a
    graph can hold.  What `fill` made is read after it, from where the
    traced frame finds it, so that Dynamo sees it as it sees any other.
    """
    done: list[bool] = []

    def call() -> None:
        if not done:
            done.append(True)
            fill()

    call._dynamo_marked_constant = True  # type: ignore[attr-defined]
    return call


def _read_here(numbers: Iterable[tuple[Any, str]]) -> None:
    """Each of `numbers` read in the frame Dynamo is tracing, before any Function's subgraph.

    Under `torch.compile(dynamic=True)` Dynamo makes a graph input of each
    Python number a traced frame reads (`math.pi`) and caches what it read
    for the whole graph.  Read first inside one Function's forward or
    backward (a subgraph of its own), the cached value belonged to that
    subgraph, and the next Function to read it failed ("lift_tracked_freevar_
    to_input should not be called on root SubgraphTracer", torch 2.13):
    `f_gelu_tanh` then `scipy_erfcx`, or `f_gelu_tanh` twice.  Read here
    first, it belongs to the graph that holds every subgraph.
    """
    for owner, name in numbers:
        _ = getattr(owner, name) * 1


def numbers_read(function: type[torch.autograd.Function]) -> tuple[tuple[Any, str], ...]:
    """The module-level numbers the Function `function`'s forward and backward read.

    As (module, name) pairs: `math.pi`, a constant of the rule's module or
    of the runtime modules its methods call (in the same package), and
    those of the rules they apply (the Function each one's `routed` applies).
    """
    package = function.__module__.rpartition(".")[0]
    found: dict[tuple[int, str], tuple[Any, str]] = {}
    seen: set[types.CodeType] = set()

    def scan(code: types.CodeType, namespace: dict[str, Any]) -> None:
        if code in seen:
            return
        seen.add(code)
        owner = None
        for instruction in dis.get_instructions(code):
            if instruction.opname == "LOAD_GLOBAL":
                holder = sys.modules.get(namespace.get("__name__", ""))
            elif instruction.opname in ("LOAD_ATTR", "LOAD_METHOD") and owner is not None:
                holder = owner
            else:
                owner = None
                continue
            name = instruction.argval
            value = getattr(holder, name, None)
            owner = value if isinstance(value, types.ModuleType) else None
            if _is_number(value) and holder is not None:
                found.setdefault((id(holder), name), (holder, name))
            for called in _called(value, package):
                scan(called.__code__, called.__globals__)
        for constant in code.co_consts:
            if isinstance(constant, types.CodeType):
                scan(constant, namespace)

    for method in _methods(function):
        scan(method.__code__, method.__globals__)
    return tuple(found.values())


def _methods(function: type[torch.autograd.Function]) -> Iterator[types.FunctionType]:
    for name in ("forward", "setup_context", "backward"):
        body = getattr(function, name, None)
        if isinstance(body, types.FunctionType):
            yield body


def _called(value: Any, package: str) -> Iterator[types.FunctionType]:
    """The Python functions of `package` that calling `value` runs in the traced frame.

    Through the runtime's own wrappers: a cache (`__wrapped__`), a partial,
    a Function class (its methods) or a tuple of them, and what `routed`
    gives (the Function it `applies`).
    """
    if isinstance(value, types.FunctionType):
        if value.__module__.startswith(package):
            yield value
        if isinstance(getattr(value, "applies", None), type):
            yield from _called(value.applies, package)  # type: ignore[attr-defined]
        if isinstance(getattr(value, "__wrapped__", None), types.FunctionType):
            yield from _called(value.__wrapped__, package)  # type: ignore[attr-defined]
    elif isinstance(value, functools.partial):
        yield from _called(value.func, package)
    elif isinstance(value, tuple):
        for item in value:
            yield from _called(item, package)
    elif isinstance(value, type) and issubclass(value, torch.autograd.Function):
        if value.__module__.startswith(package):
            yield from _methods(value)
    elif isinstance(getattr(value, "__wrapped__", None), types.FunctionType):
        yield from _called(value.__wrapped__, package)


def _is_number(value: Any) -> bool:
    # Dynamo keeps nan and the infinities as constants: only finite numbers become inputs.
    return type(value) in (int, float) and math.isfinite(value)


def rule_op(function: type[torch.autograd.Function], schema: str) -> Any:
    """The Function `function` as a custom op, which torch.export keeps whole.

    The op is named after the Function in a namespace of its module's
    (`torch.ops.<package>_torch_gelu.Gelu`), so each rule of each generated
    package has its own.  Its forward and fake are the Function's forward
    (torch code runs on fake tensors too), its autograd the Function's
    `setup_context` and `backward`, themselves torch code and so
    differentiable again.  A host rule's forward is an op already: see
    `host_rule_op`.
    """

    def forward(*args: Any) -> Any:
        # An op's results may not alias its arguments.
        return fresh_outputs(_unaliased(function.forward(*args)), *args)

    name = f"{function.__module__.replace('.', '_')}::{function.__name__}"
    op = torch.library.custom_op(name, forward, mutates_args=(), schema=schema)
    op.register_fake(forward)
    op.register_autograd(function.backward, setup_context=function.setup_context)
    return op


def host_rule_op(function: type[torch.autograd.Function], op: Any) -> Any:
    """`op`, the Function `function`'s host forward as a custom op, given the Function's autograd.

    `function.forward` returns what `op` returns, so the op with the
    Function's `setup_context` and `backward` is the rule, as `rule_op`
    would make it: one op, named after the Function too, where an op
    around the Function's forward would hold the host op inside.  Given it
    under the first export, as `rule_op` is made then; elsewhere the op
    runs inside the Function's forward, where autograd records nothing, and
    torch.func applies the Function, never the op's own autograd (which
    fails there, pytorch#168393).
    """
    op.register_autograd(function.backward, setup_context=function.setup_context)
    return op


def _unaliased(result: Any) -> Any:
    if isinstance(result, tuple):
        return tuple(_unaliased(r) for r in result)
    return result.clone() if result._is_view() else result
