"""JAX's lowerings in one MLIR context per thread, while the checks (or a measure) run JAX eagerly."""

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

#: Lowerings one shared MLIR context serves before a fresh one replaces it: a context keeps every type and
#: attribute it has seen, so that a long sweep's memory stays bounded.
MLIR_CONTEXT_USES = 500

_SHARED_CONTEXT = threading.local()


@contextmanager
def one_mlir_context() -> Iterator[None]:
    """JAX's lowerings in this thread share one MLIR context while the block runs.

    The checks run JAX eagerly, and eager JAX lowers each primitive and jitted function anew for each shape it
    meets, each lowering in a context of its own that loads every dialect afresh: a quarter of the checks' time.
    One context holds any number of modules, and the IR lowered into it is the same; other threads, and code
    outside the block, get JAX's own fresh contexts.  Without JAX, or with a JAX that makes contexts otherwise,
    the block changes nothing.
    """
    try:
        from jax._src.interpreters import mlir
    except ImportError:
        yield
        return
    make = getattr(mlir, "make_ir_context", None)
    if make is None or getattr(make, "shared_by_rulegen", False):  # no such function, or a block already open
        yield
        return
    owner = threading.get_ident()

    def shared() -> Any:
        if threading.get_ident() != owner:
            return make()
        uses = getattr(_SHARED_CONTEXT, "uses", MLIR_CONTEXT_USES)
        if uses >= MLIR_CONTEXT_USES:
            _SHARED_CONTEXT.context, uses = make(), 0
        _SHARED_CONTEXT.uses = uses + 1
        return _SHARED_CONTEXT.context

    shared.shared_by_rulegen = True  # type: ignore[attr-defined]
    mlir.make_ir_context = shared
    try:
        yield
    finally:
        mlir.make_ir_context = make
