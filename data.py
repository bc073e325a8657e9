"""
Token data: the tokenizers, and reading the bins that prepare.py writes.

    python -c "from data import load_tokens; print(load_tokens('data/wikitext-2-bytes', 'val')[1])"

prepare.py writes with these tokenizers; train.py, eval_depth.py and sample.py read with
the rest. The last section loads a trained run with the split it is scored on (eval_depth.py,
beyond/): perplexity is over the split in non-overlapping windows of the trained block size,
every token but the first scored exactly once.
"""

import itertools
import json
import math
import os
import sys
from collections import Counter
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch

from configurator import ROOT, UserError
from model import LoopedGPT


# -----------------------------------------------------------------------------
# tokenizers: 'bytes' or any tiktoken encoding, named in meta.json

class ByteTokenizer:
    """UTF-8 bytes as tokens: 256 symbols, nothing to download."""
    name = 'bytes'
    n_vocab = 256

    def encode_lines(self, lines):
        return np.frombuffer(''.join(lines).encode('utf-8'), dtype=np.uint8)

    def encode(self, text):
        return self.encode_lines([text]).astype(np.int64).tolist()

    def decode(self, ids, errors='strict'):
        # errors='replace' for sampled text: a model can emit a byte sequence that is not UTF-8
        return bytes(np.asarray(ids, dtype=np.uint8)).decode('utf-8', errors=errors)


class TiktokenTokenizer:
    def __init__(self, name):
        import tiktoken
        try:
            self.enc = tiktoken.get_encoding(name)
        except ValueError:
            raise ValueError(f"unknown tokenizer {name!r}: use 'bytes' or a tiktoken encoding "
                             f"({', '.join(tiktoken.list_encoding_names())})")
        except Exception as e:  # the ranks are downloaded on first use
            raise ValueError(f"could not load tiktoken encoding {name!r} ({type(e).__name__}; no network?): "
                             "point TIKTOKEN_CACHE_DIR at a cache that holds it, or use --tokenizer bytes")
        self.name, self.n_vocab = name, self.enc.n_vocab

    def encode_lines(self, lines):
        # one line at a time, the same unit in every split and for files and datasets alike
        # (BPE merges whitespace across line ends differently if lines were joined)
        ids = [self.enc.encode_ordinary(line) for line in lines]
        return np.fromiter(itertools.chain.from_iterable(ids), dtype=np.uint32, count=sum(map(len, ids)))

    def encode(self, text):
        return self.encode_lines(text.splitlines(keepends=True)).astype(np.int64).tolist()

    def decode(self, ids, errors='replace'):  # tiktoken's own default
        return self.enc.decode(list(map(int, ids)), errors=errors)


def get_tokenizer(name):
    """'bytes' or a tiktoken encoding name; ValueError with a one-line message otherwise."""
    return ByteTokenizer() if name == 'bytes' else TiktokenTokenizer(name)


def bin_dtype(vocab_size):
    return np.uint16 if vocab_size <= 2**16 else np.uint32


# -----------------------------------------------------------------------------
# reading the bins

def prepare_command(dataset):
    """The command that makes data/<dataset>: a task beyond the paper is written by the module of beyond/
    named for it (python -m beyond.parity writes data/parity), text by prepare.py (which names its output
    <dataset> for GPT-2 tokens and <dataset>-<tokenizer> otherwise)."""
    if os.path.isfile(os.path.join(ROOT, 'beyond', f'{dataset}.py')):
        return f"python -m beyond.{dataset}"
    for base, flag in (('wikitext-103', ''), ('wikitext-2', ' --dataset wikitext-2')):
        if dataset == base:
            return f"python prepare.py{flag}"
        if dataset.startswith(base + '-'):
            return f"python prepare.py{flag} --tokenizer {dataset[len(base) + 1:]}"
    return f"python prepare.py --text_dir <folder with train and valid text> --out_dir data/{dataset}"


def load_meta(data_dir):
    """meta.json of a folder written by prepare.py; FileNotFoundError naming the command that makes it."""
    meta_path = os.path.join(data_dir, 'meta.json')
    if not os.path.isfile(meta_path):
        dataset = os.path.basename(os.path.normpath(data_dir))
        raise FileNotFoundError(f"no prepared data in {data_dir} (meta.json missing): make it with "
                                f"`{prepare_command(dataset)}`")
    with open(meta_path) as f:
        return json.load(f)


def load_tokens(data_dir, split):
    """A split written by prepare.py, as a read-only memmap, with its meta.json.
    The dtype comes from meta.json, never assumed."""
    meta = load_meta(data_dir)
    if split not in meta['tokens']:
        raise FileNotFoundError(f"{data_dir} has no {split} split (it has {', '.join(meta['tokens'])})")
    return np.memmap(os.path.join(data_dir, f'{split}.bin'), dtype=meta['dtype'], mode='r'), meta


def load_splits(data_dir, dataset, block_size):
    """(train, val, meta) of data_dir/dataset: token streams, each long enough for a window, or for a
    task written in rows (beyond/parity.py), each split's Rows."""
    folder = os.path.join(data_dir, dataset)
    try:
        meta = load_meta(folder)
        if 'row_len' in meta:
            return load_rows(folder, 'train'), load_rows(folder, 'val'), meta
        train_data, meta = load_tokens(folder, 'train')
        val_data, _ = load_tokens(folder, 'val')
    except FileNotFoundError as e:
        raise UserError(str(e))
    for name, data in (('train', train_data), ('val', val_data)):
        if len(data) <= block_size + 1:
            raise UserError(f"the {name} split of {dataset} has {len(data)} tokens, too few for block_size {block_size}")
    return train_data, val_data, meta


