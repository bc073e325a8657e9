"""
Every measurement a lent GPU should make, in three commands (parts), each estimated at under 9
minutes (a lent GPU gives about 10 a command; --help prints the estimates). Each step runs in a
process of its own (a CUDA error or a crash stops that step only), is labelled, prints its elapsed
seconds and appends its output to one log; a summary at the end repeats every row in the fixed order
below, and a markdown report keeps them. Every output, the report and the log, is in the --out folder
(two files), so a batch job that returns one folder returns all of it.

    python -m beyond.gpu_check --part=fused         # preflight, train-44m-fused, train-129m-fused, train-44m-padded: ~6.8 min
    python -m beyond.gpu_check --part=decode        # preflight, decode-eager, decode-compiled, decode-graphs, correctness: ~5.1 min
    python -m beyond.gpu_check --part=plain         # preflight, train-44m-plain, train-129m-plain: ~4.7 min
    python -m beyond.gpu_check                      # every step in one command: ~15.7 min, more than a lent GPU's 10
    python -m beyond.gpu_check --cpu                # the same steps at a tiny shape on a CPU (test_gpu_check.py runs it)
    python -m beyond.gpu_check --out=DIR            # DIR/gpu_check.log and DIR/<device>[-<part>].md (default out-gpu-check)
    python -m beyond.gpu_check --fail_on_skip       # a decode row whose CUDA graphs inductor skipped fails
    python -m beyond.gpu_check --only=decode-graphs,train-44m-plain   # some steps (the preflight always runs)
    bash assets/gpu/run.sh OUT_DIR                  # the 10-minute GPU job: fused 44M, decode, correctness, CUDA tests
    python -m beyond.gpu_check --step=decode-eager  # one step in this process (what the check runs for each)
    python -m beyond.gpu_check --help               # the settings, and each part's estimate with its steps'

The minutes are estimates for one H100-class GPU (estimate(), whose arithmetic is below): no GPU
has run this check yet.

The steps, most needed first, so that a run cut short still has them:
  preflight         Python, torch, CUDA and the device, with a warning when torch is outside
                    requirements.txt's range (a GPU image's own torch often is); every import the scripts need (the real
                    error if one fails); a one-line torch.compile. Inductor needs a C compiler and
                    Python's headers: if it cannot build, the training rows run eagerly and the
                    compiled decode rows are skipped. It runs first in every command.
  train-44m-fused   bench.py's timing of train.py's step (forward, backward, clip, AdamW) at the
                    44M shape (config/norm_perloop.py) with GPT-2's vocabulary (the real head, ~40%
                    of the FLOPs), random tokens, dtype auto (bf16), compiled, the fused readout
                    loss: tok_per_s, ms_per_step, tflops, mfu, peak_mem_gib, warmup_s (the compile).
  train-129m-fused  the same at the 129M shape (config/129m.py).
  train-44m-padded  train-44m-fused with the vocabulary padded to a multiple of 64 (50,257 -> 50,304,
                    as nanoGPT pads it): what padding buys. Compare ms_per_step (tok_per_s), not mfu:
                    the padded head's extra columns count as FLOPs there.
  decode-eager      decoder.generate at the 44M shape, batch 1, random weights, fixed K, sampling:
                    tok_per_s and ms_per_token of a run after a warm-up run of the same tokens
                    (warmup_s: that first run, with the compile and graph recordings where any).
  decode-compiled   the fixed-K token compiled by inductor's default mode (one graph), no CUDA graphs.
  decode-graphs     compiled as python -m beyond.sample --compile=on compiles it: mode='reduce-overhead', a CUDA
                    graph (on a CPU, the same code without graphs).
  decode-speculative  draft_loops=1, in decode-graphs' process: its drafts compile the one-loop graph.
                    Random weights read out near-uniform distributions, so its accept_rate is near 1:
                    the row times the mechanics, not a trained model's speed-up.
                    Every decode row reports recompiles (dynamo compiled a function again: a guard
                    failed) and cudagraph_skips (inductor ran without CUDA graphs, which it only logs:
                    a graphs row is then the compiled one); --fail_on_skip fails such a row.
  correctness       what the decoder computes in bf16 at the 44M shape (random weights): check_tokens
                    positions decoded one at a time, eager, compiled and CUDA graphs, and model.forward,
                    each against a float32 forward (max |delta logit|, top-1 agreement), the decoder's
                    against model.forward in bf16 (_vs_forward), and the fixed-K token's one graph
                    (static_token) against K one-loop steps (static_loop); logit_std for the scale.
                    Reported, not asserted: bf16 rounds differently in each path.
  train-44m-plain, train-129m-plain  --loss_path=plain (F.cross_entropy on K logit tensors); last.
One compile per row (each row's compiles= counts dynamo's graphs; the summary adds them up).

The estimate (estimate() and START_S... below; --help prints it). A lent GPU gives about 10 minutes
a command, so every part's estimate must be at most 9 (test_gpu_check.py checks it); the report
puts each step's measured seconds beside its estimate, and the first GPU lent corrects them.
  - every process, the check's own and each step's: Python's start, torch's import, CUDA's: 5 s.
  - preflight: + 20 s for its first Triton kernel in a cold cache (its launcher is built with the C
    compiler: 10-20 s).
  - a training step: + 120 s for its compile, forward and backward of K=4 unrolled loops (32 blocks
    at 44M, 48 at 129M). 40-120 s is a guess, so the top is taken, and no credit for kernels a
    cache already holds: dynamo and AOT autograd alone (backend aot_eager) took ~15 s at 44M on a
    busy 2-core CPU; inductor's lowering and Triton's kernels come on top. Then its warmup + steps
    = 23 steps of model.flops_per_token() x the tokens of a step (24.1 TFLOP at 44M, 64 x 256;
    30.8 TFLOP at 129M, 32 x 256) at 40% MFU of an H100's 989 TFLOP/s bf16 dense: 1.4 s and 1.8 s.
    So ~126.5 s a training step, the compile nearly all of it.
  - a decode row: two runs of block_size - prompt_tokens = 240 tokens at 8 ms a token (the eager
    loop's 32 blocks of kernel launches a token; the compiled loop is faster): 3.8 s; decode-graphs
    has two rows (its speculative one). The compiled rows + 40 s each for a compile (a fixed-K token,
    32 blocks forward only, or one loop for the drafts; 15-40 s guessed): decode-graphs two. So 8.8 s,
    48.8 s and 92.7 s.
  - correctness: three compiles (the compiled and the graphs token, the graphs one-loop step: 40 s
    each, as above) and four passes of check_tokens = 64 tokens at 8 ms: 5 + 120 + 2 = 127 s.
So fused 5 + 25 + 3 x 126.5 s = ~6.8 min, decode 5 + 25 + 8.8 + 48.8 + 92.7 + 127 s = ~5.1 min and
plain 5 + 25 + 2 x 126.5 s = ~4.7 min; every step in one command ~15.7 min.

The report: after each step, <out>/<device>.md (the device as torch.cuda.get_device_name says,
lowercased, spaces -> '-'; <device>-<part>.md for a part, <device>-only.md for --only; cpu[...].md
with --cpu); a GPU's report is committed by copying it into assets/gpu/. It holds the date, torch,
CUDA and Python, the device, the command line, every row and each step's seconds beside its estimate. Each
write replaces the whole file at once (a temporary file, then os.replace), and it says whether the
run is complete: a run cut short leaves a report of the steps it finished, marked so.
"""

