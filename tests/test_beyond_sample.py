"""
python -m beyond.sample (the cached, early-exit and speculative sampler) on a tiny run trained here: its main in-process, and from the outside where the
one-line error and the compiler's failure are what is tested.

    python -m pytest -q tests/test_beyond_sample.py
"""

import contextlib
import io
import re
import sys
from types import SimpleNamespace

import pytest
import torch

import beyond.sample as sample_py
from conftest import assert_one_line_error, run_script
from configurator import UserError

SUMMARY = re.compile(r'^tokens=(\d+) seconds=([\d.]+) tok_per_s=([\d.]+) mean_loops=([\d.]+)$', re.M)


@pytest.fixture(scope='module')
def run(sample_run):
    return sample_run  # (conftest's: the one tiny run both samplers' tests read)


@pytest.fixture(autouse=True)
def default_denormals():
    yield
    torch.set_flush_denormal(False)  # sample.main's setup_device turns flushing on, process-wide


def sample(run, *args):
    """sample.py's main in this process (no torch import per call), its stdout and stderr captured;
    the one-line error path from the outside is test_bad_input_is_one_clear_line's."""
    out, err = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            sample_py.main([f'--out_dir={run}', '--device=cpu', *map(str, args)])
        except UserError as e:
            print(f"python -m beyond.sample: error: {e}", file=sys.stderr)
            code = 1
    return SimpleNamespace(returncode=code, stdout=out.getvalue(), stderr=err.getvalue())


def test_samples_and_the_summary_line(run):
    r = sample(run, '--start=the loop', '--num_samples=2', '--max_new_tokens=20')
    assert r.returncode == 0, r.stderr
    assert r.stdout.count('---------------') == 2 and r.stdout.startswith('the loop')
    tokens, seconds, tok_s, loops = SUMMARY.search(r.stderr).groups()
    assert int(tokens) == 40 and float(seconds) > 0 and float(tok_s) > 0 and float(loops) == 3.0


def test_a_seed_gives_its_samples_whatever_ran_before_and_another_seed_others(run):
    # the seed is set after the warm-up (which draws nothing the samples depend on): the same seed, the same text,
    # though the process's random state moved in between; the same seed twice over draws nothing twice
    common = ('--start=the', '--num_samples=1', '--max_new_tokens=30', '--temperature=2.0')
    first = sample(run, *common, '--seed=7')
    torch.rand(100)  # whatever else this process drew
    again, other = sample(run, *common, '--seed=7'), sample(run, *common, '--seed=8')
    assert first.returncode == again.returncode == other.returncode == 0, first.stderr
    assert first.stdout == again.stdout and other.stdout != first.stdout


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
    # from the outside, the one-line error path: a setting checked before the model loads, and
    # one checked after (draft_loops against the run's K = 3)
    outside = run_script('beyond/sample.py', f'--out_dir={run}', '--device=cpu', '--exit_criterion=margin')
    assert_one_line_error(outside, 'python -m beyond.sample', 'exit_criterion', 'entropy')
    assert_one_line_error(sample(run, '--draft_loops=2', '--n_loops=2'), 'python -m beyond.sample', 'draft_loops', '[1, 1]')


def bad(**settings):
    """The message check() gives for these settings (over the defaults), in-process."""
    with pytest.raises(UserError) as e:
        sample_py.check_settings(dict(sample_py.SETTINGS, **settings))
    return str(e.value)


def test_each_bad_setting_is_named(run, tmp_path):
    # each check is a function: run here, without a process (and torch's import) per setting
    # (sample.py's own checks, the prompt and the loading are tests/test_sample.py's)
    assert 'exit_criterion' in bad(exit_criterion='margin')
    for value in (1.5, -0.1):
        assert 'exit_threshold' in bad(exit_threshold=value) and '[0, 1]' in bad(exit_threshold=value)
    for value in (0, 2.5):
        assert 'n_loops' in bad(n_loops=value)
    assert 'stand_in' in bad(stand_in='mean') and 'project' in bad(stand_in='mean')
    assert 'draft_loops' in bad(draft_loops=-1)
    assert 'draft_tokens' in bad(draft_loops=1, draft_tokens=0)
    for value in (1.5, -0.1):
        assert 'draft_stop' in bad(draft_loops=1, draft_stop=value)
    assert 'exit_threshold' in bad(draft_loops=1, exit_threshold=0.5)
    assert 'KV cache' in bad(draft_loops=1, kv_cache=False)
    assert 'compile' in bad(compile='yes')
    with pytest.raises(UserError, match="'num_sample'"):
        sample_py.main(['--num_sample=2'])  # (an unknown setting, refused before any device is set up)


