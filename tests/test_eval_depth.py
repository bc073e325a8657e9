"""
eval_depth.py's main, in-process as the script runs it, on two tiny runs trained here (conftest's runs: a
normalized per-loop run and a raw terminal one), with the decoding studies plugged in as python -m
beyond.eval_decode runs it (conftest's evaluated), and alone as the paper's; its one-line error once from the
outside, and its argument bounds; seeds grouped into conditions and the run identity setting by setting; every
number of results.json and of the tables recomputed from the model's states (the still run's evaluation), and
the registry of every field written with the test that recomputes it.

    python -m pytest -q tests/test_eval_depth.py
"""

import contextlib
import io
import itertools
import json
import math
import os
import re
from argparse import Namespace
from dataclasses import asdict, fields

import numpy as np
import pytest
import torch
from torch.nn import functional as F

import eval_depth
import train
from beyond import eval_decode
from beyond.exit_train import ExitTrainConfig
from configurator import UserError
from conftest import (B, BPTT, FIELDS, HERE, MAX_K, MEAN_K, PEAK, PINNED, SCORED, SEED, SHORT, STILL_SCORED, T, another,
                      assert_close, assert_one_line_error, assert_options_documented, ce_by_hand, evaluate, load, norm_stats,
                      one_minus_cos, radial_by_hand, run_script, states_by_hand, train_in_process)
from data import Scoring, load_tokens, score_windows
from model import LoopedGPT, LoopedGPTConfig


# -----------------------------------------------------------------------------
# the evaluation of the two runs: the table, results.json and every plot; the paper's evaluation alone; redrawn from
# results; how each run was trained and timed

def test_table_results_and_every_plot_are_written(evaluated):
    r, out, results = evaluated
    assert '| run | K | ppl |' in r.stdout
    for run in results:
        assert [row['K'] for row in run['per_K']] == [1, 2, 3, 4]  # default: twice the trained K=2
        for K in (1, 2, 3, 4):
            assert f"| {run['name']} | {K}{'*' if K == 2 else ''} |" in r.stdout
        row = run['per_K'][1]
        for key in ('ppl', 'norm_mean', 'norm_median', 'norm_p99', 'norm_max', 'radial', 'angular', 'tok_per_s'):
            assert math.isfinite(row[key]) and row[key] > 0, key
        assert sum(run['final_norm_hist']['counts']) == run['tokens_scored']
    for name in ('ppl_vs_k.png', 'norms_vs_k.png', 'frontier.png', 'norm_hist.png', 'early_exit.png', 'lemma.png',
                 'drift.png', 'exit_frontier_norm-perloop.png', 'exit_frontier_raw-terminal.png'):  # (one a run)
        assert (out / name).read_bytes()[:8] == b'\x89PNG\r\n\x1a\n', name
    # stderr names each figure it wrote, a line a file, and nothing it did not write
    wrote = sorted(l[len('wrote '):] for l in r.stderr.splitlines() if l.startswith('wrote '))
    assert wrote == sorted(str(p) for p in out.glob('*.png')) and len(wrote) >= 9


def test_the_papers_evaluation_alone_has_none_of_the_decoding_studies(runs, evaluated, tmp_path, capsys):
    # eval_depth.py without studies: the same depth table from the same flags, no exit rows, no
    # decoding keys in results.json, and the decoding flags are not its own
    r, out, decoded = evaluated
    paper = evaluate(*runs, '--clamp', '--out', tmp_path / 'paper', f'--max_tokens={SCORED}', '--bench_iters=2',
                     '--batch_size=16', main=eval_depth.main)
    written = json.loads((tmp_path / 'paper' / 'results.json').read_text())
    results = written['runs']
    assert written['command'].startswith('eval_depth.py ')
    beyond_keys = {'early_exit', 'exit_frontier', 'speculative', 'gates', 'stand_in_error', 'calibrated'}
    assert not beyond_keys & set(results[0]) and beyond_keys & set(decoded[0])
    assert '\nearly exit, ' in r.stdout and '\nearly exit, ' not in paper.stdout and '| run | K | ppl |' in paper.stdout
    strip = lambda rows: [{k: v for k, v in row.items() if k not in ('tok_per_s', 'mfu')} for row in rows]  # noqa: E731
    assert strip(results[0]['per_K']) == strip(decoded[0]['per_K'])  # (the same numbers: the studies only add)
    with pytest.raises(SystemExit):
        eval_depth.main([str(runs[0]), '--exit', '0.5', '--out', str(tmp_path / 'x')])
    assert 'unrecognized arguments: --exit' in capsys.readouterr().err
    # its --from_results of the decoded results draws the paper's tables and figures only
    eval_depth.main(['--from_results', str(out / 'results.json'), '--out', str(tmp_path / 'redrawn')])
    text = capsys.readouterr().out
    assert text and r.stdout.startswith(text.split('\n\n')[0]) and 'early_exit.png' not in {p.name for p in (tmp_path / 'redrawn').iterdir()}


def test_from_results_redraws_without_evaluating(evaluated, tmp_path, capsys):
    r, out, _ = evaluated
    eval_decode.main(['--from_results', str(out / 'results.json'), '--out', str(tmp_path)])
    assert capsys.readouterr().out == r.stdout  # the same tables, from the JSON
    assert (tmp_path / 'lemma.png').exists() and not (tmp_path / 'results.json').exists()
    eval_decode.main(['--from_results', str(out / 'results.json'), 'raw-terminal', '--out', str(tmp_path)])
    one = capsys.readouterr().out
    assert '| raw-terminal |' in one and '| norm-perloop |' not in one
    assert 'nope' in fails('--from_results', out / 'results.json', 'nope')
    assert 'no runs given' in fails()