import importlib
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import time
from types import SimpleNamespace

from configurator import UserError, configure, help_text, one_line_errors  # (standard library only: torch is imported per step)

# -----------------------------------------------------------------------------
cpu = False                   # True (or --cpu): every step at a tiny shape on the CPU, to check the script itself
out = 'out-gpu-check'         # the one folder of every output: the report and the log (out*/ is git-ignored)
part = ''                     # one part of the check, a command each on a lent GPU: fused | decode | plain ('' = every step)
only = ''                     # or: comma-separated steps to run, in the check's order ('' = all); the preflight always runs
step = ''                     # run this one step in this process and print its rows (the check runs each step so)
compile = 'on'                # 'on' | 'off': off runs the training rows eagerly and skips the compiled decode rows
fail_on_skip = False          # True: a decode row whose CUDA graphs inductor skipped (cudagraph_skips > 0) fails
check_tokens = 64             # correctness: positions decoded one at a time and compared with model.forward
steps = 20                    # timed training steps per training row
warmup = 3                    # untimed training steps first (the compile happens in the first)
prompt_tokens = 16            # decode rows: a random prompt this long; each run then decodes block_size - prompt_tokens tokens
draft_tokens = 3              # decode-speculative: the most tokens drafted per verify pass (draft_loops=1)
speculative = True            # False: decode-graphs without its speculative row (and its compile: assets/gpu/run.sh)
# -----------------------------------------------------------------------------
SETTINGS = {k: v for k, v in list(globals().items()) if not k.startswith('_') and k.islower()
            and isinstance(v, (int, float, bool, str))}
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository root: the steps run there
STEPS = ('preflight', 'train-44m-fused', 'train-129m-fused', 'train-44m-padded', 'decode-eager', 'decode-compiled',
         'decode-graphs', 'correctness', 'train-44m-plain', 'train-129m-plain')
PARTS = {'fused': ('train-44m-fused', 'train-129m-fused', 'train-44m-padded'),  # each after the preflight
         'decode': ('decode-eager', 'decode-compiled', 'decode-graphs', 'correctness'),
         'plain': ('train-44m-plain', 'train-129m-plain')}
