"""
beyond/task_rows.py, the interface every task in rows shares: a third task is one Task (here a toy one, made in the
test), and the data command, meta.json, train.py's rows and beyond.tasks' test strings and task lookup then serve it
as they serve parity and addition; a split's lengths; every setting checked before a file is written.

    python -m pytest -q tests/test_task_rows.py
"""

import json

import numpy as np
import pytest
import torch
from dataclasses import asdict, replace

from beyond import addition, parity, task_rows, tasks
from configurator import UserError
from data import load_rows
from test_model import tiny


def copy_rows(rng, n_rows, lengths, row_len, split, settings):
    """A toy task: the target at each bit is the bit itself (the ones flipped where settings say)."""
    n = rng.choice(np.asarray(lengths), size=n_rows)
    bits = rng.integers(0, 2, size=(n_rows, row_len - 1))
    inside = np.arange(row_len - 1)[None, :] < n[:, None]
    x = np.full((n_rows, row_len), 3, dtype=np.uint8)
    x[:, 0] = 2
    x[:, 1:][inside] = bits[inside]
    y = np.full((n_rows, row_len), -1, dtype=np.int16)
    y[:, 1:][inside] = (bits ^ settings['flip'])[inside]
    return x, y


def check_flip(split, settings):
    if settings['flip'] not in (0, 1):
        raise UserError(f"--{split}_flip must be 0 or 1; got {settings['flip']}")


COPY = task_rows.Task(name='copy', vocab={'0': 0, '1': 1, 'bos': 2, 'pad': 3, 'x': 4},
                      splits=(('train', 50, '4'), ('val', 8, '6'), ('test', 8, '8'), ('probe', 8, '9')),
                      rows=copy_rows, extra=1, text='a bit a position; the target the bit', about='A toy task.',
                      settings=(('flip', dict(train=0, val=0, test=1, probe=0), 'flip every target'),),
                      meta=lambda settings: dict(flip={s: v['flip'] for s, v in settings.items()}), check=check_flip)


@pytest.fixture
def copy_task(monkeypatch):
    monkeypatch.setitem(task_rows.TASKS, 'copy', COPY)
    return COPY


def test_a_third_task_is_one_task_and_every_shared_part_serves_it(copy_task, tmp_path, capsys):
    task_rows.main(copy_task, ['--out_dir', str(tmp_path / 'copy'), '--seed', '4', '--val_flip', '1'])
    meta = json.loads((tmp_path / 'copy' / 'meta.json').read_text())
    assert (meta['task'], meta['vocab_size'], meta['text']) == ('copy', 5, 'a bit a position; the target the bit')
    assert meta['flip'] == dict(train=0, val=1, test=1, probe=0)  # the task's own setting, each split's default or given
    assert meta['lengths'] == dict(train=[1, 4], val=[6, 6], test=[8, 8], probe=[9, 9]) and meta['row_len']['probe'] == 10
    for split, flip in meta['flip'].items():
        rows = load_rows(str(tmp_path / 'copy'), split)
        inside = rows.y >= 0
        assert np.array_equal(rows.y[inside], rows.x[inside] ^ flip) and inside[:, 1:].any(1).all(), split
    assert 'train: 50 strings of 1-4 bits, rows of 5 tokens' in capsys.readouterr().out
    # beyond.tasks: the task told from the run's data, its test strings drawn by its rows with the test split's settings
    model = tiny(n_layer=1, n_loops=2, vocab_size=5)
    ckpt = dict(model_args=asdict(model.config), config=dict(data_dir=str(tmp_path), dataset='copy'))
    assert tasks.run_task('copy-run', model, ckpt) is copy_task
    x, y = tasks.test_strings(7, 8, 16, copy_task)
    assert x.shape == (16, 9) and torch.equal(y[:, 1:], x[:, 1:] ^ 1)  # (the test split's flip)


def test_each_split_is_drawn_on_a_stream_of_its_own_from_the_seed_and_its_place(copy_task, tmp_path):
    """write: split i's rows are task.rows on default_rng([seed, i]) (recomputed here): two splits of the same
    lengths and rows are different strings, and another seed gives other strings."""
    splits = dict(train=(16, [6]), val=(16, [6]), test=(16, [6]))
    settings = {split: dict(flip=0) for split in splits}
    task_rows.write(copy_task, str(tmp_path / 'a'), 5, splits, settings)
    task_rows.write(copy_task, str(tmp_path / 'b'), 6, splits, settings)
    read = lambda folder, split: load_rows(str(tmp_path / folder), split).x
    for i, split in enumerate(splits):
        want, _ = copy_rows(np.random.default_rng([5, i]), 16, [6], 7, split, settings[split])
        assert np.array_equal(read('a', split), want)
        assert not np.array_equal(read('a', split), read('b', split))
    assert not np.array_equal(read('a', 'val'), read('a', 'test')) and not np.array_equal(read('a', 'train'), read('a', 'val'))
    asked = []  # and task.rows is told which split it draws (the interface's `split`: a task may draw each its own way)
    told = replace(copy_task, rows=lambda rng, n, lengths, row_len, split, s: asked.append(split)
                   or copy_rows(rng, n, lengths, row_len, split, s))
    task_rows.write(told, str(tmp_path / 'c'), 5, splits, settings)
    assert asked == list(splits)


