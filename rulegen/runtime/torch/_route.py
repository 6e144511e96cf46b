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

import functools

import torch

from ._util import fresh_outputs


@torch.compiler.disable(
    reason="under torch.func, Dynamo inlines an autograd.Function's forward and drops its rule"
)
def _apply_eagerly(function, *args):
    return _eager(function).apply(*args)


@functools.cache
def _eager(function):
    """`function` whose derivative methods run eagerly wherever autograd calls them.

    A transform may call them from a compiled frame (a vjp's function
    called after a graph break), where Dynamo would compile them as frames
    of their own on the transform's wrapped tensors, which inductor cannot
    read (torch 2.13: "Cannot access data pointer of Tensor that doesn't
    have storage").
    """
    methods = {
        name: staticmethod(torch.compiler.disable(getattr(function, name)))
        for name in ("backward", "jvp")
    }
    return type(function.__name__, (function,), methods)


def route(function, compiled, exported=None):
    """What applies the Function `function` here, taking its arguments.

    Under a torch.func transform: `function`, run eagerly, derivative
    methods included (compiled, by a graph break; with `fullgraph=True`, an
    error).  Elsewhere, eagerly: `function`.  Under torch.export:
    `exported`, the rule as an op (`rule_op`); a rule without one (its
    statics have no schema type) is inlined, its gradient lost.  Elsewhere
    under torch.compile: `compiled`, the Function without `jvp` (which
    Dynamo refuses), which Dynamo traces with its backward.
    """
    if torch._C._are_functorch_transforms_active():
        if torch.compiler.is_compiling():
            return lambda *args: _apply_eagerly(function, *args)
        return _eager(function).apply
    if not torch.compiler.is_compiling():
        return function.apply
    if torch.compiler.is_exporting() and exported is not None:
        return exported
    return compiled.apply


def without_jvp(function):
    """The Function `function` without `jvp`, which torch.compile(fullgraph=True) refuses.

    Dynamo traces its forward and backward; forward mode never runs under compile.
    """
    return type(
        f"{function.__name__}Compiled",
        (function,),
        {"__doc__": f"{function.__name__} without `jvp`.", "jvp": torch.autograd.Function.jvp},
    )


def routed(function, schema=None):
    """What a public function calls to apply the Function `function`, in the form `route` picks.

    Made once, at import: the compiled form (`function` without `jvp`, which
    torch.compile(fullgraph=True) refuses) and, given the op's `schema`, the
    exported form (`rule_op`).  A rule with no schema (a static no schema
    types) has no op.
    """
    compiled = without_jvp(function)
    exported = None if schema is None else rule_op(function, schema)

    def apply(*args):
        return route(function, compiled, exported)(*args)

    apply.__name__ = apply.__qualname__ = f"apply_{function.__name__}"
    return apply


def rule_op(function, schema):
    """The Function `function` as a custom op, which torch.export keeps whole.

    The op is named after the Function in a namespace of its module's
    (`torch.ops.<package>_torch_gelu.Gelu`), so each rule of each generated
    package has its own.  Its forward and fake are the Function's forward
    (torch code runs on fake tensors too, and a host forward is an op with a
    fake of its own), its autograd the Function's `setup_context` and
    `backward`, themselves torch code and so differentiable again.
    """

    def forward(*args):
        # An op's results may not alias its arguments.
        return fresh_outputs(_unaliased(function.forward(*args)), *args)

    name = f"{function.__module__.replace('.', '_')}::{function.__name__}"
    op = torch.library.custom_op(name, forward, mutates_args=(), schema=schema)
    op.register_fake(forward)
    op.register_autograd(function.backward, setup_context=function.setup_context)
    return op


def _unaliased(result):
    if isinstance(result, tuple):
        return tuple(_unaliased(r) for r in result)
    return result.clone() if result._is_view() else result
