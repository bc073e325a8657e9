"""
train.py on tiny data made by prepare.py: from the outside (a subprocess) for a full run, the one-line error
and two DDP ranks; its main(), helpers and setting checks in-process, where a subprocess would only add an
interpreter start and a torch import. What a run logs and keeps (every record recomputed from the model: the
still run, conftest's), the evaluation, a non-finite run stopped, resume and initializations, the settings
and their ranges, a field added by a fork, a task in rows, and the step (the learning rate, dropout's seeds,
clipping, float16, DDP, the compiler).

    python -m pytest -q tests/test_train.py
"""

import contextlib
import io
import json
import math
import os
import socket
import subprocess
import sys
from contextlib import nullcontext
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch.nn import functional as F

import eval_depth
import train as train_module
from beyond.additions import FieldGPT, FieldGPTConfig
from configurator import UserError, check_ranges, configure, settings_block
from conftest import (B, BPTT, DEPTH, HERE, MAX_K, MEAN_K, PEAK, SEED, SHORT, STEP_S, T, assert_close, assert_one_line_error,
                      ce_by_hand, load, norm_stats, one_minus_cos, parity_args, radial_by_hand, read_log, run_script, settings,
                      stand_in_python, states_by_hand, torchrun_environment, train_args, train_in_process)
from data import eval_batches, load_splits, load_tokens, train_batches
from depth import draw_depth
from model import LoopedGPT, LoopedGPTConfig, diagnostics
from runtime import autocast, resolve_dtype
from test_model import batch


def train(tiny_data, out_dir, *extra):
    r = run_script('train.py', *train_args(tiny_data, out_dir, *extra))
    assert r.returncode == 0, r.stderr
    return r


def tiny_model(cls=LoopedGPT, **kw):
    torch.manual_seed(0)
    return cls(cls.config_class(**dict(dict(vocab_size=64, block_size=16, n_layer=1, n_head=2, n_embd=32,
                                            n_loops=2, dropout=0.0, init_std=0.02), **kw)))


def tiny_checkpoint(out_dir, tiny_data, *extra):
    """out_dir/ckpt.pt of an untrained model with TINY's settings, written by train.py's own
    save_checkpoint: what a run leaves behind, without running one."""
    config = settings(*train_args(tiny_data, out_dir, *extra))
    c = SimpleNamespace(**config)
    model, _ = train_module.build_model(c, {'vocab_size': 256}, 'cpu')
    optimizer = train_module.make_optimizer(model, learning_rate=c.learning_rate, betas=(c.beta1, c.beta2),
                                            weight_decay=c.weight_decay)
    os.makedirs(out_dir, exist_ok=True)
    train_module.save_checkpoint(out_dir, model, optimizer, 4, float('inf'), config)


# -----------------------------------------------------------------------------
# train.py as a script: a run from the outside, and its one-line error

def test_training_lowers_the_loss_logs_every_loop_and_saves_the_last_iteration(tiny_data, tmp_path):
    out = tmp_path / 'run'
    r = train(tiny_data, out, '--max_iters=60', '--eval_interval=25', '--readout=raw', '--n_loops=3')
    log = read_log(out)
    trains = [e for e in log if e['kind'] == 'train']
    evals = [e for e in log if e['kind'] == 'eval']
    assert [e['iter'] for e in trains] == list(range(1, 61))
    assert [e['iter'] for e in evals] == [0, 25, 50, 60]  # the last iteration too, off the interval
    for e in trains:
        assert len(e['ce']) == len(e['h_norm']) == 3
        assert e['ms_per_iter'] > 0 and e['tok_per_s'] > 0 and e['lr'] == pytest.approx(3e-3)
        assert e['mfu'] is None and e['peak_mem_gib'] is None  # CUDA only
    for e in evals:
        for key in ('val_loss', 'val_ppl', 'norm_mean', 'norm_median', 'norm_p99', 'norm_max', 'radial', 'angular'):
            assert len(e[key]) == 3, key
    assert sum(e['loss'] for e in trains[-10:]) / 10 < 0.8 * sum(e['loss'] for e in trains[:10]) / 10
    assert evals[-1]['val_loss'][-1] < evals[0]['val_loss'][-1] - 1.0
    assert 'iter 60: loss' in r.stdout and 'eval 60: val loss K=1..3' in r.stdout
    # the run's opening line: its device, dtype, tokens an iteration (batch x block x micro-steps) and iterations
    dtype = resolve_dtype('auto', 'cpu', training=True)  # (bfloat16 on a CPU with native bf16)
    assert f'device cpu, {dtype}, {8 * 32:,} tokens per iteration, 60 iterations' in r.stdout, r.stdout[:500]
    assert os.path.isfile(out / 'ckpt.pt') and not os.path.exists(out / 'ckpt.pt.tmp')
    ckpt = torch.load(out / 'ckpt.pt', weights_only=True)
    assert ckpt['iter_num'] == 60
    # and the parameters, counted once however many loops run, less the position embeddings (nanoGPT's count)
    tensors = {t.data_ptr(): t for name, t in ckpt['model'].items() if name != 'transformer.wpe.weight'}  # (tied: once)
    counted = sum(t.numel() for t in tensors.values())
    assert LoopedGPT.from_checkpoint(str(out))[0].get_num_params() == counted
    assert f'number of parameters: {counted / 1e6:.2f}M (counted once; the stack runs 3x)' in r.stdout, r.stdout[:500]


def test_adamw_takes_the_runs_betas_weight_decay_and_rate(tiny_data, tmp_path):
    """make_optimizer: AdamW with beta1, beta2 and weight_decay as set (each away from AdamW's own default and
    train.py's), its rate the schedule's (constant here), fused."""
    out = tmp_path / 'run'
    train(tiny_data, out, '--max_iters=1', '--eval_interval=1', '--beta1=0.5', '--beta2=0.75', '--weight_decay=0.25',
          '--learning_rate=0.002', '--warmup_iters=0', '--lr_decay=constant')
    group, = torch.load(out / 'ckpt.pt', weights_only=True)['optimizer']['param_groups']
    assert tuple(group['betas']) == (0.5, 0.75) and group['weight_decay'] == 0.25 and group['lr'] == 0.002
    assert group['fused'] is True  # (fused on the CPU too: make_optimizer's docstring)


def test_a_bad_setting_is_one_line_before_anything_is_written(tiny_data, tmp_path):
    # the one subprocess for the error path: the checks themselves are tested in-process below
    r = run_script('train.py', *train_args(tiny_data, tmp_path / 'x', '--loss_path=unfused'))
    assert_one_line_error(r, 'train.py', "'loss_path'", 'fused, plain', "'unfused'")
    assert not (tmp_path / 'x').exists()


# -----------------------------------------------------------------------------
# what a run logs and keeps. The still run (conftest's): each record of log.jsonl recomputed from the model; the
# learning rate AdamW steps with, MFU over ranks, the compile's own line, the plain loss path; the checkpoint kept

DRAWS = [draw_depth(SEED, it, mean=MEAN_K, cap=MAX_K, sigma=0.5) for it in range(6)]  # the still run's K, step by step


def test_each_train_record_is_its_steps_loss_ce_and_norms_recomputed_from_the_model(still_run, tiny_data):
    out, log, _ = still_run
    model = load(out)
    data, _ = load_tokens(str(tiny_data / 'tiny-bytes'), 'train')
    steps = []  # per step: {loop: CE} of the loops its loss read (bptt 1: the last), {loop: mean |H_k|} of those it ran
    for it, K in enumerate(DRAWS):
        (x,), (y,) = train_batches(data, it, 0, seed=SEED, n_micro=1, batch_size=B, block_size=T, device='cpu')
        H = states_by_hand(model, x, K)
        steps.append(({K: ce_by_hand(model, x, y, K).mean().item()},
                      {k: H[k].norm(dim=-1).mean().item() for k in range(1, K + 1)}))
    trains = [r for r in log if r['kind'] == 'train']
    assert DRAWS == [3, 1, 2, 2, 1, 2] and [r['iter'] for r in trains] == [2, 4, 6]
    for r, pair in zip(trains, (steps[0:2], steps[2:4], steps[4:6])):
        assert r['loss'] == pytest.approx(np.mean([np.mean(list(ce.values())) for ce, _ in pair]), rel=1e-5)
        for k in range(1, MAX_K + 1):  # a loop's mean over the steps that read (ran) it; null where none did
            read = [ce[k] for ce, _ in pair if k in ce]
            ran = [norms[k] for _, norms in pair if k in norms]
            assert r['ce'][k - 1] == (pytest.approx(np.mean(read), rel=1e-5) if read else None), (r['iter'], k)
            assert r['h_norm'][k - 1] == (pytest.approx(np.mean(ran), rel=1e-5) if ran else None), (r['iter'], k)
    assert trains[0]['ce'][1] is None and trains[0]['h_norm'][2] is not None  # (each rule met: read, ran, neither)


def test_train_records_speed_and_mfu_count_the_drawn_depth_and_truncated_backprop(still_run):
    out, log, _ = still_run
    model = load(out)
    tokens, seconds = B * T, 2 * STEP_S  # a line: two steps on the fake clock
    for r, Ks in zip([r for r in log if r['kind'] == 'train'], (DRAWS[0:2], DRAWS[2:4], DRAWS[4:6])):
        assert r['ms_per_iter'] == pytest.approx(1000 * STEP_S, rel=1e-9)
        assert r['tok_per_s'] == pytest.approx(tokens * 2 / seconds, rel=1e-9)
        # each step's matmul FLOPs (the estimate test_additions.py counts matmul by matmul): K loops forward,
        # the last BPTT backward
        flops = sum(model.flops_per_token(K, backward_loops=BPTT, T=T) for K in Ks) * tokens
        assert r['mfu'] == pytest.approx(flops / seconds / PEAK, rel=1e-9)
        assert r['peak_mem_gib'] is None  # (CUDA's; below)
    assert model.flops_per_token(3, backward_loops=BPTT, T=T) < model.flops_per_token(3, T=T)  # (bptt is seen)


