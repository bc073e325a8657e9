"""
Every measurement a lent GPU should make, in one command. Each step runs in a process of its
own (a CUDA error or a crash stops that step only), is labelled, prints its elapsed seconds
and keeps its log; a summary at the end repeats every row in the fixed order below.

    python -m beyond.gpu_check                      # one CUDA GPU; about 5-9 minutes on an H100/H200 (estimated, below)
    python -m beyond.gpu_check --cpu                # the same steps at a tiny shape on a CPU (test_gpu_check.py runs it)
    python -m beyond.gpu_check --out=DIR            # the logs: DIR/<n>-<step>.log (default out-gpu-check)
    python -m beyond.gpu_check --only=decode-graphs,train-44m-plain   # some steps (the preflight always runs)
    python -m beyond.gpu_check --step=decode-eager  # one step in this process (what the check runs for each)
    python -m beyond.gpu_check --help               # the settings

The steps, most needed first, so that a run cut short still has them:
  preflight         Python, torch, CUDA and the device; every import the scripts need (the real
                    error if one fails); a one-line torch.compile. Inductor needs a C compiler and
                    Python's headers: if it cannot build, the training rows run eagerly and the
                    compiled decode rows are skipped.
  train-44m-fused   bench.py's timing of train.py's step (forward, backward, clip, AdamW) at the
                    44M shape (config/norm_perloop.py) with GPT-2's vocabulary (the real head, ~40%
                    of the FLOPs), random tokens, dtype auto (bf16), compiled, the fused readout
                    loss: tok_per_s, ms_per_step, tflops, mfu, peak_mem_gib, warmup_s (the compile).
  train-129m-fused  the same at the 129M shape (config/129m.py).
  decode-eager      decoder.generate at the 44M shape, batch 1, random weights, fixed K, sampling:
                    tok_per_s and ms_per_token of a run after a warm-up run of the same tokens
                    (warmup_s: that first run, with the compile and graph recordings where any).
  decode-compiled   the one-loop step compiled by inductor's default mode, no CUDA graphs.
  decode-graphs     compiled as sample.py --compile=on compiles it: mode='reduce-overhead', a CUDA
                    graph (on a CPU, the same code without graphs).
  decode-speculative  draft_loops=1, in decode-graphs' process, on its compiled loop (no compile).
                    Random weights read out near-uniform distributions, so its accept_rate is near 1:
                    the row times the mechanics, not a trained model's speed-up.
  train-44m-plain, train-129m-plain  --loss_path=plain (F.cross_entropy on K logit tensors); last.

Compiles and time: an estimate, since no GPU was lent to the session that wrote this. One compile
per process, 7 in all (each row's compiles= counts dynamo's graphs; the summary adds them up):
  - 8 step processes and the parent, each importing torch (and dynamo) and starting CUDA: ~45 s.
  - preflight: the first Triton kernel in a cold cache (its launcher is built with the C compiler): 10-20 s.
  - 4 training compiles, forward and backward of K=4 unrolled loops (32 blocks at 44M, 48 at 129M):
    ~40-120 s each, 3-6 minutes together; the plain path's compile reuses its shape's block kernels from
    the caches. Dynamo and AOT autograd alone (backend aot_eager) took ~15 s at 44M on a busy
    2-core CPU; inductor's lowering and Triton's kernels come on top.
  - their timed steps: 23 a row of ~24 TFLOP (44M, 64 x 256) or ~31 TFLOP (129M, 32 x 256),
    60-80 ms each at 40% MFU of an H100's 989 TFLOP/s: seconds.
  - 2 decode compiles of one loop (8 blocks, forward only): 15-40 s each.
  - 4 decode rows, two runs of block_size - prompt_tokens = 240 tokens each, at 1-8 ms a token: ~10 s.
So about 5-9 minutes, under 10; the compiles are most of it. The first GPU lent measures it.
"""

import importlib
import os
import platform
import re
import shutil
import subprocess
import sys
import sysconfig
import time

from configurator import UserError, configure, one_line_errors  # (standard library only: torch is imported per step)

