"""Functions whose torch op is wrong or lacks a derivative, with the registry's at every order.

`torch.special.zeta` has no forward-mode derivative and none in its first
argument: `torch.func.jvp`, `hessian` or a jvp of a rule's backward that
calls it raise "Trying to use forward AD with special_zeta that does not
support it".  Here it is an autograd.Function whose derivatives are the
registry's (d/dq zeta(s, q) = -s * zeta(s + 1, q)), written with this same
function, so that every derivative of a derivative has one too.

The exponent s is never differentiated: sympy has no derivative of zeta in
it, so no derivative rulegen derives asks for one (a tangent or gradient of
s, which torch.func passes for a tensor s, is not read).

torch's float64 trigamma, `polygamma(1, x)`, is its float32 algorithm (an
asymptotic series cut after x**-7, its 1/x**2 rounded to float32): 2.2e6 eps
off at x = 1.1, 13 bits lost on average over (0, 5), and digamma's autograd
derivative is that trigamma.  In float64 both are mended here, trigamma as
zeta(2, x) (torch's zeta is right to 3 eps there, and 7x slower);
float32's trigamma is right to 2.5 eps and stays torch's.

erfcx's derivative, 2 x erfcx(x) - 2 / sqrt(pi), cancels as x grows; the
registry's is a series from x = 8 (`_asymptotic.erfcx_slope`), and a rule
whose derivative calls erfcx (log_ndtr's) is differentiated by it here.

hypot's and atan2's partials, x / hypot(x, y) and u / (u**2 + v**2), are
`hypot_slope` and `atan2_slope`: quotients on their inputs over a binade
(`_scaling`), whose autodiff is inf * 0 where a partial overflows beside a
zero (atan2's at (0, 5e-324)) or an input is infinite; differentiated here by
the registry's partials, each computed whole.  Those of one point together are
`plane_slopes` (`hypot_slopes`, `atan2_slopes`): one scaling for all, and
where nothing differentiates them the quotients computed inline, as a rule's
own code would, with no Function around them.
"""

import functools
from collections.abc import Callable
from typing import Any, TypeVar, cast

import torch

from . import _asymptotic, _scaling
from ._function import save_for_derivatives
from ._plain import plain_tensors
from ._route import seen_by_outer_levels, without_jvp


class _Zeta(torch.autograd.Function):
    # Elementwise, it batches as it is: torch.func.vmap and jacfwd need no rule of their own.
    generate_vmap_rule = True

    @staticmethod
    def forward(s: Any, q: Any) -> Any:
        return torch.special.zeta(s, q)

    @staticmethod
    def setup_context(ctx: Any, inputs: Any, output: str) -> None:
        s, q = inputs
        # A tensor exponent is saved as tensors are (a BatchedTensor under vmap); a number as it is.
        ctx.s_is_tensor = isinstance(s, torch.Tensor)
        ctx.s = None if ctx.s_is_tensor else s
        save_for_derivatives(ctx, *((q, s) if ctx.s_is_tensor else (q,)))

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Any:
        s, q = _saved(ctx)
        return None, _reduced(grad * _derivative(s, q), q)

    @staticmethod
    @seen_by_outer_levels
    def jvp(ctx: Any, s_dot: Any, q_dot: Any) -> Any:
        s, q = _saved(ctx)
        return q_dot * _derivative(s, q)


