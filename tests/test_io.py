"""
Reading and writing what the scripts share: the tokenizers' decode (tiktoken's BPE stood in by a
small one built here, as its ranks need a download), a checkpoint without its training config
loaded on the data folder named, a checkpoint file given where a run folder goes, the scoring
progress bar (only on a terminal) and first batch, the argument bounds of eval_depth.py, the
exit gate's base rate at 0 and 1, a results file's and the log's non-finite numbers, beyond/tasks.py's results.json,
prepare.py's progress bar, and beyond/parity.py's folders as prepare.py and a rewrite see them.

    python -m pytest -q tests/test_io.py
"""

import io
import json
import math
import re
import sys
from argparse import Namespace
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import data
import eval_depth
import prepare
import report
import sample
from beyond import exit_gate, parity, tasks
from configurator import UserError
from data import ByteTokenizer, Scoring, get_tokenizer, load_rows, load_run, score_windows
from model import LoopedGPT, LoopedGPTConfig


# ---------------------------------------------------------------------------------------
# the tokenizers

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


# ---------------------------------------------------------------------------------------
# a checkpoint without its training config, and a checkpoint file where a run folder goes

@pytest.fixture
def bare_checkpoint(tmp_path):
    """An untrained 2-loop model saved as model_args and weights alone: no 'config' of the run that
    trained it, so no dataset or data_dir to find its data by."""
    torch.manual_seed(0)
    args = dict(vocab_size=256, block_size=32, n_layer=1, n_head=2, n_embd=32, n_loops=2, dropout=0.0)
    folder = tmp_path / 'run'
    folder.mkdir()
    torch.save(dict(model_args=args, model=LoopedGPT(LoopedGPTConfig(**args)).state_dict()), folder / 'ckpt.pt')
    return folder / 'ckpt.pt'


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


def test_exit_gate_given_a_checkpoint_file_writes_the_gate_beside_it_and_reports_its_losses(
        bare_checkpoint, tiny_data, capsys, monkeypatch):
    loaded, load_run = [], exit_gate.load_run  # (the device the run is loaded on: on a GPU, the gate's)
    monkeypatch.setattr(exit_gate, 'load_run', lambda path, device, *a, **kw: loaded.append(device) or
                        load_run(path, device, *a, **kw))
    try:
        exit_gate.main([f'--out_dir={bare_checkpoint}', f'--data_dir={tiny_data / "tiny-bytes"}', '--device=cpu',
                        '--tokens=512', '--iters=5'])
    finally:
        torch.set_flush_denormal(False)  # (setup_device turns it on process-wide)
    assert loaded == ['cpu']  # the device asked for
    gate = bare_checkpoint.parent / 'gate.pt'
    info = torch.load(gate, weights_only=True)['info']
    line = capsys.readouterr().err
    assert line.startswith(f"gate={gate} reads=norm target=improve pairs={info['pairs']} "), line
    # the summary line's numbers are the saved ones: the base rate's held-out BCE -> the gate's
    got = re.search(r'base_rate=(\S+) heldout_bce=(\S+) -> (\S+) seconds=', line).groups()
    assert info['heldout_pairs'] > 0
    assert got == (f"{info['base_rate']:.3f}", f"{info['heldout_bce_base']:.4f}", f"{info['heldout_bce']:.4f}")


# ---------------------------------------------------------------------------------------
# the exit gate's base rate: clamped off 0 and 1 as the gate's starting bias is

@pytest.mark.parametrize('train_label', [1.0, 0.0])
def test_a_base_rate_of_0_or_1_is_clamped_as_the_gate_starts_from_it(train_label, monkeypatch):
    # 2 loops, 40 tokens in windows of 4: the first 20 train (every label train_label), the last 20
    # are held out (half each); the states say nothing (a zero-weight gate reads only its bias)
    N = 40
    agree = torch.ones(N, dtype=torch.bool)
    agree[20:] = torch.arange(20) % 2 == 0
    if train_label == 0.0:
        agree[:20] = False
    argmax = torch.stack([torch.where(agree, 0, 1), torch.zeros(N, dtype=torch.long)])  # 'agree': loop 1's is loop 2's
    states = torch.randn(1, N, 8, generator=torch.Generator().manual_seed(0))
    monkeypatch.setattr(exit_gate, 'collect', lambda *a, **k: (states, torch.zeros(2, N), argmax))
    model = SimpleNamespace(config=SimpleNamespace(block_size=4))
    gate, info = exit_gate.train_gate(model, None, N, 'norm', 'agree', 0.0, iters=0, lr=0.01, batch_size=8,
                                      holdout=0.5, ctx=None, device='cpu')
    assert info['base_rate'] == train_label and info['heldout_pairs'] == 20
    # a label the training pairs never showed costs -log(1e-4) nats, not torch's cap of 100; and the
    # untrained gate (its bias the clamped base rate's logit) is the base rate's constant exactly
    want = 0.5 * -math.log(1e-4) + 0.5 * -math.log(1 - 1e-4)
    assert info['heldout_bce_base'] == pytest.approx(want, rel=1e-4)
    assert info['heldout_bce'] == pytest.approx(info['heldout_bce_base'], rel=1e-4)


# ---------------------------------------------------------------------------------------
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
        assert 'scoring' in shown and '0/3 ' in shown, shown  # (3 batches: the tail is one of its own)
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


# ---------------------------------------------------------------------------------------
# eval_depth.py's argument bounds: the least value each takes, and one less refused

