"""
gpu_check.py, so that a check no CI runs on a GPU cannot rot: its --cpu mode runs every step
at a tiny shape, each in a process of its own, and must print every row, with numbers, in the
documented order, and write them to its report; a compiler inductor cannot use skips the compiled
rows and the eager ones still run; a missing torch (from the outside) or no GPU without --cpu is
one error line; every part's estimate fits a lent GPU's command (and the check of that can fail);
every output lands in --out; a decode row counts recompiles and CUDA-graph skips, and fails on a
skip with --fail_on_skip; a torch outside requirements.txt's range is said in the report. The
check's parent and the settings' checks run in-process.

    python -m pytest -q tests/test_gpu_check.py
"""

import os
import re
import subprocess
import sys

import pytest
import torch

from beyond import gpu_check
from conftest import assert_one_line_error, run_script, stand_in_python
from configurator import UserError

# the order the docstring promises (most needed first); the summary must keep it
ROWS = ['preflight', 'train-44m-fused', 'train-129m-fused', 'train-44m-padded', 'decode-eager', 'decode-compiled',
        'decode-graphs', 'decode-speculative', 'correctness', 'train-44m-plain', 'train-129m-plain']
DECODE_ROWS = ['decode-eager', 'decode-compiled', 'decode-graphs', 'decode-speculative', 'correctness']
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


def test_cpu_mode_runs_every_kind_of_step_and_the_summary_keeps_the_order_with_numbers(tmp_path, capsys, monkeypatch):
    # every kind of step, once (a process each costs seconds): a training row (every training step is
    # train_row at its shape, vocabulary and loss path: the padded one here), decoding through the
    # compiled loop (decode-graphs: on a CPU the same compile as decode-compiled, without graphs) with
    # speculative decoding on it, and the correctness row; the eager decode row runs in the next test.
    # Listed out of order: the summary keeps the check's order.
    out = tmp_path / 'check'
    # (each step's process forked from one that imported torch: conftest's stand-in)
    monkeypatch.setattr(sys, 'executable', str(stand_in_python()))
    steps = ['correctness', 'decode-graphs', 'train-44m-padded']
    stdout, error = check(capsys, '--cpu', f'--out={out}', '--steps=1', '--warmup=0', f"--only={','.join(steps)}")
    assert not error, stdout[-3000:] + error
    rows = summary(stdout)
    shown = [name for name in ROWS if name == 'preflight' or name in steps or name == 'decode-speculative']
    assert list(rows) == shown  # those rows, in the fixed order, nothing else
    assert re.search(r'compile=ok .*compile_s' + NUMBER, rows['preflight'])
    assert f'torch={torch.__version__} cuda={torch.version.cuda} python=' in rows['preflight']
    for name in shown[1:]:
        assert field(rows[name], 'elapsed_s') >= 0
        assert name == 'correctness' or field(rows[name], 'tok_per_s') > 0
    for name in set(shown) & set(DECODE_ROWS):  # what would say a compiled row is not what it claims
        assert field(rows[name], 'recompiles') == 0 and field(rows[name], 'cudagraph_skips') == 0, name
    # the correctness row: every path against float32 (bf16's roundings: close, not equal), the decoder
    # against model.forward, the one-graph token against K one-loop steps
    correct = rows['correctness']
    for path in ('forward', 'eager', 'compiled', 'graphs'):
        assert 0 < field(correct, f'{path}_dlogit') < 0.1 * field(correct, 'logit_std'), path
        assert field(correct, f'{path}_top1') >= 0.9, path
    for path in ('eager', 'compiled', 'graphs'):
        assert field(correct, f'{path}_vs_forward') < 0.1 * field(correct, 'logit_std'), path
    assert field(correct, 'token_vs_loops_top1') >= 0.9 and 'dtype=bfloat16' in correct
    padded = rows['train-44m-padded']
    assert re.search(r'\bpeak_mem_gib' + NUMBER, padded) and 'mfu=n/a' in padded  # (no MFU on a CPU)
    assert field(padded, 'vocab') == 64 > gpu_check.TINY_VOCAB  # the tiny vocabulary, rounded up to a multiple of 64
    # one compile a row: the preflight's, the fixed-K token for the compiled decode step, the one loop its
    # speculative row drafts with (in decode-graphs' process); the training rows run eagerly on a CPU
    # correctness compiles the token once (the compiled and the graphs stepper share it on a CPU) and the one loop
    compiled = {'preflight': 1, 'decode-graphs': 1, 'decode-speculative': 1, 'correctness': 2}
    assert {name: field(rows[name], 'compiles') for name in shown} == {name: compiled.get(name, 0) for name in shown}
    assert f'{sum(compiled.values())} compiles' in stdout.splitlines()[-1]
    assert field(rows['decode-speculative'], 'accept_rate') <= 1 and 'verify=eager' in rows['decode-speculative']  # (it says so)
    # each step announced and timed as it ran, its output in the one log, in order
    log = (out / gpu_check.LOG).read_text()
    for step in gpu_check.STEPS:
        if step == 'preflight' or step in steps:
            assert re.search(rf'^--- {step}: ok, \d+\.\d s$', stdout, re.M), step
            assert log.count(f'\n=== {step}\n') == 1 and log.count(f'row {step}:') == 1, step
        else:
            assert f'=== {step}\n' not in log
    # every output under --out: the log and the report, whole: every summary row, each step's seconds
    assert sorted(os.listdir(out)) == ['cpu-only.md', gpu_check.LOG]
    assert re.search(r'^=== the steps asked for: .*estimated ~\d+\.\d min', stdout, re.M)
    report = (out / 'cpu-only.md').read_text()
    assert f"report: {out / 'cpu-only.md'}" in stdout
    assert '**Complete**' in report and f"`python -m beyond.gpu_check --cpu --out={out}" in report
    assert f"torch {torch.__version__}, CUDA {torch.version.cuda}, Python " in report and '**warning**' not in report
    for name, line in rows.items():
        assert f"| {name} | {line[len(name):].strip()} |" in report, name
    for step in ['preflight', *steps]:
        assert re.search(rf'^\| {step} \| \d+\.\d \| \d+\.\d \|$', report, re.M), step
    assert re.search(r'^\| decode \| \d+\.\d \| not run \|$', report, re.M)  # (only a part run here measures one)