def _differentiated_by(
    name: str,
    forward: Callable[[torch.Tensor], torch.Tensor],
    derivative: Callable[..., torch.Tensor],
    *,
    reads_output: bool,
) -> tuple[type[torch.autograd.Function], type[torch.autograd.Function]]:
    """A Function of one tensor computing `forward(x)`, differentiated by `derivative(x, out)`.

    `out` is forward's result where it `reads_output`, else None (and not
    saved).  The derivative is torch code of this module, so differentiable
    again at every order.  Returned with its twin without `jvp`, which
    Dynamo traces where torch.compile does.
    """

    def saved(ctx: Any) -> tuple[Any, ...]:
        return ctx.saved_tensors if reads_output else (*ctx.saved_tensors, None)

    class Mended(torch.autograd.Function):
        # Elementwise, it batches as it is: torch.func.vmap and jacfwd need no rule of their own.
        generate_vmap_rule = True

        @staticmethod
        def forward(x: torch.Tensor) -> Any:
            return forward(x)

        @staticmethod
        def setup_context(ctx: Any, inputs: Any, output: str) -> None:
            save_for_derivatives(ctx, *inputs, *((output,) if reads_output else ()))

        @staticmethod
        def backward(ctx: Any, grad: torch.Tensor) -> Any:
            return grad * derivative(*saved(ctx))

        @staticmethod
        @seen_by_outer_levels
        def jvp(ctx: Any, x_dot: Any) -> Any:
            return x_dot * derivative(*saved(ctx))

    Mended.__name__ = Mended.__qualname__ = name
    Mended.__doc__ = f"torch's {forward.__name__}, differentiated by {derivative.__name__}."
    return Mended, without_jvp(Mended)


def _applied(
    functions: tuple[type[torch.autograd.Function], type[torch.autograd.Function]], x: torch.Tensor
) -> Any:
    eager, compiled = functions
    return (compiled if torch.compiler.is_compiling() else eager).apply(x)


# Applied where torch.compile traces, which refuses a Function with a `jvp`.
_ZetaCompiled = without_jvp(_Zeta)


def _saved(ctx: Any) -> tuple[Any, torch.Tensor]:
    if ctx.s_is_tensor:
        q, s = ctx.saved_tensors
        return s, q
    (q,) = ctx.saved_tensors
    return ctx.s, q


def _derivative(s: Any, q: Any) -> torch.Tensor:
    """d/dq zeta(s, q), by this module's hurwitz_zeta: itself differentiable."""
    return -s * hurwitz_zeta(s + 1, q)


