"""
The learned exit gate (exit_gate.py): its labels by hand, its training learns from the state
(and a control with shuffled labels does not), a gate saved with a run loads back and decodes
the same exits, and python -m beyond.sample and python -m beyond.eval_decode take it as a criterion, or say in one line
how to train one. Its held-out loss is recomputed (trained on other windows than it is scored on), its base rate
clamped off 0 and 1, a trained gate is confident where its label says exit, and a checkpoint file where a run
folder goes gets the gate beside it.

    python -m pytest -q tests/test_exit_gate.py
"""

import contextlib
import copy
import json
import math
import os
import re
import time
from contextlib import nullcontext
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from beyond import eval_decode
from beyond import exit_gate, exits
import beyond.sample as sample_py
from beyond.decoder import decode, new_cache
from beyond.exit_gate import fit
from model import LoopedGPT, LoopedGPTConfig
from configurator import UserError
from conftest import FIELDS, between
from test_model import D

K = 3


@pytest.fixture(scope='module')
def run(tiny_data, tmp_path_factory):
    """A tiny 3-loop run trained here for a few seconds, in-process, saved as train.py saves one."""
    torch.manual_seed(0)
    args = dict(vocab_size=256, block_size=32, n_layer=1, n_head=2, n_embd=32, n_loops=K, dropout=0.0,
                readout='raw', init_std=0.02)
    model = LoopedGPT(LoopedGPTConfig(**args))
    train = np.fromfile(tiny_data / 'tiny-bytes' / 'train.bin', dtype=np.uint16).astype(np.int64)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(0)
    for _ in range(40):
        starts = torch.randint(0, len(train) - 33, (8,), generator=g).numpy()
        chunk = torch.from_numpy(train[starts[:, None] + np.arange(33)])
        _, loss = model(chunk[:, :-1], chunk[:, 1:])
        opt.zero_grad()
        loss.backward()
        opt.step()
    folder = tmp_path_factory.mktemp('gate') / 'run'
    folder.mkdir()
    torch.save(dict(model_args=args, model=model.state_dict(), iter_num=40,
                    config=dict(dataset='tiny-bytes', data_dir=str(tiny_data), seed=0)), folder / 'ckpt.pt')
    return folder, model.eval()


def test_labels_by_hand():
    ce = torch.tensor([[2.0, 1.0, 3.0],    # loop 1
                       [1.97, 1.5, 2.0],   # loop 2
                       [1.9, 0.5, 2.5]])   # loop 3 (always answers: no label)
    argmax = torch.tensor([[1, 2, 3], [1, 5, 3], [1, 6, 4]])
    # token 0: loop 1 is 0.1 above the best later (1.9): no; loop 2 is 0.07 above: within 0.1
    # token 1: later loops are better by 0.5 and 1.0: no, no; token 2: loop 2 is the best of 2..3
    want = torch.tensor([[0.0, 0.0, 0.0], [1.0, 0.0, 1.0]])
    assert torch.equal(exit_gate.gate_labels(ce, argmax, 'improve', 0.08), want)
    assert torch.equal(exit_gate.gate_labels(ce, argmax, 'improve', 0.1), torch.tensor([[1.0, 0, 0], [1, 0, 1]]))
    assert torch.equal(exit_gate.gate_labels(ce, argmax, 'agree', 0.0), torch.tensor([[1.0, 0, 0], [1, 0, 0]]))


def held_out_bce(x, y, shuffle=False):
    """x (K-1, N, C), y (K-1, N): fits a gate on the first 80% of the tokens (every loop of
    them) and returns (its BCE on the other 20%, the base rate's there)."""
    n = int(0.8 * y.size(1))
    x_fit, y_fit = x[:, :n].reshape(-1, x.size(-1)), y[:, :n].reshape(-1)
    if shuffle:
        y_fit = y_fit[torch.randperm(len(y_fit), generator=torch.Generator().manual_seed(0))]
    gate = exit_gate.fit(exits.ExitGate(x.size(-1), 'norm'), x_fit, y_fit, 300, 0.01, 1024)
    x_test, y_test = x[:, n:].reshape(-1, x.size(-1)), y[:, n:].reshape(-1)
    return exit_gate.bce(gate, x_test, y_test), F.binary_cross_entropy(y_fit.mean().expand(len(y_test)), y_test).item()


