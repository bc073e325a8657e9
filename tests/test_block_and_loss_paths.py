"""
What one block does in training and what the fused loss does under torch.compile, checked on the CPU
without compiling anything:

    python -m pytest -q tests/test_block_and_loss_paths.py

- the block drops the MLP's output in training (model.py's block comment): with the attention's output
  projection zeroed, a train-mode update is the eval-mode one with each entry either dropped (exactly
  0) or scaled by 1 / (1 - p);
- the block's RMSNorms use the layer's eps (the block's ln_1 and ln_2), each of them: the block agrees with
  its own nn.RMSNorm modules when their eps is set;
- the fused loss's compiled form (the branch torch.compile traces, taken here eagerly) gives the same
  loss, per-row CE and gradients as its eager form, and each row's are its own softmax's in both, whatever
  the scale of the chunk's other rows;
- the fused loss makes its tensors on its inputs' device (the default device 'meta' changes nothing),
  and holds no (chunk, V) tensor beyond each chunk's logits but the one float32 buffer of a narrower dtype.
"""

import pytest
import torch
from torch.nn import functional as F

import linear_ce
from linear_ce import linear_cross_entropy
from model import Block, LoopedGPTConfig

C, NH = 32, 2


def tiny_block(**kw):
    torch.manual_seed(0)
    return Block(LoopedGPTConfig(block_size=16, vocab_size=64, n_layer=1, n_head=NH, n_embd=C, n_loops=1, **kw))


def test_training_drops_the_mlp_output_and_rescales_the_rest():
    p = 0.5
    blk = tiny_block(dropout=p)
    with torch.no_grad():
        blk.attn.c_proj.weight.zero_()  # the attention adds nothing: the update is the MLP's alone
    x = torch.randn(2, 8, C)
    with torch.no_grad():
        want = blk.eval()(x) - x     # (B, T, C) the MLP's update, nothing dropped
        torch.manual_seed(1)
        got = blk.train()(x) - x
    assert (want != 0).all()
    dropped = got == 0
    assert 0.35 < dropped.float().mean() < 0.65  # about p of the 512 entries
    assert torch.allclose(got[~dropped], want[~dropped] / (1 - p), rtol=1e-5, atol=1e-6)