def test_a_study_that_overrides_no_hook_leaves_a_redraw_as_it_was(still_evaluated, tmp_path, monkeypatch, capsys):
    # Study's hooks are each a no-op: a study that overrides none, given to --from_results of one results.json,
    # prints the tables the paper's redraw prints and, its runs unchanged, writes no results.json
    *_, results = still_evaluated
    (tmp_path / 'results.json').write_text(json.dumps(results))
    monkeypatch.setattr(eval_depth, 'all_plots', lambda *args: [])  # (the figures: the tests above)
    eval_depth.main(['--from_results', str(tmp_path / 'results.json'), '--out', str(tmp_path / 'alone')])
    alone = capsys.readouterr().out
    eval_depth.main(['--from_results', str(tmp_path / 'results.json'), '--out', str(tmp_path / 'study')],
                    studies=[eval_depth.Study()])
    assert capsys.readouterr().out == alone and '| run | K |' in alone
    assert os.listdir(tmp_path / 'alone') == os.listdir(tmp_path / 'study') == []


def test_each_run_says_how_it_was_trained(evaluated):
    r, _, results = evaluated
    # readout, loss and K, then every model field off its default by its name (the tiny runs' init_std)
    assert 'norm-perloop: norm readout, perloop CE, init_std 0.02, K=2' in r.stderr
    assert 'raw-terminal: raw readout, terminal CE, init_std 0.02, K=2' in r.stderr
    assert [(run['model']['readout'], run['model']['loss']) for run in results] == [('norm', 'perloop'), ('raw', 'terminal')]
    # a results.json from before the run's 'model' record (flat keys) is described the same way
    from report import settings_of
    old = dict(readout='raw', loss='perloop', norm_penalty=0.01, interloop_norm=False, trained_K=4)
    assert settings_of(old) == 'raw readout, perloop CE, norm_penalty 0.01, K=4'


def test_the_timing_forward_is_compiled_as_each_run_was_trained(runs, tmp_path, monkeypatch):
    # --compile's default, as_trained: a run trained with compile='on' is timed compiled, one trained with it
    # off (the tiny runs') eagerly. A copy of a run, its config saying compile 'on'; torch.compile stood in for by
    # one that records what it is given (the path alone: no compiler runs)
    ckpt = torch.load(runs[0] / 'ckpt.pt', weights_only=True)
    ckpt['config'] = dict(ckpt['config'], compile='on')
    (tmp_path / 'trained-compiled').mkdir()
    torch.save(ckpt, tmp_path / 'trained-compiled' / 'ckpt.pt')
    compiled = []
    monkeypatch.setattr(torch, 'compile', lambda fn, **kw: compiled.append(fn) or fn)
    evaluate(tmp_path / 'trained-compiled', runs[0], '--out', tmp_path / 'eval', '--max_tokens=256', '--bench_iters=1',
             '--max_loops=2', main=eval_depth.main)
    results = json.loads((tmp_path / 'eval' / 'results.json').read_text())['runs']
    assert [(run['name'], run['compiled']) for run in results] == [('trained-compiled', True), ('norm-perloop', False)]
    assert len(compiled) == 1


def test_fewer_loops_than_trained_and_a_radial_subset(runs, tmp_path, monkeypatch):
    bars, real = [], Scoring.progress  # (each scoring pass's progress bar: what it is labelled)
    monkeypatch.setattr(Scoring, 'progress', lambda self, windows, desc: bars.append(desc) or real(self, windows, desc))
    evaluate(runs[0], '--max_loops=1', '--exit', '0.5', '--diag_tokens=64', '--bench_iters=1', '--out', tmp_path)
    run = json.loads((tmp_path / 'results.json').read_text())['runs'][0]
    assert f"{run['name']}: K=1..1" in bars  # the depth pass names its run and the loops it scores
    assert [row['K'] for row in run['per_K']] == [1] and run['final_norm_hist']['loop'] == 1
    assert all(e['mean_loops'] == 1 for e in run['early_exit'])
    assert math.isfinite(run['per_K'][0]['radial'])


def test_several_results_files_are_grouped_together(evaluated, tmp_path):
    _, out, _ = evaluated
    one = str(out / 'results.json')
    runs, groups, _ = eval_depth.from_results(f"{one},{one}", [])  # the same two runs, twice
    assert len(runs) == 4 and sorted(g['n'] for g in groups) == [2, 2]
    with pytest.raises(eval_depth.UserError, match='cannot read'):
        eval_depth.from_results(f"{one},{out / 'missing.json'}", [])
    # one file: its groups and the notes it recorded, as they were
    saved = json.loads((out / 'results.json').read_text())
    noted = tmp_path / 'noted.json'
    noted.write_text(json.dumps(dict(saved, notes=['a note on these groups'])))
    assert eval_depth.from_results(str(noted), [])[2] == ['a note on these groups']


def test_a_diverged_run_is_redrawn(evaluated, tmp_path):
    # a run whose loss became non-finite logs null values: its curve has gaps, and nothing crashes
    _, out, _ = evaluated
    results = json.loads((out / 'results.json').read_text())
    curve = results['runs'][0]['curve']
    for key in ('val_loss_K', 'val_loss_1', 'norm_p99', 'norm_mean'):
        curve[key][-1] = None
    (tmp_path / 'results.json').write_text(json.dumps(results))
    eval_depth.main(['--from_results', str(tmp_path / 'results.json'), '--out', str(tmp_path / 'plots')])  # (the paper's alone)
    assert (tmp_path / 'plots' / 'drift.png').read_bytes()[:4] == b'\x89PNG'


