"""
Behaviour a one-line edit can break while every neighbouring test still passes (issue 39): each test
is named for what it holds and was watched failing with that line broken. Tested through the stable
surfaces (train.main, LoopedGPT's methods, eval_depth.main and its results.json, configurator, the
gate in beyond/), on data whose splits can be told apart.

    python -m pytest -q tests/test_behaviour.py
"""

import contextlib
import io
import json
import math
from contextlib import nullcontext
from dataclasses import fields

import numpy as np
import pytest
import torch
from torch.nn import functional as F
from torch.utils.flop_counter import FlopCounterMode

import eval_depth
import train
from beyond import exits
from beyond.additions import FieldGPT
from beyond.decoder import decode, new_cache
from beyond.exit_gate import fit
from conftest import train_in_process
from configurator import UserError, configure
from model import LoopedGPT, LoopedGPTConfig

V, T, D = 64, 16, 32


def tiny(cls=None, **kw):
    """The paper's model, or beyond/additions.py's where kw sets one of its fields (or cls says so)."""
    args = dict(vocab_size=V, block_size=T, n_layer=1, n_head=2, n_embd=D, n_loops=3, dropout=0.0, init_std=0.1)
    args.update(kw)
    cls = cls or (LoopedGPT if set(kw) <= {f.name for f in fields(LoopedGPTConfig)} else FieldGPT)
    torch.manual_seed(0)
    return cls(cls.config_class(**args))


def tokens(B=2, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, V, (B, T), generator=g), torch.randint(0, V, (B, T), generator=g)


# -------------------------------------------------------------------------------------
# data whose splits differ: every window of train is 'a' repeated, of val 'b' repeated, so the loss
# on a split is one number whichever windows are drawn, and the two splits' numbers differ

@pytest.fixture(scope='module')
def split_data(tmp_path_factory):
    import prepare
    root = tmp_path_factory.mktemp('splitdata')
    words = 'the loop reads out every state and the norm grows where the readout cannot see it'.split()
    (root / 'text').mkdir()
    (root / 'text' / 'train.txt').write_text('a' * 4000)
    (root / 'text' / 'valid.txt').write_text('b' * 2000)
    (root / 'text' / 'test.txt').write_text(' '.join(words[(i * 7) % len(words)] for i in range(400)) + '\n')
    prepare.main(['--text_dir', str(root / 'text'), '--tokenizer', 'bytes', '--out_dir', str(root / 'data' / 'tiny-bytes')])
    return root / 'data'


def read_log(out_dir):
    with open(out_dir / 'log.jsonl') as f:
        return [json.loads(line) for line in f]


def constant_loss(model, byte, K):
    """The model's last-loop CE at depth K on a window of one repeated byte (every window of a split above)."""
    x = torch.full((1, model.config.block_size + 1), byte)
    with torch.no_grad():
        logits, _ = model(x[:, :-1], n_loops=K)
    return F.cross_entropy(logits[0], x[0, 1:]).item()


SHORT = ('--max_iters=10', '--eval_interval=10', '--dtype=float32', '--eval_iters=1')  # ten steps: 'a' is learned, 'b' not


@pytest.fixture(scope='module')
def short_run(split_data, tmp_path_factory):
    """Ten optimizer steps of 8 windows in one micro-step each: (run folder, its log)."""
    out = tmp_path_factory.mktemp('short-run')
    train_in_process(split_data, out, *SHORT, '--batch_size=8', '--gradient_accumulation_steps=1')
    return out, read_log(out)


def test_the_validation_loss_during_training_is_the_val_splits(short_run):
    out, log = short_run
    model, _ = LoopedGPT.from_checkpoint(str(out))  # saved after the evaluation at iteration 10
    model.eval()
    (ev,) = [r for r in log if r['kind'] == 'eval' and r['iter'] == 10]
    for K in (1, 2):
        val, trn = constant_loss(model, ord('b'), K), constant_loss(model, ord('a'), K)
        assert abs(val - trn) > 0.1  # the splits can be told apart
        assert ev['val_loss'][K - 1] == pytest.approx(val, abs=1e-4)


def test_gradient_accumulation_logs_the_loss_ce_and_norms_of_the_whole_batch_whatever_its_micro_steps(
        split_data, short_run, tmp_path):
    _, log = short_run
    train_in_process(split_data, tmp_path, *SHORT, '--batch_size=4', '--gradient_accumulation_steps=2')
    a = [r for r in log if r['kind'] == 'train']
    b = [r for r in read_log(tmp_path) if r['kind'] == 'train']
    assert len(a) == len(b) == 10
    for one, two in zip(a, b):  # every window is the same, so the draw does not matter, only the sum
        assert two['loss'] == pytest.approx(one['loss'], rel=1e-5)  # not twice it
        assert two['ce'] == pytest.approx(one['ce'], rel=1e-5)
        assert two['h_norm'] == pytest.approx(one['h_norm'], rel=1e-5)  # a mean over the micro-steps, not their sum


