"""
Shared test fixtures (run the tests from the repository root: python -m pytest -q): tiny byte-level data made by prepare.py,
a runner for the scripts, and the helpers and fixtures that the tests of several modules share (one copy each: a run's
log, data whose splits differ, a task's rows, the still run whose every number is recomputed, figures and option
snapshots). Nothing here needs the network or anything outside the repo.
"""

import argparse
import contextlib
import fcntl
import gc
import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading

import pytest

if os.environ.get('PYTEST_XDIST_WORKER'):  # the suite's processes (pyproject.toml: -n auto): one thread each, for its
    os.environ['OMP_NUM_THREADS'] = '1'     # tests and the scripts they run (two 2-thread torch processes on
    import torch                            # 2 cores ran tens of times slower)
    torch.set_num_threads(1)

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository root

# a tiny model that trains in seconds on the CPU (2 loops, so per-loop behaviour is exercised)
TINY = ['--device=cpu', '--compile=off', '--n_layer=1', '--n_head=2', '--n_embd=32', '--n_loops=2',
        '--block_size=32', '--batch_size=8', '--dropout=0.0', '--eval_iters=2', '--log_interval=1',
        '--learning_rate=3e-3', '--init_std=0.02']


def run_script(script, *args, cwd=None, env=None, timeout=300, stand_in=None):
    """A script from the outside, as a user runs it: `python train.py ...` from the top level, or
    `python -m beyond.bench ...` for beyond/'s; a file in a folder (beyond/'s, tests/') runs with the
    root on the path. Its `python` is the stand-in (below) unless env is given; stand_in=True: the
    stand-in with env too, for variables that nothing the server imported reads or that its child
    applies (OMP_NUM_THREADS, CXX, PYTHONPATH)."""
    # (the stand-in's child has the server's imports: a test that sets the environment gets the real one)
    python = str(stand_in_python()) if env is None or stand_in else sys.executable
    if '/' in script:
        env = dict(env or os.environ)
        env['PYTHONPATH'] = os.pathsep.join(p for p in (env.get('PYTHONPATH'), HERE) if p)  # (the root, after any given)
    if script.startswith('beyond/'):
        cmd = [python, '-m', 'beyond.' + os.path.basename(script)[:-3]]
    else:
        cmd = [python, os.path.join(HERE, script)]
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


# -----------------------------------------------------------------------------
# helpers and fixtures that the tests of several modules share (one copy each, here)

def built_once(tmp_path_factory, name, build):
    """The folder name, filled by build(folder) once for the whole run of the suite: pytest-xdist's processes
    share the run's temporary root, so the first to ask builds it (under a lock) and the others wait and read it.
    For the fixtures whose tests sit in several files (each file's tests run in one process, -n auto --dist
    loadfile): what they train is trained once, not once a process."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get('PYTEST_XDIST_WORKER'):
        root = root.parent  # (the run's, above each process's own)
    folder, done = root / name, root / f'{name}.done'
    with open(root / f'{name}.lock', 'a') as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            build(folder)
            done.touch()
    return folder


def read_log(out_dir):
    """A run's log.jsonl, one record a line."""
    with open(os.path.join(out_dir, 'log.jsonl')) as f:
        return [json.loads(line) for line in f]


def settings(*argv):
    """train.py's settings as its command line would make them, checked (in-process)."""
    import train
    return train.setup(list(argv))


def strict(text):
    """json.loads refusing NaN, Infinity and -Infinity, which Python writes by default and JSON does not have."""
    def refuse(token):
        raise ValueError(f"{token} is not JSON")
    return json.loads(text, parse_constant=refuse)


def between(values):
    """A threshold between two neighbouring values near the median, at their widest gap: no
    token's confidence sits near it, so float noise cannot move an exit across it."""
    v = values.flatten().sort().values
    lo, hi = len(v) // 4, 3 * len(v) // 4
    i = lo + int((v[lo + 1:hi + 1] - v[lo:hi]).argmax())
    return ((v[i] + v[i + 1]) / 2).item()


def head_logits(model, h):
    return model.lm_head(model.readout(h, last=True))  # (the model's own readout and head: forward's last step)


def masked_states(model, x, exit_at):
    """H_0 .. H_K of exit-aware training's forward with the exit pattern exit_at (B, T): the model's weights
    in beyond/exit_train.py's class."""
    from dataclasses import asdict
    from beyond.exit_train import ExitTrainConfig, ExitTrainedGPT
    masked = ExitTrainedGPT(ExitTrainConfig(**asdict(model.config))).eval()
    masked.load_state_dict(model.state_dict())
    masked.exit_at = exit_at
    return masked.hidden_states(x)


def exit_confidence(logits, criterion, prev=None):
    """A readout criterion's confidence from its logits alone (it reads no state)."""
    from beyond import exits
    return exits.get(criterion)(None, None, logits, prev)


def another(name, value):
    """Another value of a setting: its next option, the other bool, or a number one more."""
    import train
    from beyond.additions import POSITIONS
    from model import LOSSES, READOUTS
    choices = {**{k: v for k, v in train.RANGES.items() if isinstance(v, tuple)},
               'readout': READOUTS, 'loss': LOSSES, 'positions': POSITIONS}
    if name in choices:
        return next(c for c in choices[name] if c != value)
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    return value + '-other'


def torchrun_environment(monkeypatch, rank, world_size):
    """The variables torchrun gives a rank (a free port for the rendezvous)."""
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        port = s.getsockname()[1]
    for name, value in dict(RANK=rank, LOCAL_RANK=rank, WORLD_SIZE=world_size, LOCAL_WORLD_SIZE=world_size,
                            MASTER_ADDR='127.0.0.1', MASTER_PORT=port).items():
        monkeypatch.setenv(name, str(value))


