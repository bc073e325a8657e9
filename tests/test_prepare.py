"""
prepare.py on small text files made here, the byte tokenizer, no network: once from the
outside for a clean run and for the one-line error, otherwise prepare.main in-process
(each subprocess costs an interpreter start and an import, most of these tests' time). Its progress bar, its
refusal of a folder beyond.parity wrote, and every option documented in its --help.

    python -m pytest -q tests/test_prepare.py
"""

import hashlib
import itertools
import json
import re
import os

import numpy as np
import pytest

import prepare
from beyond import parity
from conftest import PARITY_SPLITS, assert_one_line_error, assert_options_documented, run_script
from data import ByteTokenizer, bin_dtype

TEXT = {
    'train': " = Valkyria Chronicles III = \n \n Senjō no Valkyria 3 : <unk> Chronicles ( Japanese : 戦場のヴァルキュリア3 ) \n"
             "The game began development in 2010 , carrying over a large portion .\r\n\n" * 50,
    'val': " = Tower Building of the Little Rock Arsenal = \n \n The Tower Building , — a “quoted” word \n" * 20,
    'test': " = Robert Boulter = \n \n Robert Boulter is an English film actor ½ \n" * 10,
}


def write_texts(folder, names=('train.txt', 'valid.txt', 'test.txt'), splits=('train', 'val', 'test')):
    os.makedirs(folder, exist_ok=True)
    for name, split in zip(names, splits):
        with open(os.path.join(folder, name), 'wb') as f:
            f.write(TEXT[split].encode('utf-8'))


def run(*args, cwd=None, env=None):
    return run_script('prepare.py', *args, cwd=cwd, env=env, stand_in=True)  # (env: datasets' variables, read as it is imported)


def prepare_in_process(*args):
    """prepare.main on these arguments; what it printed."""
    import contextlib, io
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        prepare.main([str(a) for a in args])
    return out.getvalue()


def prepare_error(args, *needles):
    """prepare.main stops with one line, 'prepare.py: error: ...', naming each of needles."""
    with pytest.raises(SystemExit) as e:
        prepare_in_process(*args)
    message = str(e.value.code)
    assert message.startswith('prepare.py: error:') and '\n' not in message, message
    for needle in needles:
        assert needle in message, message


def read_split(out_dir, split):
    with open(os.path.join(out_dir, 'meta.json')) as f:
        meta = json.load(f)
    return np.fromfile(os.path.join(out_dir, f'{split}.bin'), dtype=meta['dtype']), meta


