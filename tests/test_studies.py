"""
Every study's script, assets/<study>/run.sh, run as a user runs it (`bash assets/<study>/run.sh`)
at a tiny size: tiny byte data, tiny shapes, two iterations, one seed; each must exit 0 and write
what its README.md says it writes. The studies that read another study's runs get tiny ones made
here once (in-process). beyond.exit_tables and beyond.depth_costs run in-process on tiny inputs.

    python -m pytest -q tests/test_studies.py

The scripts start some fifty Python processes; their `python` is conftest's stand-in (stand_in_python),
which forks each from a server that imported torch once. STUDIES_PYTHON=real gives the scripts the
real interpreter instead (minutes).
"""

import json
import os
import re
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import HERE, TINY, stand_in_python, train_in_process

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
# the runs other studies read, as assets/cpu-demo and assets/cpu-long name them
SHARED = {'raw_perloop-cpu-s1': ['--readout=raw'], 'norm_perloop-cpu-s1': [],
          **{f'{c}-cpu-long-s1': extra for c, extra in (('norm_perloop', []), ('raw_perloop', ['--readout=raw']),
                                                        ('penalty_perloop', ['--norm_penalty=0.01']),
                                                        ('finalnorm_perloop', ['--readout=final_norm']))}}
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
    'tasks': (dict(CONDITIONS='norm-il raw-pen', PREP_ARGS='--train_rows=512 --val_rows=64 --test_rows=64',
                   TASK_ARGS='--lengths=8,16 --loops=2,4 --rows=16 --interventions=clamp,cap'), False,
              ['results.json', 'accuracy.md', 'accuracy.png', 'logs/parity-norm-il-s1.log', 'logs/parity-norm-il-s1.jsonl',
               'logs/parity-raw-pen-s1.log', 'logs/parity-raw-pen-s1.jsonl',
               'logs/prepare.log']),
    'parity-seeds': (dict(CONDITIONS='norm-il raw', PREP_ARGS='--seed=2001 --train_rows=512 --val_rows=64 --test_rows=64 '
                                                             '--probe_rows=16 --probe_lengths=3',
                          TASK_ARGS='--rows=16', LOOPS='2,4'), False,
                     ['accuracy.md', 'results.json', 'accuracy.png', 'rules.md', 'scores/norm-il-32/results.json',
                      'scores/raw-64/results.json', 'logs/parity-norm-il-s1.log', 'logs/parity-raw-s1.jsonl',
                      'logs/score-norm-il-32.log', 'logs/prepare.log', 'logs/timed.seconds']),
    'parity-late': (dict(PREP_ARGS='--seed=2001 --train_rows=512 --val_rows=64 --test_rows=64 --probe_rows=16 '
                                '--probe_lengths=3', TASK_ARGS='--rows=16', LOOPS='2,4'), False,
                    ['accuracy.md', 'results.json', 'accuracy.png', 'rules.md', 'scores/norm-il-late-32/results.json',
                     'scores/norm-il-late-64/results.json', 'logs/parity-norm-il-late-s1.log',
                     'logs/parity-norm-il-late-s1.jsonl', 'logs/timed.seconds', 'logs/timed.log']),
    'parity-new-seeds': (dict(PREP_ARGS='--seed=2002 --train_rows=512 --val_rows=64 --test_rows=64 --probe_rows=16 '
                                     '--probe_lengths=3', TASK_ARGS='--rows=16', LOOPS='2,4'), False,
                         ['accuracy.md', 'results.json', 'accuracy.png', 'rules.md', 'scores/norm-il-32/results.json',
                          'scores/norm-il-64/results.json', 'logs/parity-norm-il-s1.log', 'logs/parity-norm-il-s1.jsonl',
                          'logs/timed.seconds', 'logs/timed.log']),
    'parity-screen': (dict(PREP_ARGS='--seed=2003 --train_rows=512 --val_rows=64 --test_rows=64 --probe_rows=16 '
                                  '--probe_lengths=3', TASK_ARGS='--rows=16', LOOPS='2,4', RULES_ARGS='--every=2'), False,
                      ['accuracy.md', 'results.json', 'accuracy.png', 'rules.md', 'rules-64.md',
                       'scores/norm-il-32/results.json', 'scores/norm-il-64/results.json', 'logs/parity-norm-il-s1.log',
                       'logs/parity-norm-il-s1.jsonl', 'logs/timed.seconds', 'logs/timed.log', 'logs/beside.seconds',
                       'logs/beside-screened.log', 'logs/beside-whole.log']),
    'parity-screen-tuning': (dict(PREP_ARGS='--seed=100 --train_rows=512 --val_rows=64 --test_rows=64 --probe_rows=16 '
                                         '--probe_lengths=3', TASK_ARGS='--rows=16', LOOPS='2,4', EVERY='2'), False,
                             ['rules.md', 'rules-64.md', 'logs/parity-norm-il-s1.log', 'logs/parity-norm-il-s1.jsonl',
                              'logs/prepare.log']),
    'parity-inits': (dict(PREP_ARGS='--seed=2004 --train_rows=512 --val_rows=64 --test_rows=64 --probe_rows=16 '
                                 '--probe_lengths=3', TASK_ARGS='--rows=16', LOOPS='2,4'), False,
                     ['accuracy.md', 'results.json', 'accuracy.png', 'rules.md', 'rules-64.md',
                      'scores/norm-il-32/results.json', 'scores/norm-il-64/results.json', 'logs/parity-norm-il-s1.log',
                      'logs/parity-norm-il-s1.jsonl', 'logs/timed.seconds', 'logs/timed.log']),
    # (seed 101: the baseline row reads that seed's stored log, assets/parity-screen-tuning's; its data, parity-100, is
    # parity-screen-tuning's, made there; three iterations: one for each of three initializations)
    'parity-inits-tuning': (dict(PREP_ARGS='--seed=100 --train_rows=512 --val_rows=64 --test_rows=64 --probe_rows=16 '
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

class SharedRuns:
    """The CPU demo's and the 4-epoch study's runs that other studies read, trained tiny and
    in-process on first use (from any thread: the first studies run meanwhile)."""

    def __init__(self, root, data_dir):
        self.root, self.data_dir, self.lock, self.trained = root, data_dir, threading.Lock(), False

    def folder(self):
        with self.lock:
            if not self.trained:
                for name, extra in SHARED.items():
                    train_in_process(self.data_dir, self.root / f'out-{name}', '--max_iters=2', '--eval_interval=1',
                                     *extra)
                self.trained = True
        return self.root


@pytest.fixture(scope='session')
def shared_runs(tiny_data, tmp_path_factory):
    return SharedRuns(tmp_path_factory.mktemp('shared-runs'), tiny_data)


@pytest.fixture(scope='session')
def studies(tiny_data, shared_runs, tmp_path_factory):
    """Every study's run.sh, two at a time (the shared runs train in one lane while the first
    study runs): study -> (its CompletedProcess, its OUT), and the files of assets/ (with their
    times) before and after."""
    root = tmp_path_factory.mktemp('studies')
    bin_folder = stand_in_python().parent

    def run(study):
        settings, reads, _ = STUDIES[study]
        runs = shared.result() if reads else root / f'{study}-runs'
        env = {**os.environ, **SETTINGS, 'SEEDS': '1', 'DATA_DIR': str(tiny_data), 'RUNS': str(runs),
               'OUT': str(root / study), **settings, 'PATH': f"{bin_folder}{os.pathsep}{os.environ['PATH']}"}
        return subprocess.run(['bash', f'assets/{study}/run.sh'], cwd=HERE, env=env, capture_output=True, text=True,
                              timeout=600), root / study

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


def test_every_study_folder_has_its_script_and_readme():
    assets = os.path.join(HERE, 'assets')
    folders = {d for d in os.listdir(assets) if os.path.isdir(os.path.join(assets, d))}
    # (gpu/: beyond.gpu_check's reports, made on a lent GPU; quickstart/: the README's quick start, its commands there)
    assert sorted(folders - {'gpu', 'quickstart'}) == sorted(STUDIES)
    for study in STUDIES:
        with open(os.path.join(HERE, 'assets', study, 'README.md')) as f:
            readme = f.read()
        assert f'bash assets/{study}/run.sh' in readme, study


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
# the scripts the studies call that live in beyond/, in-process

def frontier(at_01, at_05):
    """An exit_frontier record: criterion -> (loops, oracle_gap) at +1% and +5%."""
    return {'at': {t: {c: {'loops': loops, 'oracle_gap': gap} for c, (loops, gap) in at.items()}
                   for t, at in (('0.01', at_01), ('0.05', at_05))}}


def pick(criterion, target, stand_in, loops, ppl, speedup):
    return dict(criterion=criterion, target=target, stand_in=stand_in, mean_loops=loops, ppl=ppl, full_ppl=10.0,
                speedup=speedup)


def test_exit_tables_averages_seeds_and_keeps_the_stand_in_that_needs_fewer_loops(tmp_path, capsys):
    from beyond import exit_tables
    runs = [
        dict(name='out-raw_perloop-cpu-long-s1', exit_frontier=frontier({'oracle': (1.0, 0.0), 'latent': (2.0, 1.0)},
                                                                        {'oracle': (1.0, 0.0), 'latent': (1.5, 0.5)}),
             calibrated=[pick('latent', 0.01, 'copy', 2, 10.1, 1.0), pick('latent', 0.01, 'project', 3, 10.2, 2.0),
                         pick('latent', 0.05, 'copy', 1, 10.5, 3.0)]),
        dict(name='out-raw_perloop-cpu-long-s2', exit_frontier=frontier({'oracle': (1.5, 0.0), 'latent': (3.0, 1.5)},
                                                                        {'oracle': (1.0, 0.0), 'latent': (2.5, 1.5)}),
             calibrated=[pick('latent', 0.01, 'copy', 4, 10.3, 2.0), pick('latent', 0.01, 'project', 3, 10.4, 2.0),
                         pick('latent', 0.05, 'copy', 2, 10.3, 1.0)]),
        dict(name='out-norm_perloop-cpu-long-s1', exit_frontier=frontier({'oracle': (1.0, 0.0), 'latent': (None, None)},
                                                                         {'oracle': (1.0, 0.0), 'latent': (1.0, 0.0)})),
    ]
    groups = [dict(name='out-raw_perloop-cpu-long', runs=[r['name'] for r in runs[:2]]),
              dict(name='out-norm_perloop-cpu-long-s1', runs=[runs[2]['name']])]
    (tmp_path / 'results.json').write_text(json.dumps(dict(runs=runs, groups=groups)))
    exit_tables.main([str(tmp_path / 'results.json')])
    lines = capsys.readouterr().out.splitlines()
    assert '| criterion | raw_perloop (n=2) +1% | +5% | norm_perloop (n=1) +1% | +5% |' in lines
    assert '| oracle | 1.25 | 1.00 | 1.00 | 1.00 |' in lines
    assert '| latent | 2.50 (+1.25) | 2.00 (+1.00) | — | 1.00 (+0.00) |' in lines  # (norm: no pick at +1%)
    # +1%: copy and project both need 3 loops on average, project is faster; +5%: copy alone
    assert '| criterion | raw_perloop +1% | raw_perloop +5% |' in lines
    assert '| latent | 3.00, +3.0%, 2.00x (p) | 1.50 ± 0.71, +4.0%, 2.00x ± 1.41 (c) |' in lines


def test_exit_tables_makes_the_committed_tables_again(capsys):
    from beyond import exit_tables
    exit_tables.main([os.path.join(HERE, 'assets/cpu-long-criteria/results.json')])
    with open(os.path.join(HERE, 'assets/cpu-long-criteria/exit_tables.md')) as f:
        assert capsys.readouterr().out == f.read()


def test_depth_costs_parts_add_up_to_its_fixed_k_token_and_its_exits(shared_runs, capsys):
    import torch
    from beyond import depth_costs, exits
    run = shared_runs.folder() / 'out-raw_perloop-cpu-long-s1'
    capsys.readouterr()  # the shared runs' training, where this test is the first to need them
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        depth_costs.main([str(run), '--prompt', '16', '--reps', '2',
                          '--new_tokens', '4', '--accept_tokens', '128'])
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out
    K = 2  # conftest.TINY's n_loops
    assert out.startswith('# out-raw_perloop-cpu-long-s1: d=32, 1 layers, K=2, vocab 256, float32')
    ms = dict(re.findall(r'^\| ([^|]+?) \| ([\d.]+) \|$', out, re.M))
    for name, c in exits.CRITERIA.items():
        assert f"exit decision: {name}{'' if c.readout else ' (no readout)'}" in ms, name
    loop, readout, draw = (float(ms[k]) for k in ('one loop (the 1-layer stack, one token)', 'one readout (32 x 256)',
                                                  'sampling from the readout'))
    assert [k for k in ms if k.startswith('verify pass')] == ['verify pass, loops 2..2 over 4 tokens, per token']
    assert re.findall(r'^\| (\d) \| [\d,.]+ \|$', out, re.M) == ['1', '2']  # fixed K = 1..K, tok/s
    token = float(re.search(r'= ([\d.]+) ms \(', out).group(1))
    # each number is printed to 3 decimals, so each is off by up to half a unit: a sum of printed parts
    # is off from the printed total by up to that times how many printed values enter it (K loops count K)
    rounding = lambda n: n * 0.5e-3 + 1e-9  # noqa: E731
    assert token == pytest.approx(K * loop + readout + draw, abs=rounding(K + 3))
    # an exit after loop 1 with a readout (and a max_prob decision) every loop, and decided from the state
    row = re.search(r'^\| 1 \| ([\d.]+) ms \| ([\d.]+)x \| ([\d.]+) ms \| ([\d.]+)x \|', out, re.M).groups()
    assert float(row[0]) == pytest.approx(loop + readout + float(ms['exit decision: max_prob']) + draw, abs=rounding(5))
    angular = float(ms['exit decision: angular (no readout)'])
    assert float(row[2]) == pytest.approx(loop + angular + readout + draw, abs=rounding(5))
    assert float(row[1]) == pytest.approx(token / float(row[0]), rel=0.02)
    agree, accept = re.search(r'^\| 1 \| ([\d.]+) \| ([\d.]+) \|', out.split('Speculative decoding')[1], re.M).groups()
    assert 0 <= float(agree) <= 1 and 0 <= float(accept) <= 1