# -----------------------------------------------------------------------------
# its numbers against independent computations: perplexity over the scored tokens, the clamp, MFU, Lemma 2 and the
# curves

def test_perplexity_equals_an_independent_computation_over_the_scored_tokens(evaluated, runs, tiny_data):
    _, _, results = evaluated
    with open(tiny_data / 'tiny-bytes' / 'meta.json') as f:
        meta = json.load(f)
    val = np.fromfile(tiny_data / 'tiny-bytes' / 'val.bin', dtype=meta['dtype']).astype(np.int64)
    for path, run in zip(runs, results):
        model, _ = LoopedGPT.from_checkpoint(str(path))
        model.eval()
        T, K = model.config.block_size, model.config.n_loops
        total, count = 0.0, 0
        with torch.no_grad():
            for s in range(0, SCORED, T):  # non-overlapping windows, written out here by hand
                chunk = torch.from_numpy(val[s:min(s + T, SCORED) + 1])[None]
                logits, _ = model(chunk[:, :-1], n_loops=K)
                total += F.cross_entropy(logits[0], chunk[0, 1:], reduction='sum').item()
                count += chunk.size(1) - 1
        assert count == SCORED == run['tokens_scored'] < len(val) - 1
        assert run['per_K'][K - 1]['ppl'] == pytest.approx(math.exp(total / count), rel=1e-5)


def test_clamp_leaves_k1_unchanged_and_changes_later_loops(evaluated):
    _, _, results = evaluated
    for run in results:
        first = run['per_K'][0]
        assert first['clamp']['delta_loss'] == 0.0 and first['clamp']['norm_mean'] == first['norm_mean']
        for row in run['per_K'][1:]:
            assert row['clamp']['norm_mean'] == pytest.approx(first['norm_mean'], rel=1e-4)  # loop-1 norms restored
        assert any(row['clamp']['delta_loss'] != 0.0 for row in run['per_K'][1:])


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


def test_every_reported_mfu_is_the_estimates_flops_times_tokens_per_second_over_the_peak(runs, evaluated):
    # train.py's log counts a training step (forward and backward), the depth table a forward at each K
    _, _, results = evaluated
    for path, run in zip(runs, results):
        model, _ = LoopedGPT.from_checkpoint(str(path))
        block = model.config.block_size
        log = [json.loads(line) for line in open(path / 'log.jsonl')]
        for r in (r for r in log if r['kind'] == 'train'):
            assert r['mfu'] == pytest.approx(model.flops_per_token(T=block) * r['tok_per_s'] / PEAK, rel=1e-6)
        assert [row['K'] for row in run['per_K']] == [1, 2, 3, 4]
        for row in run['per_K']:
            want = model.flops_per_token(row['K'], training=False, T=block) * row['tok_per_s'] / PEAK
            assert row['mfu'] == pytest.approx(want, rel=1e-6), row['K']


def test_lemma_and_curves_are_written_per_run(evaluated, runs):
    _, _, results = evaluated
    for run, path in zip(results, runs):
        lem = run['lemma']
        assert lem['loops'] == 6 and lem['tokens'] == 256
        assert len(lem['s']) == 6 and len(lem['radial_increment']) == len(lem['angular_step']) == 5
        # c, the angular step's c / s_k constant: the median of s_k x step over the second half of the loops
        assert lem['c'] == np.median(lem['s_times_angular'][2:]) != np.median(lem['s_times_angular'][:3])
        log = [json.loads(line) for line in open(path / 'log.jsonl')]
        evals = [e for e in log if e['kind'] == 'eval']
        assert run['curve']['iter'] == [e['iter'] for e in evals]
        assert run['curve']['norm_p99'] == [e['norm_p99'][-1] for e in evals]
        assert run['curve']['val_loss_1'] == [e['val_loss'][0] for e in evals]
        assert run['curve']['norm_mean'][1:] == [e['h_norm'][-1] for e in log if e['kind'] == 'train']


# -----------------------------------------------------------------------------
# eval_depth.py on the still run (conftest's, with its alpha readout's scalars set by hand: alpha = sigmoid(1),
# s_ref = 3; on a fake clock, 0.5 s a timed pass): every number of results.json and of the tables recomputed from
# the model's states

def scored(tiny_data, n=STILL_SCORED):
    """The first n targets of the val split in windows of T, as (x, y) of shape (n / T, T)."""
    val, _ = load_tokens(str(tiny_data / 'tiny-bytes'), 'val')
    tokens = torch.from_numpy(val[:n + 1].astype(np.int64))
    return tokens[:-1].view(-1, T), tokens[1:].view(-1, T)


def test_every_ks_loss_norms_radial_and_angular_are_recomputed_from_the_states(still_evaluated, tiny_data):
    run, result, *_ = still_evaluated
    model = load(run)
    x, y = scored(tiny_data)
    free, clamped = states_by_hand(model, x, MAX_K), states_by_hand(model, x, MAX_K, clamp=True)
    assert [row['K'] for row in result['per_K']] == [1, 2, 3, 4] and result['tokens_scored'] == STILL_SCORED
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


