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
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator, Mapping

from packaging.version import Version

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