def test_a_compiler_inductor_cannot_use_skips_the_compiled_rows_and_the_eager_ones_still_run(tmp_path, capsys,
                                                                                            monkeypatch):
    # (the steps' processes: conftest's stand-in, which reads CXX as inductor does)
    monkeypatch.setattr(sys, 'executable', str(stand_in_python()))
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
        'preflight', 'decode-eager', 'decode-compiled', 'decode-graphs', 'correctness']
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
    every = f"~{gpu_check.command_s(est, gpu_check.STEPS) / 60:.1f} min"
    assert f'every step in one command: {every}' in helped and f'every step in one command: {every}' in gpu_check.__doc__


def test_the_estimate_is_its_arithmetic():
    # a training step: start + compile + 23 steps of 24.1 TFLOP (44M: 64 x 256 tokens) at 40% of 989 TFLOP/s
    est = gpu_check.estimates(gpu_check.SETTINGS)
    assert est['train-44m-fused'] == pytest.approx(5 + 120 + 23 * 24.137e12 / (0.4 * 989e12), abs=0.01)
    assert est['train-44m-padded'] > est['train-44m-fused']  # (47 more head columns)
    # decode-graphs: start + two compiles (the token, the drafts' loop) + two rows of two runs of 256 - 16 tokens at 8 ms
    assert est['decode-graphs'] == pytest.approx(5 + 2 * 40 + 2 * 2 * 240 * 0.008)
    assert est['decode-eager'] == pytest.approx(5 + 2 * 240 * 0.008)
    # correctness: start + three compiles (compiled token, graphs token, graphs loop) + four passes of 64 tokens
    assert est['correctness'] == pytest.approx(5 + 3 * 40 + 4 * 64 * 0.008)


def test_a_report_names_its_device_and_part_and_says_when_it_is_incomplete(tmp_path):
    s = dict(gpu_check.SETTINGS, part='fused', out=str(tmp_path / 'job'))
    assert gpu_check.report_path(s, 'NVIDIA H200') == str(tmp_path / 'job' / 'nvidia-h200-fused.md')  # (beside the log)
    assert gpu_check.report_path(dict(s, part='', only='correctness'), 'NVIDIA H100 80GB HBM3') == str(
        tmp_path / 'job' / 'nvidia-h100-80gb-hbm3-only.md')
    # after the preflight and one step of three: written whole, and marked incomplete; a torch outside
    # requirements.txt's range (a common H200 image's 2.11) is a warning in the report
    todo = gpu_check.check_settings(s)
    results = {'preflight': "torch=2.11.0+cu130 cuda=13.0 python=3.12.3 torch_in_range=no device='NVIDIA H200' "
                            "compile=ok", 'train-44m-fused': 'tok_per_s=1'}
    lines = gpu_check.summary_lines(todo, results, {})
    text = gpu_check.report_text(s, 'python -m beyond.gpu_check --part=fused', todo, lines,
                                 {'preflight': 20.0, 'train-44m-fused': 100.0}, gpu_check.estimates(s), 130.0, False)
    path = str(tmp_path / 'r.md')
    gpu_check.write_report(path, text)
    assert os.listdir(tmp_path) == ['r.md'] and open(path).read() == text
    assert '**Incomplete**: 2 of 4 steps ran' in text and '# gpu_check on NVIDIA H200' in text
    assert 'torch 2.11.0+cu130, CUDA 13.0, Python 3.12.3' in text
    assert "**warning**: torch 2.11.0+cu130 is outside requirements.txt's range (>=2.13,<2.15)" in text
    assert '| train-129m-fused | not run (yet, or the check stopped first) |' in text
    assert re.search(r'^\| fused \| \d+\.\d \| not run \|$', text, re.M)  # (a part is measured once all of it ran)