@pytest.fixture
def bare_checkpoint(tmp_path):
    """An untrained 2-loop model saved as model_args and weights alone: no 'config' of the run that
    trained it, so no dataset or data_dir to find its data by."""
    import torch
    from model import LoopedGPT, LoopedGPTConfig
    torch.manual_seed(0)
    args = dict(vocab_size=256, block_size=32, n_layer=1, n_head=2, n_embd=32, n_loops=2, dropout=0.0)
    folder = tmp_path / 'run'
    folder.mkdir()
    torch.save(dict(model_args=args, model=LoopedGPT(LoopedGPTConfig(**args)).state_dict()), folder / 'ckpt.pt')
    return folder / 'ckpt.pt'


# data whose splits differ: every window of train is 'a' repeated, of val 'b' repeated, so the loss
# on a split is one number whichever windows are drawn, and the two splits' numbers differ

@pytest.fixture(scope='session')
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


SHORT = ('--max_iters=10', '--eval_interval=10', '--dtype=float32', '--eval_iters=1')  # ten steps: 'a' is learned, 'b' not


# a task in rows (python -m beyond.parity): the splits as tests/test_parity.py's checks read them, and a run's settings on them
TASK = ['--train_rows', '256', '--val_rows', '40', '--test_rows', '8', '--probe_rows', '64', '--train_lengths', '8',
        '--val_lengths', '6-12', '--test_lengths', '12', '--probe_lengths', '3', '--long_rows', '16', '--long_lengths', '10']


@pytest.fixture(scope='session')
def parity_data(tmp_path_factory):
    from beyond import parity
    root = tmp_path_factory.mktemp('parity')
    parity.main(['--out_dir', str(root / 'parity'), '--seed', '3', *TASK])
    return root


def parity_args(root, out, *extra):
    return [f'--data_dir={root}', '--dataset=parity', f'--out_dir={out}', *TINY, '--model_class=beyond.additions.FieldGPT',
            '--positions=none', '--window=2', '--inject=True', '--readout=raw', *extra]


PARITY_SPLITS = dict(train=(30, list(range(1, 5))), val=(8, [6]), test=(8, [8]))  # beyond.parity.write's splits: (rows, lengths)


# the runs other studies read, as assets/cpu-demo and assets/cpu-long name them
SHARED = {'raw_perloop-cpu-s1': ['--readout=raw'], 'norm_perloop-cpu-s1': [],
          **{f'{c}-cpu-long-s1': extra for c, extra in (('norm_perloop', []), ('raw_perloop', ['--readout=raw']),
                                                        ('penalty_perloop', ['--norm_penalty=0.01']),
                                                        ('finalnorm_perloop', ['--readout=final_norm']))}}


class SharedRuns:
    """The CPU demo's and the 4-epoch study's runs that other studies read, trained tiny and
    in-process on first use (from any thread: the first studies run meanwhile; once for the run of the suite:
    built_once)."""

    def __init__(self, tmp_path_factory, data_dir):
        self.factory, self.data_dir, self.lock, self.root = tmp_path_factory, data_dir, threading.Lock(), None

    def folder(self):
        with self.lock:
            if self.root is None:
                self.root = built_once(self.factory, 'shared-runs', self.train)
        return self.root

    def train(self, root):
        for name, extra in SHARED.items():
            train_in_process(self.data_dir, root / f'out-{name}', '--max_iters=2', '--eval_interval=1', *extra)


@pytest.fixture(scope='session')
def shared_runs(tiny_data, tmp_path_factory):
    return SharedRuns(tmp_path_factory, tiny_data)


# -----------------------------------------------------------------------------
# the still run: a run of train.py whose model does not move (learning rate 1e-9), so every record is
# recomputable from its checkpoint, on a fake clock (STEP_S a step) and with a peak of PEAK FLOP/s; and
# eval_depth.py on it. Every number they write is recomputed by another path (tests/test_train.py,
# test_eval_depth.py, test_report.py): against a computation by hand or from the model's states with
# torch's and numpy's own functions (F.cross_entropy, torch.autograd.grad, np.percentile), never through
# the code that wrote it. FIELDS lists every field with the test that recomputes it.

PEAK = 1e9     # FLOP/s given to the runs (a CPU has no peak, so no MFU)
STEP_S = 0.25  # seconds a training step takes on the fake clock
SEED, B, T = 1337, 8, 32  # TINY: batch 8, block 32
# random depth with truncated backprop through the last loop: at seed 1337 the six steps draw K = 3, 1 | 2, 2 | 1, 2,
# so each train line (two steps) has loops no step read, and loop 4 never runs
DEPTH = ('--random_depth=True', '--n_loops=2', '--max_loops=4', '--bptt=1', '--model_class=beyond.additions.FieldGPT')
BPTT, MEAN_K, MAX_K = 1, 2, 4
STILL_SCORED = 256   # tokens eval_depth scores on the still run: 8 windows, one batch


def load(out):
    from model import LoopedGPT
    return LoopedGPT.from_checkpoint(str(out))[0].eval()


def ce_by_hand(model, x, y, K, clamp=False):
    """Per-token CE (N,) of the model run with K loops, from its logits."""
    import torch
    from torch.nn import functional as F
    with torch.no_grad():
        logits = model(x, n_loops=K, clamp=clamp)[0]
    return F.cross_entropy(logits.flatten(0, 1).double(), y.flatten(), reduction='none')


def states_by_hand(model, x, K, clamp=False):
    """[H_0 .. H_K], each (N, C) float64."""
    import torch
    with torch.no_grad():
        return [h.reshape(-1, h.size(-1)).double() for h in model.hidden_states(x, K, clamp)]


