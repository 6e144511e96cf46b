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
"""

import torch

from . import _asymptotic
from ._function import save_for_derivatives
from ._route import without_jvp


class _Zeta(torch.autograd.Function):
    # Elementwise, it batches as it is: torch.func.vmap and jacfwd need no rule of their own.
    generate_vmap_rule = True

    @staticmethod
    def forward(s, q):
        return torch.special.zeta(s, q)

    @staticmethod
    def setup_context(ctx, inputs, output):
        s, q = inputs
        # A tensor exponent is saved as tensors are (a BatchedTensor under vmap); a number as it is.
        ctx.s_is_tensor = isinstance(s, torch.Tensor)
        ctx.s = None if ctx.s_is_tensor else s
        save_for_derivatives(ctx, *((q, s) if ctx.s_is_tensor else (q,)))

    @staticmethod
    def backward(ctx, grad):
        s, q = _saved(ctx)
        return None, _reduced(grad * _derivative(s, q), q)

    @staticmethod
    def jvp(ctx, s_dot, q_dot):
        s, q = _saved(ctx)
        return q_dot * _derivative(s, q)


class _Digamma(torch.autograd.Function):
    """torch's digamma, differentiated by this module's trigamma."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return torch.special.digamma(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        save_for_derivatives(ctx, *inputs)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * polygamma(1, x)

    @staticmethod
    def jvp(ctx, x_dot):
        (x,) = ctx.saved_tensors
        return x_dot * polygamma(1, x)


class _Erfcx(torch.autograd.Function):
    """torch's erfcx, differentiated by the registry's derivative (`_asymptotic.erfcx_slope`)."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return torch.special.erfcx(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        save_for_derivatives(ctx, *inputs, output)

    @staticmethod
    def backward(ctx, grad):
        x, out = ctx.saved_tensors
        return grad * _asymptotic.erfcx_slope(torch, x, out)

    @staticmethod
    def jvp(ctx, x_dot):
        x, out = ctx.saved_tensors
        return x_dot * _asymptotic.erfcx_slope(torch, x, out)


# Applied where torch.compile traces, which refuses a Function with a `jvp`.
_ZetaCompiled = without_jvp(_Zeta)
_DigammaCompiled = without_jvp(_Digamma)
_ErfcxCompiled = without_jvp(_Erfcx)


def _saved(ctx):
    if ctx.s_is_tensor:
        q, s = ctx.saved_tensors
        return s, q
    (q,) = ctx.saved_tensors
    return ctx.s, q


def _derivative(s, q):
    """d/dq zeta(s, q), by this module's hurwitz_zeta: itself differentiable."""
    return -s * hurwitz_zeta(s + 1, q)


def _reduced(grad, like):
    # A broadcast q (0-d beside an array s) takes its gradient summed over the broadcast dimensions.
    if grad.shape == like.shape:
        return grad
    return grad.sum_to_size(like.shape)


def hurwitz_zeta(s, q):
    """The Hurwitz zeta function of `s` (a number or tensor, not differentiated) and `q`."""
    if not isinstance(q, torch.Tensor):
        q = torch.as_tensor(q, dtype=s.dtype if isinstance(s, torch.Tensor) else None)
    return (_ZetaCompiled if torch.compiler.is_compiling() else _Zeta).apply(s, q)


def _float64(x):
    return isinstance(x, torch.Tensor) and x.dtype == torch.float64


def polygamma(n, x):
    """torch.special.polygamma(n, x); in float64, trigamma (n = 1) as the Hurwitz zeta(2, x)."""
    if n == 1 and _float64(x):
        return hurwitz_zeta(2.0, x)
    return torch.special.polygamma(n, x)


def digamma(x):
    """torch.special.digamma(x); in float64, differentiated by `polygamma(1, x)` above."""
    if _float64(x):
        return (_DigammaCompiled if torch.compiler.is_compiling() else _Digamma).apply(x)
    return torch.special.digamma(x)


def erfcx(x):
    """torch.special.erfcx(x), differentiated by the registry's derivative at every order.

    torch's own, 2 x erfcx(x) - 2 / sqrt(pi), cancels as x grows (1.1e8
    float64 eps off at x = 1e4), in a rule's derivative that calls erfcx too.
    """
    return (_ErfcxCompiled if torch.compiler.is_compiling() else _Erfcx).apply(x)
