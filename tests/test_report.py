"""
report.py, what the scripts write and draw: perplexity at its edges, the results files and the log (strict
JSON: a non-finite number is null), a group's mean and spread, the labels and every figure of eval_depth.py
(drawn from a results dict made by hand, nothing trained, and described against tests/snapshots/figures.json),
and train.py's printed lines with their MFU and memory.

    python -m pytest -q tests/test_report.py
"""

import json
import math
from dataclasses import asdict, fields

import numpy as np
import pytest

import report
from beyond.exit_train import ExitTrainConfig
from conftest import another, strict
from model import SIZE, LoopedGPTConfig
from report import settings_of


# -----------------------------------------------------------------------------
# perplexity

def test_perplexity_by_hand_with_its_overflow_and_nan():
    from report import perplexity
    assert perplexity(0.0) == 1.0 and perplexity(1.0) == pytest.approx(math.e) and perplexity(699.0) == math.exp(699)
    assert perplexity(700.0) == math.inf and perplexity(1e9) == math.inf  # (exp overflows: inf, not an error)
    assert math.isnan(perplexity(float('nan')))  # a NaN loss stays NaN, not inf


# -----------------------------------------------------------------------------
# NaN and inf in results.json and log.jsonl: null, valid JSON for a strict parser

NON_FINITE = dict(loss=float('inf'), ce=[float('nan'), 1.5, -float('inf')], nested={'radial': (float('nan'),)},
                  numpy=np.float64('inf'), iter=3, name='x')


AS_NULL = dict(loss=None, ce=[None, 1.5, None], nested={'radial': [None]}, numpy=None, iter=3, name='x')


def test_non_finite_numbers_are_written_as_null_to_results_and_the_log(tmp_path, capsys):
    report.write_json(str(tmp_path / 'results.json'), NON_FINITE)
    assert strict((tmp_path / 'results.json').read_text()) == AS_NULL
    report.log(str(tmp_path), NON_FINITE, 'a line')
    report.log(str(tmp_path), dict(NON_FINITE, iter=4), 'another')
    lines = (tmp_path / 'log.jsonl').read_text().splitlines()
    assert [strict(line) for line in lines] == [AS_NULL, dict(AS_NULL, iter=4)]
    assert capsys.readouterr().out == 'a line\nanother\n'


def test_a_results_file_has_null_for_a_non_finite_value_and_refuses_one_it_cannot_null(tmp_path):
    path = tmp_path / 'results.json'
    report.write_json(str(path), dict(ppl=[5.0, float('nan')], loss={'K=1': float('inf')}))
    assert json.loads(path.read_text()) == dict(ppl=[5.0, None], loss={'K=1': None})
    # a non-finite dict key is no value json_safe makes null: an error, not a file with a 'NaN' in it
    with pytest.raises(ValueError):
        report.write_json(str(tmp_path / 'keys.json'), {float('nan'): 1.0})
    assert not (tmp_path / 'keys.json').exists()


def test_the_log_refuses_a_non_finite_number_it_cannot_null_as_a_results_file_does(tmp_path, capsys):
    # log.jsonl is written by the rule of write_json: what json_safe cannot make null (a dict's key) is an
    # error, not a line with a 'NaN' or 'Infinity' in it
    for key in (float('nan'), float('inf')):
        with pytest.raises(ValueError):
            report.log(str(tmp_path), {key: 1.0, 'iter': 3}, 'a line')
    report.log(str(tmp_path), {'iter': 4, 'loss': float('nan')}, 'another')  # (a value: null)
    assert (tmp_path / 'log.jsonl').read_text() == '{"iter": 4, "loss": null}\n'


# -----------------------------------------------------------------------------
# the label a group of seeds goes by

def test_every_model_field_off_its_default_is_in_the_label():
    # the label a group of seeds goes by (report.label, with its settings) names every field that splits a
    # condition, but the size fields (in the run's name) and the depth, told as K
    default = ExitTrainConfig()
    run = dict(model=asdict(default), trained_K=default.n_loops, random_depth=False)
    plain = settings_of(run)
    assert plain == settings_of(dict(run, model=asdict(LoopedGPTConfig())))  # beyond/'s fields at their defaults: unnamed
    for f in fields(ExitTrainConfig):
        if f.name in SIZE and f.name != 'n_loops':
            continue
        value = another(f.name, getattr(default, f.name))
        moved = dict(run, model=dict(run['model'], **{f.name: value}),
                     trained_K=value if f.name == 'n_loops' else run['trained_K'])
        assert settings_of(moved) != plain, f.name
        if f.name not in ('readout', 'loss', 'n_loops'):  # (those are always written, by their value)
            assert f.name in settings_of(moved), f.name
    assert settings_of(dict(run, random_depth=True)) != plain
