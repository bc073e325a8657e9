"""
Every number the scripts write, recomputed by another path (issue 53): train.py's log.jsonl (train and
eval records, and the lines it prints) and the validation loss its checkpoint keeps, eval_depth.py's
results.json and tables, the mean ||H_K|| of beyond/tasks.py and the held-out loss of beyond/exit_gate.py,
each against a computation by hand or from the model's states with torch's and numpy's own functions
(F.cross_entropy, torch.autograd.grad, np.percentile), never through the code that wrote it. FIELDS lists
every field with the test, here or elsewhere, that recomputes it; a new field fails until it has one.

    python -m pytest -q tests/test_recomputed.py
"""

import contextlib
import io
import itertools
import json
import math
import os
import shutil
from contextlib import nullcontext
from dataclasses import asdict
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch.nn import functional as F

import eval_depth
import train
from beyond import exit_gate, tasks
from conftest import HERE, train_in_process
from data import eval_batches, load_tokens, train_batches
from depth import draw_depth
from model import LoopedGPT, LoopedGPTConfig

PEAK = 1e9     # FLOP/s given to the runs (a CPU has no peak, so no MFU)
STEP_S = 0.25  # seconds a training step takes on the fake clock
SEED, B, T = 1337, 8, 32  # conftest's TINY: batch 8, block 32
# random depth with truncated backprop through the last loop: at seed 1337 the six steps draw K = 3, 1 | 2, 2 | 1, 2,
# so each train line (two steps) has loops no step read, and loop 4 never runs
DEPTH = ('--random_depth=True', '--n_loops=2', '--max_loops=4', '--bptt=1', '--model_class=beyond.additions.FieldGPT')
BPTT, MEAN_K, MAX_K = 1, 2, 4
DRAWS = [draw_depth(SEED, it, mean=MEAN_K, cap=MAX_K, sigma=0.5) for it in range(6)]
SCORED = 256   # tokens eval_depth scores: 8 windows, one batch


def read_log(out):
    with open(out / 'log.jsonl') as f:
        return [json.loads(line) for line in f]


def load(out):
    return LoopedGPT.from_checkpoint(str(out))[0].eval()


def ce_by_hand(model, x, y, K, clamp=False):
    """Per-token CE (N,) of the model run with K loops, from its logits."""
    with torch.no_grad():
        logits = model(x, n_loops=K, clamp=clamp)[0]
    return F.cross_entropy(logits.flatten(0, 1).double(), y.flatten(), reduction='none')


def states_by_hand(model, x, K, clamp=False):
    """[H_0 .. H_K], each (N, C) float64."""
    with torch.no_grad():
        return [h.reshape(-1, h.size(-1)).double() for h in model.hidden_states(x, K, clamp)]


def radial_by_hand(model, h, y):
    """|<g, H>| / (|g| |H|) per token, g = d CE / d H of reading H out as the last loop, by autograd, float64."""
    h = h.clone().requires_grad_(True)
    logits = F.linear(model.readout(h, last=True), model.lm_head.weight.detach().double())
    (g,) = torch.autograd.grad(F.cross_entropy(logits, y.flatten(), reduction='sum'), h)
    return (g * h).sum(-1).abs() / (g.norm(dim=-1) * h.norm(dim=-1))


def one_minus_cos(h, prev):
    return 1 - (h * prev).sum(-1) / (h.norm(dim=-1) * prev.norm(dim=-1))


