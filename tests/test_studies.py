"""
Every study's script, assets/<study>/run.sh, run as a user runs it (`bash assets/<study>/run.sh`)
at a tiny size: tiny byte data, tiny shapes, two iterations, one seed; each must exit 0 and write
what its README.md says it writes. The studies that read another study's runs get tiny ones made
here once (in-process: conftest's shared_runs). And what the studies keep: every study's tables.md is what
its stored results render to today, the parity studies' rules pick as they say, and assets/study_times.py prints
the times assets/README.md shows.

    python -m pytest -q tests/test_studies.py

The scripts start some fifty Python processes; their `python` is conftest's stand-in (stand_in_python),
which forks each from a server that imported torch once. STUDIES_PYTHON=real gives the scripts the
real interpreter instead (minutes).
"""

import collections
import functools
import glob
import json
import math
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

import eval_depth
import train
from beyond import eval_decode
from beyond.eval_decode import DecodingStudies
from configurator import UserError
from conftest import HERE, TINY, assert_one_line_error, stand_in_python

TRAIN = ' '.join(TINY + ['--max_iters=2', '--eval_interval=1'])
SETTINGS = dict(  # what every script gets: the tiny sizes (each script takes the ones it uses)
    DATASET='tiny-bytes', TRAIN_ARGS=TRAIN, OMP_NUM_THREADS='1', THREADS='1', REPEATS='1',
    # --device=cpu: every script on the CPU, also where a GPU is visible (TRAIN_ARGS' TINY and BENCH_ARGS pin it
    # too); beyond.depth_costs has no --device: it measures the CPU only
    EVAL_ARGS='--device cpu --max_tokens 128 --lemma_tokens 64 --bench_iters 1 --diag_tokens 64',
    DECODE_ARGS='--decode_tokens 4', GATE_ARGS='--device=cpu --tokens=512 --iters=5 --batch_size=256',
    SAMPLE_ARGS='--device=cpu --max_new_tokens=4 --num_samples=1',
    COST_ARGS='--prompt 16 --reps 2 --new_tokens 4 --accept_tokens 128',
    BENCH_ARGS='--peak_size=128 --device=cpu --n_layer=1 --n_head=2 --n_embd=32 --block_size=16 --batch_size=2 --vocab_size=256 '
               '--steps=1 --warmup=0')
# a design study's (study.sh's design_study) tiny settings, both tasks'
DESIGN_STUDY = dict(CONDITIONS='raw', DATA_SEEDS='5', RECIPE='', TRAIN_ARGS=TRAIN + ' --inits=1',
                    PREP_ARGS='--train_rows=512 --val_rows=64 --test_rows=64 --probe_rows=16 --probe_lengths=3 '
                              '--long_rows=4 --long_lengths=6', TASK_ARGS='--lengths=8 --loops=2,4 --rows=2 --halt=latent',
                    RESCUE_ARGS='--lengths=8 --loops=2,4 --rows=2 --interventions=clamp,cap', RESCUE_SEEDS='1')
