"""
The documented edges, each tested at the edge and past it: truncated backprop through more loops than a step
draws, diagnostics on less than one window, non-finite numbers in the JSON files, a config file's own names,
every range rule of train.py at its bounds, the float32 log-softmax of the no-grad scoring under CPU bf16
autocast; and two inputs refused in one line (a text run given to beyond.tasks, a task's missing data).

    python -m pytest -q tests/test_edges.py
"""

import json
import math
from contextlib import nullcontext
from dataclasses import asdict

import numpy as np
import pytest
import torch
from torch.nn import functional as F

import report
import train
from configurator import UserError
from conftest import HERE, train_in_process
from linear_ce import linear_cross_entropy
from beyond.additions import FieldGPT
from model import LoopedGPT, diagnostics

V, T = 64, 16


def tiny(cls=LoopedGPT, **kw):
    torch.manual_seed(0)
    cfg = dict(vocab_size=V, block_size=T, n_layer=1, n_head=2, n_embd=32, n_loops=4, dropout=0.0)
    return cls(cls.config_class(**{**cfg, **kw}))


def batch(B=2, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, V, (B, T), generator=g), torch.randint(0, V, (B, T), generator=g)


# -----------------------------------------------------------------------------
# truncated backprop (bptt) at and past the K a step runs: config/random_depth.py (bptt 8) draws K < 8 most steps

def step(model, x, y, K, bptt):
    """loss, per-loop CE and every parameter's gradient of one training forward and backward."""
    model.zero_grad()
    _, loss = model(x, y, n_loops=K, bptt=bptt)
    loss.backward()
    return loss.detach(), model.stats['ce'], {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize('K,bptt', [(2, 2), (2, 3), (2, 8), (4, 4), (4, 5)])
def test_bptt_at_or_past_the_drawn_depth_reads_and_trains_every_loop_that_ran(K, bptt):
    # truncated backprop counts from the last loop: with bptt >= K every loop that ran has a graph and is read,
    # the loss, the penalty, the per-loop CE and the gradients those of the untruncated step
    model = tiny(FieldGPT, readout='raw', norm_penalty=0.1)
    x, y = batch()
    want, got = step(model, x, y, K, 0), step(model, x, y, K, bptt)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]) and got[1].isfinite().all()
    assert got[2].keys() == want[2].keys() and all(torch.equal(got[2][n], want[2][n]) for n in want[2])
    assert model.flops_per_token(K, backward_loops=bptt) == model.flops_per_token(K)
    # one loop short of K is truncated: the first loop is not read, and the loss is another number
    short = step(model, x, y, K, K - 1)
    assert short[1][0].isnan() and short[1][1:].isfinite().all() and not torch.equal(short[0], want[0])
    assert model.flops_per_token(K, backward_loops=K - 1) < model.flops_per_token(K)


# -----------------------------------------------------------------------------
# diag_tokens below one window: the diagnostics run on one whole window (train.evaluate)

@pytest.mark.parametrize('diag_tokens,rows', [(1, 1), (T - 1, 1), (T, 1), (2 * T - 1, 1), (2 * T, 2)])
def test_diagnostics_run_on_whole_windows_and_at_least_one(diag_tokens, rows):
    model = tiny(n_loops=2)
    g = torch.Generator().manual_seed(1)
    xs, ys = (torch.randint(0, V, (1, 3, T), generator=g) for _ in range(2))  # one batch of 3 windows
    ev = train.evaluate(model, (xs, ys), nullcontext(), diag_tokens=diag_tokens)
    want = diagnostics(model, xs[0, :rows], ys[0, :rows])
    assert all(math.isfinite(v) for v in want['norm_mean'])
    for key, value in want.items():
        assert ev[key] == value, key


# -----------------------------------------------------------------------------
# NaN and inf in results.json and log.jsonl: null, valid JSON for a strict parser

def strict(text):
    """json.loads refusing NaN, Infinity and -Infinity, which Python writes by default and JSON does not have."""
    def refuse(token):
        raise ValueError(f"{token} is not JSON")
    return json.loads(text, parse_constant=refuse)


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


def test_a_tasks_results_json_is_strict_json_when_a_run_diverges(tmp_path, monkeypatch):
    # beyond.tasks writes through report.write_json: a diverged run's inf and NaN are null
    import beyond.tasks as tasks
    row = dict(run='out-parity', length=4, K=1, trained_K=1, intervention='none', accuracy=0.5, exact=0.0,
               h_norm=float('nan'), rms=float('inf'), one_minus_cos=float('nan'))
    monkeypatch.setattr(tasks, 'evaluate', lambda *a, **kw: [row])
    monkeypatch.setattr(tasks, 'plot', lambda groups, path: None)
    tasks.main(['--runs=out-parity', '--lengths=4', '--loops=1', f'--out={tmp_path}'])
    written = strict((tmp_path / 'results.json').read_text())
    assert written['results'][0]['rms'] is None and written['designs'][0]['h_norm'] is None


