"""The cost model's weights are data beside the registry, measured by benchmarks.cost_weights, and decide builds."""

from __future__ import annotations

import json

import sympy as sp
from sympy.codegen.cfunctions import log1p

from benchmarks import cost_weights
from rulegen.derive.functions import BY_NAME, sigmoid
from rulegen.derive.stabilise.cost import BACKENDS, WEIGHTS, WEIGHTS_FILE, cost
from rulegen.render.build import fingerprinted_files

x = sp.Symbol("x", real=True)


def test_the_weights_are_the_data_file_s_and_a_build_s_fingerprint_covers_it():
    data = json.loads(WEIGHTS_FILE.read_text())
    assert {b: dict(w) for b, w in WEIGHTS.items()} == data["weights"]
    assert WEIGHTS_FILE.parent.name == "derive" and WEIGHTS_FILE in fingerprinted_files()


def test_every_jax_weight_of_a_registered_call_is_measured_and_recorded():
    data = json.loads(WEIGHTS_FILE.read_text())
    measured = data["measured"]["jax"]
    assert measured["load_average_before"] and measured["rounds"] >= 5
    for name in cost_weights.operations():
        assert name in measured["median_us"], name
        assert name in data["weights"]["jax"], name


def test_jax_s_sigmoid_costs_about_one_exponential_as_measured():
    """XLA computes `logistic` in about the time of one `exp` (measured 0.7-1.15x); the model said 2.4x."""
    assert WEIGHTS["jax"]["sigmoid"] <= 1.25 * WEIGHTS["jax"]["exp"]
    assert cost(sigmoid(x), "jax") < cost(1 / (1 + sp.exp(-x)), "jax") * 1.25
    assert cost(log1p(x), "jax") > cost(sp.log(1 + x), "jax")


def test_the_calibration_turns_interleaved_times_into_weights_as_documented():
    torch_times = {"add": [1.0, 2.0, 1.0], "exp": [6.0, 12.0, 7.0]}  # ratios 6, 6, 7: median 6
    assert cost_weights.weights("torch", torch_times) == {"exp": 1.5}
    jax_times = {"none": [1.0, 1.0, 2.0], "exp": [3.0, 3.0, 4.0], "log": [5.0, 4.0, 6.0]}  # (t - n)/(e - n): 2, 1.5, 2
    assert cost_weights.weights("jax", jax_times) == {"exp": 1.0, "log": 2.0}
    # Every registered function with a call in both backends is measured, as the generated code calls it.
    for name in cost_weights.operations():
        assert name in WEIGHTS["jax"] and all(name in WEIGHTS[b] for b in BACKENDS)
        function = BY_NAME.get(name)
        assert function is None or (function.jax and function.torch)
