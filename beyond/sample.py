"""
Samples text from a trained looped GPT at any depth, with per-token early exit that really
skips loops (KV cache: a token that exits at loop j runs j loops), or with lossless
speculative decoding that drafts with the model's own first loops (decoder.py).

    python sample.py --out_dir=out-raw_perloop-cpu-long-s1 --start="The tower was built"
    python sample.py --out_dir=out-raw_perloop-cpu-long-s1 --n_loops=8        # deeper than trained
    python sample.py --out_dir=out-raw_perloop-cpu-long-s1 --exit_threshold=0.9 --exit_criterion=entropy
    python sample.py --out_dir=out-raw_perloop-cpu-long-s1 --exit_threshold=0.9 --stand_in=project
    python sample.py --out_dir=out-raw_perloop-cpu-long-s1 --exit_threshold=0.95 --exit_criterion=angular   # no readout to decide
    python sample.py --out_dir=out-raw_perloop-cpu-long-s1 --exit_threshold=0.5 --exit_criterion=gate      # after python -m beyond.exit_gate
    python sample.py --out_dir=out-raw_perloop-cpu-long-s1 --draft_loops=1 --draft_tokens=3   # speculative
    python sample.py --out_dir=out-raw_perloop-cpu-long-s1 --start=FILE:prompt.txt --kv_cache=False

Settings are the globals below, overridden by config files and --key=value as in train.py.
The text is decoded with the tokenizer that prepare.py recorded in the training data's
meta.json. Before the samples, a short warm-up run (with --compile=on it compiles the decode
step, which takes seconds to a minute) on a line of its own on stderr:
warmup_seconds=<s> compile=<on|off>; after the samples, timed without it, one line:
tokens=<n> seconds=<s> tok_per_s=<x> mean_loops=<m>, and with speculation
accept_rate=<drafts kept / drafted> tokens_per_pass=<tokens emitted per verify pass>.
"""

import os
import sys
import time

import torch

from configurator import UserError, configure, one_line_errors
from data import get_tokenizer, load_meta, run_folder
from beyond import exits
from beyond.decoder import STAND_INS, Stepper, generate
from model import LoopedGPT
from runtime import autocast, compile_errors, compile_failed, resolve_dtype, setup_device, sync, use_compile

# -----------------------------------------------------------------------------
out_dir = 'out'               # the run folder (holding ckpt.pt), or a checkpoint file
start = '\n'                  # the prompt: text, or FILE:path to read it from a file
num_samples = 3               # samples, one after the other
max_new_tokens = 300          # tokens generated per sample
temperature = 0.8             # 1.0: the model's distribution; lower: more conservative
top_k = 200                   # sample among the k likeliest tokens only; 0: all of them
seed = 1337
device = 'auto'               # 'auto' | 'cpu' | 'cuda' | 'cuda:1' | 'mps'
dtype = 'auto'                # 'auto' (bfloat16 on GPUs, float32 on CPUs) | 'float32' | 'bfloat16' | 'float16'
compile = 'auto'              # torch.compile the one-token loop step (a CUDA graph on a GPU): 'auto' (on for CUDA, off elsewhere) | 'on' | 'off'
n_loops = None                # K, loops per token; None: the trained K. Any K >= 1
kv_cache = True               # False: recompute the whole context at every step (for checking and timing)
exit_criterion = 'max_prob'   # a criterion of beyond/exits.py (python -m beyond.exits lists them), or a learned gate: 'gate' (out_dir/gate.pt), 'gate-raw', ...
exit_threshold = 0.0          # a token stops after the first loop whose confidence exceeds this; 0: off
stand_in = 'copy'             # what later tokens read at an exited token's skipped loops: 'copy' | 'project'
draft_loops = 0               # speculative decoding: draft with the first j loops (1 <= j < K); 0: off
draft_tokens = 3              # the most tokens drafted per verify pass (with draft_loops)
draft_stop = 0.0              # stop drafting at a draft whose loop-j confidence (exit_criterion) is below this; 0: off
data_dir = ''                 # where prepare.py wrote the run's data (for meta.json); '': the run's own
# -----------------------------------------------------------------------------
SETTINGS = {k: v for k, v in list(globals().items()) if not k.startswith('_') and k.islower()
            and (v is None or isinstance(v, (int, float, bool, str)))}


def check_settings(config):
    """Every check on the settings, in one place."""
    exits.check_name(config['exit_criterion'], 'exit_criterion')
    if not 0 <= config['exit_threshold'] <= 1:
        raise UserError(f"exit_threshold must lie in [0, 1] (0: no early exit); got {config['exit_threshold']}")
    K = config['n_loops']
    if K is not None and (type(K) is not int or K < 1):
        raise UserError(f"n_loops must be a whole number >= 1 (or unset: the trained K); got {K!r}")
    for key in ('num_samples', 'max_new_tokens'):
        if config[key] < 1:
            raise UserError(f"{key} must be at least 1; got {config[key]}")
    if config['top_k'] < 0 or not config['temperature'] > 0:
        raise UserError(f"temperature must be > 0 and top_k >= 0; got {config['temperature']}, {config['top_k']}")
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


def load(config, device):
    """The model and the tokenizer its training data was made with."""
    try:
        model, ckpt = LoopedGPT.from_checkpoint(config['out_dir'], device)
    except (FileNotFoundError, ValueError) as e:
        raise UserError(str(e))
    run = ckpt.get('config', {})
    folder = os.path.join(config['data_dir'] or run.get('data_dir', 'data'), run.get('dataset', ''))
    try:
        meta = load_meta(folder)
        tokenizer = get_tokenizer(meta['tokenizer'])
    except FileNotFoundError:
        raise UserError(f"no tokenizer for {config['out_dir']}: {folder}/meta.json, where prepare.py records it, "
                          "is missing (point --data_dir at the folder that holds the run's data)")
    except (KeyError, ValueError) as e:
        raise UserError(f"cannot load the tokenizer named in {folder}/meta.json: {e}")
    if tokenizer.n_vocab != model.config.vocab_size:
        raise UserError(f"{folder} has vocab {tokenizer.n_vocab} but the checkpoint has {model.config.vocab_size}")
    return model.eval(), tokenizer


def prompt_text(start):
    if start.startswith('FILE:'):
        try:
            with open(start[5:], encoding='utf-8') as f:
                start = f.read()
        except (OSError, UnicodeDecodeError) as e:
            raise UserError(f"cannot read the prompt file {start[5:]}: {e}")
    if not start:
        raise UserError("the prompt is empty: give --start some text (or FILE:path)")
    return start


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
    config = configure(SETTINGS, argv)
    check_settings(config)
    try:
        dev = setup_device(config['device'])
    except ValueError as e:
        raise UserError(str(e))
    model, tokenizer = load(config, dev)
    ids = tokenizer.encode(prompt_text(config['start']))
    if not ids:
        raise UserError("the prompt encodes to no tokens: give --start some text")
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
    with one_line_errors('sample.py'):
        main(sys.argv[1:])
