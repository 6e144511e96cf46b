"""Stage 2, after differentiation: each expression the backends compute, in the form with the least measured error.

Herbie's method (Panchekha et al., PLDI 2015) applied to derivatives as well
as values: points are sampled over the float bit patterns inside each
input's domain (as `rulegen accuracy` samples them), the expression's exact
value at each comes from mpmath, and candidate rewrites are scored by their
bits of error when numpy evaluates them in float64 and in float32.  The
candidates come from rewrite families, none of which knows any particular
expression:

- algebraic: `cancel`, `together`, `factor`, `expand`, the canonical fused
  forms, and `cancel` of the expression with log1p and expm1 written out;
- identities for differences of like functions (sin, cos, tan, atan, log,
  log1p, exp, roots: `sqrt(a) - sqrt(b)` is `(a - b)/(sqrt(a) + sqrt(b))`;
  powers of any other exponent: `a**p - b**p` is
  `b**p * expm1(p*log1p((a - b)/b))`) and of a function and a constant
  (`1 - cos(u)` is `2*sin(u/2)**2`); sines and cosines of a sum in several
  variables by angle addition; the conjugate of a sum with a square root;
  the logs of functions that round to 0 or 1 taken exactly
  (`log(sigmoid(u))` is `-softplus(-u)`, `log(erfc(u))` a `log_ndtr`);
- differences of loggamma, digamma and polygamma (`asymptotic`): past
  2**5 the difference of their Stirling series, each pair of like terms
  without cancellation (`digamma(a) - digamma(a + b)` at b << a), below it
  the difference computed on its own; like terms whose coefficients add to
  0 (a Beta entropy's three digammas) as differences from one of them;
  calls all of one argument, or of its shifts by constants (a Student-t's
  df/2 and (df + 1)/2), replaced by their series and expanded, so that like
  orders cancel exactly (`1 + (1 - c) trigamma(c)`); calls at several
  arguments as series in each argument's base, without its constant (k for
  `loggamma(k + 1)`: a negative binomial's `(k + r) log(k + r) - k log k -
  r log r` is `k log1p(r/k) + r log1p(k/r)`); a log beside a loggamma or
  digamma whose series leads with it (`k log(rate) - loggamma(k + 1)` is
  `k log(rate/k) + k - log(2 pi k)/2 - ...`, `log(rate) - digamma(k + 1)`
  is `log(rate/k) - 1/(2k) + ...`) joined to it; poles taken out of
  trigamma and on, and of a loggamma or digamma of `a v` (`0 < a < 1`)
  where XLA flushes `a v` to 0 (`loggamma(df/2)` as
  `loggamma(df/2 + 1) - log(df) + log(2)` there);
- norms: `a**2 + b**2` through `hypot(a, b)` (`p/(a**2 + b**2)` is
  `(p/h)/h`), a ratio of magnitudes no single input's regime can express;
  a power below -1 split (`x**(-3/2)/2` is `x**(-1/2)/(2x)`);
- overflow-safe scaling: each polynomial in a variable divided through by
  its leading power, so `x**2*(x - 1)**2` is `x**4*(1 - 1/x)**2`, whose
  parts overflow to inf (and a quotient to 0) instead of making inf/inf;
  a quotient divided through by an exponential in it (or its square root);
- series: Taylor at 0 and the expansion at infinity in each variable, of
  elementary functions only;
- forms the caller knows (`alternatives`: the forward as written, the
  derivatives of the forward's good forms), and the families again from
  the best of those.

Candidates are evaluated by numpy, the registered functions by their numpy
or scipy implementations (rulegen.derive.functions: `numpy_name`).  The best
candidate may then be joined with another by regimes: a `Piecewise` on
|variable| below or above a threshold found by measurement, or on a
variable's sign, or, for an expression homogeneous in two variables
together, on the ratio |a| < k |b| (k a power of two), tried from the
three best forms; every threshold is a power of two.  Each branch is evaluated
at a point of its own region where it is not taken (the double-`where`), so
that a branch which is nan where it is not taken cannot make a higher
derivative nan.

The form as derived stays unless a candidate is measurably better and
passes the acceptance gate (`gate`: finite wherever the derived form and the
exact value are, and no worse on average, on points the search never saw);
ties go to the one with fewer operations.  A choice still inf or nan where
the exact value is a finite float is repaired by a form finite at more such
points, and where none of the others is, by its products scaled (each
product of three or more factors computed by the runtime's `power_product`,
which brings each base near 1 by a power of two): a repair alone, never a
rival of a plain form elsewhere.  The accuracy policy (`policy`:
`best`, `balanced`, `fast`) may then keep a cheaper admissible form, by a
cost model per backend (`cost`).  An expression already within `good_bits`
at a few screening points (float32 against float64, and mpmath where
float64 is exactly 0) is not searched at all.

The result is a pure function of the expression and its sampling: points
are seeded, and the work is bounded by sizes, never by time (the machine's
load would then decide which searches finish).  The bounds are the
fields of one `Budget` (`budget`), read as `BUDGET.<field>`: an expression
larger than `search_ops` operations or in more than `search_symbols`
variables is kept as derived, a family is skipped above its own bound, at
most `candidates_per_expression` candidates are measured per expression
and at most `searches_per_rule` expressions per rule
(rulegen.derive.partials).  The derive stage's time limit stays the one
guard against a sympy step that hangs: it fails the build at the rule, it
does not keep another form.

The modules, by concern, data flowing one way (each imports only those
before it; none but this one imports `search`):

- `budget`: the `Budget` of the search's work and margins, and `BUDGET`;
- `points`: `Sampling`, the sampled and probed points, their exact values
  (mpmath, and interval arithmetic where exponentials grow past reach),
  the screen, numpy's evaluation of a candidate and its bits of error;
- `asymptotic`: differences of the gamma family by their series at infinity;
- `families`: the rewrite families and the reassociation of products;
- `scaling`: homogeneity, and overflow-safe rescaling by powers of two;
- `regimes`: splits on a variable's magnitude or sign or two variables' ratio, joined by `Piecewise`;
- `saturation`: inputs clamped where a form overflows past its limit;
- `gate`: the acceptance gate every chosen form passes;
- `cost`: what a form costs per backend (eager torch's kernels, XLA's fused code), as data;
- `policy`: the accuracy policy (`best`, `balanced`, `fast`) choosing among the admissible forms by cost;
- `search`: `stabilise`, its memo, and `Choice`.
"""

from rulegen.derive.stabilise.budget import BUDGET, Budget
from rulegen.derive.stabilise.gate import admissible
from rulegen.derive.stabilise.points import Sampling
from rulegen.derive.stabilise.policy import DEFAULT_POLICY, POLICIES
from rulegen.derive.stabilise.search import Choice, sampling_for, searchable, stabilise

__all__ = [
    "BUDGET",
    "DEFAULT_POLICY",
    "POLICIES",
    "Budget",
    "Choice",
    "Sampling",
    "admissible",
    "sampling_for",
    "searchable",
    "stabilise",
]
