"""
eval_depth.py from the outside, on two tiny runs trained here (a normalized per-loop run and a
raw terminal one), plus its window bookkeeping.

    python -m pytest -q test_eval_depth.py
"""

import json
import math

import numpy as np
import pytest
import torch
from torch.nn import functional as F

import eval_depth
from conftest import assert_one_line_error, run_script, train_args
from model import LoopedGPT


@pytest.fixture(scope='module')
def runs(tiny_data, tmp_path_factory):
    root = tmp_path_factory.mktemp('runs')
    for name, extra in (('norm-perloop', ()), ('raw-terminal', ('--readout=raw', '--loss=terminal'))):
        r = run_script('train.py', *train_args(tiny_data, root / name, '--max_iters=30', '--eval_interval=30', *extra))
        assert r.returncode == 0, r.stderr
    return root / 'norm-perloop', root / 'raw-terminal'


@pytest.fixture(scope='module')
def evaluated(runs, tmp_path_factory):
    out = tmp_path_factory.mktemp('eval')
    r = run_script('eval_depth.py', *runs, '--clamp', '--exit', '1e-9,0.5,1.0', '--out', out,
                   '--bench_iters=2', '--batch_size=4')
    assert r.returncode == 0, r.stderr
    with open(out / 'results.json') as f:
        return r, out, json.load(f)['runs']


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
    for name in ('ppl_vs_k.png', 'norms_vs_k.png', 'frontier.png', 'norm_hist.png', 'early_exit.png'):
        assert (out / name).read_bytes()[:8] == b'\x89PNG\r\n\x1a\n', name


def test_each_run_says_how_it_was_trained(evaluated):
    r, _, results = evaluated
    assert 'norm-perloop: norm readout, perloop CE, K=2' in r.stderr
    assert 'raw-terminal: raw readout, terminal CE, K=2' in r.stderr
    assert [(run['readout'], run['loss']) for run in results] == [('norm', 'perloop'), ('raw', 'terminal')]


def test_perplexity_equals_an_independent_computation_over_every_token(evaluated, runs, tiny_data):
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
            for s in range(0, len(val) - 1, T):  # non-overlapping windows, written out here by hand
                chunk = torch.from_numpy(val[s:s + T + 1])[None]
                logits = model(chunk[:, :-1], n_loops=K)
                total += F.cross_entropy(logits[0], chunk[0, 1:], reduction='sum').item()
                count += chunk.size(1) - 1
        assert count == len(val) - 1 == run['tokens_scored']
        assert run['per_K'][K - 1]['ppl'] == pytest.approx(math.exp(total / count), rel=1e-5)


@pytest.mark.parametrize('n,block,max_tokens', [(1000, 32, 0), (1001, 32, 0), (33, 32, 0), (34, 32, 0),
                                                (1000, 32, 100), (50, 64, 0)])
def test_every_token_is_scored_exactly_once(n, block, max_tokens):
    data = np.arange(n)  # token value = its position, so the targets name themselves
    windows = eval_depth.score_windows(n, block, max_tokens)
    scored = []
    for x, y in eval_depth.batches(data, windows, 3, 'cpu'):
        assert torch.equal(x + 1, y) and y.size(1) <= block
        scored += y.flatten().tolist()
    expect = min(n - 1, max_tokens) if max_tokens else n - 1
    assert sorted(scored) == list(range(1, expect + 1))


def test_clamp_leaves_k1_unchanged_and_changes_later_loops(evaluated):
    _, _, results = evaluated
    for run in results:
        first = run['per_K'][0]
        assert first['clamp']['delta_loss'] == 0.0 and first['clamp']['norm_mean'] == first['norm_mean']
        for row in run['per_K'][1:]:
            assert row['clamp']['norm_mean'] == pytest.approx(first['norm_mean'], rel=1e-4)  # loop-1 norms restored
        assert any(row['clamp']['delta_loss'] != 0.0 for row in run['per_K'][1:])


