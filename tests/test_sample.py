"""
sample.py, the plain sampler (model.forward at any K, no cache), on a tiny run trained here:
its main in-process, its checks, its summary line, and its one-line error from the outside. It needs nothing
from beyond/ (the cached sampler, python -m beyond.sample, is tests/test_beyond_sample.py's).

    python -m pytest -q tests/test_sample.py
"""

import contextlib
import io
import itertools
import re

import pytest
import torch

import sample
from conftest import assert_one_line_error, run_script
from configurator import UserError
from data import ByteTokenizer
from model import LoopedGPT, LoopedGPTConfig

SUMMARY = re.compile(r'^tokens=(\d+) seconds=([\d.]+) tok_per_s=([\d.]+) n_loops=(\d+)$', re.M)


@pytest.fixture(scope='module')
def run(sample_run):
    return sample_run  # (conftest's: the one tiny run both samplers' tests read)


def main(run, *args):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            sample.main([f'--out_dir={run}', '--device=cpu', *map(str, args)])
        finally:
            torch.set_flush_denormal(False)  # (setup_device turns flushing on, process-wide)
    return out.getvalue(), err.getvalue()


def test_samples_at_the_trained_and_a_deeper_k_with_the_summary_line(run):
    out, err = main(run, '--start=the loop', '--num_samples=2', '--max_new_tokens=12')
    assert out.count('---------------') == 2 and out.startswith('the loop')
    tokens, seconds, tok_s, K = SUMMARY.search(err).groups()
    assert int(tokens) == 24 and float(seconds) > 0 and float(tok_s) > 0 and int(K) == 3  # the trained K
    deeper, err = main(run, '--start=the loop', '--num_samples=1', '--max_new_tokens=12', '--n_loops=6')
    assert SUMMARY.search(err).group(4) == '6' and deeper.startswith('the loop')


def test_generate_is_the_k_loop_forward_token_by_token(run):
    # generate draws each token from forward's last-position logits at K, the context cropped to the last
    # block_size tokens as in nanoGPT (36 new tokens pass block_size 32; a 45-token prompt is past it at
    # once); the same seed, the same draws. Also on an untrained model of PyTorch's init, whose logits
    # are sharp: the tiny run's are near uniform after 20 steps, so its draws barely depend on them
    trained, _ = sample.load(dict(sample.SETTINGS, out_dir=str(run)), 'cpu')
    torch.manual_seed(0)
    sharp = LoopedGPT(LoopedGPTConfig(block_size=32, vocab_size=256, n_layer=1, n_head=2, n_embd=32, dropout=0.0))
    prompts = [b'the norm', b'the loop reads out every state and carries it']
    texts = {}
    for model, prompt in itertools.product((trained, sharp.eval()), prompts):
        x = torch.tensor([list(prompt)])
        for K in (1, 3, 5):
            torch.manual_seed(3)
            texts[model, prompt, K] = y = sample.generate(model, x, 36, n_loops=K, temperature=1.0)
            torch.manual_seed(3)
            ref = x
            with torch.no_grad():
                for _ in range(36):
                    logits = model(ref[:, -model.config.block_size:], n_loops=K)[0][:, -1]
                    ref = torch.cat((ref, torch.multinomial(torch.softmax(logits, -1), 1)), 1)
            assert torch.equal(y, ref), K
    # the loops matter: from one seed, K = 1, 3 and 5 sample different text (a sampler that ignored
    # n_loops would not), on the sharp model
    texts = {K: texts[sharp, prompts[0], K] for K in (1, 3, 5)}
    assert not torch.equal(texts[1], texts[5]) and not torch.equal(texts[3], texts[5])


def test_top_k_and_temperature_shape_the_distribution():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    p = sample.next_token_probs(logits, 1.0, 2)
    e = torch.exp(torch.tensor([2.0, 1.0]))
    assert torch.allclose(p, torch.tensor([[e[0] / e.sum(), e[1] / e.sum(), 0, 0]]))  # softmax of the top 2, by hand
    p = sample.next_token_probs(logits, 0.5, None)
    e = torch.exp(torch.tensor([4.0, 2.0, 0.0, -2.0]))
    assert torch.allclose(p, (e / e.sum())[None])
    # top_k=1 is greedy: every draw the argmax
    torch.manual_seed(0)
    p = sample.next_token_probs(logits.expand(100, 4), 1.0, 1)
    assert torch.multinomial(p, 1).eq(0).all()


def bad(**settings):
    with pytest.raises(UserError) as e:
        sample.check_settings(dict(sample.SETTINGS, **settings))
    return str(e.value)