ROWS = {'decode-graphs': ('decode-graphs', 'decode-speculative')}  # a step's rows, where not just its own name
COMPILED_DECODE = ('decode-compiled', 'decode-graphs')  # the steps skipped when compile is off (correctness: its eager part runs)
LOG = 'gpu_check.log'         # every step's output, one after the other, in the out folder (beside the report)
SHAPES = {'44m': ['config/norm_perloop.py'], '129m': ['config/norm_perloop.py', 'config/129m.py']}
PAD = 64                      # train-44m-padded rounds the vocabulary up to a multiple of this (nanoGPT's 50,304)
# --cpu: a shape whose every row takes a second or so. The training rows run eagerly there: a cold
# inductor compile of the tiny training step took 40 s on a 2-core CPU (the decode loop's took 10 s).
TINY = ['--device=cpu', '--n_layer=1', '--n_head=2', '--n_embd=32', '--n_loops=2', '--block_size=32',
        '--batch_size=2']
TINY_VOCAB = 50               # --cpu's vocabulary: train-44m-padded's is 64
# the estimate, for one H100-class GPU (the docstring's arithmetic)
START_S = 5                   # a process: Python's start, torch's import, CUDA's start
PREFLIGHT_S = 20              # the preflight's first Triton kernel, in a cold cache
TRAIN_COMPILE_S = 120         # a training step's compile: K=4 unrolled loops, forward and backward
DECODE_COMPILE_S = 40         # a compiled decode step's compile: one loop, forward only
FLOP_S = 0.40 * 989e12        # 40% MFU of an H100's bf16 dense peak
DECODE_TOKEN_S = 0.008        # a decoded token, batch 1 (the eager loop's; the compiled ones are faster)
LIMIT_S = 9 * 60              # the most a part's estimate may be: a lent GPU gives about 10 minutes a command


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
        if s.get('compile', 'on') == 'off':  # (nothing will compile: not tried, a few seconds saved)
            ok = None
        else:
            float(torch.compile(lambda x: torch.sin(x) * 2 + 1, fullgraph=True)(torch.ones(8, device=device)).sum())
            ok = True
        compile_s = time.perf_counter() - t1
    except Exception as e:  # (whatever inductor raised: its first line says why)
        cause = next((line.strip() for line in str(e).splitlines() if line.strip()), '')
        print(f"torch.compile cannot build here ({type(e).__name__}: {cause[:300]}): it needs the compiler and headers "
              "named above. The training rows run eagerly and the compiled decode rows are skipped.", flush=True)
        ok, compile_s = False, time.perf_counter() - t1
    name = torch.cuda.get_device_name(0) if device == 'cuda' else platform.processor() or platform.machine()
    warning = torch_warning(torch.__version__)
    if warning:
        print(f"warning: {warning}", flush=True)
    row('preflight', torch=torch.__version__, cuda=torch.version.cuda, python=platform.python_version(),
        torch_in_range='no' if warning else 'yes', device=repr(name),
        compile={True: 'ok', None: 'off', False: 'failed'}[ok], compile_s=f"{compile_s:.1f}", compiles=compiles(),
        elapsed_s=f"{time.perf_counter() - t0:.1f}")


def compiles():
    """Graphs dynamo compiled in this process so far (a forward and its backward count as one)."""
    from torch._dynamo.utils import counters
    return counters['stats']['unique_graphs']


def graph_counts():
    """What says a compiled row is not what it claims, so far in this process: recompiles (dynamo
    compiled a function again because a guard failed: its compilation metrics with a
    recompile_reason; they keep the last 64) and cudagraph_skips (inductor ran a graph without
    CUDA graphs, which it only logs: the row is then the compiled one, not graphs)."""
    from torch._dynamo.utils import counters, get_compilation_metrics
    return dict(recompiles=sum(m.recompile_reason is not None for m in get_compilation_metrics()),
                cudagraph_skips=counters['inductor']['cudagraph_skips'])


def graph_fields(before):
    """The rows' recompiles= and cudagraph_skips= since `before` (a graph_counts())."""
    return {k: v - before[k] for k, v in graph_counts().items()}


def skipped_graphs(s, name, fields):
    """With --fail_on_skip, a row whose CUDA graphs were skipped: the error that fails it (else None)."""
    if s['fail_on_skip'] and fields['cudagraph_skips'] > 0:
        return (f"{name}: inductor skipped CUDA graphs {fields['cudagraph_skips']} time(s) (the reason is in the "
                "log above: TORCH_LOGS=perf_hints prints it), so the row would time the compiled loop, not graphs")
    return None


def torch_range(path=os.path.join(ROOT, 'requirements.txt')):
    """requirements.txt's torch specifiers, e.g. ['>=2.13', '<2.15'] ([] where it names none)."""
    with open(path) as f:
        for line in f:
            m = re.match(r'\s*torch\s*((?:[<>=!~]=?\s*[\w.]+\s*,?\s*)+)', line.split('#')[0])
            if m:
                return [re.sub(r'\s', '', spec) for spec in m.group(1).split(',') if spec.strip()]
    return []


