"""
The paths the rest of the suite reaches only on a GPU, under the compiler, across ranks, or not at all,
each run here on the CPU: the decoder's compiled step run as plain Python (the code torch.compile
compiles) decodes as the eager step (its static shapes, a graph for each batch size: tests/test_decoder.py);
what the step and the loss statistics make sits on their inputs' device, and a task's batches on
the device asked ('meta': a device other than the CPU, with no data and no GPU); a Stepper's cache
starts empty at every call; a scaled loss's gradient is rounded once; a token predicted with probability
1 has no radial fraction; the quantiles of a row past 2**24 tokens reach its last; under torchrun, a
non-finite evaluation stops every rank and each rank takes its own GPU over NCCL.

    python -m pytest -q tests/test_rare_paths.py
"""

import math
import socket

import numpy as np
import pytest
import torch
from torch.nn import functional as F

import data
import runtime
import train as train_module
from beyond import decoder
from beyond.decoder import decode, generate, new_cache
from configurator import UserError
from conftest import train_in_process
from linear_ce import linear_cross_entropy
from model import LoopedGPT, LoopedGPTConfig, summarize, token_diagnostics

V, T, D, K = 64, 16, 32, 3


def tiny(**kw):
    torch.manual_seed(0)
    cfg = dict(vocab_size=V, block_size=T, n_layer=2, n_head=2, n_embd=D, n_loops=K, dropout=0.0)
    return LoopedGPT(LoopedGPTConfig(**{**cfg, **kw})).eval()


# -----------------------------------------------------------------------------
# the decoder

def test_the_compiled_step_run_as_python_decodes_as_the_eager_step(monkeypatch):
    # mutmut cannot run the tests that compile (tests/test_decoder.py's is deselected there): with
    # torch.compile the identity, Stepper(compile=True) runs static_token (a fixed-K token) and
    # static_loop (one loop at a time, for exits and drafts) as Python, over every block_size slot
    # with a mask, and must give the eager step's tokens, loops and logits
    monkeypatch.setattr(torch, 'compile', lambda fn, **kw: fn)
    model = tiny(readout='final_norm', init_std=0.5, interloop_norm=True)
    prompt = torch.randint(0, V, (1, 4), generator=torch.Generator().manual_seed(1))
    for kw in (dict(), dict(exit_threshold=0.5), dict(draft_loops=1, draft_tokens=2)):
        eager = generate(model, prompt, 6, top_k=1, **kw)
        static = generate(model, prompt, 6, top_k=1, compile=True, **kw)
        assert torch.equal(eager[0], static[0]) and torch.equal(eager[1], static[1]), kw
        if 'exit_threshold' in kw:  # tokens that exit and tokens that run on, through static_loop
            assert (static[1] < K).any() and (static[1] == K).any()
    with torch.inference_mode():
        stepper = decoder.Stepper(model, compile=True)
        a, b = new_cache(model, 1), new_cache(model, 1)
        decode(model, prompt, a)
        decode(model, prompt, b)
        want = decode(model, prompt[:, -1:], a)[0]
        got = decode(model, prompt[:, -1:], b, stepper=stepper)[0]
    assert torch.allclose(want, got, atol=1e-5)
    assert torch.allclose(a.all[..., :5, :], b.all[..., :5, :], atol=1e-5)  # the same keys and values cached


def test_what_the_step_and_the_loss_statistics_make_sits_on_their_inputs_device():
    # on a GPU a tensor made on the host would be a copy and a wait at every step (a CUDA graph cannot
    # take it at all). 'meta' stands for such a device here: mixed with a CPU tensor it raises
    model = tiny(interloop_norm=True).to('meta')
    x = torch.zeros(1, T, dtype=torch.long, device='meta')
    with torch.no_grad():
        model(x, x)
    assert {t.device.type for t in model.stats.values()} == {'meta'}
    weights = decoder.Weights(model, torch.float32, static=False)  # the compiled step's inputs, as a Stepper makes them
    cache = decoder.KVCache(model.config, 1, K, 'meta', torch.float32)
    pos = torch.full((1,), 5, dtype=torch.long, device='meta')
    with torch.inference_mode():
        h = decoder.static_token(model, weights.blocks, model.embed(x[:, :1], 5), pos, cache.kv, K)
    assert h.device.type == 'meta' and h.shape == (1, 1, D)


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