def test_training_learns_from_the_state_and_shuffled_labels_do_not(run, tiny_data):
    _, model = run
    train = np.memmap(tiny_data / 'tiny-bytes' / 'train.bin', dtype=np.uint16, mode='r')
    states, ce, argmax = exit_gate.collect(model, train, 8192, nullcontext(), 'cpu')
    assert states.shape == (K - 1, 8192, 32) and ce.shape == argmax.shape == (K, 8192)
    y = exit_gate.gate_labels(ce, argmax, 'improve', 0.0)  # (eps 0: about half the labels 1 on this tiny model)
    perm = torch.randperm(8192, generator=torch.Generator().manual_seed(1))  # windows mixed, each token's loops together
    gate, base = held_out_bce(states[:, perm], y[:, perm])
    assert gate < base - 0.006, (gate, base)  # the state says more than the base rate (0.681 vs 0.693 here)
    shuffled, base = held_out_bce(states[:, perm], y[:, perm], shuffle=True)
    assert shuffled > base - 0.003, (shuffled, base)  # the control: labels the state cannot know (0.692)


def test_a_gate_saved_with_the_run_loads_back_and_decodes_the_same_exits(run, tiny_data, capsys):
    folder, model = run
    exit_gate.main([f'--out_dir={folder}', '--device=cpu', '--tokens=2048', '--iters=50'])
    line = capsys.readouterr().err
    assert f"gate={folder / 'gate.pt'} reads=norm target=improve" in line
    assert sorted(os.listdir(folder)) == ['ckpt.pt', 'gate.pt']  # written whole (no .tmp left)
    saved = torch.load(folder / 'gate.pt', weights_only=True)
    assert saved['reads'] == 'norm' and saved['target'] == 'improve' and saved['info']['pairs'] > 0
    gate = exits.load_gate(str(folder), 'gate', model)
    trained = exits.ExitGate(32, 'norm')
    trained.linear.weight.data.copy_(saved['weight'])
    trained.linear.bias.data.copy_(saved['bias'])
    x = torch.from_numpy(np.fromfile(tiny_data / 'tiny-bytes' / 'val.bin', dtype=np.uint16)[:64].astype(np.int64)).view(2, 32)
    with torch.no_grad():
        h = model.hidden_states(x, K)[1]
        threshold = between(gate(h))  # (between two tokens' probabilities, on none)
        a = decode(model, x, new_cache(model, 2), threshold, exits.gate_criterion('gate', gate))
        b = decode(model, x, new_cache(model, 2), threshold, exits.gate_criterion('gate', trained))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) and len(set(a[1].flatten().tolist())) > 1
    # python -m beyond.sample and python -m beyond.eval_decode find it by name
    assert torch.equal(exits.resolve('gate', str(folder), model).gate.linear.weight, gate.linear.weight)
    assert set(exits.run_criteria(str(folder), model)) == {'max_prob', 'entropy', 'converge', 'angular', 'latent', 'gate'}