def reference_block(blk, x):
    """x + attn(ln_1(x)), then x + mlp(ln_2(x)), through the layer's own modules (their eps included)."""
    B, T, _ = x.shape
    q, k, v = blk.attn.c_attn(blk.ln_1(x)).split(C, -1)
    heads = [t.view(B, T, NH, C // NH).transpose(1, 2) for t in (q, k, v)]  # (B, nh, T, hs)
    y = F.scaled_dot_product_attention(*heads, is_causal=True).transpose(1, 2).reshape(B, T, C)
    x = x + blk.attn.c_proj(y)
    h = blk.ln_2(x)
    return x + blk.mlp.w_down(F.silu(blk.mlp.w_gate(h)) * blk.mlp.w_up(h))


def test_every_norm_of_the_block_uses_the_layers_eps():
    blk = tiny_block(dropout=0.0).eval()
    x = 0.3 * torch.randn(2, 8, C)  # RMS ~0.3: an eps of 1 changes each norm's output about 3x
    blk.ln_1.eps = blk.ln_2.eps = 1.0
    with torch.no_grad():
        got, want = blk(x), reference_block(blk, x)
        blk.ln_1.eps = blk.ln_2.eps = None
        default = reference_block(blk, x)
    assert not torch.allclose(want, default, atol=1e-3)  # (the eps matters at this scale)
    assert torch.allclose(got, want, atol=1e-5)


def fused_loss_inputs(seed, ignored=True):
    """x (40, C) and the head w (50, C), both with gradients, and 40 targets (ignored: every fifth -1, not scored)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(40, C, generator=g, requires_grad=True)
    w = torch.randn(50, C, generator=g, requires_grad=True)
    y = torch.randint(0, 50, (40,), generator=g)
    if ignored:
        y[::5] = -1
    return x, w, y


def fused_loss_and_grads(x, w, y, autocast=False):
    """(the loss, per-row CE, dloss/dx, dloss/dw) of linear_cross_entropy in chunks of 16 rows."""
    x.grad = w.grad = None
    with torch.autocast('cpu', dtype=torch.bfloat16, enabled=autocast):
        total, ce = linear_cross_entropy(x, w, y, chunk=16)
    total.backward()
    return total.detach(), ce, x.grad.clone(), w.grad.clone()


@pytest.mark.parametrize('autocast', [False, True])
def test_the_compiled_form_of_the_fused_loss_matches_its_eager_form(monkeypatch, autocast):
    x, w, y = fused_loss_inputs(3)
    eager = fused_loss_and_grads(x, w, y, autocast)
    # the branch taken under torch.compile (_softmax_grad_compiled, no reused buffer), here run eagerly
    with monkeypatch.context() as m:
        m.setattr(torch.compiler, 'is_compiling', lambda: True)
        compiled = fused_loss_and_grads(x, w, y, autocast)
    tol = dict(rtol=1e-2, atol=1e-2) if autocast else dict(rtol=1e-5, atol=1e-5)
    assert (compiled[1][::5] == 0).all()
    for a, b in zip(compiled, eager):
        assert torch.allclose(a.float(), b.float(), **tol)


@pytest.mark.parametrize('compiling', [False, True])
def test_the_fused_loss_makes_its_tensors_on_its_inputs_device(monkeypatch, compiling):
    # on a GPU a tensor made on the default device (the CPU) would meet the inputs' in an op and raise (or
    # copy through the host). The default device set to 'meta' stands for that here: the loss of CPU inputs
    # must not change, in either of its forms
    x, w, y = fused_loss_inputs(4)
    monkeypatch.setattr(torch.compiler, 'is_compiling', lambda: compiling)
    want = fused_loss_and_grads(x, w, y)
    with torch.device('meta'):
        got = fused_loss_and_grads(x, w, y)
    for a, b in zip(got, want):
        assert a.device.type == 'cpu' and torch.allclose(a, b, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize('compiling', [False, True])
def test_each_rows_loss_is_its_own_softmaxs_whatever_the_other_rows_scale(monkeypatch, compiling):
    # the rows of a chunk are independent: a row of logits ~300 beside one of logits ~1 leaves that row's CE
    # and gradient as they are alone (each row's max is its own: exp(1 - 300) is 0 in float32). In both forms
    g = torch.Generator().manual_seed(5)
    x = torch.randn(16, C, generator=g)
    x[::2] *= 0.05  # logits ~0.3
    x[1::2] *= 20.0  # logits ~100 apart: up to ~300
    x.requires_grad_(True)
    w = torch.randn(50, C, generator=g)
    y = torch.randint(0, 50, (16,), generator=g)
    monkeypatch.setattr(torch.compiler, 'is_compiling', lambda: compiling)
    total, ce = linear_cross_entropy(x, w, y, chunk=16)
    (gx,) = torch.autograd.grad(total, x)
    xd = x.detach().double().requires_grad_(True)
    want = F.cross_entropy(F.linear(xd, w.double()), y, reduction='none')
    (want_gx,) = torch.autograd.grad(want.sum(), xd)
    z = F.linear(x, w).detach()
    assert z.max() > 150 + z[::2].max()  # (the case: past float32's exp(-104), its least denormal)
    assert torch.isfinite(ce).all() and torch.isfinite(gx).all()
    assert torch.allclose(ce.double(), want.detach(), rtol=1e-5, atol=1e-5)
    assert torch.allclose(gx.double(), want_gx, rtol=1e-4, atol=1e-4)


class ChunkByVocabulary(torch.utils._python_dispatch.TorchDispatchMode):
    """The (rows of a chunk, V) tensors that the ops below autograd make, by storage (a view or an in-place
    op's output shares its input's: one storage each), kept alive so that no two share an address."""

    def __init__(self, chunk, V):
        super().__init__()
        self.chunk, self.V, self.storages = chunk, V, {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor) and t.dim() == 2 and t.size(0) <= self.chunk and t.size(1) == self.V:
                self.storages.setdefault(t.untyped_storage().data_ptr(), (t.dtype, t))
        return out


@pytest.mark.parametrize('autocast', [False, True])
def test_the_fused_loss_holds_a_chunk_of_logits_and_a_float32_buffer_only_where_they_are_narrower(autocast):
    # the loss's memory is O(chunk x V): in float32 the softmax and its gradient are made in each chunk's
    # logits themselves, nothing more of the vocabulary's width; under bf16 autocast the float32 gradient
    # needs one buffer of its own, made once and reused by every chunk
    x, w, y = fused_loss_inputs(5, ignored=False)
    wide = ChunkByVocabulary(16, 50)  # (C = 32 rows: the head's weight transposed is not one)
    with wide, torch.autocast('cpu', dtype=torch.bfloat16, enabled=autocast):
        linear_cross_entropy(x, w, y, chunk=16)  # 3 chunks: 16, 16 and 8 rows
    made = sorted(str(dtype) for dtype, _ in wide.storages.values())
    assert made == (['torch.bfloat16'] * 3 + ['torch.float32'] if autocast else ['torch.float32'] * 3)
