"""
report.py, what the scripts write and draw: perplexity at its edges, the results files and the log (strict
JSON: a non-finite number is null), a group's mean and spread, the labels and every figure of eval_depth.py
(drawn from a results dict made by hand, nothing trained, and described against tests/snapshots/figures.json),
and train.py's printed lines with their MFU and memory.

    python -m pytest -q tests/test_report.py
"""

import math

import pytest


# -----------------------------------------------------------------------------
# perplexity

def test_perplexity_by_hand_with_its_overflow_and_nan():
    from report import perplexity
    assert perplexity(0.0) == 1.0 and perplexity(1.0) == pytest.approx(math.e) and perplexity(699.0) == math.exp(699)
    assert perplexity(700.0) == math.inf and perplexity(1e9) == math.inf  # (exp overflows: inf, not an error)
    assert math.isnan(perplexity(float('nan')))  # a NaN loss stays NaN, not inf