def test_the_torch_range_is_read_from_requirements_txt(tmp_path):
    assert gpu_check.torch_range() == ['>=2.13', '<2.15']  # (requirements.txt's line, as pip reads it)
    assert gpu_check.torch_warning(torch.__version__) == ''  # (this machine's torch: the tests pass on it)
    for inside in ('2.13.0', '2.14.1+cu128', '2.13.0+cpu'):
        assert gpu_check.torch_warning(inside) == '', inside
    for outside in ('2.11.0+cu130', '2.12.1', '2.15.0', '3.0.0'):
        assert gpu_check.torch_warning(outside).startswith(f"torch {outside} is outside"), outside
    other = tmp_path / 'requirements.txt'
    other.write_text('numpy>=1.26\ntorchvision>=0.1\ntorch == 2.12.*  # pinned\n')
    assert gpu_check.torch_range(str(other)) == ['==2.12.']
    assert gpu_check.torch_warning('2.12.1', ['==2.12']) == '' and gpu_check.torch_warning('2.13.0', ['==2.12'])


def test_recompiles_and_cudagraph_skips_are_counted(monkeypatch):
    # a recompile: dynamo compiles a function again when a guard fails (here the shape, dynamic=False)
    f = torch.compile(lambda x: x.sin() + 1, dynamic=False, backend='eager')
    before = gpu_check.graph_counts()
    f(torch.ones(3))
    assert gpu_check.graph_fields(before)['recompiles'] == 0
    f(torch.ones(4))
    assert gpu_check.graph_fields(before) == dict(recompiles=1, cudagraph_skips=0)
    # a skip is inductor's counter (it only logs one): read as it bumps it
    from torch._dynamo.utils import counters
    monkeypatch.setitem(counters['inductor'], 'cudagraph_skips', counters['inductor']['cudagraph_skips'] + 2)
    assert gpu_check.graph_fields(before)['cudagraph_skips'] == 2


def test_with_fail_on_skip_a_skipped_graph_fails_its_row(monkeypatch, capsys):
    # a decode step in this process (what the check runs in a child), with inductor's skip faked
    skipped = dict(recompiles=0, cudagraph_skips=1)
    monkeypatch.setattr(gpu_check, 'graph_fields', lambda before: skipped)
    argv = ['--cpu', '--step=decode-eager', '--prompt_tokens=28']
    gpu_check.main(argv)  # without the flag: reported
    assert re.search(r'^row decode-eager: .*\brecompiles=0 cudagraph_skips=1 ', capsys.readouterr().out, re.M)
    with pytest.raises(UserError, match='decode-eager: inductor skipped CUDA graphs 1 time'):
        gpu_check.main(argv + ['--fail_on_skip'])
    assert 'row decode-eager:' not in capsys.readouterr().out  # (no row: the check marks it FAILED)


def run_sh_estimates():
    """assets/gpu/run.sh's EST_... lines, {name: seconds}."""
    with open(os.path.join(gpu_check.ROOT, 'assets', 'gpu', 'run.sh')) as f:
        return {m.group(1): int(m.group(2)) for m in re.finditer(r'^EST_(\w+)=(\d+)', f.read(), re.M)}


def test_the_gpu_jobs_estimate_is_gpu_checks_and_fits_8_minutes():
    est = run_sh_estimates()
    s = dict(gpu_check.SETTINGS, speculative=False)  # (run.sh's settings; the rest gpu_check's defaults)
    todo = gpu_check.check_settings(dict(s, only='train-44m-fused,decode-eager,decode-graphs,correctness'))
    assert est['CHECK'] == round(gpu_check.command_s(gpu_check.estimates(s), todo))
    total = est['CHECK'] + est['CUDA_TESTS'] + 5  # (+ run.sh's own start)
    assert total <= 8 * 60
    with open(os.path.join(gpu_check.ROOT, 'assets', 'gpu', 'README.md')) as f:
        readme = f.read()
    assert f"**{total} s, ~{total / 60:.1f} min**" in readme and f"| {est['CHECK']} s |" in readme
    assert f"| {est['CUDA_TESTS']} s |" in readme


