"""
beyond/addition.py, binary addition in rows (python -m beyond.addition): each row the operands' bits a position,
least significant first, and the sum's bits as targets, the carry out one position past them; exact shares of
strings whose carry runs the whole length and of their mirror; the shares printed and in meta.json; bad settings in
one line before any file.

    python -m pytest -q tests/test_addition.py
"""

import json

import numpy as np
import pytest

from beyond import addition, tasks
from conftest import assert_one_line_error, assert_options_documented, run_script
from data import load_rows

V = addition.VOCAB


def decode(row):
    """A row's operands by hand: (a, b, n) from its tokens (a_i + 2 b_i at position i, least significant first)."""
    t = [int(v) for v in row[1:] if v != V['pad']]
    n = len(t) - 1  # (the last, t_n, is the carry-out position)
    assert t[n] == V['0+0']
    return sum((v & 1) << i for i, v in enumerate(t[:n])), sum((v >> 1) << i for i, v in enumerate(t[:n])), n


def test_each_row_is_its_operands_bit_by_bit_and_its_target_the_sums_bits_by_hand():
    x, y = addition.addition_rows(np.random.default_rng(0), 400, list(range(1, 17)), 18)
    assert x[:, 0].tolist() == [V['bos']] * 400 and (y[:, 0] == -1).all()
    lengths = set()
    for row, target in zip(x, y):
        a, b, n = decode(row)
        lengths.add(n)
        total = a + b  # Python's own addition
        assert [int(v) for v in target[1:n + 2]] == [(total >> i) & 1 for i in range(n + 1)]
        assert (target[n + 2:] == -1).all() and (row[n + 2:] == V['pad']).all()
    assert lengths == set(range(1, 17))


def test_a_carry_runs_the_whole_length_in_exactly_the_share_asked_and_its_mirror_stops_it():
    n_rows, n = 1000, 24
    x, y = addition.addition_rows(np.random.default_rng(1), n_rows, [n], n + 2, carries=0.5, stops=0.25)
    kinds = []
    for row in x:
        a, b, _ = decode(row)
        t = [int(v) for v in row[1:n + 1]]
        propagate = all(v in (V['1+0'], V['0+1']) for v in t[1:])
        kinds.append('carry' if propagate and t[0] == V['1+1'] else 'stop' if propagate and t[0] == V['0+0'] else 'other')
        if kinds[-1] == 'carry':  # a + b = 2^n exactly: the carry runs out of the top
            assert a + b == 2 ** n
        elif kinds[-1] == 'stop':
            assert a + b == 2 ** n - 2  # every bit but the lowest, and no carry out
    counts = {k: kinds.count(k) for k in ('carry', 'stop', 'other')}
    assert counts['carry'] == 500 and counts['stop'] == 250  # (the rest uniform: a whole-length chain there by chance
    # comes once in 2^23)
    assert addition.chains(x) == (0.5, 0.25)
    # the uniform ones: both bits of both operands, half each, at every operand position
    other = x[np.array(kinds) == 'other'][:, 1:n + 1]
    for bit in (1, 2):
        share = ((other & bit) > 0).mean()
        assert abs(share - 0.5) < 0.03, (bit, share)
    # a chain's propagating positions: one operand 1, which one at random (half each; all one way would be 0 or 1)
    chained = x[np.isin(kinds, ('carry', 'stop'))][:, 2:n + 1]
    assert abs((chained == V['1+0']).mean() - 0.5) < 0.03 and np.isin(chained, (V['1+0'], V['0+1'])).all()
    # the mirror and the carry need the first position: change it and every sum bit past it changes (bit 0 is
    # a_0 XOR b_0, 0 both ways), the carry out among them
    carry = x[np.array(kinds) == 'carry'][:1].copy()
    a, b, _ = decode(carry[0])
    carry[0, 1] = V['0+0']
    a2, b2, _ = decode(carry[0])
    assert (a + b) ^ (a2 + b2) == 2 ** (n + 1) - 2