def test_gradient_accumulation_steps_with_the_gradient_of_the_whole_batch():
    # plain SGD with lr 1 (no clip): the step is minus the gradient, so the gradient itself is compared
    x, y = (t.repeat(2, 1) for t in tokens(B=4))  # (8, T)
    steps = []
    for n_micro in (1, 2, 4):
        model = tiny(readout='raw')
        before = [p.detach().clone() for p in model.parameters()]
        opt = torch.optim.SGD(model.parameters(), lr=1.0)
        scaler = torch.amp.GradScaler('cpu', enabled=False)
        loss, _, _ = train.train_step(model, opt, scaler, x.view(n_micro, -1, T), y.view(n_micro, -1, T),
                                      ctx=nullcontext(), grad_clip=0.0)
        steps.append((loss.item(), [b - p.detach() for b, p in zip(before, model.parameters())]))
    for loss, grads in steps[1:]:
        assert loss == pytest.approx(steps[0][0], rel=1e-5)
        for g, want in zip(grads, steps[0][1]):
            assert torch.allclose(g, want, atol=1e-6, rtol=1e-4)


# -------------------------------------------------------------------------------------
# the model

CONTROLS = [dict(readout='norm'), dict(readout='raw'), dict(readout='final_norm'), dict(readout='alpha'),
            dict(interloop_norm=True), dict(sandwich_norm=True), dict(damping=True), dict(inject=True),
            dict(sandwich_norm=True, damping=True, inject=True, interloop_norm=True, readout='alpha')]


@pytest.mark.parametrize('control', CONTROLS, ids=lambda c: '-'.join(f'{k}={v}' for k, v in c.items()))
def test_every_parameter_of_every_scale_control_reaches_the_logits(control):
    # a gain or a logit the forward forgets to read (the sandwich norm's output gain, the damping
    # factor, the readout's gain, ...) trains nothing and changes nothing: each is perturbed alone
    model = tiny(**control).eval()
    x, y = tokens()
    with torch.no_grad():
        base, _ = model(x)
        for name, p in model.named_parameters():
            keep = p.clone()
            p.add_(0.5 * torch.randn(p.shape, generator=torch.Generator().manual_seed(2)))
            moved, _ = model(x)
            p.copy_(keep)
            assert (moved - base).abs().max() > 1e-4, name
        # the control itself changes the per-loop loss (final_norm: its loops before the last), the same
        # weights where they are shared
        plain = tiny().eval()
        plain.load_state_dict(model.state_dict(), strict=False)
        if control != dict(readout='norm'):
            assert abs(plain(x, y)[1].item() - model(x, y)[1].item()) > 1e-4


def test_truncated_backprop_penalises_only_the_loops_that_run_with_a_graph():
    # what the loss reports is what trains: the loops without a graph are in neither the CE nor the penalty
    lam = 0.1
    model = tiny(FieldGPT, readout='raw', n_loops=4, norm_penalty=lam)
    x, y = tokens()
    with torch.no_grad():
        h = model.hidden_states(x)  # H_0 .. H_4, the same values the truncated forward computes
    read = h[3:]  # loops 3 and 4 (bptt 2)
    want = sum(F.cross_entropy(model.lm_head(model.readout(s, False)).flatten(0, 1), y.flatten()) for s in read) / 2
    want = want + lam * sum(s.pow(2).mean() for s in read) / 2
    _, loss = model(x, y, bptt=2)
    assert loss.item() == pytest.approx(want.item(), rel=1e-5)
    every = want + lam * (sum(s.pow(2).mean() for s in h[1:]) / 4 - sum(s.pow(2).mean() for s in read) / 2)
    assert abs(every.item() - want.item()) > 1e-3  # (the penalty over all four loops would be another number)


@pytest.mark.parametrize('loss', ['perloop', 'terminal'])
def test_the_flops_estimate_is_a_counted_training_step_with_truncated_backprop(loss):
    # the training step counted matmul by matmul (forward and backward) is the estimate MFU divides by,
    # at every bptt: truncated loops have a forward and no backward, and are not read out
    model = tiny(FieldGPT, n_layer=2, n_loops=4, loss=loss)
    x, y = tokens(B=4)
    for bptt in (0, 1, 2, 4):
        with FlopCounterMode(display=False) as counter:
            _, l = model(x, y, bptt=bptt)
            l.backward()
        model.zero_grad()
        graph = bptt or 4
        # the counter does not see F.scaled_dot_product_attention on the CPU: attention as the estimate
        # counts it, 2*T*d a token per layer for q@k and for att@v, x1 forward and x2 backward
        attention = (4 + 2 * graph) * 2 * 2 * (2 * T * D)
        assert counter.get_total_flops() / x.numel() + attention == model.flops_per_token(backward_loops=bptt, T=T), bptt


