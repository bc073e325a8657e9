"""
gpu_check.py, so that a check no CI runs on a GPU cannot rot: its --cpu mode runs every step
at a tiny shape, each in a process of its own, and must print every row, with numbers, in the
documented order, and write them to its report; a compiler inductor cannot use skips the compiled
rows and the eager ones still run; a missing torch (from the outside) or no GPU without --cpu is
one error line; every part's estimate fits a lent GPU's command (and the check of that can fail).
The check's parent and the settings' checks run in-process.

    python -m pytest -q tests/test_gpu_check.py
"""

import os
import re

import pytest
import torch

from beyond import gpu_check
from conftest import assert_one_line_error, run_script
from configurator import UserError

# the order the docstring promises (most needed first); the summary must keep it
ROWS = ['preflight', 'train-44m-fused', 'train-129m-fused', 'train-44m-padded', 'decode-eager', 'decode-compiled',
        'decode-graphs', 'decode-speculative', 'train-44m-plain', 'train-129m-plain']
NUMBER = r'=(\d+(\.\d+)?)\b'


def summary(stdout):
    """The summary's lines, name -> the rest of the line."""
    text = stdout.split('=== summary', 1)[1]
    return {line.split()[0]: line for line in text.splitlines()[1:]
            if line and not line.startswith(('total', 'report:'))}


def field(line, key):
    m = re.search(rf'\b{key}{NUMBER}', line)
    assert m, f"no number for {key} in: {line}"
    return float(m.group(1))


def check(capsys, *argv):
    """gpu_check.main(argv) in this process, as the script runs it (its steps in processes of their
    own): (stdout, its error or ''). The parent's interpreter start and torch import are saved."""
    try:
        gpu_check.main([str(a) for a in argv])
        error = ''
    except UserError as e:
        error = str(e)
    return capsys.readouterr().out, error


def test_cpu_mode_runs_every_kind_of_step_and_the_summary_keeps_the_order_with_numbers(tmp_path, capsys):
    # every kind of step, once (a process each costs seconds): a training row (every training step is
    # train_row at its shape, vocabulary and loss path: the padded one here), and decoding through the
    # compiled loop (decode-graphs: on a CPU the same compile as decode-compiled, without graphs) with
    # speculative decoding on it; the eager decode row runs in the next test. Listed out of order: the
    # summary keeps the check's order.
    out = tmp_path / 'check'
    steps = ['decode-graphs', 'train-44m-padded']
    stdout, error = check(capsys, '--cpu', f'--out={out}', '--steps=1', '--warmup=0', f"--only={','.join(steps)}")
    assert not error, stdout[-3000:] + error
    rows = summary(stdout)
    shown = [name for name in ROWS if name == 'preflight' or name in steps or name == 'decode-speculative']
    assert list(rows) == shown  # those rows, in the fixed order, nothing else
    assert re.search(r'compile=ok .*compile_s' + NUMBER, rows['preflight'])
    for name in shown[1:]:
        assert field(rows[name], 'tok_per_s') > 0 and field(rows[name], 'elapsed_s') >= 0
    padded = rows['train-44m-padded']
    assert re.search(r'\bpeak_mem_gib' + NUMBER, padded) and 'mfu=n/a' in padded  # (no MFU on a CPU)
    assert field(padded, 'vocab') == 64 > gpu_check.TINY_VOCAB  # the tiny vocabulary, rounded up to a multiple of 64
    # one compile a row: the preflight's, the fixed-K token for the compiled decode step, the one loop its
    # speculative row drafts with (in decode-graphs' process); the training rows run eagerly on a CPU
    compiled = {'preflight': 1, 'decode-graphs': 1, 'decode-speculative': 1}
    assert {name: field(rows[name], 'compiles') for name in shown} == {name: compiled.get(name, 0) for name in shown}
    assert f'{sum(compiled.values())} compiles' in stdout.splitlines()[-1]
    assert field(rows['decode-speculative'], 'accept_rate') <= 1
    # each step announced and timed as it ran, its log kept under its number in the full order
    for i, step in enumerate(gpu_check.STEPS, 1):
        if step == 'preflight' or step in steps:
            assert re.search(rf'^--- {step}: ok, \d+\.\d s$', stdout, re.M), step
            assert (out / f'{i}-{step}.log').read_text().count(f'row {step}:') == 1
        else:
            assert not (out / f'{i}-{step}.log').exists()
    # the report, under --out with --cpu (never in assets/), whole: every summary row, each step's seconds
    assert re.search(r'^=== the steps asked for: .*estimated ~\d+\.\d min', stdout, re.M)
    report = (out / 'cpu-only.md').read_text()
    assert f"report: {out / 'cpu-only.md'}" in stdout and not [f for f in os.listdir(out) if f.endswith('.tmp')]
    assert '**Complete**' in report and f"`python -m beyond.gpu_check --cpu --out={out}" in report
    for name, line in rows.items():
        assert f"| {name} | {line[len(name):].strip()} |" in report, name
    for step in ['preflight', *steps]:
        assert re.search(rf'^\| {step} \| \d+\.\d \| \d+\.\d \|$', report, re.M), step
    assert re.search(r'^\| decode \| \d+\.\d \| not run \|$', report, re.M)  # (only a part run here measures one)