def test_eval_depth_scores_the_gate_against_the_oracle(run, tmp_path):
    folder, _ = run
    if not (folder / 'gate.pt').exists():
        exit_gate.main([f'--out_dir={folder}', '--device=cpu', '--tokens=2048', '--iters=50'])
    out = tmp_path / 'eval'
    eval_decode.main([str(folder), '--device=cpu', '--criteria=angular,gate', '--exit=0.5', '--stand_in=project',
                      '--max_tokens=512', '--bench_iters=1', '--max_loops=3', '--diag_tokens=32', '--out', str(out)])
    r = json.loads((out / 'results.json').read_text())['runs'][0]
    assert {e['criterion'] for e in r['early_exit']} == {'angular', 'gate'} and r['gates'] == {'gate': {'reads': 'norm'}}
    front = r['exit_frontier']
    assert set(front['teacher_forced']) == {'angular', 'gate'}
    assert front['at']['0.01']['oracle']['loops'] <= front['at']['0.01']['gate']['loops']  # the oracle bounds it
    assert (out / 'exit_frontier_run.png').read_bytes()[:4] == b'\x89PNG'


def test_a_missing_or_foreign_gate_and_bad_settings_are_one_line(run, tmp_path):
    folder, model = run
    for call in (lambda: exits.load_gate(str(tmp_path), 'gate-raw', model),
                 lambda: sample_py.main([f'--out_dir={folder}', '--device=cpu', '--exit_criterion=gate-raw'])):
        with pytest.raises(UserError) as e:
            call()
        assert 'python -m beyond.exit_gate --out_dir=' in str(e.value) and '--name=gate-raw' in str(e.value)
    with pytest.raises(SystemExit) as e:  # python -m beyond.eval_decode: one line, naming the command
        eval_decode.main([str(folder), '--criteria=max_prob,gate-raw', '--out', str(tmp_path / 'x')])
    assert str(e.value.code).startswith('python -m beyond.eval_decode: error: ') and 'python -m beyond.exit_gate' in str(e.value.code)
    with pytest.raises(SystemExit) as e:
        eval_decode.main([str(folder), '--criteria=margin', '--out', str(tmp_path / 'x')])
    assert '--criteria' in str(e.value.code) and '\n' not in str(e.value.code)
    assert 'exit_criterion' in pytest.raises(UserError, sample_py.check_settings,
                                             dict(sample_py.SETTINGS, exit_criterion='margin')).value.args[0]
    exits.save_gate(str(tmp_path / 'gate.pt'), exits.ExitGate(32), model, {})
    assert exits.load_gate(str(tmp_path), 'gate', model) is not None
    later = copy.deepcopy(model)  # the same run a little further on: its head's sum 0.1% from the one the gate read
    later.lm_head.weight.data.mul_(1.001)
    for other in (LoopedGPT(model.config), later):  # another checkpoint of the same shape, and that one
        with pytest.raises(UserError, match='another checkpoint'):
            exits.load_gate(str(tmp_path), 'gate', other)
    # a head whose weights sum to about 0: the same checkpoint's sum, rounded otherwise elsewhere, is within 1e-6
    # absolute (no relative tolerance of a sum near 0 allows it); 1e-5 off is another checkpoint
    centred = copy.deepcopy(model)
    centred.lm_head.weight.data -= centred.lm_head.weight.data.mean()
    assert abs(exits.fingerprint(centred)) < 1e-3
    for off, same in ((5e-7, True), (1e-5, False)):
        exits.save_gate(str(tmp_path / 'gate-c.pt'), exits.ExitGate(32), centred, {})
        saved = torch.load(tmp_path / 'gate-c.pt', weights_only=True)
        torch.save(dict(saved, fingerprint=saved['fingerprint'] + off), tmp_path / 'gate-c.pt')
        with (contextlib.nullcontext() if same else pytest.raises(UserError, match='another checkpoint')):
            exits.load_gate(str(tmp_path), 'gate-c', centred)
    for settings, needle in ((dict(reads='scale'), 'reads'), (dict(target='loss'), 'target'),
                             (dict(name='exit'), 'name'), (dict(holdout=1.0), 'holdout'), (dict(tokens=0), 'tokens')):
        with pytest.raises(UserError, match=needle):
            exit_gate.check_settings(dict(exit_gate.SETTINGS, **settings))
    with pytest.raises(UserError, match='no checkpoint'):
        exit_gate.main([f'--out_dir={tmp_path / "nowhere"}', '--device=cpu'])