def test_the_radial_fraction_is_measured_on_the_batches_that_start_before_diag_tokens_and_no_others():
    """--diag_tokens N: a batch gets the radial fraction while fewer than N tokens were scored before it (NaN past it;
    0: every batch). Three batches of 16 tokens: N = 16 is the first alone, 17 the first two, 0 and 48 all three."""
    torch.manual_seed(0)
    model = LoopedGPT(LoopedGPTConfig(vocab_size=16, block_size=8, n_layer=1, n_head=2, n_embd=16, dropout=0.0)).eval()
    data = np.random.default_rng(0).integers(0, 16, 6 * 8 + 1)
    sc = Scoring(model, data, score_windows(len(data), 8), 2, 'cpu', contextlib.nullcontext())
    for diag, batches in ((16, 1), (17, 2), (0, 3), (48, 3), (1, 1)):
        radial = eval_depth.score_depths(sc, 2, False, diag, 'radial')['radial']  # (K, tokens), in batch order
        assert radial.shape == (2, 48)
        assert radial.isfinite().all(0).tolist() == [True] * 16 * batches + [False] * 16 * (3 - batches), diag


def test_the_mfu_counts_attention_over_the_timed_windows_length_not_the_block(still_run, tmp_path):
    # a split (or --max_tokens) shorter than the block: the timed windows are that long, and the FLOPs of a forward
    # attend over their T positions. The estimate's attention term by hand: q@k and att@v, a multiply-add (2 FLOPs)
    # each per position and channel, 4 T n_embd FLOPs a layer per loop; the rest of a forward at K the same at any T
    n = T // 4
    clock = itertools.count(0.0, 0.5)
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(io.StringIO()), \
            contextlib.redirect_stderr(io.StringIO()):
        mp.setattr(eval_depth, 'peak_flops', lambda device, dtype: PEAK)
        mp.setattr(eval_depth, 'time', Namespace(perf_counter=lambda: next(clock)))
        mp.setattr(eval_depth, 'all_plots', lambda *args: [])
        eval_depth.main([str(still_run[0]), '--device=cpu', '--dtype=float32', f'--max_tokens={n}', '--max_loops=2',
                         '--bench_iters=1', '--compile=off', '--out', str(tmp_path / 'eval')])
    with open(tmp_path / 'eval' / 'results.json') as f:
        (run,) = json.load(f)['runs']
    cfg = load(still_run[0]).config
    assert run['tokens_scored'] == n and cfg.block_size == T
    for row in run['per_K']:
        assert row['tok_per_s'] == pytest.approx(n / 0.5)  # one window of n tokens in 0.5 s of the fake clock
        at_block = load(still_run[0]).flops_per_token(row['K'], training=False)
        want = at_block - row['K'] * cfg.n_layer * 4 * (T - n) * cfg.n_embd
        assert row['mfu'] == pytest.approx(want * row['tok_per_s'] / PEAK, rel=1e-12)


def test_the_norm_histogram_counts_each_tokens_norm_at_the_trained_k(still_evaluated, tiny_data):
    run, result, *_ = still_evaluated
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


def test_lemma_2_is_recomputed_from_the_first_lemma_tokens_states(still_evaluated, tiny_data):
    run, result, *_ = still_evaluated
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


def test_the_curve_reads_every_record_at_the_trained_k(still_evaluated, still_run):
    # random depth logs every loop to the cap (4): the curve is the trained K's (2), the drift figure's
    _, result, *_ = still_evaluated
    _, log, _ = still_run
    evals, trains = [r for r in log if r['kind'] == 'eval'], [r for r in log if r['kind'] == 'train']
    k = MEAN_K - 1
    assert result['curve'] == dict(iter=[0, 6], norm_p99=[r['norm_p99'][k] for r in evals],
                                   val_loss_1=[r['val_loss'][0] for r in evals],
                                   val_loss_K=[r['val_loss'][k] for r in evals], train_iter=[0, 2, 4, 6],
                                   norm_mean=[evals[0]['norm_mean'][k]] + [r['h_norm'][k] for r in trains])
    assert None not in result['curve']['norm_mean']


def test_the_run_record_says_what_was_evaluated_and_what_the_model_learned(still_evaluated):
    run, result, *_ = still_evaluated
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


def test_each_table_column_shows_its_own_field(still_evaluated):
    run, result, printed, _ = still_evaluated
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