def test_a_stepper_hands_out_its_cache_empty_at_every_call():
    # generate takes the Stepper's one cache for each call (its addresses fixed for a CUDA graph) and
    # leaves it filled; the next call gets it back empty: a decode on it is a decode on a new cache
    model = tiny(init_std=0.5)
    prompt = torch.randint(0, V, (1, 5), generator=torch.Generator().manual_seed(2))
    stepper = decoder.Stepper(model)
    generate(model, prompt, 4, top_k=1, stepper=stepper)
    assert stepper.held.length > 0
    cache = stepper.cache(1, K)
    assert cache is stepper.held
    with torch.inference_mode():
        got = decode(model, prompt, cache, stepper=stepper)[0]
        want = decode(model, prompt, new_cache(model, 1))[0]
    assert cache.length == prompt.size(1) and torch.allclose(got, want, atol=1e-6)


# -----------------------------------------------------------------------------
# the loss and its diagnostics

def test_the_gradient_of_a_scaled_loss_is_the_scaled_gradient_rounded_once():
    # backward multiplies the gradients linear_ce made in the forward pass by the loss's own gradient
    # (a mean's 1/N, a GradScaler's scale), in float32 as autograd's product would, and rounds once to
    # the input's dtype. Rounded to bf16 first, 1/3 is 0.33398: every gradient of a bf16 input 0.2% too large
    g = torch.Generator().manual_seed(3)
    w = torch.randn(V, D, generator=g) / D ** 0.5
    y = torch.randint(0, V, (24,), generator=g)
    for dtype in (torch.bfloat16, torch.float32):
        x = torch.randn(24, D, generator=g).to(dtype)

        def grad(scale):
            xr = x.clone().requires_grad_(True)
            total, _ = linear_cross_entropy(xr, w.to(dtype), y, chunk=16)
            (total * scale).backward()
            return xr.grad
        unit = grad(1.0)
        assert torch.equal(grad(1 / 3), (unit.float() * torch.tensor(1 / 3)).to(dtype)), dtype


def test_a_token_predicted_with_probability_one_has_no_radial_fraction():
    # with the raw readout and the head the identity, a state 360 along its target's row gives the other
    # tokens p = e^-360 ~ 4e-157: in float64 the target's p is 1 exactly, and the gradient, (p - onehot),
    # is not zero but below sqrt(tiny) ~ 1.5e-154, where its square, in its norm, is subnormal: a
    # direction made of rounding. Its radial fraction is NaN and left out of the mean; the other token's
    # is a number, and it is the mean. (Denormals kept, torch's default: flushed, as train.py's setup_device
    # does on a CPU, the square is 0 and so is the norm)
    torch.set_flush_denormal(False)
    model = LoopedGPT(LoopedGPTConfig(vocab_size=4, block_size=2, n_layer=1, n_head=1, n_embd=4, n_loops=1,
                                      readout='raw', dropout=0.0))
    with torch.no_grad():
        model.lm_head.weight.copy_(torch.eye(4))
    h = torch.tensor([[[360.0, 0, 0, 0], [0.3, -0.2, 0.1, 0.5]]])  # (1, 2, 4)
    targets = torch.tensor([[0, 1]])
    p = torch.softmax(h[0, 0].double(), -1)
    g_norm = (p - F.one_hot(torch.tensor(0), 4)).norm()
    assert p[0] == 1 and 0 < g_norm < torch.finfo(torch.float64).tiny ** 0.5  # the case: tiny, not zero
    per_token = token_diagnostics(model, [torch.ones_like(h), h], targets)
    radial = per_token['radial'][0]
    assert radial[0].isnan() and 0 < radial[1] <= 1
    assert summarize(per_token)['radial'] == [pytest.approx(radial[1].item())]