class Touch:
    """A pickle that, loaded with weights_only=False, creates its file: a gate file must not run code."""
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, 'w'))


def test_a_gate_file_is_loaded_as_weights_only_and_runs_no_code(run, tmp_path):
    folder, model = run
    touched = tmp_path / 'touched'
    torch.save(dict(weight=Touch(str(touched))), tmp_path / 'gate-x.pt')
    with pytest.raises(UserError, match='is not a gate written by beyond/exit_gate.py'):
        exits.load_gate(str(tmp_path), 'gate-x', model)
    assert not touched.exists()


def test_the_gate_records_its_settings_and_its_seed_decides_its_minibatches(run, tmp_path):
    # the saved gate says what it was fitted with (the eps and tokens given, not the defaults), and the seed
    # setting is the fit's: the gate starts from zero weights, so only its minibatches' draw can differ, and
    # two seeds give two gates, one seed the same gate again (each run in a folder of its own)
    folder, _ = run
    gates = {}
    for i, seed in enumerate((1, 2, 1)):
        copy = tmp_path / f'run{i}'
        copy.mkdir()
        (copy / 'ckpt.pt').write_bytes((folder / 'ckpt.pt').read_bytes())
        exit_gate.main([f'--out_dir={copy}', '--device=cpu', '--tokens=1024', '--iters=20', '--batch_size=64',
                        '--eps=0.125', f'--seed={seed}'])
        saved = torch.load(copy / 'gate.pt', weights_only=True)
        assert (saved['eps'], saved['tokens'], saved['target']) == (0.125, 1024, 'improve')
        gates[i] = saved['weight']
    assert torch.equal(gates[0], gates[2]) and not torch.equal(gates[0], gates[1])


def test_the_fit_starts_its_bias_at_the_base_rates_logit_clamped_off_0_and_1():
    # fit's docstring: the bias starts at log(r / (1 - r)), r the labels' mean (clamped to [1e-4, 1 - 1e-4]), so a gate
    # of zero iterations predicts the base rate; the weights are the gate's own
    x = torch.randn(40, 8, generator=torch.Generator().manual_seed(0))
    for y, rate in ((torch.tensor([1.0] * 10 + [0.0] * 30), 0.25), (torch.ones(40), 1 - 1e-4), (torch.zeros(40), 1e-4)):
        gate = exit_gate.fit(exits.ExitGate(8, 'norm'), x, y, 0, 0.05, 16)
        assert gate.linear.bias.item() == pytest.approx(math.log(rate / (1 - rate)), rel=1e-4)  # (r in float32)
        assert torch.sigmoid(gate.linear.bias).item() == pytest.approx(rate, rel=1e-4)


def test_the_fit_draws_its_minibatches_from_its_seed_alone():
    # the fit's own generator, seeded by `seed`: the global RNG's state neither changes the gate nor is advanced
    x = torch.randn(200, 8, generator=torch.Generator().manual_seed(0))
    y = (x[:, 0] > 0).float()
    fitted = []
    for global_seed in (1, 2):
        gate = exits.ExitGate(8, 'norm')  # (its Linear's init draws from the global RNG: made first)
        torch.manual_seed(global_seed)
        before = torch.get_rng_state()
        exit_gate.fit(gate, x, y, 5, 0.05, 16, seed=7)
        assert torch.equal(torch.get_rng_state(), before)
        fitted.append(gate.linear.weight.detach().clone())
    assert torch.equal(fitted[0], fitted[1])
    other = exit_gate.fit(exits.ExitGate(8, 'norm'), x, y, 5, 0.05, 16, seed=8).linear.weight
    assert not torch.equal(fitted[0], other.detach())


