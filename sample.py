"""
Samples text from a trained looped GPT at any depth K, as nanoGPT's sample.py does: every new
token runs the whole context through model.forward with K loops and samples from the last loop's
logits. K can be deeper than the run was trained at.

    python sample.py --out_dir=out-raw_perloop-cpu-long-s1 --start="The tower was built"
    python sample.py --out_dir=out-raw_perloop-cpu-long-s1 --n_loops=8      # deeper than trained
    python sample.py --out_dir=out-raw_perloop-cpu-long-s1 --start=FILE:prompt.txt --top_k=1

Settings are the globals below, overridden by config files and --key=value as in train.py.
The text is decoded with the tokenizer that prepare.py recorded in the training data's
meta.json. After the samples, one line on stderr: tokens=<n> seconds=<s> tok_per_s=<x> n_loops=<K>.
A KV cache, per-token early exit and speculative decoding (beyond the paper) are
python -m beyond.sample, which takes these settings and more: the same greedy text (--top_k=1), and
the same distribution when it samples (its own draws, faster).
"""

import os
import sys
import time

import torch
from torch.nn import functional as F

from configurator import UserError, configure, one_line_errors
from data import get_tokenizer, load_meta
from model import LoopedGPT
from runtime import autocast, resolve_dtype, setup_device, sync

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
n_loops = None                # K, loops per token; None: the trained K. Any K >= 1
data_dir = ''                 # where prepare.py wrote the run's data (for meta.json); '': the run's own
# -----------------------------------------------------------------------------
SETTINGS = {k: v for k, v in list(globals().items()) if not k.startswith('_') and k.islower()
            and (v is None or isinstance(v, (int, float, bool, str)))}


def check_settings(config):
    """The checks on the settings above (python -m beyond.sample adds its own)."""
    K = config['n_loops']
    if K is not None and (type(K) is not int or K < 1):
        raise UserError(f"n_loops must be a whole number >= 1 (or unset: the trained K); got {K!r}")
    for key in ('num_samples', 'max_new_tokens'):
        if config[key] < 1:
            raise UserError(f"{key} must be at least 1; got {config[key]}")
    if config['top_k'] < 0 or not config['temperature'] > 0:
        raise UserError(f"temperature must be > 0 and top_k >= 0; got {config['temperature']}, {config['top_k']}")


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


def prompt_ids(start, tokenizer):
    """The prompt's token ids: --start's text, or FILE:path's."""
    if start.startswith('FILE:'):
        try:
            with open(start[5:], encoding='utf-8') as f:
                start = f.read()
        except (OSError, UnicodeDecodeError) as e:
            raise UserError(f"cannot read the prompt file {start[5:]}: {e}")
    ids = tokenizer.encode(start)
    if not ids:
        raise UserError("the prompt is empty or encodes to no tokens: give --start some text (or FILE:path)")
    return ids


def next_token_probs(logits, temperature, top_k):
    """(..., vocab) logits -> the distribution sampled from, after temperature and top_k."""
    logits = logits.float() if temperature == 1.0 else logits.float() / max(temperature, 1e-8)
    if top_k is not None:
        v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
        logits = logits.masked_fill(logits < v[..., -1:], -float('inf'))  # (a slice: a list index is a host copy a token)
    return F.softmax(logits, dim=-1)


@torch.no_grad()
def generate(model, idx, max_new_tokens, n_loops=None, temperature=1.0, top_k=None):
    """idx (B, T) followed by max_new_tokens sampled tokens, at K = n_loops (None: the trained K).
    The context is the last block_size tokens, as in nanoGPT."""
    for _ in range(max_new_tokens):
        logits, _ = model(idx[:, -model.config.block_size:], n_loops=n_loops)
        probs = next_token_probs(logits[:, -1, :], temperature, top_k)  # (B, vocab)
        idx = torch.cat((idx, torch.multinomial(probs, num_samples=1)), dim=1)
    return idx


def main(argv):
    config = configure(SETTINGS, argv)
    check_settings(config)
    dev = setup_device(config['device'])
    model, tokenizer = load(config, dev)
    x = torch.tensor([prompt_ids(config['start'], tokenizer)], dtype=torch.long, device=dev)
    K = config['n_loops'] or model.config.n_loops
    torch.manual_seed(config['seed'])
    t0 = time.perf_counter()
    for _ in range(config['num_samples']):
        with autocast(dev, resolve_dtype(config['dtype'], dev)):
            y = generate(model, x, config['max_new_tokens'], K, config['temperature'], config['top_k'] or None)
        print(tokenizer.decode(y[0].tolist(), errors='replace'))
        print('---------------', flush=True)
    sync(dev)
    seconds = time.perf_counter() - t0
    n_tokens = config['num_samples'] * config['max_new_tokens']
    print(f"tokens={n_tokens} seconds={seconds:.3f} tok_per_s={n_tokens / seconds:.1f} n_loops={K}", file=sys.stderr)


if __name__ == '__main__':
    with one_line_errors('sample.py'):
        main(sys.argv[1:])