def test_the_summary_is_each_runs_depth_table_row_read_again(evaluated):
    """The summary the pages embed: its ppl cells are the depth table's ppl to three digits, its best K the depth
    table's lowest ppl, its state at the trained K (K=2 here) the depth and Lemma 2 tables' cells to fewer digits."""
    r, _, results = evaluated
    summary = table_rows(r.stdout, '| run | K=1 |')
    assert [c['run'] for c in summary] == [run['name'] for run in results]
    depth_rows = table_rows(r.stdout, '| run | K |')
    lemma_rows = table_rows(r.stdout, '| run | k |')
    for cells, run in zip(summary, results):
        full = {int(c['K'].rstrip('*')): c for c in depth_rows if c['run'] == run['name']}
        assert list(cells)[1:5] == ['K=1', 'K=2 (trained)', 'K=4', 'best K']   # 1..the trained K, then 2x
        for K in (1, 2, 4):
            shown = cells['K=2 (trained)' if K == 2 else f'K={K}']
            assert abs(float(shown) - float(full[K]['ppl'])) <= 0.5 * 10 ** -len(shown.split('.')[1]) + 5e-4
        assert cells['best K'] == str(min(full, key=lambda K: float(full[K]['ppl'])))
        assert float(cells['mean ‖H_2‖'].replace(',', '')) == pytest.approx(float(full[2]['mean ‖H_K‖']), rel=5e-3, abs=0.05)
        assert (cells['radial frac'], cells['1 − cos, loop 2']) == (full[2]['radial frac'], full[2]['1-cos'])
        assert cells['Δ loss clamp, K=2'] == full[2]['Δ loss clamp']
        lem = next(c for c in lemma_rows if c['run'] == run['name'] and c['k'] == '2')
        assert float(cells['s_2']) == pytest.approx(float(lem['s_k']), rel=5e-3)
        assert float(cells['step, loop 2']) == pytest.approx(float(lem['‖u_k+1 − u_k‖']), rel=5e-2)
    # Lemma 2 at the trained K=2 and at the last loop measured (5, of --lemma_loops=6): each run's own record (one seed)
    for cells, run in zip(table_rows(r.stdout, '| run | s_2 | s_5 |'), results):
        lem = run['lemma']
        assert [float(c.replace(',', '')) for c in list(cells.values())[1:]] == pytest.approx(
            [lem[key][k - 1] for key in ('s', 'radial_increment', 'angular_step', 's_times_angular') for k in (2, 5)],
            rel=5e-3, abs=5e-4)
    # two decimals below 100, none from 100 on (thousands split), e-notation from 100,000 on; the std as its mean
    assert [eval_depth.short(*a) for a in ((5.443, 0.092), (54.21, 2.4), (17360.4, 18913.2), (1330.3, None),
                                           (2.7e9, 3.3e8), (float('nan'), None))] == [
        '5.44 ± 0.09', '54.21 ± 2.40', '17,360 ± 18,913', '1,330', '2.7e+09 ± 3.3e+08', '-']
    # at the edges: 100 and 100,000 already the next form, just below them not
    assert [eval_depth.short(x) for x in (99.994, 100.0, -100.0, 99999.4, 1e5)] == [
        '99.99', '100', '-100', '99,999', '1.0e+05']
    # sig: three significant digits, thousands split from 1,000, e-notation below 1e-3, each at its edge
    assert [eval_depth.sig(x) for x in (1000.0, 999.4, 1e-3, 0.000999, 0.0, -2.5e-5, float('inf'))] == [
        '1,000', '999', '0.001', '1.0e-03', '0', '-2.5e-05', 'inf']


def test_the_summarys_lemma_cells_are_written_as_the_pages_write_small_numbers():
    # a state that barely turns: the angular step at the trained K is 8.46e-5, s_K 1234.5678. The pages write
    # e-notation as python's lower-case 'e' (the radial fraction's 1.3e-17 in docs/four-epochs.md); the step is
    # two significant digits, s_K three: by hand, 8.5e-05 and 1.23e+03
    nan = float('nan')
    rows = [dict(K=k, ppl=p, norm_mean=10.0, radial=1.25e-17, angular=3.5e-5) for k, p in ((1, 9.0), (2, 8.0))]
    lemma = dict(loops=4, s=[1.0, 1234.5678, 2000.0, 3000.0], angular_step=[1e-3, 8.46e-5, 1e-5])
    group = dict(name='g', n=1, mean=dict(per_K=rows, trained_K=2, lemma=lemma),
                 std=dict(per_K=[dict(ppl=nan) for _ in rows]))
    (cells,) = table_rows(eval_depth.summary_table([group]), '| run | K=1 |')
    assert (cells['s_2'], cells['step, loop 2']) == ('1.23e+03', '8.5e-05')
    assert (cells['radial frac'], cells['1 − cos, loop 2']) == ('1.2e-17', '3.5e-05')  # (the same notation)
    # a group measured no deeper than its trained K (or not at all) beside one that was: a dash in both lemma cells
    short = dict(group, name='h', mean=dict(group['mean'], lemma=dict(lemma, loops=2)))
    bare = dict(group, name='i', mean={k: v for k, v in group['mean'].items() if k != 'lemma'})
    _, *others = table_rows(eval_depth.summary_table([group, short, bare]), '| run | K=1 |')
    assert [(c['s_2'], c['step, loop 2']) for c in others] == [('-', '-'), ('-', '-')]



def test_the_lemma_table_gives_each_measured_group_its_loops_at_powers_of_two_and_passes_over_the_others():
    """lemma_table: a row a group and loop k = 1, 2, 4, .. below the loops measured (s_k, a_k, the angular step, their
    product, as written); a group that measured no lemma has no row, and the groups after it keep theirs."""
    a = dict(loops=5, s=[10, 20, 30, 40, 50], radial_increment=[.5, 1, 1.5, 2, 2.5],
             angular_step=[1e-3, 2e-3, 3e-3, 4e-3, 5e-3], s_times_angular=[2, 4, 6, 8, 10])
    c = dict(loops=3, s=[7, 8, 9], radial_increment=[1, 2, 3], angular_step=[1e-2, 2e-2, 3e-2], s_times_angular=[3, 5, 7])
    groups = [dict(name='a', n=1, mean=dict(lemma=a)), dict(name='b', n=1, mean=dict()),
              dict(name='c', n=2, mean=dict(lemma=c))]
    assert eval_depth.lemma_table(groups).splitlines()[4:] == [
        '| a | 1 | 10 | 0.5 | 1.000e-03 | 2 |', '| a | 2 | 20 | 1 | 2.000e-03 | 4 |', '| a | 4 | 40 | 2 | 4.000e-03 | 8 |',
        '| c (2 seeds) | 1 | 7 | 1 | 1.000e-02 | 3 |', '| c (2 seeds) | 2 | 8 | 2 | 2.000e-02 | 5 |']


