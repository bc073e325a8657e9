"""
Running parity in rows, the task of docs/tasks.md: the data a study of depth that pays trains on.

    python -m beyond.parity                     # 20,000 strings of 1-8 bits to train, 512 of 16 to validate, 512 of 32 to test,
                                                # 128 of 48 to probe (train.py's select) -> data/parity/
    python -m beyond.parity --out_dir data/p2 --seed 2 --train_lengths 1-16

Each instance is one row of the split's fixed length, [bos, b_1 .. b_n, pad ...]: {split}.bin its
inputs and {split}.targets.bin each position's target, the XOR of the bits so far (-1 where nothing
is scored: bos and the pads). meta.json (written last: no meta.json, no usable data) has the lengths,
row lengths and seed; train.py reads such a folder a whole row at a time (data.Rows).
"""

import argparse
import json
import os
import sys

import numpy as np

from configurator import UserError, error_line

VOCAB = {'0': 0, '1': 1, 'bos': 2, 'pad': 3}  # the bits, the start of a string, the padding after it
# each split's default rows and lengths; the probe (train.py's select, beyond.tasks.screened_probe) 6x the longest trained
SPLITS = (('train', 20000, '8'), ('val', 512, '16'), ('test', 512, '32'), ('probe', 128, '48'))


def parity_rows(rng, n_rows, lengths, row_len):
    """n_rows running-parity instances, each [bos, b_1 .. b_n, pad ...] of row_len tokens, n drawn uniformly
    from lengths (a list), the bits uniform. The target at b_i is the XOR of b_1 .. b_i (a bit token: the tied
    head reads it as '0' or '1'), -1 at bos and the pads. Returns inputs (uint8) and targets (int16),
    (n_rows, row_len) each."""
    n = rng.choice(np.asarray(lengths), size=n_rows)
    if n.max() + 1 > row_len:
        raise UserError(f"a string of {n.max()} bits and its start token need {n.max() + 1} tokens; the rows have {row_len}")
    bits = rng.integers(0, 2, size=(n_rows, row_len - 1))
    inside = np.arange(row_len - 1)[None, :] < n[:, None]  # (n_rows, row_len - 1): a bit of the string, not a pad
    x = np.full((n_rows, row_len), VOCAB['pad'], dtype=np.uint8)
    x[:, 0] = VOCAB['bos']
    x[:, 1:][inside] = bits[inside]
    y = np.full((n_rows, row_len), -1, dtype=np.int16)
    y[:, 1:][inside] = (np.cumsum(bits, axis=1) % 2)[inside]
    return x, y


def lengths_arg(text, name):
    """'8' (train: every length 1..8; val, test: 8 alone) or a range '1-8': a list of ints."""
    try:
        low, _, high = text.partition('-')
        low, high = (int(low), int(high)) if high else (1 if name == 'train' else int(low), int(low))
    except ValueError:
        raise UserError(f"--{name}_lengths {text!r}: a length (16) or a range (1-16)")
    if not 1 <= low <= high:
        raise UserError(f"--{name}_lengths {text!r}: lengths from 1, the low end first")
    return list(range(low, high + 1))


def write(out_dir, seed, splits):
    """Writes the rows of each split (name -> (rows, lengths)) into out_dir, meta.json last."""
    for split, (n_rows, _) in splits.items():
        if n_rows < 1:
            raise UserError(f"--{split}_rows must be >= 1; got {n_rows}")
    os.makedirs(out_dir, exist_ok=True)
    if os.path.exists(os.path.join(out_dir, 'meta.json')):
        os.remove(os.path.join(out_dir, 'meta.json'))
    meta = dict(task='parity', dataset='parity', source=f'parity, seed {seed}', seed=seed, tokenizer='parity',
                vocab=VOCAB, vocab_size=len(VOCAB), dtype='uint8', targets_dtype='int16', lengths={}, row_len={},
                rows={}, tokens={},
                text='one instance a row: [bos, bits, pad ...]; target at bit i: the XOR of bits 1..i, -1 at bos and pads')
    for i, (split, (n_rows, lengths)) in enumerate(splits.items()):
        row_len = max(lengths) + 1
        x, y = parity_rows(np.random.default_rng([seed, i]), n_rows, lengths, row_len)
        for part, a in (('', x), ('.targets', y)):
            a.tofile(os.path.join(out_dir, f'{split}{part}.bin'))
        meta['lengths'][split] = [lengths[0], lengths[-1]]
        meta['row_len'][split], meta['rows'][split], meta['tokens'][split] = row_len, n_rows, n_rows * row_len
        print(f"{split}: {n_rows:,} strings of {lengths[0]}-{lengths[-1]} bits, rows of {row_len} tokens")
    with open(os.path.join(out_dir, 'meta.json.tmp'), 'w') as f:
        json.dump(meta, f, indent=2)
    os.replace(os.path.join(out_dir, 'meta.json.tmp'), os.path.join(out_dir, 'meta.json'))
    print(f"wrote {out_dir}")
    return meta


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0].strip())
    p.add_argument('--out_dir', default=os.path.join('data', 'parity'), help='the data folder (train.py: --dataset=its name)')
    p.add_argument('--seed', type=int, default=0, help='seeds every split (each its own stream)')
    for split, n_rows, lengths in SPLITS:
        p.add_argument(f'--{split}_rows', type=int, default=n_rows, help=f'instances in the {split} split')
        p.add_argument(f'--{split}_lengths', default=lengths,
                       help=f"string lengths of the {split} split, a range (1-16) or one length; train's '8' "
                            f"is 1-8 (default {lengths})")
    args = p.parse_args(argv)
    try:
        write(args.out_dir, args.seed, {split: (getattr(args, f'{split}_rows'),
                                                lengths_arg(getattr(args, f'{split}_lengths'), split))
                                        for split, _, _ in SPLITS})
    except UserError as e:
        sys.exit(error_line('beyond.parity', e))


if __name__ == '__main__':
    main()