def radial_by_hand(model, h, y):
    """|<g, H>| / (|g| |H|) per token, g = d CE / d H of reading H out as the last loop, by autograd, float64."""
    import torch
    from torch.nn import functional as F
    h = h.clone().requires_grad_(True)
    logits = F.linear(model.readout(h, last=True), model.lm_head.weight.detach().double())
    (g,) = torch.autograd.grad(F.cross_entropy(logits, y.flatten(), reduction='sum'), h)
    return (g * h).sum(-1).abs() / (g.norm(dim=-1) * h.norm(dim=-1))


def one_minus_cos(h, prev):
    return 1 - (h * prev).sum(-1) / (h.norm(dim=-1) * prev.norm(dim=-1))


def norm_stats(norms):
    """mean, median (torch's: the lower of the two middle values), p99 (numpy's linear rule) and max."""
    import numpy as np
    n = np.sort(norms.numpy())
    return dict(norm_mean=n.mean(), norm_median=n[(len(n) - 1) // 2], norm_p99=np.percentile(n, 99), norm_max=n[-1])


def assert_close(got, want, rel=1e-5):
    for key, value in want.items():
        assert got[key] == pytest.approx(float(value), rel=rel), key


# every field written, and the test that recomputes it (None: a label, not a number, or the object itself); the
# registry's test (tests/test_eval_depth.py) fails for a field written that is not here, or a test here that is gone
TRAIN, EVAL, TASKS, REPORT, GATE = ('tests/test_train.py', 'tests/test_eval_depth.py', 'tests/test_tasks.py',
                                    'tests/test_report.py', 'tests/test_exit_gate.py')
FIELDS = {
    'train record': dict(
        kind=None, iter=f'{TRAIN}::test_training_lowers_the_loss_logs_every_loop_and_saves_the_last_iteration',
        loss=f'{TRAIN}::test_each_train_record_is_its_steps_loss_ce_and_norms_recomputed_from_the_model',
        ce=f'{TRAIN}::test_each_train_record_is_its_steps_loss_ce_and_norms_recomputed_from_the_model',
        h_norm=f'{TRAIN}::test_each_train_record_is_its_steps_loss_ce_and_norms_recomputed_from_the_model',
        lr=f'{TRAIN}::test_adamw_steps_with_the_learning_rate_the_log_reports',
        ms_per_iter=f'{TRAIN}::test_train_records_speed_and_mfu_count_the_drawn_depth_and_truncated_backprop',
        tok_per_s=f'{TRAIN}::test_train_records_speed_and_mfu_count_the_drawn_depth_and_truncated_backprop',
        mfu=f'{TRAIN}::test_train_records_speed_and_mfu_count_the_drawn_depth_and_truncated_backprop',
        peak_mem_gib=f'{REPORT}::test_peak_memory_is_cudas_peak_in_gib'),
    'eval record': dict(
        kind=None, iter=f'{TRAIN}::test_training_lowers_the_loss_logs_every_loop_and_saves_the_last_iteration',
        **{k: f'{TRAIN}::test_each_eval_record_is_the_val_loss_and_diagnostics_recomputed_from_the_states'
           for k in ('val_loss', 'val_ppl', 'norm_mean', 'norm_median', 'norm_p99', 'norm_max', 'radial', 'angular')}),
    'checkpoint': dict(
        model_args=None, model=None, optimizer=None, config=None,
        model_class=f'{TRAIN}::test_a_new_field_is_a_setting_a_checkpoint_entry_and_a_result',
        iter_num=f'{TRAIN}::test_the_checkpoint_kept_is_the_best_val_loss_at_the_trained_k_under_random_depth',
        best_val_loss=f'{TRAIN}::test_the_checkpoint_kept_is_the_best_val_loss_at_the_trained_k_under_random_depth'),
    'results.json': dict(
        command=None, runs=None, notes=None, groups=f'{EVAL}::test_seeds_of_one_condition_are_grouped_into_mean_and_std'),
    'results.json run': dict(
        **{k: f'{EVAL}::test_the_run_record_says_what_was_evaluated_and_what_the_model_learned'
           for k in ('name', 'path', 'model', 'trained_K', 'random_depth', 'depth', 'seed', 'config', 'split', 'batch_size',
                     'device', 'dtype', 'compiled')},
        tokens_scored=f'{EVAL}::test_perplexity_equals_an_independent_computation_over_the_scored_tokens',
        per_K=f'{EVAL}::test_every_ks_loss_norms_radial_and_angular_are_recomputed_from_the_states',
        final_norm_hist=f'{EVAL}::test_the_norm_histogram_counts_each_tokens_norm_at_the_trained_k',
        lemma=f'{EVAL}::test_lemma_2_is_recomputed_from_the_first_lemma_tokens_states',
        curve=f'{EVAL}::test_the_curve_reads_every_record_at_the_trained_k'),
    'results.json per_K row': {k: f'{EVAL}::test_every_ks_loss_norms_radial_and_angular_are_recomputed_from_the_states'
                               for k in ('K', 'loss', 'ppl', 'tok_per_s', 'mfu', 'norm_mean', 'norm_median', 'norm_p99',
                                         'norm_max', 'radial', 'angular', 'clamp')},
    'results.json clamp': {k: f'{EVAL}::test_every_ks_loss_norms_radial_and_angular_are_recomputed_from_the_states'
                           for k in ('loss', 'ppl', 'delta_loss', 'norm_mean', 'norm_median', 'norm_p99', 'norm_max',
                                     'radial', 'angular')},
    'results.json final_norm_hist': {k: f'{EVAL}::test_the_norm_histogram_counts_each_tokens_norm_at_the_trained_k'
                                     for k in ('loop', 'edges', 'counts')},
    'results.json lemma': {k: f'{EVAL}::test_lemma_2_is_recomputed_from_the_first_lemma_tokens_states'
                           for k in ('loops', 'tokens', 's', 'radial_increment', 'angular_step', 's_times_angular', 'c')},
    'results.json curve': {k: f'{EVAL}::test_the_curve_reads_every_record_at_the_trained_k'
                           for k in ('iter', 'norm_p99', 'val_loss_1', 'val_loss_K', 'train_iter', 'norm_mean')},
    'tables': {'depth table and Lemma 2 table': f'{EVAL}::test_each_table_column_shows_its_own_field',
               'train.py\'s printed lines': f'{REPORT}::test_each_printed_line_shows_its_records_numbers_in_their_places'},
    'beyond.tasks row': dict(
        run=None, length=None, K=None, intervention=None,
        trained_K=f'{TASKS}::test_the_task_studys_state_norms_are_the_bits_not_the_start_token',
        accuracy=f'{TASKS}::test_beyond_tasks_scores_each_length_and_k_as_the_model_reads_them',
        exact=f'{TASKS}::test_beyond_tasks_scores_each_length_and_k_as_the_model_reads_them',
        **{k: f'{TASKS}::test_the_task_studys_state_norms_are_the_bits_not_the_start_token'
           for k in ('h_norm', 'rms', 'one_minus_cos')},
        **{k: f'{TASKS}::test_each_length_is_timed_once_in_one_pass_and_costed_a_string_loop' for k in ('seconds', 'strings')}),
    'beyond.tasks halting row': {k: f'{TASKS}::test_score_halts_each_string_at_the_loop_its_last_position_settles_whatever_the_chunk'
                                 for k in ('halted', 'halt_k')},
    'beyond.exit_gate info': {k: f'{GATE}::test_the_exit_gate_is_trained_on_other_windows_than_it_is_scored_on'
                              for k in ('pairs', 'heldout_pairs', 'base_rate', 'label_rate_by_loop', 'heldout_bce_base',
                                        'heldout_bce', 'train_bce')},
}


@pytest.fixture(scope='session')
def still_run(tiny_data, tmp_path_factory):
    """(run folder, its log records, what it printed). The alpha readout: its radial fraction is far from
    zero (a normalized readout's is float64's noise, which any rule would match) and it has scalars to report."""
    import io
    from types import SimpleNamespace
    import train
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


@pytest.fixture(scope='session')
def still_evaluated(still_run, tmp_path_factory):
    """(run folder, its record in results.json, what eval_depth.py printed, the whole results.json)."""
    import io
    import itertools
    import math
    from types import SimpleNamespace
    import torch
    import eval_depth
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
        eval_depth.main([str(run), '--device=cpu', '--dtype=float32', f'--max_tokens={STILL_SCORED}', '--batch_size=8',
                         '--bench_iters=1', '--clamp', '--lemma_loops=4', '--lemma_tokens=64', '--curves',
                         '--out', str(root / 'eval')])
    with open(root / 'eval' / 'results.json') as f:
        results = json.load(f)
    return run, results['runs'][0], printed.getvalue(), results


# -----------------------------------------------------------------------------
# two tiny runs (a normalized per-loop run and a raw terminal one) and their evaluation by python -m
# beyond.eval_decode (eval_depth.py's main with the decoding studies plugged in): tests/test_eval_depth.py's and
# tests/test_eval_decode.py's

@pytest.fixture(scope='session')
def runs(tiny_data, tmp_path_factory):
    def train_them(root):
        import train
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(train, 'peak_flops', lambda device, dtype: PEAK)
            for name, extra in (('norm-perloop', ()), ('raw-terminal', ('--readout=raw', '--loss=terminal'))):
                train_in_process(tiny_data, root / name, '--max_iters=30', '--eval_interval=30', *extra)
    root = built_once(tmp_path_factory, 'runs', train_them)
    return root / 'norm-perloop', root / 'raw-terminal'


SCORED = 2000  # tokens the evaluation scores (the split's first ones; not a multiple of the block: a short tail window)


# every evaluation here on the CPU, also where a GPU is visible (device 'auto' would take it: bf16 there,
# against float32 references at rel 1e-5); the last --device given wins, so a test can still name another
PINNED = ['--device=cpu']


def evaluate(*argv, main=None):
    """python -m beyond.eval_decode's main (eval_depth.main with the decoding studies) in this
    process, as the script runs it, or eval_depth.py's (main=eval_depth.main), on the CPU (PINNED), its figures
    saved as quick_savefig saves them: (stdout, stderr)."""
    import io
    from types import SimpleNamespace
    if main is None:
        from beyond import eval_decode
        main = eval_decode.main
    import matplotlib.figure
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), pytest.MonkeyPatch.context() as mp:
        mp.setattr(matplotlib.figure.Figure, 'savefig', quick_savefig(matplotlib.figure.Figure.savefig))
        mp.setattr(matplotlib.figure.Figure, 'tight_layout', quick_tight_layout)
        main([str(a) for a in (*PINNED, *argv)])
    return SimpleNamespace(stdout=out.getvalue(), stderr=err.getvalue())


@pytest.fixture(scope='session')
def evaluated(runs, tmp_path_factory):
    """(what the evaluation printed: stdout and stderr, its out folder, the runs of its results.json)."""
    from types import SimpleNamespace

    def evaluate_them(root):
        import eval_depth
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(eval_depth, 'peak_flops', lambda device, dtype: PEAK)
            r = evaluate(*runs, '--clamp', '--exit', '1e-9,0.5,1.0', '--out', root / 'eval', f'--max_tokens={SCORED}',
                         '--bench_iters=2', '--batch_size=16', '--lemma_loops=6', '--lemma_tokens=256', '--curves')
        (root / 'stdout').write_text(r.stdout)
        (root / 'stderr').write_text(r.stderr)
    root = built_once(tmp_path_factory, 'evaluated', evaluate_them)
    r = SimpleNamespace(stdout=(root / 'stdout').read_text(), stderr=(root / 'stderr').read_text())
    with open(root / 'eval' / 'results.json') as f:
        return r, root / 'eval', json.load(f)['runs']


# -----------------------------------------------------------------------------
# a figure as a reader sees it (a dict of what is drawn), and the snapshots of figures and of the argparse
# scripts' options: tests/snapshots/. After a deliberate change to a figure or an option, rewrite them and
# read their diff:
#     UPDATE_SNAPSHOTS=1 python -m pytest -q -n0 tests/test_report.py tests/test_tasks.py tests/test_prepare.py \
#         tests/test_eval_depth.py tests/test_parity.py

SNAPSHOTS = pathlib.Path(__file__).parent / 'snapshots'


def matches_snapshot(file, key, got):
    """got (made JSON: tuples as lists) is the snapshot's entry key; UPDATE_SNAPSHOTS=1 writes it instead."""
    got, path = json.loads(json.dumps(got)), SNAPSHOTS / file
    stored = json.loads(path.read_text()) if path.exists() else {}
    if os.environ.get('UPDATE_SNAPSHOTS') == '1':
        stored[key] = got
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps(dict(sorted(stored.items())), indent=1, ensure_ascii=False) + '\n')
    assert key in stored, f'no snapshot of {key} in {path}: UPDATE_SNAPSHOTS=1 writes it'
    return got == stored[key]