# -------------------------------------------------------------------------------------
# the learned gate's sign: a confident gate exits

def gate_of(bias, weight=None):
    gate = exits.ExitGate(D, 'norm')
    with torch.no_grad():
        gate.linear.bias.fill_(bias)
        if weight is not None:
            gate.linear.weight.copy_(weight)
    return gate


def test_a_confident_gate_exits_and_an_unsure_one_runs_every_loop():
    model = tiny(readout='raw')
    x, _ = tokens()
    with torch.no_grad():
        _, sure = decode(model, x, new_cache(model, 2), 0.5, exits.gate_criterion('gate', gate_of(10.0)), 'project')
        _, unsure = decode(model, x, new_cache(model, 2), 0.5, exits.gate_criterion('gate', gate_of(-10.0)), 'project')
    assert (sure == 1).all() and (unsure == model.config.n_loops).all()


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


# -------------------------------------------------------------------------------------
# eval_depth's clamp result: Δloss = clamped CE - free CE, each as an independent computation gives it

def test_the_clamps_delta_loss_is_the_clamped_loss_minus_the_free_one(split_data, tmp_path):
    run = tmp_path / 'run'
    train_in_process(split_data, run, *SHORT, '--readout=raw', '--init_std=0', '--n_loops=3')
    out, n = tmp_path / 'eval', 256
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        eval_depth.main([str(run), '--clamp', '--split=test', f'--max_tokens={n}', '--max_loops=3', '--out', str(out),
                         '--device=cpu', '--dtype=float32', '--bench_iters=1', '--batch_size=8', '--compile=off'])
    with open(out / 'results.json') as f:
        (result,) = json.load(f)['runs']
    model, _ = LoopedGPT.from_checkpoint(str(run))
    model.eval()
    meta = json.loads((split_data / 'tiny-bytes' / 'meta.json').read_text())
    data = torch.from_numpy(np.fromfile(split_data / 'tiny-bytes' / 'test.bin', dtype=meta['dtype']).astype(np.int64))
    x, y = data[:n].view(-1, 32), data[1:n + 1].view(-1, 32)  # the first n targets, in windows of the block
    for row in result['per_K'][1:]:
        with torch.no_grad():
            free = F.cross_entropy(model(x, n_loops=row['K'])[0].flatten(0, 1), y.flatten()).item()
            clamped = F.cross_entropy(model(x, n_loops=row['K'], clamp=True)[0].flatten(0, 1), y.flatten()).item()
        assert row['loss'] == pytest.approx(free, abs=1e-4)
        assert row['clamp']['loss'] == pytest.approx(clamped, abs=1e-4)
        assert abs(clamped - free) > 1e-3  # the clamp matters here, so the sign is seen
        assert row['clamp']['delta_loss'] == pytest.approx(clamped - free, abs=1e-4)
        assert row['clamp']['ppl'] == pytest.approx(math.exp(clamped), rel=1e-4)


# -------------------------------------------------------------------------------------
# every setting's type, from train.py's --help

def help_settings(capsys):
    """name -> default of every setting train.py's --help lists."""
    with pytest.raises(SystemExit):
        train.main(['--help'])
    import ast
    out = {}
    for line in capsys.readouterr().out.splitlines():
        if line.startswith('  --'):
            name, _, value = line.split()[0][2:].partition('=')
            out[name] = ast.literal_eval(value)
    return out


WRONG = {float: [True, "'fast'"], int: [True, 2.5, "'many'"], bool: [1, 0.0, "'yes'"], str: [True, 3]}


def test_every_setting_refuses_a_value_of_another_type_in_one_line(capsys, tmp_path):
    defaults = help_settings(capsys)
    assert {'learning_rate', 'n_loops', 'random_depth', 'readout'} <= set(defaults)
    for name, default in defaults.items():
        for bad in WRONG[type(default)]:
            with pytest.raises(UserError) as e:
                train.main([f'--{name}={bad}'])
            assert f"'{name}'" in str(e.value) and '\n' not in str(e.value), (name, bad)
    with pytest.raises(UserError, match="'learning_rate' takes a float"):
        train.main(['--learning_rate=True'])
    config = tmp_path / 'bad.py'
    config.write_text('learning_rate = True\n')
    with pytest.raises(UserError, match="'learning_rate' takes a float.*bad.py"):
        train.main([str(config)])
    assert configure(dict(lr=3e-4), ['--lr=2'])['lr'] == 2.0  # an int is still a float's
