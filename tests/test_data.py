"""
data.py, what the scripts read: the tokenizers, the prepared splits and the rows of a task, the batches train.py
draws and the windows the evaluation scores, the runs and their data loaded back, and the one-line errors that
name the command that makes the data.

    python -m pytest -q tests/test_data.py
"""

import io
import json
import math
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import data
import sample
import train
from configurator import UserError
from conftest import HERE, settings
from data import ByteTokenizer, Rows, Scoring, batches, eval_batches, get_tokenizer, load_run, load_splits, score_windows, train_batches


# -----------------------------------------------------------------------------
# the tokenizers (tiktoken's BPE stood in by a small one built here, as its ranks need a download)

@pytest.fixture
def tiny_bpe(monkeypatch):
    """tiktoken.get_encoding answering 'tiny' alone (byte ranks and a few merges), as tiktoken does
    for a name it knows; any other name is tiktoken's ValueError. Returns the names it was asked."""
    tiktoken = pytest.importorskip('tiktoken')
    ranks = {bytes([i]): i for i in range(256)}
    for merge in (b' t', b'he', b' the'):
        ranks.setdefault(merge, len(ranks))
    pat = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
    enc = tiktoken.Encoding('tiny', pat_str=pat, mergeable_ranks=ranks, special_tokens={})
    asked = []

    def get_encoding(name):
        asked.append(name)
        if name != 'tiny':
            raise ValueError(f"Unknown encoding {name}")
        return enc
    monkeypatch.setattr(tiktoken, 'get_encoding', get_encoding)
    return asked


def test_a_tokenizer_is_the_encoding_named_and_decodes_a_cut_character_as_errors_says(tiny_bpe):
    bpe = get_tokenizer('tiny')
    assert tiny_bpe == ['tiny'] and bpe.name == 'tiny' and bpe.n_vocab == 259
    with pytest.raises(ValueError, match="unknown tokenizer 'nope'"):
        get_tokenizer('nope')
    # a sampled sequence may stop inside a character: é is two bytes, the ids end after the first
    for tok, default in ((ByteTokenizer(), 'strict'), (bpe, 'replace')):  # (tiktoken's own default: replace)
        ids = tok.encode('the café')
        assert tok.decode(ids) == 'the café'
        cut = ids[:-1]
        assert tok.decode(cut, errors='replace') == 'the caf\ufffd', tok.name
        with pytest.raises(UnicodeDecodeError):
            tok.decode(cut, errors='strict')
        if default == 'strict':
            with pytest.raises(UnicodeDecodeError):
                tok.decode(cut)
        else:
            assert tok.decode(cut) == 'the caf\ufffd'


# -----------------------------------------------------------------------------
# the prepared splits: missing data is one line naming the command that makes it, a split too short for a
# window refused

def test_a_tasks_missing_data_names_the_module_that_makes_it(tmp_path):
    # config/parity.py's dataset is written by python -m beyond.parity, not by prepare.py
    try:
        with pytest.raises(UserError, match=r'make it with `python -m beyond.parity`'):
            train.main([f'{HERE}/config/parity.py', f'--data_dir={tmp_path}', f'--out_dir={tmp_path / "out"}'])
    finally:
        torch.set_flush_denormal(False)
    assert not (tmp_path / 'out').exists()
    # a name that no module of beyond/ writes is text for prepare.py, as before
    with pytest.raises(UserError, match=r'python prepare.py --text_dir .* --out_dir data/my-text'):
        train.load_splits(str(tmp_path), 'my-text', 16)


def test_missing_data_names_the_prepare_command(tmp_path):
    c = SimpleNamespace(**settings(f'--data_dir={tmp_path}', '--dataset=wikitext-2-bytes'))
    with pytest.raises(UserError, match='python prepare.py --dataset wikitext-2 --tokenizer bytes'):
        train.load_splits(c.data_dir, c.dataset, c.block_size)
    c = SimpleNamespace(**settings(f'--data_dir={tmp_path}'))
    with pytest.raises(UserError, match='`python prepare.py`'):
        train.load_splits(c.data_dir, c.dataset, c.block_size)


def test_a_split_too_short_for_one_window_and_its_next_token_is_refused(tmp_path):
    for n, refused in ((33, True), (34, False)):  # block_size 32: a window and its targets span 33, and the starts
        # are drawn from [0, n - 33): at least one
        folder = tmp_path / str(n) / 'd'
        folder.mkdir(parents=True)
        for split in ('train', 'val'):
            np.zeros(n if split == 'val' else 1000, dtype=np.uint16).tofile(folder / f'{split}.bin')
        (folder / 'meta.json').write_text(json.dumps(dict(tokenizer='bytes', vocab_size=256, dtype='uint16',
                                                          tokens=dict(train=1000, val=n))))
        if refused:
            with pytest.raises(UserError, match=f'the val split of d has {n} tokens, too few for block_size 32'):
                load_splits(str(tmp_path / str(n)), 'd', 32)
        else:
            assert len(load_splits(str(tmp_path / str(n)), 'd', 32)[1]) == n