def sig(values):
    """Numbers to 5 significant digits, a flat list; NaN (a gap in a line) as None."""
    import math
    import numpy as np
    a = np.ma.filled(np.ma.asarray(values, dtype=float), np.nan).ravel()
    return [float(f'{v:.5g}') if math.isfinite(v) else None for v in a]


def hexes(colors):
    from matplotlib.colors import to_hex
    return [to_hex(c, keep_alpha=True) for c in colors]


def describe_legend(ax):
    leg = ax.get_legend()
    if leg is None:
        return None
    anchor = ax.transAxes.inverted().transform(leg.get_bbox_to_anchor().p0)  # (in the axes' own coordinates)
    return dict(labels=[t.get_text() for t in leg.get_texts()], loc=leg._loc, anchor=sig(anchor), ncols=leg._ncols,
                frameon=leg.get_frame_on(), fontsize=leg._fontsize)


def describe_axes(ax):
    from matplotlib.container import ErrorbarContainer
    return dict(
        title=ax.get_title(), xlabel=ax.get_xlabel(), ylabel=ax.get_ylabel(), xscale=ax.get_xscale(),
        yscale=ax.get_yscale(), xlim=sig(ax.get_xlim()), ylim=sig(ax.get_ylim()), legend=describe_legend(ax),
        lines=[dict(label=l.get_label(), color=hexes([l.get_color()])[0], ls=l.get_linestyle(), lw=l.get_linewidth(),
                    marker=str(l.get_marker()), ms=l.get_markersize(), x=sig(l.get_xdata()), y=sig(l.get_ydata()))
               for l in ax.lines],  # (an error bar's data line and its caps among them)
        errorbars=[dict(label=c.get_label(), xerr=c.has_xerr, yerr=c.has_yerr)
                   for c in ax.containers if isinstance(c, ErrorbarContainer)],
        collections=[dict(kind=type(c).__name__, alpha=c.get_alpha(), face=hexes(c.get_facecolor()),
                          edge=hexes(c.get_edgecolor()), paths=[sig(p.vertices) for p in c.get_paths()])
                     for c in ax.collections],  # (error bars' segments, bands)
        texts=[dict(text=t.get_text(), xy=sig(t.xy), offset=sig(t.xyann), coords=t.anncoords, fontsize=t.get_fontsize())
               for t in ax.texts],
        patches=[dict(label=p.get_label(), values=sig(p.get_data().values), edges=sig(p.get_data().edges))
                 for p in ax.patches])