# -----------------------------------------------------------------------------
cpu = False                   # True (or --cpu): every step at a tiny shape on the CPU, to check the script itself
out = 'out-gpu-check'         # the folder for the steps' logs (out*/ is git-ignored)
only = ''                     # comma-separated steps to run, in the check's order ('' = all); the preflight always runs
step = ''                     # run this one step in this process and print its rows (the check runs each step so)
compile = 'on'                # 'on' | 'off': off runs the training rows eagerly and skips the compiled decode rows
steps = 20                    # timed training steps per training row
warmup = 3                    # untimed training steps first (the compile happens in the first)
prompt_tokens = 16            # decode rows: a random prompt this long; each run then decodes block_size - prompt_tokens tokens
draft_tokens = 3              # decode-speculative: the most tokens drafted per verify pass (draft_loops=1)
# -----------------------------------------------------------------------------
SETTINGS = {k: v for k, v in list(globals().items()) if not k.startswith('_') and k.islower()
            and isinstance(v, (int, float, bool, str))}
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository root: the steps run there
STEPS = ('preflight', 'train-44m-fused', 'train-129m-fused', 'decode-eager', 'decode-compiled', 'decode-graphs',
         'train-44m-plain', 'train-129m-plain')
ROWS = {'decode-graphs': ('decode-graphs', 'decode-speculative')}  # a step's rows, where not just its own name
COMPILED_DECODE = ('decode-compiled', 'decode-graphs')  # the steps skipped when compile is off
SHAPES = {'44m': ['config/norm_perloop.py'], '129m': ['config/norm_perloop.py', 'config/129m.py']}
# --cpu: a shape whose every row takes a second or so. The training rows run eagerly there: a cold
# inductor compile of the tiny training step took 40 s on a 2-core CPU (the decode loop's took 10 s).
TINY = ['--device=cpu', '--n_layer=1', '--n_head=2', '--n_embd=32', '--n_loops=2', '--block_size=32',
        '--batch_size=2', '--vocab_size=64']


def rows_of(name):
    return ROWS.get(name, (name,))


def row(name, **fields):
    """A step's result: one greppable line, `row NAME: key=value ...`, that the summary repeats."""
    print(f"row {name}: " + ' '.join(f"{k}={v}" for k, v in fields.items()), flush=True)


# -----------------------------------------------------------------------------
# the preflight

def compilers(on_cpu):
    """Where inductor would find what it builds with: Triton's launcher (on a GPU) needs a C compiler
    (CC, else cc/gcc/clang) and inductor's C++ kernels (on a CPU) a C++ one (CXX, else g++); both
    need Python's headers."""
    env, names = ('CXX', ('g++', 'c++', 'clang++')) if on_cpu else ('CC', ('cc', 'gcc', 'clang'))
    chosen = os.environ.get(env)
    found = shutil.which(chosen) if chosen else next(filter(None, map(shutil.which, names)), None)
    headers = os.path.isfile(os.path.join(sysconfig.get_paths()['include'], 'Python.h'))
    return (f"{'C++' if on_cpu else 'C'} compiler ({env}): {found or (chosen or 'none') + ' (not found)'}; "
            f"Python headers (Python.h): {'found' if headers else 'missing (install python3-dev)'}")