def test_the_loss_table_is_the_log_of_each_perplexity_and_only_where_the_summary_needs_e_notation():
    """Where a perplexity reaches 100,000 (the summary's e-notation), the loss table shows each group's loss at every
    K, which is the log of its perplexity (mean ± std over seeds); a K a group lacks is '-'. Below that: no table."""
    def group(name, losses, stds):
        per_K = [dict(K=k, loss=x, ppl=math.exp(x)) for k, x in enumerate(losses, 1)]
        return dict(name=name, n=3, mean=dict(per_K=per_K), std=dict(per_K=[dict(K=k, loss=s) for k, s in enumerate(stds, 1)]))
    big = group('big', [18.88, 18.5, 18.561], [0.1, 0.02, 0.004])
    short = group('short', [2.6, 2.5], [0.0, 0.01])
    rows = table_rows(eval_depth.loss_table([big, short]), '| run | K=1 |')
    for g, row in zip((big, short), rows):
        ppl = {r['K']: r['ppl'] for r in g['mean']['per_K']}
        for k in (1, 2, 3):
            assert row[f'K={k}'] == ('-' if k not in ppl else
                                     f"{math.log(ppl[k]):.2f} ± {g['std']['per_K'][k - 1]['loss']:.2f}")
    assert [r['run'] for r in rows] == ['big (3 seeds)', 'short (3 seeds)'] and rows[0]['K=3'] == '18.56 ± 0.00'
    assert eval_depth.loss_table([short]) == ''

# -----------------------------------------------------------------------------
# every field written, and the test that recomputes it (conftest's FIELDS): a new field fails until it has one

def test_every_field_written_has_a_test_that_recomputes_it(still_run, still_evaluated):
    out, log, _ = still_run
    _, result, _, results = still_evaluated
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
    for where, listed in FIELDS.items():
        for field, test in listed.items():
            if test:
                path, name = test.split('::')
                with open(os.path.join(HERE, path)) as f:
                    assert f'\ndef {name}(' in f.read(), (where, field, test)


# -----------------------------------------------------------------------------
# conditions: seeds of one condition grouped into mean and std; the run identity, setting by setting (runs that differ
# only in seed are one condition, runs that differ in any other setting that makes a condition, each model field
# included, read from the config so a new field is covered, are not)

def test_seeds_of_one_condition_are_grouped_into_mean_and_std():
    base = dict(readout='norm', loss='perloop', n_embd=32, learning_rate=3e-3, out_dir='x', seed=1,
                model_class='beyond.additions.FieldGPT')
    # a-s3 was made after its class's window and positions fields (at their defaults): the older runs, which
    # lack them, read as the defaults of the class they name, so the three are one condition
    configs = [dict(base, seed=1, out_dir='a-s1'), dict(base, seed=2, out_dir='a-s2'),
               dict(base, seed=3, out_dir='a-s3', window=0, positions='learned'),
               dict(base, readout='raw', out_dir='b'), dict(base, n_embd=64, out_dir='c-s1'), {}]  # {}: no config saved
    ppl = [10.0, 12.0, 17.0, 20.0, 30.0, 40.0]
    runs = [dict(name=c.get('out_dir', 'd'), path=c.get('out_dir', 'd'), seed=c.get('seed'), per_K=[dict(K=1, ppl=p)])
            for c, p in zip(configs, ppl)]
    groups, notes = eval_depth.group_runs(runs, configs)
    assert [g['name'] for g in groups] == ['a', 'b', 'c-s1', 'd']
    a = groups[0]
    assert a['runs'] == ['a-s1', 'a-s2', 'a-s3'] and a['seeds'] == [1, 2, 3] and a['n'] == 3
    assert a['mean']['per_K'][0]['ppl'] == pytest.approx(13.0)
    assert a['std']['per_K'][0]['ppl'] == pytest.approx(math.sqrt(((10 - 13) ** 2 + (12 - 13) ** 2 + (17 - 13) ** 2) / 2))
    assert a['mean']['per_K'][0]['K'] == 1 and type(a['mean']['per_K'][0]['K']) is int
    assert groups[1]['n'] == 1 and math.isnan(groups[1]['std']['per_K'][0]['ppl'])
    assert len(notes) == 1 and 'a-s1' in notes[0] and 'c-s1' in notes[0] and '(n_embd 32 vs 64)' in notes[0]
    assert '13.000 ± 3.606' in eval_depth.table([dict(a, mean=dict(a['mean'], per_K=[dict(
        K=1, ppl=13.0, norm_mean=1.0, norm_p99=1.0, norm_max=1.0, radial=0.0, angular=0.0, tok_per_s=1.0)],
        trained_K=1), std=dict(a['std'], per_K=[dict(ppl=3.6056, norm_mean=0.0, norm_p99=0.0, norm_max=0.0)]))])


def test_each_pair_of_groups_that_differ_only_in_model_shape_gets_its_own_note():
    # group_runs' notes: one line for each pair of groups that differ only in shape, adjacent in the runs' order or
    # not: three widths, three pairs; a fourth group of another readout pairs with none
    base = dict(readout='norm', loss='perloop', n_embd=32, learning_rate=3e-3, seed=1)
    configs = [dict(base, n_embd=32, out_dir='w32'), dict(base, n_embd=64, out_dir='w64'),
               dict(base, n_embd=128, out_dir='w128'), dict(base, readout='raw', out_dir='raw')]
    runs = [dict(name=c['out_dir'], path=c['out_dir'], seed=1, per_K=[dict(K=1, ppl=10.0)]) for c in configs]
    groups, notes = eval_depth.group_runs(runs, configs)
    assert len(groups) == 4
    assert [re.search(r'^(\S+) and (\S+) differ only in seed and model shape \((.*)\)', n).groups() for n in notes] == [
        ('w32', 'w64', 'n_embd 32 vs 64'), ('w32', 'w128', 'n_embd 32 vs 128'), ('w64', 'w128', 'n_embd 64 vs 128')]