# study: (its settings here, whether it reads the shared runs, what its README says run.sh writes); they
# run two at a time, the longest first, but speed first of all: it reads no shared runs, so it runs
# while they train
STUDIES = {
    'speed': (dict(CONDITIONS='norm_perloop', COMPILED='0', PARTS_ARGS='--B 1 --T 16 --rows 8 --V 256 --reps 1'), False,
              ['logs/bench-44m.log', 'logs/bench-demo.log', 'logs/profile-44m-bf16.log',
               'logs/profile-44m-float32.log', 'logs/profile-demo.log', 'logs/casts-44m-bf16.log', 'logs/parts.log',
               'logs/bench-44m-nobf16-float32.log', 'logs/bench-44m-nobf16-bfloat16.log', 'logs/bench-44m-avx2-float32.log',
               'logs/norm_perloop-cpu-s1-float32.log', 'logs/norm_perloop-cpu-s1-bfloat16.jsonl']),
    'cpu-long-criteria': (dict(CONDITIONS='raw_perloop', THRESHOLDS='raw_perloop-cpu-long-s1',
                               AGREE='raw_perloop-cpu-long-s1'), True,
                          ['results.json', 'tables.md', 'exit_tables.md', 'costs-raw_perloop-float32.md',
                           'exit_frontier_out-raw_perloop-cpu-long-s1.png', 'logs/raw_perloop-cpu-long-s1.eval.log',
                           'logs/norm_perloop-cpu-long-s1.gate-raw.log',
                           'logs/raw_perloop-cpu-long-s1.eval-thresholds.log',
                           'logs/raw_perloop-cpu-long-s1.gate-agree-raw.log',
                           'logs/raw_perloop-cpu-long-s1.eval-agree.log']),
    'cpu-long-exit-sweep': (dict(CONDITIONS='penalty_perloop'), True,
                            ['results.json', 'tables.md', 'early_exit.png',
                             'logs/penalty_perloop_exit25-cpu-long-s1.jsonl',
                             'logs/penalty_perloop_exit10-cpu-long-s1.jsonl']),
    'cpu-long-exits': (dict(CONDITIONS='raw_perloop'), True,
                       ['results.json', 'tables.md', 'early_exit.png', 'logs/raw_perloop_exit-cpu-long-s1.jsonl']),
    'cpu-long-more': (dict(CONDITIONS='norm_terminal raw_terminal'), False,
                      ['results-a.json', 'results-b.json', 'tables.md', 'ppl_vs_k.png', 'lemma.png', 'drift.png',
                       'logs/raw_terminal-cpu-long-s1.jsonl']),
    'cpu-long': (dict(CONDITIONS='raw_perloop'), False,
                 ['results.json', 'tables.md', 'ppl_vs_k.png', 'lemma.png', 'drift.png', 'calibrated/results.json',
                  'calibrated/tables.md', 'logs/raw_perloop-cpu-long-s1.jsonl',
                  'logs/raw_perloop-cpu-long-s1.sample.log', 'logs/raw_perloop-cpu-long-s1.sample-speed.log']),
    'cpu-44m': (dict(CONDITIONS='norm_perloop', PARTS='a=norm_perloop',
                     COSTS='norm_perloop:float32 norm_perloop:bfloat16'), False,
                ['results-a.json', 'tables.md', 'lemma.png', 'drift.png', 'costs-norm_perloop-float32.md',
                 'costs-norm_perloop-bfloat16.md', 'logs/norm_perloop-cpu44m-s1.log',
                 'logs/norm_perloop-cpu44m-s1.jsonl']),
    'cpu-demo': (dict(CONDITIONS='norm_perloop'), False,
                 ['results.json', 'tables.md', 'ppl_vs_k.png', 'lemma.png', 'drift.png', 'early_exit.png',
                  'logs/norm_perloop-cpu-s1.jsonl', 'logs/norm_perloop-cpu-s1.log']),
    'heldout': (dict(CONDITIONS='norm_perloop raw_perloop', DATASET='pydoc-bytes'), False,  # (its own text: prepared here)
                ['results.json', 'tables.md', 'ppl_vs_k.png', 'drift.png', 'logs/prepare.log',
                 'logs/norm_perloop-cpu-s1.log', 'logs/raw_perloop-cpu-s1.jsonl']),
    'gate-targets': (dict(CONDITIONS='raw_perloop'), True,
                     ['results.json', 'tables.md', 'frontier.png', 'logs/raw_perloop-cpu-s1.gate-eps02.log']),
    'cpu-long-speculative': (dict(CONDITIONS='raw_perloop'), True, ['results.json', 'tables.md', 'ppl_vs_k.png']),
    'parity/designs': (dict(CONDITIONS='norm-il raw-pen', PREP_ARGS='--train_rows=512 --val_rows=64 --test_rows=64',
                   TASK_ARGS='--lengths=8,16 --loops=2,4 --rows=16 --interventions=clamp,cap'), False,
              ['results.json', 'accuracy.md', 'accuracy.png', 'logs/parity-norm-il-s1.log', 'logs/parity-norm-il-s1.jsonl',
               'logs/parity-raw-pen-s1.log', 'logs/parity-raw-pen-s1.jsonl',
               'logs/prepare.log']),
    'parity/seeds': (dict(CONDITIONS='norm-il raw', PREP_ARGS='--seed=2001 --train_rows=512 --val_rows=64 --test_rows=64 '
                                                             '--probe_rows=16 --probe_lengths=3',
                          TASK_ARGS='--rows=16', LOOPS='2,4', TRAIN_ARGS=TRAIN + ' --inits=1'), False,  # (its pins replaced)
                     ['accuracy.md', 'results.json', 'accuracy.png', 'evals.md', 'rules.md', 'scores/norm-il-32/results.json',
                      'scores/raw-64/results.json', 'logs/parity-norm-il-s1.log', 'logs/parity-raw-s1.jsonl',
                      'logs/score-norm-il-32.log', 'logs/prepare.log', 'logs/timed.seconds']),
    'parity/late': (dict(), False, []),  # (it reruns only at the commit it ran at: its run.sh says how, and writes nothing)
    'parity/new-seeds': (dict(PREP_ARGS='--seed=2002 --train_rows=512 --val_rows=64 --test_rows=64 --probe_rows=16 '
                                     '--probe_lengths=3', TASK_ARGS='--rows=16', LOOPS='2,4'), False,
                         ['accuracy.md', 'results.json', 'accuracy.png', 'evals.md', 'rules.md', 'scores/norm-il-32/results.json',
                          'scores/norm-il-64/results.json', 'logs/parity-norm-il-s1.log', 'logs/parity-norm-il-s1.jsonl',
                          'logs/timed.seconds', 'logs/timed.log']),
    'parity/screen': (dict(PREP_ARGS='--seed=2003 --train_rows=512 --val_rows=64 --test_rows=64 --probe_rows=16 '
                                  '--probe_lengths=3', TASK_ARGS='--rows=16', LOOPS='2,4', RULES_ARGS='--every=2'), False,
                      ['accuracy.md', 'results.json', 'accuracy.png', 'evals.md', 'rules.md', 'rules-64.md',
                       'scores/norm-il-32/results.json', 'scores/norm-il-64/results.json', 'logs/parity-norm-il-s1.log',
                       'logs/parity-norm-il-s1.jsonl', 'logs/timed.seconds', 'logs/timed.log', 'logs/beside.seconds',
                       'logs/beside-screened.log', 'logs/beside-whole.log']),
    'parity/screen-tuning': (dict(PREP_ARGS='--seed=100 --train_rows=512 --val_rows=64 --test_rows=64 --probe_rows=16 '
                                         '--probe_lengths=3', TASK_ARGS='--rows=16', LOOPS='2,4', EVERY='2'), False,
                             ['rules.md', 'rules-64.md', 'logs/parity-norm-il-s1.log', 'logs/parity-norm-il-s1.jsonl',
                              'logs/prepare.log']),
    'parity/inits': (dict(PREP_ARGS='--seed=2004 --train_rows=512 --val_rows=64 --test_rows=64 --probe_rows=16 '
                                 '--probe_lengths=3', TASK_ARGS='--rows=16', LOOPS='2,4'), False,
                     ['accuracy.md', 'results.json', 'accuracy.png', 'evals.md', 'rules.md', 'rules-64.md',
                      'scores/norm-il-32/results.json', 'scores/norm-il-64/results.json', 'logs/parity-norm-il-s1.log',
                      'logs/parity-norm-il-s1.jsonl', 'logs/timed.seconds', 'logs/timed.log']),
    'parity/deep': (dict(DATA_SEEDS='2', PREP_ARGS='--train_rows=512 --val_rows=64 --test_rows=64 --probe_rows=16 '
                                                 '--probe_lengths=3', TASK_ARGS='--lengths=8,16 --loops=2,4 --rows=4 --halt=latent',
                         FULL_ARGS='--lengths=8 --loops=2,4 --rows=4'), False,
                    ['accuracy.md', 'results.json', 'accuracy.png', 'scores/s1/results.json', 'logs/parity-s1.log',
                     'logs/parity-s1.jsonl', 'logs/parity-s1.wall', 'logs/score-s1.log', 'logs/score-s1.wall',
                     'logs/prepare-2.log', 'agree.md', 'full/results.json', 'logs/full.log']),
    'addition': (dict(DATA_SEEDS='2', PREP_ARGS='--train_rows=512 --val_rows=64 --test_rows=64 --probe_rows=16 '
                                              '--probe_lengths=3', TASK_ARGS='--lengths=8,16 --loops=2,4 --rows=4 --halt=latent'), False,
                 ['accuracy.md', 'results.json', 'accuracy.png', 'scores/s1/results.json', 'logs/addition-s1.log',
                  'logs/addition-s1.jsonl', 'logs/addition-s1.wall', 'logs/score-s1.log', 'logs/score-s1.wall',
                  'logs/prepare-2.log']),
    # (data seed 3: addition's 2 is made by the study beside it; four iterations: a step for each of four inits)
    'addition/retries': (dict(DATA_SEEDS='3', PREP_ARGS='--train_rows=512 --val_rows=64 --test_rows=64 --probe_rows=16 '
                                                      '--probe_lengths=3', TASK_ARGS='--lengths=8,16 --loops=2,4 --rows=4 --halt=latent',
                              TRAIN_ARGS=TRAIN.replace('--max_iters=2', '--max_iters=4')),
                         False,
                         ['accuracy.md', 'results.json', 'accuracy.png', 'scores/s1/results.json', 'logs/addition-s1.log',
                          'logs/addition-s1.jsonl', 'logs/addition-s1.wall', 'logs/score-s1.log', 'logs/score-s1.wall',
                          'logs/prepare-3.log', 'evals.md']),
    # (data seed 4 for each reach study; four iterations: a step for each of the recipes' four inits)
    'parity/reach': (dict(DATA_SEEDS='4', PREP_ARGS='--train_rows=512 --val_rows=64 --test_rows=64 --probe_rows=16 '
                                                 '--probe_lengths=3 --long_rows=4 --long_lengths=6',
                          TASK_ARGS='--lengths=8 --loops=2,4 --rows=2 --halt=latent',
                          BF16_ARGS='--lengths=8 --loops=2,4 --rows=2 --halt=latent --dtype=bfloat16',
                          TRAIN_ARGS=TRAIN.replace('--max_iters=2', '--max_iters=4')), False,
                     ['accuracy.md', 'results.json', 'accuracy.png', 'scores/s1/results.json', 'logs/parity-s1.log',
                      'logs/parity-s1.jsonl', 'logs/parity-s1.wall', 'logs/score-s1.log', 'logs/score-s1.wall',
                      'logs/prepare-4.log', 'evals.md', 'costs.md', 'bf16/accuracy.md', 'bf16/results.json', 'bf16/s1/results.json',
                      'logs/score-bf16-s1.log', 'logs/score-bf16-s1.wall']),
    'addition/reach': (dict(DATA_SEEDS='4', PREP_ARGS='--train_rows=512 --val_rows=64 --test_rows=64 --probe_rows=16 '
                                                    '--probe_lengths=3 --long_rows=4 --long_lengths=6',
                            TASK_ARGS='--lengths=8 --loops=2,4 --rows=2 --halt=latent',
                            TRAIN_ARGS=TRAIN.replace('--max_iters=2', '--max_iters=4')), False,
                       ['accuracy.md', 'results.json', 'accuracy.png', 'scores/s1/results.json', 'logs/addition-s1.log',
                        'logs/addition-s1.jsonl', 'logs/addition-s1.wall', 'logs/score-s1.log', 'logs/score-s1.wall',
                        'logs/prepare-4.log', 'evals.md', 'costs.md']),
    # (data seed 5: parity/reach makes 4; one design, one initialization, none of the recipe's stored scorings beside it)
    'parity/reach-designs': (DESIGN_STUDY, False,
                             ['accuracy.md', 'results.json', 'accuracy.png', 'logs/prepare-5.log', 'raw/accuracy.md',
                              'raw/results.json', 'raw/accuracy.png', 'raw/evals.md', 'raw/costs.md',
                              'raw/scores/s1/results.json', 'raw/logs/parity-raw-s1.log', 'raw/logs/parity-raw-s1.jsonl',
                              'raw/logs/parity-raw-s1.wall', 'raw/logs/score-s1.log', 'raw/logs/score-s1.wall',
                              'raw/rescue/s1/results.json', 'raw/logs/score-rescue-s1.log', 'rescue/accuracy.md',
                              'rescue/results.json']),
    'addition/reach-designs': (DESIGN_STUDY, False,
                               ['accuracy.md', 'results.json', 'accuracy.png', 'logs/prepare-5.log', 'raw/accuracy.md',
                                'raw/results.json', 'raw/evals.md', 'raw/costs.md', 'raw/scores/s1/results.json',
                                'raw/logs/addition-raw-s1.jsonl', 'raw/logs/addition-raw-s1.wall', 'raw/logs/score-s1.wall',
                                'raw/rescue/s1/results.json', 'rescue/accuracy.md']),
    # (seed 101: the baseline row reads that seed's stored log, assets/parity/screen-tuning's; its data, parity-100, is
    # screen-tuning's, made there; three iterations: one for each of three initializations)
    'parity/inits-tuning': (dict(PREP_ARGS='--seed=100 --train_rows=512 --val_rows=64 --test_rows=64 --probe_rows=16 '
                                        '--probe_lengths=3', SEEDS='101',
                                 TRAIN_ARGS=TRAIN.replace('--max_iters=2', '--max_iters=3')), False,
                            ['inits.md', 'logs/parity-i2con-s101.log', 'logs/parity-i3cos-s101.jsonl']),
    'depth': (dict(RUNS_LIST='raw_perloop:rd1.5m3:1 alpha_perloop:fixed:1 norm_perloop:rd2:1',  # rd[SIGMA][mMEAN]
                   TRAIN_ARGS=' '.join(a for a in TRAIN.split() if not a.startswith('--n_loops=')) + ' --max_loops=4'),
              False,
              ['results-raw_perloop-rd1.5m3-cpu-long-s1.json', 'results-alpha_perloop-cpu-long-s1.json',
               'results-norm_perloop-rd2-cpu-long-s1.json', 'results.json',
               'tables.md', 'designs.md', 'ppl_vs_k.png', 'logs/raw_perloop-rd1.5m3-cpu-long-s1.jsonl',
               'logs/alpha_perloop-cpu-long-s1.eval.log', 'logs/bench-random-depth.log']),
}


# -----------------------------------------------------------------------------
# the studies