def _reduced(grad: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    # A broadcast q (0-d beside an array s) takes its gradient summed over the broadcast dimensions.
    if grad.shape == like.shape:
        return grad
    return grad.sum_to_size(like.shape)


def hurwitz_zeta(s: Any, q: Any) -> torch.Tensor:
    """The Hurwitz zeta function of `s` (a number or tensor, not differentiated) and `q`."""
    if not isinstance(q, torch.Tensor):
        q = torch.as_tensor(q, dtype=s.dtype if isinstance(s, torch.Tensor) else None)
    return (_ZetaCompiled if torch.compiler.is_compiling() else _Zeta).apply(s, q)


def _float64(x: object) -> bool:
    return isinstance(x, torch.Tensor) and x.dtype == torch.float64


def polygamma(n: int, x: torch.Tensor) -> torch.Tensor:
    """torch.special.polygamma(n, x); in float64, trigamma (n = 1) as the Hurwitz zeta(2, x)."""
    if n == 1 and _float64(x):
        return hurwitz_zeta(2.0, x)
    return torch.special.polygamma(n, x)


def _trigamma(x: torch.Tensor, _out: torch.Tensor | None) -> torch.Tensor:
    return polygamma(1, x)


def _erfcx_slope(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    return _asymptotic.erfcx_slope(torch, x, out)


def _bessel_i1_slope(x: torch.Tensor, _out: torch.Tensor | None) -> torch.Tensor:
    return bessel_i1_slope(x)


def _bessel_i1_slope_value(x: torch.Tensor) -> torch.Tensor:
    return _asymptotic.bessel_i1_slope(torch, torch.special, x)


def _bessel_i1_curvature(x: torch.Tensor, _out: torch.Tensor | None) -> torch.Tensor:
    return bessel_i1_curvature(x)


def _ndtri_slope_value(x: torch.Tensor) -> torch.Tensor:
    return _asymptotic.ndtri_slope(torch, torch.special.ndtri, torch.special.erfcx, x)


def _ndtri_curvature(x: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    return torch.special.ndtri(x) * out * out


def _sigmoid_slope_value(x: torch.Tensor) -> torch.Tensor:
    # sigmoid(x) * sigmoid(-x): softplus's backward at beta = -1 multiplies its first
    # argument by sigmoid(-x).
    return torch.ops.aten.softplus_backward(torch.sigmoid(x), x, -1.0, 40.0)


def _sigmoid_curvature(x: torch.Tensor, _out: torch.Tensor | None) -> torch.Tensor:
    return -torch.tanh(x / 2) * sigmoid_slope(x)


_DIGAMMA = _differentiated_by("_Digamma", torch.special.digamma, _trigamma, reads_output=False)
_BESSEL_I1 = _differentiated_by("_BesselI1", torch.special.i1, _bessel_i1_slope, reads_output=False)
_BESSEL_I1_SLOPE = _differentiated_by(
    "_BesselI1Slope", _bessel_i1_slope_value, _bessel_i1_curvature, reads_output=False
)
_NDTRI_SLOPE = _differentiated_by(
    "_NdtriSlope", _ndtri_slope_value, _ndtri_curvature, reads_output=True
)
_SIGMOID_SLOPE = _differentiated_by(
    "_SigmoidSlope", _sigmoid_slope_value, _sigmoid_curvature, reads_output=False
)
_ERFCX = _differentiated_by("_Erfcx", torch.special.erfcx, _erfcx_slope, reads_output=True)


def digamma(x: torch.Tensor) -> torch.Tensor:
    """torch.special.digamma(x); in float64, differentiated by `polygamma(1, x)` above."""
    if _float64(x):
        return _applied(_DIGAMMA, x)
    return torch.special.digamma(x)


def erfcx(x: torch.Tensor) -> torch.Tensor:
    """torch.special.erfcx(x), differentiated by the registry's derivative at every order.

    torch's own, 2 x erfcx(x) - 2 / sqrt(pi), cancels as x grows (1.1e8
    float64 eps off at x = 1e4), in a rule's derivative that calls erfcx too.
    """
    return _applied(_ERFCX, x)


def bessel_i1(x: torch.Tensor) -> torch.Tensor:
    """torch.special.i1(x), differentiated by `bessel_i1_slope`: torch's I0(x) - I1(x) / x is
    inf - inf where both overflow (from |x| = 89 in float32)."""
    return _applied(_BESSEL_I1, x)


def bessel_i1_slope(x: torch.Tensor) -> torch.Tensor:
    """I1'(x) (`_asymptotic.bessel_i1_slope`), differentiated by I1''(x) as one product where I0
    and I1 overflow (autodiff of exp(|x|) times the scaled functions is inf - inf there)."""
    return _applied(_BESSEL_I1_SLOPE, x)


def bessel_i1_curvature(x: torch.Tensor) -> torch.Tensor:
    """I1''(x) (`_asymptotic.bessel_i1_curvature`), differentiated by torch."""
    return _asymptotic.bessel_i1_curvature(torch, torch.special, x)


def sigmoid_slope(x: torch.Tensor) -> torch.Tensor:
    """sigmoid'(x) = sigmoid(x) sigmoid(-x), differentiated as -tanh(x / 2) sigmoid'(x) at
    every order: autodiff of the product, sigmoid(-x) - sigmoid(x) times it, is 0 at
    x = 1e-30 in float32.  Where nothing differentiates it, the two kernels alone."""
    if plain_tensors((x,)) and not torch.compiler.is_compiling():
        return _sigmoid_slope_value(x)
    return _applied(_SIGMOID_SLOPE, x)


def ndtri_slope(x: torch.Tensor) -> torch.Tensor:
    """ndtri'(x) = 1 / phi(ndtri(x)) (`_asymptotic.ndtri_slope`), differentiated as
    ndtri(x) ndtri'(x)**2 at every order: one product, -inf where it overflows (autodiff of
    its tails' erfcx(u) / x is inf - inf there).  Where nothing differentiates it, the value
    alone."""
    if plain_tensors((x,)) and not torch.compiler.is_compiling():
        return _ndtri_slope_value(x)
    return _applied(_NDTRI_SLOPE, x)


class _NthRoot(torch.autograd.Function):
    """`_scaling.nth_root(x, n)`, differentiated by nth_root(x, n)**(1 - n) / n."""

    # Elementwise, it batches as it is: torch.func.vmap and jacfwd need no rule of their own.
    generate_vmap_rule = True

    @staticmethod
    def forward(x: torch.Tensor, n: int) -> Any:
        return _scaling.nth_root(torch, x, n)

    @staticmethod
    def setup_context(ctx: Any, inputs: Any, output: str) -> None:
        x, ctx.n = inputs
        save_for_derivatives(ctx, x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Any:
        (x,) = ctx.saved_tensors
        return grad * _nth_root_slope(x, ctx.n), None

    @staticmethod
    @seen_by_outer_levels
    def jvp(ctx: Any, x_dot: Any, _n_dot: Any) -> Any:
        (x,) = ctx.saved_tensors
        return x_dot * _nth_root_slope(x, ctx.n)


_NthRootCompiled = without_jvp(_NthRoot)


def _nth_root_slope(x: torch.Tensor, n: int) -> torch.Tensor:
    # A power of the root, not a quotient by one: its derivative (1 - n) out**-n out' is 0 at
    # x = inf, where that of 1 / out**(n - 1) is inf * 0.
    return nth_root(x, n) ** (1 - n) / n


def nth_root(x: torch.Tensor, n: int) -> torch.Tensor:
    """x**(1/n) within an ulp (`_scaling.nth_root`), differentiated by its stated derivative
    nth_root(x, n)**(1 - n) / n at every order: autodiff of the refinement step is nan at the
    smallest normals, at 1e-300 and at inf.  Where nothing differentiates it, the value alone."""
    if plain_tensors((x,)) and not torch.compiler.is_compiling():
        return _scaling.nth_root(torch, x, n)
    return (_NthRootCompiled if torch.compiler.is_compiling() else _NthRoot).apply(x, n)


class _PowerProduct(torch.autograd.Function):
    """`_scaling.power_product` of the bases before their exponents, differentiated at every
    order by k_i power_product(v, 1, ..., b_i, k_i - 1, ...), v the cotangent or tangent taken in
    as one more base: no chain rule multiplies by the scale-back powers of two before the near-1
    product (autodiff of the scaling: the gradient of power_product(x, 1, y, 1) at (max, 0) was
    nan, and x exp(-x**2)'s second derivative at x = max).

    The exponents are one string, "k1,k2,...", the last input: a tuple torch.func's vmap rule
    takes apart into inputs of their own.
    """

    # Elementwise, it batches as it is: torch.func.vmap and jacfwd need no rule of their own.
    generate_vmap_rule = True

    @staticmethod
    def forward(*inputs: Any) -> Any:
        *bases, exponents = inputs
        return _scaling.power_product(torch, *_scaling.paired(bases, _read(exponents)))

    @staticmethod
    def setup_context(ctx: Any, inputs: Any, output: str) -> None:
        # An absent tangent arrives as None, not as a dense zero (0 * an inf partial: nan).
        ctx.set_materialize_grads(False)
        ctx.exponents = _read(inputs[-1])
        save_for_derivatives(ctx, *inputs[:-1])

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor | None) -> Any:
        bases = ctx.saved_tensors
        gradients = (
            _reduced(_power_product_slope_times(grad, ctx.exponents, bases, i), bases[i])
            if needed and grad is not None
            else None
            for i, needed in enumerate(ctx.needs_input_grad[:-1])
        )
        return (*gradients, None)

    @staticmethod
    @seen_by_outer_levels
    def jvp(ctx: Any, *tangents: Any) -> Any:
        bases = ctx.saved_tensors
        terms = [
            _power_product_slope_times(t, ctx.exponents, bases, i)
            for i, t in enumerate(tangents[:-1])
            if t is not None
        ]
        if not terms:
            return torch.zeros_like(torch.broadcast_tensors(*bases)[0])
        shape = torch.broadcast_shapes(*(b.shape for b in bases))
        return sum(terms[1:], terms[0]).expand(shape)


def _read(exponents: str) -> tuple[int, ...]:
    return tuple(int(k) for k in exponents.split(","))


def _power_product_slope_times(
    v: torch.Tensor, exponents: tuple[int, ...], bases: tuple[torch.Tensor, ...], i: int
) -> torch.Tensor:
    """v d/db_i of the product: k_i power_product(v, 1, ..., b_i, k_i - 1, ...), a base whose
    exponent is then 0 left out."""
    pairs = _scaling.partial_pairs(bases, exponents, i)
    return exponents[i] * power_product(v, 1, *pairs) if pairs else exponents[i] * v


def power_product(*pairs: Any) -> torch.Tensor:
    """`_scaling.power_product` of (b1, k1, b2, k2, ...), differentiated by its stated partials
    at every order (`_PowerProduct`); where nothing differentiates it, the value alone.  A
    Python number among the bases is a tensor of the first tensor's dtype and device."""
    like = next(b for b in pairs[0::2] if isinstance(b, torch.Tensor))
    bases = tuple(b if isinstance(b, torch.Tensor) else like.new_tensor(b) for b in pairs[0::2])
    exponents = tuple(int(k) for k in pairs[1::2])
    # Under torch.compile, the product's code itself: Dynamo misreads the exponents of the Function
    # applied in a rule's backward (a compiled gradient is autodiff of the scaling).
    if plain_tensors(bases) or torch.compiler.is_compiling():
        return _scaling.power_product(torch, *_scaling.paired(bases, exponents))
    return _PowerProduct.apply(*bases, ",".join(map(str, exponents)))


def _pair_differentiated_by(
    name: str,
    forward: Callable[[torch.Tensor, torch.Tensor], Any],
    partials: Callable[[torch.Tensor, torch.Tensor, tuple[bool, bool]], Any],
    outputs: int = 1,
) -> tuple[type[torch.autograd.Function], type[torch.autograd.Function]]:
    """A Function of two tensors computing `forward(x, y)`, differentiated by
    `partials(x, y, needed)`.

    Of one output, `partials` gives its (d/dx, d/dy); of several (`outputs`), `forward` gives a
    tuple and `partials` each output's pair.  The partials are torch code of this module,
    differentiable again.  An input with no gradient asked, an output with no cotangent and an
    input with no tangent add no term (not 0 times a partial that may be inf); `needed` says
    which inputs' partials are read, and `partials` may skip the others (beta's in b is
    autodiff of its cases).  Returned with its twin without `jvp`.
    """

    def rows(x: torch.Tensor, y: torch.Tensor, needed: tuple[bool, bool]) -> Any:
        found = partials(x, y, needed)
        return (found,) if outputs == 1 else found

    class Mended(torch.autograd.Function):
        # Elementwise, it batches as it is: torch.func.vmap and jacfwd need no rule of their own.
        generate_vmap_rule = True

        @staticmethod
        def forward(x: torch.Tensor, y: torch.Tensor) -> Any:
            return forward(x, y)

        @staticmethod
        def setup_context(ctx: Any, inputs: Any, output: str) -> None:
            # An absent tangent arrives as None, not as a dense zero (0 * an inf partial: nan).
            ctx.set_materialize_grads(False)
            save_for_derivatives(ctx, *inputs)

        @staticmethod
        def backward(ctx: Any, *grads: torch.Tensor | None) -> Any:
            x, y = ctx.saved_tensors
            present = [(g, k) for k, g in enumerate(grads) if g is not None]
            if not present:
                return None, None
            found = rows(x, y, tuple(ctx.needs_input_grad))
            gradients = []
            for j, (needed, like) in enumerate(zip(ctx.needs_input_grad, (x, y), strict=True)):
                terms = [g * found[k][j] for g, k in present] if needed else []
                gradients.append(_reduced(sum(terms[1:], terms[0]), like) if terms else None)
            return tuple(gradients)

        @staticmethod
        @seen_by_outer_levels
        def jvp(ctx: Any, x_dot: Any, y_dot: Any) -> Any:
            x, y = ctx.saved_tensors
            shape = torch.broadcast_shapes(x.shape, y.shape)
            tangents = []
            for dx, dy in rows(x, y, (x_dot is not None, y_dot is not None)):
                terms = [t * d for t, d in ((x_dot, dx), (y_dot, dy)) if t is not None]
                if terms:
                    tangents.append(sum(terms[1:], terms[0]).expand(shape))
                else:
                    tangents.append(torch.zeros_like(torch.broadcast_tensors(x, y)[0]))
            return tangents[0] if outputs == 1 else tuple(tangents)

    Mended.__name__ = Mended.__qualname__ = name
    Mended.__doc__ = f"{forward.__name__}, differentiated by {partials.__name__}."
    return Mended, without_jvp(Mended)


def _pair_applied(
    functions: tuple[type[torch.autograd.Function], type[torch.autograd.Function]],
    value: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    x: torch.Tensor | float,
    y: torch.Tensor | float,
) -> Any:
    """`functions`' Function applied to (x, y); where nothing differentiates it, `value` alone.
    A Python number beside a tensor is a 0-d tensor of its dtype and device."""
    if isinstance(y, torch.Tensor) and not isinstance(x, torch.Tensor):
        x = torch.as_tensor(x, dtype=y.dtype, device=y.device)
    if isinstance(x, torch.Tensor) and not isinstance(y, torch.Tensor):
        y = torch.as_tensor(y, dtype=x.dtype, device=x.device)
    assert isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)
    if plain_tensors((x, y)) and not torch.compiler.is_compiling():
        return value(x, y)
    eager, compiled = functions
    return (compiled if torch.compiler.is_compiling() else eager).apply(x, y)


def _class_name(name: str) -> str:
    """The private class name of a function's Function: `_HypotSlope` of hypot_slope."""
    return "_" + "".join(part.title() for part in name.split("_"))


_Slope = TypeVar("_Slope", bound=Callable[..., torch.Tensor])


def _two_input_slope(
    partials: Callable[[Any, torch.Tensor, torch.Tensor], tuple[Any, Any]],
) -> Callable[[_Slope], _Slope]:
    """Decorator: the function of (x, y) it decorates is a value, applied where something
    differentiates it as a Function (`_pair_differentiated_by`) differentiated by
    `partials(torch, x, y)` (d/dx, d/dy) at every order, elsewhere alone (`_pair_applied`)."""

    def slope(value: _Slope) -> _Slope:
        def stated(x: torch.Tensor, y: torch.Tensor, needed: tuple[bool, bool]) -> tuple[Any, Any]:
            return partials(torch, x, y)

        stated.__name__ = partials.__name__
        functions = _pair_differentiated_by(_class_name(value.__name__), value, stated)

        @functools.wraps(value)
        def applied(x: torch.Tensor | float, y: torch.Tensor | float) -> torch.Tensor:
            return _pair_applied(functions, value, x, y)

        return cast(_Slope, applied)

    return slope


def _power_curvature(xp: Any, x: torch.Tensor, y: torch.Tensor) -> tuple[Any, Any]:
    return _scaling.power_curvature(xp, torch.special.xlogy, x, y)


def _power_log_curvature(xp: Any, x: torch.Tensor, y: torch.Tensor) -> tuple[Any, Any]:
    return _scaling.power_log_curvature(xp, torch.special.xlogy, x, y)


@_two_input_slope(_scaling.hypot_curvature)
def hypot_slope(x: torch.Tensor | float, y: torch.Tensor | float) -> torch.Tensor:
    """x / hypot(x, y) (`_scaling.hypot_slope`), differentiated by the registry's partials at
    every order."""
    return _scaling.hypot_slope(torch, x, y)


@_two_input_slope(_scaling.atan2_curvature)
def atan2_slope(u: torch.Tensor | float, v: torch.Tensor | float) -> torch.Tensor:
    """u / (u**2 + v**2) (`_scaling.atan2_slope`), differentiated by the registry's partials at
    every order."""
    return _scaling.atan2_slope(torch, u, v)


@_two_input_slope(_power_curvature)
def power_slope(x: torch.Tensor | float, y: torch.Tensor | float) -> torch.Tensor:
    """d/dx x**y = y x**(y - 1) (`_scaling.power_slope`), differentiated by the registry's
    partials (`_scaling.power_curvature`) at every order."""
    return _scaling.power_slope(torch, x, y)


@_two_input_slope(_power_log_curvature)
def power_log(x: torch.Tensor | float, y: torch.Tensor | float) -> torch.Tensor:
    """d/dy x**y = xlogy(x**y, x) (`_scaling.power_log`), differentiated by the registry's
    partials (`_scaling.power_log_curvature`) at every order."""
    return _scaling.power_log(torch, torch.special.xlogy, x, y)


def _joint(name: str, outputs: int) -> Any:
    """The Functions of `_scaling`'s joint function `name`, differentiated by its curvature."""

    def value(x: torch.Tensor, y: torch.Tensor) -> Any:
        return getattr(_scaling, name)(torch, x, y)

    def curvature(x: torch.Tensor, y: torch.Tensor, needed: tuple[bool, bool]) -> Any:
        return _scaling.plane_curvature(torch, x, y)[_ROWS[name]]

    value.__name__, curvature.__name__ = name, f"{name}'s curvature"
    return _pair_differentiated_by(_class_name(name), value, curvature, outputs)


#: Which of `plane_curvature`'s rows each joint function's outputs are.
_ROWS = {"hypot_slopes": slice(0, 2), "atan2_slopes": slice(2, 4), "plane_slopes": slice(0, 4)}
_JOINT = {name: _joint(name, rows.stop - rows.start) for name, rows in _ROWS.items()}


def _joint_applied(name: str, x: torch.Tensor | float, y: torch.Tensor | float) -> Any:
    """The joint function `name` of (x, y): where something differentiates it, its Function, whose
    outputs are each computed as their function of its own computes them and differentiated by the
    registry's partials; elsewhere its inline form (`_scaling`'s `<name>_inline`), one scaling."""

    def inline(x: torch.Tensor, y: torch.Tensor) -> Any:
        return getattr(_scaling, f"{name}_inline")(torch, x, y)

    return _pair_applied(_JOINT[name], inline, x, y)


def hypot_slopes(x: torch.Tensor | float, y: torch.Tensor | float) -> Any:
    """hypot_slope(x, y) and hypot_slope(y, x), hypot's partials at a point, on one scaling."""
    return _joint_applied("hypot_slopes", x, y)


def atan2_slopes(x: torch.Tensor | float, y: torch.Tensor | float) -> Any:
    """atan2_slope(x, y) and atan2_slope(y, x), atan2's partials at a point (but for the sign of
    one), on one scaling."""
    return _joint_applied("atan2_slopes", x, y)


def plane_slopes(x: torch.Tensor | float, y: torch.Tensor | float) -> Any:
    """hypot_slopes and atan2_slopes of (x, y) together, on one scaling: the partials of hypot and
    atan2 at a point, where each call of its own scales (x, y) anew."""
    return _joint_applied("plane_slopes", x, y)
