"""Searches kept on disk (`derive.stored`), by what decides them: a rebuild never searches again what a build has
searched.

The key is the expression and its sampling as sympy writes them out in full, the search's budget and the
fingerprint of the code that searches: an entry is read back only where the search would find the same thing
again.
"""

from __future__ import annotations

from collections.abc import Sequence

import sympy as sp

from rulegen.derive.stored import CACHE_ENV, key_of, load, store

__all__ = ["CACHE_ENV", "load", "search_key", "store"]


def search_key(expr: sp.Expr, decided_by: Sequence[object]) -> str:
    """The cache key of searching `expr`, as decided by `decided_by`."""
    return key_of((expr, *decided_by))