def run_study(study, data_dir, runs, **given):
    """assets/<study>/run.sh as a user runs it, at its tiny size here: SETTINGS, one seed, the tiny data, RUNS, the
    study's own settings and the variables given, with the stand-in python first on the PATH (and no OUT or STORE
    of this shell's; STUDY_KEEPS, with an OUT given: the stand-in draws only the figures of OUT that STUDIES names,
    the ones the tiny-size test reads, tests/conftest.py)."""
    env = {k: v for k, v in os.environ.items() if k not in ('OUT', 'STORE', 'STUDY_KEEPS')}
    env.update({**SETTINGS, 'SEEDS': '1', 'DATA_DIR': str(data_dir), 'RUNS': str(runs), **STUDIES[study][0], **given,
                'PATH': f"{stand_in_python().parent}{os.pathsep}{os.environ['PATH']}"})
    if 'OUT' in given:
        env['STUDY_KEEPS'] = os.pathsep.join(os.path.join(given['OUT'], n) for n in STUDIES[study][2] if n.endswith('.png'))
    return subprocess.run(['bash', f'assets/{study}/run.sh'], cwd=HERE, env=env, capture_output=True, text=True,
                          timeout=600)


@pytest.fixture(scope='session')
def studies(tiny_data, shared_runs, tmp_path_factory):
    """Every study's run.sh, two at a time (the shared runs train in one lane while the first
    study runs), each with OUT a folder of its own: study -> (its CompletedProcess, its OUT), and the files of
    assets/ (with their times) before and after."""
    root = tmp_path_factory.mktemp('studies')
    stand_in_python()  # (its server started here, not in a thread of the pool: a private one dies with its thread)

    def run(study):
        runs = shared.result() if STUDIES[study][1] else root / f'{study}-runs'
        return run_study(study, tiny_data, runs, OUT=str(root / study)), root / study

    before = listing(os.path.join(HERE, 'assets'))
    with ThreadPoolExecutor(2) as pool:
        shared = pool.submit(shared_runs.folder)
        done = {study: pool.submit(run, study) for study in STUDIES}
        done = {study: job.result() for study, job in done.items()}
    return done, before, listing(os.path.join(HERE, 'assets'))


def listing(folder):
    """Every file under folder, with its modification time."""
    return {os.path.join(d, f): os.stat(os.path.join(d, f)).st_mtime_ns
            for d, _, files in os.walk(folder) for f in files}


def readme_names(study):
    """The files a study's README.md names in backticks, <placeholders> as wildcards: regexes."""
    with open(os.path.join(HERE, 'assets', study, 'README.md')) as f:
        readme = f.read()
    return [re.compile('[^/]+'.join(map(re.escape, re.split(r'<[^>]+>', token))) + '$')
                    for token in re.findall(r'`([^`\s]+)`', readme)]


def study_folders():
    """assets/'s studies as assets/study_times.py finds them: each folder with a run.sh or a README.md, a folder of
    studies (one whose subfolders have a run.sh: assets/parity/) as its subfolders."""
    import runpy
    return runpy.run_path(os.path.join(HERE, 'assets', 'study_times.py'))['study_folders'](os.path.join(HERE, 'assets'))


def test_every_study_folder_has_its_script_and_readme():
    assets = os.path.join(HERE, 'assets')
    folders = {d for d in os.listdir(assets) if os.path.isdir(os.path.join(assets, d))}
    # every folder of assets/ is a study or a folder of studies (parity/: the recipe's steps, a folder each)
    assert folders == {f.split('/')[0] for f in study_folders()}
    # (gpu/: beyond.gpu_check's reports, made on a lent GPU; quickstart/: the README's quick start, its commands there)
    assert sorted(set(study_folders()) - {'gpu', 'quickstart'}) == sorted(STUDIES)
    for study in STUDIES:
        with open(os.path.join(HERE, 'assets', study, 'README.md')) as f:
            readme = f.read()
        assert f'bash assets/{study}/run.sh' in readme, study


def test_every_study_folder_has_one_row_in_the_index():
    # assets/README.md's table of studies: each folder under assets/ with a run.sh or a README.md (assets/parity/ and
    # each of its steps too) in exactly one row, its first cell a link to the folder named as the folder; no row for a
    # folder that is not there
    with open(os.path.join(HERE, 'assets', 'README.md')) as f:
        rows = re.findall(r'^\| \[([^]]+)\]\(([^)]+)\) \|', f.read(), re.M)
    assert [name for name, link in rows if name != link.rstrip('/')] == []
    assets = os.path.join(HERE, 'assets')
    folders = {os.path.relpath(d, assets) for d, _, files in os.walk(assets) if d != assets and {'run.sh', 'README.md'} & set(files)}
    assert {'parity', 'parity/seeds', 'cpu-demo'} <= folders
    rows = collections.Counter(name for name, _ in rows)
    assert {d: rows[d] for d in sorted(folders | set(rows)) if rows[d] != 1 or d not in folders} == {}