def preflight(s):
    import torch
    t0 = time.perf_counter()
    device = 'cpu' if s['cpu'] else 'cuda'
    print(f"python {platform.python_version()} ({sys.executable}); torch {torch.__version__}, "
          f"built for CUDA {torch.version.cuda or 'none (a CPU build)'}", flush=True)
    failed = []
    for name in ('numpy', 'tiktoken', 'model', 'train', 'beyond.bench', 'beyond.decoder'):  # what the steps import
        try:
            importlib.import_module(name)
        except Exception as e:  # (any error at import time: the real one, for the user to fix)
            print(f"cannot import {name}: {type(e).__name__}: {e}", flush=True)
            failed.append(name)
    if failed:
        raise UserError(f"cannot import {', '.join(failed)} (the errors are above): pip install -r requirements.txt "
                         f"into this Python, {sys.executable}")
    if device == 'cuda':
        p = torch.cuda.get_device_properties(0)
        print(f"device: {p.name}, compute capability {p.major}.{p.minor}, {p.total_memory / 2**30:.0f} GiB, "
              f"{torch.cuda.device_count()} visible; bf16 {torch.cuda.is_bf16_supported(including_emulation=False)}")
        if shutil.which('nvidia-smi'):  # the clocks and power limit, which MFU depends on
            smi = subprocess.run(['nvidia-smi', '--query-gpu=name,driver_version,clocks.max.sm,power.limit',
                                  '--format=csv'], capture_output=True, text=True)
            print(smi.stdout.strip())
    print(compilers(device == 'cpu'), flush=True)
    t1 = time.perf_counter()
    try:
        y = torch.compile(lambda x: torch.sin(x) * 2 + 1, fullgraph=True)(torch.ones(8, device=device))
        float(y.sum())
        ok, compile_s = True, time.perf_counter() - t1
    except Exception as e:  # (whatever inductor raised: its first line says why)
        cause = next((line.strip() for line in str(e).splitlines() if line.strip()), '')
        print(f"torch.compile cannot build here ({type(e).__name__}: {cause[:300]}): it needs the compiler and headers "
              "named above. The training rows run eagerly and the compiled decode rows are skipped.", flush=True)
        ok, compile_s = False, time.perf_counter() - t1
    name = torch.cuda.get_device_name(0) if device == 'cuda' else platform.processor() or platform.machine()
    row('preflight', torch=torch.__version__, cuda=torch.version.cuda, device=repr(name),
        compile='ok' if ok else 'failed', compile_s=f"{compile_s:.1f}", compiles=compiles(),
        elapsed_s=f"{time.perf_counter() - t0:.1f}")


def compiles():
    """Graphs dynamo compiled in this process so far (a forward and its backward count as one)."""
    from torch._dynamo.utils import counters
    return counters['stats']['unique_graphs']


# -----------------------------------------------------------------------------
# training rows: bench.py's measurement of train.py's step

def shape_args(s, shape):
    """bench.py's command line for a shape: the config files, then the GPU's or the tiny CPU shape's."""
    from model import LoopedGPTConfig
    argv = [os.path.join(ROOT, f) for f in SHAPES[shape]]
    if s['cpu']:
        return argv + TINY
    # model.py's default vocabulary is GPT-2's BPE (bench.py would otherwise read a prepared dataset's)
    return argv + ['--device=cuda', f'--vocab_size={LoopedGPTConfig.vocab_size}']


def train_row(s, name):
    from beyond import bench
    import torch
    from model import LoopedGPT
    from runtime import peak_flops
    _, shape, path = name.split('-')
    compiled = s['compile'] == 'on' and not s['cpu']
    c, device, dtype, ctx = bench.setup_bench(shape_args(s, shape) + [
        f"--loss_path={path}", f"--compile={'on' if compiled else 'off'}", f"--steps={s['steps']}",
        f"--warmup={s['warmup']}"])
    t0 = time.perf_counter()
    r = bench.bench(c.loss, c, device, dtype, ctx)  # (c.loss: the config's, per-loop CE)
    peak = peak_flops(device, dtype)
    with torch.device('meta'):  # (counted without allocating a second model)
        n_params = LoopedGPT(bench.model_config(c)).get_num_params()
    row(name, tok_per_s=f"{r['tok_s']:.0f}", ms_per_step=f"{r['ms']:.1f}", tflops=f"{r['flops'] / 1e12:.3f}",
        mfu=f"{100 * r['flops'] / peak:.1f}%" if peak else 'n/a',
        peak_mem_gib=f"{r['mem']:.2f}" if r['mem'] is not None else 'n/a', warmup_s=f"{r['warmup_s']:.1f}",
        params=f"{n_params / 1e6:.2f}M", vocab=c.vocab_size,
        batch=f"{c.gradient_accumulation_steps}x{c.batch_size}x{c.block_size}", dtype=dtype,
        compiled='yes' if compiled else 'no', compiles=compiles(), elapsed_s=f"{time.perf_counter() - t0:.1f}")


# -----------------------------------------------------------------------------
# decode rows: decoder.generate, batch 1, at the 44M shape with random weights (speed does not
# depend on what the weights say; the speculative row's acceptance does, so it is printed)

