"""
A scale control added by a fork, with no edit to model.py: a subclass of LoopedGPTConfig with one
field and a subclass of LoopedGPT that overrides one hook (as beyond/additions.py adds the field's
controls). A config naming the class makes the field a train.py setting with its comment in --help;
the run saves it, the checkpoint records the class and loads back as it, and eval_depth.py evaluates
it and describes the run by the field.

    python -m pytest -q tests/test_fields.py
"""

import contextlib
import io
import json
from dataclasses import dataclass, fields

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
    """LoopedGPT whose carried state has its per-token RMS capped (its one hook: the loop input)."""
    config_class = CappedConfig

    def loop_input(self, h, k, e):
        h = super().loop_input(h, k, e)
        if self.config.rms_cap > 0 and k > 0:
            rms = h.pow(2).mean(-1, keepdim=True).sqrt()
            h = h * (self.config.rms_cap / rms).clamp(max=1.0)
        return h


def test_a_new_field_is_a_setting_a_checkpoint_entry_and_a_result(tiny_data, tmp_path, capsys):
    named = ['--model_class=test_fields.CappedGPT']  # (as a config file names it: model_class = '...')
    # --help lists it under the config, with the comment written beside the field
    with pytest.raises(SystemExit):
        train.setup([*named, '--help'])
    help_text = capsys.readouterr().out
    assert '[test_fields.py: CappedConfig]' in help_text
    assert "--rms_cap=0.0" in help_text and "each carried state's RMS capped at this (0 = off)" in help_text
    with pytest.raises(train.UserError, match="unknown setting 'rms_cap'"):
        train.setup(['--rms_cap=0.5'])  # (LoopedGPT has no such field)
    with pytest.raises(train.UserError, match="model_class 'nowhere.CappedGPT' cannot be loaded"):
        train.setup(['--model_class=nowhere.CappedGPT'])  # one line
    # a run trained with it saves it, and its branch runs: the states' RMS stays under the cap
    out = tmp_path / 'capped'
    try:
        train.main(train_args(tiny_data, out, *named, '--rms_cap=0.005', '--max_iters=3', '--eval_interval=3'))
    finally:
        torch.set_flush_denormal(False)
    ckpt = torch.load(out / 'ckpt.pt', weights_only=True)
    assert ckpt['model_args']['rms_cap'] == 0.005 and ckpt['config']['rms_cap'] == 0.005
    assert ckpt['model_class'] == 'test_fields.CappedGPT'
    model, _ = LoopedGPT.from_checkpoint(str(out))  # the class the checkpoint records
    assert type(model) is CappedGPT and model.config.rms_cap == 0.005
    x = torch.randint(0, 256, (2, 16))
    states = model.eval().hidden_states(x, 4)
    rms = lambda h: float(h.detach().pow(2).mean(-1).sqrt().max())  # noqa: E731
    for k in (1, 2, 3):  # the state loops 2..4 start from is capped, where uncapped it would not be
        assert rms(model.loop_input(states[k], k, states[0])) <= 0.005 * (1 + 1e-5)
        assert rms(LoopedGPT.loop_input(model, states[k], k, states[0])) > 0.005
    # eval_depth.py: the run is loaded as its class and described by its fields off the defaults, by their names
    err, stdout = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(stdout):
        eval_depth.main([str(out), '--device', 'cpu', '--max_tokens', '256', '--bench_iters', '1', '--out',
                         str(tmp_path / 'eval')])
    assert 'rms_cap 0.005' in err.getvalue()
    run = json.loads((tmp_path / 'eval' / 'results.json').read_text())['runs'][0]
    assert run['model']['rms_cap'] == 0.005


def test_an_older_checkpoint_loads_as_the_class_its_fields_name(tmp_path):
    # checkpoints written before beyond/additions.py hold beyond/'s fields in model_args and no model_class:
    # at their defaults the model is the paper's (the fields dropped); off them, the class that declares them
    from beyond.additions import FieldGPT
    from beyond.exit_train import ExitTrainedGPT, ExitTrainConfig
    from model import MOVED
    shape = dict(vocab_size=16, block_size=8, n_layer=1, n_head=2, n_embd=8, n_loops=2, dropout=0.0)
    x = torch.randint(0, 16, (1, 8))
    for moved, cls in ((dict(), LoopedGPT), (dict(sandwich_norm=True, positions='none'), FieldGPT),
                       (dict(exit_train=0.25, damping=True), ExitTrainedGPT)):
        torch.manual_seed(0)
        model = cls(cls.config_class(**shape, **moved)).eval()
        old_args = {**vars(LoopedGPTConfig(**shape)), **MOVED, **moved}  # every field the older config had
        torch.save(dict(model_args=old_args, model=model.state_dict()), tmp_path / 'ckpt.pt')
        loaded, _ = LoopedGPT.from_checkpoint(str(tmp_path))
        assert type(loaded) is cls and all(getattr(loaded.config, k) == v for k, v in moved.items())
        with torch.no_grad():
            assert torch.equal(loaded.eval()(x)[0], model(x)[0])
    assert set(MOVED) == {f.name for f in fields(ExitTrainConfig)} - {f.name for f in fields(LoopedGPTConfig)}
    assert all(getattr(ExitTrainConfig(), k) == v for k, v in MOVED.items())  # (MOVED: their defaults, as declared)
