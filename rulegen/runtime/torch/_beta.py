"""beta's partial d/da beta(a, b), differentiated by the registry's partial in a.

Its value is `_beta_cases.beta_slope_cases`, the registry's cases
(`functions.beta_slope_by_cases`: right where beta over- or underflows).
Autodiff of those cases in a was inf * 0 and inf - inf where the log-space
product's factors are infinite (nan at 2 / a**3's overflow, at a = max):
its partial in a is stated instead, `_beta_cases.beta_curvature_cases`,
computed whole.  Its partial in b is torch's forward-mode autodiff of the
cases.
"""

from typing import Any

import torch

from . import _beta_cases
from ._special import _pair_applied, _pair_differentiated_by


def _value(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return _beta_cases.beta_slope_cases(a, b)


def _partials(a: torch.Tensor, b: torch.Tensor, needed: tuple[bool, bool]) -> tuple[Any, Any]:
    """(d/da, d/db) of beta_slope, those `needed` alone: the stated curvature, and forward-mode
    autodiff of the cases in b (a second pass over them, skipped where b takes no gradient)."""

    def in_b(v: torch.Tensor) -> torch.Tensor:
        return _beta_cases.beta_slope_cases(a, v)

    in_a = _beta_cases.beta_curvature_cases(a, b) if needed[0] else None
    slope_in_b = torch.func.jvp(in_b, (b,), (torch.ones_like(b),))[1] if needed[1] else None
    return in_a, slope_in_b


_value.__name__, _partials.__name__ = "beta_slope", "beta_slope's partials"
_FUNCTIONS = _pair_differentiated_by("_BetaSlope", _value, _partials)


def beta_slope(a: torch.Tensor | float, b: torch.Tensor | float) -> torch.Tensor:
    """d/da beta(a, b), differentiated by the registry's partial in a at every order; where nothing
    differentiates it, the cases alone."""
    return _pair_applied(_FUNCTIONS, _value, a, b)
