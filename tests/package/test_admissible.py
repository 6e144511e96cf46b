"""Admissibility of built rules: what the search chose is finite wherever the exact value is, on points it never saw.

The search decides on a few points per dtype; it once shipped, for atan2's
derivative, a regime split on |y| < 3.9e-14 that squared y/x, nan at
(x, y) = (1e-200, 1e-20) where the exact value (and autodiff) is -1e20.
The acceptance gate (rulegen/derive/stabilise/gate.py) validates each choice
on a disjoint sample with the special floats and mixed magnitudes; the
`accuracy` check samples the whole line the inputs allow and fails any
inf/nan where the exact value is a finite float, whatever autodiff does.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
import sympy as sp
import torch

from tests.conftest import built_package, shared_package

FOCAL = """
name: focal_as_papers_write_it
doc: The sigmoid focal loss, written with sigmoid(z) as in the paper.
inputs:
  z: {}
  y: {domain: [0, 1]}
  gamma: {static: true, default: 2.0}
forward: -(y*(1 - sigmoid(z))**gamma*log(sigmoid(z)) + (1 - y)*sigmoid(z)**gamma*log(1 - sigmoid(z)))
"""


@pytest.fixture(scope="module")
def focal(tmp_path_factory):
    import importlib

    with built_package(tmp_path_factory.mktemp("focal"), FOCAL, "rg_focal"):
        yield importlib.import_module("rg_focal.jax"), importlib.import_module("rg_focal.torch")


jax.config.update("jax_enable_x64", True)
x, y = sp.symbols("x y", real=True)


# ---------------------------------------------------------------- the generated code


def _log_uniform(rng: np.random.Generator, count: int, lo: float, hi: float) -> np.ndarray:
    magnitudes = 10.0 ** rng.uniform(np.log10(lo), np.log10(hi), count)
    return magnitudes * rng.choice([-1.0, 1.0], count)


def _bits(got: np.ndarray, exact: np.ndarray, dtype: type) -> np.ndarray:
    from rulegen.derive.measure import bits_of_error

    return bits_of_error(got.astype(dtype), exact.astype(dtype), dtype)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_atan2_and_polar_are_finite_and_within_two_bits_on_20000_mixed_points(built, dtype):
    """Value and every partial over 20,000 points log-uniform in sign and magnitude for both inputs (the whole
    range of the dtype), against an 80-bit reference whose exponent range holds x**2 + y**2."""
    jax_pkg, torch_pkg, _ = built
    rng = np.random.default_rng(46)
    lo, hi = (1e-300, 1e300) if dtype is np.float64 else (1e-37, 1e37)
    xs, ys = (_log_uniform(rng, 20_000, lo, hi).astype(dtype) for _ in range(2))
    wide_x, wide_y = xs.astype(np.longdouble), ys.astype(np.longdouble)
    norm2 = wide_x**2 + wide_y**2
    exact = {
        "theta": np.arctan2(wide_y, wide_x),
        "dtheta/dx": -wide_y / norm2,
        "dtheta/dy": wide_x / norm2,
    }
    for backend in ("jax", "torch"):
        got = _polar_partials(backend, jax_pkg if backend == "jax" else torch_pkg, xs, ys)
        for name, reference in exact.items():
            finite = np.isfinite(reference.astype(dtype))
            assert np.isfinite(got[name][finite]).all(), (backend, name)
            flushed = (np.abs(reference) < np.finfo(dtype).tiny) | (np.abs(xs) < np.finfo(dtype).tiny)
            mean = _bits(got[name][finite & ~flushed], reference[finite & ~flushed], dtype).mean()
            assert mean <= 2.0, (backend, name, mean)


def _polar_partials(backend: str, pkg: object, xs: np.ndarray, ys: np.ndarray) -> dict[str, np.ndarray]:
    if backend == "jax":
        f = lambda a, b: pkg.polar(a, b)[1]  # noqa: E731
        theta, (dx, dy) = jax.vmap(jax.value_and_grad(f, argnums=(0, 1)))(xs, ys)
        return {"theta": np.asarray(theta), "dtheta/dx": np.asarray(dx), "dtheta/dy": np.asarray(dy)}
    a, b = torch.from_numpy(xs).requires_grad_(), torch.from_numpy(ys).requires_grad_()
    theta = pkg.polar(a, b)[1]
    dx, dy = torch.autograd.grad(theta.sum(), (a, b))
    return {"theta": theta.detach().numpy(), "dtheta/dx": dx.numpy(), "dtheta/dy": dy.numpy()}


def _focal_reference(z: np.ndarray, y: np.ndarray, gamma: float) -> tuple[np.ndarray, np.ndarray]:
    """The loss and d/dz in float64 by the stable forms (optax's sigmoid_focal_loss writes these)."""
    from scipy.special import expit

    log_p, log_q = -np.logaddexp(0, -z), -np.logaddexp(0, z)
    p, q = expit(z), expit(-z)
    value = -(y * q**gamma * log_p + (1 - y) * p**gamma * log_q)
    # d/dz: p' = p q; d log p = q, d log q = -p.
    dz = -(y * (-gamma * q**gamma * p * log_p + q**gamma * q) + (1 - y) * (gamma * p**gamma * q * log_q - p**gamma * p))
    return value, dz


@pytest.mark.parametrize("label", [0.0, 0.25, 1.0])
def test_a_focal_loss_as_papers_write_it_is_finite_and_right_at_every_float32_logit(focal, label):
    # Up to |z| = 1e38: beyond, torch's backward computes gamma * sigmoid(z)**gamma * softplus(z) (inf at
    # z = 2.2e38) before sigmoid(-z) = 0 multiplies it (nan): an order of operations the search does not
    # measure yet (it measures sympy's order in numpy, not the planner's).
    jax_pkg, torch_pkg = focal
    z = np.concatenate([-np.geomspace(1e38, 1e-30, 400), [0.0], np.geomspace(1e-30, 1e38, 400)]).astype(np.float32)
    labels = np.full_like(z, label)
    value, dz = _focal_reference(z.astype(np.float64), labels.astype(np.float64), 2.0)
    zt = torch.from_numpy(z).requires_grad_()
    out = torch_pkg.focal_as_papers_write_it(zt, torch.from_numpy(labels))
    (grad,) = torch.autograd.grad(out.sum(), zt)
    f = lambda a, b: jax_pkg.focal_as_papers_write_it(a, b).sum()  # noqa: E731
    jax_value = np.asarray(jax_pkg.focal_as_papers_write_it(z, labels))
    jax_grad = np.asarray(jax.grad(f)(z, labels))
    for got_value, got_grad in ((out.detach().numpy(), grad.numpy()), (jax_value, jax_grad)):
        assert np.isfinite(got_value).all() and np.isfinite(got_grad).all()
        normal = np.abs(value) >= np.finfo(np.float32).tiny
        assert _bits(got_value[normal], value[normal], np.float32).mean() <= 2.0
        normal = np.abs(dz) >= np.finfo(np.float32).tiny
        assert _bits(got_grad[normal], dz[normal], np.float32).mean() <= 2.0


POISSON = """
name: poisson_as_torch_writes_it
doc: The Poisson log-mass as torch.distributions.Poisson.log_prob writes it.
inputs:
  k: {assume: nonnegative}
  rate: {assume: positive}
forward: xlogy(k, rate) - rate - loggamma(k + 1)
"""


@pytest.fixture(scope="session")
def poisson(tmp_path_factory):
    """The Poisson rule built once per run (`shared_package`): each dtype's test built it again."""
    import importlib

    with shared_package(tmp_path_factory, POISSON, "rg_poisson"):
        yield (
            importlib.import_module("rg_poisson.jax").poisson_as_torch_writes_it,
            importlib.import_module("rg_poisson.torch").poisson_as_torch_writes_it,
        )


@pytest.mark.parametrize(("dtype", "sizes"), [(np.float64, (1e305, 1e307, 1.7e308)), (np.float32, (1e36, 3.4e38))])
def test_a_poisson_log_mass_is_finite_and_accurate_at_counts_near_the_largest_float(poisson, dtype, sizes):
    # xlogy(k, rate) - loggamma(k + 1) is inf - inf from k = 1e307 (float64) and every bit wrong before that, where
    # the log-mass is -log(2 pi k)/2, about -356.
    import mpmath

    jax_rule, torch_rule = poisson
    counts = np.asarray(sizes, dtype=dtype)
    with mpmath.workprec(1200):
        exact = np.asarray(
            [float(mpmath.mpf(c) * mpmath.log(c) - c - mpmath.loggamma(mpmath.mpf(c) + 1)) for c in counts.tolist()]
        )
    value = np.asarray(jax_rule(counts, counts))
    gradients = jax.grad(lambda k, r: jax_rule(k, r).sum(), argnums=(0, 1))(counts, counts)
    assert np.all(_bits(value, exact, dtype) <= 2), value
    assert all(np.all(np.isfinite(np.asarray(g))) for g in gradients)
    k, rate = (torch.tensor(counts, requires_grad=True) for _ in range(2))
    out = torch_rule(k, rate)
    assert np.all(_bits(out.detach().numpy(), exact, dtype) <= 2), out
    assert all(bool(torch.isfinite(g).all()) for g in torch.autograd.grad(out.sum(), (k, rate)))
