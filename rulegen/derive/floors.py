"""The oldest framework releases a generated package runs on, from the APIs its code uses.

One table maps each API whose age matters to the first release that has it;
a package's floor for a framework is the newest of those releases over what
its modules use: what the templates and planners may print in a rule module
(`RULE_MODULE_APIS`), what the rules' own bodies call (read from their source
by `rulegen.derive.snippet`) and what the runtime helpers it ships call (read as code
by the build), each through `apis_used`.  A table of facts, like
`rulegen.derive.functions`: it imports no stage.

`tests/package/test_floors.py` reads every module of a built package the same way,
checks that its pyproject.toml's floors cover them, and that no API of a
namespace that changes between releases goes unlisted.

`PRIVATE_APIS` lists the private framework APIs the runtime helpers use, with
the releases they were checked on and what happens on one that lacks them.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator, Mapping
from typing import NamedTuple

from packaging.version import Version

from rulegen.runtime import _private as runtime_private

#: API -> (framework, the first release that has it), each checked against the
#: sources or documentation of that release and the one before (where the API is
#: older than any floor that matters: a release checked to have it).  A key is a
#: dotted name (matching what lies under it too), `name(keyword=)` for a keyword
#: argument of a call, or `.method` for a method of a framework's objects.  APIs
#: used only behind a check that they exist (`jax.lax.pcast`, `jax.lax.pvary`)
#: are left out.
API_FLOORS: Mapping[str, tuple[str, str]] = {
    # torch.func style: setup_context, vmap and generate_vmap_rule on autograd.Function
    "torch.autograd.Function": ("torch", "2.0"),
    "torch.func": ("torch", "2.0"),
    "torch.autograd.forward_ad": ("torch", "2.0"),
    # Marks a frame Dynamo skips without importing torch._dynamo: set_code_exec_strategy replaced skip_code in 2.6.
    "torch._C._dynamo.eval_frame": ("torch", "2.6"),
    "torch._C._functorch": ("torch", "2.2"),
    "torch._C._are_functorch_transforms_active": ("torch", "2.2"),
    "torch.compiler.disable": ("torch", "2.1"),
    "torch.compiler.is_compiling": ("torch", "2.3"),
    "torch.library.custom_op": ("torch", "2.4"),  # with the op's register_fake and register_autograd
    "torch.library.custom_op(mutates_args=)": ("torch", "2.4"),
    "torch.library.custom_op(schema=)": ("torch", "2.4"),
    "torch.compiler.is_exporting": ("torch", "2.7"),
    "torch.compiler.disable(reason=)": ("torch", "2.8"),
    "jax.typing": ("jax", "0.4.4"),
    "jax.tree": ("jax", "0.4.25"),
    "jax.extend.core.Primitive": ("jax", "0.4.27"),
    "jax.interpreters": ("jax", "0.4.25"),  # ad, batching, mlir: semi-public, long stable
    ".to_tangent_aval": ("jax", "0.4.34"),
    "jax.pure_callback(vmap_method=)": ("jax", "0.4.35"),
    "jax.typeof": ("jax", "0.5.3"),
    # Differentiated and batched since 0.5.3 (its jvp, transpose and vmap rules): the runtime's `quotient`.
    "jax.lax.optimization_barrier": ("jax", "0.5.3"),
}

#: What a rule module may use of the table by itself, whatever helpers it imports:
#: the Function class, the transposes of snippet rules, host ops as custom ops.
RULE_MODULE_APIS = (
    "torch.autograd.Function",
    "torch.func.vjp",
    "torch.library.custom_op",
    "jax.typing.ArrayLike",
)


def apis_used(code: str | ast.AST, scope: Mapping[str, str] | None = None) -> set[str]:
    """The framework APIs Python code uses, in the table's notation (names resolved through its imports).

    `scope` names the modules the code sees without importing them (a rule
    body's `jnp` is `jax.numpy`).
    """
    tree = ast.parse(code) if isinstance(code, str) else code
    bound = {**(scope or {}), **dict(_imported_names(tree))}
    used: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute | ast.Name):
            name = _qualified(node, bound)
            if name is not None:
                used.add(name)
            elif isinstance(node, ast.Attribute):
                used.add(f".{node.attr}")
        if isinstance(node, ast.Call) and (callee := _qualified(node.func, bound)) is not None:
            used |= {f"{callee}({k.arg}=)" for k in node.keywords if k.arg}
    return used


def _imported_names(tree: ast.AST) -> Iterator[tuple[str, str]]:
    """Each name an absolute import binds, with the dotted name it stands for."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    yield alias.asname, alias.name
                else:
                    head = alias.name.split(".")[0]
                    yield head, head
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                yield alias.asname or alias.name, f"{node.module}.{alias.name}"


def _qualified(node: ast.expr, bound: Mapping[str, str]) -> str | None:
    """`node`'s dotted name through the imports (`jnp.exp` -> `jax.numpy.exp`); None for other values."""
    if isinstance(node, ast.Name):
        return bound.get(node.id)
    if isinstance(node, ast.Attribute) and (base := _qualified(node.value, bound)) is not None:
        return f"{base}.{node.attr}"
    return None


def _covers(key: str, api: str) -> bool:
    return api == key or (not key.startswith(".") and "(" not in key and api.startswith(f"{key}."))


def listed(apis: Iterable[str]) -> frozenset[str]:
    """Those of `apis` whose age the table knows: all a record needs to keep."""
    return frozenset(api for api in apis if any(_covers(key, api) for key in API_FLOORS))


def floors_of(apis: Iterable[str]) -> dict[str, Version]:
    """Per framework, the first release that has every one of `apis` the table lists."""
    floors: dict[str, Version] = {}
    for api in set(apis):
        for key, (framework, release) in API_FLOORS.items():
            if _covers(key, api):
                floors[framework] = max(floors.get(framework, Version(release)), Version(release))
    return floors


class PrivateApi(NamedTuple):
    """A private framework API the runtime helpers (or the rule modules) call, and what stands in without it."""

    framework: str  # "torch" or "jax"
    used_in: tuple[str, ...]  # the runtime helpers (as `torch/_route.py`), or "rule modules"
    fallback: str  # what happens on a release that lacks it


#: Per framework, the release the private APIs were checked on (the runtime's own table).
PRIVATE_APIS_CHECKED_ON: Mapping[str, str] = runtime_private.CHECKED_ON

_IMPORT_FAILS = "none: the package's import fails, naming the API (`_private.guarded`)"
_DYNAMO_TRACES = (
    "none: Dynamo would trace the call it marks, losing the rule under torch.func inside torch.compile; "
    "tests/runtime/test_private_apis.py fails"
)

#: Each private API (a name or attribute with a leading underscore, or one of `jax.interpreters`,
#: `jax.extend` or `torch.ops.aten`) that the runtime helpers use, keyed as `private_apis_used`
#: finds them, with the releases it was checked on (`PRIVATE_APIS_CHECKED_ON`) by
#: tests/runtime/test_private_apis.py, whose probes run it as the runtime does.  That test also
#: fails when a helper uses one that has no row here.
PRIVATE_APIS: Mapping[str, PrivateApi] = {
    "torch._C._are_functorch_transforms_active": PrivateApi(
        "torch", ("torch/_route.py", "torch/_util.py"), _IMPORT_FAILS
    ),
    "torch._C._functorch.peek_interpreter_stack": PrivateApi(
        "torch", ("torch/_plain.py", "torch/_route.py"), _IMPORT_FAILS
    ),
    "torch._C._functorch.get_interpreter_stack": PrivateApi("torch", ("torch/_route.py",), _IMPORT_FAILS),
    "torch._C._functorch.is_functorch_wrapped_tensor": PrivateApi(
        "torch", ("torch/_plain.py", "torch/_route.py", "torch/_util.py"), _IMPORT_FAILS
    ),
    "torch._C._functorch.is_legacy_batchedtensor": PrivateApi("torch", ("torch/_plain.py",), _IMPORT_FAILS),
    "torch._C._functorch.pop_dynamic_layer_stack": PrivateApi("torch", ("torch/_route.py",), _IMPORT_FAILS),
    "torch._C._functorch.push_dynamic_layer_stack": PrivateApi("torch", ("torch/_route.py",), _IMPORT_FAILS),
    "torch._C._functorch.TransformType": PrivateApi("torch", ("torch/_route.py",), _IMPORT_FAILS),
    "torch._C._functorch._add_batch_dim": PrivateApi("torch", ("torch/_route.py",), _IMPORT_FAILS),
    "torch._C._functorch._unwrap_batched": PrivateApi("torch", ("torch/_route.py",), _IMPORT_FAILS),
    "torch._C._functorch._unwrap_for_grad": PrivateApi("torch", ("torch/_route.py",), _IMPORT_FAILS),
    "torch._C._functorch._wrap_for_grad": PrivateApi("torch", ("torch/_route.py",), _IMPORT_FAILS),
    "torch._functorch.pyfunctorch.retrieve_all_functorch_interpreters": PrivateApi(
        "torch", ("torch/_route.py",), _IMPORT_FAILS
    ),
    "torch._functorch.vmap.vmap_increment_nesting": PrivateApi("torch", ("torch/_route.py",), _IMPORT_FAILS),
    "torch.autograd.forward_ad._set_fwd_grad_enabled": PrivateApi("torch", ("torch/_route.py",), _IMPORT_FAILS),
    "torch._C._dynamo.eval_frame._FrameAction": PrivateApi("torch", ("torch/_route.py",), _IMPORT_FAILS),
    "torch._C._dynamo.eval_frame._FrameExecStrategy": PrivateApi("torch", ("torch/_route.py",), _IMPORT_FAILS),
    "torch._C._dynamo.eval_frame.set_code_exec_strategy": PrivateApi("torch", ("torch/_route.py",), _IMPORT_FAILS),
    "._torchdynamo_disable": PrivateApi("torch", ("torch/_route.py",), _DYNAMO_TRACES),
    "._torchdynamo_disable_recursive": PrivateApi("torch", ("torch/_route.py",), _DYNAMO_TRACES),
    "._torchdynamo_disable_msg": PrivateApi(
        "torch", ("torch/_route.py",), "a graph break (or fullgraph error) without the reason"
    ),
    "._dynamo_marked_constant": PrivateApi("torch", ("torch/_route.py",), _DYNAMO_TRACES),
    "._is_view": PrivateApi("torch", ("torch/_route.py",), "none: an AttributeError where an exported op returns"),
    "torch._efficientzerotensor": PrivateApi("torch", ("torch/_native.py",), _IMPORT_FAILS),
    "torch.ops.aten.tanh_backward": PrivateApi("torch", ("torch/_native.py",), _IMPORT_FAILS),
    "torch.ops.aten.sigmoid_backward": PrivateApi("torch", ("torch/_native.py",), _IMPORT_FAILS),
    "torch.ops.aten.silu_backward": PrivateApi("torch", ("torch/_native.py",), _IMPORT_FAILS),
    # Printed into rule modules by `rulegen.derive.functions` (sigmoid_product); checked as torch/_util.py is imported.
    "torch.ops.aten.softplus_backward": PrivateApi("torch", ("torch/_util.py", "rule modules"), _IMPORT_FAILS),
    "._opoverload": PrivateApi(
        "torch", ("torch/_host.py",), "none: registering a host op's DTensor strategy fails, at DTensor's import"
    ),
    "._schema": PrivateApi(
        "torch", ("torch/_host.py",), "none: registering a host op's DTensor strategy fails, at DTensor's import"
    ),
    "torch.distributed.tensor._dtensor_spec.DTensorSpec": PrivateApi(
        "torch", ("torch/_host.py",), "none: an ImportError where DTensor first runs a host op"
    ),
    "jax.extend.core.Primitive": PrivateApi("jax", ("jax/_host.py", "jax/_linear.py"), _IMPORT_FAILS),
    **{
        f"jax.interpreters.{name}": PrivateApi("jax", ("jax/_host.py", "jax/_linear.py"), _IMPORT_FAILS)
        for name in (
            *("ad.primitive_jvps", "ad.primitive_transposes", "ad.Zero", "ad.instantiate_zeros"),
            *("ad.is_undefined_primal", "mlir.register_lowering", "mlir.lower_fun", "batching.primitive_batchers"),
        )
    },
}

_PRIVATE_NAMESPACES = ("jax.interpreters.", "jax.extend.", "torch.ops.aten.")


def _private(name: str) -> bool:
    if not name.startswith(("torch.", "jax.")):
        return False
    return name.startswith(_PRIVATE_NAMESPACES) or any(_underscored(part) for part in name.split("."))


def _underscored(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_apis_used(code: str) -> set[str]:
    """The private framework APIs Python code uses, as `PRIVATE_APIS` keys them.

    A dotted name through the imports (`torch._C._functorch.peek_interpreter_stack`), or
    `.attribute` for an underscored attribute or keyword of no name the imports resolve,
    other than the code's own (`self._x`, and those it assigns to `self`).
    """
    tree = ast.parse(code)
    bound = dict(_imported_names(tree))
    own = {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"
    }
    used: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute | ast.Name):
            name = _qualified(node, bound)
            if name is not None and _private(name):
                used.add(name)
            elif name is None and isinstance(node, ast.Attribute) and _underscored(node.attr) and node.attr not in own:
                used.add(f".{node.attr}")
        if isinstance(node, ast.keyword) and node.arg and _underscored(node.arg):
            used.add(f".{node.arg}")
    # A module's name only where nothing under it is used (`ad`, beside `ad.Zero`).
    return {name for name in used if not any(other.startswith(f"{name}.") for other in used)}


def private_api_row(api: str) -> str | None:
    """The key of `PRIVATE_APIS` that covers `api` (itself, or a name it lies under), or None."""
    return next((key for key in PRIVATE_APIS if api == key or api.startswith(f"{key}.")), None)
