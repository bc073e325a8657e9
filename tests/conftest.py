"""
Shared test fixtures (run the tests from the repository root: python -m pytest -q): tiny byte-level data made by prepare.py, and a runner for the scripts.
Nothing here needs the network or anything outside the repo.
"""

import os
import subprocess
import sys

import pytest

if os.environ.get('PYTEST_XDIST_WORKER'):  # the suite's processes (pytest.ini: -n auto): one thread each, for its
    os.environ['OMP_NUM_THREADS'] = '1'     # tests and the scripts they run (two 2-thread torch processes on
    import torch                            # 2 cores ran tens of times slower)
    torch.set_num_threads(1)

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository root

# a tiny model that trains in seconds on the CPU (2 loops, so per-loop behaviour is exercised)
TINY = ['--device=cpu', '--compile=off', '--n_layer=1', '--n_head=2', '--n_embd=32', '--n_loops=2',
        '--block_size=32', '--batch_size=8', '--dropout=0.0', '--eval_iters=2', '--log_interval=1',
        '--learning_rate=3e-3', '--init_std=0.02']


def run_script(script, *args, cwd=None, env=None, timeout=300):
    """A script from the outside, as a user runs it: `python train.py ...` from the top level, or
    `python -m beyond.bench ...` for beyond/'s (those run from the root, with it on the path)."""
    if script.startswith('beyond/'):
        cmd = [sys.executable, '-m', 'beyond.' + os.path.basename(script)[:-3]]
        env = dict(env or os.environ)
        env['PYTHONPATH'] = os.pathsep.join(p for p in (env.get('PYTHONPATH'), HERE) if p)  # (the root, after any given)
    else:
        cmd = [sys.executable, os.path.join(HERE, script)]
    return subprocess.run([*cmd, *map(str, args)], capture_output=True, text=True, cwd=cwd or HERE, env=env,
                          timeout=timeout)


def assert_one_line_error(r, script, *needles):
    """The run failed with exactly one error line naming what is wrong, and no traceback."""
    assert r.returncode != 0, r.stdout
    assert 'Traceback' not in r.stderr, r.stderr
    errors = [line for line in r.stderr.splitlines() if line.startswith(f'{script}: error:')]
    assert len(errors) == 1 and r.stderr.strip().splitlines()[-1] == errors[0], r.stderr
    for needle in needles:
        assert needle in errors[0], errors[0]


@pytest.fixture(scope='session')
def tiny_data(tmp_path_factory):
    """data_dir holding 'tiny-bytes': a few hundred KB of text as byte tokens. The validation lines
    are sentences of the same words in another order (a word stride of 5, not 3), none of them a
    training line, so a loss on the wrong split is another number."""
    root = tmp_path_factory.mktemp('tinydata')
    words = ('the loop reads out every state and carries it to the next loop while the norm '
             'grows where the readout cannot see it and the raw head keeps it in check').split()
    lines = []
    for i in range(3000):
        stride = 5 if 2600 <= i < 2800 else 3
        lines.append(' '.join(words[(i * 7 + j * stride) % len(words)] for j in range(8 + i % 5)) + ' .\n')
    assert not set(lines[2600:2800]) & set(lines[:2600])
    (root / 'text').mkdir()
    (root / 'text' / 'train.txt').write_text(''.join(lines[:2600]))
    (root / 'text' / 'valid.txt').write_text(''.join(lines[2600:2800]))
    (root / 'text' / 'test.txt').write_text(''.join(lines[2800:]))
    import prepare  # in-process: test_prepare.py runs it from the outside
    prepare.main(['--text_dir', str(root / 'text'), '--tokenizer', 'bytes', '--out_dir', str(root / 'data' / 'tiny-bytes')])
    return root / 'data'


@pytest.fixture(scope='session')
def sample_run(tiny_data, tmp_path_factory):
    """One tiny trained run (K=3) that the two samplers' tests read and never write into."""
    out = tmp_path_factory.mktemp('sample') / 'run'
    train_in_process(tiny_data, out, '--max_iters=20', '--eval_interval=20', '--n_loops=3')
    return out


def train_args(data_dir, out_dir, *extra):
    return [f'--data_dir={data_dir}', '--dataset=tiny-bytes', f'--out_dir={out_dir}', *TINY, *extra]


def train_in_process(data_dir, out_dir, *extra):
    """train.main on the tiny data in this process: the script's run without an interpreter start
    and a torch import (train.py from the outside is test_train's). setup_device turns on flushing
    denormals process-wide; it is turned off again."""
    import torch
    import train
    try:
        train.main(train_args(data_dir, out_dir, *extra))
    finally:
        torch.set_flush_denormal(False)
