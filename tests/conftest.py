"""
Shared test fixtures (run the tests from the repository root: python -m pytest -q): tiny byte-level data made by prepare.py, and a runner for the scripts.
Nothing here needs the network or anything outside the repo.
"""

import contextlib
import fcntl
import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import tempfile

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
    save = matplotlib.figure.Figure.savefig  # figures at 20 dpi, without a second drawing for a tight box
    matplotlib.figure.Figure.savefig = lambda fig, path, **kw: save(fig, path, **{**kw, 'dpi': 20,
                                                                                   'bbox_inches': None})
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


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef, request):
    """A shared fixture is made in the first test that uses it; mutmut would credit what it calls to that
    test alone. Recorded here, it is credited to every test that uses the fixture (below)."""
    if 'MUTMUT_HITS_FILE' not in os.environ:
        yield
        return
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


def pytest_collection_modifyitems(config, items):
    """mutmut's run of a mutant takes the tests that call the mutated function in no fixed order, which would make
    each file's shared fixtures again at each switch of file: its tests go file by file, in each file's
    own order, the files whose tests took least time in mutmut's stats run first (at the first failure
    the run stops)."""
    if 'MUTANT_UNDER_TEST' not in os.environ:  # (mutmut's runs of a mutant, and its clean run: '')
        return
    from mutmut.state import state
    seconds = {}
    for item in items:
        path = item.nodeid.split('::')[0]
        seconds[path] = seconds.get(path, 0.0) + state().duration_by_test.get(item.nodeid, 0.0)
    items.sort(key=lambda item: (seconds[item.nodeid.split('::')[0]], item.nodeid.split('::')[0],
                                 item.location[1] or 0))