def norm_stats(norms):
    """mean, median (torch's: the lower of the two middle values), p99 (numpy's linear rule) and max."""
    n = np.sort(norms.numpy())
    return dict(norm_mean=n.mean(), norm_median=n[(len(n) - 1) // 2], norm_p99=np.percentile(n, 99), norm_max=n[-1])


def assert_close(got, want, rel=1e-5):
    for key, value in want.items():
        assert got[key] == pytest.approx(float(value), rel=rel), key


# -----------------------------------------------------------------------------
# train.py: a run whose model does not move (learning rate 1e-9), so every record is recomputable from
# its checkpoint, on a fake clock (STEP_S a step) and with a peak of PEAK FLOP/s

@pytest.fixture(scope='module')
def still_run(tiny_data, tmp_path_factory):
    """(run folder, its log records, what it printed). The alpha readout: its radial fraction is far from
    zero (a normalized readout's is float64's noise, which any rule would match) and it has scalars to report."""
    out = tmp_path_factory.mktemp('still') / 'run'
    clock, real_step = [0.0], train.train_step

    def step(*args, **kw):
        clock[0] += STEP_S
        return real_step(*args, **kw)
    printed = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(printed):
        mp.setattr(train, 'time', SimpleNamespace(time=lambda: clock[0]))
        mp.setattr(train, 'train_step', step)
        mp.setattr(train, 'peak_flops', lambda device, dtype: PEAK)
        train_in_process(tiny_data, out, *DEPTH, '--readout=alpha', '--dtype=float32', '--learning_rate=1e-9',
                         '--max_iters=6', '--log_interval=2', '--eval_interval=6')
    return out, read_log(out), printed.getvalue()


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
        # each step's matmul FLOPs (the estimate test_behaviour counts matmul by matmul): K loops forward,
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


def printed_line(r):
    """train.py's line of the log record r, as each label names its field."""
    row = lambda key, spec: ' '.join('-' if v is None else format(v, spec) for v in r[key])  # noqa: E731
    if r['kind'] == 'train':
        return (f"iter {r['iter']}: loss {r['loss']:.4f} | ce {row('ce', '.3f')} | |H_k| {row('h_norm', '.1f')} | "
                f"lr {r['lr']:.1e} | {r['ms_per_iter']:.1f} ms/iter | {r['tok_per_s']:,.0f} tok/s | mfu {100 * r['mfu']:.1f}%")
    return (f"eval {r['iter']}: val loss K=1..{len(r['val_loss'])} {row('val_loss', '.4f')} | ppl {row('val_ppl', '.4g')} | "
            f"|H_k| mean {row('norm_mean', '.1f')} p99 {row('norm_p99', '.1f')} | radial {row('radial', '.1e')} | "
            f"angular {row('angular', '.2e')}")


def test_each_printed_line_shows_its_records_numbers_in_their_places(still_run):
    from report import eval_line
    _, log, printed = still_run
    lines = printed.splitlines()
    for r in log:
        assert printed_line(r) in lines, printed_line(r)
    # the tiny run's norms agree to one decimal: a record whose every field is its own number
    ev = dict(val_loss=[1.25], val_ppl=[3.5], norm_mean=[10.5], norm_median=[20.5], norm_p99=[30.5], norm_max=[40.5],
              radial=[5e-3], angular=[6e-4])
    assert eval_line(7, ev) == printed_line(dict(kind='eval', iter=7, **ev))


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


def test_peak_memory_is_cudas_peak_in_gib(tmp_path, monkeypatch, capsys):
    from report import log_train
    monkeypatch.setattr(torch.cuda, 'max_memory_allocated', lambda device: 3 * 2 ** 30 + 2 ** 29)
    from report import LogSums
    sums = LogSums(1, 'cpu')
    sums.add(torch.tensor(2.0), torch.ones(1), torch.ones(1), flops=0)
    log_train(str(tmp_path), 1, sums, seconds=1.0, lr=1e-3, tokens_per_iter=1, peak=None, device='cuda')
    assert read_log(tmp_path)[0]['peak_mem_gib'] == 3.5 and '| 3.5 GiB' in capsys.readouterr().out


def test_mfu_is_against_the_16_bit_peak_only_for_a_16_bit_run(monkeypatch):
    import runtime
    monkeypatch.setattr(torch.cuda, 'get_device_name', lambda device=None: 'NVIDIA H100 80GB HBM3')
    assert runtime.peak_flops('cuda', 'bfloat16') == runtime.peak_flops('cuda', 'float16') == 989e12
    assert runtime.peak_flops('cuda', 'float32') is None  # (its peak is another: no MFU rather than a wrong one)
    assert runtime.peak_flops('cpu', 'bfloat16') is None


# -----------------------------------------------------------------------------
# eval_depth.py on the still run, with its alpha readout's scalars set by hand (alpha = sigmoid(1), s_ref = 3),
# on a fake clock (0.5 s a timed pass)

@pytest.fixture(scope='module')
def evaluated(still_run, tmp_path_factory):
    """(run folder, its record in results.json, what eval_depth.py printed, the whole results.json)."""
    root = tmp_path_factory.mktemp('evaluated')
    run = root / 'run'
    shutil.copytree(still_run[0], run)
    ckpt = torch.load(run / 'ckpt.pt', weights_only=True)
    ckpt['model']['alpha_logit'].fill_(1.0)
    ckpt['model']['log_s_ref'].fill_(math.log(3.0))
    torch.save(ckpt, run / 'ckpt.pt')
    clock = itertools.count(0.0, 0.5)
    printed = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(printed), \
            contextlib.redirect_stderr(io.StringIO()):
        mp.setattr(eval_depth, 'peak_flops', lambda device, dtype: PEAK)
        mp.setattr(eval_depth, 'time', SimpleNamespace(perf_counter=lambda: next(clock)))
        mp.setattr(eval_depth, 'all_plots', lambda *args: [])  # (figures hold no number of their own)
        eval_depth.main([str(run), '--device=cpu', '--dtype=float32', f'--max_tokens={SCORED}', '--batch_size=8',
                         '--bench_iters=1', '--clamp', '--lemma_loops=4', '--lemma_tokens=64', '--curves',
                         '--out', str(root / 'eval')])
    with open(root / 'eval' / 'results.json') as f:
        results = json.load(f)
    return run, results['runs'][0], printed.getvalue(), results


def scored(tiny_data, n=SCORED):
    """The first n targets of the val split in windows of T, as (x, y) of shape (n / T, T)."""
    val, _ = load_tokens(str(tiny_data / 'tiny-bytes'), 'val')
    tokens = torch.from_numpy(val[:n + 1].astype(np.int64))
    return tokens[:-1].view(-1, T), tokens[1:].view(-1, T)


def test_every_ks_loss_norms_radial_and_angular_are_recomputed_from_the_states(evaluated, tiny_data):
    run, result, *_ = evaluated
    model = load(run)
    x, y = scored(tiny_data)
    free, clamped = states_by_hand(model, x, MAX_K), states_by_hand(model, x, MAX_K, clamp=True)
    assert [row['K'] for row in result['per_K']] == [1, 2, 3, 4] and result['tokens_scored'] == SCORED
    for K, row in enumerate(result['per_K'], start=1):
        loss, c_loss = ce_by_hand(model, x, y, K).mean().item(), ce_by_hand(model, x, y, K, clamp=True).mean().item()
        assert row['loss'] == pytest.approx(loss, rel=1e-5) and row['ppl'] == pytest.approx(math.exp(loss), rel=1e-5)
        assert_close(row, norm_stats(free[K].norm(dim=-1)))
        assert row['radial'] == pytest.approx(radial_by_hand(model, free[K], y).mean().item(), rel=1e-5)
        assert row['angular'] == pytest.approx(one_minus_cos(free[K], free[K - 1]).mean().item(), rel=1e-5, abs=1e-7)
        c = row['clamp']
        assert c['loss'] == pytest.approx(c_loss, rel=1e-5) and c['ppl'] == pytest.approx(math.exp(c_loss), rel=1e-5)
        assert c['delta_loss'] == pytest.approx(c_loss - loss, rel=1e-4, abs=1e-6)
        assert_close(c, norm_stats(free[1].norm(dim=-1)), rel=1e-4)  # the clamp keeps each token at its loop-1 norm
        assert c['radial'] == pytest.approx(radial_by_hand(model, clamped[K], y).mean().item(), rel=1e-5)
        assert c['angular'] == pytest.approx(one_minus_cos(clamped[K], clamped[K - 1]).mean().item(), rel=1e-5, abs=1e-7)
        # the timed pass: the first batch (8 windows of T) in 0.5 s of the fake clock; MFU of a forward at K
        assert row['tok_per_s'] == pytest.approx(B * T / 0.5, rel=1e-9)
        assert row['mfu'] == pytest.approx(model.flops_per_token(K, training=False, T=T) * B * T / 0.5 / PEAK, rel=1e-9)
    assert abs(result['per_K'][3]['clamp']['loss'] - result['per_K'][3]['loss']) > 1e-4  # (the clamp matters here)


def test_the_norm_histogram_counts_each_tokens_norm_at_the_trained_k(evaluated, tiny_data):
    run, result, *_ = evaluated
    model = load(run)
    x, _ = scored(tiny_data)
    h = result['final_norm_hist']
    edges = 10.0 ** (np.arange(161) / 20 - 1)  # 20 bins a decade from 0.1 to 1e7
    assert h['loop'] == MEAN_K and h['edges'] == pytest.approx(edges.tolist(), rel=1e-12)
    by_hand = {}
    for K in (MEAN_K, MAX_K):
        norms = states_by_hand(model, x, K)[K].norm(dim=-1).numpy()
        bins = (np.searchsorted(edges, norms, side='right') - 1).clip(0, 159)  # (outside 0.1..1e7: the end bins)
        by_hand[K] = np.bincount(bins, minlength=160).tolist()
    assert h['counts'] == by_hand[MEAN_K] != by_hand[MAX_K]


def test_lemma_2_is_recomputed_from_the_first_lemma_tokens_states(evaluated, tiny_data):
    run, result, *_ = evaluated
    model = load(run)
    x, _ = scored(tiny_data, 64)  # --lemma_tokens 64: the first two windows
    H = states_by_hand(model, x, 4)[1:]
    s = [h.pow(2).mean(-1).sqrt() for h in H]
    u = [h / s_k[:, None] for h, s_k in zip(H, s)]
    lem = result['lemma']
    assert lem['loops'] == 4 and lem['tokens'] == 64
    assert lem['s'] == pytest.approx([s_k.mean().item() for s_k in s], rel=1e-6)
    step = [(u[k + 1] - u[k]).norm(dim=-1) for k in range(3)]
    assert lem['radial_increment'] == pytest.approx([(u[k] * (H[k + 1] - H[k])).sum(-1).mean().item() for k in range(3)],
                                                    rel=1e-6)
    assert lem['angular_step'] == pytest.approx([st.mean().item() for st in step], rel=1e-6)
    assert lem['s_times_angular'] == pytest.approx([(s[k] * step[k]).mean().item() for k in range(3)], rel=1e-6)
    assert lem['c'] == pytest.approx(sum(lem['s_times_angular'][1:]) / 2, rel=1e-12)  # the median of loops 2 and 3's


def test_the_curve_reads_every_record_at_the_trained_k(evaluated, still_run):
    # random depth logs every loop to the cap (4): the curve is the trained K's (2), the drift figure's
    _, result, *_ = evaluated
    _, log, _ = still_run
    evals, trains = [r for r in log if r['kind'] == 'eval'], [r for r in log if r['kind'] == 'train']
    k = MEAN_K - 1
    assert result['curve'] == dict(iter=[0, 6], norm_p99=[r['norm_p99'][k] for r in evals],
                                   val_loss_1=[r['val_loss'][0] for r in evals],
                                   val_loss_K=[r['val_loss'][k] for r in evals], train_iter=[0, 2, 4, 6],
                                   norm_mean=[evals[0]['norm_mean'][k]] + [r['h_norm'][k] for r in trains])
    assert None not in result['curve']['norm_mean']


def test_the_run_record_says_what_was_evaluated_and_what_the_model_learned(evaluated):
    run, result, *_ = evaluated
    ckpt = torch.load(run / 'ckpt.pt', weights_only=True)
    depth = dict(result['depth'])
    assert depth.pop('draw') == dict(n_loops=MEAN_K, depth_sigma=0.5, max_loops=MAX_K, bptt=BPTT)
    assert depth == pytest.approx(dict(alpha=1 / (1 + math.exp(-1)), s_ref=3.0), rel=1e-6)  # as the fixture set them
    assert (result['trained_K'], result['random_depth'], result['seed'], result['split'], result['batch_size'],
            result['device'], result['dtype'], result['compiled']) == (MEAN_K, True, SEED, 'val', B, 'cpu', 'float32', False)
    assert (result['model'], result['config']) == (ckpt['model_args'], ckpt['config'])
    assert (result['name'], result['path']) == ('run', str(run))


def table_rows(text, head):
    """The rows of the markdown table whose header row starts with head, as {column: cell}."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(head))
    names = [c.strip() for c in lines[start].strip('|').split('|')]
    rows = []
    for line in itertools.takewhile(lambda line: line.startswith('|'), lines[start + 2:]):
        rows.append(dict(zip(names, (c.strip() for c in line.strip('|').split('|')))))
    return rows


def depth_table_cells(name, r, trained_K):
    """A row of the depth table as each column's header names its field (one run: no ± std)."""
    return {'run': name, 'K': f"{r['K']}{'*' if r['K'] == trained_K else ''}", 'ppl': f"{r['ppl']:.3f}",
            'ppl clamped': f"{r['clamp']['ppl']:.3f}", 'Δ loss clamp': f"{r['clamp']['delta_loss']:+.4f}",
            'mean ‖H_K‖': f"{r['norm_mean']:.1f}", 'p99 ‖H_K‖': f"{r['norm_p99']:.1f}", 'max ‖H_K‖': f"{r['norm_max']:.1f}",
            'radial frac': f"{r['radial']:.1e}", '1-cos': f"{r['angular']:.1e}", 'tok/s': f"{r['tok_per_s']:,.0f}"}


def test_each_table_column_shows_its_own_field(evaluated):
    run, result, printed, _ = evaluated
    rows = table_rows(printed, '| run | K |')
    assert rows == [depth_table_cells('run', r, MEAN_K) for r in result['per_K']]
    # the tiny run's norms agree to the table's one decimal: a row whose every field is its own number
    row = dict(K=2, ppl=1.5, tok_per_s=2500.0, norm_mean=3.5, norm_median=4.5, norm_p99=5.5, norm_max=6.5, radial=7.5e-3,
               angular=8.5e-4, clamp=dict(ppl=9.5, delta_loss=0.0105))
    nan = float('nan')
    std = dict(ppl=nan, norm_mean=nan, norm_p99=nan, norm_max=nan, clamp=dict(ppl=nan, delta_loss=nan))
    group = dict(name='g', n=1, mean=dict(per_K=[row], trained_K=2), std=dict(per_K=[std]))
    assert table_rows(eval_depth.table([group]), '| run | K |') == [depth_table_cells('g', row, 2)]
    lem = result['lemma']
    rows = table_rows(printed, '| run | k |')
    assert [c['k'] for c in rows] == ['1', '2']  # loops 1, 2, 4, .. below the sweep's 4
    for cells in rows:
        k = int(cells['k'])
        assert cells == {'run': 'run', 'k': str(k), 's_k': f"{lem['s'][k - 1]:.4g}",
                         'a_k': f"{lem['radial_increment'][k - 1]:.4g}",
                         '‖u_k+1 − u_k‖': f"{lem['angular_step'][k - 1]:.3e}",
                         's_k ‖u_k+1 − u_k‖': f"{lem['s_times_angular'][k - 1]:.4g}"}


# -----------------------------------------------------------------------------
# beyond/: the task study's mean ||H_K|| and the exit gate's held-out loss

def test_the_task_studys_state_norms_are_the_bits_not_the_start_token(tmp_path):
    torch.manual_seed(0)
    cfg = LoopedGPTConfig(vocab_size=4, block_size=16, n_layer=1, n_head=2, n_embd=16, n_loops=2, dropout=0.0)
    config = dict(data_dir=str(tmp_path), dataset='parity')  # (a parity run's vocabulary; its data not at hand)
    torch.save(dict(model_args=asdict(cfg), model=LoopedGPT(cfg).state_dict(), config=config), tmp_path / 'ckpt.pt')
    results = tasks.evaluate([str(tmp_path)], [12], [1, 3], seed=2, rows=8)
    model = load(tmp_path)
    x, _ = tasks.test_strings(2, 12, 8)  # (8, 13): the start token, then 12 bits
    with torch.no_grad():
        H = model.hidden_states(x, 3)
    assert {r['K'] for r in results} == {1, 3} and all(r['trained_K'] == 2 for r in results)
    for r in results:
        assert set(r) == set(FIELDS['beyond.tasks row'])
        h, prev = H[r['K']][:, 1:].double(), H[r['K'] - 1][:, 1:].double()  # positions 1..12, the bits
        assert r['h_norm'] == pytest.approx(h.norm(dim=-1).mean().item(), rel=1e-5)
        assert r['rms'] == pytest.approx(h.pow(2).mean(-1).sqrt().mean().item(), rel=1e-5)
        assert r['one_minus_cos'] == pytest.approx(one_minus_cos(h, prev).mean().item(), rel=1e-4, abs=1e-7)
        assert r['h_norm'] != pytest.approx(H[r['K']].norm(dim=-1).mean().item(), rel=1e-3)  # (with it: another)


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


# -----------------------------------------------------------------------------
# every field written, and the test that recomputes it (None: a label, not a number, or the object itself)

TRAIN, EVAL, TASKS = 'tests/test_train.py', 'tests/test_eval_depth.py', 'tests/test_tasks.py'
ME = 'tests/test_recomputed.py'
FIELDS = {
    'train record': dict(
        kind=None, iter=f'{TRAIN}::test_training_lowers_the_loss_logs_every_loop_and_saves_the_last_iteration',
        loss=f'{ME}::test_each_train_record_is_its_steps_loss_ce_and_norms_recomputed_from_the_model',
        ce=f'{ME}::test_each_train_record_is_its_steps_loss_ce_and_norms_recomputed_from_the_model',
        h_norm=f'{ME}::test_each_train_record_is_its_steps_loss_ce_and_norms_recomputed_from_the_model',
        lr=f'{TRAIN}::test_adamw_steps_with_the_learning_rate_the_log_reports',
        ms_per_iter=f'{ME}::test_train_records_speed_and_mfu_count_the_drawn_depth_and_truncated_backprop',
        tok_per_s=f'{ME}::test_train_records_speed_and_mfu_count_the_drawn_depth_and_truncated_backprop',
        mfu=f'{ME}::test_train_records_speed_and_mfu_count_the_drawn_depth_and_truncated_backprop',
        peak_mem_gib=f'{ME}::test_peak_memory_is_cudas_peak_in_gib'),
    'eval record': dict(
        kind=None, iter=f'{TRAIN}::test_training_lowers_the_loss_logs_every_loop_and_saves_the_last_iteration',
        **{k: f'{ME}::test_each_eval_record_is_the_val_loss_and_diagnostics_recomputed_from_the_states'
           for k in ('val_loss', 'val_ppl', 'norm_mean', 'norm_median', 'norm_p99', 'norm_max', 'radial', 'angular')}),
    'checkpoint': dict(
        model_args=None, model=None, optimizer=None, config=None,
        model_class='tests/test_train.py::test_a_new_field_is_a_setting_a_checkpoint_entry_and_a_result',
        iter_num=f'{ME}::test_the_checkpoint_kept_is_the_best_val_loss_at_the_trained_k_under_random_depth',
        best_val_loss=f'{ME}::test_the_checkpoint_kept_is_the_best_val_loss_at_the_trained_k_under_random_depth'),
    'results.json': dict(
        command=None, runs=None, notes=None, groups=f'{EVAL}::test_seeds_of_one_condition_are_grouped_into_mean_and_std'),
    'results.json run': dict(
        **{k: f'{ME}::test_the_run_record_says_what_was_evaluated_and_what_the_model_learned'
           for k in ('name', 'path', 'model', 'trained_K', 'random_depth', 'depth', 'seed', 'config', 'split', 'batch_size',
                     'device', 'dtype', 'compiled')},
        tokens_scored=f'{EVAL}::test_perplexity_equals_an_independent_computation_over_the_scored_tokens',
        per_K=f'{ME}::test_every_ks_loss_norms_radial_and_angular_are_recomputed_from_the_states',
        final_norm_hist=f'{ME}::test_the_norm_histogram_counts_each_tokens_norm_at_the_trained_k',
        lemma=f'{ME}::test_lemma_2_is_recomputed_from_the_first_lemma_tokens_states',
        curve=f'{ME}::test_the_curve_reads_every_record_at_the_trained_k'),
    'results.json per_K row': {k: f'{ME}::test_every_ks_loss_norms_radial_and_angular_are_recomputed_from_the_states'
                               for k in ('K', 'loss', 'ppl', 'tok_per_s', 'mfu', 'norm_mean', 'norm_median', 'norm_p99',
                                         'norm_max', 'radial', 'angular', 'clamp')},
    'results.json clamp': {k: f'{ME}::test_every_ks_loss_norms_radial_and_angular_are_recomputed_from_the_states'
                           for k in ('loss', 'ppl', 'delta_loss', 'norm_mean', 'norm_median', 'norm_p99', 'norm_max',
                                     'radial', 'angular')},
    'results.json final_norm_hist': {k: f'{ME}::test_the_norm_histogram_counts_each_tokens_norm_at_the_trained_k'
                                     for k in ('loop', 'edges', 'counts')},
    'results.json lemma': {k: f'{ME}::test_lemma_2_is_recomputed_from_the_first_lemma_tokens_states'
                           for k in ('loops', 'tokens', 's', 'radial_increment', 'angular_step', 's_times_angular', 'c')},
    'results.json curve': {k: f'{ME}::test_the_curve_reads_every_record_at_the_trained_k'
                           for k in ('iter', 'norm_p99', 'val_loss_1', 'val_loss_K', 'train_iter', 'norm_mean')},
    'tables': {'depth table and Lemma 2 table': f'{ME}::test_each_table_column_shows_its_own_field',
               'train.py\'s printed lines': f'{ME}::test_each_printed_line_shows_its_records_numbers_in_their_places'},
    'beyond.tasks row': dict(
        run=None, length=None, K=None, intervention=None,
        trained_K=f'{ME}::test_the_task_studys_state_norms_are_the_bits_not_the_start_token',
        accuracy=f'{TASKS}::test_beyond_tasks_scores_each_length_and_k_as_the_model_reads_them',
        exact=f'{TASKS}::test_beyond_tasks_scores_each_length_and_k_as_the_model_reads_them',
        **{k: f'{ME}::test_the_task_studys_state_norms_are_the_bits_not_the_start_token'
           for k in ('h_norm', 'rms', 'one_minus_cos')}),
    'beyond.exit_gate info': {k: f'{ME}::test_the_exit_gate_is_trained_on_other_windows_than_it_is_scored_on'
                              for k in ('pairs', 'heldout_pairs', 'base_rate', 'label_rate_by_loop', 'heldout_bce_base',
                                        'heldout_bce', 'train_bce')},
}


def test_every_field_written_has_a_test_that_recomputes_it(still_run, evaluated):
    out, log, _ = still_run
    _, result, _, results = evaluated
    written = {
        'train record': {k for r in log if r['kind'] == 'train' for k in r},
        'eval record': {k for r in log if r['kind'] == 'eval' for k in r},
        'checkpoint': set(torch.load(out / 'ckpt.pt', weights_only=True)),
        'results.json': set(results), 'results.json run': set(result),
        'results.json per_K row': {k for row in result['per_K'] for k in row},
        'results.json clamp': {k for row in result['per_K'] for k in row['clamp']},
        **{f'results.json {key}': set(result[key]) for key in ('final_norm_hist', 'lemma', 'curve')}}
    for where, keys in written.items():  # a field written that is not listed here has no test recomputing it
        assert keys == set(FIELDS[where]), where
    for where, fields in FIELDS.items():
        for field, test in fields.items():
            if test:
                path, name = test.split('::')
                with open(os.path.join(HERE, path)) as f:
                    assert f'\ndef {name}(' in f.read(), (where, field, test)