def test_a_split_is_read_as_a_read_only_memmap_in_the_dtype_meta_json_names(tmp_path):
    # the tokens are read, never written: a memmap opened for writing ('r+', numpy's default) would let a stray
    # assignment change the data file, and needs write access to it
    tokens = np.arange(40, dtype=np.uint32) * 70_000  # (past uint16: read as uint16 they would come out wrong)
    tokens.tofile(tmp_path / 'train.bin')
    (tmp_path / 'meta.json').write_text(json.dumps(dict(tokenizer='bytes', vocab_size=2 ** 32, dtype='uint32',
                                                        tokens=dict(train=40))))
    got, meta = data.load_tokens(str(tmp_path), 'train')
    assert isinstance(got, np.memmap) and got.dtype == np.uint32 and np.array_equal(got, tokens)
    assert meta['tokens'] == dict(train=40) and not got.flags.writeable
    with pytest.raises(ValueError):
        got[0] = 1
    assert np.array_equal(np.fromfile(tmp_path / 'train.bin', dtype=np.uint32), tokens)


# -----------------------------------------------------------------------------
# the token windows train.py draws and the evaluation scores: a function of the iteration, from the whole split,
# no more than it holds, spread evenly; every token scored exactly once

def test_batches_are_a_function_of_the_iteration():
    data = np.arange(10000, dtype=np.uint16)
    shape = dict(n_micro=2, batch_size=4, block_size=8, device='cpu')
    a, b, again = (train_batches(data, it, 0, seed=1, **shape)[0] for it in (0, 1, 0))
    assert torch.equal(a, again) and not torch.equal(a, b)
    assert not torch.equal(a[0], a[1])  # the micro-steps of one iteration differ too
    assert not torch.equal(train_batches(data, 0, 1, seed=1, **shape)[0], a)  # and so do ranks
    assert not torch.equal(train_batches(data, 0, 0, seed=2, **shape)[0], a)  # and seeds
    x, y = train_batches(data, 0, 0, seed=1, **shape)
    assert x.shape == (2, 4, 8) and torch.equal(y[..., :-1], x[..., 1:])  # targets: the inputs shifted by one


def test_train_windows_are_drawn_from_the_whole_split():
    # data[i] = i, so a window's first input is its start: over 200 iterations (1,600 windows of a
    # 1,000-token split) the starts reach both ends of the split, up to its last full windows
    data = np.arange(1000, dtype=np.uint16)
    shape = dict(n_micro=2, batch_size=4, block_size=8, device='cpu')
    starts = torch.stack([train_batches(data, it, 0, seed=1, **shape)[0] for it in range(200)])[..., 0]
    assert starts.min() < 20 and starts.max() > len(data) - 8 - 1 - 20  # both ends (a uniform draw: ~1e-14 to miss)


def test_evaluation_scores_no_more_batches_than_the_split_holds():
    data = np.arange(1000)  # 31 windows of 32 tokens: 3 batches of 8, whatever eval_iters asks
    x, y = eval_batches(data, eval_iters=40, batch_size=8, block_size=32, device='cpu')
    assert x.shape == y.shape == (3, 8, 32) and torch.equal(y[..., :-1], x[..., 1:])
    x, _ = eval_batches(data, eval_iters=2, batch_size=8, block_size=32, device='cpu')
    assert x.shape == (2, 8, 32)  # fewer asked: as asked
    x, _ = eval_batches(np.arange(100), eval_iters=4, batch_size=8, block_size=32, device='cpu')
    assert x.shape == (1, 8, 32)  # a split too short for one batch of distinct windows still gets one


def test_validation_windows_are_spread_evenly_over_the_whole_split():
    # data[i] = i, so a window's first input is its start: the 24 windows run from the split's first token
    # to its last full window, evenly spaced, each a different one
    data = np.arange(1000)
    x, y = eval_batches(data, eval_iters=3, batch_size=8, block_size=32, device='cpu')
    starts = x[..., 0].flatten()
    assert starts[0] == 0 and y[-1, -1, -1] == len(data) - 1  # both ends: the last target is the split's last token
    gaps = starts.diff()
    assert gaps.min() >= 42 and gaps.max() <= 43  # (1000 - 32 - 1) / 23 = 42.04 apart: evenly, in whole tokens