def version_tuple(v):
    """'2.13.0+cu128' -> (2, 13, 0); '2.15.0.dev20260101' -> (2, 15, 0)."""
    return tuple(int(n) for n in re.findall(r'\d+', v.split('+')[0])[:3])


def torch_warning(version, specs=None):
    """What to warn of when this torch is outside requirements.txt's range (the tests pass inside it), else ''."""
    specs = torch_range() if specs is None else specs
    ops = {'>=': lambda a, b: a >= b, '>': lambda a, b: a > b, '<=': lambda a, b: a <= b, '<': lambda a, b: a < b,
           '==': lambda a, b: a[:len(b)] == b, '!=': lambda a, b: a[:len(b)] != b,
           '~=': lambda a, b: a >= b}  # (~= read as >= only: requirements.txt uses >= and <)
    have = version_tuple(version)
    broken = [spec for spec in specs
              for op in [re.match(r'[<>=!~]=?', spec).group()] if not ops[op](have, version_tuple(spec[len(op):]))]
    if not broken:
        return ''
    return (f"torch {version} is outside requirements.txt's range ({','.join(specs)}): the numbers may "
            "differ from a tested torch's, and a failure may be this torch's")


# -----------------------------------------------------------------------------
# training rows: bench.py's measurement of train.py's step