def describe(fig):
    return dict(size=sig(fig.get_size_inches()), suptitle=fig.get_suptitle(), axes=[describe_axes(ax) for ax in fig.axes])


@pytest.fixture
def plt():
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    yield plt
    plt.close('all')


class Parser(BaseException):
    def __init__(self, parser):
        self.parser = parser


def parser_of(main, monkeypatch):
    """The parser main builds, stopped at its parse_args (nothing run)."""
    def seen(parser, *args, **kwargs):
        raise Parser(parser)
    monkeypatch.setattr(argparse.ArgumentParser, 'parse_args', seen)
    monkeypatch.setattr(os, 'cpu_count', lambda: 4)  # (prepare's --num_threads default: the machine's cores)
    with pytest.raises(Parser) as e:
        main(['--help'])
    return e.value.parser


def assert_options_documented(script, main, monkeypatch, no_help=()):
    """Every option of an argparse script's parser (main's) is documented in its --help, and the options
    (flags, defaults, help, choices, types) are tests/snapshots/argparse.json's entry for the script;
    no_help: options that may say nothing in --help."""
    p = parser_of(main, monkeypatch)
    monkeypatch.setenv('COLUMNS', '100')
    shown = ' '.join(p.format_help().split())  # (rendered: a stray % in a help string would fail here)
    options = [a for a in p._actions if not isinstance(a, argparse._HelpAction)]
    described = {(a.option_strings or [a.dest])[0]: dict(default=a.default, help=a.help, choices=a.choices,
                                                         required=a.required, type=getattr(a.type, '__name__', None),
                                                         nargs=a.nargs, action=type(a).__name__) for a in options}
    for flag, option in described.items():
        assert option['help'] or option['choices'] or flag in no_help, f'{script} {flag} has no help'
        if option['help']:
            assert ' '.join(option['help'].split()) in shown, flag
    assert p.description and ' '.join(p.description.split()) in shown
    assert matches_snapshot('argparse.json', script, dict(description=p.description, options=described)), \
        f'{script} options differ from tests/snapshots/argparse.json (UPDATE_SNAPSHOTS=1 rewrites it after a deliberate change)'


