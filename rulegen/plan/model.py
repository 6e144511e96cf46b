"""What the planners hand the templates: every decision made, every body printed."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import sympy as sp

from rulegen.plan.code import (
    LOOSEST,
    PRIMARY,
    Assign,
    Block,
    Class,
    Def,
    Expr,
    Import,
    Statement,
    Value,
    import_statements,
)


@dataclass(frozen=True)
class Reads:
    """What one method of a torch Function takes back from ctx: only what its code reads."""

    saved: str  # unpacking targets of ctx.saved_tensors, `_` for the unread; "" if none is read
    statics: tuple[str, ...]


@dataclass(frozen=True)
class Needs:
    """What a generated module needs besides itself: helpers of its package, and modules to install.

    Read off the plan's imports (`rulegen.plan.code.Import`), never off the rendered module:
    the build writes the helpers and a distribution's requirements from it.
    """

    helpers: frozenset[str]  # runtime helpers of the package, as `_util`
    modules: frozenset[str]  # top-level modules, as `numpy`, `torch`
    apis: frozenset[str] = frozenset()  # framework APIs the rule's bodies call whose age matters (derive.floors)


def needs_of(
    imports: Iterable[Import], *, helpers: Iterable[str] = (), modules: Iterable[str] = (), apis: Iterable[str] = ()
) -> Needs:
    """The Needs of a module importing `imports`, the `helpers` and `modules` it uses otherwise, its `apis`."""
    imports = tuple(imports)
    found_helpers = set(helpers) | {i.helper for i in imports if i.helper}
    found_modules = set(modules) | {i.distribution for i in imports if i.distribution}
    return Needs(frozenset(found_helpers), frozenset(found_modules), frozenset(apis))


@dataclass(frozen=True)
class Param:
    name: str
    default: str | None = None
    annotation: str | None = None

    def __str__(self) -> str:
        text = self.name if self.annotation is None else f"{self.name}: {self.annotation}"
        if self.default is None:
            return text
        return f"{text}={self.default}" if self.annotation is None else f"{text} = {self.default}"


@dataclass(frozen=True)
class Header:
    """What every generated module says about where it came from."""

    rule: str
    source: str
    source_hash: str
    module_doc: str  # the module's docstring literal, ready to place
    help: str  # the public function's docstring (see help_text)
    class_help: str  # the torch Function's: what it is, pointing to the function


@dataclass(frozen=True)
class JaxPlan:
    header: Header
    name: str
    own: Mapping[str, str]  # generated code's own locals (`primals`, ...), renamed where the rule takes one
    params: tuple[Param, ...]
    inputs: tuple[str, ...]  # the private functions' parameters: statics and arrays, structures taken apart
    returns: str
    nondiff_argnums: tuple[int, ...]
    statics: tuple[str, ...]
    arrays: tuple[str, ...]
    custom: str  # "custom_jvp" or "custom_vjp"
    forward: Block
    # custom_jvp
    tangents: tuple[str, ...]
    # The JVP rule's line assigning the outputs from the primal function, and why; "" where it computes them itself.
    jvp_primal: tuple[Assign, ...]
    jvp_notes: tuple[str, ...]
    # The JVP rule takes symbolic zeros: an input held constant has no tangent, and adds no term (`_held_inputs`).
    symbolic_zeros: bool
    returning: tuple[Statement, ...]  # the public function's last statements (see header.public_return)
    outputs: tuple[str, ...]
    jvp: Block | None
    # custom_vjp
    saved: tuple[str, ...]
    cotangents: tuple[str, ...]
    bwd: Block | None
    imports: frozenset[Import]
    # With both a jvp and a vjp: the two halves of the linear_map the JVP applies.
    maps: tuple[Def, ...]
    array_arguments: tuple[Assign | Expr, ...]  # the public function's first statements (static_check, array_arguments)
    unpack: tuple[Assign, ...]  # before it: structured arguments taken apart (see header.unpacked)
    forward_notes: tuple[str, ...] = ()  # comment lines above the forward (see stability_notes)
    # Float array inputs: bfloat16 and float16 compute in float32 (rounded once); () for none.
    float_arrays: tuple[str, ...] = ()
    result_classes: tuple[Class, ...] = ()  # the named tuples returned (see header.result_classes)
    # What the module defines after its imports (plan.jax.jax_definitions): the code model the template prints.
    definitions: tuple[Statement, ...] = ()

    @property
    def needs(self) -> Needs:
        return needs_of(self.imports)

    @property
    def import_lines(self) -> tuple[str, ...]:
        return import_statements(self.imports)


@dataclass(frozen=True)
class TorchPlan:
    header: Header
    name: str
    class_name: str
    own: Mapping[str, str]  # generated code's own locals (`ctx`, `function`), renamed where the rule takes one
    params: tuple[Param, ...]
    returns: str
    inputs: tuple[str, ...]
    statics: tuple[str, ...]
    forward: Block
    outputs: tuple[str, ...]
    residuals: tuple[str, ...]
    non_differentiable: tuple[str, ...]
    saved: tuple[str, ...]
    cotangents: tuple[str, ...]
    backward: Block  # every present cotangent's terms
    # With `fuse`: the outputs' terms only, the compiled body's, run when every output's cotangent is present
    # and no residual's.
    first_order: Block | None
    unmaterialised: bool  # absent cotangents and tangents arrive as None (`ctx.set_materialize_grads(False)`)
    cotangents_absent: bool  # backward sums the present cotangents' terms (see plan.torch._Torch.cotangents_absent)
    fused_backward_params: tuple[str, ...]  # with `fuse`: what the compiled backward body takes; () without
    # With `fuse`, the bodies torch.compile runs where they differ from the
    # eager ones (rulegen.plan.printers.CompiledTorchPrinter); None elsewhere.
    fused_forward_compiled: Block | None
    fused_backward_compiled: Block | None
    tangents: tuple[str, ...]
    absent_tangents: tuple[tuple[str, str], ...]  # (input, its tangent) where the tangent may arrive as None
    tangents_broadcast: bool  # jvp broadcasts the tangents against each other first (plan.torch._Torch)
    jvp: Block
    # Bodies that update their own buffers in place, run when `plain(...)` of
    # the tensors they read holds (rulegen.plan.inplace); None where nothing would.
    forward_in_place: Block | None
    forward_plain: tuple[str, ...]  # the tensors the in-place forward reads, which `plain(...)` checks
    backward_in_place: Block | None  # of the first-order backward
    backward_plain: tuple[str, ...]  # the tensors `plain(...)` checks before it runs
    # The inputs, by position, whose gradients it computes: each wanted, as it runs (none: it need not ask).
    gradients_wanted: tuple[int, ...]
    backward_reads: Reads
    jvp_reads: Reads
    # jvp is backward itself (`_jvp_is_backward`): the class binds the one method to both names.
    jvp_is_backward: bool
    imports: frozenset[Import]
    static_check: tuple[Expr, ...]  # the wrapper's first statement: its statics checked, if any (see static_check)
    tensor_arguments: tuple[Assign, ...]  # then its array arguments as tensors, if any
    unpack: tuple[Assign, ...]  # before it: structured arguments taken apart (see header.unpacked)
    returning: tuple[Statement, ...]  # the wrapper's last statements (see header.public_return)
    routed_line: Assign  # the module-level statement binding `route` to the runtime's `routed` of the Function
    forward_notes: tuple[str, ...] = ()  # comment lines above the forward (see stability_notes)
    float_arrays: tuple[str, ...] = ()  # float array inputs, () for none
    # Whether the wrapper computes bfloat16 and float16 in float32, rounded once; False where each
    # body is one torch kernel, which does so itself (plan.torch._opmath_bodies).
    lifted: bool = False
    route: str = ""  # what the wrapper applies (rulegen.plan.torch_route)
    result_classes: tuple[Class, ...] = ()  # the named tuples returned (see header.result_classes)
    # The output whose shape, that of every output, setup_context keeps for jvp to broadcast to; "" for none.
    shape_kept: str = ""
    # The module-level function computing the partials backward and jvp share, and their call of it; None for none.
    partials: Def | None = None
    partials_call: Assign | None = None
    # What the module defines after its imports (plan.torch.torch_definitions): the code model the template prints.
    definitions: tuple[Statement, ...] = ()

    @property
    def needs(self) -> Needs:
        return needs_of(self.imports)

    @property
    def import_lines(self) -> tuple[str, ...]:
        return import_statements(self.imports)


@dataclass(frozen=True)
class Wrap:
    """Code around a printed value, `{}` where the value goes, and the names that code reads itself.

    Which values a method reads, and so which it saves and unpacks, is the
    union of its expressions' free symbols and its wraps' `reads`: never a
    search of the printed text.  The code around is a call, or a method
    called on the value (`Wrap.method`): a primary, whatever it holds.
    """

    text: str = "{}"
    reads: frozenset[str] = frozenset()
    helpers: frozenset[str] = frozenset()  # the runtime's `_util` functions the code calls
    # How tightly the value must bind where `{}` stands (see rulegen.plan.code.PRIMARY): a primary before
    # `.attr`, anything as a call's argument.
    takes: int = LOOSEST

    @classmethod
    def method(cls, call: str, reads: frozenset[str] = frozenset()) -> Wrap:
        """The value's method `call` (`sum_to_size(x.shape)`), called on it."""
        return cls("{}." + call, reads, takes=PRIMARY)

    def around(self, inner: Wrap) -> Wrap:
        """The wrap that applies `inner`, then this one."""
        if inner.text == "{}":
            return Wrap(self.text, self.reads | inner.reads, self.helpers | inner.helpers, self.takes)
        # A wrap's code is a primary, which any hole takes bare: `broadcast(...).long()`.
        return Wrap(self.text.format(inner.text), self.reads | inner.reads, self.helpers | inner.helpers, inner.takes)

    def apply(self, value: Value) -> Value:
        """`value` in this code: parenthesised where it binds more loosely than the code takes it."""
        if self.text == "{}":
            return value
        return Value(self.text.format(value.within(self.takes)))