def test_the_quantiles_of_a_row_past_2_24_tokens_take_its_first_and_last_token():
    # torch.quantile takes at most 2**24 elements a row: summarize subsamples a longer row evenly, from its
    # first token to its last. 2**25 tokens, the last a NaN (a diverged token): the median and p99 are NaN,
    # as the mean and max of the whole row are (in float32 indices the last index was 2**25: an IndexError)
    norm = torch.ones(1, 2**25)
    norm[0, -1] = float('nan')
    got = summarize(dict(norm=norm, radial=torch.zeros(1, 1), angular=torch.zeros(1, 1)))
    assert all(math.isnan(got[name][0]) for name in ('norm_mean', 'norm_median', 'norm_p99', 'norm_max'))


# -----------------------------------------------------------------------------
# train.py under torchrun

def torchrun_environment(monkeypatch, rank, world_size):
    """The variables torchrun gives a rank (a free port for the rendezvous)."""
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        port = s.getsockname()[1]
    for name, value in dict(RANK=rank, LOCAL_RANK=rank, WORLD_SIZE=world_size, LOCAL_WORLD_SIZE=world_size,
                            MASTER_ADDR='127.0.0.1', MASTER_PORT=port).items():
        monkeypatch.setenv(name, str(value))


def test_under_torchrun_a_non_finite_evaluation_stops_the_run(tiny_data, tmp_path, monkeypatch):
    # lr 1e12: the first step's loss is finite (its log line passes) and the step leaves the weights
    # non-finite; the evaluation after it is rank 0's verdict, sent to every rank, and every rank must
    # stop with the one line, even on the run's last iteration. A process group of one rank (gloo), in
    # this process: the verdict's path is the same at any world size (tests/test_train.py runs two ranks)
    torchrun_environment(monkeypatch, 0, 1)
    monkeypatch.setattr(train_module, 'exit_process', lambda status: None)  # (a rank's end leaves by os._exit)
    try:
        with pytest.raises(UserError, match='non-finite by iteration 1: stopping'):
            train_in_process(tiny_data, tmp_path / 'run', '--max_iters=1', '--eval_interval=1',
                             '--learning_rate=1e12', '--grad_clip=0.0')
    finally:
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
    assert not (tmp_path / 'run' / 'ckpt.pt').exists()  # nothing non-finite saved


def test_under_torchrun_each_rank_takes_its_own_gpu_over_nccl_and_a_cpu_rank_gloo(monkeypatch):
    # rank 1 of two: its GPU is cuda:LOCAL_RANK, bound to an NCCL group; a CPU rank joins a gloo group.
    # No GPU here: CUDA's presence is faked for setup_device, and the group's start is recorded
    calls = []
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: True)
    monkeypatch.setattr(torch.cuda, 'set_device', lambda device: calls.append(('set_device', device)))
    monkeypatch.setattr(torch.distributed, 'init_process_group', lambda **kw: calls.append(kw))
    torchrun_environment(monkeypatch, 1, 2)
    tf32 = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    try:  # (setup_device's process-wide switches, restored)
        assert runtime.start_process('cuda', 4) == (True, 1, 2, 'cuda:1', 2)
        assert calls == [('set_device', 'cuda:1'), dict(backend='nccl', device_id=torch.device('cuda:1'))]
        calls.clear()
        assert runtime.start_process('cpu', 2) == (True, 1, 2, 'cpu', 1)
        assert calls == [dict(backend='gloo', device_id=None)]
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32
        torch.set_flush_denormal(False)


@pytest.mark.parametrize('flags, native', [('fpu avx512f avx512_bf16', True), ('fpu amx_bf16 amx_tile', True),
                                           ('fpu avx512f avx2', False), (None, False)])
def test_native_bf16_is_read_from_the_cpu_flags_of_proc_cpuinfo(monkeypatch, flags, native):
    """runtime.cpu_has_bf16 (which decides dtype='auto' on a CPU) reads Linux's /proc/cpuinfo: AVX-512 BF16
    or AMX is native bf16, any other CPU is not, and a machine without the file (macOS) is not either."""
    import io

    def fake_open(path, *args, **kwargs):
        if path != '/proc/cpuinfo' or flags is None:
            raise FileNotFoundError(path)
        return io.StringIO(f'processor\t: 0\nmodel name\t: a CPU\nflags\t\t: {flags}\nbugs\t\t: none\n')
    monkeypatch.setattr(runtime, 'open', fake_open, raising=False)
    assert runtime.cpu_has_bf16() is native
