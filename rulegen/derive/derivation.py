"""The derivation of a symbolic rule, the model derive/ hands the planners: every partial in closed form, the forms
the search chose, and what torch saves.  Its own module so that the steps that complete it (`saved`) and the one
that makes it (`partials`) both read it, one way."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

import sympy as sp

from rulegen.derive.routes import Routes
from rulegen.derive.stabilise import Choice
from rulegen.derive.symbols import value_symbol
from rulegen.spec.rules import Input, Rule

Partials = Mapping[tuple[str, str], sp.Expr]
# Each output's tangent as autodiff chains it through the saved intermediates: its terms (partial, tangent symbol).
Chained = tuple[tuple[str, tuple[tuple[sp.Expr, sp.Symbol], ...]], ...]


@dataclass(frozen=True)
class TorchForms:
    """What torch's planner prints of a derivation: every expression in torch's forms, the partials reading the
    intermediates torch saves, and those intermediates as residuals with their symbols and partials."""

    derivation: Derivation  # in torch's forms: the fused ones, silu's derivative as one
    symbols: Mapping[str, sp.Symbol]  # the rule's, and each saved intermediate's with its tangent and cotangent
    vjp_partials: Partials
    jvp_partials: Partials
    residual_partials: Partials  # the rule's residuals' and the saved intermediates'
    residuals: tuple[tuple[str, sp.Expr], ...]  # the rule's own, then the saved intermediates
    residual_values: tuple[tuple[str, sp.Expr], ...]  # the same, as the forward computes them (outputs written out)


@dataclass(frozen=True)
class Derivation:
    """A symbolic rule with every derivative in closed form.

    Expressions are in the symbols named in `symbols`: inputs (static ones
    included), outputs, residuals, tangents `x_dot` and cotangents `y_bar`.
    Partials of an (output, input) pair that is absent are zero.
    """

    rule: Rule
    symbols: Mapping[str, sp.Symbol]
    forward: tuple[tuple[str, sp.Expr], ...]
    residuals: tuple[tuple[str, sp.Expr], ...]
    jvp_partials: Partials
    vjp_partials: Partials
    residual_partials: Partials
    routes: Routes
    # Outputs whose expression was rewritten into a stable form: (name, as written, as computed).
    rewritten: tuple[tuple[str, sp.Expr, sp.Expr], ...] = ()
    # The stabilising search's choice for each expression it measured (rulegen.derive.stabilise).
    choices: tuple[Choice, ...] = ()
    # Whether each partial the rule gives is sympy's of its forward, in the forms computed (rulegen.derive.saved).
    given_are_derived: bool = False
    # The intermediates of the forward torch's backward reads, in torch's forms, each with the symbol it is saved
    # as (an output's own where it is one), and the partials of those beside the rule's names (rulegen.derive.saved).
    saved: tuple[tuple[sp.Expr, sp.Symbol], ...] = ()
    saved_partials: Partials = dataclasses.field(default_factory=lambda: MappingProxyType({}))
    # The outputs whose tangent chains through the saved intermediates' is the derived one, with its terms.
    chained_tangents: Chained = ()
    # Every expression in the one-kernel forms both backends compute (what JAX's planner and the header print),
    # and in torch's; set where the derivation is completed (rulegen.derive.saved.completed), None in those views.
    fused_forms: Derivation | None = None
    torch_forms: TorchForms | None = None

    @property
    def fused(self) -> Derivation:
        """The derivation in the one-kernel forms both backends compute (`fused_forms`)."""
        if self.fused_forms is None:
            raise ValueError(f"{self.rule.name}: the derivation is not completed (rulegen.derive.saved.completed)")
        return self.fused_forms

    @property
    def torch(self) -> TorchForms:
        """The derivation as torch's planner prints it (`torch_forms`)."""
        if self.torch_forms is None:
            raise ValueError(f"{self.rule.name}: the derivation is not completed (rulegen.derive.saved.completed)")
        return self.torch_forms

    @property
    def diff_inputs(self) -> tuple[Input, ...]:
        return tuple(i for i in self.rule.inputs if i.differentiable)

    def value_symbol(self, name: str) -> sp.Symbol:
        """The symbol of a value named beside the rule's own (a saved intermediate, its tangent or cotangent)."""
        return value_symbol(self.rule, name)