@pytest.mark.parametrize('n,block,max_tokens', [(1000, 32, 0), (1001, 32, 0), (33, 32, 0), (34, 32, 0),
                                                (1000, 32, 100), (50, 64, 0),
                                                (50, 16, 49), (40, 16, 10 ** 6)])  # max_tokens: all of them, and more
def test_every_token_is_scored_exactly_once(n, block, max_tokens):
    data = np.arange(n)  # token value = its position, so the targets name themselves
    windows = score_windows(n, block, max_tokens)
    scored = []
    for x, y in batches(data, windows, 3, 'cpu'):
        assert torch.equal(x + 1, y) and y.size(1) <= block
        scored += y.flatten().tolist()
    expect = min(n - 1, max_tokens) if max_tokens else n - 1
    assert sorted(scored) == list(range(1, expect + 1))


# -----------------------------------------------------------------------------
# a task in rows: whole rows drawn from seed, rank and iteration (every row can be drawn), evaluated in the split's
# order, on the device asked

def test_train_batches_draw_whole_rows_from_seed_rank_and_iteration(parity_data):
    train_data, val_data, meta = load_splits(str(parity_data), 'parity', 32)
    assert isinstance(train_data, Rows)
    kw = dict(seed=1, n_micro=2, batch_size=8, block_size=32, device='cpu')
    xs, ys = train_batches(train_data, 5, 0, **kw)
    assert xs.shape == ys.shape == (2, 8, 9)
    rows = {(tuple(x), tuple(y)) for x, y in zip(train_data.x.tolist(), train_data.y.tolist())}
    assert all((tuple(x), tuple(y)) in rows for x, y in zip(xs.reshape(-1, 9).tolist(), ys.reshape(-1, 9).tolist()))
    again = train_batches(train_data, 5, 0, **kw)
    assert torch.equal(xs, again[0]) and not torch.equal(xs, train_batches(train_data, 6, 0, **kw)[0])
    vx, vy = eval_batches(val_data, eval_iters=10, batch_size=16, block_size=32, device='cpu')
    assert vx.shape == (2, 16, 13)  # no more batches than the split's 40 rows hold
    assert torch.equal(vx.reshape(-1, 13), torch.from_numpy(val_data.x[:32].astype(np.int64)))


def rows_drawn(rows, iters=20, batch_size=16, n_micro=2):
    """How often each row is drawn in the first iters iterations of rank 0 (seed 1)."""
    counts = np.zeros(len(rows.x), dtype=int)
    for it in range(iters):
        xs, _ = train_batches(rows, it, 0, seed=1, n_micro=n_micro, batch_size=batch_size, block_size=3, device='cpu')
        np.add.at(counts, xs[..., 0].flatten().numpy(), 1)
    return counts


class ShortDraw:
    """A draw that never reaches the last row: integers(low, high) drawn below high - 1."""
    def __init__(self, rng):
        self.rng = rng

    def integers(self, low, high, size=None):
        return self.rng.integers(low, high - 1, size=size)


def test_over_enough_draws_every_row_is_drawn(monkeypatch):
    n_rows = 10
    ids = np.repeat(np.arange(n_rows, dtype=np.uint8)[:, None], 3, axis=1)  # row i holds i: a drawn row names itself
    rows = Rows(x=ids, y=ids.astype(np.int16))
    counts = rows_drawn(rows)
    # 640 uniform draws of 10 rows: a row is missed with probability 0.9^640 ~ 5e-30, and its count is
    # Binomial(640, 0.1), 64 +- 7.6: within 6 standard deviations of 64 for any seed but astronomically few
    draws, p = counts.sum(), 1 / n_rows
    assert draws == 640 and (counts > 0).all()
    assert (np.abs(counts - draws * p) < 6 * math.sqrt(draws * p * (1 - p))).all(), counts
    # the control: the same check on a rule one row short fails it
    real = np.random.default_rng
    monkeypatch.setattr(data.np.random, 'default_rng', lambda seed: ShortDraw(real(seed)))
    short = rows_drawn(rows)
    assert short[-1] == 0 and (short[:-1] > 0).all()


def test_a_tasks_batches_of_whole_rows_sit_on_the_device_asked():
    # train.py's and the evaluation's batches of a task in rows (beyond/parity.py's) are made on the run's
    # device, as the token windows are: on a GPU, a batch left on the CPU would meet the model's weights there
    rows = data.Rows(np.arange(24, dtype=np.uint8).reshape(6, 4), np.arange(100, 124, dtype=np.uint16).reshape(6, 4))
    drawn = data.train_batches(rows, 0, 0, seed=1, n_micro=2, batch_size=3, block_size=4, device='meta')
    val = data.eval_batches(rows, eval_iters=2, batch_size=3, block_size=4, device='meta')
    for x, y in (drawn, val):
        assert x.device.type == y.device.type == 'meta' and x.shape == y.shape == (2, 3, 4)
        assert x.dtype == y.dtype == torch.int64
    x, y = data.eval_batches(rows, eval_iters=2, batch_size=3, block_size=4, device='cpu')  # (on the CPU: the rows)
    assert torch.equal(x.reshape(6, 4), torch.from_numpy(rows.x).long())
    assert torch.equal(y.reshape(6, 4), torch.from_numpy(rows.y).long())