# -----------------------------------------------------------------------------
# a config file's own names (configurator.py's docstring): _private names, functions and modules are the file's,
# seen by the rest of the file (its functions included) and dropped after it; every other name is a setting

def test_a_config_files_helpers_are_its_own_and_seen_by_its_functions(tmp_path):
    cfg = tmp_path / 'wide.py'
    cfg.write_text("import math\n"
                   "_width = 64\n"
                   "def _heads(width):\n"
                   "    return width // _per_head\n"          # a helper reading another of the file's names
                   "_per_head = 32\n"
                   "def lr_for(width):\n"                     # a public function: the file's too
                   "    return 1e-3 * math.sqrt(512 / width)\n"
                   "n_embd = _width\n"
                   "n_head = _heads(_width)\n"
                   "n_loops = sum(_per_head // 32 for _ in range(3))\n"  # a generator reads the file's names
                   "learning_rate = lr_for(n_embd)\n")
    c = train.setup([str(cfg)])
    assert (c['n_embd'], c['n_head'], c['n_loops']) == (64, 2, 3)
    assert c['learning_rate'] == pytest.approx(1e-3 * math.sqrt(8))
    assert not {'math', '_width', '_heads', '_per_head', 'lr_for'} & set(c)
    # a public name that is not a setting is refused, named with its file
    (tmp_path / 'typo.py').write_text("_ok = 1\nwidth = 64\n")
    with pytest.raises(UserError, match=r"unknown setting 'width' \(in .*typo.py\)"):
        train.setup([str(tmp_path / 'typo.py')])
    # the next file sees the settings the first made, not its helpers
    (tmp_path / 'next.py').write_text("n_layer = n_loops\nn_head = _width\n")
    with pytest.raises(UserError, match="NameError: name '_width' is not defined"):
        train.setup([str(cfg), str(tmp_path / 'next.py')])
    (tmp_path / 'next.py').write_text("n_layer = n_loops\n")
    assert train.setup([str(cfg), str(tmp_path / 'next.py')])['n_layer'] == 3


# -----------------------------------------------------------------------------
# every range of the settings at its bounds, through train.py's own parsing: the value at the bound taken,
# just past it refused in one line naming the setting

def past(bound, direction):
    """The nearest value of the bound's type past it: 1 for an int, the next float for a float."""
    return bound + direction if type(bound) is int else math.nextafter(bound, direction * math.inf)


LOWER = [  # (setting, its lowest value), as each setting's comment says: '>= x', or '[x, y)'
    ('eval_interval', 1), ('log_interval', 1), ('eval_iters', 1), ('diag_tokens', 1), ('batch_size', 1),
    ('gradient_accumulation_steps', 1), ('max_loops', 1), ('depth_sigma', 0.0), ('bptt', 0), ('max_iters', 0),
    ('weight_decay', 0.0), ('beta1', 0.0), ('beta2', 0.0), ('grad_clip', 0.0), ('warmup_iters', 0), ('min_lr', 0.0),
    ('seed', 0),
    # the model's fields (LoopedGPTConfig; beyond/'s, with their class)
    ('block_size', 1), ('n_layer', 1), ('n_loops', 1), ('dropout', 0.0), ('norm_penalty', 0.0), ('init_std', 0.0),
    ('window', 0), ('exit_train', 0.0)]
CLASS = dict(window=['--model_class=beyond.additions.FieldGPT'], exit_train=['--model_class=beyond.exit_train.ExitTrainedGPT'])
OPEN = [('learning_rate', 0.0), ('epochs', 0.0), ('beta1', 1.0), ('beta2', 1.0), ('dropout', 1.0)]  # '> x' or '[.., x)'


def refused(argv, key):
    with pytest.raises(UserError) as e:
        train.setup(argv)
    message = str(e.value)
    assert key in message and '\n' not in message, message


@pytest.mark.parametrize('key,low', LOWER, ids=[b[0] for b in LOWER])
def test_a_lowest_value_is_taken_and_the_value_below_it_refused(key, low):
    named = CLASS.get(key, [])
    assert train.setup([*named, f'--{key}={low!r}'])[key] == low
    refused([*named, f'--{key}={past(low, -1)!r}'], f"'{key}'")


@pytest.mark.parametrize('key,bound', OPEN, ids=[b[0] for b in OPEN])
def test_an_open_bound_is_refused_and_the_value_just_inside_it_taken(key, bound):
    inside = past(bound, 1 if bound == 0 else -1)
    assert train.setup([f'--{key}={inside!r}'])[key] == inside
    refused([f'--{key}={bound!r}'], f"'{key}'")