def test_each_eval_record_is_the_val_loss_and_diagnostics_recomputed_from_the_states(still_run, tiny_data):
    out, log, _ = still_run
    model = load(out)  # saved after the evaluation at iteration 6
    (ev,) = [r for r in log if r['kind'] == 'eval' and r['iter'] == 6]
    val, _ = load_tokens(str(tiny_data / 'tiny-bytes'), 'val')
    xs, ys = eval_batches(val, eval_iters=2, batch_size=B, block_size=T, device='cpu')
    assert len(ev['val_loss']) == MAX_K  # random depth: evaluated to the cap
    for K in range(1, MAX_K + 1):
        loss = torch.cat([ce_by_hand(model, x, y, K) for x, y in zip(xs, ys)]).mean().item()
        assert ev['val_loss'][K - 1] == pytest.approx(loss, rel=1e-5)
        assert ev['val_ppl'][K - 1] == pytest.approx(math.exp(loss), rel=1e-5)
    # the diagnostics, on the first batch (diag_tokens 2048: all its 8 windows), at the evaluated depth
    H = states_by_hand(model, xs[0], MAX_K)
    for k in range(1, MAX_K + 1):
        got = {key: ev[key][k - 1] for key in ('norm_mean', 'norm_median', 'norm_p99', 'norm_max', 'radial', 'angular')}
        assert_close(got, norm_stats(H[k].norm(dim=-1)))
        assert got['radial'] == pytest.approx(radial_by_hand(model, H[k], ys[0]).mean().item(), rel=1e-5)
        assert got['angular'] == pytest.approx(one_minus_cos(H[k], H[k - 1]).mean().item(), rel=1e-5, abs=1e-7)
    assert ev['norm_p99'][1] != pytest.approx(np.percentile(H[2].norm(dim=-1).numpy(), 90), rel=1e-4)  # (p90 is another)


def test_adamw_steps_with_the_learning_rate_the_log_reports(tiny_data, tmp_path, monkeypatch):
    # the log's lr is get_lr's; what the step uses is what the optimizer's param groups hold when
    # AdamW.step runs, read here by a step pre-hook (torch's own API) on the optimizer main() builds.
    # Warm-up then cosine: every iteration has its own lr, so no other lr can agree by chance
    seen = []
    real = train_module.make_optimizer

    def make_optimizer(model, **kw):
        opt = real(model, **kw)
        opt.register_step_pre_hook(lambda o, args, kwargs: seen.append([g['lr'] for g in o.param_groups]))
        return opt

    monkeypatch.setattr(train_module, 'make_optimizer', make_optimizer)
    lr = dict(learning_rate=3e-3, min_lr=3e-4, warmup_iters=2, max_iters=6, lr_decay='cosine')
    train_in_process(tiny_data, tmp_path / 'run', *(f'--{k}={v}' for k, v in lr.items()), '--eval_interval=100')
    logged = [e['lr'] for e in read_log(tmp_path / 'run') if e['kind'] == 'train']
    want = [train_module.get_lr(it, **lr) for it in range(6)]
    assert len(set(want)) == 6 and logged == pytest.approx(want, rel=1e-12)
    assert len(seen) == 6, seen  # one AdamW step per iteration
    for it, (groups, reported) in enumerate(zip(seen, logged)):
        assert groups == [reported] * len(groups), f"iteration {it}: AdamW stepped with lr {groups}, the log says {reported}"


def test_mfu_over_several_ranks_is_each_ranks_flops_against_its_own_gpus_peak(tiny_data, tmp_path, monkeypatch):
    # under torchrun a line's FLOPs are every rank's (tokens_per_iter counts them all): against the peak of
    # as many GPUs, each rank's utilization, the same as one rank doing its share alone in the same time.
    # Two ranks stood in for (start_process says world_size 2, in this one process), a fake clock, a peak
    peak, step_s, clock = 1e9, 0.25, [0.0]
    real_start, real_step = train_module.start_process, train_module.train_step

    def start_process(device, gradient_accumulation_steps):
        ddp, rank, _, device, n_micro = real_start(device, gradient_accumulation_steps)
        return ddp, rank, 2, device, n_micro

    def step(*args, **kw):
        clock[0] += step_s
        return real_step(*args, **kw)
    monkeypatch.setattr(train_module, 'start_process', start_process)
    monkeypatch.setattr(train_module, 'train_step', step)
    monkeypatch.setattr(train_module, 'time', SimpleNamespace(time=lambda: clock[0]))
    monkeypatch.setattr(train_module, 'peak_flops', lambda device, dtype: peak)
    train_in_process(tiny_data, tmp_path / 'run', '--max_iters=2', '--eval_interval=100', '--dtype=float32')
    model, _ = LoopedGPT.from_checkpoint(str(tmp_path / 'run'))
    per_rank = model.flops_per_token(T=32) * 8 * 32 / step_s  # a rank's batch of 8 x 32 tokens a step
    trains = [r for r in read_log(tmp_path / 'run') if r['kind'] == 'train']
    assert len(trains) == 2 and all(r['tok_per_s'] == pytest.approx(2 * 8 * 32 / step_s) for r in trains)
    assert all(r['mfu'] == pytest.approx(per_rank / peak, rel=1e-9) for r in trains), trains


@pytest.mark.parametrize('compiled', [True, False])
def test_the_first_compiled_step_is_its_own_line_not_the_first_log_lines_speed(tiny_data, tmp_path, monkeypatch,
                                                                                capsys, compiled):
    # a fake clock: the first step takes 100 s (a compile), every other 1 ms. Compiled (here the path
    # alone: torch.compile is the identity), the first step is a line of its own and every train
    # line's ms/iter is the steps'; not compiled, the first line holds the first step's time
    clock = [0.0]
    monkeypatch.setattr(train_module, 'time', SimpleNamespace(time=lambda: clock[0]))
    monkeypatch.setattr(train_module, 'use_compile', lambda setting, device: compiled)
    monkeypatch.setattr(torch, 'compile', lambda f, **kw: f)
    real_step, calls = train_module.train_step, []

    def step(*args, **kw):
        calls.append(1)
        clock[0] += 100.0 if len(calls) == 1 else 0.001
        return real_step(*args, **kw)
    monkeypatch.setattr(train_module, 'train_step', step)
    train_in_process(tiny_data, tmp_path / 'run', '--max_iters=6', '--log_interval=2', '--eval_interval=6')
    said = 'compiled the training step: the first step took 100.0 s' in capsys.readouterr().out
    ms = [e['ms_per_iter'] for e in read_log(tmp_path / 'run') if e['kind'] == 'train']
    assert said is compiled and len(ms) == 3
    if compiled:
        assert all(m == pytest.approx(1.0, rel=1e-3) for m in ms), ms
    else:
        assert ms[0] == pytest.approx(1000 * 100.001 / 2, rel=1e-3) and ms[1] == pytest.approx(1.0, rel=1e-3)


def test_the_plain_loss_path_trains_as_the_fused_one(tiny_data, tmp_path, monkeypatch):
    # the same run through linear_ce's fused loss and through materialised logits + F.cross_entropy:
    # the same losses (float32), and --loss_path reaches the model: the plain run never calls linear_ce's
    # loss, in training or in evaluation. Terminal CE: loops it does not read log null
    import model as model_module
    logs, fused_calls, real = {}, [], model_module.linear_cross_entropy

    def counted(*args, **kw):
        fused_calls.append(path)
        return real(*args, **kw)
    monkeypatch.setattr(model_module, 'linear_cross_entropy', counted)
    for path in ('fused', 'plain'):
        train_in_process(tiny_data, tmp_path / path, '--max_iters=2', '--eval_interval=2', '--loss=terminal',
                   '--dtype=float32', f'--loss_path={path}')
        logs[path] = [e for e in read_log(tmp_path / path) if e['kind'] == 'train']
    assert 'fused' in fused_calls and 'plain' not in fused_calls
    for fused, plain in zip(logs['fused'], logs['plain'], strict=True):
        assert plain['loss'] == pytest.approx(fused['loss'], rel=1e-5)
        assert fused['ce'][0] is None and fused['ce'][1] is not None and plain['ce'][0] is None
    assert logs['fused'][1]['loss'] < logs['fused'][0]['loss']  # and it trains


def test_the_checkpoint_kept_is_the_best_val_loss_at_the_trained_k_under_random_depth(tiny_data, tmp_path):
    # config/random_depth.py: K drawn with mean n_loops, evaluated to max_loops; the val loss that
    # decides (and that the checkpoint records) is the trained K's, n_loops, not the deepest evaluated
    train_in_process(tiny_data, tmp_path, *DEPTH, '--dtype=float32', '--max_iters=6', '--eval_interval=2',
                     '--always_save_checkpoint=False')
    evals = [r for r in read_log(tmp_path) if r['kind'] == 'eval' and r['iter'] > 0]  # (iteration 0 is never saved)
    at_k = [r['val_loss'][MEAN_K - 1] for r in evals]
    ckpt = torch.load(tmp_path / 'ckpt.pt', weights_only=True)
    assert ckpt['best_val_loss'] == min(at_k) != min(r['val_loss'][-1] for r in evals)
    assert ckpt['iter_num'] == evals[at_k.index(min(at_k))]['iter']
    model = load(tmp_path)  # and the weights kept score it
    val, _ = load_tokens(str(tiny_data / 'tiny-bytes'), 'val')
    xs, ys = eval_batches(val, eval_iters=2, batch_size=B, block_size=T, device='cpu')
    loss = torch.cat([ce_by_hand(model, x, y, MEAN_K) for x, y in zip(xs, ys)]).mean().item()
    assert ckpt['best_val_loss'] == pytest.approx(loss, rel=1e-5)


SCRIPTED = []  # the scores scripted_select hands out, one an evaluation


def scripted_select(model, settings):
    """A task's score as train.py's select calls it: the next scripted value first, then what it was handed."""
    return dict(score=SCRIPTED.pop(0), training=float(model.training), lr=settings['learning_rate'])


def test_the_checkpoint_kept_is_the_lowest_select_score_and_every_evaluation_is_kept(tiny_data, tmp_path, capsys):
    # select names a task's own score: the lowest first value decides, not the val loss; keep_checkpoints keeps
    # each evaluation's checkpoint beside it (iteration 0 is never saved)
    SCRIPTED[:] = [0.5, 3.0, 1.0, 2.0]  # evaluations at 0, 2, 4, 6
    train_in_process(tiny_data, tmp_path, '--dtype=float32', '--max_iters=6', '--eval_interval=2',
                     '--always_save_checkpoint=False', '--keep_checkpoints=True',
                     f'--select={__name__}.scripted_select')
    assert SCRIPTED == []
    evals = [r for r in read_log(tmp_path) if r['kind'] == 'eval']
    assert [r['select'] for r in evals] == [dict(score=v, training=0.0, lr=3e-3) for v in (0.5, 3.0, 1.0, 2.0)]
    at_k = [r['val_loss'][-1] for r in evals]
    assert at_k.index(min(at_k)) != 2  # (the val loss would have kept another)
    ckpt = torch.load(tmp_path / 'ckpt.pt', weights_only=True)
    assert (ckpt['iter_num'], ckpt['best_val_loss']) == (4, 1.0)
    kept = {p.name: torch.load(p, weights_only=True) for p in tmp_path.glob('ckpt-*.pt')}
    assert sorted(kept) == ['ckpt-2.pt', 'ckpt-4.pt', 'ckpt-6.pt']
    assert [kept[f'ckpt-{i}.pt']['iter_num'] for i in (2, 4, 6)] == [2, 4, 6]
    same = [all(torch.equal(v, ckpt['model'][k]) for k, v in kept[f'ckpt-{i}.pt']['model'].items()) for i in (2, 4, 6)]
    assert same == [False, True, False]  # each its own iteration's weights; ckpt.pt is iteration 4's
    assert all(k['config'] == ckpt['config'] for k in kept.values()) and ckpt['config']['select'].endswith('scripted_select')
    assert 'eval 4: val loss' in (line := next(l for l in capsys.readouterr().out.splitlines() if l.startswith('eval 4:')))
    assert line.endswith(' | score 1 | training 0 | lr 0.003')  # the eval line ends with them