def test_train_gate_fits_with_the_batch_size_and_the_seed_it_is_given():
    # the batch_size and seed settings are the fit's, each its own: train_gate's gate is the one fitted by hand on
    # its training pairs (the first half's windows, holdout 0.5) with that batch size and that seed, and another
    # batch size under the same seed gives another gate. 2 loops, 40 tokens in windows of 4, 'agree' labels
    N = 40
    g = torch.Generator().manual_seed(0)
    states = torch.randn(1, N, 8, generator=g)
    agree = torch.rand(N, generator=g) < 0.5
    argmax = torch.stack([torch.where(agree, 0, 1), torch.zeros(N, dtype=torch.long)])
    model = SimpleNamespace(config=SimpleNamespace(block_size=4))
    gates = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(exit_gate, 'collect', lambda *a, **k: (states, torch.zeros(2, N), argmax))
        for batch_size in (3, 5):
            gate, info = exit_gate.train_gate(model, None, N, 'norm', 'agree', 0.0, iters=10, lr=0.1,
                                              batch_size=batch_size, holdout=0.5, ctx=None, device='cpu', seed=4)
            gates[batch_size] = torch.cat([gate.linear.weight.flatten(), gate.linear.bias]).detach()
    assert info['pairs'] == 20
    by_hand = fit(exits.ExitGate(8, 'norm'), states[0, :20], agree[:20].float(), 10, 0.1, 5, seed=4)
    assert torch.equal(gates[5], torch.cat([by_hand.linear.weight.flatten(), by_hand.linear.bias]).detach())
    assert not torch.allclose(gates[3], gates[5])


# -----------------------------------------------------------------------------
# a checkpoint file where a run folder goes: the gate is written beside it

def test_exit_gate_given_a_checkpoint_file_writes_the_gate_beside_it_and_reports_its_losses(
        bare_checkpoint, tiny_data, capsys, monkeypatch):
    loaded, load_run = [], exit_gate.load_run  # (the device the run is loaded on: on a GPU, the gate's)
    monkeypatch.setattr(exit_gate, 'load_run', lambda path, device, *a, **kw: loaded.append(device) or
                        load_run(path, device, *a, **kw))
    t0 = time.perf_counter()
    try:
        exit_gate.main([f'--out_dir={bare_checkpoint}', f'--data_dir={tiny_data / "tiny-bytes"}', '--device=cpu',
                        '--tokens=512', '--iters=5'])
    finally:
        torch.set_flush_denormal(False)  # (setup_device turns it on process-wide)
    took = time.perf_counter() - t0
    assert loaded == ['cpu']  # the device asked for
    gate = bare_checkpoint.parent / 'gate.pt'
    info = torch.load(gate, weights_only=True)['info']
    line = capsys.readouterr().err
    assert line.startswith(f"gate={gate} reads=norm target=improve pairs={info['pairs']} "), line
    # the summary line's numbers are the saved ones: the base rate's held-out BCE -> the gate's
    got = re.search(r'base_rate=(\S+) heldout_bce=(\S+) -> (\S+) seconds=', line).groups()
    assert info['heldout_pairs'] > 0
    assert got == (f"{info['base_rate']:.3f}", f"{info['heldout_bce_base']:.4f}", f"{info['heldout_bce']:.4f}")
    assert 0 <= float(re.search(r' seconds=(\S+)$', line.strip()).group(1)) <= took + 0.05  # (the run's own time)


# -----------------------------------------------------------------------------
# the base rate: clamped off 0 and 1 as the gate's starting bias is