def test_the_width_and_heads_bounds_and_exit_train_below_one():
    # n_embd and n_head at 1 (n_embd a multiple of n_head); exit_train just under 1 with the class that trains it
    from beyond.exit_train import ExitTrainedGPT
    assert train.setup(['--n_embd=1', '--n_head=1'])['n_embd'] == 1
    refused(['--n_embd=0', '--n_head=1'], "'n_embd'")
    refused(['--n_head=0'], "'n_head'")
    below_one = math.nextafter(1.0, 0.0)
    assert train.setup([f'--exit_train={below_one!r}'], model_class=ExitTrainedGPT)['exit_train'] == below_one
    with pytest.raises(UserError, match="'exit_train'"):
        train.setup(['--exit_train=1.0'], model_class=ExitTrainedGPT)


# -----------------------------------------------------------------------------
# the no-grad scoring (eval, eval_depth, the diagnostics' CE) under CPU bf16 autocast: the matmul in bf16, the
# log-softmax in float32 (CPU autocast leaves log_softmax in its input's dtype: bf16 would be ~1e-2 nats off)

def test_scoring_without_gradients_under_cpu_bf16_autocast_takes_the_log_softmax_in_float32():
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(300, 32, generator=g), 0.5 * torch.randn(256, 32, generator=g)
    y = torch.randint(0, 256, (300,), generator=g)
    y[::9] = -1
    with torch.no_grad(), torch.autocast('cpu', dtype=torch.bfloat16):
        total, ce = linear_cross_entropy(x, w, y, chunk=128)
    logits = F.linear(x.bfloat16(), w.bfloat16())  # what autocast's matmul gives
    want = F.cross_entropy(logits.float(), y, ignore_index=-1, reduction='none')
    assert ce.dtype == torch.float32 and torch.allclose(ce, want, rtol=1e-6, atol=1e-6)
    assert total.item() == pytest.approx(want.sum().item(), rel=1e-6)
    in_bf16 = -torch.log_softmax(logits, -1).gather(1, y.clamp(min=0)[:, None]).squeeze(1).float()
    assert (in_bf16 - want)[y >= 0].abs().mean() > 5e-3  # (the wrong precision is another number)


@pytest.mark.parametrize('loss_path', ['fused', 'plain'])
def test_the_models_eval_ce_under_cpu_bf16_autocast_is_float32_softmax_of_bf16_logits(loss_path):
    model = tiny(n_loops=2).eval()
    model.loss_path = loss_path
    x, y = batch(B=4)
    with torch.no_grad(), torch.autocast('cpu', dtype=torch.bfloat16):
        states = model.hidden_states(x)[1:]
        got = model.depth_losses(states, y)
        logits = [model.lm_head(model.readout(h, last=True)) for h in states]  # bf16
    want = torch.stack([F.cross_entropy(z.float().flatten(0, 1), y.flatten(), reduction='none') for z in logits])
    assert logits[0].dtype == torch.bfloat16 and got.dtype == torch.float32
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-5)


# -----------------------------------------------------------------------------
# two bad inputs, each one line

def test_beyond_tasks_refuses_a_run_trained_on_text(tiny_data, tmp_path):
    import beyond.tasks as tasks
    out = tmp_path / 'text-run'
    train_in_process(tiny_data, out, '--max_iters=1', '--eval_interval=1', '--eval_iters=1')
    with pytest.raises(SystemExit) as e:
        tasks.main([f'--runs={out}', '--lengths=4', '--loops=1,2', '--rows=4', f'--out={tmp_path / "eval"}'])
    message = str(e.value.code)
    assert message.startswith('beyond.tasks: error:') and '\n' not in message, message
    assert str(out) in message and 'tiny-bytes' in message and 'vocab 256' in message and 'parity' in message
    assert not (tmp_path / 'eval').exists()
    # a model of parity's vocabulary whose data (here, at hand) is text is refused too; one whose data is
    # not at hand is taken on its vocabulary
    model = tiny(vocab_size=4)
    ckpt = dict(model_args=asdict(model.config), config=dict(data_dir=str(tiny_data), dataset='tiny-bytes'))
    with pytest.raises(UserError, match='tiny-bytes'):
        tasks.check_parity_run('four', model, ckpt)
    tasks.check_parity_run('four', model, dict(ckpt, config=dict(data_dir=str(tmp_path), dataset='parity')))


def test_a_tasks_missing_data_names_the_module_that_makes_it(tmp_path):
    # config/parity.py's dataset is written by python -m beyond.parity, not by prepare.py
    try:
        with pytest.raises(UserError, match=r'make it with `python -m beyond.parity`'):
            train.main([f'{HERE}/config/parity.py', f'--data_dir={tmp_path}', f'--out_dir={tmp_path / "out"}'])
    finally:
        torch.set_flush_denormal(False)
    assert not (tmp_path / 'out').exists()
    # a name that no module of beyond/ writes is text for prepare.py, as before
    with pytest.raises(UserError, match=r'python prepare.py --text_dir .* --out_dir data/my-text'):
        train.load_splits(str(tmp_path), 'my-text', 16)