# -----------------------------------------------------------------------------
# on data whose splits differ (conftest's split_data): the validation loss is the val split's, and gradient
# accumulation steps and logs with the whole batch's numbers, whatever its micro-steps

def constant_loss(model, byte, K):
    """The model's last-loop CE at depth K on a window of one repeated byte (every window of a split above)."""
    x = torch.full((1, model.config.block_size + 1), byte)
    with torch.no_grad():
        logits, _ = model(x[:, :-1], n_loops=K)
    return F.cross_entropy(logits[0], x[0, 1:]).item()


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
    x, y = (t.repeat(2, 1) for t in batch(B=4))  # (8, 16)
    steps = []
    for n_micro in (1, 2, 4):
        model = tiny_model(readout='raw', n_loops=3, init_std=0.1)
        before = [p.detach().clone() for p in model.parameters()]
        opt = torch.optim.SGD(model.parameters(), lr=1.0)
        scaler = torch.amp.GradScaler('cpu', enabled=False)
        loss, _, _ = train_module.train_step(model, opt, scaler, x.view(n_micro, -1, 16), y.view(n_micro, -1, 16),
                                      ctx=nullcontext(), grad_clip=0.0)
        steps.append((loss.item(), [b - p.detach() for b, p in zip(before, model.parameters())]))
    for loss, grads in steps[1:]:
        assert loss == pytest.approx(steps[0][0], rel=1e-5)
        for g, want in zip(grads, steps[0][1]):
            assert torch.allclose(g, want, atol=1e-6, rtol=1e-4)


# -----------------------------------------------------------------------------
# the evaluation's diagnostics: on whole windows, at least one (diag_tokens below one window), and on the first
# windows only

WINDOW = 16  # tiny_model's block_size


@pytest.mark.parametrize('diag_tokens,rows', [(1, 1), (WINDOW - 1, 1), (WINDOW, 1), (2 * WINDOW - 1, 1),
                                                     (2 * WINDOW, 2)])
def test_diagnostics_run_on_whole_windows_and_at_least_one(diag_tokens, rows):
    model = tiny_model(n_loops=2, init_std=0.0)
    g = torch.Generator().manual_seed(1)
    xs, ys = (torch.randint(0, 64, (1, 3, WINDOW), generator=g) for _ in range(2))  # one batch of 3 windows
    ev = train_module.evaluate(model, (xs, ys), nullcontext(), diag_tokens=diag_tokens)
    want = diagnostics(model, xs[0, :rows], ys[0, :rows])
    assert all(math.isfinite(v) for v in want['norm_mean'])
    for key, value in want.items():
        assert ev[key] == value, key


def test_the_evaluation_runs_its_float64_diagnostics_on_the_first_windows_only():
    from contextlib import nullcontext
    from model import diagnostics
    torch.manual_seed(0)
    model = LoopedGPT(LoopedGPTConfig(vocab_size=64, block_size=16, n_layer=1, n_head=2, n_embd=32, n_loops=2))
    g = torch.Generator().manual_seed(1)
    xs, ys = (torch.randint(0, 64, (2, 4, 16), generator=g) for _ in range(2))  # 2 batches of 4 windows
    ev = train_module.evaluate(model, (xs, ys), nullcontext(), diag_tokens=32)  # two windows' worth
    for key, value in diagnostics(model, xs[0, :2], ys[0, :2]).items():
        assert ev[key] == value, key
    assert ev['norm_mean'] != diagnostics(model, xs[0], ys[0])['norm_mean']  # (all four windows: other numbers)


# -----------------------------------------------------------------------------
# a non-finite run stops with one line and keeps its checkpoint, under torchrun on every rank

def test_a_loss_that_becomes_non_finite_at_a_log_line_stops_with_a_line_naming_the_runs_checkpoint(tiny_data, tmp_path):
    # lr 1e12: the first step's loss is finite and leaves the weights non-finite; the second step's loss is
    # NaN and its train line (no evaluation before the last iteration) stops the run with the one line,
    # naming the checkpoint that was left as it was
    out = tmp_path / 'run'
    with pytest.raises(UserError) as e:
        train_in_process(tiny_data, out, '--max_iters=4', '--eval_interval=100', '--learning_rate=1e12',
                         '--grad_clip=0.0')
    assert 'non-finite by iteration 2: stopping' in str(e.value) and f'{out}/ckpt.pt' in str(e.value)
    assert [r['iter'] for r in read_log(out) if r['kind'] == 'train'] == [1]
    assert not (out / 'ckpt.pt').exists()


def test_a_non_finite_loss_stops_cleanly_and_keeps_the_checkpoint(tiny_data, tmp_path):
    out = tmp_path / 'run'
    tiny_checkpoint(out, tiny_data)
    before = (out / 'ckpt.pt').read_bytes()
    with pytest.raises(UserError, match='non-finite.*lower learning_rate'):
        train_in_process(tiny_data, out, '--max_iters=40', '--eval_interval=4', '--init_from=resume',
                   '--learning_rate=1e12', '--grad_clip=0.0')
    assert (out / 'ckpt.pt').read_bytes() == before
    assert not os.path.exists(out / 'ckpt.pt.tmp')


def test_under_torchrun_a_non_finite_evaluation_stops_the_run(tiny_data, tmp_path, monkeypatch):
    # lr 1e12: the first step's loss is finite (its log line passes) and the step leaves the weights
    # non-finite; the evaluation after it is rank 0's verdict, sent to every rank, and every rank must
    # stop with the one line, even on the run's last iteration. A process group of one rank (gloo), in
    # this process: the verdict's path is the same at any world size (tests/test_train.py runs two ranks)
    torchrun_environment(monkeypatch, 0, 1)
    monkeypatch.setattr(train_module, 'exit_process', lambda status: None)  # (a rank's end leaves by os._exit)
    try:
        with pytest.raises(UserError, match='non-finite by iteration 1: stopping'):
            train_in_process(tiny_data, tmp_path / 'run', '--max_iters=1', '--eval_interval=1',
                             '--learning_rate=1e12', '--grad_clip=0.0')
    finally:
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
    assert not (tmp_path / 'run' / 'ckpt.pt').exists()  # nothing non-finite saved



def test_under_torchrun_a_non_finite_loss_on_another_rank_stops_this_one_at_the_log_line(tiny_data, tmp_path, monkeypatch):
    # "a NaN on any rank stops every rank at the same line": this rank's losses are finite, another's
    # were not. One gloo rank in this process, its all-reduce joined by a second rank's flag (0: its loss
    # was NaN) under the op asked for, as a group of two combines them; the run must stop at iteration 1's
    # log line, not train on (and no checkpoint is written)
    torchrun_environment(monkeypatch, 0, 1)
    monkeypatch.setattr(train_module, 'exit_process', lambda status: None)
    real = train_module.all_reduce
    combine = {torch.distributed.ReduceOp.SUM: torch.add, torch.distributed.ReduceOp.MIN: torch.minimum,
               torch.distributed.ReduceOp.MAX: torch.maximum, torch.distributed.ReduceOp.PRODUCT: torch.mul}
    seen = []

    def two_ranks(tensor, op=torch.distributed.ReduceOp.SUM, **kw):
        real(tensor, op=op, **kw)  # this rank's own (a group of one)
        seen.append(tensor.item())
        tensor.copy_(combine[op](tensor, torch.zeros_like(tensor)))  # and rank 1's flag
    monkeypatch.setattr(train_module, 'all_reduce', two_ranks)
    try:
        with pytest.raises(UserError, match='non-finite by iteration 1: stopping'):
            train_in_process(tiny_data, tmp_path / 'run', '--max_iters=3', '--eval_interval=100', '--log_interval=1')
    finally:
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
    assert seen == [1.0]  # this rank was finite, and it stopped at the first log line
    assert not (tmp_path / 'run' / 'ckpt.pt').exists()

# -----------------------------------------------------------------------------
# resume and initializations: bit for bit as the uninterrupted run (one rank and two), onto the run's device, refused
# where the checkpoint does not match; inits one after another, each from a fresh start

def test_resume_reproduces_the_uninterrupted_run(tiny_data, tmp_path):
    common = ('--eval_interval=6', '--dropout=0.1', '--max_iters=12')  # dropout: the torch RNG must resume too
    train_in_process(tiny_data, tmp_path / 'full', *common)
    train_in_process(tiny_data, tmp_path / 'split', *common[:2], '--max_iters=6')
    with open(tmp_path / 'split' / 'log.jsonl', 'a') as f:
        f.write('{"kind": "train", "it')  # a line cut short: the run killed as it wrote (resume drops it)
    torch.manual_seed(123)  # whatever the RNG holds before a resume, the run reseeds it
    train_in_process(tiny_data, tmp_path / 'split', *common, '--init_from=resume')
    full = [e['loss'] for e in read_log(tmp_path / 'full') if e['kind'] == 'train']
    split_log = read_log(tmp_path / 'split')
    split = [e['loss'] for e in split_log if e['kind'] == 'train']
    assert len(full) == len(split) == 12
    assert split == full  # bit for bit: same batches, same dropout masks, same optimizer state
    assert len(set(full)) == 12
    assert [e['iter'] for e in split_log if e['kind'] == 'eval'] == [0, 6, 12]  # no iteration twice

    # eval_only on the resumed checkpoint evaluates that model and appends to the log
    train_in_process(tiny_data, tmp_path / 'split', *common, '--init_from=resume', '--eval_only=True')
    after = read_log(tmp_path / 'split')
    assert after[:-1] == split_log and after[-1]['kind'] == 'eval' and after[-1]['iter'] == 12
    assert after[-1]['val_loss'] == split_log[-1]['val_loss']