def test_a_run_without_its_training_config_is_a_group_of_its_own_that_pairs_with_none():
    # group_runs: a checkpoint with no saved config is keyed by its path, alone, and compared with no group (before
    # a configured group in the runs' order and after it); two configured ones of another width still get their note
    base = dict(readout='norm', loss='perloop', n_embd=32, learning_rate=3e-3, seed=1)
    configs = [None, dict(base, out_dir='w32'), dict(base, n_embd=64, out_dir='w64'), None]
    runs = [dict(name=f'r{i}', path=f'r{i}', seed=1, per_K=[dict(K=1, ppl=10.0)]) for i in range(4)]
    groups, notes = eval_depth.group_runs(runs, configs)
    assert [g['runs'] for g in groups] == [['r0'], ['r1'], ['r2'], ['r3']]
    assert len(notes) == 1 and notes[0].startswith('r1 and r2 differ only in seed and model shape (n_embd 32 vs 64)')


def every_setting():
    """A run's saved config at the defaults: train.py's settings and every field of the models' configs."""
    return {**train.SETTINGS, **asdict(ExitTrainConfig())}


def grouped(*configs):
    """Whether eval_depth.py reports these runs' configs as one condition."""
    runs = [dict(name=f'run-s{i}', path=f'run-s{i}', seed=c['seed'], per_K=[dict(K=1, ppl=10.0 + i)])
            for i, c in enumerate(configs)]
    groups, _ = eval_depth.group_runs(runs, list(configs))
    return len(groups) == 1


def test_runs_differing_only_in_seed_group_and_in_any_setting_that_makes_a_condition_split():
    base = every_setting()
    assert grouped(base, dict(base, seed=base['seed'] + 1), dict(base, seed=base['seed'] + 2))
    model_fields = {f.name for f in fields(ExitTrainConfig)}
    assert not set(eval_depth.IDENTITY) & model_fields  # every model field makes a condition
    assert set(eval_depth.IDENTITY) <= set(base)  # (and no name there is stale)
    wrong = []
    for name, value in base.items():
        apart = not grouped(base, dict(base, **{name: another(name, value)}))
        if apart != (name not in eval_depth.IDENTITY):
            wrong.append(name)
    assert not wrong, f"{wrong}: grouped where they should split, or split where they should group"


# -----------------------------------------------------------------------------
# bad input: one clear line (from the outside once), the argument bounds, a compiler that cannot build

def fails(*argv):
    """python -m beyond.eval_decode's one-line error for argv (eval_depth's checks and the decoding
    studies'; in-process: no torch import per case)."""
    with pytest.raises(SystemExit) as e:
        eval_decode.main([str(a) for a in (*PINNED, *argv)])
    message = str(e.value.code)
    assert message.startswith('python -m beyond.eval_decode: error: ') and '\n' not in message, message
    return message


def test_bad_input_is_one_clear_line(runs, tiny_data, tmp_path):
    empty = tmp_path / 'empty-run'
    empty.mkdir()
    # from the outside once: exactly one line on stderr, no traceback
    assert_one_line_error(run_script('eval_depth.py', empty), 'eval_depth.py', 'no checkpoint', 'ckpt.pt')
    out = ['--out', tmp_path / 'eval-out']
    assert '--max_loops' in fails(runs[0], '--max_loops=0', *out)
    assert "'gpu'" in fails(runs[0], '--device=gpu', *out)
    (empty / 'ckpt.pt').write_bytes(b'not a checkpoint')
    message = fails(empty, *out)
    assert 'not a checkpoint written by train.py' in message and 'weights_only' not in message
    torch.save({'weights': torch.zeros(2)}, empty / 'ckpt.pt')  # a torch file, but not train.py's
    assert 'not a checkpoint written by train.py' in fails(empty, *out)
    for bad in ('0', '1.5', '0.5,-1', 'high'):
        assert '--exit' in fails(runs[0], '--exit', bad, *out)
    assert '--lemma_loops' in fails(runs[0], '--lemma_loops=1', *out)
    assert '--calibrate' in fails(runs[0], '--calibrate=1.5', *out)
    assert 'two windows' in fails(runs[0], '--calibrate=0.1', '--max_tokens=20', '--out', tmp_path / 'cal')
    assert '--batch_size' in fails(runs[0], '--batch_size=-1', *out)
    for bad in ('mean', 'copy,recompute', ','):
        assert '--stand_in' in fails(runs[0], f'--stand_in={bad}', *out)
    (tmp_path / 'a-file').write_text('')
    assert '--out' in fails(runs[0], '--out', tmp_path / 'a-file')
    no_evals = tmp_path / 'no-evals'
    no_evals.mkdir()
    (no_evals / 'ckpt.pt').write_bytes((runs[0] / 'ckpt.pt').read_bytes())
    (no_evals / 'log.jsonl').write_text(json.dumps(dict(kind='train', iter=1, h_norm=[1.0])) + '\n')
    assert 'no eval lines' in fails(no_evals, '--curves', *out)
    # data made with another tokenizer, under the name the run was trained on: a larger vocabulary or a smaller one
    for vocab in (50257, 50):
        other = tmp_path / f'data-{vocab}' / 'tiny-bytes'
        other.mkdir(parents=True)
        (np.arange(5000) % vocab).astype(np.uint16).tofile(other / 'val.bin')
        (other / 'meta.json').write_text(json.dumps(dict(tokenizer='gpt2' if vocab > 256 else 'parity', vocab_size=vocab,
                                                         dtype='uint16', tokens=dict(val=5000))))
        message = fails(runs[0], f'--data_dir={other.parent}', *out)
        assert 'vocab 256' in message and f'vocab {vocab} ' in message, vocab
    # a split with one token has no token to score (a window needs its next): one line, for one token
    # and not for two
    for n in (1, 2):
        short = tmp_path / f'data-short-{n}' / 'tiny-bytes'
        short.mkdir(parents=True)
        np.zeros(n, dtype=np.uint8).tofile(short / 'val.bin')
        (short / 'meta.json').write_text(json.dumps(dict(tokenizer='bytes', vocab_size=256, dtype='uint8', tokens=dict(val=n))))
        if n == 1:
            assert 'the val split' in fails(runs[0], f'--data_dir={short.parent}', *out)
        else:
            evaluate(runs[0], f'--data_dir={short.parent}', '--max_loops=1', '--bench_iters=1', '--out', tmp_path / 'two')
            assert json.loads((tmp_path / 'two' / 'results.json').read_text())['runs'][0]['tokens_scored'] == 1
    assert not (tmp_path / 'eval-out').exists()  # nothing written by any of them