def test_the_warm_up_has_its_own_line_and_a_compiler_that_cannot_build_is_one_clear_line(run, tmp_path):
    # (that the compiled decoder gives the eager text is test_decoder.py's, in-process: a cold compile
    # in a subprocess here would cost ~15 s)
    common = ('--start=the loop', '--num_samples=1', '--max_new_tokens=20', '--top_k=1')
    r = sample(run, *common)
    assert r.returncode == 0, r.stderr
    warm_up = re.search(r'^warmup_seconds=([\d.]+) compile=off$', r.stderr, re.M)
    assert warm_up and r.stderr.index(warm_up.group(0)) < SUMMARY.search(r.stderr).start()
    # a machine where inductor cannot build (here: no such C++ compiler, and no compile caches so
    # that nothing already built is reused) gets one line that says how to run anyway. In-process
    # (a process of its own cost ~7 s, most of it inductor's start): the same failure, raised by
    # inductor in this process; main's line from the outside is test_bad_input_is_one_clear_line's
    torch._dynamo.reset()
    try:
        with torch._inductor.config.patch({'cpp.cxx': (None, str(tmp_path / 'no-such-g++')),
                                           'force_disable_caches': True}):
            r = sample(run, *common, '--compile=on')
    finally:
        torch._dynamo.reset()
    assert r.returncode == 1 and r.stdout == ''
    errors = r.stderr.strip().splitlines()
    assert errors[-1].startswith('python -m beyond.sample: error: compile is on but torch.compile could not build'), r.stderr
    assert 'C++ compiler' in errors[-1] and errors[-1].endswith('--compile=off')


def test_readout_free_criteria_and_a_missing_gate_in_process(run, capsys):
    # an always-firing angular exit is the 1-loop model (no readout decides it, the exit reads out once)
    common = [f'--out_dir={run}', '--device=cpu', '--start=the norm', '--num_samples=1', '--max_new_tokens=20',
              '--top_k=1']
    sample_py.main(common + ['--exit_criterion=angular', '--exit_threshold=1e-9'])
    angular = capsys.readouterr()
    sample_py.main(common + ['--n_loops=1'])
    assert angular.out == capsys.readouterr().out and 'mean_loops=1.000' in angular.err
    sample_py.main(common + ['--exit_criterion=latent', '--exit_threshold=0.999999'])  # (never fires here)
    assert 'mean_loops=3.000' in capsys.readouterr().err
    with pytest.raises(UserError, match=r'python -m beyond.exit_gate --out_dir=.*run`$'):
        sample_py.main(common + ['--exit_criterion=gate', '--exit_threshold=0.5'])
    import configurator  # --help points to the registry and its gates (read from sample.py's source, as the command line does)
    text = configurator.help_text(sample_py.SETTINGS, [sample_py.__file__, sample_py.sample.__file__])
    assert all(c in text for c in ('beyond/exits.py', 'python -m beyond.exits', "'gate'"))


def test_cached_sampling_at_a_fixed_k_is_the_plain_samplers_text(run):
    # beyond/sample.py's claim: at a fixed K, inside block_size, the KV-cached decoder samples what
    # sample.py samples (the same distribution and the same draws, from the same seed)
    import sample as plain
    from beyond.decoder import generate
    model, _ = plain.load(dict(plain.SETTINGS, out_dir=str(run)), 'cpu')
    x = torch.tensor([list(b'the loop')])
    for K in (3, 5):
        torch.manual_seed(7)
        ref = plain.generate(model, x, 22, n_loops=K, temperature=0.8, top_k=None)
        torch.manual_seed(7)
        y, used, _ = generate(model, x, 22, temperature=0.8, n_loops=K)
        assert torch.equal(y, ref) and bool((used == K).all()), K
    torch.manual_seed(8)  # (another seed gives other text: the equality above is not of two constants)
    assert not torch.equal(plain.generate(model, x, 22, n_loops=5, temperature=0.8), ref)
