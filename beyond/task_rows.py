"""
A task in rows, the interface every such task shares (docs/tasks.md): running parity (beyond/parity.py) and binary
addition (beyond/addition.py) are each a Task, one file each; a third task is one more file with one more Task.

    python -m beyond.parity --out_dir data/parity --seed 1          # each task's data command: these settings
    python -m beyond.addition --out_dir data/addition --seed 1

A task gives its vocabulary, its splits' default rows and lengths, the row length a string of n steps needs, and
rows(rng, n_rows, lengths, row_len, split, settings): each instance one row, [bos, step tokens ..., pad ...], and
each position's target (-1 where nothing is scored). Its data command writes every split on a random stream of its
own ({split}.bin, {split}.targets.bin) and meta.json last (no meta.json, no usable data); train.py reads such a folder
a whole row at a time (data.Rows), and python -m beyond.tasks tells the task from meta.json's 'task' (TASKS) and
draws its test strings with the same rows().
"""

import argparse
import json
import os
import sys
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from configurator import UserError, error_line

TASKS = {}  # name -> Task, each task's module registering its own (beyond.tasks imports them all)


@dataclass(frozen=True)
class Task:
    name: str             # meta.json's 'task' and 'dataset', the data folder's default name
    vocab: dict           # token -> id: the step tokens first, then 'bos' and 'pad'
    splits: tuple         # (split, default rows, default lengths) each: train, val, test, probe
    rows: Callable        # (rng, n_rows, lengths, row_len, split, settings) -> x (uint8), y (int16), (n_rows, row_len)
    extra: int            # the tokens a row holds past its n steps: the start token, and any the task adds
    text: str             # meta.json's one line on what a row is
    about: str            # the data command's description
    settings: tuple = ()  # (name, default, help) of the task's own settings, each for every split (--{split}_{name})
    meta: Callable = field(default=lambda settings: {})  # meta.json's entries of the task's own
    check: Callable = field(default=lambda split, settings: None)  # raises UserError for a split's bad settings
    describe: Callable = field(default=lambda x: '')  # a line on a split's rows x as written, printed by the data command

    def row_len(self, lengths):
        return max(lengths) + self.extra

    def defaults(self, split):
        """The task's own settings for a split as they default: {name: value} (a default may be a value a split)."""
        return {name: default[split] if isinstance(default, dict) else default for name, default, _ in self.settings}


def register(task):
    TASKS[task.name] = task
    return task


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


def write(task, out_dir, seed, splits, settings=None):
    """Writes the rows of each split (name -> (rows, lengths)) into out_dir, meta.json last. settings: {split: {the
    task's own settings}} (default: theirs)."""
    settings = settings or {split: task.defaults(split) for split in splits}
    for split, (n_rows, _) in splits.items():  # (every setting checked before a file is written)
        if n_rows < 1:
            raise UserError(f"--{split}_rows must be >= 1; got {n_rows}")
        task.check(split, settings[split])
    os.makedirs(out_dir, exist_ok=True)
    if os.path.exists(os.path.join(out_dir, 'meta.json')):
        os.remove(os.path.join(out_dir, 'meta.json'))
    meta = dict(task=task.name, dataset=task.name, source=f'{task.name}, seed {seed}', seed=seed, tokenizer=task.name,
                vocab=task.vocab, vocab_size=len(task.vocab), dtype='uint8', targets_dtype='int16', lengths={},
                row_len={}, rows={}, tokens={}, text=task.text)
    for i, (split, (n_rows, lengths)) in enumerate(splits.items()):
        row_len = task.row_len(lengths)
        x, y = task.rows(np.random.default_rng([seed, i]), n_rows, lengths, row_len, split, settings[split])
        about = task.describe(x)
        if about:
            print(f"{split}: {about}")
        for part, a in (('', x), ('.targets', y)):
            a.tofile(os.path.join(out_dir, f'{split}{part}.bin'))
        meta['lengths'][split] = [lengths[0], lengths[-1]]
        meta['row_len'][split], meta['rows'][split], meta['tokens'][split] = row_len, n_rows, n_rows * row_len
        print(f"{split}: {n_rows:,} strings of {lengths[0]}-{lengths[-1]} bits, rows of {row_len} tokens")
    meta.update(task.meta(settings))
    with open(os.path.join(out_dir, 'meta.json.tmp'), 'w') as f:
        json.dump(meta, f, indent=2)  # (one entry a line, for whoever reads the data folder)
    os.replace(os.path.join(out_dir, 'meta.json.tmp'), os.path.join(out_dir, 'meta.json'))
    print(f"wrote {out_dir}")
    return meta


def main(task, argv=None):
    """A task's data command: python -m beyond.<task>."""
    p = argparse.ArgumentParser(prog=f'python -m beyond.{task.name}', description=task.about)
    p.add_argument('--out_dir', default=os.path.join('data', task.name), help='the data folder (train.py: --dataset=its name)')
    p.add_argument('--seed', type=int, default=0, help='seeds every split (each its own stream)')
    for split, n_rows, lengths in task.splits:
        p.add_argument(f'--{split}_rows', type=int, default=n_rows, help=f'instances in the {split} split')
        p.add_argument(f'--{split}_lengths', default=lengths,
                       help=f"string lengths of the {split} split, a range (1-16) or one length; train's '8' "
                            f"is 1-8 (default {lengths})")
        for name, _, about in task.settings:
            value = task.defaults(split)[name]
            p.add_argument(f'--{split}_{name}', type=type(value), default=value, help=f'{about} ({split}; default {value})')
    args = p.parse_args(argv)
    try:
        write(task, args.out_dir, args.seed,
              {split: (getattr(args, f'{split}_rows'), lengths_arg(getattr(args, f'{split}_lengths'), split))
               for split, _, _ in task.splits},
              {split: {name: getattr(args, f'{split}_{name}') for name, _, _ in task.settings} for split, _, _ in task.splits})
    except UserError as e:
        sys.exit(error_line(f'beyond.{task.name}', e))