def timed_generate(name, model, prompt, n_new, ctx, device, seed, **kw):
    """Two identical runs (the same seed, so the same tokens and the same calls) on one Stepper
    (kw['stepper']: its weights, compiled loop and KV cache are made once and reused, as a
    long-lived decoder keeps them): the first compiles and records, the second is timed. One row."""
    from beyond import bench
    import torch
    from beyond.decoder import generate
    from runtime import sync
    bench.reset_peak_memory(device)
    before = compiles()
    seconds = []
    for _ in range(2):
        torch.manual_seed(seed)
        t0 = time.perf_counter()
        with ctx:
            _, used, stats = generate(model, prompt, max_new_tokens=n_new, temperature=1.0, top_k=None, **kw)
        sync(device)
        seconds.append(time.perf_counter() - t0)
    fields = dict(tok_per_s=f"{n_new / seconds[1]:.1f}", ms_per_token=f"{1000 * seconds[1] / n_new:.2f}",
                  warmup_s=f"{seconds[0]:.2f}", tokens=n_new, loops=int(used.max()))
    if kw.get('draft_loops'):
        fields.update(accept_rate=f"{stats['accepted'] / max(stats['drafted'], 1):.3f}",
                      tokens_per_pass=f"{stats['accepted'] / max(stats['passes'], 1) + 1:.3f}")
    mem = bench.peak_memory_gib(device)
    row(name, **fields, peak_mem_gib=f"{mem:.2f}" if mem is not None else 'n/a', compiles=compiles() - before,
        elapsed_s=f"{sum(seconds):.1f}")


def decode_rows(s, name):
    from beyond import bench
    import torch
    from beyond.decoder import Stepper
    from model import LoopedGPT
    from runtime import autocast, resolve_dtype
    c, device, _, _ = bench.setup_bench(shape_args(s, '44m'))
    ctx = autocast(device, resolve_dtype(c.dtype, device))  # evaluation's precision: bf16 on a GPU, fp32 on a CPU
    n_new = c.block_size - s['prompt_tokens']  # one window: no restart (a prefill) inside the timed run
    if n_new < 1:
        raise UserError(f"prompt_tokens must be below block_size ({c.block_size}); got {s['prompt_tokens']}")
    torch.manual_seed(c.seed)
    model = LoopedGPT(bench.model_config(c)).to(device).eval()
    prompt = torch.randint(0, c.vocab_size, (1, s['prompt_tokens']), device=device)
    run = dict(model=model, prompt=prompt, n_new=n_new, ctx=ctx, device=device, seed=c.seed)
    with ctx:  # (the Stepper casts the weights to the precision in force)
        stepper = Stepper(model, compile=name != 'decode-eager', graphs=name == 'decode-graphs')
    timed_generate(name, stepper=stepper, **run)
    if name == 'decode-graphs':  # the same compiled loop drafts: no compile of its own
        timed_generate('decode-speculative', stepper=stepper, draft_loops=1, draft_tokens=s['draft_tokens'], **run)


def run_step(s):
    name = s['step']
    if name == 'preflight':
        return preflight(s)
    if name.startswith('train-'):
        return train_row(s, name)
    return decode_rows(s, name)


# -----------------------------------------------------------------------------
# the check: each step in a process of its own, its output to the screen and its log

def run_child(s, name, log_path):
    """Runs one step as `python -m beyond.gpu_check --step=NAME`; returns (exit code, its rows, last line)."""
    passed = {k: v for k, v in s.items() if k not in ('out', 'only', 'step')}
    cmd = [sys.executable, '-m', 'beyond.gpu_check', f'--step={name}', *(f'--{k}={v!r}' for k, v in passed.items())]
    rows, last = {}, ''
    env = dict(os.environ, PYTHONUNBUFFERED='1')  # (the log shows each line as it comes)
    with open(log_path, 'w') as log:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT, env=env)
        for line in proc.stdout:
            sys.stdout.write(line)
            log.write(line)
            m = re.match(r'row (\S+): (.*)$', line)
            if m:
                rows[m.group(1)] = m.group(2)
            last = line.strip() or last
        rc = proc.wait()
    return rc, rows, last