def test_a_compiler_inductor_cannot_use_skips_the_compiled_rows_and_the_eager_ones_still_run(tmp_path, capsys,
                                                                                            monkeypatch):
    monkeypatch.setenv('CXX', str(tmp_path / 'no-such-g++'))  # (for the steps' processes)
    monkeypatch.setenv('TORCHINDUCTOR_CACHE_DIR', str(tmp_path / 'inductor'))
    stdout, error = check(capsys, '--cpu', f'--out={tmp_path / "check"}', '--only=decode-eager,decode-compiled')
    assert error.startswith('1 of 3 rows not measured (decode-compiled)'), error
    assert 'torch.compile cannot build here' in stdout and 'no-such-g++ (not found)' in stdout
    rows = summary(stdout)
    assert list(rows) == ['preflight', 'decode-eager', 'decode-compiled']
    assert 'compile=failed' in rows['preflight'] and field(rows['decode-eager'], 'tok_per_s') > 0
    assert 'SKIPPED' in rows['decode-compiled'] and 'preflight could not compile' in rows['decode-compiled']


def test_a_torch_that_does_not_import_is_its_own_error_not_no_gpu(tmp_path):
    fake = tmp_path / 'torch'
    fake.mkdir()
    (fake / '__init__.py').write_text("raise ImportError('libcudart.so.12: cannot open shared object file')\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    r = run_script('beyond/gpu_check.py', f'--out={tmp_path / "check"}', env=env)
    assert_one_line_error(r, 'gpu_check.py', 'cannot import torch', 'libcudart.so.12', 'requirements.txt')
    assert 'no CUDA GPU' not in r.stderr and r.stdout == ''


def test_without_a_gpu_one_line_says_to_pass_cpu(tmp_path, capsys):
    if torch.cuda.is_available():
        pytest.skip('this machine has CUDA')
    stdout, error = check(capsys, f'--out={tmp_path / "never-made"}')  # (the one line from the outside: above)
    assert 'no CUDA GPU here' in error and '--cpu' in error
    assert stdout == '' and not (tmp_path / 'never-made').exists()


def test_a_package_that_does_not_import_is_named_with_its_own_error(monkeypatch, capsys):
    real = gpu_check.importlib.import_module

    def broken(name):
        if name == 'tiktoken':
            raise ImportError("cannot import name 'Encoding' (simulated)")
        return real(name)
    monkeypatch.setattr(gpu_check.importlib, 'import_module', broken)
    with pytest.raises(UserError, match='cannot import tiktoken .*requirements.txt'):
        gpu_check.preflight(dict(cpu=True))
    assert "cannot import tiktoken: ImportError: cannot import name 'Encoding' (simulated)" in capsys.readouterr().out


@pytest.mark.parametrize('argv, needle', [
    (['--compile=maybe'], "compile must be on or off; got 'maybe'"),
    (['--steps=0'], "'steps' must be at least 1"),
    (['--only=decode-eager,decode-fast'], "unknown step 'decode-fast'"),
    (['--step=train-7b'], "unknown step 'train-7b'"),
    (['--part=train'], "unknown part 'train': the parts are fused, decode, plain"),
    (['--part=decode', '--only=decode-eager'], 'give --part or --only, not both'),
    (['--stepz=1'], "unknown setting 'stepz'"),
])
def test_each_bad_setting_is_named(argv, needle):
    with pytest.raises(UserError) as e:
        gpu_check.main(argv)
    assert needle in str(e.value)


def test_only_keeps_the_fixed_order_and_always_runs_the_preflight():
    s = dict(gpu_check.SETTINGS, only='train-129m-plain,decode-eager')
    assert gpu_check.check_settings(s) == ['preflight', 'decode-eager', 'train-129m-plain']


def test_a_part_is_its_steps_after_the_preflight_and_an_unknown_one_is_one_line(tmp_path):
    assert gpu_check.check_settings(dict(gpu_check.SETTINGS, part='decode')) == [
        'preflight', 'decode-eager', 'decode-compiled', 'decode-graphs']
    # the parts hold every step but the preflight once, in the check's order
    assert [n for names in gpu_check.PARTS.values() for n in names] == list(gpu_check.STEPS[1:])
    r = run_script('beyond/gpu_check.py', '--part=training', f'--out={tmp_path / "never-made"}')  # (before torch)
    assert_one_line_error(r, 'gpu_check.py', "unknown part 'training'", 'fused, decode, plain')


def test_every_part_is_estimated_to_fit_a_lent_command_and_the_docstring_says_so(capsys):
    s = gpu_check.SETTINGS
    est = gpu_check.estimates(s)
    assert gpu_check.over_limit(s) == []
    for part, names in gpu_check.PARTS.items():
        seconds = gpu_check.command_s(est, ['preflight', *names])
        assert 60 < seconds <= gpu_check.LIMIT_S == 540, part
        # the docstring's and --help's minutes are the function's
        assert re.search(rf'--part={part} .*: ~{seconds / 60:.1f} min$', gpu_check.__doc__, re.M), part
    gpu_check.main(['--help'])
    helped = capsys.readouterr().out
    assert all(re.search(rf'--part={p} +~\d+\.\d min: preflight 25 s, ', helped) for p in gpu_check.PARTS)
    # the check is real: a part of every training step (five compiles) is over the limit
    training = [n for n in gpu_check.STEPS if n.startswith('train-')]
    assert gpu_check.over_limit(s, {'decode': gpu_check.PARTS['decode'], 'training': training}) == ['training']
    assert gpu_check.command_s(est, gpu_check.STEPS) > gpu_check.LIMIT_S  # (why there are parts)
    assert 'every step in one command: ~13.6 min' in helped and '~13.6 min' in gpu_check.__doc__


def test_the_estimate_is_its_arithmetic():
    # a training step: start + compile + 23 steps of 24.1 TFLOP (44M: 64 x 256 tokens) at 40% of 989 TFLOP/s
    est = gpu_check.estimates(gpu_check.SETTINGS)
    assert est['train-44m-fused'] == pytest.approx(5 + 120 + 23 * 24.137e12 / (0.4 * 989e12), abs=0.01)
    assert est['train-44m-padded'] > est['train-44m-fused']  # (47 more head columns)
    # decode-graphs: start + two compiles (the token, the drafts' loop) + two rows of two runs of 256 - 16 tokens at 8 ms
    assert est['decode-graphs'] == pytest.approx(5 + 2 * 40 + 2 * 2 * 240 * 0.008)
    assert est['decode-eager'] == pytest.approx(5 + 2 * 240 * 0.008)


def test_a_report_names_its_device_and_part_and_says_when_it_is_incomplete(tmp_path):
    s = dict(gpu_check.SETTINGS, part='fused')
    assert gpu_check.report_path(s, 'NVIDIA H200') == os.path.join(gpu_check.ROOT, 'assets', 'gpu', 'nvidia-h200-fused.md')
    assert gpu_check.report_path(dict(s, report_dir=str(tmp_path)), 'NVIDIA H100 80GB HBM3') == str(
        tmp_path / 'nvidia-h100-80gb-hbm3-fused.md')
    # after the preflight and one step of three: written whole, and marked incomplete
    todo = gpu_check.check_settings(s)
    results = {'preflight': "torch=2.13.0 cuda=12.8 device='NVIDIA H200' compile=ok", 'train-44m-fused': 'tok_per_s=1'}
    lines = gpu_check.summary_lines(todo, results, {})
    text = gpu_check.report_text(s, 'python -m beyond.gpu_check --part=fused', todo, lines,
                                 {'preflight': 20.0, 'train-44m-fused': 100.0}, gpu_check.estimates(s), 130.0, False)
    path = str(tmp_path / 'r.md')
    gpu_check.write_report(path, text)
    assert os.listdir(tmp_path) == ['r.md'] and open(path).read() == text
    assert '**Incomplete**: 2 of 4 steps ran' in text and '# gpu_check on NVIDIA H200' in text
    assert '| train-129m-fused | not run (yet, or the check stopped first) |' in text
    assert re.search(r'^\| fused \| \d+\.\d \| not run \|$', text, re.M)  # (a part is measured once all of it ran)
