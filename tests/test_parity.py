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
from conftest import PARITY_SPLITS, TASK, assert_one_line_error, assert_options_documented, run_script
from data import load_rows


# -----------------------------------------------------------------------------
# the rows: both bits, both targets, each target the XOR so far by hand (all-zero strings pass every other parity
# check); python -m beyond.parity's rows decoded back (conftest's parity_data is its output on TASK)

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


def test_prepare_writes_rows_that_decode_to_running_parity(parity_data):
    folder = parity_data / 'parity'
    meta = json.loads((folder / 'meta.json').read_text())
    assert meta['task'] == 'parity' and meta['seed'] == 3 and meta['vocab_size'] == 4
    assert meta['lengths'] == {'train': [1, 8], 'val': [6, 12], 'test': [12, 12], 'probe': [3, 3], 'long': [10, 10]}
    assert meta['row_len'] == {'train': 9, 'val': 13, 'test': 13, 'probe': 4, 'long': 11}
    V = parity.VOCAB
    for split in ('train', 'val', 'test', 'probe', 'long'):
        rows = load_rows(str(folder), split)
        assert rows.x.shape == rows.y.shape == (meta['rows'][split], meta['row_len'][split])
        seen = set()
        for x, y in zip(rows.x, rows.y):
            bits = [int(t) for t in x[1:] if t != V['pad']]
            n = len(bits)
            seen.add(n)
            assert x[0] == V['bos'] and set(bits) <= {0, 1} and all(x[1 + n:] == V['pad'])  # bos, bits, then pads
            assert list(y[1:1 + n]) == list(np.cumsum(bits) % 2)  # each target: the XOR of the bits so far
            assert y[0] == -1 and all(y[1 + n:] == -1)  # nothing scored at bos or a pad
        assert min(seen) >= meta['lengths'][split][0] and max(seen) == meta['lengths'][split][1]
    # the seed decides the strings: another seed, other strings
    parity.main(['--out_dir', str(parity_data / 'other'), '--seed', '4', *TASK])
    assert not np.array_equal(load_rows(str(parity_data / 'other'), 'train').x, load_rows(str(folder), 'train').x)


# -----------------------------------------------------------------------------
# the splits: their lengths and the probe's, meta.json saying what the folder holds, the folder rewritten whole

def test_the_default_probe_is_six_times_the_longest_training_string_and_the_long_split_thirty_two(tmp_path):
    # config/parity.py keeps the checkpoint its probe reads best: by default 128 strings of 48 bits (at K=96 and 192),
    # 6x the longest trained (8 bits), then 64 of 256 (32x: long_probe's reach read), each on a stream of its own;
    # the other splits are drawn as with any probe or long split
    parity.main(['--out_dir', str(tmp_path / 'p'), '--seed', '5', '--train_rows', '64', '--val_rows', '8', '--test_rows', '8'])
    parity.main(['--out_dir', str(tmp_path / 'q'), '--seed', '5', '--train_rows', '64', '--val_rows', '8', '--test_rows', '8',
                 '--probe_rows', '4', '--probe_lengths', '24', '--long_rows', '2', '--long_lengths', '30'])
    meta = json.loads((tmp_path / 'p' / 'meta.json').read_text())
    assert meta['lengths'] == {'train': [1, 8], 'val': [16, 16], 'test': [32, 32], 'probe': [48, 48], 'long': [256, 256]}
    assert meta['rows']['probe'] == 128 and meta['row_len']['probe'] == 49
    assert meta['rows']['long'] == 64 and meta['row_len']['long'] == 257
    for split, n in (('probe', 48), ('long', 256)):
        rows = load_rows(str(tmp_path / 'p'), split)
        assert ((rows.y >= 0).sum(1) == n).all()  # every string has all its bits scored
        assert (rows.y[:, 1:] == np.cumsum(rows.x[:, 1:], 1) % 2).all()  # (running parity, as every split's)
    for split in ('train', 'val', 'test'):  # the probe's and the long split's lengths draw nothing from the others'
        a, b = load_rows(str(tmp_path / 'p'), split), load_rows(str(tmp_path / 'q'), split)
        assert (a.x == b.x).all() and (a.y == b.y).all()
    assert load_rows(str(tmp_path / 'q'), 'long').x.shape == (2, 31)  # (--long_rows, --long_lengths)


def test_meta_json_describes_the_rows_it_holds(parity_data):
    # the row layout the first test decodes, said in meta.json for whoever reads the data folder
    meta = json.loads((parity_data / 'parity' / 'meta.json').read_text())
    assert meta['text'] == ('one instance a row: [bos, bits, pad ...]; target at bit i: the XOR of bits 1..i, '
                            '-1 at bos and pads')


def test_meta_json_is_laid_out_for_a_person_one_entry_a_line(parity_data):
    # whoever reads the data folder reads meta.json as prepare.py's is laid out: each top-level entry on a line of
    # its own, indented under the brace, not the whole record on one line
    text = (parity_data / 'parity' / 'meta.json').read_text()
    meta = json.loads(text)
    lines = text.splitlines()
    assert lines[0] == '{' and lines[-1] == '}'
    keys = [line[3:line.index('":')] for line in lines[1:-1] if line.startswith('  "')]  # (indent 2: the top level)
    assert keys == list(meta)


def test_parity_rewrites_its_folder_whole(tmp_path, capsys):
    parity.write(str(tmp_path / 'one'), 1, dict(PARITY_SPLITS, train=(1, [3])))  # one string is a split (>= 1)
    assert load_rows(str(tmp_path / 'one'), 'train').x.shape == (1, 4)
    assert capsys.readouterr().out.splitlines()[-1] == f"wrote {tmp_path / 'one'}"  # its last line names the folder
    parity.write(str(tmp_path), 1, PARITY_SPLITS)
    parity.write(str(tmp_path), 2, dict(PARITY_SPLITS, train=(12, [3])))
    meta = json.loads((tmp_path / 'meta.json').read_text())
    assert meta['seed'] == 2 and meta['rows']['train'] == 12 and meta['row_len']['train'] == 4
    assert load_rows(str(tmp_path), 'train').x.shape == (12, 4)
    assert sorted(p.name for p in tmp_path.iterdir() if 'meta' in p.name) == ['meta.json']  # (no .tmp left)


# -----------------------------------------------------------------------------
# the command line: bad input in one line, every option documented in --help as tests/snapshots/argparse.json holds it

def test_bad_task_input_is_one_line_and_leaves_no_data(tmp_path):
    assert_one_line_error(run_script('beyond/parity.py', '--out_dir', tmp_path / 'x', '--val_lengths', '12-6'),
                          'beyond.parity', '--val_lengths', 'the low end first')
    assert_one_line_error(run_script('beyond/parity.py', '--out_dir', tmp_path / 'x', '--train_lengths', 'eight'),
                          'beyond.parity', '--train_lengths', 'a range (1-16)')
    assert_one_line_error(run_script('beyond/parity.py', '--out_dir', tmp_path / 'x', '--test_rows', '0'),
                          'beyond.parity', '--test_rows must be >= 1')
    assert not (tmp_path / 'x' / 'meta.json').exists()


def test_every_option_of_an_argparse_script_is_documented_in_its_help(monkeypatch):
    assert_options_documented('beyond/parity.py', parity.main, monkeypatch)