# -----------------------------------------------------------------------------
# python for the scripts: a stand-in that forks from a server holding the imports. Importing torch
# (with the torch._dynamo that an optimizer imports) costs a process 2-4 s here; the scripts the studies
# and the GPU job run start dozens. The stand-in (SHIM) hands its command line, working directory,
# environment and standard streams to a server that did those imports once; the server forks, and the
# child runs the script or module as `python` would (runpy), with sys.executable the stand-in (so the
# steps a script starts as `sys.executable -m ...` fork too), and sends back its exit code. Anything
# else (`python -c`, a file outside the repository such as inductor's compile workers, which are handed
# pipes besides the three streams) runs the real interpreter. The children save figures at 20 dpi
# without the tight bounding box (a second drawing): half of what drawing them costs.
# STUDIES_PYTHON=real gives the scripts the real interpreter instead (minutes).

SHIM = '''#!{python} -S
import json, os, socket, sys
args = sys.argv[1:]
path = os.path.abspath(args[0]) if args and not args[0].startswith('-') else ''
if not (args[:1] == ['-m'] and len(args) > 1 and not args[1].startswith('torch')
        or path.startswith({root!r} + os.sep) and 'site-packages' not in path):  # (a venv may sit in the repo)
    os.execv({python!r}, [{python!r}, *args])  # (not `python -m MODULE ...` or `python REPO_FILE ...`)
s = socket.socket(socket.AF_UNIX)
s.connect({sock!r})
msg = json.dumps(dict(argv=args, cwd=os.getcwd(), env=dict(os.environ), python=os.path.abspath(sys.argv[0]))).encode()
socket.send_fds(s, [len(msg).to_bytes(8, 'big') + msg], [0, 1, 2])
code = b''
while chunk := s.recv(64):
    code += chunk
sys.exit(int(code) if code else 1)  # (no code: the child died)
'''


def quick_savefig(save):
    """Figure.savefig at 20 dpi without the tight box's second drawing: how the scripts' stand-in and the
    evaluations run in this process (evaluate) save figures, every plotting call made. The tests that read a
    figure's pixels or its dpi call the plotting in their own way (tests/test_report.py, test_tasks.py)."""
    def savefig(fig, path, **kw):
        return save(fig, path, **{**kw, 'dpi': 20, 'bbox_inches': None})
    return savefig


def quick_tight_layout(fig, *args, **kw):
    """Figure.tight_layout where quick_savefig saves: the same figure, unarranged (half a task plot's time)."""


def serve(path, private=False):
    """Takes the shims' commands on the socket at path, each run in a child of its own (child); never
    returns. private (a server of one process, not of a pytest-xdist run): it dies with that process,
    however the process ends (mutmut's workers leave by os._exit, some before pytest_unconfigure)."""
    if private and sys.platform.startswith('linux'):
        import ctypes
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG (Linux)
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.figure
    import matplotlib.pyplot  # noqa: F401
    import numpy  # noqa: F401
    import torch
    import torch._dynamo  # noqa: F401  (torch.optim imports it on first use: ~2 s more)
    import torch._inductor.compile_fx  # noqa: F401  (a process's first compile: ~0.8 s)
    from torch._inductor import cpu_vec_isa
    cpu_vec_isa.valid_vec_isa_list()  # (its first compile probes each ISA in a process of its own: ~0.9 s)
    save = quick_savefig(matplotlib.figure.Figure.savefig)

    def savefig(fig, path, **kw):
        """Figures as quick_savefig saves them. A study's scripts (STUDY_KEEPS, set by
        tests/test_studies.py's run_study: the paths of the figures its test reads, os.pathsep between) draw only
        those: any other (a run's own evaluation, merged and drawn again; a figure no test of the study reads) has
        every plotting call made and is left an empty file, undrawn."""
        keeps = os.environ.get('STUDY_KEEPS')
        if keeps is not None and isinstance(path, (str, os.PathLike)) and os.path.realpath(path) not in {
                os.path.realpath(k) for k in keeps.split(os.pathsep) if k}:
            open(path, 'wb').close()
            return None
        return save(fig, path, **kw)
    matplotlib.figure.Figure.savefig = savefig
    matplotlib.figure.Figure.tight_layout = quick_tight_layout
    gc.freeze()  # (what is imported here is never collected: a child's collections skip it and leave its pages shared)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the children reap themselves
    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    server.listen(64)
    print('ready', flush=True)
    while True:
        conn, _ = server.accept()
        if os.fork() == 0:
            server.close()
            child(conn)
        conn.close()