def test_each_bad_setting_is_one_clear_line(run, tmp_path):
    for value in (0, 2.5):
        assert 'n_loops' in bad(n_loops=value)
    assert 'num_samples' in bad(num_samples=0) and 'max_new_tokens' in bad(max_new_tokens=0)
    assert 'top_k' in bad(top_k=-1) and 'temperature' in bad(temperature=0.0)
    with pytest.raises(UserError, match='prompt is empty'):
        sample.prompt_ids('', ByteTokenizer())
    with pytest.raises(UserError, match='prompt file'):
        sample.prompt_ids(f'FILE:{tmp_path / "none.txt"}', ByteTokenizer())
    (tmp_path / 'prompt.txt').write_text('the loop')
    assert sample.prompt_ids(f'FILE:{tmp_path / "prompt.txt"}', ByteTokenizer()) == list(b'the loop')
    assert sample.prompt_ids('FILES prompt.txt', ByteTokenizer()) == list(b'FILES prompt.txt')  # text: 'FILE:' is the mark
    config = dict(sample.SETTINGS, out_dir=str(tmp_path / 'nowhere'))
    with pytest.raises(UserError, match='no checkpoint'):
        sample.load(config, 'cpu')
    (tmp_path / 'ckpt.pt').write_bytes(b'garbage')
    with pytest.raises(UserError, match='not a checkpoint written by train.py'):
        sample.load(dict(config, out_dir=str(tmp_path)), 'cpu')
    with pytest.raises(UserError, match='meta.json'):
        sample.load(dict(config, out_dir=str(run), data_dir=str(tmp_path)), 'cpu')
    # from the outside: one line, no traceback
    assert_one_line_error(run_script('sample.py', f'--out_dir={run}', '--device=cpu', '--n_loops=0'),
                          'sample.py', 'n_loops')


def test_each_sample_runs_under_autocast_on_the_device_it_samples_on(run, monkeypatch):
    # the autocast context is asked for the sampling device and the resolved dtype: bfloat16 on the CPU here
    seen, real = [], sample.autocast

    def recording(device, dtype):
        seen.append((device, dtype))
        return real(device, dtype)
    monkeypatch.setattr(sample, 'autocast', recording)
    out, _ = main(run, '--start=the loop', '--num_samples=2', '--max_new_tokens=3', '--dtype=bfloat16')
    assert seen == [('cpu', 'bfloat16')] * 2 and out.count('---------------') == 2


# -----------------------------------------------------------------------------
# the summary line

def test_samples_summary_line_gives_the_tokens_a_second(monkeypatch, capsys):
    # 2 samples of 5 tokens in 2.5 s (the clock stood in): 4.0 tokens a second
    torch.manual_seed(0)
    model = LoopedGPT(LoopedGPTConfig(block_size=8, vocab_size=256, n_layer=1, n_head=1, n_embd=8, n_loops=2,
                                      dropout=0.0)).eval()
    monkeypatch.setattr(sample, 'load', lambda config, device: (model, ByteTokenizer()))
    clock = iter([100.0, 102.5])
    monkeypatch.setattr(sample, 'time', type('Clock', (), dict(perf_counter=staticmethod(lambda: next(clock)))))
    try:
        sample.main(['--device=cpu', '--start=ab', '--num_samples=2', '--max_new_tokens=5'])
    finally:
        torch.set_flush_denormal(False)  # (setup_device turns flushing on, process-wide)
    assert capsys.readouterr().err.splitlines()[-1] == 'tokens=10 seconds=2.500 tok_per_s=4.0 n_loops=2'


def test_main_samples_at_the_n_loops_asked_not_the_trained_k(monkeypatch, capsys):
    # --n_loops=5 on a model trained at K=2: the text printed is what generate draws at K=5 from the seed, which on
    # this sharp model (PyTorch's init) is not the trained K's text
    torch.manual_seed(0)
    model = LoopedGPT(LoopedGPTConfig(block_size=32, vocab_size=256, n_layer=1, n_head=2, n_embd=32, n_loops=2,
                                      dropout=0.0)).eval()
    monkeypatch.setattr(sample, 'load', lambda config, device: (model, ByteTokenizer()))
    try:
        sample.main(['--device=cpu', '--dtype=float32', '--start=the norm', '--num_samples=1', '--max_new_tokens=20',
                     '--temperature=1.0', '--top_k=0', '--seed=3', '--n_loops=5'])
    finally:
        torch.set_flush_denormal(False)  # (setup_device turns flushing on, process-wide)
    printed = capsys.readouterr().out
    texts = {}
    for K in (2, 5):
        torch.manual_seed(3)
        with torch.no_grad():
            y = sample.generate(model, torch.tensor([list(b'the norm')]), 20, n_loops=K, temperature=1.0)
        texts[K] = ByteTokenizer().decode(y[0].tolist(), errors='replace')
    assert texts[2] != texts[5]
    assert printed == texts[5] + '\n---------------\n'


