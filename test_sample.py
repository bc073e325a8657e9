"""
sample.py from the outside, on a tiny run trained here.

    python -m pytest -q test_sample.py
"""

import re

import pytest

from conftest import assert_one_line_error, run_script, train_args

SUMMARY = re.compile(r'^tokens=(\d+) seconds=([\d.]+) tok_per_s=([\d.]+) mean_loops=([\d.]+)$', re.M)


@pytest.fixture(scope='module')
def run(tiny_data, tmp_path_factory):
    out = tmp_path_factory.mktemp('sample') / 'run'
    r = run_script('train.py', *train_args(tiny_data, out, '--max_iters=20', '--eval_interval=20', '--n_loops=3'))
    assert r.returncode == 0, r.stderr
    return out


def sample(run, *args):
    return run_script('sample.py', f'--out_dir={run}', '--device=cpu', *args)


def test_samples_and_the_summary_line(run):
    r = sample(run, '--start=the loop', '--num_samples=2', '--max_new_tokens=20')
    assert r.returncode == 0, r.stderr
    assert r.stdout.count('---------------') == 2 and r.stdout.startswith('the loop')
    tokens, seconds, tok_s, loops = SUMMARY.search(r.stderr).groups()
    assert int(tokens) == 40 and float(seconds) > 0 and float(tok_s) > 0 and float(loops) == 3.0


def test_greedy_text_is_the_same_without_the_cache_and_exits_change_the_loops(run):
    common = ('--start=the norm', '--num_samples=1', '--max_new_tokens=60', '--top_k=1')  # 60 > block_size 32
    cached, uncached = sample(run, *common), sample(run, *common, '--kv_cache=False')
    assert cached.returncode == uncached.returncode == 0, cached.stderr + uncached.stderr
    assert cached.stdout == uncached.stdout
    always = sample(run, *common, '--exit_threshold=1e-9')
    one_loop = sample(run, *common, '--n_loops=1')
    assert always.stdout == one_loop.stdout and SUMMARY.search(always.stderr).group(4) == '1.000'
    deeper = sample(run, *common, '--n_loops=6')
    assert deeper.returncode == 0 and SUMMARY.search(deeper.stderr).group(4) == '6.000'
    projected = sample(run, *common, '--exit_threshold=1e-9', '--stand_in=project')
    assert projected.stdout == one_loop.stdout  # (every token stops at loop 1: no stand-in is read)


def test_speculative_greedy_text_is_the_k_loop_text_and_the_summary_says_how_it_went(run):
    common = ('--start=the norm', '--num_samples=1', '--max_new_tokens=60', '--top_k=1')
    fixed = sample(run, *common)
    for extra in (('--draft_loops=1', '--draft_tokens=3'), ('--draft_loops=2', '--draft_tokens=1', '--draft_stop=0.5')):
        spec = sample(run, *common, *extra)
        assert spec.returncode == 0, spec.stderr
        assert spec.stdout == fixed.stdout
        rate, per_pass = re.search(r'accept_rate=([\d.]+) tokens_per_pass=([\d.]+)$', spec.stderr, re.M).groups()
        assert 0 <= float(rate) <= 1 and 1 <= float(per_pass) <= 1 + int(extra[1].split('=')[1])


def test_bad_input_is_one_clear_line(run, tmp_path):
    assert_one_line_error(sample(tmp_path / 'nowhere'), 'sample.py', 'no checkpoint')
    (tmp_path / 'ckpt.pt').write_bytes(b'garbage')
    assert_one_line_error(sample(tmp_path), 'sample.py', 'not a checkpoint written by train.py')
    assert_one_line_error(sample(run, f'--data_dir={tmp_path}'), 'sample.py', 'meta.json', 'tokenizer')
    assert_one_line_error(sample(run, '--exit_criterion=margin'), 'sample.py', 'exit_criterion', 'entropy')
    for bad in ('1.5', '-0.1'):
        assert_one_line_error(sample(run, f'--exit_threshold={bad}'), 'sample.py', 'exit_threshold', '[0, 1]')
    assert_one_line_error(sample(run, '--n_loops=0'), 'sample.py', 'n_loops')
    assert_one_line_error(sample(run, '--n_loops=2.5'), 'sample.py', 'n_loops')
    assert_one_line_error(sample(run, '--start='), 'sample.py', 'prompt is empty')
    assert_one_line_error(sample(run, f'--start=FILE:{tmp_path / "none.txt"}'), 'sample.py', 'prompt file')
    assert_one_line_error(sample(run, '--num_sample=2'), 'sample.py', "'num_sample'")
    assert_one_line_error(sample(run, '--stand_in=mean'), 'sample.py', 'stand_in', 'project')
    for bad in ('--draft_loops=3', '--draft_loops=-1'):  # K = 3: a draft has 1 or 2 loops
        assert_one_line_error(sample(run, bad), 'sample.py', 'draft_loops')
    assert_one_line_error(sample(run, '--draft_loops=2', '--n_loops=2'), 'sample.py', 'draft_loops', '[1, 1]')
    assert_one_line_error(sample(run, '--draft_loops=1', '--draft_tokens=0'), 'sample.py', 'draft_tokens')
    for bad in ('1.5', '-0.1'):
        assert_one_line_error(sample(run, '--draft_loops=1', f'--draft_stop={bad}'), 'sample.py', 'draft_stop')
    assert_one_line_error(sample(run, '--draft_loops=1', '--exit_threshold=0.5'), 'sample.py', 'exit_threshold')
    assert_one_line_error(sample(run, '--draft_loops=1', '--kv_cache=False'), 'sample.py', 'KV cache')
