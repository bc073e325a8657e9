"""
beyond/parity.py, a task in rows (python -m beyond.parity): each row holds both bits and both targets, each
target the running XOR; the splits' lengths and the probe split; the folder rewritten whole and meta.json
saying what it holds; bad input in one line.

    python -m pytest -q tests/test_parity.py
"""

import json
import math

import numpy as np

from beyond import parity
from conftest import PARITY_SPLITS, assert_options_documented
from data import load_rows


# -----------------------------------------------------------------------------
# the folder

def test_parity_rewrites_its_folder_whole(tmp_path):
    parity.write(str(tmp_path), 1, PARITY_SPLITS)
    parity.write(str(tmp_path), 2, dict(PARITY_SPLITS, train=(12, [3])))
    meta = json.loads((tmp_path / 'meta.json').read_text())
    assert meta['seed'] == 2 and meta['rows']['train'] == 12 and meta['row_len']['train'] == 4
    assert load_rows(str(tmp_path), 'train').x.shape == (12, 4)
    assert sorted(p.name for p in tmp_path.iterdir() if 'meta' in p.name) == ['meta.json']  # (no .tmp left)


# -----------------------------------------------------------------------------
# the rows: both bits, both targets, each target the XOR so far by hand (all-zero strings pass every other
# parity check)

def running_xor(x):
    """Each row's targets by hand: -1 at bos and the pads, the XOR of the bits so far at each bit."""
    y = np.full(x.shape, -1)
    for r, row in enumerate(x):
        acc = 0
        for i, tok in enumerate(row[1:], start=1):
            if tok == parity.VOCAB['pad']:
                break
            acc ^= int(tok)
            y[r, i] = acc
    return y


def assert_balanced(values, what):
    """Uniform 0/1 values: each within 6 binomial standard deviations of half (n p (1 - p) = n / 4)."""
    n, ones = len(values), int(np.sum(values))
    assert set(np.unique(values).tolist()) == {0, 1}, what
    assert abs(ones - n / 2) < 6 * math.sqrt(n) / 2, (what, ones, n)


def test_parity_rows_hold_both_bits_and_both_targets_each_the_running_xor_by_hand(tmp_path):
    x, y = parity.parity_rows(np.random.default_rng(0), 500, list(range(1, 9)), 9)
    lengths = (x[:, 1:] != parity.VOCAB['pad']).sum(1)
    assert set(lengths.tolist()) == set(range(1, 9))  # every length drawn
    assert np.array_equal(y, running_xor(x))
    bits, targets = x[:, 1:][y[:, 1:] >= 0], y[y >= 0]
    assert_balanced(bits, 'input bits')  # both bits, half each: all-zero strings would give all-zero targets
    assert_balanced(targets, 'targets')  # the XOR of uniform bits is uniform
    # the files python -m beyond.parity writes: the same in every split
    parity.main(['--out_dir', str(tmp_path), '--seed', '5', '--train_rows', '200', '--val_rows', '40',
                 '--test_rows', '40', '--train_lengths', '6', '--val_lengths', '10', '--test_lengths', '4-12'])
    for split in ('train', 'val', 'test'):
        rows = load_rows(str(tmp_path), split)
        assert np.array_equal(rows.y, running_xor(rows.x)), split
        assert_balanced(rows.x[:, 1:][rows.y[:, 1:] >= 0], f'{split} bits')
        assert_balanced(rows.y[rows.y >= 0], f'{split} targets')


# -----------------------------------------------------------------------------
# the command line: every option documented in --help, as tests/snapshots/argparse.json holds it

def test_every_option_of_an_argparse_script_is_documented_in_its_help(monkeypatch):
    assert_options_documented('beyond/parity.py', parity.main, monkeypatch)
