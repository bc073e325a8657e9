"""
A trained run loaded for evaluation, and the tokens it is scored on: shared by eval_depth.py
(the paper's measurements) and eval_decode.py (the decoding studies), which import it and
never each other.

    python -c "from runs import score_windows; print(score_windows(1000, 256))"

Perplexity is over the split in non-overlapping windows of the trained block size: every
token but the first is scored exactly once.
"""

import math
import os
import sys
from collections import Counter
from dataclasses import dataclass

from data import gather_windows, load_tokens
from model import LoopedGPT


class EvalError(Exception):
    """Something the user can fix; printed as one line."""


def run_folder(path):
    return path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))


def load_run(path, device, split, data_dir=None):
    """(model in eval mode, its training config, the split's tokens) of a run folder or checkpoint,
    on the data it was trained on."""
    try:
        model, ckpt = LoopedGPT.from_checkpoint(path, device)
    except (FileNotFoundError, ValueError) as e:
        raise EvalError(str(e))
    config = ckpt.get('config', {})
    folder = os.path.join(data_dir or config.get('data_dir', 'data'), config.get('dataset', ''))
    try:
        data, meta = load_tokens(folder, split)
    except FileNotFoundError as e:
        raise EvalError(str(e))
    if meta['vocab_size'] != model.config.vocab_size:
        raise EvalError(f"{path} was trained with vocab {model.config.vocab_size}, but {folder} has vocab "
                        f"{meta['vocab_size']} ({meta['tokenizer']}): evaluate on the data it was trained on")
    return model.eval(), config, data


# -----------------------------------------------------------------------------
# which tokens are scored

def score_windows(n_tokens, block_size, max_tokens=0):
    """Non-overlapping (start, length) windows: inputs data[start:start+length], targets
    data[start+1:start+1+length]. Together the targets are tokens 1 .. n-1 (or the first
    max_tokens of them), each exactly once."""
    n_targets = n_tokens - 1 if max_tokens <= 0 else min(max_tokens, n_tokens - 1)
    return [(s, min(block_size, n_targets - s)) for s in range(0, n_targets, block_size)]


def batches(data, windows, batch_size, device):
    """Windows of equal length stacked into (B, T) batches; the shorter tail window alone."""
    groups = {}
    for s, n in windows:
        groups.setdefault(n, []).append(s)
    for n, starts in sorted(groups.items(), reverse=True):
        for i in range(0, len(starts), batch_size):
            x, y = gather_windows(data, starts[i:i + batch_size], n)
            yield x.to(device), y.to(device)


def progress(windows, batch_size, desc):
    from tqdm import tqdm
    total = sum(math.ceil(count / batch_size) for count in Counter(n for _, n in windows).values())
    return tqdm(total=total, desc=desc, unit='batch', leave=False, file=sys.stderr,
                disable=None)  # (None: only on a terminal)


@dataclass
class Scoring:
    """A model and the windows of a split it is scored on: what every study of a run needs."""
    model: LoopedGPT
    data: object            # the split's tokens (a numpy memmap)
    windows: list           # (start, length) windows, from score_windows
    batch_size: int
    device: str
    ctx: object             # the precision context (runtime.autocast)

    def batches(self, windows=None, batch_size=None):
        return batches(self.data, self.windows if windows is None else windows, batch_size or self.batch_size,
                       self.device)

    def progress(self, windows, desc):
        return progress(windows, self.batch_size, desc)

    def first_batch(self, windows=None, batch_size=None):
        """The first (x, y) batch of windows (default: the first batch_size windows)."""
        batch_size = batch_size or self.batch_size
        return next(self.batches(self.windows[:batch_size] if windows is None else windows, batch_size))