def test_token_windows_for_a_gpu_are_copied_to_the_gpu_named(monkeypatch):
    # token_windows: int64 windows on the device named; for CUDA through pinned memory. No GPU here: pinning is
    # the identity and a copy to a CUDA device lands on 'meta', standing in for it (a copy left on the CPU stays there)
    asked, real_to = [], torch.Tensor.to

    def to(self, device=None, *args, **kw):
        asked.append(device)
        return real_to(self, 'meta' if str(device).startswith('cuda') else device, *args, **kw)
    monkeypatch.setattr(torch.Tensor, 'pin_memory', lambda self: self)
    monkeypatch.setattr(torch.Tensor, 'to', to)
    x, y = data.token_windows(np.arange(100, dtype=np.uint16), np.array([[3, 10], [50, 0]]), 4, 'cuda:1')
    monkeypatch.undo()
    assert asked == ['cuda:1']
    assert x.device.type == y.device.type == 'meta' and x.shape == y.shape == (2, 2, 4) and x.dtype == torch.int64


# -----------------------------------------------------------------------------
# scoring: the progress bar and the first batch

class Terminal(io.StringIO):
    def isatty(self):
        return True


@pytest.mark.parametrize('stream', [Terminal, io.StringIO])
def test_the_scoring_progress_bar_counts_batches_and_shows_only_on_a_terminal(stream, monkeypatch):
    windows = score_windows(100, 16)  # 6 windows of 16 and one of 3: 2 batches of 4, then the tail
    sc = Scoring(None, np.arange(100), windows, 4, 'cpu', None)
    monkeypatch.setattr(sys, 'stderr', stream())
    with sc.progress(windows, 'scoring') as bar:
        bar.update(1)
    shown = sys.stderr.getvalue()
    if stream is Terminal:
        assert 'scoring' in shown and '0/3 ' in shown and 'batch/s' in shown, shown  # (3 batches: the tail is one of its own)
    else:
        assert shown == ''  # a log file or a pipe gets no bar


def test_first_batch_is_the_first_batch_size_windows_in_their_order():
    tokens = np.arange(200)
    sc = Scoring(None, tokens, [(0, 8), (8, 16), (24, 16), (40, 16)], 1, 'cpu', None)
    x, y = sc.first_batch()  # the first window, though a longer one follows it
    assert x.tolist() == [list(range(0, 8))] and y.tolist() == [list(range(1, 9))]
    x, _ = sc.first_batch(sc.windows[1:], 2)
    assert x.tolist() == [list(range(8, 24)), list(range(24, 40))]
    sc.batch_size = 3  # the first 3: a batch is of one length, the longest first
    x, _ = sc.first_batch()
    assert x.tolist() == [list(range(8, 24)), list(range(24, 40))]


# -----------------------------------------------------------------------------
# a run loaded back: a checkpoint without its training config, on the data folder named

def test_a_checkpoint_without_its_config_loads_on_the_data_folder_named(bare_checkpoint, tiny_data, tmp_path,
                                                                         monkeypatch):
    folder = tiny_data / 'tiny-bytes'
    model, config, val = load_run(str(bare_checkpoint), 'cpu', 'val', data_dir=str(folder))
    assert config == {} and not model.training
    assert np.array_equal(val, np.fromfile(folder / 'val.bin', dtype=np.uint16))
    model, tokenizer = sample.load(dict(sample.SETTINGS, out_dir=str(bare_checkpoint), data_dir=str(folder)), 'cpu')
    assert tokenizer.name == 'bytes' and not model.training
    # without --data_dir there is nothing to find it by: one line naming the folder looked in
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError, match=r"no prepared data in data/ \(meta.json missing\)"):
        load_run(str(bare_checkpoint), 'cpu', 'val')


@pytest.mark.parametrize('tokens, batches', [(2 * 2 * 4 + 1, 2), (2 * 2 * 4, 1)])
def test_eval_batches_are_no_more_than_the_split_holds_windows_for_to_the_token(tokens, batches):
    # B x T x n + 1 tokens hold n batches of B windows of T inputs (and their targets, one token on); one token fewer
    # holds n - 1
    x, y = eval_batches(np.arange(tokens) % 7, eval_iters=5, batch_size=2, block_size=4, device='cpu')
    assert x.shape == y.shape == (batches, 2, 4)
