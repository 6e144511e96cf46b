"""The aten ops torch runs, recorded by name: what the tests read to count kernels."""

from __future__ import annotations

import torch

#: Ops that move no element through a computation: views, checks, dtype queries, a tangent's ones.
BOOKKEEPING = frozenset({"alias", "detach", "is_same_size", "_has_same_storage_numel", "promote_types", "ones_like"})


class AtenOps(torch.utils._python_dispatch.TorchDispatchMode):
    """The aten ops run inside it, by name."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))

    @property
    def kernels(self) -> list[str]:
        """The ops that compute, in order."""
        return [op for op in self.ops if op not in BOOKKEEPING]