def step_argv(s, name):
    """bench.py's command line for a step: its shape's config files (a decode step's: 44M's), the
    GPU's settings or the tiny CPU shape, the vocabulary, and a training step's loss path."""
    from model import LoopedGPTConfig
    shape = name.split('-')[1] if name.startswith('train-') else '44m'
    argv = [os.path.join(ROOT, f) for f in SHAPES[shape]] + (TINY if s['cpu'] else ['--device=cuda'])
    vocab = TINY_VOCAB if s['cpu'] else LoopedGPTConfig.vocab_size  # GPT-2's BPE (bench.py would read a dataset's)
    if name.endswith('-padded'):
        vocab = -(-vocab // PAD) * PAD  # rounded up to a multiple of PAD
    argv.append(f'--vocab_size={vocab}')
    if name.startswith('train-'):
        argv.append(f"--loss_path={'plain' if name.endswith('-plain') else 'fused'}")
    return argv


def train_row(s, name):
    from beyond import bench
    import torch
    from runtime import peak_flops
    compiled = s['compile'] == 'on' and not s['cpu']
    c, device, dtype, ctx = bench.setup_bench(step_argv(s, name) + [
        f"--compile={'on' if compiled else 'off'}", f"--steps={s['steps']}", f"--warmup={s['warmup']}"])
    t0 = time.perf_counter()
    r = bench.bench(c.loss, c, device, dtype, ctx)  # (c.loss: the config's, per-loop CE)
    peak = peak_flops(device, dtype)
    with torch.device('meta'):  # (counted without allocating a second model)
        n_params = bench.model_class(c)(bench.model_config(c)).get_num_params()
    row(name, tok_per_s=f"{r['tok_s']:.0f}", ms_per_step=f"{r['ms']:.1f}", tflops=f"{r['flops'] / 1e12:.3f}",
        mfu=f"{100 * r['flops'] / peak:.1f}%" if peak else 'n/a',
        peak_mem_gib=f"{r['mem']:.2f}" if r['mem'] is not None else 'n/a', warmup_s=f"{r['warmup_s']:.1f}",
        params=f"{n_params / 1e6:.2f}M", vocab=c.vocab_size,
        batch=f"{c.gradient_accumulation_steps}x{c.batch_size}x{c.block_size}", dtype=dtype,
        compiled='yes' if compiled else 'no', compiles=compiles(), elapsed_s=f"{time.perf_counter() - t0:.1f}")


# -----------------------------------------------------------------------------
# decode rows: decoder.generate, batch 1, at the 44M shape with random weights (speed does not
# depend on what the weights say; the speculative row's acceptance does, so it is printed)

def timed_generate(s, name, model, prompt, n_new, ctx, device, seed, **kw):
    """Two identical runs (the same seed, so the same tokens and the same calls) on one Stepper
    (kw['stepper']: its weights, compiled loop and KV cache are made once and reused, as a
    long-lived decoder keeps them): the first compiles and records, the second is timed. One row."""
    from beyond import bench
    import torch
    from beyond.decoder import generate
    from runtime import sync
    bench.reset_peak_memory(device)
    before, graphs_before = compiles(), graph_counts()
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
    if kw.get('draft_loops'):  # (the drafts run the compiled one-loop graph; the verify pass, n+1 tokens at once, is eager)
        fields.update(accept_rate=f"{stats['accepted'] / max(stats['drafted'], 1):.3f}",
                      tokens_per_pass=f"{stats['accepted'] / max(stats['passes'], 1) + 1:.3f}", verify='eager')
    mem = bench.peak_memory_gib(device)
    counted = graph_fields(graphs_before)
    failed = skipped_graphs(s, name, counted)
    if failed:  # (no row: the check marks it FAILED with the step's last line, this one)
        return failed
    row(name, **fields, peak_mem_gib=f"{mem:.2f}" if mem is not None else 'n/a', compiles=compiles() - before,
        **counted, elapsed_s=f"{sum(seconds):.1f}")


def decode_rows(s, name):
    from beyond import bench
    import torch
    from beyond.decoder import Stepper
    from runtime import autocast, resolve_dtype
    c, device, _, _ = bench.setup_bench(step_argv(s, name))
    ctx = autocast(device, resolve_dtype(c.dtype, device))  # evaluation's precision: bf16 on a GPU, fp32 on a CPU
    n_new = c.block_size - s['prompt_tokens']  # one window: no restart (a prefill) inside the timed run
    if n_new < 1:
        raise UserError(f"prompt_tokens must be below block_size ({c.block_size}); got {s['prompt_tokens']}")
    torch.manual_seed(c.seed)
    model = bench.model_class(c)(bench.model_config(c)).to(device).eval()
    prompt = torch.randint(0, c.vocab_size, (1, s['prompt_tokens']), device=device)
    run = dict(model=model, prompt=prompt, n_new=n_new, ctx=ctx, device=device, seed=c.seed)
    with ctx:  # (the Stepper casts the weights to the precision in force)
        stepper = Stepper(model, compile=name != 'decode-eager', graphs=name == 'decode-graphs')
    failed = [timed_generate(s, name, stepper=stepper, **run)]
    if name == 'decode-graphs' and s['speculative']:  # the same Stepper drafts, with its one-loop graph (a compile of its own)
        failed.append(timed_generate(s, 'decode-speculative', stepper=stepper, draft_loops=1,
                                     draft_tokens=s['draft_tokens'], **run))
    if any(failed):
        raise UserError('; '.join(filter(None, failed)))


# -----------------------------------------------------------------------------
# the correctness row: what the decoder computes in bf16, against model.forward and float32.
# Reported, not asserted: bf16 rounds differently in every path (inductor fuses and reorders),
# so the numbers say how far apart they are, and top-1 says whether that changes a greedy token.

def stepwise(model, stepper, x, one_loop=False):
    """Logits (T, vocab), float32, of every position of x (1, T), decoded one token at a time through
    the KV cache as generate decodes them at fixed K (decoder.decode: one compiled graph a token,
    static_token), or with one_loop, K calls of the one-loop graph (static_loop), as exits and drafts
    run it."""
    import torch
    from beyond.decoder import decode
    K = model.config.n_loops
    cache = stepper.cache(1, K)
    out = []
    for t in range(x.size(1)):
        if not one_loop:
            out.append(decode(model, x[:, t:t + 1], cache, stepper=stepper)[0])
            continue
        h = e = model.embed(x[:, t:t + 1], t)  # (1, 1, C)
        for k in range(K):
            h = stepper.loops(h, t, cache, k, k + 1, e=e)
        out.append(stepper.logits(h, last=True))
        cache.length = t + 1
    return torch.cat(out, 1)[0].float()  # (T, vocab)


def compare(logits, reference):
    """max |delta logit| and top-1 agreement of logits (T, vocab) with a reference's."""
    top1 = (logits.argmax(-1) == reference.argmax(-1)).float().mean()
    return f"{(logits - reference).abs().max().item():.3g}", f"{top1.item():.3f}"


def correctness_row(s, name):
    from beyond import bench
    import torch
    from beyond.decoder import Stepper
    from runtime import autocast
    c, device, _, _ = bench.setup_bench(step_argv(s, name))
    T = min(s['check_tokens'], c.block_size)
    torch.manual_seed(c.seed)
    model = bench.model_class(c)(bench.model_config(c)).to(device).eval()  # (random weights at the config's init)
    x = torch.randint(0, c.vocab_size, (1, T), device=device)
    before, graphs_before, t0 = compiles(), graph_counts(), time.perf_counter()
    modes = {'eager': dict()}
    if s['compile'] == 'on':  # (off: the compiled paths are not measured)
        modes.update(compiled=dict(compile=True, graphs=False), graphs=dict(compile=True, graphs=True))
    with torch.no_grad():
        exact = model(x)[0][0].float()  # (T, vocab): float32, the reference
        with autocast(device, 'bfloat16'):
            forward = model(x)[0][0].float()
            steppers = {mode: Stepper(model, **kw) for mode, kw in modes.items()}  # (weights cast to bf16 once each)
            decoded = {mode: stepwise(model, st, x) for mode, st in steppers.items()}
            loops = stepwise(model, steppers['graphs'], x, one_loop=True) if 'graphs' in steppers else None
    fields = dict(positions=T, dtype='bfloat16', logit_std=f"{exact.std().item():.3g}")
    for what, logits in (('forward', forward), *decoded.items()):
        fields[f'{what}_dlogit'], fields[f'{what}_top1'] = compare(logits, exact)  # against float32
    for what, logits in decoded.items():
        fields[f'{what}_vs_forward'] = compare(logits, forward)[0]  # against model.forward in bf16
    if loops is not None:  # static_token (one graph a token) against K static_loop calls, the graphs stepper's
        fields['token_vs_loops_dlogit'], fields['token_vs_loops_top1'] = compare(decoded['graphs'], loops)
    counted = graph_fields(graphs_before)
    failed = skipped_graphs(s, name, counted)
    if failed:
        raise UserError(failed)
    row(name, **fields, compiles=compiles() - before, **counted, elapsed_s=f"{time.perf_counter() - t0:.1f}")


def run_step(s):
    name = s['step']
    if name == 'preflight':
        return preflight(s)
    if name.startswith('train-'):
        return train_row(s, name)
    if name == 'correctness':
        return correctness_row(s, name)
    return decode_rows(s, name)


# -----------------------------------------------------------------------------
# the estimate: the docstring's arithmetic, for one H100-class GPU

def estimate(s, name):
    """The seconds step `name` should take on one H100-class GPU, at the GPU shapes (with --cpu too)
    and compile on: its process's start, its compile, and its work."""
    if name == 'preflight':
        return START_S + PREFLIGHT_S
    from beyond import bench
    import torch
    gpu = step_argv(dict(s, cpu=False), name)
    c = SimpleNamespace(**bench.train.setup(gpu, settings={**bench.train.SETTINGS, **bench.BENCH}))  # (no device)
    if name.startswith('train-'):
        with torch.device('meta'):
            flops_per_token = bench.model_class(c)(bench.model_config(c)).flops_per_token()
        tokens = c.gradient_accumulation_steps * c.batch_size * c.block_size
        return START_S + TRAIN_COMPILE_S + (s['warmup'] + s['steps']) * flops_per_token * tokens / FLOP_S
    if name == 'correctness':  # four stepwise passes (eager, compiled, graphs, graphs' K one-loop calls), three compiles
        return START_S + 3 * DECODE_COMPILE_S + 4 * min(s['check_tokens'], c.block_size) * DECODE_TOKEN_S
    rows = 2 if name == 'decode-graphs' and s['speculative'] else 1
    tokens = rows * 2 * max(c.block_size - s['prompt_tokens'], 0)  # two runs a row
    compiles = rows if name in COMPILED_DECODE else 0  # (decode-graphs' drafts: the loop graph)
    return START_S + compiles * DECODE_COMPILE_S + tokens * DECODE_TOKEN_S


def estimates(s):
    """{step: its estimated seconds}, for every step."""
    return {name: estimate(s, name) for name in STEPS}


def command_s(est, todo):
    """A command's estimate: its own process's start, then its steps'."""
    return START_S + sum(est[name] for name in todo)


def over_limit(s, parts=PARTS):
    """The parts whose command (the preflight, then the part's steps) is estimated at over LIMIT_S."""
    est = estimates(s)
    return [p for p, names in parts.items() if command_s(est, ['preflight', *names]) > LIMIT_S]


def parts_text(s):
    """Each part's command and estimate, with its steps' (--help prints it)."""
    est = estimates(s)
    lines = [f"Parts, one command each (a lent GPU gives about 10 minutes a command: each estimate at most "
             f"{LIMIT_S // 60} min),\nestimated for one H100-class GPU (the arithmetic: the docstring; "
             f"every process's start is {START_S} s of it):"]
    for p, names in PARTS.items():
        todo = ['preflight', *names]
        lines.append(f"  --part={p:<7} ~{command_s(est, todo) / 60:.1f} min: "
                     + ', '.join(f"{name} {est[name]:.0f} s" for name in todo))
    lines.append(f"  every step in one command: ~{command_s(est, STEPS) / 60:.1f} min")
    return '\n'.join(lines)


# -----------------------------------------------------------------------------
# the report: <out>/<device>[-<part>].md, rewritten whole after each step

def fields_of(text):
    """A row's key=value fields as a dict (a quoted value unquoted: the preflight's device='...')."""
    return dict(field.split('=', 1) for field in shlex.split(text))


def report_path(s, device):
    """<out>/<device>[-<part>].md, <device>-only.md for --only; with --cpu, cpu[...].md: beside the log, so
    that a batch job returns every output from one folder (assets/gpu/ keeps the ones committed)."""
    kind = 'cpu' if s['cpu'] else re.sub(r'[^a-z0-9.]+', '-', device.lower()).strip('-')  # NVIDIA H200 -> nvidia-h200
    kind += f"-{s['part']}" if s['part'] else '-only' if s['only'] else ''
    return os.path.join(s['out'], f"{kind}.md")


def write_report(path, text):
    """The whole report at once: a temporary file beside it, then os.replace (never half of one)."""
    os.makedirs(os.path.dirname(path) or '.', exist_ok=True)
    with open(path + '.tmp', 'w') as f:
        f.write(text)
    os.replace(path + '.tmp', path)


def report_text(s, command, todo, lines, elapsed, est, total_s, done):
    """The report's markdown. lines: the summary's (row, text); elapsed: {step: measured seconds} of
    the steps that ran; total_s: this command's seconds so far."""
    pre = fields_of(dict(lines)['preflight'])
    ran = sum(all(not text.startswith('not run') for r, text in lines if r in rows_of(name)) for name in todo)
    own_s = total_s - sum(elapsed.values())  # this process: its start, torch's import, the bookkeeping
    out = [f"# gpu_check on {pre['device']}", '',
           f"**Complete**: all {len(todo)} steps ran (a FAILED row says why it has no numbers)." if done else
           f"**Incomplete**: {ran} of {len(todo)} steps ran (the run was still going, or was cut short).", '',
           f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
           f"- device: {pre['device']}; torch {pre['torch']}, CUDA {pre['cuda']}, Python {pre.get('python', '?')}",
           *([f"- **warning**: {torch_warning(pre['torch'])}"] if pre.get('torch_in_range') == 'no' else []),
           f"- command: `{command}`",
           f"- log: {os.path.join(s['out'], LOG)} (every step's output, in order)", '',
           '## Rows', '', 'As the summary prints them.', '', '| row | result |', '|---|---|']
    out += [f"| {r} | {text.replace('|', '&#124;')} |" for r, text in lines]  # (a '|' would end the cell)
    out += ['', '## Seconds', '',
            'Estimated for one H100-class GPU at the GPU shapes (the arithmetic: beyond/gpu_check.py\'s docstring); '
            + ('measured here, at --cpu\'s tiny shape.' if s['cpu'] else 'measured here.'), '',
            '| step | estimated s | measured s |', '|---|---|---|',
            f"| this process (start, torch, bookkeeping) | {START_S:.0f} | {own_s:.1f} |"]
    out += [f"| {name} | {est[name]:.1f} | {f'{elapsed[name]:.1f}' if name in elapsed else 'not run'} |" for name in todo]
    out += [f"| **this command** | {command_s(est, todo):.1f} | {total_s:.1f} |", '',
            '## Parts', '', 'A part as one command: this process, the preflight and the part\'s steps.', '',
            '| part | estimated s | measured s (where all its steps ran here) |', '|---|---|---|']
    for p, names in PARTS.items():
        steps = ['preflight', *names]
        measured = f"{own_s + sum(elapsed[n] for n in steps):.1f}" if all(n in elapsed for n in steps) else 'not run'
        out.append(f"| {p} | {command_s(est, steps):.1f} | {measured} |")
    return '\n'.join(out) + '\n'


# -----------------------------------------------------------------------------
# the check: each step in a process of its own, its output to the screen and its log

def run_child(s, name, log_path):
    """Runs one step as `python -m beyond.gpu_check --step=NAME`; returns (exit code, its rows, last line)."""
    passed = {k: v for k, v in s.items() if k not in ('out', 'part', 'only', 'step')}
    cmd = [sys.executable, '-m', 'beyond.gpu_check', f'--step={name}', *(f'--{k}={v!r}' for k, v in passed.items())]
    rows, last = {}, ''
    env = dict(os.environ, PYTHONUNBUFFERED='1')  # (the log shows each line as it comes)
    with open(log_path, 'a') as log:  # (one log: each step appends its own section)
        log.write(f"\n=== {name}\n")
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
    """The settings checked; returns the steps to run, in the check's order."""
    if s['compile'] not in ('on', 'off'):
        raise UserError(f"compile must be on or off; got {s['compile']!r}")
    for key, lowest in (('steps', 1), ('warmup', 0), ('prompt_tokens', 1), ('draft_tokens', 1)):
        if s[key] < lowest:
            raise UserError(f"setting '{key}' must be at least {lowest}; got {s[key]!r}")
    if s['part'] and s['only']:
        raise UserError(f"give --part or --only, not both (got --part={s['part']} --only={s['only']})")
    if s['part'] and s['part'] not in PARTS:
        raise UserError(f"unknown part {s['part']!r}: the parts are {', '.join(PARTS)} (--help lists their steps)")
    wanted = list(PARTS[s['part']]) if s['part'] else [n for n in s['only'].split(',') if n]
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


def run_steps(s, todo, after_each):
    """Each step in order, in a process of its own; after_each(results, problems, elapsed) after each.
    Returns ({row: its fields}, {row: why it has none}, {step: its seconds}, whether the preflight's
    compile failed)."""
    results, problems, elapsed = {}, {}, {}
    compile_failed = False  # (a deliberate --compile=off skips the compiled decode rows without failing)
    for i, name in enumerate(todo, 1):
        if name in COMPILED_DECODE and s['compile'] == 'off':
            why = 'the preflight could not compile' if compile_failed else '--compile=off'
            problems.update((r, f"SKIPPED: compile is off ({why})") for r in rows_of(name))
            print(f"\n=== [{i}/{len(todo)}] {name}: skipped ({why})", flush=True)
            continue
        print(f"\n=== [{i}/{len(todo)}] {name}", flush=True)
        log_path = os.path.join(s['out'], LOG)
        t0 = time.perf_counter()
        rc, rows, last = run_child(s, name, log_path)
        elapsed[name] = time.perf_counter() - t0
        print(f"--- {name}: {'ok' if rc == 0 else f'FAILED (exit {rc})'}, {elapsed[name]:.1f} s", flush=True)
        results.update(rows)
        if name == 'decode-graphs' and not s['speculative']:
            problems['decode-speculative'] = 'SKIPPED: --speculative=False'
        problems.update((r, f"FAILED (exit {rc}): {last[:200]} (log: {log_path})") for r in rows_of(name) if r not in rows)
        if name == 'preflight':
            if 'preflight' not in rows:  # (an import failed: every other step would fail the same way)
                raise UserError(f"the preflight failed ({last[:300]}); its log: {log_path}")
            compile_failed = 'compile=failed' in rows['preflight']
            if compile_failed:
                s['compile'] = 'off'
        after_each(results, problems, elapsed)
    return results, problems, elapsed, compile_failed


def summary_lines(todo, results, problems):
    """(row, what the summary says of it), in the check's order: its fields, or why it has none."""
    return [(r, results[r] if r in results else problems.get(r, 'not run (yet, or the check stopped first)'))
            for name in todo for r in rows_of(name)]


def main(argv):
    t0 = time.perf_counter()  # (the measured total starts here: the estimate counts this process's start)
    command = shlex.join(['python', '-m', 'beyond.gpu_check', *argv])
    argv = [f'{a}=True' if a in ('--cpu', '--fail_on_skip') else a for a in argv]  # (alone, as flags)
    if '--help' in argv or '-h' in argv:  # the settings, as configure prints them, then the parts' estimates
        require_torch(True)
        print(help_text(SETTINGS, [__file__]) + '\n\n' + parts_text(SETTINGS))
        return
    s = configure(SETTINGS, argv, scripts=[__file__])
    todo = check_settings(s)
    require_torch(s['cpu'])
    if s['step']:
        return run_step(s)
    os.makedirs(s['out'], exist_ok=True)
    open(os.path.join(s['out'], LOG), 'w').close()  # (this command's log: the steps append to it)
    est = estimates(s)
    what = f"part {s['part']}" if s['part'] else 'the steps asked for' if s['only'] else 'every step'
    print(f"=== {what}: {', '.join(todo)}; estimated ~{command_s(est, todo) / 60:.1f} min on one H100-class GPU"
          + (" (at the GPU shapes: --cpu's tiny one takes less)" if s['cpu'] else ''), flush=True)
    if command_s(est, todo) > LIMIT_S and not s['cpu']:
        print(f"    more than a lent GPU's ~10 minutes a command: run it in parts, "
              f"{', then '.join(f'--part={p}' for p in PARTS)}", flush=True)

    def report(results, problems, elapsed, done=False):
        """The report so far, written whole (after each step, and at the end); returns its path."""
        path = report_path(s, fields_of(results['preflight'])['device'])
        write_report(path, report_text(s, command, todo, summary_lines(todo, results, problems), elapsed, est,
                                       time.perf_counter() - t0, done))
        return path

    results, problems, elapsed, compile_failed = run_steps(s, todo, report)
    # -------------------------------------------------------------------------
    lines = summary_lines(todo, results, problems)
    print(f"\n=== summary, in the check's order (log: {os.path.join(s['out'], LOG)})")
    width = max(len(r) for r, _ in lines) + 2
    for r, text in lines:
        print(f"{r:<{width}}{text}")
    print(f"report: {report(results, problems, elapsed, done=True)}")
    total = sum(int(n) for fields in results.values() for n in re.findall(r'\bcompiles=(\d+)', fields))
    print(f"total {time.perf_counter() - t0:.1f} s (estimated for one H100-class GPU: {command_s(est, todo):.0f} s), "
          f"{total} compiles (each row's compiles=: dynamo's graphs)")
    missing = [r for r, _ in lines if r not in results and (compile_failed or not problems[r].startswith('SKIPPED'))]
    if missing:
        raise UserError(f"{len(missing)} of {len(lines)} rows not measured ({', '.join(missing)}): see above and their logs")


if __name__ == '__main__':
    with one_line_errors('gpu_check.py'):
        main(sys.argv[1:])