@pytest.mark.parametrize('train_label', [1.0, 0.0])
def test_a_base_rate_of_0_or_1_is_clamped_as_the_gate_starts_from_it(train_label, monkeypatch):
    # 2 loops, 40 tokens in windows of 4: the first 20 train (every label train_label), the last 20
    # are held out (half each); the states say nothing (a zero-weight gate reads only its bias)
    N = 40
    agree = torch.ones(N, dtype=torch.bool)
    agree[20:] = torch.arange(20) % 2 == 0
    if train_label == 0.0:
        agree[:20] = False
    argmax = torch.stack([torch.where(agree, 0, 1), torch.zeros(N, dtype=torch.long)])  # 'agree': loop 1's is loop 2's
    states = torch.randn(1, N, 8, generator=torch.Generator().manual_seed(0))
    monkeypatch.setattr(exit_gate, 'collect', lambda *a, **k: (states, torch.zeros(2, N), argmax))
    model = SimpleNamespace(config=SimpleNamespace(block_size=4))
    gate, info = exit_gate.train_gate(model, None, N, 'norm', 'agree', 0.0, iters=0, lr=0.01, batch_size=8,
                                      holdout=0.5, ctx=None, device='cpu')
    assert info['base_rate'] == train_label and info['heldout_pairs'] == 20
    # a label the training pairs never showed costs -log(1e-4) nats, not torch's cap of 100; and the
    # untrained gate (its bias the clamped base rate's logit) is the base rate's constant exactly
    want = 0.5 * -math.log(1e-4) + 0.5 * -math.log(1 - 1e-4)
    assert info['heldout_bce_base'] == pytest.approx(want, rel=1e-4)
    assert info['heldout_bce'] == pytest.approx(info['heldout_bce_base'], rel=1e-4)


# -----------------------------------------------------------------------------
# the trained gate's sign: confident where its label says exit

def test_a_trained_gate_is_confident_where_its_label_says_exit():
    # logistic regression on states labelled 1 where their first channel is positive: the trained gate's
    # exit probability is high there and low elsewhere (a flipped score would invert it)
    g = torch.Generator().manual_seed(0)
    h = torch.randn(2000, D, generator=g)
    y = (h[:, 0] > 0).float()
    gate = fit(exits.ExitGate(D, 'norm'), h, y, iters=200, lr=0.05, batch_size=512)
    with torch.no_grad():
        p = exits.gate_criterion('gate', gate)(h, None)
    assert p[y == 1].mean() > 0.8 and p[y == 0].mean() < 0.2


# -----------------------------------------------------------------------------
# the held-out loss: the gate is trained on other windows than it is scored on, each number recomputed

def test_the_exit_gate_is_trained_on_other_windows_than_it_is_scored_on(monkeypatch):
    torch.manual_seed(0)
    K, V, C = 3, 32, 16
    model = LoopedGPT(LoopedGPTConfig(vocab_size=V, block_size=8, n_layer=1, n_head=2, n_embd=C, n_loops=K,
                                      dropout=0.0, readout='raw', init_std=0.3)).eval()
    # by hand: 20 windows of 8 evenly spaced over the data; the last 4 (holdout 0.2, whole windows) are held out.
    # Each window starts with a token of its own, so no two windows have a state in common
    data = np.random.default_rng(0).integers(0, V, 2000)
    starts = np.linspace(0, len(data) - 9, 20).astype(np.int64)
    data[starts] = np.arange(20)
    fitted, real_fit = [], exit_gate.fit
    monkeypatch.setattr(exit_gate, 'fit', lambda gate, x, y, *a, **kw: fitted.append(x) or real_fit(gate, x, y, *a, **kw))
    gate, info = exit_gate.train_gate(model, data, 160, 'raw', 'improve', 0.05, 20, 0.01, 64, 0.2, nullcontext(), 'cpu')
    x = torch.from_numpy(data[starts[:, None] + np.arange(9)])
    with torch.no_grad():
        H = torch.stack(model.hidden_states(x[:, :-1], K)[1:K]).float()  # (K-1, windows, 8, C): loops 1..K-1
        ce = torch.stack([F.cross_entropy(model(x[:, :-1], n_loops=k)[0].transpose(1, 2), x[:, 1:], reduction='none')
                          for k in range(1, K + 1)])  # (K, windows, 8)
    labels = (ce[:-1] <= torch.stack([ce[k:].min(0).values for k in range(K - 1)]) + 0.05).float()  # within eps of the best later
    train_x, test_x = H[:, :16].reshape(-1, C), H[:, 16:].reshape(-1, C)
    train_y, test_y = labels[:, :16].reshape(-1), labels[:, 16:].reshape(-1)
    (seen,) = fitted
    distance = lambda a, b: torch.cdist(a, b, compute_mode='donot_use_mm_for_euclid_dist')  # noqa: E731  (exact)
    assert distance(seen, test_x).min() > 1e-2  # none of the held-out states
    assert seen.shape == train_x.shape and distance(seen, train_x).min(1).values.max() < 1e-5  # every other one
    assert set(info) == set(FIELDS['beyond.exit_gate info'])
    assert (info['pairs'], info['heldout_pairs']) == (len(train_x), len(test_x))
    assert info['base_rate'] == pytest.approx(train_y.mean().item(), rel=1e-6)
    assert info['label_rate_by_loop'] == pytest.approx(labels.mean((1, 2)).tolist(), rel=1e-6)
    assert gate.scale == pytest.approx(train_x.pow(2).mean(-1).sqrt().mean().item(), rel=1e-5)
    p = lambda states: torch.sigmoid(gate.linear(states / gate.scale).squeeze(-1)).detach()  # noqa: E731
    rate = train_y.mean()
    assert info['heldout_bce'] == pytest.approx(F.binary_cross_entropy(p(test_x), test_y).item(), rel=1e-5)
    assert info['train_bce'] == pytest.approx(F.binary_cross_entropy(p(train_x), train_y).item(), rel=1e-5)
    assert info['heldout_bce_base'] == pytest.approx(F.binary_cross_entropy(rate.expand(len(test_y)), test_y).item(),
                                                     rel=1e-5)
    assert 0 < rate < 1  # (both labels met)


