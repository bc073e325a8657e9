"""
One declaration per model field: a field added to a subclass of LoopedGPTConfig (with a model
class that reads it) is a train.py setting with its comment in --help, is saved in the
checkpoint, loads back, and describes the run in eval_depth.py's results, with no other edit.

    python -m pytest -q tests/test_fields.py
"""

import contextlib
import io
import json
from dataclasses import dataclass

import pytest
import torch

import eval_depth
import train
from conftest import train_args
from model import LoopedGPT, LoopedGPTConfig


@dataclass
class CappedConfig(LoopedGPTConfig):
    rms_cap: float = 0.0          # a scale control for this test: each carried state's RMS capped at this (0 = off)


class CappedGPT(LoopedGPT):
    """LoopedGPT whose carried state has its per-token RMS capped (its one branch)."""
    config_class = CappedConfig

    def loop_input(self, h, k, e=None):
        h = super().loop_input(h, k, e)
        if self.config.rms_cap > 0 and k > 1:
            rms = h.pow(2).mean(-1, keepdim=True).sqrt()
            h = h * (self.config.rms_cap / rms).clamp(max=1.0)
        return h


def test_a_new_field_is_a_setting_a_checkpoint_entry_and_a_result(tiny_data, tmp_path, capsys):
    # --help lists it under the config, with the comment written beside the field
    with pytest.raises(SystemExit):
        train.setup(['--help'], model_class=CappedGPT)
    help_text = capsys.readouterr().out
    assert '[test_fields.py: CappedConfig]' in help_text
    assert "--rms_cap=0.0" in help_text and "each carried state's RMS capped at this (0 = off)" in help_text
    with pytest.raises(train.UserError, match="unknown setting 'rms_cap'"):
        train.setup(['--rms_cap=0.5'])  # (LoopedGPT has no such field)
    # a run trained with it saves it, and its branch runs: the states' RMS stays under the cap
    out = tmp_path / 'capped'
    try:
        train.main(train_args(tiny_data, out, '--rms_cap=0.005', '--max_iters=3', '--eval_interval=3'),
                   model_class=CappedGPT)
    finally:
        torch.set_flush_denormal(False)
    ckpt = torch.load(out / 'ckpt.pt', weights_only=True)
    assert ckpt['model_args']['rms_cap'] == 0.005 and ckpt['config']['rms_cap'] == 0.005
    model, _ = CappedGPT.from_checkpoint(str(out))
    x = torch.randint(0, 256, (2, 16))
    states = model.eval().hidden_states(x, 4)
    rms = lambda h: float(h.detach().pow(2).mean(-1).sqrt().max())  # noqa: E731
    for k in (2, 3, 4):  # the state loop k starts from is capped, where uncapped it would not be
        assert rms(model.loop_input(states[k - 1], k, states[0])) <= 0.005 * (1 + 1e-5)
        assert rms(LoopedGPT.loop_input(model, states[k - 1], k, states[0])) > 0.005
    # eval_depth.py with the class: the run is described by its fields off the defaults, by their names
    err, stdout = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(stdout):
        eval_depth.main([str(out), '--device', 'cpu', '--max_tokens', '256', '--bench_iters', '1', '--out',
                         str(tmp_path / 'eval')], model_class=CappedGPT)
    assert 'rms_cap 0.005' in err.getvalue()
    run = json.loads((tmp_path / 'eval' / 'results.json').read_text())['runs'][0]
    assert run['model']['rms_cap'] == 0.005