def child(conn):
    """Runs the shim's `python FILE ARGS` or `python -m MODULE ARGS` with its streams, directory and
    environment, and sends back the exit code."""
    import runpy
    import traceback
    import torch
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    data, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
    while len(data) < 8 or len(data) < 8 + int.from_bytes(data[:8], 'big'):
        more = conn.recv(1 << 20)
        if not more:  # the shim went away
            os._exit(1)
        data += more
    msg = json.loads(data[8:])
    for i, fd in enumerate(fds):
        os.dup2(fd, i)
        os.close(fd)
    os.chdir(msg['cwd'])
    os.environ.clear()
    os.environ.update(msg['env'])
    sys.path[1:1] = [p for p in os.environ.get('PYTHONPATH', '').split(os.pathsep) if p]  # (after the script's folder)
    if os.environ.get('OMP_NUM_THREADS'):  # (read by OpenMP when torch was imported, so set here)
        torch.set_num_threads(int(os.environ['OMP_NUM_THREADS']))
    if os.environ.get('CXX') != ENVIRON.get('CXX'):  # (inductor reads CXX when its config is imported, as here)
        import torch._inductor.config
        from torch._inductor import cpu_vec_isa
        torch._inductor.config.cpp.cxx = (None, os.environ.get('CXX', 'g++'))
        cpu_vec_isa.valid_vec_isa_list.cache_clear()  # (the server's ISA probes used its compiler)
        cpu_vec_isa.VecISA._VecISA__bool__impl.cache_clear()
    argv, code, sys.executable = msg['argv'], 0, msg['python']
    save_hits = mutant_reaches_script(argv[1] if argv[0] == '-m' else argv[0])

    def leave(code, _exit=os._exit):  # the exit code to the shim, also where the script itself calls os._exit
        sys.stdout.flush()            # (runtime.exit_process does, under torchrun)
        sys.stderr.flush()
        save_hits()
        conn.sendall(str(code).encode())
        _exit(code)
    os._exit = leave
    try:
        if argv[0] == '-m':
            sys.argv, sys.path[0] = argv[1:], msg['cwd']
            runpy.run_module(argv[1], run_name='__main__', alter_sys=True)
        else:
            sys.argv, sys.path[0] = argv, os.path.dirname(os.path.abspath(argv[0]))
            runpy.run_path(argv[0], run_name='__main__')
    except SystemExit as e:
        if isinstance(e.code, str):
            print(e.code, file=sys.stderr)
        code = e.code if isinstance(e.code, int) else 0 if e.code is None else 1
    except BaseException:
        traceback.print_exc()
        code = 1
    leave(code)


ENVIRON = dict(os.environ)  # the environment the tests started with
STAND_IN = {}  # this process's stand-in: its path and whether its server started


def stand_in_python():
    """The stand-in's path (STUDIES_PYTHON=real: a wrapper of the real interpreter), once its server is
    ready. One server serves every process of a run (pytest-xdist's workers share it by the run's id):
    the first call of the run starts it, and the last process of the run to leave stops it."""
    if not STAND_IN:
        run = os.environ.get('PYTEST_XDIST_TESTRUNUID')  # (the same in every worker of one run)
        folder = os.path.join(tempfile.gettempdir(), f'python-{run}') if run else tempfile.mkdtemp(prefix='python-')
        os.makedirs(folder, exist_ok=True)  # (it holds the socket, whose path is at most 107 bytes)
        python, ready = os.path.join(folder, 'python'), os.path.join(folder, 'ready')
        with stand_in_lock(folder):
            os.makedirs(os.path.join(folder, 'users'), exist_ok=True)  # (again: the last user may have just left)
            open(os.path.join(folder, 'users', str(os.getpid())), 'w').close()
            if not os.path.exists(ready):
                start_server(folder, python, ready, private=not run)
        STAND_IN.update(folder=folder, python=pathlib.Path(python), ready=os.path.exists(ready))
    assert STAND_IN['ready'], ('the server for the scripts did not start: '
                               + open(os.path.join(STAND_IN['python'].parent, 'server.log')).read()[-2000:])
    return STAND_IN['python']