class Rows(NamedTuple):
    """A split of a task written in rows (beyond/parity.py): one instance per row, padded to the split's row
    length. x: the inputs, y: each position's target (-1: nothing to predict there, as at a pad), both
    (n_rows, row_len) memmaps. The targets are not the inputs shifted, so a row is read whole, never cut."""
    x: np.ndarray
    y: np.ndarray


def load_rows(data_dir, split):
    """A split of a task in rows: Rows of {split}.bin and {split}.targets.bin, shaped by meta.json."""
    meta = load_meta(data_dir)
    if split not in meta['row_len']:
        raise FileNotFoundError(f"{data_dir} has no {split} split (it has {', '.join(meta['row_len'])})")
    shape = (meta['rows'][split], meta['row_len'][split])
    return Rows(*(np.memmap(os.path.join(data_dir, f'{split}{part}.bin'), dtype=dt, mode='r', shape=shape)
                  for part, dt in (('', meta['dtype']), ('.targets', meta['targets_dtype']))))


# -----------------------------------------------------------------------------
# train.py's batches: random windows a step (a function of the seed, rank and iteration), fixed ones to validate

def train_batches(data, it, rank, *, seed, n_micro, batch_size, block_size, device):
    """The micro-batches of iteration `it` on this rank: random windows (of a task in Rows: random whole
    rows), drawn from an RNG seeded by (seed, rank, it). The data stream is a function of the iteration,
    so a resumed run sees exactly the batches the uninterrupted run would have. One vectorised gather
    from the memmap: inputs and targets (n_micro, B, T)."""
    rng = np.random.default_rng([seed, rank, it])
    if isinstance(data, Rows):
        return rows(data, rng.integers(0, len(data.x), size=(n_micro, batch_size)), device)
    starts = rng.integers(0, len(data) - block_size - 1, size=(n_micro, batch_size))
    return token_windows(data, starts, block_size, device)


def eval_batches(data, *, eval_iters, batch_size, block_size, device):
    """eval_iters fixed batches of windows spread evenly over the split, and no more batches than
    the split holds windows for (WikiText-103's validation split is 2.7x short of 40 x 64 x 256);
    of a task in Rows, the first rows, whole."""
    if isinstance(data, Rows):
        n_batches = max(1, min(eval_iters, len(data.x) // batch_size))
        return rows(data, np.arange(n_batches * batch_size).reshape(n_batches, -1) % len(data.x), device)
    n_batches = max(1, min(eval_iters, (len(data) - 1) // block_size // batch_size))
    starts = np.linspace(0, len(data) - block_size - 1, n_batches * batch_size).astype(np.int64)
    return token_windows(data, starts.reshape(n_batches, batch_size), block_size, device)


def rows(data, index, device):
    """The Rows at index (any shape), as int64 inputs and targets (*index.shape, row_len) on device."""
    return tuple(torch.from_numpy(part[np.asarray(index)].astype(np.int64)).to(device) for part in data)


def token_windows(data, starts, length, device):
    """Token windows from a memmap in one vectorised read: inputs data[s:s+length] and targets
    data[s+1:s+1+length] for every s in starts (any shape), int64 (*starts.shape, length) on device."""
    chunk = torch.from_numpy(data[np.asarray(starts)[..., None] + np.arange(length + 1)].astype(np.int64))
    if device.startswith('cuda'):  # pinned, so the copy is asynchronous (a view would be copied pageable)
        chunk = chunk.pin_memory().to(device, non_blocking=True)
    else:
        chunk = chunk.to(device)
    return chunk[..., :-1], chunk[..., 1:]  # inputs and targets, sliced on the device


# -----------------------------------------------------------------------------
# a trained run and the tokens it is scored on

def run_folder(path):
    return path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))


def data_folder(config, data_dir=None):
    """The data folder a run trained on, from its training config (data_dir: another root to find it in)."""
    return os.path.join(data_dir or config.get('data_dir', 'data'), config.get('dataset', ''))


def load_run(path, device, split, data_dir=None):
    """(model in eval mode, its training config, the split's tokens) of a run folder or checkpoint,
    on the data it was trained on; the model of the class its checkpoint records."""
    try:
        model, ckpt = LoopedGPT.from_checkpoint(path, device)
    except (FileNotFoundError, ValueError) as e:
        raise UserError(str(e))
    config = ckpt.get('config', {})
    folder = data_folder(config, data_dir)
    try:
        data, meta = load_tokens(folder, split)
    except FileNotFoundError as e:
        raise UserError(str(e))
    if meta['vocab_size'] != model.config.vocab_size:
        raise UserError(f"{path} was trained with vocab {model.config.vocab_size}, but {folder} has vocab "
                        f"{meta['vocab_size']} ({meta['tokenizer']}): evaluate on the data it was trained on")
    if len(data) < 2:
        raise UserError(f"the {split} split of {folder} has {len(data)} token(s): scoring needs a token and its next")
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
            yield token_windows(data, starts[i:i + batch_size], n, device)


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
        from tqdm import tqdm
        total = sum(math.ceil(count / self.batch_size) for count in Counter(n for _, n in windows).values())
        return tqdm(total=total, desc=desc, unit='batch', leave=False, file=sys.stderr,
                    disable=None)  # (None: only on a terminal)

    def first_batch(self, windows=None, batch_size=None):
        """The first (x, y) batch of windows (default: the first batch_size windows)."""
        batch_size = batch_size or self.batch_size
        return next(self.batches(self.windows[:batch_size] if windows is None else windows, batch_size))