def test_two_rank_resume_reproduces_the_uninterrupted_run(tiny_data, tmp_path):
    # two CPU ranks over gloo: rank 0's logged loss follows the all-reduced gradients, so it
    # diverges after a resume if rank 1's dropout masks do not replay those of the full run. The full
    # run is torchrun's; each rank's `python train.py` is conftest's stand-in (forked from a process that
    # imported torch), under torchrun or, in the split run, given the environment torchrun gives a rank
    common = ('--eval_interval=4', '--dropout=0.2', '--gradient_accumulation_steps=2')

    def torchrun(out, *extra):  # as a user launches it (--no-python: its ranks run the stand-in, not a fresh python)
        r = subprocess.run([sys.executable, '-m', 'torch.distributed.run', '--standalone', '--nproc_per_node=2',
                            '--no-python', stand_in_python(), os.path.join(HERE, 'train.py'),
                            *train_args(tiny_data, out, *common, *extra)],
                           capture_output=True, text=True, timeout=300, env=dict(os.environ, OMP_NUM_THREADS='1'))
        assert r.returncode == 0, r.stderr[-3000:]

    def two_ranks(out, *extra):  # each rank with the environment torchrun gives it, without the launcher's start
        with socket.socket() as s:
            s.bind(('127.0.0.1', 0))
            port = s.getsockname()[1]
        procs, python = [], stand_in_python()
        for rank in (0, 1):
            env = dict(os.environ, OMP_NUM_THREADS='1', RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE='2',
                       LOCAL_WORLD_SIZE='2', MASTER_ADDR='127.0.0.1', MASTER_PORT=str(port))
            log = open(tmp_path / f'rank{rank}.log', 'w')  # (a file, not a pipe: a full pipe could stall a rank)
            procs.append((subprocess.Popen([python, os.path.join(HERE, 'train.py'),
                                            *train_args(tiny_data, out, *common, *extra)],
                                           stdout=log, stderr=subprocess.STDOUT, env=env), log))
        for proc, log in procs:
            rc = proc.wait(timeout=300)
            log.close()
            assert rc == 0, open(log.name).read()[-3000:]
    torchrun(tmp_path / 'full', '--max_iters=8')
    two_ranks(tmp_path / 'split', '--max_iters=4')
    two_ranks(tmp_path / 'split', '--max_iters=8', '--init_from=resume')
    full = [e['loss'] for e in read_log(tmp_path / 'full') if e['kind'] == 'train']
    split = [e['loss'] for e in read_log(tmp_path / 'split') if e['kind'] == 'train']
    assert len(full) == 8 and split == full
    two_ranks(tmp_path / 'split', '--max_iters=8', '--init_from=resume', '--eval_only=True')  # every rank stops


def test_resume_loads_the_checkpoint_onto_the_device_the_run_trains_on(tiny_data, tmp_path, monkeypatch):
    # on a GPU the checkpoint's tensors go to it as they are read, not to the host's memory first. No GPU
    # here: the device the loader is asked for is recorded, and the loading done on the CPU
    out = tmp_path / 'run'
    tiny_checkpoint(out, tiny_data)
    asked, load = [], LoopedGPT.from_checkpoint.__func__

    def from_checkpoint(cls, path, device='cpu'):
        asked.append(device)
        return load(cls, path, 'cpu')
    monkeypatch.setattr(LoopedGPT, 'from_checkpoint', classmethod(from_checkpoint))
    c = SimpleNamespace(**settings(*train_args(tiny_data, out, '--init_from=resume')))
    _, ckpt = train_module.build_model(c, {'vocab_size': 256}, 'cuda:1')
    assert asked == ['cuda:1'] and ckpt['iter_num'] == 4


def test_resume_refuses_a_checkpoint_that_does_not_match(tiny_data, tmp_path):
    out = tmp_path / 'run'
    tiny_checkpoint(out, tiny_data)
    c = SimpleNamespace(**settings(*train_args(tiny_data, out, '--init_from=resume', '--n_embd=64')))
    with pytest.raises(UserError, match=r"n_embd=32 \(asked: 64\)"):
        train_module.build_model(c, {'vocab_size': 256}, 'cpu')
    c = SimpleNamespace(**settings(*train_args(tiny_data, out, '--init_from=resume')))
    with pytest.raises(UserError, match='vocab 256 but'):
        train_module.build_model(c, {'vocab_size': 50257, 'tokenizer': 'gpt2'}, 'cpu')
    assert train_module.build_model(c, {'vocab_size': 256}, 'cpu')[1]['iter_num'] == 4  # it matches
    c = SimpleNamespace(**settings(*train_args(tiny_data, tmp_path / 'none', '--init_from=resume')))
    with pytest.raises(UserError, match='no checkpoint'):
        train_module.build_model(c, {'vocab_size': 256}, 'cpu')


ALTERED = dict(block_size=16, n_layer=2, n_head=4, n_embd=64, dropout=0.1, n_loops=3, readout='raw', loss='terminal',
               norm_penalty=0.01, interloop_norm=True, init_std=0.05)  # a value other than TINY's for every model field


FIELD = '--model_class=beyond.additions.FieldGPT'


ALTERED_FIELD = dict(sandwich_norm=True, inject=True, damping=True, window=4, positions='none')  # and beyond/'s


def test_resume_refuses_a_checkpoint_that_differs_in_any_model_field_or_class(tiny_data, tmp_path):
    from beyond.additions import FieldGPT
    out, field = tmp_path / 'run', tmp_path / 'field'
    tiny_checkpoint(out, tiny_data)
    tiny_checkpoint(field, tiny_data, FIELD)
    assert set(ALTERED) == set(train_module.model_fields())  # (a new field needs its value here)
    assert set(ALTERED) | set(ALTERED_FIELD) == set(train_module.model_fields(FieldGPT))
    for run, named, altered in ((out, (), ALTERED), (field, (FIELD,), {**ALTERED, **ALTERED_FIELD})):
        for key, value in altered.items():
            c = SimpleNamespace(**settings(*train_args(tiny_data, run, *named, '--init_from=resume', f'--{key}={value}')))
            with pytest.raises(UserError, match=rf"does not match this config: {key}="):  # {key}
                train_module.build_model(c, {'vocab_size': 256}, 'cpu')
    c = SimpleNamespace(**settings(*train_args(tiny_data, out, FIELD, '--init_from=resume')))
    with pytest.raises(UserError, match='holds a model.LoopedGPT, not the beyond.additions.FieldGPT'):
        train_module.build_model(c, {'vocab_size': 256}, 'cpu')


def test_inits_train_one_after_another_each_as_a_run_of_its_own(tiny_data, tmp_path):
    # inits=2 over 7 iterations: 3 then 4, each with the warm-up and cosine of a run of that length (read from
    # the logs of two such runs: their cosines differ from the first step past the warm-up), each evaluated at its end
    # though eval_interval is longer
    lr = ('--learning_rate=3e-3', '--min_lr=3e-4', '--warmup_iters=1', '--lr_decay=cosine', '--eval_interval=100')
    train_in_process(tiny_data, tmp_path / 'two', *lr, '--inits=2', '--max_iters=7')
    for n in (3, 4):
        train_in_process(tiny_data, tmp_path / f'own{n}', *lr, f'--max_iters={n}')
    lrs = lambda run: [e['lr'] for e in read_log(tmp_path / run) if e['kind'] == 'train']
    assert lrs('two') == lrs('own3') + lrs('own4') and lrs('own3')[2] != lrs('own4')[2] and len(set(lrs('own4'))) == 4
    assert [e['iter'] for e in read_log(tmp_path / 'two') if e['kind'] == 'eval'] == [0, 3, 7]

    # what the second initialization learns owes nothing to the first: resumed at the boundary from another run's
    # checkpoint (other weights and moments: trained at another learning rate), it trains as the run did
    common = ('--inits=2', '--max_iters=8', '--eval_interval=4')
    train_in_process(tiny_data, tmp_path / 'full', *common)
    train_in_process(tiny_data, tmp_path / 'other', '--max_iters=4', '--learning_rate=1e-2', '--eval_interval=4')
    train_in_process(tiny_data, tmp_path / 'other', *common, '--init_from=resume')
    losses = lambda run: [e['loss'] for e in read_log(tmp_path / run) if e['kind'] == 'train']
    assert losses('other')[4:] == losses('full')[4:] and losses('other')[:4] != losses('full')[:4]

    # as many initializations as asked, cut as evenly as whole steps allow; more than the iterations: one line
    assert [train_module.init_starts(n, k) for n, k in ((7, 2), (6, 4), (10, 3), (5, 5), (9, 1))] == [
        [0, 3, 7], [0, 1, 3, 4, 6], [0, 3, 6, 10], [0, 1, 2, 3, 4, 5], [0, 9]]
    with pytest.raises(UserError, match='inits=3 initializations need at least as many iterations; the run has 2'):
        train_in_process(tiny_data, tmp_path / 'short', '--inits=3', '--max_iters=2')
    assert not (tmp_path / 'short').exists()


def test_stop_score_ends_the_run_where_the_kept_score_reaches_it_keeping_what_the_whole_run_kept_there(
        tiny_data, tmp_path, capsys):
    # the whole run (inits=2 over 8 iterations, evaluated every 2, every checkpoint kept): its scores, the val loss
    common = ('--inits=2', '--max_iters=8', '--eval_interval=2')
    train_in_process(tiny_data, tmp_path / 'whole', *common, '--keep_checkpoints=True')
    evals = [e for e in read_log(tmp_path / 'whole') if e['kind'] == 'eval']
    score = {e['iter']: e['val_loss'][-1] for e in evals}  # the val loss at the trained K (TINY's n_loops=2, the last)
    assert score[2] < score[0] and score[4] < score[2]  # (the kept score falls: 2, then 4 are kept)
    # stop_score exactly the score kept at iteration 4: the run ends at that evaluation (<=, not <), after 4
    # iterations, in its first initialization, with the checkpoint the whole run kept there, weight for weight
    capsys.readouterr()
    train_in_process(tiny_data, tmp_path / 'at', *common, f'--stop_score={score[4]!r}')
    assert 'the run ends here' in capsys.readouterr().out
    log = read_log(tmp_path / 'at')
    assert [e['iter'] for e in log if e['kind'] == 'eval'] == [0, 2, 4]
    assert [e['iter'] for e in log if e['kind'] == 'train'][-1] <= 4
    kept = torch.load(tmp_path / 'at' / 'ckpt.pt', weights_only=False)
    there = torch.load(tmp_path / 'whole' / 'ckpt-4.pt', weights_only=False)
    assert kept['iter_num'] == 4 and all(torch.equal(kept['model'][k], there['model'][k]) for k in there['model'])
    # a hair below it: never reached in the first initialization, so the second starts (and the run goes on)
    below = math.nextafter(score[4], -math.inf)
    train_in_process(tiny_data, tmp_path / 'below', *common, f'--stop_score={below!r}')
    assert 'initialization 2 of 2' in capsys.readouterr().out
    assert [e['iter'] for e in read_log(tmp_path / 'below') if e['kind'] == 'eval'][:4] == [0, 2, 4, 6]