def test_the_data_command_writes_each_splits_shares_and_prints_them(tmp_path, capsys):
    addition.main(['--out_dir', str(tmp_path), '--seed', '3', '--train_rows', '64', '--val_rows', '8', '--test_rows', '40',
                   '--probe_rows', '8', '--long_rows', '8', '--test_carries', '0.75', '--test_stops', '0', '--val_lengths', '5-7'])
    out = capsys.readouterr().out
    meta = json.loads((tmp_path / 'meta.json').read_text())
    assert meta['task'] == meta['dataset'] == 'addition' and meta['vocab'] == V and meta['vocab_size'] == 6
    assert meta['carries'] == dict(train=0.5, val=0.5, test=0.75, probe=0.5, long=0.5) and meta['stops']['test'] == 0
    assert meta['lengths'] == dict(train=[1, 16], val=[5, 7], test=[64, 64], probe=[96, 96], long=[256, 256])
    assert meta['row_len'] == dict(train=18, val=9, test=66, probe=98, long=258)  # the start token and the carry-out position
    test = load_rows(str(tmp_path), 'test')
    assert addition.chains(np.asarray(test.x)) == (0.75, 0.0)
    assert 'test: 75.0% of the strings a carry the whole length, 0.0% a stop the whole length' in out
    assert 'long: 50.0% of the strings a carry the whole length, 25.0% a stop the whole length' in out
    for split in ('train', 'val', 'test', 'probe', 'long'):
        rows = load_rows(str(tmp_path), split)
        for row, target in zip(rows.x[:20], rows.y[:20]):
            a, b, n = decode(row)
            assert [int(v) for v in target[1:n + 2]] == [((a + b) >> i) & 1 for i in range(n + 1)], split


@pytest.mark.parametrize('n_rows,carries,stops', [(7, 0.5, 0.5), (5, 0.3, 0.7), (3, 0.5, 0.5), (9, 1.0, 0.0), (6, 0.25, 0.25)])
def test_shares_that_round_past_the_rows_take_the_stops_from_what_is_left(n_rows, carries, stops):
    """The carries' count is their share rounded; the stops' the two shares' sum rounded, less that: shares together at
    most 1 never ask for more rows than there are (7 rows at 0.5 and 0.5: 4 carries, 3 stops, not 4 and 4)."""
    x, _ = addition.addition_rows(np.random.default_rng(0), n_rows, [12], 14, carries=carries, stops=stops)
    carried, stopped = addition.chains(x)
    assert len(x) == n_rows
    assert round(carried * n_rows) == round(carries * n_rows)
    assert round(stopped * n_rows) == round((carries + stops) * n_rows) - round(carries * n_rows)


def test_beyond_tasks_draws_additions_as_the_test_split_does(capsys):
    x, y = tasks.test_strings(5, 40, 64, addition.TASK)
    assert capsys.readouterr().out == ''  # (the shares are the data command's line, not the scorer's)
    assert x.shape == y.shape == (64, 42)
    assert addition.chains(x.numpy()) == (0.5, 0.25)
    for row, target in zip(x.numpy(), y.numpy()):
        a, b, n = decode(row)
        assert n == 40 and [int(v) for v in target[1:]] == [((a + b) >> i) & 1 for i in range(41)]
    again, _ = tasks.test_strings(5, 40, 64, addition.TASK)
    other, _ = tasks.test_strings(6, 40, 64, addition.TASK)
    assert (again == x).all() and not (other == x).all()  # (from the seed and the length alone)


@pytest.mark.parametrize('carries,stops', [(1.0, 0.0), (0.75, 0.25), (0.0, 1.0), (0.0, 0.0)])
def test_shares_at_the_edges_are_written_as_asked(tmp_path, carries, stops, capsys):
    """check: shares from 0, together at most 1, the edges included (the docstring's --test_carries 1.0 --test_stops 0)."""
    addition.main(['--out_dir', str(tmp_path), '--train_rows', '8', '--val_rows', '8', '--test_rows', '16', '--probe_rows', '8',
                   '--test_carries', str(carries), '--test_stops', str(stops)])
    assert addition.chains(np.asarray(load_rows(str(tmp_path), 'test').x)) == (carries, stops)


@pytest.mark.parametrize('args,says', [(['--test_carries', '0.9'], 'together at most 1'),
                                       (['--probe_stops', '-0.1'], 'shares from 0'),
                                       (['--train_lengths', '9-3'], 'the low end first')])
def test_bad_settings_are_one_line_and_write_nothing(tmp_path, args, says):
    r = run_script('beyond/addition.py', '--out_dir', tmp_path / 'x', *args)
    assert_one_line_error(r, 'beyond.addition', says)
    assert not (tmp_path / 'x').exists()


def test_every_option_of_an_argparse_script_is_documented_in_its_help(monkeypatch):
    assert_options_documented('beyond/addition.py', addition.main, monkeypatch)
