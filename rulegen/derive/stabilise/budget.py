"""The bounds on the stabilising search's work and the margins of its choices, in one typed record.

Work is bounded by sizes (points, operations, variables, candidates), never
by time: the machine's load would then decide which searches finish, and
what is chosen.  Each field is read as `BUDGET.<field>`; a test wanting
another bound patches a module's `BUDGET` with `dataclasses.replace`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Budget:
    """What bounds the search's work and decides how much better a form must measure to be chosen."""

    # ------------------------------------------------ points
    #: Points per dtype at which candidates are compared.
    search_points: int = 32
    #: float32 points at which an expression is screened (float32 against float64, no mpmath: cheap).
    screen_points: int = 256
    #: Points per ordered pair of variables at which one is the other times 1 + 2 eps (points.`_close_pairs`).
    close_pairs: int = 1
    #: The same points per ordered pair at which an expression is screened.
    screen_close_pairs: int = 8
    #: Points where float64 gives an exact 0 that the screen asks mpmath about (one evaluation each).
    zero_probes: int = 8
    #: Points per dtype and side drawn between two sampled magnitudes to place a regime's threshold.
    refine_points: int = 24
    #: The largest |u| of exp(u) (expm1, sinh, cosh) at which a sampled point's exact value is computed: past it
    #: mpmath takes a second per exp(1e600) at the thousands of bits such points need, and a point is kept only
    #: where an interval shows the value is 0 in every float (`points._underflowed`).
    growth_argument_limit: float = 1e4

    # ------------------------------------------------ margins, in bits of error
    #: Mean bits of error (in each dtype) below which an expression is not searched.
    good_bits: float = 0.5
    #: A candidate replaces the derived form only when it saves at least this many bits (float64 + float32 means).
    margin_bits: float = 0.5
    #: Mean bits (per dtype) within which two forms measure alike: the noise of `search_points` points.
    tie_bits: float = 0.125

    # ------------------------------------------------ what is searched, and how far
    #: Operations (`sp.count_ops`) above which an expression is not searched.
    search_ops: int = 60
    #: Variables above which an expression is not searched.  Four reach the KL divergences of two normals and
    #: of two Gammas (4.1 -> 1.1 and 7.1 -> 2.4 bits float64, the scale and rate partials from 20-45 bits).
    search_symbols: int = 4
    #: Operations above which factoring (`factor`, `expand`, partial fractions, scaling) is skipped: its cost grows
    #: fastest with the expression.
    factor_ops: int = 40
    #: Operations above which series are skipped.
    series_ops: int = 30
    #: Variables above which series are skipped: sympy's series in one variable of an expression in two costs ten
    #: times that in one.
    series_symbols: int = 1
    #: Terms of each series expansion.
    series_order: int = 8
    #: Candidates measured per expression (besides the caller's alternatives).
    candidates_per_expression: int = 24
    #: Candidates measured from the families applied again to the best alternative.
    candidates_per_alternative: int = 12
    #: Expressions searched per rule (rulegen.derive.partials).
    searches_per_rule: int = 16
    #: How many of the best forms the reassociation of products starts from (each gives two pairings at most).
    reassociated_starts: int = 3
    #: A power above this is not split into factors to pair: x**9 would be nine factors.
    paired_power: int = 4
    #: A sum of more terms than this is not searched for pairs of terms with a common factor (pairs grow as the
    #: square of the terms).
    paired_terms: int = 6

    # ------------------------------------------------ regimes and scaling
    #: Splits into regimes, at most: a `where` costs a pass over memory.
    regime_splits: int = 1
    #: Forms (the best, then the next by score) from which a regime split, or a scaling, is tried.
    regime_starts: int = 3
    #: Forms of the pool whose square roots of homogeneous radicands are computed scaled (`_radicands_rescaled`),
    #: best first: unscaled, a discriminant that overflows ranks every form that holds it alike.
    radicand_starts: int = 24
    #: Square roots per form computed on scaled inputs, in sympy's order of them.
    radicand_roots: int = 3
    #: The bits a regime split (or an overflow-safe scaling, which costs a binade and a division per input) must
    #: save to be taken.
    regime_margin_bits: float = 1.0
    #: Points at which an expression's homogeneity is tested (scaling by 2 gives the degree, by 3 confirms it).
    homogeneity_points: int = 8
    #: Decimal digits of that test: a float evaluation of an expression that cancels scales by 3 only roughly.
    homogeneity_digits: int = 40

    # ------------------------------------------------ saturation
    #: Where an input may be clamped, |v| at most: Python numbers in torch code, which torch refuses beside a
    #: tensor whose dtype cannot hold them, so within float16's range (65504), where every exponential has long
    #: saturated.
    saturation_bounds: tuple[float, ...] = (1e4, 1e2)
    #: How many of the search's forms that are not finite somewhere are tried clamped.
    saturation_starts: int = 4
    #: Points of each dtype beyond a clamp's bound at which the exact derivative must round to 0.
    flat_points: int = 4

    # ------------------------------------------------ the acceptance gate (gate.py)
    #: Points per dtype, drawn apart from the search's, at which a chosen form must be finite wherever the exact
    #: value and the derived form are (numpy; mpmath only where the form is not).
    validation_points: int = 1024
    #: Of those, with the probes, the points at which its mean bits must be no worse than the derived form's.
    validation_measured: int = 256
    #: How many admissible forms, in the search's order, the gate's measured points choose between.
    validated_forms: int = 3
    #: Points per ratio and pair of inputs in the mixed-magnitude pairs.
    mixed_points: int = 64
    #: Rows per input and value at which that input is an ordinary number (±1, ±2, ±1/2: labels, counts, unit
    #: scales) and the others are drawn.
    ordinary_rows: int = 16
    #: Where the derived form is within `accurate_bits` of the exact value, a chosen form may not be more than
    #: `broken_bits` worse: a form that trades the common case for the extremes is refused.
    accurate_bits: float = 2.0
    broken_bits: float = 8.0
    #: How many of the validation points where the two forms are more than 2**broken_bits units in the last place
    #: apart mpmath decides between (the ordinary rows first).
    disagreement_points: int = 48
    #: How many of the validation points where a form is inf or nan mpmath is asked whether the exact value is a
    #: finite float (`inadmissible_points`), and how many of the search's forms are counted so to repair a derived
    #: form that is inf or nan at such a point.
    repair_points: int = 16
    repair_forms: int = 6
    #: Points per pair of inputs and order of signs where both are in the top binade, of opposite signs
    #: (`measure.edge_pairs`): targets of the divided-first repair alone (`search._mended_at_the_edge`), which the
    #: gate does not hold a form to (a sum over one denominator is inf there where the derived form is not).
    edge_points: int = 8
    #: Rows per exponential or integer power, input its argument or base is linear in and target where that input
    #: is moved so that the part is a few steps from where it overflows or underflows (`gate.range_edges`).
    range_edge_rows: int = 8
    #: Rows a chosen form's own sums' terms are moved past the range from (`gate.past_the_range`), the targets of
    #: the sum-scaled repair: a sum is back in range only where its other terms cancel enough of the moved one, in
    #: one regime of a `where`'s (a Beta KL's q1 group, p1 <= 32 < p0), which a few rows do not reach.
    own_sum_rows: int = 64
    #: The most terms a sum may have for the lead-term repair to take it over each of them in turn
    #: (`families._over_lead_terms`): one form per term, each measured by the gate.
    lead_terms: int = 4

    # ------------------------------------------------ what the caller is given
    #: How far (sum of the dtypes' mean bits) behind the chosen form another good form may be.
    runner_up_bits: float = 2.0
    #: How many good forms are kept (a derivative of each is a candidate for the derivative's own search).
    good_forms: int = 4


#: The budget every search runs under.
BUDGET = Budget()