def test_bins_decode_back_to_the_text_and_meta_matches(tmp_path):
    write_texts(tmp_path / 'mytext')
    r = run('--text_dir', tmp_path / 'mytext', '--tokenizer', 'bytes', cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    out = tmp_path / 'data' / 'mytext-bytes'  # data/<folder name>-<tokenizer>
    for split in ('train', 'val', 'test'):
        ids, meta = read_split(out, split)
        assert ByteTokenizer().decode(ids) == TEXT[split]
        assert meta['tokens'][split] == len(ids) == os.path.getsize(out / f'{split}.bin') // 2
        assert meta['sha256'][split] == hashlib.sha256((out / f'{split}.bin').read_bytes()).hexdigest()
    assert meta['dtype'] == 'uint16' and meta['vocab_size'] == 256 and meta['tokenizer'] == 'bytes'
    assert sorted(os.listdir(out)) == ['meta.json', 'test.bin', 'train.bin', 'val.bin']  # no .tmp left
    assert (out / 'meta.json').read_text() == json.dumps(meta, indent=2)  # (two spaces a level, as written)
    # and meta.json says how the text became the tokens above: lines in order, each on its own, nothing added
    assert 'each line tokenized on its own' in meta['text'] and 'no separator or end-of-text token' in meta['text']


def test_wikitext_file_names_and_missing_test_split(tmp_path):
    write_texts(tmp_path / 'wt', names=('wiki.train.raw', 'wiki.valid.raw'), splits=('train', 'val'))
    prepare_in_process('--text_dir', tmp_path / 'wt', '--tokenizer', 'bytes', '--out_dir', tmp_path / 'out')
    ids, meta = read_split(tmp_path / 'out', 'val')
    assert ByteTokenizer().decode(ids) == TEXT['val']
    assert set(meta['tokens']) == {'train', 'val'}


def test_a_rewrite_without_a_test_split_removes_the_test_bin_of_an_earlier_run(tmp_path):
    # --force from a source of train and val only, into a folder that an earlier run gave a test.bin: no test.bin is
    # left beside the new bins (it would be another source's, in the old tokens, and meta.json does not name it)
    write_texts(tmp_path / 'three')
    write_texts(tmp_path / 'two', names=('train.txt', 'valid.txt'), splits=('train', 'val'))
    prepare_in_process('--text_dir', tmp_path / 'three', '--tokenizer', 'bytes', '--out_dir', tmp_path / 'out')
    assert (tmp_path / 'out' / 'test.bin').exists()
    prepare_in_process('--text_dir', tmp_path / 'two', '--tokenizer', 'bytes', '--out_dir', tmp_path / 'out', '--force')
    assert sorted(os.listdir(tmp_path / 'out')) == ['meta.json', 'train.bin', 'val.bin']
    assert set(read_split(tmp_path / 'out', 'train')[1]['tokens']) == {'train', 'val'}


def test_second_run_is_a_noop_and_force_rewrites(tmp_path):
    write_texts(tmp_path / 't')
    args = ('--text_dir', tmp_path / 't', '--tokenizer', 'bytes', '--out_dir', tmp_path / 'out')
    prepare_in_process(*args)
    bin_path = tmp_path / 'out' / 'train.bin'
    os.utime(bin_path, (0, 0))
    # its line: the folder, its tokenizer and each split's tokens (the bytes of its text, by hand), and what to do
    sizes = ', '.join(f"{split}: {len(TEXT[split].encode()):,} tokens" for split in ('train', 'val', 'test'))
    assert (f"{tmp_path / 'out'} is already complete (bytes, {sizes}); nothing to do (--force rewrites it)"
            in prepare_in_process(*args).splitlines())
    assert os.path.getmtime(bin_path) == 0
    assert 'already complete' not in prepare_in_process(*args, '--force')
    assert os.path.getmtime(bin_path) > 0
    assert ByteTokenizer().decode(read_split(tmp_path / 'out', 'train')[0]) == TEXT['train']


@pytest.mark.parametrize('size', ['shorter', 'longer'])
def test_a_bin_of_another_size_than_meta_records_is_not_taken_for_complete(tmp_path, size):
    write_texts(tmp_path / 't')
    args = ('--text_dir', tmp_path / 't', '--tokenizer', 'bytes', '--out_dir', tmp_path / 'out')
    prepare_in_process(*args)
    with open(tmp_path / 'out' / 'val.bin', 'r+b' if size == 'shorter' else 'ab') as f:
        f.truncate(10) if size == 'shorter' else f.write(b'\0')  # (a token more than meta's count)
    assert not prepare.is_complete(tmp_path / 'out')
    assert 'already complete' not in prepare_in_process(*args)
    assert ByteTokenizer().decode(read_split(tmp_path / 'out', 'val')[0]) == TEXT['val']


@pytest.mark.parametrize('threads', [1, 2])
def test_a_split_of_many_chunks_is_written_in_the_order_of_its_lines(tmp_path, monkeypatch, threads):
    # three lines a chunk: dozens of chunks, more than the threads keep pending, each line numbered
    text = ''.join(f'line {i}\n' for i in range(200))
    write_texts(tmp_path / 't')
    (tmp_path / 't' / 'train.txt').write_text(text)
    monkeypatch.setattr(prepare, 'LINES_PER_CHUNK', 3)
    prepare_in_process('--text_dir', tmp_path / 't', '--tokenizer', 'bytes', '--out_dir', tmp_path / 'out',
                       '--num_threads', threads)
    ids, meta = read_split(tmp_path / 'out', 'train')
    assert ByteTokenizer().decode(ids) == text
    assert meta['tokens']['train'] == len(text.encode()) == len(ids)  # (every chunk's tokens counted, not the last's)


@pytest.mark.parametrize('threads', [1, 2, 3])
def test_chunks_are_tokenized_by_num_threads_threads_at_once(tmp_path, monkeypatch, threads):
    # write_bin's promise: chunks tokenized in threads (--num_threads of them, at least one), appended in order; each
    # chunk's tokenization here takes 10 ms, long enough for the pool's threads to overlap, and counts those in flight
    import threading
    import time
    lock, now, most, encode = threading.Lock(), [0], [0], ByteTokenizer.encode_lines

    def slow(self, lines):
        with lock:
            now[0] += 1
            most[0] = max(most[0], now[0])
        time.sleep(0.01)
        with lock:
            now[0] -= 1
        return encode(self, lines)
    monkeypatch.setattr(ByteTokenizer, 'encode_lines', slow)
    monkeypatch.setattr(prepare, 'LINES_PER_CHUNK', 3)
    text = ''.join(f'line {i}\n' for i in range(60))
    write_texts(tmp_path / 't')
    (tmp_path / 't' / 'train.txt').write_text(text)
    prepare_in_process('--text_dir', tmp_path / 't', '--tokenizer', 'bytes', '--out_dir', tmp_path / 'out',
                       '--num_threads', threads)
    assert most[0] == threads  # (one thread: one chunk at a time; more: as many at once, not one after another)
    assert ByteTokenizer().decode(read_split(tmp_path / 'out', 'train')[0]) == text
    most[0] = 0
    prepare_in_process('--text_dir', tmp_path / 't', '--tokenizer', 'bytes', '--out_dir', tmp_path / 'zero',
                       '--num_threads', 0)
    assert most[0] == 1  # (--num_threads 0: one thread)


@pytest.mark.parametrize('existing', [False, True])
def test_an_interruption_leaves_no_complete_looking_output(tmp_path, monkeypatch, existing):
    write_texts(tmp_path / 't')
    args = ['--text_dir', str(tmp_path / 't'), '--tokenizer', 'bytes', '--out_dir', str(tmp_path / 'out')]
    if existing:
        prepare.main(args)
        args.append('--force')
    monkeypatch.setattr(prepare, 'LINES_PER_CHUNK', 3)
    calls = []

    def encode_then_interrupt(self, lines):
        calls.append(1)
        if len(calls) == 5:
            raise KeyboardInterrupt
        return np.frombuffer(''.join(lines).encode('utf-8'), dtype=np.uint8)
    monkeypatch.setattr(ByteTokenizer, 'encode_lines', encode_then_interrupt)
    with pytest.raises(SystemExit, match='interrupted'):
        prepare.main(args)
    left = os.listdir(tmp_path / 'out')
    assert 'meta.json' not in left and not any(f.endswith('.tmp') for f in left)
    assert not prepare.is_complete(tmp_path / 'out')
    if not existing:
        assert 'train.bin' not in left  # the split being written never appears under its name


def test_datasets_path_with_a_local_dataset(tmp_path, monkeypatch):
    datasets = pytest.importorskip('datasets')
    rows = {split: [line + '\n' for line in TEXT[split].split('\n')[:-1]] + [''] for split in TEXT}
    dd = datasets.DatasetDict({hf: datasets.Dataset.from_dict({'text': rows[s]})
                               for s, hf in prepare.HF_SPLITS.items()})
    dd.save_to_disk(str(tmp_path / 'wt-local'))
    monkeypatch.chdir(tmp_path)
    prepare_in_process('--dataset', tmp_path / 'wt-local', '--tokenizer', 'bytes')
    for split in TEXT:
        ids, meta = read_split(tmp_path / 'data' / 'wt-local-bytes', split)
        assert ByteTokenizer().decode(ids) == ''.join(rows[split])


def test_tiktoken_path_tokenizes_line_by_line(tmp_path, monkeypatch):
    # a small BPE built here (byte ranks plus a few merges) stands in for GPT-2's, which needs a download
    tiktoken = pytest.importorskip('tiktoken')
    ranks = {bytes([i]): i for i in range(256)}
    for merge in (b' t', b'he', b' the', b'in', b' =', b'\n\n', b'\n '):  # the last two cross line ends
        ranks.setdefault(merge, len(ranks))
    pat = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
    enc = tiktoken.Encoding('tiny', pat_str=pat, mergeable_ranks=ranks, special_tokens={})
    monkeypatch.setattr(tiktoken, 'get_encoding', lambda name: enc)
    write_texts(tmp_path / 't')
    prepare.main(['--text_dir', str(tmp_path / 't'), '--tokenizer', 'tiny', '--out_dir', str(tmp_path / 'out')])
    ids, meta = read_split(tmp_path / 'out', 'train')
    expect = [i for line in TEXT['train'].splitlines(keepends=True) for i in enc.encode_ordinary(line)]
    assert ids.tolist() == expect and enc.decode(expect) == TEXT['train']
    assert meta['vocab_size'] == enc.n_vocab and meta['dtype'] == 'uint16'


def test_dtype_follows_the_vocabulary():
    assert bin_dtype(256) == np.uint16
    assert bin_dtype(50257) == np.uint16
    assert bin_dtype(100277) == np.uint32


def test_clear_errors(tmp_path):
    write_texts(tmp_path / 'noval', names=('train.txt',), splits=('train',))
    # the one subprocess: the error as a user meets it, one line and no traceback
    assert_one_line_error(run('--text_dir', tmp_path / 'noval', '--tokenizer', 'bytes'), 'prepare.py',
                          'no val split', 'valid.txt')
    write_texts(tmp_path / 'empty')
    (tmp_path / 'empty' / 'valid.txt').write_bytes(b'')
    prepare_error(['--text_dir', tmp_path / 'empty', '--tokenizer', 'bytes'], 'is empty')
    write_texts(tmp_path / 'latin1')
    (tmp_path / 'latin1' / 'test.txt').write_bytes('ok\ncaf\xe9\n'.encode('latin-1'))
    prepare_error(['--text_dir', tmp_path / 'latin1', '--tokenizer', 'bytes', '--out_dir', tmp_path / 'o'],
                  'not UTF-8', 'line 2')
    assert not os.path.exists(tmp_path / 'o' / 'meta.json')
    prepare_error(['--text_dir', tmp_path / 'latin1', '--tokenizer', 'no-such-encoding'], 'unknown tokenizer')
    prepare_error(['--dataset', 'no-such-dataset', '--tokenizer', 'bytes'], 'unknown --dataset')
    prepare_error(['--train_file', tmp_path / 'latin1' / 'train.txt', '--tokenizer', 'bytes'], '--val_file')
    write_texts(tmp_path / 'other')
    args = ('--text_dir', tmp_path / 'other', '--out_dir', tmp_path / 'o2')
    prepare_in_process(*args, '--tokenizer', 'bytes')
    (tmp_path / 'other2').mkdir()
    write_texts(tmp_path / 'other2')
    prepare_error(['--text_dir', tmp_path / 'other2', '--out_dir', tmp_path / 'o2', '--tokenizer', 'bytes'],
                  'already holds', '--force')



def test_the_same_text_with_another_tokenizer_does_not_keep_the_old_bins(tmp_path, monkeypatch):
    # the same source into the same folder with another tokenizer: refused in one line and the bins left as
    # they are; with --force, rewritten in the new tokens (a tokenizer of its own: bytes shifted up by 256)
    class Shifted(ByteTokenizer):
        name, n_vocab = 'shifted', 512

        def encode_lines(self, lines):
            return super().encode_lines(lines).astype(np.uint16) + 256
    monkeypatch.setattr(prepare, 'get_tokenizer', lambda name: Shifted() if name == 'shifted' else ByteTokenizer())
    write_texts(tmp_path / 't')
    args = ['--text_dir', tmp_path / 't', '--out_dir', tmp_path / 'out']
    prepare_in_process(*args, '--tokenizer', 'bytes')
    before = {f: (tmp_path / 'out' / f).read_bytes() for f in os.listdir(tmp_path / 'out')}
    prepare_error([*args, '--tokenizer', 'shifted'], 'already holds bytes tokens', '--force')
    assert {f: (tmp_path / 'out' / f).read_bytes() for f in os.listdir(tmp_path / 'out')} == before
    prepare_in_process(*args, '--tokenizer', 'shifted', '--force')
    ids, meta = read_split(tmp_path / 'out', 'train')
    assert meta['tokenizer'] == 'shifted' and meta['vocab_size'] == 512
    assert ByteTokenizer().decode(ids - 256) == TEXT['train']

def test_no_network_suggests_text_dir(tmp_path):
    pytest.importorskip('datasets')
    env = dict(os.environ, HF_HUB_OFFLINE='1', HF_DATASETS_OFFLINE='1', HF_HOME=str(tmp_path / 'hf'))
    r = run('--dataset', 'wikitext-2', '--tokenizer', 'bytes', cwd=tmp_path, env=env)
    assert_one_line_error(r, 'prepare.py', 'wikitext-2', '--text_dir')
    assert not (tmp_path / 'data').exists()


def test_meta_is_written_only_after_every_bin_is_in_place(tmp_path, monkeypatch):
    write_texts(tmp_path / 't')
    real_replace = os.replace

    def failing_replace(src, dst):
        if str(dst).endswith('val.bin'):
            raise OSError('disk full')
        real_replace(src, dst)
    monkeypatch.setattr(prepare.os, 'replace', failing_replace)
    with pytest.raises(OSError):
        prepare.main(['--text_dir', str(tmp_path / 't'), '--tokenizer', 'bytes', '--out_dir', str(tmp_path / 'out')])
    assert not os.path.exists(tmp_path / 'out' / 'meta.json')
    assert not prepare.is_complete(tmp_path / 'out')


def test_meta_records_the_files_and_folder_a_run_read_with_no_dataset_config(tmp_path):
    # meta.json's 'dataset', 'config' and 'source' keys say where the tokens came from: for text files
    # the absolute path of each split's file, with no dataset config
    write_texts(tmp_path / 'files')
    prepare_in_process('--train_file', tmp_path / 'files' / 'train.txt', '--val_file', tmp_path / 'files' / 'valid.txt',
                       '--tokenizer', 'bytes', '--out_dir', tmp_path / 'out1')
    meta = read_split(tmp_path / 'out1', 'train')[1]
    assert {k: meta[k] for k in ('dataset', 'config', 'source')} == {
        'dataset': 'files', 'config': None,
        'source': {'train': str(tmp_path / 'files' / 'train.txt'), 'val': str(tmp_path / 'files' / 'valid.txt')}}
    write_texts(tmp_path / 'wt', names=('wiki.train.raw', 'wiki.valid.raw'), splits=('train', 'val'))
    prepare_in_process('--text_dir', tmp_path / 'wt', '--tokenizer', 'bytes', '--out_dir', tmp_path / 'out2')
    meta = read_split(tmp_path / 'out2', 'train')[1]
    assert {k: meta[k] for k in ('dataset', 'config', 'source')} == {
        'dataset': 'wt', 'config': None,
        'source': {'train': str(tmp_path / 'wt' / 'wiki.train.raw'), 'val': str(tmp_path / 'wt' / 'wiki.valid.raw')}}


def test_a_named_wikitext_is_loaded_with_its_config_and_recorded_in_meta(tmp_path, monkeypatch):
    # no network: a stand-in `datasets` module records what load_dataset is asked for
    import sys
    import types

    class Split:
        column_names = ['text']

        def __init__(self, lines):
            self.lines = lines

        def __len__(self):
            return len(self.lines)

        def iter(self, batch_size):
            for i in range(0, len(self.lines), batch_size):
                yield {'text': self.lines[i:i + batch_size]}

    calls, quieted = [], []

    def load_dataset(*args, **kwargs):
        calls.append((args, kwargs))
        return {'train': Split(['a b\n', 'c\n']), 'validation': Split(['d\n'])}
    fake = types.SimpleNamespace(load_dataset=load_dataset, load_from_disk=None,
                                 logging=types.SimpleNamespace(set_verbosity_error=lambda: quieted.append(calls[:])))
    monkeypatch.setitem(sys.modules, 'datasets', fake)
    monkeypatch.chdir(tmp_path)
    prepare_in_process('--dataset', 'wikitext-2', '--tokenizer', 'bytes')
    assert calls == [(('Salesforce/wikitext', 'wikitext-2-raw-v1'), {})]
    assert quieted == [[]]  # the hub's own logging set to errors only, once, before it loads (prepare prints its lines)
    ids, meta = read_split(tmp_path / 'data' / 'wikitext-2-bytes', 'train')
    assert ByteTokenizer().decode(ids) == 'a b\nc\n'
    assert {k: meta[k] for k in ('dataset', 'config', 'source')} == {
        'dataset': 'wikitext-2', 'config': 'wikitext-2-raw-v1', 'source': 'Salesforce/wikitext (wikitext-2-raw-v1)'}


# -----------------------------------------------------------------------------
# the progress bar

def test_prepares_progress_bar_counts_a_files_bytes_in_scaled_units(tmp_path, capsys):
    text = tmp_path / 'train.txt'
    text.write_text('hello world\n' * 500)  # 6,000 bytes
    n, _ = prepare.write_bin(str(tmp_path / 'train.bin'), ByteTokenizer(), np.uint16,
                             prepare.file_source(str(text)), 'train', 1)
    assert n == 6000
    bar = capsys.readouterr().err
    assert '6.00k/6.00k' in bar and 'B/s' in bar, bar  # (not 6000/6000)


def test_a_datasets_progress_bar_counts_its_rows(tmp_path, capsys):
    # a `datasets` source is counted in rows (its total known), a file in bytes (above)
    rows = ['hello world\n'] * 1500
    source = ('train', len(rows), lambda: iter([(rows, len(rows))]))  # (label, total_rows, chunks), as hf_sources gives
    n, _ = prepare.write_bin(str(tmp_path / 'train.bin'), ByteTokenizer(), np.uint16, source, 'train', 1)
    assert n == 12 * 1500
    bar = capsys.readouterr().err
    assert '1.50k/1.50k' in bar and 'row/s' in bar and 'B/s' not in bar, bar


def test_each_splits_progress_bar_is_named_by_its_split(tmp_path, capsys):
    """prepare: each split's bin is written under a progress bar named by the split (train:, val:, test:)."""
    from tqdm import tqdm
    write_texts(tmp_path / 'mytext')
    prepare_in_process('--text_dir', tmp_path / 'mytext', '--tokenizer', 'bytes', '--out_dir', tmp_path / 'o')
    bars = capsys.readouterr().err
    for split in ('train', 'val', 'test'):
        size = tqdm.format_sizeof(len(TEXT[split].encode('utf-8')))  # (the file's bytes: 9.60k, 680)
        assert re.search(rf'(^|\s){split}: 100%\|[^|]*\| {size}/{size} ', bars), bars


def test_a_source_that_holds_no_text_is_refused_and_leaves_no_file(tmp_path):
    """write_bin: a source whose rows give no token at all (a dataset of empty rows) is one line naming it, and
    neither its bin nor the temporary file is left."""
    def chunks():
        yield ['', ''], 2
        yield [''], 1
    path = str(tmp_path / 'train.bin')
    with pytest.raises(prepare.UserError, match=r'^empty rows \[train\] holds no text$'):
        prepare.write_bin(path, ByteTokenizer(), np.uint16, ('empty rows [train]', 3, chunks), 'train', 1)
    assert os.listdir(tmp_path) == []


# -----------------------------------------------------------------------------
# a folder that beyond.parity wrote: refused, naming what it holds

def test_prepare_refuses_a_parity_folder_naming_what_it_holds(tmp_path, tiny_data):
    parity.write(str(tmp_path), 3, PARITY_SPLITS)
    before = (tmp_path / 'meta.json').read_text()
    with pytest.raises(SystemExit) as e:
        prepare.main(['--text_dir', str(tiny_data.parent / 'text'), '--tokenizer', 'bytes', '--out_dir', str(tmp_path)])
    assert str(e.value.code) == (f"prepare.py: error: {tmp_path} already holds parity tokens of parity, seed 3: "
                                 "use --force to replace them, or another --out_dir")
    assert (tmp_path / 'meta.json').read_text() == before


# -----------------------------------------------------------------------------
# the command line: every option documented in --help, as tests/snapshots/argparse.json holds it

def test_every_option_of_an_argparse_script_is_documented_in_its_help(monkeypatch):
    assert_options_documented('prepare.py', prepare.main, monkeypatch)


def test_each_split_prints_its_tokens_its_source_and_its_rate(tmp_path, monkeypatch):
    """prepare.py prints one line a split: its tokens (meta's count), the file it read, the seconds and the rate."""
    clock = itertools.count(0, 10.0)  # (every reading of the clock 10 s after the last: whole seconds to divide by)
    monkeypatch.setattr(prepare.time, 'time', lambda: next(clock))
    write_texts(tmp_path / 'mytext')
    out = prepare_in_process('--text_dir', tmp_path / 'mytext', '--tokenizer', 'bytes', '--out_dir', tmp_path / 'o')
    meta = json.load(open(tmp_path / 'o' / 'meta.json'))
    for split, name in (('train', 'train.txt'), ('val', 'valid.txt'), ('test', 'test.txt')):
        m = re.search(rf'^{split}: ([\d,]+) tokens from (\S+) in ([\d.]+)s \(([\d,]+) tokens/s\)$', out, re.M)
        assert m, out
        tokens, seconds, rate = int(m[1].replace(',', '')), float(m[3]), int(m[4].replace(',', ''))
        assert tokens == meta['tokens'][split] == len(TEXT[split].encode('utf-8'))
        assert m[2].endswith(name)
        assert seconds == 10.0  # (the clock read before the split and after it: one step of it, whatever came before)
        assert abs(rate - tokens / seconds) <= 0.5
    # and last, where it wrote, the dtype and vocabulary, and the rate over every split: all tokens over all seconds
    overall = sum(meta['tokens'].values()) / 30.0
    assert out.rstrip('\n').splitlines()[-1] == f"wrote {tmp_path / 'o'} (uint16, vocab 256); {overall:,.0f} tokens/s overall"


def test_a_text_dir_holding_several_accepted_names_for_a_split_reads_the_first_in_order_of_preference(tmp_path):
    """TEXT_FILES: the names each split accepts in --text_dir, in order of preference: WikiText's raw file before its
    tokenized one, before a plain valid.txt."""
    folder = tmp_path / 'mytext'
    write_texts(folder)
    for name, text in (('wiki.valid.tokens', 'tokens file\n' * 5), ('wiki.valid.raw', 'raw file\n' * 5)):
        (folder / name).write_text(text)
    out = prepare_in_process('--text_dir', folder, '--tokenizer', 'bytes', '--out_dir', tmp_path / 'o')
    ids, _ = read_split(tmp_path / 'o', 'val')
    assert ByteTokenizer().decode(ids) == 'raw file\n' * 5
    assert re.search(r'^val: .* tokens from \S*wiki\.valid\.raw ', out, re.M), out