EVAL_DEFAULTS = dict(max_loops=None, lemma_loops=0, lemma_tokens=16384, batch_size=0, max_tokens=0, bench_iters=10,
                     diag_tokens=0)


LEAST = dict(max_loops=1, lemma_loops=2, lemma_tokens=1, batch_size=0, max_tokens=0, bench_iters=1, diag_tokens=0)


@pytest.mark.parametrize('name', LEAST)
def test_eval_depth_takes_each_settings_least_value_and_refuses_one_less(name):
    eval_depth.check_settings(Namespace(**dict(EVAL_DEFAULTS, **{name: LEAST[name]})))
    with pytest.raises(UserError, match=f'--{name}'):
        eval_depth.check_settings(Namespace(**dict(EVAL_DEFAULTS, **{name: LEAST[name] - 1})))


def test_a_compiler_that_cannot_build_is_one_line_before_any_scoring(runs, tmp_path, monkeypatch):
    # --compile on with no usable C++ compiler (and no caches): the timing forward is built first,
    # so the one line comes before the scoring passes run (score_depths is never reached)
    scored = []
    monkeypatch.setattr(eval_depth, 'score_depths', lambda *a, **k: scored.append(1) or pytest.fail('scored'))
    torch._dynamo.reset()
    try:
        with torch._inductor.config.patch({'cpp.cxx': (None, str(tmp_path / 'no-such-g++')), 'force_disable_caches': True}):
            message = fails(runs[0], '--device=cpu', '--compile', 'on', '--out', tmp_path / 'x')
    finally:
        torch._dynamo.reset()
    assert str(tmp_path / 'no-such-g++') in message  # (the cause: the compiler's own error, its first line)
    assert 'torch.compile could not build the timing forward' in message and message.endswith('--compile=off')
    assert not scored and not (tmp_path / 'x' / 'results.json').exists()


# -----------------------------------------------------------------------------
# the command line: every option documented in --help, as tests/snapshots/argparse.json holds it

def test_every_option_of_an_argparse_script_is_documented_in_its_help(monkeypatch):
    assert_options_documented('eval_depth.py', eval_depth.main, monkeypatch)


def test_help_heads_itself_with_the_script_a_user_runs(capsys):
    """main's script: the name --help and the errors give (eval_depth.py, or python -m beyond.eval_decode's)."""
    for script in ('eval_depth.py', 'python -m beyond.eval_decode'):
        with pytest.raises(SystemExit):
            eval_depth.main(['--help'], script=script)
        assert capsys.readouterr().out.startswith(f'usage: {script} ')


def test_a_runs_curves_are_its_eval_lines_and_its_denser_train_lines_from_the_first_evals_mean(tmp_path):
    """read_curve: per eval line the iteration, p99 ||H_K|| and the val loss at K=1 and at K; per train line the mean
    ||H_K||, starting from the first eval line's mean (its validation batch, before the first step)."""
    records = [dict(kind='eval', iter=0, norm_p99=[5, 6], norm_mean=[1, 2], val_loss=[3.0, 2.5]),
               dict(kind='train', iter=1, h_norm=[7, 8]), dict(kind='train', iter=2, h_norm=[9, 10]),
               dict(kind='eval', iter=2, norm_p99=[11, 12], norm_mean=[3, 4], val_loss=[2.0, None])]
    (tmp_path / 'log.jsonl').write_text(''.join(json.dumps(r) + '\n' for r in records))
    curve = eval_depth.read_curve(str(tmp_path), 2)
    assert (curve['iter'], curve['norm_p99'], curve['val_loss_1']) == ([0, 2], [6, 12], [3.0, 2.0])
    assert curve['val_loss_K'][0] == 2.5 and math.isnan(curve['val_loss_K'][1])
    assert (curve['train_iter'], curve['norm_mean']) == ([0, 1, 2], [2, 8, 10])