def test_written_without_settings_each_split_takes_the_tasks_default_for_it(copy_task, tmp_path):
    # COPY's flip defaults split by split (the test split's 1): write given no settings draws each split with its own
    splits = dict(train=(8, [4]), val=(8, [4]), test=(8, [4]))
    task_rows.write(copy_task, str(tmp_path), 5, splits)
    assert json.loads((tmp_path / 'meta.json').read_text())['flip'] == dict(train=0, val=0, test=1)
    for split, flip in (('train', 0), ('val', 0), ('test', 1)):
        rows = load_rows(str(tmp_path), split)
        inside = rows.y >= 0
        assert np.array_equal(rows.y[inside], rows.x[inside] ^ flip), split


def test_a_split_is_the_lengths_given_train_from_one_and_the_others_one_length():
    assert task_rows.lengths_arg('8', 'train') == list(range(1, 9)) and task_rows.lengths_arg('8', 'val') == [8]
    assert task_rows.lengths_arg('3-5', 'test') == [3, 4, 5]
    for text, says in (('5-3', 'the low end first'), ('0', 'lengths from 1'), ('eight', r'a length \(16\) or a range')):
        with pytest.raises(UserError, match=says):
            task_rows.lengths_arg(text, 'probe')
    assert parity.lengths_arg is task_rows.lengths_arg  # (parity's own name for it, as before)


def test_every_setting_is_checked_before_a_file_is_written(copy_task, tmp_path):
    old = tmp_path / 'copy'
    task_rows.main(copy_task, ['--out_dir', str(old)])
    for bad, says in ((['--probe_flip', '2'], '--probe_flip must be 0 or 1'), (['--probe_rows', '0'], '--probe_rows must be >= 1')):
        with pytest.raises(SystemExit) as e:
            task_rows.main(copy_task, ['--out_dir', str(old), *bad])  # (the last split's: the first is not rewritten)
        assert str(e.value.code) == f'beyond.copy: error: {says}' + ('; got 2' if 'flip' in says else '; got 0')
        assert (old / 'meta.json').exists()  # the folder as it was: nothing of it rewritten
    with pytest.raises(SystemExit):
        task_rows.main(copy_task, ['--out_dir', str(tmp_path / 'new'), '--test_flip', '3'])
    assert not (tmp_path / 'new').exists()


def test_each_task_registers_itself_under_its_own_name():
    # (by name and content: a task module run again in one process, as python -m is in the tests, registers its Task
    # again, the same but a new object)
    for module in (parity, addition):
        registered = task_rows.TASKS[module.TASK.name]
        assert (registered.name, registered.vocab, registered.splits, registered.extra) == (
            module.TASK.name, module.TASK.vocab, module.TASK.splits, module.TASK.extra)
    assert parity.TASK.row_len([8]) == 9 and addition.TASK.row_len([16]) == 18  # (addition: the carry-out position)


def test_a_write_that_fails_part_way_leaves_no_meta_json_of_an_earlier_one(copy_task, tmp_path):
    """write: meta.json is written last and an earlier write's is removed first, so a folder whose write failed part
    way never looks complete (the old meta.json beside new splits)."""
    splits = dict(train=(16, [6]), val=(16, [6]))
    settings = {split: dict(flip=0) for split in splits}
    task_rows.write(copy_task, str(tmp_path), 5, splits, settings)
    assert (tmp_path / 'meta.json').is_file()
    rows, calls = copy_task.rows, []

    def fails_at_the_second_split(*args):
        calls.append(args)
        if len(calls) == 2:
            raise RuntimeError('the disk filled')
        return rows(*args)
    with pytest.raises(RuntimeError):
        task_rows.write(replace(copy_task, rows=fails_at_the_second_split), str(tmp_path), 6, splits, settings)
    assert len(calls) == 2 and not (tmp_path / 'meta.json').exists() and not (tmp_path / 'meta.json.tmp').exists()
