"""Section 3 of the contract for snippet forwards: derivatives against autodiff of the forward body in float64."""

from __future__ import annotations

import jax

from rulegen.spec.rules import read_rule_file

jax.config.update("jax_enable_x64", True)


def test_another_seed_draws_other_cotangents_and_tangents_and_the_same_seed_the_same():
    import dataclasses

    import numpy as np

    from rulegen.check import accuracy_snippet
    from rulegen.check.subject import Subject

    rule = read_rule_file_text("name: seeded\ninputs: [x, y]\nforward: x * y\n")
    subject = Subject(rule, None, None, [np.ones(4), np.ones(4)], [0, 1], [0], 1e-6, 1e-6, np.random.default_rng(0))

    def draws(seed):
        point = next(accuracy_snippet._points(dataclasses.replace(subject, seed=seed)))
        return np.concatenate([*point.tangents, point.cotangent_draws.standard_normal(4)])

    assert np.array_equal(draws(0), draws(0))
    assert not np.isclose(draws(0), draws(1)).any()


def read_rule_file_text(text):
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "rule.yaml"
        path.write_text(text)
        (rule,) = read_rule_file(path)
    return rule