def test_a_fresh_start_is_a_new_model_of_its_own_seed_and_clears_the_moments():
    cfg = LoopedGPTConfig(vocab_size=16, n_layer=1, n_head=2, n_embd=32, n_loops=2, block_size=8, init_std=0.02)
    model = LoopedGPT(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model(torch.zeros(1, 8, dtype=torch.long), torch.ones(1, 8, dtype=torch.long))[1].backward()
    opt.step()
    assert opt.state
    weights = lambda: {k: v.clone() for k, v in model.state_dict().items()}
    train_module.fresh_start(model, opt, seed=7, init=1)
    first = weights()
    assert not opt.state
    train_module.fresh_start(model, opt, seed=7, init=2)
    second = weights()
    train_module.fresh_start(model, opt, seed=7, init=1)
    assert all(torch.equal(first[k], v) for k, v in weights().items())    # its seed's, whatever came before
    assert not torch.equal(first['lm_head.weight'], second['lm_head.weight'])  # each initialization its own
    torch.manual_seed(7)  # the run's first initialization (seed + rank, rank 0): not drawn again
    assert not torch.equal(first['lm_head.weight'], LoopedGPT(cfg).state_dict()['lm_head.weight'])
    torch.manual_seed(0)
    built = LoopedGPT(cfg).state_dict()
    for k, v in built.items():  # drawn as the class draws a model: the same shapes and spreads
        assert first[k].shape == v.shape, k
        if v.numel() > 1:
            assert first[k].float().std().item() == pytest.approx(v.float().std().item(), rel=0.2, abs=1e-6), k


# -----------------------------------------------------------------------------
# the settings and their checks, in-process (the functions the script runs first): --help, what makes no sense,
# every range at its bounds (the value at the bound taken, just past it refused in one line naming the setting),
# the configs

def test_help_lists_every_setting_with_its_comment(capsys):
    with pytest.raises(SystemExit) as e:
        settings('config/cpu.py', '--help')
    assert e.value.code == 0
    text = capsys.readouterr().out
    assert text.startswith('usage: python train.py')
    for key, default in train_module.SETTINGS.items():
        line = next((l for l in text.splitlines() if l.strip().startswith(f'--{key}=')), None)
        assert line is not None, key
        value, _, comment = line.strip().partition(' ')
        assert comment.strip(), f"setting {key} has no comment (every setting says its unit or options)"
    assert "  --loss_path='fused'" in text and "'fused' (linear_ce's chunked" in text
    # the block: one line a setting, at most 110 characters, the studies' settings under one heading at its end
    block = open(train_module.__file__).read().split('\n# ---')[1].splitlines()[1:]
    assert max(map(len, block)) <= 110 and [r[2] for r in settings_block(train_module.__file__) if not r[0]][-1].startswith(
        'beyond the paper')


EXIT = '--model_class=beyond.exit_train.ExitTrainedGPT'  # (exit-aware training: beyond/'s class, with its field)


@pytest.mark.parametrize('bad,needle', [
    (['--n_loops=0'], "'n_loops'"), (['--n_embd=100', '--n_head=3'], 'multiple of n_head'),
    (['--norm_penalty=-1'], 'reward large norms'), (['--learning_rate=-3e-4'], "'learning_rate'"),
    (['--dropout=1.0'], "'dropout'"), (['--dropout=-0.1'], "'dropout'"), (['--batch_size=0'], "'batch_size'"),
    (['--block_size=0'], "'block_size'"), (['--eval_iters=0'], "'eval_iters'"), (['--beta2=1.5'], "'beta2'"),
    (['--grad_clip=-1.0'], "'grad_clip'"), (['--epochs=0'], "'epochs'"), (['--seed=-1'], "'seed'"),
    ([EXIT, '--exit_train=1.0'], "'exit_train'"), ([EXIT, '--exit_train=-0.5'], "'exit_train'"),
    ([EXIT, '--exit_train=0.5', '--loss=terminal'], "exit_train needs loss='perloop'"),
    (['--model_class=beyond.additions.FieldGPT', '--positions=rope'], "'positions'"),
    (['--bptt=1'], 'bptt=1 trains with truncated backprop'),
    (['--random_depth=True', '--depth_draw=progressive', '--max_loops=4'], 'the progressive draw trains with truncated'),
    (['--model_class=beyond.nowhere.Model'], "beyond/ is not here"), (['--window=2'], "unknown setting 'window'"),
    (['--loss_path=unfused'], "'loss_path'"), (['--compile=yes'], "'compile'")])
def test_settings_that_make_no_sense_are_refused(bad, needle):
    with pytest.raises(UserError) as e:
        settings(*bad)
    assert needle in str(e.value)


def test_random_depth_refuses_a_max_loops_below_n_loops_and_takes_one_equal_to_it():
    """check_settings: random_depth draws K with mean n_loops, capped at max_loops, so max_loops must be at least
    n_loops: one below it is one line naming both; one equal to it is taken, as is any max_loops without random_depth."""
    with pytest.raises(UserError) as e:
        settings('--random_depth=True', '--n_loops=5', '--max_loops=4')
    assert 'max_loops' in str(e.value) and 'n_loops (5)' in str(e.value) and 'got 4' in str(e.value)
    assert '\n' not in str(e.value)
    assert settings('--random_depth=True', '--n_loops=5', '--max_loops=5')['max_loops'] == 5
    assert settings('--n_loops=5', '--max_loops=4')['max_loops'] == 4


def test_every_range_rule_accepts_its_bounds_and_refuses_what_lies_past_them():
    # each rule of train.RANGES at its edges, in the setting's own type: '>= x' takes x and not below it,
    # '> x' not x, '[a, b)' a and not b, a tuple its values and nothing else
    def ok(key, value):
        try:
            check_ranges({key: value}, {key: train_module.RANGES[key]})
            return True
        except UserError as e:
            assert f"'{key}'" in str(e)
            return False
    for key, rule in train_module.RANGES.items():
        if isinstance(rule, tuple):
            assert all(ok(key, v) for v in rule) and not ok(key, 'no-such-value'), key
            continue
        kind = type(train_module.SETTINGS[key])
        step = 1 if kind is int else 1e-6
        if rule.startswith('['):
            low, high = (kind(float(v)) for v in rule.strip('[)').split(','))
            assert ok(key, low) and ok(key, high - step) and not ok(key, high) and not ok(key, low - step), key
        else:
            op, bound = rule.split()
            bound = kind(float(bound))
            assert ok(key, bound + step) and not ok(key, bound - step) and ok(key, bound) == (op == '>='), key


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
        train_module.setup(argv)
    message = str(e.value)
    assert key in message and '\n' not in message, message


@pytest.mark.parametrize('key,low', LOWER, ids=[b[0] for b in LOWER])
def test_a_lowest_value_is_taken_and_the_value_below_it_refused(key, low):
    named = CLASS.get(key, [])
    assert train_module.setup([*named, f'--{key}={low!r}'])[key] == low
    refused([*named, f'--{key}={past(low, -1)!r}'], f"'{key}'")


@pytest.mark.parametrize('key,bound', OPEN, ids=[b[0] for b in OPEN])
def test_an_open_bound_is_refused_and_the_value_just_inside_it_taken(key, bound):
    inside = past(bound, 1 if bound == 0 else -1)
    assert train_module.setup([f'--{key}={inside!r}'])[key] == inside
    refused([f'--{key}={bound!r}'], f"'{key}'")


def test_the_width_and_heads_bounds_and_exit_train_below_one():
    # n_embd and n_head at 1 (n_embd a multiple of n_head); exit_train just under 1 with the class that trains it
    from beyond.exit_train import ExitTrainedGPT
    assert train_module.setup(['--n_embd=1', '--n_head=1'])['n_embd'] == 1
    refused(['--n_embd=0', '--n_head=1'], "'n_embd'")
    refused(['--n_head=0'], "'n_head'")
    below_one = math.nextafter(1.0, 0.0)
    assert train_module.setup([f'--exit_train={below_one!r}'], model_class=ExitTrainedGPT)['exit_train'] == below_one
    with pytest.raises(UserError, match="'exit_train'"):
        train_module.setup(['--exit_train=1.0'], model_class=ExitTrainedGPT)


def test_every_condition_config_loads_and_overlays_compose():
    defaults = dict(out_dir='out', readout='norm', loss='perloop', norm_penalty=0.0, interloop_norm=False,
                    n_layer=8, n_head=8, n_embd=512, batch_size=64, model_class='model.LoopedGPT')
    config = os.path.join(HERE, 'config')
    overlays = ('cpu.py', 'cpu_long.py', 'cpu_44m.py', '129m.py', 'random_depth.py')
    conditions = sorted(f for f in os.listdir(config) if f not in overlays + ('parity.py', 'addition.py'))  # (tasks' recipes: below)
    assert len(conditions) == 15  # the paper's eight, two with exit-aware training, five of the field's scale controls
    seen = set()
    field, exit_aware = 'beyond.additions.FieldGPT', 'beyond.exit_train.ExitTrainedGPT'
    beyond = {'sandwich_perloop.py': field, 'inject_perloop.py': field, 'damped_perloop.py': field,
              'contractive_perloop.py': field, 'raw_perloop_exit.py': exit_aware, 'penalty_perloop_exit.py': exit_aware}
    for name in conditions:  # each names its model: the paper's, or beyond/'s (train.py's own checks, with that class)
        assert settings(os.path.join(config, name))['model_class'] == beyond.get(name, 'model.LoopedGPT'), name
        c = configure(defaults, [os.path.join(config, name), os.path.join(config, '129m.py')])
        assert c['out_dir'] == f"out-{name[:-3]}-129m" and c['n_embd'] == 768
        seen.add(tuple(c.get(k) for k in ('readout', 'loss', 'norm_penalty', 'interloop_norm', 'exit_train',
                                          'sandwich_norm', 'inject', 'damping')))  # (beyond/'s: where its class is named)
        long = configure(dict(defaults, max_iters=0, epochs=4.0, eval_interval=500, dataset='x', device='auto',
                              compile='auto', dropout=0.1, block_size=256, learning_rate=3e-4, eval_iters=40,
                              log_interval=50),
                         [os.path.join(config, name), os.path.join(config, 'cpu.py'), os.path.join(config, 'cpu_long.py')])
        assert long['out_dir'] == f"out-{name[:-3]}-cpu-long" and long['max_iters'] == 0 and long['epochs'] == 4.0
    assert len(seen) == 15  # fifteen different conditions
    for overlay in overlays:  # every overlay is train.py settings
        settings(os.path.join(config, 'raw_perloop.py'), os.path.join(config, overlay))


def test_the_cpu_44m_overlay_keeps_the_papers_recipe():
    # config/cpu_44m.py sizes only the batch and the length for a CPU: the model, its init and
    # the optimizer are the paper's 44M recipe (train.py's defaults)
    config = os.path.join(HERE, 'config')
    paper = settings(os.path.join(config, 'norm_perloop.py'))
    cpu = settings(os.path.join(config, 'norm_perloop.py'), os.path.join(config, 'cpu_44m.py'))
    changed = {k for k in paper if paper[k] != cpu[k]}
    assert changed == {'out_dir', 'device', 'compile', 'batch_size', 'max_iters', 'eval_interval', 'eval_iters',
                       'log_interval'}
    assert (cpu['n_embd'], cpu['n_layer'], cpu['n_head'], cpu['n_loops'], cpu['block_size']) == (512, 8, 8, 4, 256)


def test_a_select_that_cannot_be_loaded_is_one_line_naming_the_setting():
    with pytest.raises(UserError) as e:  # (beyond/ is here: only the function is missing)
        train_module.setup([f'{HERE}/config/parity.py', '--select=beyond.tasks.nope'])
    assert str(e.value) == ("select 'beyond.tasks.nope' cannot be loaded: AttributeError: module 'beyond.tasks' has no "
                            "attribute 'nope'")
    with pytest.raises(UserError, match=r"^select 'beyond.gone.probe' cannot be loaded \(beyond/ is not here: the paper "
                                        r"needs only the top level\): ModuleNotFoundError"):
        train_module.setup([f'{HERE}/config/parity.py', '--select=beyond.gone.probe'])
    assert train_module.setup([f'{HERE}/config/parity.py'])['select'] == 'beyond.tasks.long_probe'


def test_the_recipe_config_loads_with_its_twin():
    c = train_module.setup([f'{HERE}/config/parity.py'])
    assert (c['positions'], c['window'], c['inject'], c['readout'], c['interloop_norm'], c['depth_draw']) == (
        'none', 2, True, 'norm', True, 'progressive')
    assert train_module.setup([f'{HERE}/config/parity.py', '--interloop_norm=False'])['interloop_norm'] is False



def test_the_addition_recipe_is_paritys_but_where_the_task_differs():
    # config/addition.py's promise: the parity recipe, with the data, the row and the loops a 16-bit carry chain needs
    # (the probe read every 100 steps, initializations of 3,000 steps where parity's are 1,500, at most four, until a
    # checkpoint passes every read), nothing else changed
    parity, addition = (settings(os.path.join(HERE, 'config', f'{name}.py')) for name in ('parity', 'addition'))
    changed = {k for k in parity.keys() | addition.keys() if parity.get(k) != addition.get(k)}
    assert changed == {'out_dir', 'dataset', 'block_size', 'max_loops', 'n_loops', 'eval_interval', 'max_iters'}
    assert (addition['dataset'], addition['block_size'], addition['max_loops'], addition['n_loops']) == ('addition', 18, 24, 24)
    assert (addition['inits'], addition['max_iters'], addition['stop_score']) == (4, 12000, 0.0)
    assert (parity['inits'], parity['max_iters'], parity['stop_score']) == (4, 6000, 0.0)
    c = train_module.setup([f'{HERE}/config/addition.py'])  # (train.py's own checks, with the model class it names)
    assert c['select'] == 'beyond.tasks.long_probe' and c['window'] == 2

# -----------------------------------------------------------------------------
# a scale control added by a fork, with no edit to model.py: a subclass of LoopedGPTConfig with one field and a
# subclass of LoopedGPT that overrides one hook (as beyond/additions.py adds the field's controls). A config naming
# the class makes the field a train.py setting with its comment in --help; the run saves it, the checkpoint records
# the class and loads back as it, and eval_depth.py evaluates it and describes the run by the field

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
    named = ['--model_class=test_train.CappedGPT']  # (as a config file names it: model_class = '...')
    # --help lists it under the config, with the comment written beside the field
    with pytest.raises(SystemExit):
        train_module.setup([*named, '--help'])
    help_text = capsys.readouterr().out
    assert '[test_train.py: CappedConfig]' in help_text
    assert "--rms_cap=0.0" in help_text and "each carried state's RMS capped at this (0 = off)" in help_text
    with pytest.raises(train_module.UserError, match="unknown setting 'rms_cap'"):
        train_module.setup(['--rms_cap=0.5'])  # (LoopedGPT has no such field)
    with pytest.raises(train_module.UserError, match="model_class 'nowhere.CappedGPT' cannot be loaded"):
        train_module.setup(['--model_class=nowhere.CappedGPT'])  # one line
    # a run trained with it saves it, and its branch runs: the states' RMS stays under the cap
    out = tmp_path / 'capped'
    try:
        train_module.main(train_args(tiny_data, out, *named, '--rms_cap=0.005', '--max_iters=3', '--eval_interval=3'))
    finally:
        torch.set_flush_denormal(False)
    ckpt = torch.load(out / 'ckpt.pt', weights_only=True)
    assert ckpt['model_args']['rms_cap'] == 0.005 and ckpt['config']['rms_cap'] == 0.005
    assert ckpt['model_class'] == 'test_train.CappedGPT'
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
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(stdout):
            eval_depth.main([str(out), '--device', 'cpu', '--max_tokens', '256', '--bench_iters', '1', '--out',
                             str(tmp_path / 'eval')])
    finally:
        torch.set_flush_denormal(False)  # (setup_device turns it on process-wide: the range tests below read denormals)
    assert 'rms_cap 0.005' in err.getvalue()
    run = json.loads((tmp_path / 'eval' / 'results.json').read_text())['runs'][0]
    assert run['model']['rms_cap'] == 0.005


# -----------------------------------------------------------------------------
# a task in rows (conftest's parity_data): the val loss reads only scored positions, a run trains on rows with the
# progressive loss

def test_val_loss_reads_only_scored_positions(parity_data):
    _, val_data, _ = load_splits(str(parity_data), 'parity', 32)
    torch.manual_seed(0)
    model = FieldGPT(FieldGPTConfig(vocab_size=4, n_layer=1, n_head=2, n_embd=32, n_loops=3, dropout=0.0,
                                      positions='none', window=2, inject=True, init_std=0.02))
    batches = eval_batches(val_data, eval_iters=2, batch_size=16, block_size=32, device='cpu')
    val_loss = train_module.evaluate(model, batches, torch.no_grad(), 3, diag_tokens=64)['val_loss']
    xs, ys = batches
    with torch.no_grad():  # by hand: each K's logits, CE over the positions with a target, nothing else
        logits = [model(x, n_loops=k)[0] for x in xs for k in (1, 2, 3)]
    ce = lambda rule: [torch.cat([torch.nn.functional.cross_entropy(  # noqa: E731
        logits[3 * b + k].flatten(0, 1), rule(ys[b]).flatten(), ignore_index=-1, reduction='none')[
            rule(ys[b]).flatten() >= 0] for b in range(2)]).mean().item() for k in range(3)]
    assert val_loss == pytest.approx(ce(lambda y: y), rel=1e-4)
    # the wrong rule, pads scored as if their target were a bit, gives another number
    assert val_loss != pytest.approx(ce(lambda y: y.clamp(min=0)), rel=1e-2)


def test_a_parity_run_trains_on_rows_with_the_progressive_loss(parity_data, tmp_path):
    out = tmp_path / 'run'
    try:
        train_module.main(parity_args(parity_data, out, '--random_depth=True', '--depth_draw=progressive', '--max_loops=4',
                               '--n_loops=4', '--max_iters=3', '--eval_interval=3'))
    finally:
        torch.set_flush_denormal(False)
    evals = [json.loads(l) for l in (out / 'log.jsonl').read_text().splitlines() if '"eval"' in l]
    assert len(evals[-1]['val_loss']) == 4 and all(np.isfinite(evals[-1]['val_loss']))
    ckpt = torch.load(out / 'ckpt.pt', weights_only=True)
    assert ckpt['model_args']['window'] == 2 and ckpt['model_args']['positions'] == 'none'
    # learned positions cannot read rows longer than block_size: one line, before any training
    with pytest.raises(train_module.UserError, match='block_size 8'):
        train_module.main(parity_args(parity_data, tmp_path / 'x', '--positions=learned', '--block_size=8', '--max_iters=1'))
    # the longest row of the splits it reads: train's 9 tokens fit block_size 9, val's 13 (strings of up to 12 bits) do not
    with pytest.raises(train_module.UserError, match="parity's rows are up to 13 tokens, more than block_size 9"):
        train_module.main(parity_args(parity_data, tmp_path / 'x', '--positions=learned', '--block_size=9', '--max_iters=1'))


# -----------------------------------------------------------------------------
# the step: the learning rate's schedule, dropout reseeded per rank, clipping folded into fused AdamW, float16's
# grad scaler, DDP's wrapping, a compiler that cannot build

def test_lr_warms_up_linearly_then_holds_or_follows_a_cosine():
    lr = dict(learning_rate=1.0, min_lr=0.1, warmup_iters=4, max_iters=14)
    cosine = [train_module.get_lr(it, **lr, lr_decay='cosine') for it in range(16)]
    assert cosine[:4] == pytest.approx([0.2, 0.4, 0.6, 0.8])  # (it + 1) / (warmup + 1): never 0
    assert cosine[4] == pytest.approx(1.0)                      # the top, as warm-up ends
    assert cosine[9] == pytest.approx(0.55)                     # halfway: (1 + 0.1) / 2
    assert cosine[14] == pytest.approx(0.1) and cosine[15] == pytest.approx(0.1)  # min_lr, and after
    assert cosine[6] == pytest.approx(0.1 + 0.45 * (1 + math.cos(math.pi * 0.2)))
    constant = [train_module.get_lr(it, **lr, lr_decay='constant') for it in range(16)]
    assert constant[:4] == cosine[:4] and constant[4:] == [1.0] * 12


def test_a_rank_reseeds_its_dropout_from_seed_rank_and_iteration():
    draws = {}
    for seed, it, rank in ((7, 3, 0), (7, 3, 1), (7, 4, 1), (7, 3, 1), (8, 3, 1)):
        train_module.seed_step(seed, it, rank)
        draws.setdefault((seed, it, rank), []).append(torch.rand(4))
    assert torch.equal(*draws[(7, 3, 1)])  # the same step on the same rank: the same masks, resumed or not
    first = [d[0] for d in draws.values()]
    assert all(not torch.equal(a, b) for i, a in enumerate(first) for b in first[i + 1:])


def step_once(model, dtype, scaler):
    """One train_step; returns its outputs and the update of every parameter, flattened."""
    optimizer = train_module.make_optimizer(model, learning_rate=1e-2, betas=(0.9, 0.99), weight_decay=0.0)
    xs, ys = torch.randint(0, 64, (2, 2, 16), generator=torch.Generator().manual_seed(1)).unbind(0)
    before = [p.detach().clone() for p in model.parameters()]
    out = train_module.train_step(model, optimizer, scaler, xs[None], ys[None], ctx=autocast('cpu', dtype), grad_clip=1.0)
    assert all(p.grad is None for p in model.parameters())  # (the step's gradients freed after it, not kept as zeros)
    return out, torch.cat([(p.detach() - b).flatten() for b, p in zip(before, model.parameters())])


@pytest.mark.parametrize('clip_at', [1e-3, 1e3])  # the gradient's norm is far above the first, far below the second
def test_clipping_folded_into_fused_adamw_is_clip_grad_norm(clip_at):
    # train_step hands the clip's factor to fused AdamW (its grad_scale) instead of multiplying every
    # gradient: the update must be clip_grad_norm_'s, clipped or not
    xs, ys = torch.randint(0, 64, (2, 2, 16), generator=torch.Generator().manual_seed(1)).unbind(0)

    def update(folded, clipped=True):
        torch.manual_seed(0)
        model = tiny_model()
        optimizer = train_module.make_optimizer(model, learning_rate=1e-2, betas=(0.9, 0.99), weight_decay=0.01)
        assert optimizer.defaults['fused']
        before = [p.detach().clone() for p in model.parameters()]
        model(xs, ys)[1].backward()
        norm = torch.nn.utils.get_total_norm([p.grad for p in model.parameters()])
        if clipped:
            train_module.clip(model, optimizer, clip_at, folded=folded)
        optimizer.step()
        return norm, torch.cat([(p.detach() - b).flatten() for b, p in zip(before, model.parameters())])

    norm, folded = update(True)
    _, plain = update(False)
    assert (norm > clip_at) == (clip_at < 1)  # (each case is what its name says)
    assert torch.allclose(folded, plain, rtol=1e-5, atol=1e-9)
    # and clipping changes the update where the norm is above the clip (AdamW's eps sees a gradient's scale)
    _, unclipped = update(True, clipped=False)
    assert torch.allclose(unclipped, plain, rtol=1e-5, atol=1e-9) == (clip_at > 1)


def test_the_folded_clip_serves_its_own_step_only():
    # clip's factor lives on the optimizer (fused AdamW's grad_scale) for one step: left there, a later
    # step without clipping (or with another norm) would be scaled by it
    model = tiny_model()
    optimizer = train_module.make_optimizer(model, learning_rate=1e-2, betas=(0.9, 0.99), weight_decay=0.0)
    xs, ys = torch.randint(0, 64, (2, 1, 2, 16), generator=torch.Generator().manual_seed(1))
    scaler = torch.amp.GradScaler('cpu', enabled=False)
    real = train_module.clip
    seen = []

    def spy(*args, **kw):
        real(*args, **kw)
        seen.append(float(optimizer.grad_scale))
    train_module.clip = spy
    try:
        train_module.train_step(model, optimizer, scaler, xs, ys, ctx=autocast('cpu', 'float32'), grad_clip=1e-3)
    finally:
        train_module.clip = real
    assert seen and seen[0] > 1  # the step was clipped through the optimizer
    assert not hasattr(optimizer, 'grad_scale')


def test_grad_clip_0_is_off_the_step_that_of_a_clip_too_large_to_bite():
    # "grad_clip 0: off": no clip is made and the step is the unclipped one (here that of a clip at 1e9, which scales
    # nothing); a clip at 0 made all the same would zero every gradient and leave the weights where they were
    import copy
    torch.manual_seed(0)
    model = tiny_model()
    xs, ys = torch.randint(0, 64, (2, 1, 2, 16), generator=torch.Generator().manual_seed(1))
    after, calls = {}, []
    for grad_clip in (0.0, 1e9):
        m = copy.deepcopy(model)
        optimizer = train_module.make_optimizer(m, learning_rate=1e-2, betas=(0.9, 0.99), weight_decay=0.0)
        scaler = torch.amp.GradScaler('cpu', enabled=False)
        real = train_module.clip
        train_module.clip = lambda *a, **kw: (calls.append(grad_clip), real(*a, **kw))
        try:
            train_module.train_step(m, optimizer, scaler, xs, ys, ctx=autocast('cpu', 'float32'), grad_clip=grad_clip)
        finally:
            train_module.clip = real
        after[grad_clip] = torch.cat([p.detach().flatten() for p in m.parameters()])
    assert calls == [1e9]
    before = torch.cat([p.detach().flatten() for p in model.parameters()])
    assert torch.allclose(after[0.0], after[1e9], atol=1e-6) and not torch.allclose(after[0.0], before, atol=1e-4)


def test_adamw_decays_every_parameter_by_the_weight_decay_asked_for():
    # "weight decay on every parameter": with every gradient zero, AdamW's step is the decay alone,
    # p <- p (1 - lr wd), on the norms' gains and the biases as on the matrices
    model = tiny_model()
    lr, wd = 0.5, 0.3
    optimizer = train_module.make_optimizer(model, learning_rate=lr, betas=(0.9, 0.99), weight_decay=wd)
    before = [p.detach().clone() for p in model.parameters()]
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    optimizer.step()
    assert len(before) > 2
    for b, p in zip(before, model.parameters()):
        assert torch.allclose(p.detach(), b * 0.85, rtol=1e-6, atol=0)


def test_float16_steps_through_the_grad_scaler():
    # the path for GPUs without bf16: float16 autocast, the loss scaled up before backward and the
    # gradients unscaled before clipping. Here on the CPU, where torch has float16 autocast too.
    try:
        with torch.autocast('cpu', dtype=torch.float16):
            torch.ones(2, 2) @ torch.ones(2, 2)
        scaler = torch.amp.GradScaler('cpu', init_scale=2.0**10, growth_interval=1)
    except (RuntimeError, ValueError, AttributeError) as e:
        pytest.skip(f'this torch has no float16 autocast or GradScaler on the CPU ({e})')
    model = tiny_model()
    (loss, ce, h_norm), update = step_once(model, 'float16', scaler)
    assert scaler.is_enabled() and scaler.get_scale() == 2.0**11  # finite gradients: the step was taken, the scale grew
    assert (update != 0).float().mean() > 0.9  # (AdamW moves every parameter that has a gradient)
    assert torch.isfinite(loss) and loss.dtype == torch.float32 and ce.shape == h_norm.shape == (2,)
    (ref_loss, _, _), ref_update = step_once(tiny_model(), 'float32', torch.amp.GradScaler('cpu', enabled=False))
    assert loss.item() == pytest.approx(ref_loss.item(), rel=1e-2)  # the same step, in float16
    # AdamW's first step is about lr * sign(gradient): the float16 gradients, unscaled, point the same way
    assert torch.nn.functional.cosine_similarity(update, ref_update, dim=0) > 0.9
    # a scale too large for float16: the scaled gradients overflow, the step is skipped and the scale backs off
    scaler = torch.amp.GradScaler('cpu', init_scale=2.0**40)
    (loss, _, _), update = step_once(tiny_model(), 'float16', scaler)
    assert torch.isfinite(loss) and (update == 0).all() and scaler.get_scale() == 2.0**39


def ddp_wrap_checks(store):
    """The checks of the test below, on one gloo rank in the calling process."""
    from torch.nn.parallel import DistributedDataParallel as DDP
    torch.distributed.init_process_group('gloo', init_method=f'file://{store}', rank=0, world_size=1)
    raw = tiny_model()
    model = train_module.wrap_for_training(raw, ddp=True, compile_it=True, device='cpu')
    assert isinstance(model, torch._dynamo.eval_frame.OptimizedModule)
    assert isinstance(model._orig_mod, DDP) and model._orig_mod.module is raw
    model.require_backward_grad_sync = False  # train_step's switch reaches DDP through the compiled wrapper
    assert model._orig_mod.require_backward_grad_sync is False
    assert not any('_orig_mod' in k or k.startswith('module.') for k in raw.state_dict())  # saved as is
    # one loop leaves the inter-loop norm unused: DDP must be told, or its second backward fails
    # (one rank is enough to see it: DDP checks every parameter got its gradient)
    one_loop = tiny_model(interloop_norm=True, n_loops=1)
    assert any(p.requires_grad for p in one_loop.interloop_norm.parameters())
    model = train_module.wrap_for_training(one_loop, ddp=True, compile_it=False, device='cpu')
    x = torch.randint(0, 64, (2, 16))
    for _ in range(2):
        model(x, x)[1].backward()


def test_ddp_wraps_the_model_before_compile_and_is_told_of_an_unused_norm(tmp_path):
    # compile(DDP(model)): DDPOptimizer then splits the compiled graph at DDP's buckets. One gloo
    # rank is enough to build the wrappers (the two-rank test trains eager). In a process of its
    # own that leaves without Python's teardown, as train.py does under torchrun: destroying a
    # gloo group in this process could deadlock in ~ProcessGroupGloo (its run-loop thread waits
    # for the GIL the joining thread holds; seen once in a full run here)
    if not torch.distributed.is_available():
        pytest.skip('this torch has no torch.distributed')
    # (the process: this file run as a script, by conftest's stand-in, forked from a process that imported torch)
    r = run_script('tests/test_train.py', 'ddp_wrap_checks', tmp_path / 'store', env=dict(os.environ, OMP_NUM_THREADS='1'),
                   stand_in=True)
    assert r.returncode == 0 and r.stdout.strip() == 'checked', r.stderr[-3000:]


@pytest.mark.parametrize('kw,n_loops,bptt', [
    (dict(), 2, 0), (dict(interloop_norm=True), 2, 0), (dict(interloop_norm=True, n_loops=1), 1, 0),
    (dict(damping=True, n_loops=1), 1, 0), (dict(positions='none'), 2, 0), (dict(window=4), 2, 0),
    (dict(), 3, 1)])  # the last: random depth's truncated backprop, loop 1 without a graph
def test_ddp_is_told_of_unused_parameters_exactly_where_a_step_leaves_one_without_a_gradient(kw, n_loops, bptt):
    from beyond.additions import FieldGPT
    model = tiny_model(FieldGPT, **kw)  # (the paper's, with beyond/'s fields at their defaults)
    x, y = torch.randint(0, 64, (2, 2, 16), generator=torch.Generator().manual_seed(1))
    model(x, y, n_loops=n_loops, bptt=bptt)[1].backward()
    unused = [name for name, p in model.named_parameters() if p.grad is None]
    assert model.may_skip_parameters(varying_depth=bool(bptt)) == bool(unused), unused


def test_a_compiler_that_cannot_build_the_training_step_is_one_clear_line(tiny_data, tmp_path):
    # as sample.py's: inductor with no such C++ compiler and no compile caches (so nothing already
    # built is reused) fails at the first step; train.py says how to run anyway
    torch._dynamo.reset()
    try:
        with torch._inductor.config.patch({'cpp.cxx': (None, str(tmp_path / 'no-such-g++')),
                                           'force_disable_caches': True}):
            with pytest.raises(UserError) as e:
                train_in_process(tiny_data, tmp_path / 'run', '--max_iters=1', '--compile=on', '--n_loops=1')
    finally:
        torch._dynamo.reset()
    message = str(e.value)
    assert message.startswith('compile is on but torch.compile could not build the training step here')
    assert 'C++ compiler' in message and message.endswith('--compile=off') and '\n' not in message
    assert 'no-such-g++' in message  # (the cause: the compiler's own error, which names the compiler it tried)


if __name__ == '__main__' and sys.argv[1:2] == ['ddp_wrap_checks']:  # the DDP test's process (above)
    ddp_wrap_checks(sys.argv[2])
    print('checked', flush=True)
    os._exit(0)


def test_the_best_val_loss_a_checkpoint_records_is_the_lowest_so_far_even_when_every_one_is_saved(monkeypatch):
    """eval_and_save: with always_save_checkpoint every evaluation is saved, and each checkpoint records the best val
    loss so far (the lowest), not the last; without it only a better one is saved."""
    saved = []
    losses = iter([3.0, 2.0, 2.5, 1.5])
    monkeypatch.setattr(train_module, 'evaluate', lambda *a, **k: dict(val_loss=[9.0, next(losses)]))
    monkeypatch.setattr(train_module, 'log', lambda *a, **k: None)
    monkeypatch.setattr(train_module, 'eval_line', lambda *a, **k: '')
    monkeypatch.setattr(train_module, 'save_checkpoint', lambda out_dir, m, o, it, best, config, name='ckpt.pt':
                        saved.append((it, best, name)))
    model = SimpleNamespace(config=SimpleNamespace(n_loops=2))
    for always, want_saved in ((True, [(1, 3.0), (2, 2.0), (3, 2.0), (4, 1.5)]), (False, [(1, 3.0), (2, 2.0), (4, 1.5)])):
        losses, saved[:] = iter([3.0, 2.0, 2.5, 1.5]), []
        c = SimpleNamespace(**dict(train_module.OWN, always_save_checkpoint=always, keep_checkpoints=False, n_loops=2))
        best, bests = float('inf'), []
        for it in range(1, 5):
            finite, best = train_module.eval_and_save(c, model, None, None, ctx=nullcontext(), iter_num=it,
                                                      best_val_loss=best, can_save=True)
            bests.append(best)
        assert bests == [3.0, 2.0, 2.0, 1.5]
        assert [(it, b) for it, b, _ in saved] == want_saved


def test_the_run_says_it_saved_its_checkpoint_after_each_evaluation_it_saved_and_only_then(monkeypatch, capsys):
    """eval_and_save: a line 'saved OUT/ckpt.pt' after each evaluation whose checkpoint was written (the log tells which
    evaluation ckpt.pt holds); none after one not better, one not finite, or on a rank that does not save."""
    written = []
    monkeypatch.setattr(train_module, 'log', lambda *a, **k: None)
    monkeypatch.setattr(train_module, 'eval_line', lambda *a, **k: '')
    monkeypatch.setattr(train_module, 'save_checkpoint', lambda out_dir, m, o, it, best, config, name='ckpt.pt':
                        written.append(it))
    model = SimpleNamespace(config=SimpleNamespace(n_loops=2))
    c = SimpleNamespace(**dict(train_module.OWN, always_save_checkpoint=False, keep_checkpoints=False, n_loops=2,
                               out_dir='out-here'))
    best, said = float('inf'), []
    for it, loss, can_save in ((1, 3.0, True), (2, 4.0, True), (3, float('nan'), True), (4, 1.0, False), (5, 2.0, True)):
        monkeypatch.setattr(train_module, 'evaluate', lambda *a, **k: dict(val_loss=[9.0, loss]))
        _, best = train_module.eval_and_save(c, model, None, None, ctx=nullcontext(), iter_num=it, best_val_loss=best,
                                             can_save=can_save)
        said.append(capsys.readouterr().out)
    assert written == [1, 5]
    assert said == ['saved out-here/ckpt.pt\n', '', '', '', 'saved out-here/ckpt.pt\n']


def test_a_float16_run_steps_through_an_enabled_grad_scaler_and_any_other_through_a_disabled_one(tiny_data, tmp_path,
                                                                                              monkeypatch):
    """train.main's GradScaler: on for dtype float16 (the loss scaled up before backward, test_float16_steps_through_
    the_grad_scaler), off (a no-op) for any other dtype: float32 here."""
    try:
        with torch.autocast('cpu', dtype=torch.float16):
            torch.ones(2, 2) @ torch.ones(2, 2)
        torch.amp.GradScaler('cpu')
    except (RuntimeError, ValueError, AttributeError) as e:
        pytest.skip(f'this torch has no float16 autocast or GradScaler on the CPU ({e})')
    real_step, enabled = train_module.train_step, []

    def step(model, optimizer, scaler, *args, **kw):
        enabled.append(scaler.is_enabled())
        return real_step(model, optimizer, scaler, *args, **kw)
    monkeypatch.setattr(train_module, 'train_step', step)
    for dtype in ('float16', 'float32'):
        train_in_process(tiny_data, tmp_path / dtype, '--max_iters=1', '--eval_interval=100', f'--dtype={dtype}')
    assert enabled == [True, False]


def test_a_task_in_rows_reads_a_row_a_sequence_and_its_epochs_count_the_rows_tokens(parity_data, tmp_path, capsys):
    """A task written in rows (beyond/parity.py) is read a whole row at a time: a sequence is a row, so the tokens an
    iteration are batch_size x the row's length, and max_iters 0 makes `epochs` passes over the rows' tokens."""
    from conftest import parity_args
    from data import load_rows
    rows = load_rows(str(parity_data / 'parity'), 'train')
    train_module.main(parity_args(parity_data, tmp_path / 'run', '--max_iters=0', '--epochs=2', '--eval_interval=1000'))
    per_iter = 8 * rows.x.shape[1]  # (TINY: batch_size 8)
    assert f'{per_iter:,} tokens per iteration, {math.ceil(2 * rows.x.size / per_iter):,} iterations' in capsys.readouterr().out


def test_by_default_the_clip_with_fused_adamw_leaves_the_gradients_and_hands_its_factor_to_the_optimizer():
    """clip's policy (its docstring): with fused AdamW the factor goes to the optimizer as its grad_scale and no
    gradient is touched (no pass of its own over them); folded=False scales the gradients as clip_grad_norm_."""
    xs, ys = torch.randint(0, 64, (2, 2, 16), generator=torch.Generator().manual_seed(1)).unbind(0)
    for folded in (None, False):
        torch.manual_seed(0)
        model = tiny_model()
        optimizer = train_module.make_optimizer(model, learning_rate=1e-2, betas=(0.9, 0.99), weight_decay=0.01)
        model(xs, ys)[1].backward()
        grads = [p.grad.clone() for p in model.parameters()]
        norm = torch.nn.utils.get_total_norm(grads)
        train_module.clip(model, optimizer, 1e-3, **({} if folded is None else dict(folded=folded)))
        if folded is None:
            assert all(torch.equal(g, p.grad) for g, p in zip(grads, model.parameters()))
            assert float(optimizer.grad_scale) == pytest.approx(float((norm + 1e-6) / 1e-3), rel=1e-5)
        else:
            assert getattr(optimizer, 'grad_scale', None) is None
            assert torch.nn.utils.get_total_norm([p.grad for p in model.parameters()]) == pytest.approx(1e-3, rel=1e-3)


def test_eval_only_evaluates_the_resumed_checkpoint_once_and_trains_nothing(tiny_data, tmp_path):
    """eval_only: 'evaluate once and exit (with init_from='resume': out_dir's checkpoint)': one eval line appended at
    the checkpoint's iteration, no train line, the checkpoint's weights and iteration as they were."""
    tiny_checkpoint(tmp_path, tiny_data)  # (iteration 4, untrained)
    before = torch.load(tmp_path / 'ckpt.pt', weights_only=True)
    train_in_process(tiny_data, tmp_path, '--init_from=resume', '--eval_only=True', '--max_iters=20')
    log = read_log(tmp_path)
    assert [(r['kind'], r['iter']) for r in log] == [('eval', 4)]
    after = torch.load(tmp_path / 'ckpt.pt', weights_only=True)
    assert after['iter_num'] == 4 and all(torch.equal(before['model'][k], after['model'][k]) for k in before['model'])



def test_a_model_class_is_named_by_its_module_and_a_script_run_as_main_by_the_module_it_was_run_as(monkeypatch):
    """class_name, as a config names a model class and a checkpoint records it: 'module.Class'; a class of a script run
    as python -m beyond.x (module '__main__'), that module's name; a class whose module is not imported as one (no
    module in sys.modules, so no spec), its own module name."""
    assert train_module.class_name(LoopedGPT) == 'model.LoopedGPT'
    assert train_module.class_name(FieldGPT) == 'beyond.additions.FieldGPT'
    main = type('Main', (), {'__module__': '__main__'})
    monkeypatch.setitem(sys.modules, '__main__', SimpleNamespace(__spec__=SimpleNamespace(name='beyond.sample')))
    assert train_module.class_name(main) == 'beyond.sample.Main'
    monkeypatch.setitem(sys.modules, '__main__', SimpleNamespace(__spec__=None))  # (python script.py: no spec)
    assert train_module.class_name(main) == '__main__.Main'
    assert train_module.class_name(type('Loose', (), {'__module__': 'not_imported'})) == 'not_imported.Loose'


def test_under_torchrun_a_rank_ends_by_exit_process_after_the_barrier_and_the_groups_end(tiny_data, tmp_path, monkeypatch):
    """main under torchrun (one rank, in this process): at the end, the process group ended and then the rank leaves by
    runtime.exit_process(0) (os._exit: freeing the DDP model can hang), not by returning."""
    class Left(BaseException):
        pass
    left = []

    def leave(status):
        left.append((status, torch.distributed.is_initialized()))
        raise Left
    monkeypatch.setattr(train_module, 'exit_process', leave)
    torchrun_environment(monkeypatch, 0, 1)
    try:
        with pytest.raises(Left):
            train_in_process(tiny_data, tmp_path / 'run', '--max_iters=1', '--eval_interval=1')
    finally:
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
    assert left == [(0, False)]
    assert torch.load(tmp_path / 'run' / 'ckpt.pt', weights_only=True)['iter_num'] == 1
