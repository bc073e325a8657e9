"""
Binary addition in rows, the second task of docs/tasks.md: a + b of two n-bit numbers, least significant bit first,
each position one token holding both operands' bits, the target the sum's bit there; the carry is state that must be
carried along the number, one position a loop with a window of 2.

    python -m beyond.addition                   # 20,000 additions of 1-16 bits to train, 512 of 32 to validate,
                                                # 512 of 64 to test, 128 of 96 to probe and 64 of 256 to read past
                                                # it (train.py's select) -> data/addition/
    python -m beyond.addition --out_dir data/a2 --seed 2 --test_carries 1.0 --test_stops 0

Each instance is one row, [bos, t_0 .. t_n-1, t_n, pad ...]: t_i = a_i + 2 b_i (0-3) the operands' bits at position i,
t_n = 0 the position past them, where the carry out is read. The target at t_i is the sum's bit i, a_i XOR b_i XOR
c_i with c_i the carry into position i (the carry out at t_n); -1 at bos and the pads. On random operands the longest
carry chain is about log2(n) positions, so long random additions do not need depth. So half of each split's strings
(--{split}_carries) carry the whole length: the first position generates a carry (1 + 1) and every other one
propagates it (a_i != b_i), as in 2^n - 1 + 1; a quarter (--{split}_stops) are their mirror, the first position
killing it (0 + 0), so that a long run of propagating positions does not by itself tell the sum; the rest are uniform
operands. Every sum bit of a carry or a stop depends on the first position. The data command is
beyond/task_rows.py's, the one every task in rows shares; it prints each split's shares as written.
"""

import numpy as np

from configurator import UserError
from beyond.task_rows import Task, register
from beyond import task_rows

VOCAB = {'0+0': 0, '1+0': 1, '0+1': 2, '1+1': 3, 'bos': 4, 'pad': 5}  # the operands' bits at a position (a + 2 b)
# each split's default rows and lengths: trained on at most 16 bits, the probe 6x that, the long split 16x
SPLITS = (('train', 20000, '16'), ('val', 512, '32'), ('test', 512, '64'), ('probe', 128, '96'), ('long', 64, '256'))
CARRIES, STOPS = 0.5, 0.25  # each split's default shares: a carry the whole length, none the whole length


def addition_rows(rng, n_rows, lengths, row_len, carries=CARRIES, stops=STOPS):
    """n_rows additions, each [bos, t_0 .. t_n, pad ...] of row_len tokens (n drawn uniformly from lengths): a share
    `carries` (rounded to whole rows) a carry the whole length, a share `stops` its mirror, the others uniform operands
    (among which a chain the whole length may come by chance).
    Returns inputs (uint8) and targets (int16), (n_rows, row_len) each: the sum's bits, least significant first, the
    carry out at t_n."""
    n = rng.choice(np.asarray(lengths), size=n_rows)
    if n.max() + 2 > row_len:
        raise ValueError(f"an addition of {n.max()} bits needs {n.max() + 2} tokens; the rows have {row_len}")
    width = row_len - 2
    a, b = rng.integers(0, 2, size=(2, n_rows, width))
    carried = round(carries * n_rows)  # (exact shares, each split's own, in a random order; the stops rounded on the
    counts = [carried, round((carries + stops) * n_rows) - carried]  # sum, so that the two never outnumber the rows)
    kind = rng.permutation(np.repeat([0, 1, 2], counts + [n_rows - sum(counts)]))  # 0: carry, 1: stop, 2: uniform
    chain, swap = kind < 2, rng.integers(0, 2, size=(n_rows, width))
    a[chain, 0] = b[chain, 0] = (kind[chain] == 0)                     # generate (1 + 1) or kill (0 + 0)
    a[chain, 1:], b[chain, 1:] = swap[chain, 1:], 1 - swap[chain, 1:]  # propagate: one of them 1, which at random
    inside = np.arange(width)[None, :] < n[:, None]
    a, b = a * inside, b * inside  # (past the string: 0 + 0, the carry-out position among them)
    sums, carry = np.zeros((n_rows, width + 1), dtype=np.int64), np.zeros(n_rows, dtype=np.int64)
    for i in range(width + 1):
        t = (a[:, i] + b[:, i] if i < width else 0) + carry
        sums[:, i], carry = t % 2, t // 2
    steps = np.arange(width + 1)[None, :] <= n[:, None]  # t_0 .. t_n
    x = np.full((n_rows, row_len), VOCAB['pad'], dtype=np.uint8)
    x[:, 0] = VOCAB['bos']
    tokens = np.concatenate([a + 2 * b, np.zeros((n_rows, 1), dtype=a.dtype)], 1)
    x[:, 1:][steps] = tokens[steps]
    y = np.full((n_rows, row_len), -1, dtype=np.int16)
    y[:, 1:][steps] = sums[steps]
    return x, y


def chains(x):
    """Of rows x: the share whose first position generates a carry and every other operand position propagates it
    (a carry the whole length), and the share whose first kills it and every other propagates (a stop)."""
    t = x[:, 1:]  # (any integer dtype: compared, never added)
    n = (t != VOCAB['pad']).sum(1) - 1  # the operand positions (t_n, the carry-out position, not among them)
    rest = np.isin(t, (VOCAB['1+0'], VOCAB['0+1'])) | (np.arange(t.shape[1])[None, :] >= n[:, None])
    propagate = rest[:, 1:].all(1)
    return float(np.mean((t[:, 0] == VOCAB['1+1']) & propagate)), float(np.mean((t[:, 0] == VOCAB['0+0']) & propagate))


def check(split, settings):
    carries, stops = settings['carries'], settings['stops']
    if not (0 <= carries and 0 <= stops and carries + stops <= 1):
        raise UserError(f"--{split}_carries {carries} and --{split}_stops {stops}: shares from 0, together at most 1")


def describe(x):
    carried, stopped = chains(x)
    return f"{carried:.1%} of the strings a carry the whole length, {stopped:.1%} a stop the whole length"


TASK = register(Task(
    name='addition', vocab=VOCAB, splits=SPLITS, extra=2, describe=describe,
    rows=lambda rng, n_rows, lengths, row_len, split, settings: addition_rows(rng, n_rows, lengths, row_len,
                                                                             settings['carries'], settings['stops']),
    text='one addition a row: [bos, a_i + 2 b_i for i < n, 0, pad ...], least significant bit first; target: the '
         "sum's bit i (the carry out at the 0), -1 at bos and pads",
    about=__doc__.split('\n\n')[0].strip(),
    check=check,
    settings=(('carries', CARRIES, 'the share of strings whose carry runs the whole length'),
              ('stops', STOPS, 'the share of strings whose first position kills the carry and every other propagates')),
    meta=lambda settings: dict(carries={split: s['carries'] for split, s in settings.items()},
                               stops={split: s['stops'] for split, s in settings.items()})))


def main(argv=None):
    task_rows.main(TASK, argv)


if __name__ == '__main__':
    main()