def test_main_samples_at_the_temperature_and_top_k_asked(monkeypatch, capsys):
    # the text printed is what generate draws from the seed at the temperature and top_k given (top_k 0: every
    # token): top_k 3 at temperature 2 draws other text than every token at 2 and than top_k 3 at 0.5
    torch.manual_seed(0)
    model = LoopedGPT(LoopedGPTConfig(block_size=32, vocab_size=256, n_layer=1, n_head=2, n_embd=32, n_loops=2,
                                      dropout=0.0)).eval()
    monkeypatch.setattr(sample, 'load', lambda config, device: (model, ByteTokenizer()))
    texts = {}
    for temperature, top_k in ((2.0, 3), (2.0, 0), (0.5, 3)):
        try:
            sample.main(['--device=cpu', '--dtype=float32', '--start=the norm', '--num_samples=1', '--max_new_tokens=20',
                         f'--temperature={temperature}', f'--top_k={top_k}', '--seed=3'])
        finally:
            torch.set_flush_denormal(False)  # (setup_device turns flushing on, process-wide)
        torch.manual_seed(3)
        with torch.no_grad():
            y = sample.generate(model, torch.tensor([list(b'the norm')]), 20, 2, temperature, top_k or None)
        texts[temperature, top_k] = ByteTokenizer().decode(y[0].tolist(), errors='replace')
        assert capsys.readouterr().out == texts[temperature, top_k] + '\n---------------\n'
    assert len(set(texts.values())) == 3


def test_the_model_is_loaded_onto_the_device_it_samples_on(run, monkeypatch):
    """load() hands the device to the one loader (a CUDA sampler must not read the model onto the CPU)."""
    asked = []
    real = LoopedGPT.from_checkpoint.__func__

    def spy(cls, path, *args, **kwargs):
        asked.append((args, kwargs))
        return real(cls, path, *args, **kwargs)
    monkeypatch.setattr(LoopedGPT, 'from_checkpoint', classmethod(spy))
    sample.load(dict(sample.SETTINGS, out_dir=str(run), data_dir=''), 'cpu')
    assert asked == [(('cpu',), {})] or asked == [((), {'device': 'cpu'})]


def test_a_checkpoint_that_names_its_dataset_but_no_data_dir_finds_it_under_trains_default(bare_checkpoint, tiny_data,
                                                                                          tmp_path, monkeypatch):
    # a run's config that names its dataset but no data_dir: its data is under data_dir's default, train.py's
    # 'data', so the tokenizer is read from ./data/<dataset>/meta.json, where prepare.py writes it
    ckpt = torch.load(bare_checkpoint, weights_only=True)
    torch.save(dict(ckpt, config=dict(dataset='tiny-bytes')), bare_checkpoint)
    (tmp_path / 'data' / 'tiny-bytes').mkdir(parents=True)
    (tmp_path / 'data' / 'tiny-bytes' / 'meta.json').write_bytes((tiny_data / 'tiny-bytes' / 'meta.json').read_bytes())
    monkeypatch.chdir(tmp_path)
    model, tokenizer = sample.load(dict(sample.SETTINGS, out_dir=str(bare_checkpoint.parent), data_dir=''), 'cpu')
    assert isinstance(tokenizer, ByteTokenizer) and tokenizer.n_vocab == model.config.vocab_size == 256


def test_the_distribution_is_over_the_vocabulary_whatever_the_leading_dimensions():
    """next_token_probs: (..., vocab) logits -> a distribution over the last dimension, for any leading shape."""
    logits = torch.randn(2, 3, 7, generator=torch.Generator().manual_seed(0))
    probs = sample.next_token_probs(logits, 1.0, None)
    assert torch.allclose(probs.sum(-1), torch.ones(2, 3))
    assert torch.allclose(probs, torch.exp(logits - logits.logsumexp(-1, keepdim=True)))


def test_top_k_zero_samples_from_every_token_and_a_negative_one_is_refused():
    """top_k: 'sample among the k likeliest tokens only; 0: all of them' (its setting's comment)."""
    sample.check_settings(dict(sample.SETTINGS, top_k=0))
    with pytest.raises(UserError, match='top_k'):
        sample.check_settings(dict(sample.SETTINGS, top_k=-1))