def test_the_gpu_job_in_cpu_mode_writes_every_output_in_its_folder(tmp_path):
    # bash assets/gpu/run.sh --cpu OUT: gpu_check (compile off: its compiled rows skipped) and the CUDA tests
    # (skipped without CUDA), four files in OUT and nothing elsewhere; its `python` is conftest's stand-in
    out = tmp_path / 'job'
    env = dict(os.environ, PATH=f"{stand_in_python().parent}{os.pathsep}{os.environ['PATH']}")
    r = subprocess.run(['bash', 'assets/gpu/run.sh', '--cpu', str(out)], cwd=gpu_check.ROOT, capture_output=True,
                       text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert sorted(os.listdir(out)) == ['cpu-only.md', 'cuda-tests.log', gpu_check.LOG, 'run.log']  # (at most 8)
    est = run_sh_estimates()
    steps = [line.split(':')[0] for line in (out / 'run.log').read_text().splitlines()]
    assert steps == ['gpu_check', 'cuda-tests']
    for line, key in zip((out / 'run.log').read_text().splitlines(), ('CHECK', 'CUDA_TESTS')):
        assert re.fullmatch(rf'\S+: estimated {est[key]} s, took \d+\.\d s, exit 0', line), line
    report = (out / 'cpu-only.md').read_text()
    assert f"torch {torch.__version__}, CUDA {torch.version.cuda}, Python " in report
    for name in ('train-44m-fused', 'decode-eager', 'correctness'):
        assert re.search(rf'^\| {name} \| \S+=', report, re.M), name
    assert re.search(r'^\| decode-eager \| .*\brecompiles=0 cudagraph_skips=0 ', report, re.M)
    assert re.search(r'^\| correctness \| .*\beager_dlogit=\S+ eager_top1=\S+ .*cudagraph_skips=0 ', report, re.M)
    assert '| decode-graphs | SKIPPED: compile is off (--compile=off) |' in report
    assert 'skipped' in (out / 'cuda-tests.log').read_text()


def test_with_cuda_visible_the_tests_that_are_not_about_cuda_still_run_on_the_cpu(monkeypatch, tmp_path):
    # on a GPU box device 'auto' is CUDA (bf16 there, against the tests' float32 references): every
    # test not about CUDA names --device=cpu. Each script's main is run with the tests' argument lists
    # up to its setup_device, with torch.cuda.is_available faked True; the device it would set up is
    # what runtime.setup_device makes of the setting it got
    import runtime
    import train
    import test_eval_depth
    import test_studies
    from beyond import bench, depth_costs, eval_decode, exit_gate
    from beyond import sample as beyond_sample
    from conftest import TINY
    import eval_depth
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: True)
    tf32 = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32  # (setup_device('cuda') sets them)
    try:
        assert runtime.setup_device('auto') == 'cuda'  # the trap an unpinned test falls into
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32

    class SetUp(Exception):
        pass

    def spy(name='auto', *rest):  # (setup_device(name), or depth_costs' load_run(run, device, split))
        raise SetUp(runtime.setup_device(name if not rest else rest[0]))

    def device_of(module, call, attr='setup_device'):
        monkeypatch.setattr(module, attr, spy)
        with pytest.raises(SetUp) as e:
            call()
        return e.value.args[0]

    run, out = str(tmp_path / 'run'), str(tmp_path / 'out')
    S = {k: v.split() for k, v in test_studies.SETTINGS.items() if k.endswith('_ARGS')}
    try:
        seen = {  # the tests' in-process evaluations, and each study script with what test_studies gives it
            'test_eval_depth.evaluate': device_of(eval_depth, lambda: test_eval_depth.evaluate(run, '--out', out)),
            'EVAL_ARGS': device_of(eval_depth, lambda: eval_decode.main([run, *S['EVAL_ARGS'], *S['DECODE_ARGS'],
                                                                        '--out', out])),
            'GATE_ARGS': device_of(exit_gate, lambda: exit_gate.main([f'--out_dir={run}', *S['GATE_ARGS']])),
            'SAMPLE_ARGS': device_of(beyond_sample, lambda: beyond_sample.main([f'--out_dir={run}', *S['SAMPLE_ARGS']])),
            'BENCH_ARGS': device_of(bench, lambda: bench.main(S['BENCH_ARGS'])),
            'TRAIN_ARGS': runtime.setup_device(train.setup(S['TRAIN_ARGS'])['device']),  # (TINY: every tiny run)
            'COST_ARGS': device_of(depth_costs, lambda: depth_costs.main([run, *S['COST_ARGS']]), 'load_run'),
        }
    finally:
        torch.set_flush_denormal(False)  # (setup_device('cpu') turns flushing on, process-wide)
    assert seen == dict.fromkeys(seen, 'cpu')
    assert '--device=cpu' in TINY and '--device=cpu' in test_eval_depth.PINNED
