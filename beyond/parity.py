"""
Running parity in rows, the task of docs/tasks.md: the data a study of depth that pays trains on.

    python -m beyond.parity                     # 20,000 strings of 1-8 bits to train, 512 of 16 to validate, 512 of 32 to test,
                                                # 128 of 48 to probe and 64 of 256 to read past it (train.py's select)
                                                # -> data/parity/
    python -m beyond.parity --out_dir data/p2 --seed 2 --train_lengths 1-16

Each instance is one row of the split's fixed length, [bos, b_1 .. b_n, pad ...]: {split}.bin its
inputs and {split}.targets.bin each position's target, the XOR of the bits so far (-1 where nothing
is scored: bos and the pads). meta.json (written last: no meta.json, no usable data) has the lengths,
row lengths and seed; train.py reads such a folder a whole row at a time (data.Rows). The data command is
beyond/task_rows.py's, the one every task in rows shares.
"""

import numpy as np

from configurator import UserError
from beyond.task_rows import Task, lengths_arg, register  # noqa: F401  (lengths_arg: this task's settings, as before)
from beyond import task_rows

VOCAB = {'0': 0, '1': 1, 'bos': 2, 'pad': 3}  # the bits, the start of a string, the padding after it
# each split's default rows and lengths; the probe (train.py's select, beyond.tasks.screened_probe) 6x the longest trained,
# the long split (beyond.tasks.long_probe's reach read, past the probe) 32x
SPLITS = (('train', 20000, '8'), ('val', 512, '16'), ('test', 512, '32'), ('probe', 128, '48'), ('long', 64, '256'))


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


TASK = register(Task(
    name='parity', vocab=VOCAB, splits=SPLITS, extra=1,
    rows=lambda rng, n_rows, lengths, row_len, split, settings: parity_rows(rng, n_rows, lengths, row_len),
    text='one instance a row: [bos, bits, pad ...]; target at bit i: the XOR of bits 1..i, -1 at bos and pads',
    about=__doc__.split('\n\n')[0].strip()))


def write(out_dir, seed, splits):
    """Writes the rows of each split (name -> (rows, lengths)) into out_dir, meta.json last."""
    return task_rows.write(TASK, out_dir, seed, splits)


def main(argv=None):
    task_rows.main(TASK, argv)


if __name__ == '__main__':
    main()