def check_settings(s):
    if s['compile'] not in ('on', 'off'):
        raise UserError(f"compile must be on or off; got {s['compile']!r}")
    for key, lowest in (('steps', 1), ('warmup', 0), ('prompt_tokens', 1), ('draft_tokens', 1)):
        if s[key] < lowest:
            raise UserError(f"setting '{key}' must be at least {lowest}; got {s[key]!r}")
    wanted = [n for n in s['only'].split(',') if n]
    unknown = [n for n in wanted + ([s['step']] if s['step'] else []) if n not in STEPS]
    if unknown:
        raise UserError(f"unknown step {unknown[0]!r}: the steps are {', '.join(STEPS)}")
    return ['preflight'] + [n for n in STEPS[1:] if not wanted or n in wanted]


def require_torch(on_cpu):
    """torch imports, and (without --cpu) sees a CUDA GPU; else one line that says which and why."""
    try:
        import torch
    except Exception as e:  # (the real error: a missing package is not "no GPU")
        raise UserError(f"cannot import torch ({type(e).__name__}: {e}): pip install -r requirements.txt "
                         f"into this Python, {sys.executable}")
    if not on_cpu and not torch.cuda.is_available():
        build = f"built for CUDA {torch.version.cuda}" if torch.version.cuda else 'a CPU-only build'
        raise UserError(f"no CUDA GPU here (torch {torch.__version__}, {build}): this check measures a GPU; "
                         "pass --cpu for the smoke run of the same steps at a tiny shape")


def run_steps(s, todo):
    """Each step in order, in a process of its own. Returns ({row: its fields}, {row: why it has
    none}, whether the preflight's compile failed)."""
    results, problems = {}, {}
    compile_failed = False  # (a deliberate --compile=off skips the compiled decode rows without failing)
    for i, name in enumerate(todo, 1):
        if name in COMPILED_DECODE and s['compile'] == 'off':
            why = 'the preflight could not compile' if compile_failed else '--compile=off'
            problems.update((r, f"SKIPPED: compile is off ({why})") for r in rows_of(name))
            print(f"\n=== [{i}/{len(todo)}] {name}: skipped ({why})", flush=True)
            continue
        print(f"\n=== [{i}/{len(todo)}] {name}", flush=True)
        log_path = os.path.join(s['out'], f"{STEPS.index(name) + 1}-{name}.log")  # (numbered in the full order)
        t0 = time.perf_counter()
        rc, rows, last = run_child(s, name, log_path)
        print(f"--- {name}: {'ok' if rc == 0 else f'FAILED (exit {rc})'}, {time.perf_counter() - t0:.1f} s", flush=True)
        results.update(rows)
        problems.update((r, f"FAILED (exit {rc}): {last[:200]} (log: {log_path})") for r in rows_of(name) if r not in rows)
        if name == 'preflight':
            if 'preflight' not in rows:  # (an import failed: every other step would fail the same way)
                raise UserError(f"the preflight failed ({last[:300]}); its log: {log_path}")
            compile_failed = 'compile=failed' in rows['preflight']
            if compile_failed:
                s['compile'] = 'off'
    return results, problems, compile_failed


def main(argv):
    argv = ['--cpu=True' if a == '--cpu' else a for a in argv]  # (--cpu alone, as a flag)
    s = configure(SETTINGS, argv, scripts=[__file__])
    todo = check_settings(s)
    require_torch(s['cpu'])
    if s['step']:
        return run_step(s)
    os.makedirs(s['out'], exist_ok=True)
    t0 = time.perf_counter()
    results, problems, compile_failed = run_steps(s, todo)
    # -------------------------------------------------------------------------
    print(f"\n=== summary, in the check's order (logs in {s['out']}/)")
    names = [r for name in todo for r in rows_of(name)]
    width = max(map(len, names)) + 2
    for r in names:
        print(f"{r:<{width}}{results.get(r, problems.get(r))}")
    total = sum(int(n) for fields in results.values() for n in re.findall(r'\bcompiles=(\d+)', fields))
    print(f"total {time.perf_counter() - t0:.1f} s, {total} compiles (each row's compiles=: dynamo's graphs)")
    missing = [r for r in names if r not in results and (compile_failed or not problems[r].startswith('SKIPPED'))]
    if missing:
        raise UserError(f"{len(missing)} of {len(names)} rows not measured ({', '.join(missing)}): see above and their logs")


if __name__ == '__main__':
    with one_line_errors('gpu_check.py'):
        main(sys.argv[1:])