EVAL_DEFAULTS = dict(max_loops=None, lemma_loops=0, lemma_tokens=16384, batch_size=0, max_tokens=0, bench_iters=10,
                     diag_tokens=0)
LEAST = dict(max_loops=1, lemma_loops=2, lemma_tokens=1, batch_size=0, max_tokens=0, bench_iters=1, diag_tokens=0)


@pytest.mark.parametrize('name', LEAST)
def test_eval_depth_takes_each_settings_least_value_and_refuses_one_less(name):
    eval_depth.check_settings(Namespace(**dict(EVAL_DEFAULTS, **{name: LEAST[name]})))
    with pytest.raises(UserError, match=f'--{name}'):
        eval_depth.check_settings(Namespace(**dict(EVAL_DEFAULTS, **{name: LEAST[name] - 1})))


# ---------------------------------------------------------------------------------------
# the results files and beyond/tasks.py's results.json

def test_a_results_file_has_null_for_a_non_finite_value_and_refuses_one_it_cannot_null(tmp_path):
    path = tmp_path / 'results.json'
    report.write_json(str(path), dict(ppl=[5.0, float('nan')], loss={'K=1': float('inf')}))
    assert json.loads(path.read_text()) == dict(ppl=[5.0, None], loss={'K=1': None})
    # a non-finite dict key is no value json_safe makes null: an error, not a file with a 'NaN' in it
    with pytest.raises(ValueError):
        report.write_json(str(tmp_path / 'keys.json'), {float('nan'): 1.0})
    assert not (tmp_path / 'keys.json').exists()


def test_the_log_refuses_a_non_finite_number_it_cannot_null_as_a_results_file_does(tmp_path, capsys):
    # log.jsonl is written by the rule of write_json: what json_safe cannot make null (a dict's key) is an
    # error, not a line with a 'NaN' or 'Infinity' in it
    for key in (float('nan'), float('inf')):
        with pytest.raises(ValueError):
            report.log(str(tmp_path), {key: 1.0, 'iter': 3}, 'a line')
    report.log(str(tmp_path), {'iter': 4, 'loss': float('nan')}, 'another')  # (a value: null)
    assert (tmp_path / 'log.jsonl').read_text() == '{"iter": 4, "loss": null}\n'


def test_beyond_tasks_evaluates_on_the_device_asked_and_lists_the_runs_in_results_json(tmp_path, monkeypatch):
    asked = []

    def evaluate(runs, lengths, loops, seed, rows, interventions, device):  # (no model: rows of 50 %)
        asked.append(device)
        return [dict(run=run, length=n, K=k, trained_K=2, intervention='none', accuracy=0.5, exact=0.5, h_norm=1.0,
                     rms=1.0, one_minus_cos=0.0) for run in runs for n in lengths for k in loops]
    monkeypatch.setattr(tasks, 'evaluate', evaluate)
    monkeypatch.setattr(tasks, 'plot', lambda groups, path: None)
    tasks.main(['--runs=out/b-s2,out/a,out/b-s1', '--lengths=4,8', '--loops=1,2', '--device=cuda:1',
                f'--out={tmp_path}'])
    assert asked == ['cuda:1']
    results = json.loads((tmp_path / 'results.json').read_text())
    assert results['runs'] == ['out/b-s2', 'out/a', 'out/b-s1']  # each run once, in the order given
    assert (results['seed'], results['rows'], len(results['results'])) == (1, 256, 3 * 2 * 2)


# ---------------------------------------------------------------------------------------
# prepare.py's progress bar

def test_prepares_progress_bar_counts_a_files_bytes_in_scaled_units(tmp_path, capsys):
    text = tmp_path / 'train.txt'
    text.write_text('hello world\n' * 500)  # 6,000 bytes
    n, _ = prepare.write_bin(str(tmp_path / 'train.bin'), data.ByteTokenizer(), np.uint16,
                             prepare.file_source(str(text)), 'train', 1)
    assert n == 6000
    bar = capsys.readouterr().err
    assert '6.00k/6.00k' in bar and 'B/s' in bar, bar  # (not 6000/6000)


# ---------------------------------------------------------------------------------------
# beyond/parity.py's folders

SPLITS = dict(train=(30, list(range(1, 5))), val=(8, [6]), test=(8, [8]))


def test_parity_rewrites_its_folder_whole(tmp_path):
    parity.write(str(tmp_path), 1, SPLITS)
    parity.write(str(tmp_path), 2, dict(SPLITS, train=(12, [3])))
    meta = json.loads((tmp_path / 'meta.json').read_text())
    assert meta['seed'] == 2 and meta['rows']['train'] == 12 and meta['row_len']['train'] == 4
    assert load_rows(str(tmp_path), 'train').x.shape == (12, 4)
    assert sorted(p.name for p in tmp_path.iterdir() if 'meta' in p.name) == ['meta.json']  # (no .tmp left)


def test_prepare_refuses_a_parity_folder_naming_what_it_holds(tmp_path, tiny_data):
    parity.write(str(tmp_path), 3, SPLITS)
    before = (tmp_path / 'meta.json').read_text()
    with pytest.raises(SystemExit) as e:
        prepare.main(['--text_dir', str(tiny_data.parent / 'text'), '--tokenizer', 'bytes', '--out_dir', str(tmp_path)])
    assert str(e.value.code) == (f"prepare.py: error: {tmp_path} already holds parity tokens of parity, seed 3: "
                                 "use --force to replace them, or another --out_dir")
    assert (tmp_path / 'meta.json').read_text() == before