@pytest.mark.parametrize('study', ['addition', 'addition/retries', 'addition/reach', 'parity/deep', 'parity/reach'])
def test_a_task_study_wants_one_data_seed_a_run_and_says_so_before_it_writes(study, tmp_path):
    """study.sh's task_study: SEEDS and DATA_SEEDS of different lengths are one error line naming the study, and
    nothing is made in OUT."""
    env = {'PATH': f"{tmp_path}{os.pathsep}{os.environ['PATH']}", 'SEEDS': '1 2', 'DATA_SEEDS': '3', 'OUT': str(tmp_path / 'out'),
           'DATA_DIR': str(tmp_path / 'data'), 'RUNS': str(tmp_path)}
    (tmp_path / 'python').write_text('#!/bin/sh\nexit 3\n')  # (a python that runs nothing: a study past the check stops)
    (tmp_path / 'python').chmod(0o755)
    r = subprocess.run(['bash', f'assets/{study}/run.sh'], cwd=HERE, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and r.stderr == (f'assets/{study}/run.sh: error: SEEDS has 2 seeds and DATA_SEEDS 1: give '
                                              'one data seed a run\n')
    assert not (tmp_path / 'out' / 'logs').exists()


@pytest.mark.parametrize('study,runs,iters', [('parity/deep', 'parity-s*', 3000), ('addition/retries', 'addition-s*', 12000),
                                               ('addition', 'addition-s*', 3000)])
def test_a_task_study_run_before_the_long_probe_pins_the_recipe_its_runs_logged(study, runs, iters):
    """The recipes select beyond.tasks.long_probe (which logs a whole_error) and parity's trains up to four
    initializations; a study stored before that pins, in its run.sh, the select, initializations and iterations its runs
    logged: the screened probe's scores alone, each run's fresh starts at the initializations' starts of its iterations."""
    with open(os.path.join(ASSETS, study, 'run.sh')) as f:
        script = f.read()
    assert '--select=beyond.tasks.screened_probe' in script
    pinned = re.search(r'--inits=(\d+)', script)
    inits = int(pinned[1]) if pinned else train.setup([f"{HERE}/config/{study.split('/')[0]}.py"])['inits']
    logs = sorted(glob.glob(os.path.join(ASSETS, study, 'logs', f'{runs}.jsonl')))
    assert len(logs) == 10
    for log in logs:
        with open(log) as f:
            keys = {tuple(r['select']) for r in map(json.loads, f) if r.get('kind') == 'eval'}
        assert keys == {('probe_error', 'screen_error', 'probe_disagreement', 'probe_turn')}, log
        with open(log[:-len('.jsonl')] + '.log') as f:
            out = f.read()
        assert f'{iters:,} iterations' in out, log
        starts = [int(i) for i in re.findall(rf'initialization \d of {inits}: a fresh start at iteration (\d+)', out)]
        assert starts == train.init_starts(iters, inits)[1:1 + len(starts)], log
        assert len(starts) == out.count('a fresh start'), log


def test_a_lane_that_ends_frees_its_place_while_the_other_runs_on_and_a_failed_one_fails_the_study(tmp_path):
    """study.sh's lane: two at once; a third starts as soon as either ends, not when both have; wait_lanes waits for
    the rest, and a lane that failed stops a study (set -e) with its status."""
    def lanes(script):
        return subprocess.run(['bash', '-c', f'set -euo pipefail\n. assets/study.sh\n{script}'], cwd=HERE,
                              capture_output=True, text=True, timeout=60)
    # the first lane sleeps; the third, started when the second ends, finds the first still running
    r = lanes(f'lane bash -c "sleep 1.5; touch {tmp_path}/first"\nlane true\n'
              f'lane bash -c "[ -e {tmp_path}/first ] || touch {tmp_path}/third_before_first"\nwait_lanes\necho done')
    assert r.returncode == 0 and r.stdout == 'done\n', r.stderr
    assert (tmp_path / 'first').exists() and (tmp_path / 'third_before_first').exists()
    for script in ('lane true\nlane sh -c "exit 3"\nwait_lanes\necho on', 'lane sh -c "exit 3"\nlane sleep 1\nwait_lanes\necho on',
                   'lane sh -c "exit 3"\nlane true\nlane true\nwait_lanes\necho on'):
        r = lanes(script)
        assert (r.returncode, r.stdout) == (3, ''), script


def logging_python(folder):
    """A stand-in python in folder that logs each command line into folder/commands (returned) and writes what a study
    reads after it: a run's log.jsonl (--out_dir), a scoring's results.json and accuracy.png (--out)."""
    log = folder / 'commands'
    (folder / 'python').write_text(f"""#!/bin/bash
echo "$*" >> {log}
for a in "$@"; do
  case $a in
    --out_dir=*) mkdir -p "${{a#--out_dir=}}"; echo '{{}}' > "${{a#--out_dir=}}/log.jsonl" ;;
    --out=*) mkdir -p "${{a#--out=}}"; echo '{{}}' > "${{a#--out=}}/results.json"; echo png > "${{a#--out=}}/accuracy.png" ;;
  esac
done
""")
    (folder / 'python').chmod(0o755)
    return log


def test_a_design_study_trains_each_design_of_each_seed_and_reads_and_merges_the_seeds_it_was_given(tmp_path):
    """study.sh's design_study (assets/parity/reach-designs): each seed's data before any run, then for each seed each
    design's run with its settings; each design's scorings merged, its evals.md read from the logs of the seeds given
    alone (a run of another seed left in OUT would read as failing each bar: it is in no results.json), and every
    design's scorings and the recipe's merged together. Its python is a stand-in that logs each command."""
    log = logging_python(tmp_path)
    out = tmp_path / 'out'
    (out / 'raw' / 'logs').mkdir(parents=True)
    (out / 'raw' / 'logs' / 'parity-raw-s9.jsonl').write_text('{}\n')  # (another seed's run, left in OUT)
    env = {'PATH': f"{tmp_path}{os.pathsep}{os.environ['PATH']}", 'SEEDS': '1 2', 'DATA_SEEDS': '3 4', 'OUT': str(out),
           'DATA_DIR': str(tmp_path / 'data'), 'RUNS': str(tmp_path), 'CONDITIONS': 'raw alpha-il', 'RECIPE': 'R'}
    r = subprocess.run(['bash', 'assets/parity/reach-designs/run.sh'], cwd=HERE, env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    lines = log.read_text().splitlines()
    assert [l.split()[-1] for l in lines[:2]] == ['--seed=3', '--seed=4']  # (the data, before any run)
    trained = [(re.search(r'--out_dir=\S+/out-(\S+)', l)[1], re.search(r'--readout=(\w+)', l)[1],
                re.search(r'--interloop_norm=(\w+)', l)[1]) for l in lines if l.startswith('train.py ')]
    assert sorted(trained) == [('parity-alpha-il-s1', 'alpha', 'True'), ('parity-alpha-il-s2', 'alpha', 'True'),
                               ('parity-raw-s1', 'raw', 'False'), ('parity-raw-s2', 'raw', 'False')]
    assert all(t[0].endswith('-s1') for t in trained[:2])  # (the seeds the outer loop: two lanes, seed 1's runs first)
    evals = [l for l in lines if l.startswith('assets/parity/evals.py')]
    assert evals[0] == (f'assets/parity/evals.py --results={out}/raw/results.json {out}/raw/logs/parity-raw-s1.jsonl '
                        f'{out}/raw/logs/parity-raw-s2.jsonl')
    costs = [l for l in lines if l.startswith('assets/task_costs.py')]  # (its costs.md: those seeds' runs too)
    assert costs == [f'assets/task_costs.py {out}/raw --seeds=1 2', f'assets/task_costs.py {out}/alpha-il --seeds=1 2']
    merged = [l.split('--merge=')[1].split()[0].split(',') for l in lines if '--merge=' in l]
    scores = lambda *folders: [f'{f}/s{s}/results.json' for f in folders for s in (1, 2)]  # noqa: E731
    assert merged == [scores(f'{out}/raw/scores'), scores(f'{out}/alpha-il/scores'),
                      scores(f'{out}/raw/scores', f'{out}/alpha-il/scores', 'R')]
    assert not [l for l in lines if 'interventions' in l] and not (out / 'rescue').exists()  # (no seed of RESCUE_SEEDS)


def test_a_design_study_rescores_the_runs_of_the_rescue_seeds_alone_once_and_merges_those(tmp_path):
    """design_study's rescue: with RESCUE_ARGS, each design's run of each seed of RESCUE_SEEDS (and of SEEDS) scored
    again with those settings into OUT/DESIGN/rescue/s<seed>, and those scorings alone merged into OUT/rescue; run again
    into that OUT, the runs already trained, scored and rescored are left, and the rescue of a seed added is made."""
    log = logging_python(tmp_path)
    out = tmp_path / 'out'
    env = {'PATH': f"{tmp_path}{os.pathsep}{os.environ['PATH']}", 'SEEDS': '1 2', 'DATA_SEEDS': '3 4', 'OUT': str(out),
           'DATA_DIR': str(tmp_path / 'data'), 'RUNS': str(tmp_path), 'CONDITIONS': 'raw alpha-il', 'RECIPE': '',
           'RESCUE_ARGS': '--lengths=8 --interventions=clamp,cap', 'RESCUE_SEEDS': '2 7'}

    def study(**given):
        log.write_text('')
        r = subprocess.run(['bash', 'assets/parity/reach-designs/run.sh'], cwd=HERE, env={**env, **given},
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        lines = log.read_text().splitlines()
        rescued = sorted((re.search(r'--runs=(\S+)', l)[1], re.search(r'--out=(\S+)', l)[1]) for l in lines
                         if '--interventions=clamp,cap' in l)
        assert all(' --seed=3201 ' in l and l.endswith(' --lengths=8 --interventions=clamp,cap')  # (RESCUE_ARGS, alone)
                   for l in lines if '--interventions' in l)
        merged = [l.split('--merge=')[1].split()[0].split(',') for l in lines if '--merge=' in l]
        return rescued, merged, [l for l in lines if l.startswith('train.py ')]
    rescued, merged, trained = study()
    assert rescued == [(f'{tmp_path}/out-parity-{c}-s2', f'{out}/{c}/rescue/s2') for c in ('alpha-il', 'raw')]
    assert merged[-1] == [f'{out}/raw/rescue/s2/results.json', f'{out}/alpha-il/rescue/s2/results.json']
    assert len(trained) == 4 and (out / 'raw' / 'logs' / 'score-rescue-s2.log').exists()
    rescued, merged, trained = study(RESCUE_SEEDS='1 2')  # (again: seed 1 rescued now, seed 2 left as it was)
    assert trained == [] and rescued == [(f'{tmp_path}/out-parity-{c}-s1', f'{out}/{c}/rescue/s1') for c in ('alpha-il', 'raw')]
    assert merged[-1] == [f'{out}/{c}/rescue/s{s}/results.json' for c in ('raw', 'alpha-il') for s in (1, 2)]
    rescued, merged, trained = study(RESCUE_ARGS='')  # none asked: no rescue scored or merged
    assert rescued == [] and not any('/rescue/' in m for ms in merged for m in ms)


def test_a_task_study_run_again_into_its_out_keeps_the_seeds_it_scored_and_merges_them_all(tmp_path):
    """study.sh's task_seed: a study stopped part way (seed 2's scoring never written), run again into the same OUT,
    trains and scores seed 2 alone and merges both; with STORE=1 a seed scored is made anew. Its python is a stand-in
    that logs each command and writes what the study reads after it (a run's log.jsonl, a scoring's files)."""
    log = logging_python(tmp_path)
    env = {'PATH': f"{tmp_path}{os.pathsep}{os.environ['PATH']}", 'SEEDS': '1 2', 'DATA_SEEDS': '3 4',
           'OUT': str(tmp_path / 'out'), 'DATA_DIR': str(tmp_path / 'data'), 'RUNS': str(tmp_path)}

    def commands(script):
        log.write_text('')
        r = subprocess.run(['bash', '-c', script], cwd=HERE, env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        lines = log.read_text().splitlines()
        trained = sorted(re.search(r'--seed=(\d+)', l)[1] for l in lines if l.startswith('train.py '))
        scored = sorted(re.search(r'scores/s(\d+)', l)[1] for l in lines if '--runs=' in l)
        return trained, scored, [l for l in lines if '--merge=' in l]
    study = 'bash assets/addition/retries/run.sh'
    both = [f"-m beyond.tasks --merge={tmp_path}/out/scores/s1/results.json,{tmp_path}/out/scores/s2/results.json "
            f"--out={tmp_path}/out"]
    assert commands(study) == (['1', '2'], ['1', '2'], both)
    (tmp_path / 'out' / 'scores' / 's2' / 'results.json').unlink()  # (stopped before seed 2's scoring was written)
    assert commands(study) == (['2'], ['2'], both)
    (tmp_path / 'out' / 'scores' / 's2' / 'accuracy.png').unlink()  # (or before its figure)
    assert commands(study) == (['2'], ['2'], both)
    assert commands(study) == ([], [], both)  # (every seed scored: the merge alone)
    # STORE=1 (here study.sh's task_seed alone, into the same folder: assets/ untouched): a seed scored is made anew
    env['STORE'] = '1'
    one_seed = (f'set -euo pipefail\n. assets/study.sh\nOUT={tmp_path}/out PREP_ARGS= TRAIN_ARGS= TASK_ARGS= TEST_SEED=5\n'
                'task_seed addition config/addition.py 1 3')
    assert commands(one_seed) == (['1'], ['1'], [])


def test_the_late_state_study_says_the_commit_it_reruns_at_with_the_variables_given():
    """assets/parity/late ran at a commit whose train.py had late-state CE, since removed, as assets/parity-late: its
    run.sh prints how to rerun it at that commit, the one its README names, from the folder it had there, passing on
    the variables it was given."""
    env = {'PATH': os.environ['PATH'], 'SEEDS': '1001 1002', 'RUNS': '/tmp/runs'}
    r = subprocess.run(['bash', 'assets/parity/late/run.sh'], cwd=HERE, env=env, capture_output=True, text=True, timeout=60)
    commit, was = re.search(r'ran at commit (\w+), as (assets/\S+);', r.stdout).groups()
    with open(os.path.join(HERE, 'assets', 'parity', 'late', 'README.md')) as f:
        assert r.returncode == 0 and f'It ran at commit `{commit}`, as `{was}`' in f.read()
    assert f"git worktree add ../parity-late-{commit} {commit}\n" in r.stdout
    assert f"cd ../parity-late-{commit} && SEEDS='1001 1002' RUNS='/tmp/runs' bash {was}/run.sh" in r.stdout
    shallow = subprocess.run(['git', 'rev-parse', '--is-shallow-repository'], cwd=HERE, capture_output=True, text=True)
    if shallow.stdout.strip() == 'false':  # (a shallow clone has not the history)
        assert subprocess.run(['git', 'cat-file', '-e', f'{commit}:{was}/run.sh'], cwd=HERE).returncode == 0


@pytest.mark.parametrize('study', STUDIES)
def test_a_study_runs_at_a_tiny_size_and_writes_what_its_readme_says(study, studies):
    r, out = studies[0][study]
    logs = ''.join(f'\n--- {p}\n' + p.read_text()[-2000:] for p in sorted(out.glob('logs/*.log')))
    assert r.returncode == 0, f'{study}: exit {r.returncode}\n{r.stderr[-4000:]}{logs}'
    assert 'Traceback' not in r.stderr and 'error:' not in r.stderr, r.stderr[-4000:]
    names = readme_names(study)
    for name in STUDIES[study][2]:
        path = out / name
        assert path.is_file() and path.stat().st_size > 0, f'{study}: no {name}'
        assert any(n.match(name) for n in names), f'{study}: README.md does not name {name}'
        if name.endswith('.json'):
            assert json.loads(path.read_text())['runs'], name
        if name == 'tables.md':
            assert path.read_text().startswith('| run | K | ppl'), path.read_text()[:200]
        if name == 'exit_tables.md':
            assert path.read_text().startswith('Teacher-forced mean loops'), path.read_text()[:200]
        if study == 'depth' and name == 'designs.md':  # RUNS_LIST's rd1.5m3: depth_sigma 1.5, a mean of 3 loops
            assert '| random, mean 3, σ 1.5 |' in path.read_text(), path.read_text()[:400]
            assert '| random, mean 4, σ 2 |' in path.read_text(), path.read_text()[:400]  # rd2: the condition's n_loops


def test_the_scripts_write_nothing_into_assets(studies):
    _, before, after = studies
    assert after == before, sorted(set(after.items()) ^ set(before.items()))


# -----------------------------------------------------------------------------
# where a study writes: a fresh out-study-<study> in its RUNS unless OUT names a folder; assets/<study> only with STORE=1
# (assets/study.sh's study_out)

def assets_now():
    """assets/ as git sees it (`git status --porcelain`; None outside a git checkout) and every file's time."""
    status = subprocess.run(['git', 'status', '--porcelain', '--', 'assets/'], cwd=HERE, capture_output=True, text=True)
    return status.stdout if status.returncode == 0 else None, listing(os.path.join(HERE, 'assets'))


def test_a_study_given_no_out_writes_a_fresh_folder_in_runs_and_leaves_assets_as_they_are(tiny_data, tmp_path):
    before = assets_now()
    r = run_study('cpu-demo', tiny_data, tmp_path)  # no OUT, no STORE
    assert r.returncode == 0, r.stderr[-4000:]
    after = assets_now()
    assert after == before, (sorted(set(after[0].splitlines()) ^ set(before[0].splitlines())),
                             sorted(set(after[1].items()) ^ set(before[1].items())))
    out = tmp_path / 'out-study-cpu-demo'
    assert sorted(p.name for p in tmp_path.iterdir()) == ['out-norm_perloop-cpu-s1', 'out-study-cpu-demo']
    for name in STUDIES['cpu-demo'][2]:
        assert (out / name).is_file(), name


WRITES_OUT = [s for s in STUDIES if s != 'parity/late']  # (it trains nothing here: it prints how to rerun it)


@pytest.mark.parametrize('study', WRITES_OUT)
def test_a_study_refuses_a_default_folder_that_holds_anything(study, tiny_data, tmp_path):
    # a half-old folder never looks complete: one error line, before anything is written
    # (a parity step's folder is out-study-parity/<step>)
    (tmp_path / f'out-study-{study}').mkdir(parents=True)
    (tmp_path / f'out-study-{study}' / 'tables.md').write_text('an older run\n')
    r = run_study(study, tiny_data, tmp_path)
    assert_one_line_error(r, f'assets/{study}/run.sh', f'{tmp_path}/out-study-{study} is not empty: remove it, or set OUT=')
    folder = f'out-study-{study}'
    there = [folder + '/tables.md'] + [folder.rsplit('/', n)[0] for n in range(study.count('/') + 1)]
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob('*')) == sorted(there)


def study_out(study, **given):
    """study_out's OUT, in a shell with only the variables given (and the PATH)."""
    return subprocess.run(['bash', '-c', f'set -eu; . assets/study.sh; study_out {study}; echo "$OUT"'], cwd=HERE,
                          env={'PATH': os.environ['PATH'], **given}, capture_output=True, text=True, timeout=60)


def test_out_is_a_fresh_folder_in_runs_an_out_given_or_the_stored_folder_with_store(tmp_path):
    # (a-study: a name no run has used, so the repo root holds no out-study-a-study)
    assert study_out('a-study').stdout == 'out-study-a-study\n'  # RUNS unset: the repo root
    assert study_out('a-study', RUNS='.').stdout == 'out-study-a-study\n'
    assert study_out('a-study', RUNS='/r').stdout == '/r/out-study-a-study\n'
    (tmp_path / 'out-study-a-study').mkdir()  # an empty one is fresh
    assert study_out('a-study', RUNS=str(tmp_path)).stdout == f'{tmp_path}/out-study-a-study\n'
    assert study_out('a-study', OUT='here', STORE='0').stdout == 'here\n'  # an OUT given: as it is, full or not
    assert study_out('a-study', OUT=HERE).stdout == f'{HERE}\n'
    assert study_out('a-study', STORE='1').stdout == 'assets/a-study\n'


@pytest.mark.parametrize('given, says', [(dict(STORE='yes'), 'STORE=yes: set STORE=1 to write over assets/speed, or'),
                                         (dict(STORE='1', OUT='x'), 'STORE=1 and OUT=x: give one of them')])
def test_store_other_than_1_or_with_an_out_is_one_error_line(given, says):
    assert_one_line_error(study_out('speed', **given), 'assets/speed/run.sh', says)


# -----------------------------------------------------------------------------
# every study's tables.md is what its stored results render to today: re-rendered here from the results files
# (python -m beyond.eval_decode --from_results, without the figures), so a rerun that was not re-rendered, or a
# change to a table's code, fails until tables.md is written again

ASSETS = os.path.join(HERE, 'assets')


def sources(folder):
    """The results a study's tables.md renders: its results.json, or the parts it merged."""
    one = os.path.join(folder, 'results.json')
    parts = sorted(glob.glob(os.path.join(folder, 'results-*.json')))
    return ','.join(parts) if parts else one


TABLES = sorted(os.path.relpath(os.path.dirname(p), ASSETS) for p in glob.glob(os.path.join(ASSETS, '**', 'tables.md'),
                                                                               recursive=True)
                 if glob.glob(os.path.join(os.path.dirname(p), 'results*.json')))  # (cpu-long/calibrated too)


def rendered(folder):
    runs, groups, _ = eval_depth.from_results(sources(folder), [])
    return eval_depth.render(groups, runs, [DecodingStudies()])


def test_every_study_with_results_is_here():
    assert {'cpu-demo', 'cpu-long', 'cpu-long/calibrated', 'cpu-44m', 'cpu-long-more', 'depth', 'cpu-long-exits'} <= set(TABLES)


@pytest.mark.parametrize('study', TABLES)
def test_tables_md_is_its_results_rendered(study):
    folder = os.path.join(ASSETS, study)
    with open(os.path.join(folder, 'tables.md')) as f:
        stored = f.read()
    assert rendered(folder) == stored, (
        f"assets/{study}/tables.md is not what its results render to: write it again with "
        f"python -m beyond.eval_decode --from_results {os.path.relpath(sources(folder), HERE)} --out /tmp/x "
        f"> assets/{study}/tables.md")


def test_the_command_named_prints_tables_md_to_its_last_byte(tmp_path, monkeypatch, capsys):
    # the command the failure above names, redirected into tables.md, writes the file stored: no line
    # more at its end (the figures it also draws are not read here)
    folder = os.path.join(ASSETS, 'cpu-long-speculative')
    monkeypatch.setattr(eval_depth, 'all_plots', lambda *args, **kwargs: [])
    eval_decode.main(['--from_results', sources(folder), '--out', str(tmp_path)])
    with open(os.path.join(folder, 'tables.md')) as f:
        assert capsys.readouterr().out == f.read()


def test_a_changed_number_fails(tmp_path):
    # the comparison sees one digit: a results.json whose first ppl moved renders another table
    import json
    folder = os.path.join(ASSETS, 'cpu-long-speculative')
    results = json.load(open(os.path.join(folder, 'results.json')))
    results['groups'][0]['mean']['per_K'][0]['ppl'] *= 1.001
    (tmp_path / 'results.json').write_text(json.dumps(results))
    assert rendered(str(tmp_path)) != rendered(folder)


# -----------------------------------------------------------------------------
# assets/parity/rules.py, the rules the parity studies pick a checkpoint by

def test_the_rules_keep_the_earliest_best_evaluation_over_every_one_or_every_nth(tmp_path):
    # assets/parity/rules.py's picks, from a run's log.jsonl (an evaluation every 25 steps): each rule's lowest,
    # the earliest of equals; --every N the probe's rule over the evaluations at multiples of N only
    import runpy
    rules = runpy.run_path(f'{HERE}/assets/parity/rules.py')
    errors = {25: 0.5, 50: 0.3, 75: 0.0, 100: 0.2, 125: 0.0, 150: 0.1, 175: 0.0, 200: 0.1}
    losses = {25: 0.9, 50: 0.4, 75: 0.6, 100: 0.4, 125: 0.7, 150: 0.8, 175: 0.5, 200: 0.6}
    with open(tmp_path / 'log.jsonl', 'w') as f:
        for it, err in errors.items():
            f.write(json.dumps(dict(kind='eval', iter=it, val_loss=[9.0, losses[it]], select=dict(
                probe_error=err, probe_disagreement=1 - err, probe_turn=it / 1000))) + '\n')
            torch.save(dict(model_args=dict(n_loops=2)), tmp_path / f'ckpt-{it}.pt')
    got = rules['picks'](str(tmp_path), [50, 100])
    assert got == {'val_loss': 50, 'probe_error': 75, 'probe_disagreement': 25, 'probe_turn': 25, 'last': 200,
                   'probe_error, every 50 steps': 150, 'probe_error, every 100 steps': 200}
    for steps in (30, 400):  # not a multiple of the logged 25; no evaluation at a multiple of 400
        with pytest.raises(UserError, match=rf'^--every {steps}: .* evaluated every 25 steps, and {steps} is not a '
                                            r'multiple of that with an evaluation at it$'):
            rules['picks'](str(tmp_path), [steps])


# -----------------------------------------------------------------------------
# assets/parity/evals.py, what the probe saw in a parity study's runs, and the parity studies' stored tables: each is
# what its printer prints on the stored results (accuracy.md: python -m beyond.tasks --merge of its results.json)

PARITY = sorted(os.path.relpath(os.path.dirname(p), ASSETS) for p in glob.glob(os.path.join(ASSETS, 'parity', '**',
                                                                                             'accuracy.md'), recursive=True))
EVALS = sorted(os.path.relpath(os.path.dirname(p), ASSETS) for p in glob.glob(os.path.join(ASSETS, 'parity', '*', 'evals.md')))


def test_agree_py_sets_the_fast_path_beside_the_full_pass_and_names_the_largest_difference(tmp_path, capsys):
    import runpy
    main = runpy.run_path(os.path.join(ASSETS, 'parity', 'deep', 'agree.py'))['main']
    def results(path, exact, accuracy, extra=()):  # one run, 8 bits, K = 2 and 4 (and extra rows)
        rows = [dict(run='r/out-parity-s1', length=8, K=k, intervention='none', exact=e, accuracy=a)
                for k, e, a in zip((2, 4), exact, accuracy)] + list(extra)
        path.write_text(json.dumps(dict(results=rows)))
        return str(path)
    cap = dict(run='r/out-parity-s1', length=8, K=4, intervention='cap', exact=0.0, accuracy=0.0)  # (not compared)
    halted = results(tmp_path / 'h.json', (0.25, 1.0), (0.5, 1.0), [cap])
    full = results(tmp_path / 'f.json', (0.25, 0.96875), (0.5, 0.99), [dict(cap, K=6)])
    main([halted, full])
    out = capsys.readouterr().out.splitlines()
    assert out[2:4] == ['| out-parity-s1 | 8 | 2 | 25.0% | 25.0% | 50.000% | 50.000% |',
                        '| out-parity-s1 | 8 | 4 | 100.0% | 96.9% | 100.000% | 99.000% |']
    assert out[-1] == '2 (length, K) read both ways: the largest difference in exact match 3.12 points, in per-bit accuracy 1.0000 points'
    for args, says in (([halted], 'give two results.json'), ([halted, str(tmp_path / 'none.json')], 'none.json: not a'),
                       ([halted, results(tmp_path / 'o.json', (), (), [dict(cap, intervention='none', K=9)])], 'share no run')):
        with pytest.raises(SystemExit) as e:
            main(args)
        assert str(e.value.code).startswith('agree.py: error:') and says in str(e.value.code), e.value.code


@functools.lru_cache(maxsize=None)
def evals_py():
    import runpy
    return runpy.run_path(os.path.join(ASSETS, 'parity', 'evals.py'))


def evals(name, *args):
    """assets/parity/evals.py's function name, called with args."""
    return evals_py()[name](*args)


@pytest.mark.parametrize('study', PARITY)
def test_a_parity_accuracy_md_is_its_results_tabled(study, tmp_path, monkeypatch, capsys):
    from beyond import tasks
    monkeypatch.setattr(tasks, 'plot', lambda *args: None)
    tasks.main([f'--merge={ASSETS}/{study}/results.json', f'--out={tmp_path}'])
    with open(os.path.join(ASSETS, study, 'accuracy.md')) as f:
        assert capsys.readouterr().out == f.read(), f'python -m beyond.tasks --merge=assets/{study}/results.json ' \
                                                    f'--out=/tmp/x > assets/{study}/accuracy.md'


DESIGNS = sorted(os.path.relpath(os.path.dirname(p), ASSETS)  # (each design's folder of a design_study: study.sh)
                 for p in glob.glob(os.path.join(ASSETS, '*', 'reach-designs', '*', 'evals.md')))


@pytest.mark.parametrize('study,runs', [(study, 'parity-s*' if study == 'parity/reach' else 'parity-norm-il-s*') for study in EVALS]
                         + [('addition/retries', 'addition-s*'), ('addition/reach', 'addition-s*')]
                         + [(d, f"{d.split('/')[0]}-{d.split('/')[-1]}-s*") for d in DESIGNS])
def test_a_studys_evals_md_is_what_evals_py_prints_on_its_stored_logs(study, runs):
    assert len(EVALS) == 5 and len(PARITY) == 17  # (seeds, new-seeds, screen, inits, reach; those and designs, its two,
                                                  # late, deep, reach's bf16, reach-designs, its four designs and rescue)
    assert len(DESIGNS) == 4  # (parity/reach-designs' norm, raw, raw-il, alpha-il)
    logs = sorted(glob.glob(os.path.join(ASSETS, study, 'logs', f'{runs}.jsonl')))
    with open(os.path.join(ASSETS, study, 'results.json')) as f:
        scored = {r['run'] for r in json.load(f)['results']}
    assert len(logs) == (len(scored) if 'reach-designs' in study else 10) and len(logs) >= 2  # (every run scored)
    with open(os.path.join(ASSETS, study, 'evals.md')) as f:
        assert evals('table', logs, os.path.join(ASSETS, study, 'results.json')) == f.read(), (
            f'python assets/parity/evals.py --results=assets/{study}/results.json assets/{study}/logs/{runs}.jsonl '
            f'> assets/{study}/evals.md')


def test_evals_counts_each_runs_probe_evaluations_by_initialization_and_keeps_the_earliest_lowest(tmp_path):
    # run a: two initializations (a fresh start at 100), screened; run b: one, its screen never passed
    def run(name, records, fresh=()):
        with open(tmp_path / f'{name}.jsonl', 'w') as f:
            f.write(json.dumps(dict(kind='eval', iter=0, select=dict(probe_error=0.0, screen_error=0.0))) + '\n')  # (no checkpoint)
            for it, probe, screen in records:
                f.write(json.dumps(dict(kind='train', iter=it, loss=1.0)) + '\n')
                f.write(json.dumps(dict(kind='eval', iter=it, select=dict(probe_error=probe, screen_error=screen))) + '\n')
        (tmp_path / f'{name}.log').write_text(''.join(f'initialization 2 of 2: a fresh start at iteration {i}\n' for i in fresh))
        return str(tmp_path / f'{name}.jsonl')
    a = run('parity-x-s1', [(50, 0.0, 0.0), (100, 0.0, 0.0), (150, 0.5, 0.0), (200, 0.0, 0.0), (250, 1.25, 0.25)], fresh=[100])
    b = run('parity-x-s2', [(50, 1.5, 0.5), (100, 1.25, 0.25), (150, 1.25, 0.25)])
    with open(tmp_path / 'results.json', 'w') as f:
        json.dump(dict(shares=[dict(design='out-parity-x', length=32, intervention='none', passed_runs=['/r/out-parity-x-s1']),
                               dict(design='out-parity-x', length=32, intervention='cap', passed_runs=['/r/out-parity-x-s2']),
                               dict(design='out-parity-x', length=64, intervention='none', passed_runs=[])]), f)
    lines = evals('table', [a, b], str(tmp_path / 'results.json')).splitlines()
    assert lines[2] == '| out-parity-x-s1 | 5 | 4 | 2+1 | 200 | 50: 0.0% (1st) | pass | fail |'  # (100: the first's, before the start)
    assert lines[3] == '| out-parity-x-s2 | 3 | 0 | 0 | - | 100: screen 25.0% | fail | fail |'  # (the cap's pass: not a verdict)
    assert lines[4] == '| **2 runs** | **8** | **4** | **1/2 runs, 2/3 initializations** | **200** | **1/2 at 0.0%** | **1/2** | **0/2** |'
    assert lines[6] == ('Kept a checkpoint with every probe string right: 1 of 2 runs, 0 of them passing every bar; of the 1 '
                        'that kept none, 0 pass every bar.')
    assert evals('table', [b]).splitlines()[2].endswith('| - | - |')  # no results.json: no verdicts, and no line


def test_evals_of_long_probe_runs_count_the_whole_probe_apart_and_name_the_read_a_kept_error_failed(tmp_path):
    # beyond.tasks.long_probe logs whole_error beside probe_error (its reach read's error past the probe, else 1 + the
    # screened probe's, the screen's failure 2 + the screen's): a column for the whole probe, every read right counted
    # where the reach read passed, and the kept error named by the read that failed
    def run(name, records):
        with open(tmp_path / f'{name}.jsonl', 'w') as f:
            for it, probe, screen, whole in records:
                f.write(json.dumps(dict(kind='eval', iter=it, select=dict(probe_error=probe, screen_error=screen,
                                                                          whole_error=whole))) + '\n')
        return str(tmp_path / f'{name}.jsonl')
    a = run('addition-s1', [(100, 2.5, 0.5, 1.5), (200, 0.25, 0.0, 0.0), (300, 1.125, 0.0, 0.125), (400, 0.0, 0.0, 0.0)])
    b = run('addition-s2', [(100, 2.5, 0.5, 1.5), (200, 1.125, 0.0, 0.125), (300, 0.0625, 0.0, 0.0)])
    c = run('addition-s3', [(100, 2.5, 0.5, 1.5), (200, 1.125, 0.0, 0.125)])
    d = run('addition-s4', [(100, 2.5, 0.5, 1.5), (200, 2.25, 0.25, 1.25)])
    lines = evals('table', [a, b, c, d]).splitlines()
    assert lines[0].startswith('| run | evaluations | past the screen | past the probe | every read right, by initialization | '
                               'last step with every read right | kept: step, probe error |')
    assert lines[2:6] == ['| out-addition-s1 | 4 | 3 | 2 | 1 | 400 | 400: 0.0% | - | - |',
                          '| out-addition-s2 | 3 | 2 | 1 | 0 | - | 300: reach 6.2% | - | - |',
                          '| out-addition-s3 | 2 | 1 | 0 | 0 | - | 200: probe 12.5% | - | - |',
                          '| out-addition-s4 | 2 | 0 | 0 | 0 | - | 200: screen 25.0% | - | - |']
    assert lines[6].startswith('| **4 runs** | **11** | **6** | **3** | **1/4 runs, 1/4 initializations** | **400** | **1/4 at 0.0%** |')


@pytest.mark.parametrize('study', ['parity/reach', 'addition/reach'] + DESIGNS)
def test_a_task_studys_costs_md_is_what_task_costs_py_prints_on_its_stored_logs(study):
    r = subprocess.run([sys.executable, 'assets/task_costs.py', f'assets/{study}'], cwd=HERE, capture_output=True,
                       text=True, timeout=60)
    with open(os.path.join(ASSETS, study, 'costs.md')) as f:
        assert (r.returncode, r.stdout) == (0, f.read()), f'python assets/task_costs.py assets/{study} > assets/{study}/costs.md'


def test_task_costs_tables_each_runs_wall_seconds_and_their_median_and_largest(tmp_path):
    # assets/task_costs.py: a run a row (its training's .wall, its scoring's, bfloat16's where any run has one), the
    # median and the largest of each column; a scoring not timed shows '-' and counts in neither
    logs = tmp_path / 'logs'
    logs.mkdir()
    walls = {'parity-s3.wall': '10.04', 'parity-s1.wall': '30.0', 'parity-s2.wall': '20.0', 'score-s1.wall': '5.0',
             'score-s2.wall': '7.0', 'score-bf16-s3.wall': '1.25', 'prepare-1.log': 'x'}
    for name, text in walls.items():
        (logs / name).write_text(text + '\n')
    run = lambda *a: subprocess.run([sys.executable, 'assets/task_costs.py', *a], cwd=HERE, capture_output=True,  # noqa: E731
                                    text=True, timeout=60)
    r = run(str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        '| run | training, s | scoring, s | scoring in bfloat16, s |', '|---|---|---|---|',
        '| out-parity-s1 | 30.0 | 5.0 | - |', '| out-parity-s2 | 20.0 | 7.0 | - |', '| out-parity-s3 | 10.0 | - | 1.2 |',
        '| **3 runs** | **median 20.0, largest 30.0** | **median 6.0, largest 7.0** | **median 1.2, largest 1.2** |']
    # --seeds: those seeds' runs alone (study.sh passes the seeds it merged: a run of another seed banked in OUT is not
    # in its results), the summary over them; comma or space between; a seed with no run, or not a number: one line
    for seeds in ('3,1', '1 3', ' 3, 1 '):
        assert run(str(tmp_path), f'--seeds={seeds}').stdout.splitlines()[2:] == [
            '| out-parity-s1 | 30.0 | 5.0 | - |', '| out-parity-s3 | 10.0 | - | 1.2 |',
            '| **2 runs** | **median 20.0, largest 30.0** | **median 5.0, largest 5.0** | **median 1.2, largest 1.2** |']
    assert run(str(tmp_path), '--seeds=2').stdout.splitlines()[0] == '| run | training, s | scoring, s |'  # (s3's bf16 out)
    assert_one_line_error(run(str(tmp_path), '--seeds=1,4'), 'task_costs.py', 'no run of seed 4')
    assert_one_line_error(run(str(tmp_path), '--seeds=1,x'), 'task_costs.py', '--seeds')
    (logs / 'score-bf16-s3.wall').unlink()  # (no run scored in bfloat16: no column)
    assert run(str(tmp_path)).stdout.splitlines()[0] == '| run | training, s | scoring, s |'
    (logs / 'score-s2.wall').write_text('')  # a timer that never wrote: one line, no table
    assert_one_line_error(run(str(tmp_path)), 'task_costs.py', 'score-s2.wall')
    assert_one_line_error(run(str(tmp_path / 'nowhere')), 'task_costs.py', "not a task study's OUT")


def test_evals_given_a_run_without_a_probe_is_one_error_line(tmp_path):
    (tmp_path / 'x.jsonl').write_text(json.dumps(dict(kind='eval', iter=50, val_loss=[1.0], select={})) + '\n')
    r = subprocess.run([sys.executable, 'assets/parity/evals.py', str(tmp_path / 'x.jsonl')], cwd=HERE, capture_output=True,
                       text=True, timeout=60)
    assert_one_line_error(r, 'evals.py', 'no evaluation logs a probe_error')


# -----------------------------------------------------------------------------
# each parity study's run.sh, with its defaults, makes the runs it stored: the probe its data had, the steps between
# evaluations and the select its runs logged, and the training (initializations, learning rate schedule) they ran

def logged_training(study, design='norm-il'):
    """(the initializations, the learning rate schedule) a study's stored runs of design trained with, one for all:
    one more than the fresh starts each run's output names, and a constant rate where the rate its train records
    report never changes."""
    found = set()
    for log in glob.glob(os.path.join(ASSETS, study, 'logs', f'parity-{design}-s*.jsonl')):
        with open(log) as f:
            rates = {r['lr'] for r in map(json.loads, f) if r['kind'] == 'train'}
        found.add((1 + len(evals('fresh_starts', log)), 'constant' if len(rates) == 1 else 'cosine'))
    assert len(found) == 1, (study, design, found)
    return found.pop()


def logged_iterations(study, design='norm-il'):
    """(the iterations, the stop_score) a study's stored runs of design trained with, one for all: the iterations
    each run's train.py output announces, and -1 (never stopped) where none says the kept score ended it."""
    found = set()
    for log in glob.glob(os.path.join(ASSETS, study, 'logs', f'parity-{design}-s*.log')):
        with open(log) as f:
            out = f.read()
        found |= {(int(n.replace(',', '')), '-1' if 'the run ends here' not in out else '?')
                  for n in re.findall(r'([\d,]+) iterations\n', out)}
    assert len(found) == 1, (study, design, found)
    return found.pop()


def logged_probe(study):
    """(the probe's string length its prepare.log wrote, the steps between the evaluations of its norm-il runs, the
    select that logged them: beyond.tasks.screened_probe logs a screen_error, probe does not), one for all."""
    with open(os.path.join(ASSETS, study, 'logs', 'prepare.log')) as f:
        n, = {int(m) for m in re.findall(r'probe: [\d,]+ strings of (\d+)-\1 bits', f.read())}
    found = set()
    for log in glob.glob(os.path.join(ASSETS, study, 'logs', 'parity-norm-il-s*.jsonl')):
        e = evals('evaluations', log)
        found |= {(n, b[0] - a[0], 'beyond.tasks.' + ('probe' if a[2] is None else 'screened_probe')) for a, b in zip(e, e[1:])}
    assert len(found) == 1, (study, found)
    return found.pop()


def run_sh(study, pattern):
    """pattern's groups in assets/<study>/run.sh: what it passes to train.py (numbers as ints)."""
    with open(os.path.join(ASSETS, study, 'run.sh')) as f:
        return tuple(int(g) if g.isdigit() else g for g in re.search(pattern, f.read(), re.S).groups())


def test_each_parity_study_script_makes_the_probe_evaluations_and_training_its_runs_logged():
    import runpy
    from beyond.parity import SPLITS
    cfg = runpy.run_path(os.path.join(HERE, 'config', 'parity.py'))
    n, = [int(length) for split, _, length in SPLITS if split == 'probe']  # beyond.parity's default probe
    # the probe and evaluations: the seed study's 24-bit probe every 50 steps, the new seeds' whole 48-bit probe every
    # 100, the screen's and the recipe's (config/parity.py's) screened probe every 50
    assert logged_probe('parity/seeds') == run_sh('parity/seeds', r'PREP_ARGS:---seed=2001 --probe_lengths=(\d+)\}.*'
                                                   r'TRAIN_ARGS:---eval_interval=(\d+) --select=(\S+) ') == (24, 50, 'beyond.tasks.probe')
    assert logged_probe('parity/new-seeds') == (n, *run_sh('parity/new-seeds', r'TRAIN_ARGS="--eval_interval=(\d+) --select=(\S+) '))
    assert logged_probe('parity/screen') == (n, *run_sh('parity/screen', r'RECIPE="--eval_interval=(\d+) --select=(\S+) '))
    assert logged_probe('parity/inits') == (n, cfg['eval_interval'], *run_sh('parity/inits', r'RECIPE:---select=(\S+) ')) == (
        48, 50, 'beyond.tasks.screened_probe')
    for study in ('parity/new-seeds', 'parity/screen', 'parity/inits'):
        assert 'probe_lengths' not in run_sh(study, r'PREP_ARGS:-([^}]*)\}')[0], study
    # the training: one initialization at a cosine rate before the recipe's two, as each script pins it
    # and the 3,000 steps they ran (config/parity.py's max_iters since is 6,000), to the end (no stop_score)
    pinned = {'parity/seeds': r'--select=beyond.tasks.probe --inits=(\d+) --lr_decay=(\w+) --max_iters=(\d+) --stop_score=(\S+)\}',
              'parity/new-seeds': r'TRAIN_ARGS="[^"]*--inits=(\d+) --lr_decay=(\w+) --max_iters=(\d+) --stop_score=(\S+) ',
              'parity/screen': r'RECIPE="[^"]*--inits=(\d+) --lr_decay=(\w+) --max_iters=(\d+) --stop_score=(\S+)"',
              'parity/screen-tuning': r'screened_probe --eval_interval=25 --inits=(\d+) --lr_decay=(\w+) --max_iters=(\d+) '
                                      r'--stop_score=(\S+) ',
              'parity/designs': r'RULE:---select= --eval_interval=250 --inits=(\d+) --lr_decay=(\w+) --max_iters=(\d+) '
                                r'--stop_score=(\S+)\}'}
    for study, pattern in pinned.items():
        assert (*logged_training(study), *logged_iterations(study)) == run_sh(study, pattern) == (1, 'cosine', 3000, '-1'), study
    assert logged_training('parity/late', 'norm-il-late') == (1, 'cosine')  # (it reruns only at its commit: its logs)
    # the recipe as it ran, pinned (config/parity.py reads further since): two initializations, the config's rate
    with open(os.path.join(ASSETS, 'parity', 'inits', 'run.sh')) as f:
        assert not re.search(r'--lr_decay', f.read())
    assert logged_training('parity/inits') == (*run_sh('parity/inits', r'RECIPE:-[^}]*--inits=(\d+) '), cfg['lr_decay']) == (
        2, 'constant')
    # the tuning: each variant's runs trained as run.sh names them
    variants = re.findall(r'"(\w+) (\d+) (\w+)"', run_sh('parity/inits-tuning', r'VARIANTS=\(([^)]*)\)')[0])
    assert [v[0] for v in variants] == ['const', 'i3cos', 'i3con', 'i2con']
    for name, inits, decay in variants:
        assert logged_training('parity/inits-tuning', name) == (int(inits), decay), name


# -----------------------------------------------------------------------------
# assets/study_times.py, how long each study took (assets/README.md's times table): printed from the stored records,
# embedded as printed, and its rule recomputed here by hand on a fake study

def study_times(*args):
    return subprocess.run([sys.executable, 'assets/study_times.py', *args], cwd=HERE, capture_output=True, text=True,
                          timeout=60)


def test_study_times_md_is_what_the_script_prints_on_the_stored_records():
    late = re.search(r'(?m)^AT=(\w+)\b', open(os.path.join(ASSETS, 'parity', 'late', 'run.sh')).read())[1]
    if subprocess.run(['git', 'cat-file', '-e', f'{late}^{{commit}}'], cwd=HERE, capture_output=True).returncode:
        pytest.skip(f'parity/late ran at {late}, which this clone does not hold (a shallow clone): its time is read there')
    r = study_times()
    with open(os.path.join(ASSETS, 'study_times.md')) as f:
        assert r.returncode == 0 and r.stdout == f.read(), (
            f'{r.stderr}assets/study_times.md is not what the records give: python assets/study_times.py --out '
            'assets/study_times.md')


def test_the_readme_embeds_a_run_of_study_times_md_lines():
    with open(os.path.join(ASSETS, 'README.md')) as f:
        block = re.search(r'^<!-- printed by python assets/study_times.py: assets/study_times.md -->\n(.*?)^<!-- end -->$',
                          f.read(), re.M | re.S)[1].splitlines()
    with open(os.path.join(ASSETS, 'study_times.md')) as f:
        lines = f.read().splitlines()
    assert block and any(lines[i:i + len(block)] == block for i in range(len(lines) - len(block) + 1)), block


def test_a_study_time_is_its_runs_training_over_the_runs_at_once_plus_its_timed_runs(tmp_path):
    # a fake study whose run.sh trains fake-s1 and fake-s2 in study.sh's lanes (two at once) and times a run alone;
    # other-s1.jsonl is a log that run.sh does not train (as cpu-long-exits keeps cpu-long's runs' logs): not counted
    (tmp_path / 'study.sh').write_text('lane() { "$@" & lanes+=($!); if [ ${#lanes[@]} = 2 ]; then wait_lanes; fi; }\n')
    fake = tmp_path / 'fake'
    (fake / 'logs').mkdir(parents=True)
    (fake / 'run.sh').write_text('. assets/study.sh\nfor s in 1 2; do\n  lane train "fake-s$s" config/x.py --seed=$s  '
                                 '# two at once\ndone\nwait_lanes\ntimed_train timed fake-timed config/x.py\n')

    def log(name, records):  # (iter, ms_per_iter) of each train record, an eval record first
        lines = [dict(kind='eval', iter=0, val_loss=[9.0])] + [dict(kind='train', iter=i, ms_per_iter=ms) for i, ms in records]
        (fake / 'logs' / name).write_text(''.join(json.dumps(r) + '\n' for r in lines))
    log('fake-s1.jsonl', [(50, 600.0), (100, 1198.0)])  # 50 x 0.6 s + 50 x 1.198 s = 89.9 s
    log('fake-s2.jsonl', [(100, 300.0)])                # 100 x 0.3 s = 30 s
    log('other-s1.jsonl', [(100, 9000.0)])
    (fake / 'logs' / 'timed.seconds').write_text('30.0\n')
    seconds = (89.9 + 30) / 2 + 30.0                    # two at once, then the timed run: 89.95 s
    minutes = math.floor(seconds / 60 * 10) / 10        # 1.499 min: 1.4, rounded down (a lower bound)
    r = study_times('--assets', str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[2].split(' | ')[:2] == ['| fake', f'≥ {minutes:.1f} min'] == ['| fake', '≥ 1.4 min']
    assert 'the 2 runs run.sh trains (`logs/fake-s*`), 2 at a time; plus `logs/timed.seconds`' in r.stdout


def test_a_design_study_time_is_its_designs_runs_training_over_the_two_lanes(tmp_path):
    # study.sh's design_study writes each design's runs into OUT/<design>/logs/<task>-<design>-s<seed>.jsonl, a run a
    # lane; a log of another task in a design's folder is not one run.sh trains
    (tmp_path / 'study.sh').write_text('lane() { "$@" & lanes+=($!); if [ ${#lanes[@]} = 2 ]; then wait_lanes; fi; }\n')
    study = tmp_path / 'designs'
    study.mkdir()
    (study / 'run.sh').write_text('. assets/study.sh\ndesign_study designs parity config/parity.py\n')
    for design, ms in (('raw', 600.0), ('alpha-il', 300.0), ('raw', 900.0)):
        (study / design / 'logs').mkdir(parents=True, exist_ok=True)
        seed = len(list((study / design / 'logs').iterdir())) + 1
        (study / design / 'logs' / f'parity-{design}-s{seed}.jsonl').write_text(
            json.dumps(dict(kind='train', iter=100, ms_per_iter=ms)) + '\n')
    (study / 'raw' / 'logs' / 'addition-raw-s1.jsonl').write_text(json.dumps(dict(kind='train', iter=100, ms_per_iter=9e4)) + '\n')
    seconds = (60 + 30 + 90) / 2  # 100 iterations each at 0.6, 0.3 and 0.9 s, two at once: 90 s, 1.5 min
    r = study_times('--assets', str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[2].split(' | ')[:2] == ['| designs', f'≥ {seconds / 60:.1f} min'] == ['| designs', '≥ 1.5 min']
    assert 'the 3 runs run.sh trains (`*/logs/parity-*-s*`), 2 at a time' in r.stdout


def test_study_times_given_a_missing_folder_is_one_error_line(tmp_path):
    assert_one_line_error(study_times('--assets', str(tmp_path / 'none')), 'assets/study_times.py', 'none: no such folder')
