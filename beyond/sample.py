"""
Samples text from a trained looped GPT with a KV cache (beyond the paper's sample.py): at any
depth, with per-token early exit that really skips loops (a token that exits at loop j runs j
loops), or with lossless speculative decoding that drafts with the model's own first loops
(beyond/decoder.py). At a fixed K it gives sample.py's text, faster.

    python -m beyond.sample --out_dir=out-raw_perloop-cpu-long-s1 --start="The tower was built"
    python -m beyond.sample --out_dir=out-raw_perloop-cpu-long-s1 --n_loops=8        # deeper than trained
    python -m beyond.sample --out_dir=out-raw_perloop-cpu-long-s1 --exit_threshold=0.9 --exit_criterion=entropy
    python -m beyond.sample --out_dir=out-raw_perloop-cpu-long-s1 --exit_threshold=0.9 --stand_in=project
    python -m beyond.sample --out_dir=out-raw_perloop-cpu-long-s1 --exit_threshold=0.95 --exit_criterion=angular   # no readout to decide
    python -m beyond.sample --out_dir=out-raw_perloop-cpu-long-s1 --exit_threshold=0.5 --exit_criterion=gate      # after python -m beyond.exit_gate
    python -m beyond.sample --out_dir=out-raw_perloop-cpu-long-s1 --draft_loops=1 --draft_tokens=3   # speculative
    python -m beyond.sample --out_dir=out-raw_perloop-cpu-long-s1 --start=FILE:prompt.txt --kv_cache=False

Settings are sample.py's and those below, overridden by config files and --key=value as in
train.py. Before the samples, a short warm-up run (with --compile=on it compiles the decode
step, which takes seconds to a minute) on a line of its own on stderr:
warmup_seconds=<s> compile=<on|off>; after the samples, timed without it, one line:
tokens=<n> seconds=<s> tok_per_s=<x> mean_loops=<m>, and with speculation
accept_rate=<drafts kept / drafted> tokens_per_pass=<tokens emitted per verify pass>.
"""

import sys
import time

import torch

import sample
from configurator import UserError, configure, one_line_errors
from data import run_folder
from beyond import exits
from beyond.decoder import STAND_INS, WINDOWED, Stepper, generate, windowed
from runtime import autocast, compile_errors, compile_failed, resolve_dtype, setup_device, sync, use_compile

# -----------------------------------------------------------------------------
compile = 'auto'              # torch.compile the one-token loop step (a CUDA graph on a GPU): 'auto' (on for CUDA, off elsewhere) | 'on' | 'off'
kv_cache = True               # False: recompute the whole context at every step (for checking and timing)
exit_criterion = 'max_prob'   # a criterion of beyond/exits.py (python -m beyond.exits lists them), or a learned gate: 'gate' (out_dir/gate.pt), 'gate-raw', ...
exit_threshold = 0.0          # a token stops after the first loop whose confidence exceeds this; 0: off
stand_in = 'copy'             # what later tokens read at an exited token's skipped loops: 'copy' | 'project'
draft_loops = 0               # speculative decoding: draft with the first j loops (1 <= j < K); 0: off
draft_tokens = 3              # the most tokens drafted per verify pass (with draft_loops)
draft_stop = 0.0              # stop drafting at a draft whose loop-j confidence (exit_criterion) is below this; 0: off
# -----------------------------------------------------------------------------
SETTINGS = {**sample.SETTINGS, **{k: v for k, v in list(globals().items()) if not k.startswith('_') and k.islower()
                                  and (v is None or isinstance(v, (int, float, bool, str)))}}


def check_settings(config):
    """sample.py's checks, then those of the settings above."""
    sample.check_settings(config)
    exits.check_name(config['exit_criterion'], 'exit_criterion')
    if not 0 <= config['exit_threshold'] <= 1:
        raise UserError(f"exit_threshold must lie in [0, 1] (0: no early exit); got {config['exit_threshold']}")
    if config['stand_in'] not in STAND_INS:
        raise UserError(f"stand_in must be one of {', '.join(STAND_INS)}; got {config['stand_in']!r}")
    if not 0 <= config['draft_stop'] <= 1:
        raise UserError(f"draft_stop must lie in [0, 1] (0: draft every time); got {config['draft_stop']}")
    j = config['draft_loops']
    if type(j) is not int or j < 0:
        raise UserError(f"draft_loops must be a whole number >= 0 (0: no speculative decoding); got {j!r}")
    if j and config['draft_tokens'] < 1:
        raise UserError(f"draft_tokens must be at least 1 with draft_loops set; got {config['draft_tokens']}")
    if j and config['exit_threshold'] > 0:
        raise UserError("speculative decoding (draft_loops) gives the K-loop model's output, which per-token exits "
                          "change: set exit_threshold=0, or draft_loops=0")
    if j and not config['kv_cache']:
        raise UserError("speculative decoding needs the KV cache: drop kv_cache=False, or set draft_loops=0")
    if config['compile'] not in ('auto', 'on', 'off'):
        raise UserError(f"compile must be auto, on or off; got {config['compile']!r}")