def test_early_exit_thresholds_at_the_extremes(evaluated):
    _, _, results = evaluated
    run = results[0]  # normalized readout: an exit at loop k reads out as the depth-k model does
    K = run['trained_K']
    for criterion in ('max_prob', 'entropy'):
        exits = {e['threshold']: e for e in run['early_exit'] if e['criterion'] == criterion}
        assert exits[1.0]['mean_loops'] == K  # no confidence exceeds 1: every token runs all loops
        assert exits[1.0]['ppl'] == pytest.approx(run['per_K'][K - 1]['ppl'], rel=1e-5)
        assert exits[1e-9]['mean_loops'] == 1  # every token is confident enough at loop 1
        assert exits[1e-9]['ppl'] == pytest.approx(run['per_K'][0]['ppl'], rel=1e-5)


def test_early_exit_picks_the_first_confident_loop():
    # 3 loops, 5 tokens: confidences and per-loop CE chosen so that every choice shows
    conf = torch.tensor([[0.9, 0.1, 0.1, 0.6, 0.5],
                         [0.2, 0.8, 0.1, 0.9, 0.7],
                         [0.3, 0.3, 0.2, 0.1, 0.1]])
    ce = torch.tensor([[1.0, 2.0, 3.0, 4.0, 5.0],
                       [10.0, 20.0, 30.0, 40.0, 50.0],
                       [100.0, 200.0, 300.0, 400.0, 500.0]])
    out = eval_depth.early_exit({'conf_p': conf, 'conf_h': conf, 'ce_exit': ce}, [0.5])
    # token 0 exits at loop 1, token 1 at loop 2, token 2 never (last loop), token 3 at loop 1,
    # token 4 at loop 2: a confidence equal to the threshold does not exceed it
    assert out[0]['mean_loops'] == pytest.approx((1 + 2 + 3 + 1 + 2) / 5)
    assert out[0]['loss'] == pytest.approx((1.0 + 20.0 + 300.0 + 4.0 + 50.0) / 5)


def test_bad_input_is_one_clear_line(runs, tiny_data, tmp_path):
    empty = tmp_path / 'empty-run'
    empty.mkdir()
    assert_one_line_error(run_script('eval_depth.py', empty), 'eval_depth.py', 'no checkpoint', 'ckpt.pt')
    assert_one_line_error(run_script('eval_depth.py', runs[0], '--max_loops=0'), 'eval_depth.py', '--max_loops')
    assert_one_line_error(run_script('eval_depth.py', runs[0], '--device=gpu'), 'eval_depth.py', "'gpu'")
    (empty / 'ckpt.pt').write_bytes(b'not a checkpoint')
    r = run_script('eval_depth.py', empty)
    assert_one_line_error(r, 'eval_depth.py', 'not a checkpoint written by train.py')
    assert 'weights_only' not in r.stderr
    torch.save({'weights': torch.zeros(2)}, empty / 'ckpt.pt')  # a torch file, but not train.py's
    assert_one_line_error(run_script('eval_depth.py', empty), 'eval_depth.py', 'not a checkpoint written by train.py')
    for bad in ('0', '1.5', '0.5,-1', 'high'):
        assert_one_line_error(run_script('eval_depth.py', runs[0], '--exit', bad), 'eval_depth.py', '--exit')
    # data made with another tokenizer, under the name the run was trained on
    other = tmp_path / 'data' / 'tiny-bytes'
    other.mkdir(parents=True)
    np.arange(5000, dtype=np.uint16).tofile(other / 'val.bin')
    (other / 'meta.json').write_text(json.dumps(dict(tokenizer='gpt2', vocab_size=50257, dtype='uint16',
                                                     tokens=dict(val=5000))))
    r = run_script('eval_depth.py', runs[0], f'--data_dir={tmp_path / "data"}', cwd=tmp_path)
    assert_one_line_error(r, 'eval_depth.py', 'vocab 256', 'vocab 50257')
    assert not (tmp_path / 'eval-out').exists()  # nothing written


def test_fewer_loops_than_trained_and_a_radial_subset(runs, tmp_path):
    r = run_script('eval_depth.py', runs[0], '--max_loops=1', '--exit', '0.5', '--diag_tokens=64',
                   '--bench_iters=1', '--out', tmp_path)
    assert r.returncode == 0, r.stderr
    run = json.loads((tmp_path / 'results.json').read_text())['runs'][0]
    assert [row['K'] for row in run['per_K']] == [1] and run['final_norm_hist']['loop'] == 1
    assert all(e['mean_loops'] == 1 for e in run['early_exit'])
    assert math.isfinite(run['per_K'][0]['radial'])
