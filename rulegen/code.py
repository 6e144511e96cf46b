"""The code model of a generated module, as far as it is data: what the module imports.

A planner or printer says which name a module takes from where (`Import`);
the import block is printed from these (`import_statements`), and what the
module needs from its package and its environment (helpers, distributions)
is read off their fields (`rulegen.plan.model.needs_of`).  Nothing reads a
printed import statement back.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from rulegen import names


@dataclass(frozen=True, order=True)
class Import:
    """`import module [as alias]` (`name` None), or `from module import name [as alias]`.

    A module starting with `.` is the generated package's own: a runtime
    helper (`._util`), or with `module` `.` alone, `name` is one (`from .
    import _numbers`).
    """

    module: str
    name: str | None = None
    alias: str | None = None

    @property
    def bound(self) -> str:
        """The name the statement binds in the importing module."""
        return self.alias or self.name or self.module.split(".")[0]

    @property
    def helper(self) -> str | None:
        """The runtime helper of the package it reads (`_util`); None for an installed module."""
        if not self.module.startswith("."):
            return None
        return self.module.lstrip(".") or self.name

    @property
    def distribution(self) -> str | None:
        """The top-level module to install (`jax` of `jax.numpy`); None for a helper of the package."""
        return None if self.module.startswith(".") else self.module.split(".")[0]


def imported(module: str, *names_: str) -> frozenset[Import]:
    """`from module import` each of `names_`."""
    return frozenset(Import(module, name) for name in names_)


def spelled(imports: Iterable[Import], own: Mapping[str, str]) -> frozenset[Import]:
    """`imports`, each name they bind spelled as the module spells it (`symbols.own_names`).

    `import torch` becomes `import torch as torch_` in a module where the rule
    takes `torch`; a dotted `import jax.scipy.special` stays (it loads the
    submodule) beside `import jax as jax_`, through which the code reaches it.
    A builtin the rule takes a name of is reached through an import of its
    own (`from builtins import float as float_`).
    """
    found: set[Import] = set()
    for item in imports:
        wanted = own.get(item.bound, item.bound)
        if item.name is not None:
            found.add(Import(item.module, item.name, None if wanted == item.name else wanted))
        elif wanted == item.bound:
            found.add(item)
        elif item.alias is None and "." in item.module:
            found |= {item, Import(item.module.split(".")[0], alias=wanted)}
        else:
            found.add(Import(item.module, alias=wanted))
    found |= {
        Import("builtins", name, own[name])
        for name in names.BUILTIN_NAMES
        if hasattr(builtins, name) and own.get(name, name) != name
    }
    return frozenset(found)


def import_statements(imports: Iterable[Import]) -> tuple[str, ...]:
    """The import block: one statement per module imported whole, one per module names are taken from."""
    whole: set[str] = set()
    taken: dict[str, set[str]] = {}
    for item in imports:
        if item.name is None:
            whole.add(f"import {item.module}" + (f" as {item.alias}" if item.alias else ""))
        else:
            taken.setdefault(item.module, set()).add(item.name + (f" as {item.alias}" if item.alias else ""))
    joined = {f"from {module} import {', '.join(sorted(found))}" for module, found in taken.items()}
    return tuple(sorted(whole | joined))