@contextlib.contextmanager
def stand_in_lock(folder):
    with open(os.path.join(folder, 'lock'), 'a') as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def start_server(folder, python, ready, private=False):
    """The server (or, with STUDIES_PYTHON=real, a wrapper) and the shim at `python`; `ready` is written
    once the server has done its imports."""
    if os.environ.get('STUDIES_PYTHON') == 'real':
        with open(python, 'w') as f:  # (a link would lose the venv)
            f.write(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    else:
        sock = os.path.join(folder, 'server')
        with open(os.path.join(folder, 'server.log'), 'w') as log:
            server = subprocess.Popen([sys.executable, '-c', f'import sys; sys.path[0] = {os.path.dirname(__file__)!r}; '
                                       f'import conftest; conftest.serve({sock!r}, {private})'], stdout=subprocess.PIPE,
                                      stderr=log, cwd=HERE, env=ENVIRON)  # (ENVIRON: torch reads some at import)
        if server.stdout.readline() != b'ready\n':
            return
        with open(os.path.join(folder, 'pid'), 'w') as f:
            f.write(str(server.pid))
        with open(python, 'w') as f:
            f.write(SHIM.format(python=sys.executable, sock=sock, root=HERE))
    os.chmod(python, 0o755)
    open(ready, 'w').close()


def pytest_unconfigure(config):
    """At the end of this process's session, not at its exit: mutmut's workers (tests/mutants.py) leave
    by os._exit, which runs no atexit handler, and a server left behind holds a torch process."""
    if STAND_IN:
        leave_stand_in(STAND_IN.pop('folder'))
        STAND_IN.clear()


def leave_stand_in(folder):
    """This process is done with the stand-in; the last of the run stops the server and removes the folder."""
    with stand_in_lock(folder):
        os.remove(os.path.join(folder, 'users', str(os.getpid())))
        if os.listdir(os.path.join(folder, 'users')):
            return
        try:
            with open(os.path.join(folder, 'pid')) as f:
                os.kill(int(f.read()), signal.SIGKILL)
        except (FileNotFoundError, ProcessLookupError):
            pass
        shutil.rmtree(folder)


# -----------------------------------------------------------------------------
# mutation testing (tests/mutants.py): mutmut rewrites each function into a trampoline that runs the
# mutant named by MUTANT_UNDER_TEST, which the scripts' processes inherit. Two things it cannot see by
# itself, bridged here for the stand-in's children: a script runs as __main__, so the mutants of its own
# functions (named `train.x_main__mutmut_3`) are renamed to `__main__....` for that child; and mutmut
# learns which tests call which function in one run of the suite ("stats"), where the children record
# the functions they call into a file that the test's teardown hands to mutmut, and where what a shared
# fixture calls is credited to every test that uses it.

def script_module(script):
    """`beyond.tasks` for `-m beyond.tasks`, `train` for .../train.py in the repository."""
    if not script.endswith('.py'):
        return script
    return os.path.relpath(os.path.abspath(script), HERE)[:-3].replace(os.sep, '.')


def mutant_reaches_script(script):
    """In a child running a script under mutmut: its own mutants renamed for __main__, and in the stats
    run a recorder of the functions it calls; returns what writes those at the child's exit."""
    mutant, hits_file = os.environ.get('MUTANT_UNDER_TEST', ''), os.environ.get('MUTMUT_HITS_FILE')
    module = script_module(script)
    if mutant.rpartition('.')[0] == module:
        os.environ['MUTANT_UNDER_TEST'] = '__main__.' + mutant.rpartition('.')[2]
    if not hits_file:
        return lambda: None
    from mutmut.mutation import trampoline
    hits = set()
    trampoline._mutant_under_test = 'stats'  # (this process only: the environment has none)
    trampoline.record_trampoline_hit = lambda name, caller=None: hits.add(
        module + name[len('__main__'):] if name.startswith('__main__.') else name)

    def save():
        with open(hits_file, 'a') as f:
            f.write(''.join(name + '\n' for name in hits))
    return save


def pytest_configure(config):
    """In mutmut's stats run, the scripts' processes run the original code and record what they call
    (mutmut's recorder needs its own working directory, which a script's is not)."""
    if os.environ.get('MUTANT_UNDER_TEST') == 'stats':
        del os.environ['MUTANT_UNDER_TEST']  # (mutmut keeps its own copy for this process)
        os.environ['MUTMUT_HITS_FILE'] = os.path.join(tempfile.mkdtemp(prefix='mutmut-'), 'hits')
        config.pluginmanager.register(FixtureCredit(), 'fixture-credit')
        import torch
        from mutmut.mutation import trampoline  # (its recorder is nothing dynamo can trace: compiled code
        recorded = trampoline.get_mutant_under_test  # runs the original functions, unrecorded)
        compiling = torch.compiler.is_compiling  # (held here: a test that stands in for it, to run the compiled
        trampoline.get_mutant_under_test = lambda: '' if compiling() else recorded()  # branch eagerly, is recorded)


def scripts_hits():
    """The functions the scripts' processes called since the last call (and forgets them)."""
    path = os.environ.get('MUTMUT_HITS_FILE')
    if not (path and os.path.exists(path)):
        return set()
    with open(path) as f:
        hits = set(f.read().split())
    os.remove(path)
    return hits


FIXTURE_HITS = {}  # fixture definition -> the functions its setup called (stats run)


class FixtureCredit:
    """A shared fixture is made in the first test that uses it; mutmut would credit what it calls to that
    test alone. Recorded here, it is credited to every test that uses the fixture (below). Registered as a
    plugin of its own (pytest_configure): pytest asks a session fixture's hooks of the root's conftests
    only, so this conftest's own pytest_fixture_setup would never see the session fixtures."""

    @pytest.hookimpl(hookwrapper=True)
    def pytest_fixture_setup(self, fixturedef, request):
        from mutmut.state import state
        before, hits = set(state()._stats), scripts_hits()
        state()._stats.clear()
        yield
        FIXTURE_HITS.setdefault(fixturedef, set()).update(state()._stats, scripts_hits())
        state()._stats.update(before | hits)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item):
    """The functions a test's scripts and fixtures called, added to the test's own (before mutmut reads them)."""
    if 'MUTMUT_HITS_FILE' not in os.environ:
        return
    from mutmut.state import state
    state()._stats.update(scripts_hits())
    for defs in item._fixtureinfo.name2fixturedefs.values():
        for fixturedef in defs:
            state()._stats.update(FIXTURE_HITS.get(fixturedef, ()))


# the files whose tests take longest, started first by the suite's two processes (pytest-xdist hands out the files in
# the order collected, so the studies' fixture, a third of the suite's time, started last and ran on alone)
LONGEST_FIRST = ('tests/test_studies.py', 'tests/test_train.py', 'tests/test_decoder.py', 'tests/test_eval_depth.py')


def pytest_collection_modifyitems(config, items):
    """The suite: the LONGEST_FIRST files' tests first. mutmut's run of a mutant takes the tests that call the mutated
    function in no fixed order, which would make each file's shared fixtures again at each switch of file: its tests
    go file by file, in each file's own order, the files whose tests took least time in mutmut's stats run first (at
    the first failure the run stops)."""
    if 'MUTANT_UNDER_TEST' not in os.environ:  # (mutmut's runs of a mutant, and its clean run: '')
        items.sort(key=lambda item: item.nodeid.split('::')[0] not in LONGEST_FIRST)  # (stable: the rest keep their order)
        return
    from mutmut.state import state
    seconds = {}
    for item in items:
        path = item.nodeid.split('::')[0]
        seconds[path] = seconds.get(path, 0.0) + state().duration_by_test.get(item.nodeid, 0.0)
    items.sort(key=lambda item: (seconds[item.nodeid.split('::')[0]], item.nodeid.split('::')[0],
                                 item.location[1] or 0))


def pytest_collection_finish(session):
    """What the collection imported (torch, the test modules) is never collected: a test's collections skip it."""
    gc.freeze()
