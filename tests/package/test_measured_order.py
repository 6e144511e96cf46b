"""The generated code computes the form the stabilising search chose as the search measured it: the value numpy
gives for the chosen form (`as_computed`) is the value both backends give, to the ulp, where the order a sum is
added in decides it."""

from __future__ import annotations

import importlib

import mpmath
import numpy as np
import pytest
import torch

from rulegen.derive.partials import derive_rule
from rulegen.derive.stabilise.gate import as_computed
from rulegen.derive.stabilise.points import _evaluated
from tests.conftest import built_package, rules_from

# torch NegativeBinomial.log_prob, as benchmarks/distributions writes it.
NEGATIVE_BINOMIAL = """\
rules:
  - name: negative_binomial_log_pmf
    inputs: {k: {domain: {ge: 0}}, r: {assume: positive, domain: {gt: 0}}, logits: {}}
    forward: >-
      r * log(sigmoid(-logits)) + k * log(sigmoid(logits))
      - (-loggamma(r + k) + loggamma(1 + k) + loggamma(r))
"""
# k*log1p(r/k) and r*log1p(k/r) of the gamma series are 6.9e299 each and cancel -(k + r)*log(2) exactly: the
# planner's order added -log(k)/2 to them first (-1.27 in both backends).
POINTS = [(1e300, 1e300, 0.0), (1e20, 1e20, 0.0), (1e300, 1e300, 1.0), (7.5, 3.25, -0.5)]


def _exact(k: float, r: float, logits: float) -> float:
    with mpmath.workdps(700):  # the terms are 1e300 and the value 1e2: 300 digits cancel
        k_, r_, z = (mpmath.mpf(v) for v in (k, r, logits))
        log_sigmoid = lambda u: -mpmath.log1p(mpmath.exp(-u))  # noqa: E731
        value = r_ * log_sigmoid(-z) + k_ * log_sigmoid(z)
        return float(value + mpmath.loggamma(r_ + k_) - mpmath.loggamma(1 + k_) - mpmath.loggamma(r_))


@pytest.mark.slow
@pytest.mark.costly  # a cold search of a negative binomial: minutes under load, a lane's tail when handed out last
def test_generated_value_is_the_measured_one(tmp_path):
    (rule,) = rules_from(tmp_path, NEGATIVE_BINOMIAL)
    derivation = derive_rule(rule)
    ((_, chosen),) = derivation.forward
    symbols = [derivation.symbols[i.name] for i in rule.inputs]
    columns = [np.asarray([p[j] for p in POINTS]) for j in range(3)]
    measured = _evaluated(as_computed(chosen), symbols, columns, np.float64)
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    with built_package(tmp_path, NEGATIVE_BINOMIAL, "rg_measured_order"):
        torch_value = importlib.import_module("rg_measured_order.torch").negative_binomial_log_pmf(
            *(torch.tensor(c) for c in columns)
        )
        jax_value = importlib.import_module("rg_measured_order.jax").negative_binomial_log_pmf(
            *(jax.numpy.asarray(c) for c in columns)
        )
    exact = np.asarray([_exact(*p) for p in POINTS])
    for got in (torch_value.numpy(), np.asarray(jax_value)):
        # A few ulps apart at most: torch's lgamma and softplus are not scipy's to the ulp (7 ulps at k = 7.5).
        np.testing.assert_allclose(got, measured, rtol=16 * np.finfo(np.float64).eps, atol=0)
        np.testing.assert_allclose(got, exact, rtol=2.0**-48, atol=0)


#: How far apart the generated code and numpy may be: the libraries' functions differ by ulps (torch's gamma and
#: scipy's by 256 at 1e252, erfc by 40), a sum added in another order than measured by far more (2**52 at
#: k = r = 1e300 above).
LIBRARY_ULPS = 2.0**-36


def _apart(got: np.ndarray, measured: np.ndarray) -> np.ndarray:
    """Where both are finite normal numbers and more than LIBRARY_ULPS apart, relatively."""
    both = np.isfinite(measured) & np.isfinite(got) & (np.abs(measured) >= np.finfo(np.float64).tiny)
    with np.errstate(all="ignore"):
        return both & (np.abs(got - measured) > LIBRARY_ULPS * np.abs(measured))


@pytest.mark.slow
def test_every_bundled_form_is_computed_as_measured(built):
    """Each rule of rules/ in one float output of float arrays: its value and every partial, as torch and JAX
    compute them at points over the float line, are numpy's value of the form derived or chosen (`as_computed`)."""
    from rulegen.derive.derivation import Derivation
    from rulegen.derive.measure import assumed_domain, sample_floats

    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    jax_pkg, torch_pkg, rules = built
    rng = np.random.default_rng(46)
    found = []
    for rule in rules.values():
        if rule.complex or rule.structured or len(rule.outputs) != 1:
            continue
        if any(i.static or i.dtype != "float" for i in rule.inputs):
            continue
        derivation = derive_rule(rule)
        if not isinstance(derivation, Derivation):
            continue
        out = rule.outputs[0].name
        symbols = [derivation.symbols[i.name] for i in rule.inputs]
        columns = [sample_floats(assumed_domain(i), 256, rng, np.float64) for i in rule.inputs]
        xs = [torch.tensor(c, requires_grad=True) for c in columns]
        value = getattr(torch_pkg, rule.name)(*xs)
        torch_grads = torch.autograd.grad(value.sum(), xs, allow_unused=True)
        jax_value, pullback = jax.vjp(getattr(jax_pkg, rule.name), *(jax.numpy.asarray(c) for c in columns))
        jax_grads = pullback(jax.numpy.ones_like(jax_value))
        computed = {out: (value.detach().numpy(), np.asarray(jax_value))}
        for inp, t, j in zip(rule.inputs, torch_grads, jax_grads, strict=True):
            computed[f"d{out}/d{inp.name}"] = (None if t is None else t.numpy(), np.asarray(j))
        forms = {out: dict(derivation.forward)[out]}
        forms |= {f"d{out}/d{i}": e for (o, i), e in derivation.vjp_partials.items() if o == out}
        for quantity, form in forms.items():
            if not form.free_symbols <= set(symbols):  # read off an output or a residual: not numpy's alone
                continue
            measured = _evaluated(as_computed(form), symbols, columns, np.float64)
            for backend, got in zip(("torch", "jax"), computed.get(quantity, ()), strict=False):
                if measured is None or got is None:
                    continue
                for k in np.flatnonzero(_apart(got, measured))[:1]:
                    point = [float(c[k]) for c in columns]
                    found.append(f"{rule.name} {quantity} {backend} at {point}: {got[k]!r}, measured {measured[k]!r}")
    assert not found, "\n".join(found)
