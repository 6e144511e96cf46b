"""A sympy printer that prints each subexpression once per `doprint`."""

from __future__ import annotations

from typing import Any

import sympy as sp


class PrintedOnce:
    """Mixed into a sympy printer: each subexpression's text is made once per `doprint` and read back after.

    sympy prints a tree, so a subexpression a Piecewise's branches and conditions share is printed again wherever it
    appears: a Beta KL's series forms took minutes in lambdify, and the registry's cases repeat their log|Gamma| and
    sign terms many times over.  A printer's text for an expression depends on nothing else but whether it is the
    whole (sympy strips a Float's zeros below it), which the first `_print` is.  A printer that prints some
    expressions its own way overrides `_print_uncached` and ends in `super()._print_uncached`.
    """

    def doprint(self, expr: Any, *args: Any, **kwargs: Any) -> Any:
        self._printed: dict[tuple[Any, ...], str] = {}
        try:
            return super().doprint(expr, *args, **kwargs)  # type: ignore[misc]
        finally:
            self._printed = {}

    def _print(self, expr: Any, **kwargs: Any) -> str:
        memo = getattr(self, "_printed", None)
        if memo is None or not self._print_level or not isinstance(expr, sp.Basic):  # type: ignore[attr-defined]
            return self._print_uncached(expr, **kwargs)
        key = (expr, *sorted(kwargs.items()))
        if key not in memo:
            memo[key] = self._print_uncached(expr, **kwargs)
        return memo[key]

    def _print_uncached(self, expr: Any, **kwargs: Any) -> str:
        return str(super()._print(expr, **kwargs))  # type: ignore[misc]