@dataclass(frozen=True)
class Result:
    """One returned value: an expression printed into `wrap`, or fixed `code` that reads `reads`."""

    name: str
    expr: sp.Expr | None = None
    wrap: Wrap = Wrap()
    code: str = ""  # a name or a call
    imports: frozenset[Import] = frozenset()
    reads: frozenset[str] = frozenset()
    # A condition under which the value is wanted (`ctx.needs_input_grad[1]`): else it is None, never computed.
    guard: str = ""

    @property
    def fixed_reads(self) -> frozenset[str]:
        """What the result reads besides its expression's symbols."""
        return self.reads | self.wrap.reads


@dataclass(frozen=True)
class SnippetPlan:
    """A module for a rule with snippet bodies: private body functions, then the glue.

    `assignments` are module-level statements placed between the bodies and
    the public function (a HostRule or a bridge); `tail` closes the module
    (a `defvjp`).  For torch, `methods` are the Function's staticmethods and
    `wrapper` the public function.
    """

    header: Header
    name: str
    imports: frozenset[Import]
    bodies: tuple[Def, ...]
    assignments: tuple[Statement, ...]
    public: Def
    methods: tuple[Def | Assign, ...]
    tail: tuple[Statement, ...]
    class_name: str = ""
    base: str = ""  # the Function's base class, with `class_name`
    called: tuple[str, ...] = ()  # the other rules its bodies call, imported at the module's end
    requires: tuple[str, ...] = ()  # modules imported inside functions: by the bodies, or the bridge's torch
    apis: tuple[str, ...] = ()  # the framework APIs its bodies call whose age matters (rulegen.derive.floors)
    routed_line: Assign | None = None  # torch: the module-level statement binding what applies the Function
    result_classes: tuple[Class, ...] = ()  # the named tuples returned (see header.result_classes)
    # What the module defines after its imports (plan.snippet.snippet_definitions): what the template prints.
    definitions: tuple[Statement, ...] = ()

    @property
    def needs(self) -> Needs:
        return needs_of(self.imports, modules=self.requires, apis=self.apis)

    @property
    def import_lines(self) -> tuple[str, ...]:
        return import_statements(self.imports)


@dataclass(frozen=True)
class ModulePlan:
    """One generated module as the render stage takes it: its header, imports and definitions (the code model the
    template prints), what it needs of its package, and its torch Function's class name ("" for none)."""

    header: Header
    imports: frozenset[Import]
    definitions: tuple[Statement, ...]
    needs: Needs
    function_class: str = ""

    @property
    def import_lines(self) -> tuple[str, ...]:
        return import_statements(self.imports)


def module_plan(plan: JaxPlan | TorchPlan | SnippetPlan) -> ModulePlan:
    """The module `plan` decided, as the render stage takes it."""
    function_class = plan.class_name if isinstance(plan, TorchPlan | SnippetPlan) else ""
    return ModulePlan(plan.header, plan.imports, plan.definitions, plan.needs, function_class)