def test_a_gate_may_be_named_gate_or_gate_dash_anything_the_criteria_take():
    """check_settings: the name is 'gate' or starts with 'gate-' (gate, gate-raw, ...), as beyond/exits.py names them."""
    for name in ('gate', 'gate-raw', 'gate-norm-2'):
        exit_gate.check_settings(dict(exit_gate.SETTINGS, name=name))
        assert exits.is_gate(name)
    for name in ('gates', 'gate-', 'gate-a b'):
        with pytest.raises(UserError, match='name'):
            exit_gate.check_settings(dict(exit_gate.SETTINGS, name=name))


def test_each_count_setting_takes_its_edge_and_refuses_one_past_it_alone():
    # tokens, iters and batch_size >= 1, eps >= 0, lr > 0: the edge itself runs, one step past it is refused, each
    # setting alone (the others at their defaults)
    edge = dict(tokens=1, iters=1, batch_size=1, eps=0.0, lr=1e-9)
    exit_gate.check_settings(dict(exit_gate.SETTINGS, **edge))
    for key, past in dict(tokens=0, iters=0, batch_size=0, eps=-1e-9, lr=0.0).items():
        with pytest.raises(UserError):
            exit_gate.check_settings(dict(exit_gate.SETTINGS, **{key: past}))


def test_a_fit_without_a_seed_is_the_fit_of_train_gates_default_seed_0():
    # fit's default seed is train_gate's (seed=0): a gate fitted by hand with no seed is the one a run's default
    # training fits, and another seed draws other minibatches (the check can tell seeds apart)
    x = torch.randn(200, 8, generator=torch.Generator().manual_seed(0))
    y = (x[:, 0] > 0).float()

    def fitted(**seed):
        gate = exit_gate.fit(exits.ExitGate(8, 'norm'), x, y, 5, 0.05, 16, **seed)
        return torch.cat([gate.linear.weight.flatten(), gate.linear.bias]).detach()

    import inspect
    assert inspect.signature(exit_gate.train_gate).parameters['seed'].default == 0
    assert torch.equal(fitted(), fitted(seed=0)) and not torch.equal(fitted(), fitted(seed=1))