def warm_up(model, x, kw, ctx, dev):
    """A short run with the samples' settings: it compiles the decode step (compile on) and
    warms the allocator, so that the samples are timed without either. Returns its seconds.
    A compiler that cannot build (inductor needs a C++ compiler and Python's headers on a CPU,
    Triton on a GPU) is one clear line, not torch's traceback."""
    t0 = time.perf_counter()
    try:
        with ctx:
            generate(model, x, max_new_tokens=kw['draft_tokens'] + 2, **kw)  # (a prefill and one step or pass)
        sync(dev)
    except compile_errors() as e:
        if kw['stepper'].static is None:  # (not compiled: not a compiler's failure)
            raise
        raise compile_failed(e, 'the decode step')
    return time.perf_counter() - t0


def main(argv):
    config = configure(SETTINGS, argv, [__file__, sample.__file__])
    check_settings(config)
    dev = setup_device(config['device'])
    model, tokenizer = sample.load(config, dev)
    if windowed(model):
        raise UserError(WINDOWED)
    ids = sample.prompt_ids(config['start'], tokenizer)
    K = config['n_loops'] or model.config.n_loops
    if config['draft_loops'] >= K:
        raise UserError(f"draft_loops must lie in [1, K-1] = [1, {K - 1}]: the draft is the model's first loops "
                          f"and K = {K} here; got {config['draft_loops']}")
    ctx = autocast(dev, resolve_dtype(config['dtype'], dev))
    x = torch.tensor([ids], dtype=torch.long, device=dev)
    kw = dict(temperature=config['temperature'], top_k=config['top_k'] or None, n_loops=config['n_loops'],
              kv_cache=config['kv_cache'], exit_threshold=config['exit_threshold'], criterion=exits.resolve(config['exit_criterion'], run_folder(config['out_dir']), model),
              stand_in=config['stand_in'], draft_loops=config['draft_loops'], draft_tokens=config['draft_tokens'],
              draft_stop=config['draft_stop'])
    compile = use_compile(config['compile'], dev)
    with ctx:  # one Stepper for the warm-up and every sample: weights cast, loop compiled and cache made once
        kw['stepper'] = Stepper(model, compile)
    # -------------------------------------------------------------------------
    warmup = warm_up(model, x, kw, ctx, dev)
    print(f"warmup_seconds={warmup:.3f} compile={'on' if compile else 'off'}", file=sys.stderr, flush=True)
    # -------------------------------------------------------------------------
    torch.manual_seed(config['seed'])  # (after the warm-up: the samples do not depend on it)
    n_tokens, loops, seconds = 0, 0, 0.0
    spec = dict(passes=0, drafted=0, accepted=0)
    for _ in range(config['num_samples']):
        t0 = time.perf_counter()
        with ctx:
            y, used, stats = generate(model, x, config['max_new_tokens'], **kw)
        sync(dev)
        seconds += time.perf_counter() - t0
        n_tokens += used.numel()
        loops += used.sum().item()
        spec = {k: spec[k] + stats[k] for k in spec}
        print(tokenizer.decode(y[0].tolist(), errors='replace'))
        print('---------------', flush=True)
    line = f"tokens={n_tokens} seconds={seconds:.3f} tok_per_s={n_tokens / seconds:.1f} mean_loops={loops / n_tokens:.3f}"
    if config['draft_loops']:
        line += (f" accept_rate={spec['accepted'] / max(spec['drafted'], 1):.3f}"
                 f" tokens_per_pass={spec['accepted'] / max(spec['passes'], 1) + 1:.3f}")
    print(line, file=sys.stderr)


if __name__ == '__main__':
    with one_line_errors('python -m beyond.sample'):
        main(sys.argv[1:])
