"""
The fused, chunked readout loss (linear_ce.py) gives the plain path's loss and gradients:
logits materialised, then F.cross_entropy. On its own, and through every readout of the model.

    python -m pytest -q test_linear_ce.py
"""

import pytest
import torch
from torch.nn import functional as F

from linear_ce import chunk_rows, linear_cross_entropy
from model import LoopedGPT, LoopedGPTConfig

V, T, D = 97, 16, 32


def plain(x, w, y):
    return F.cross_entropy(F.linear(x, w).float(), y, ignore_index=-1, reduction='none')


@pytest.mark.parametrize('chunk', [1, 7, 64, 1000])
def test_matches_cross_entropy_on_materialised_logits(chunk):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(100, D, generator=g, requires_grad=True)
    w = torch.randn(V, D, generator=g, requires_grad=True)
    y = torch.randint(0, V, (100,), generator=g)
    y[::9] = -1  # ignored rows: no loss, no gradient
    total, ce = linear_cross_entropy(x, w, y, chunk=chunk)
    (0.3 * total).backward()  # a non-unit upstream gradient, as the model's mean over tokens gives
    gx, gw = x.grad, w.grad
    x.grad = w.grad = None
    ref = plain(x, w, y)
    (0.3 * ref.sum()).backward()
    assert torch.allclose(ce, ref, atol=1e-5) and not ce.requires_grad
    assert (ce[::9] == 0).all() and (gx[::9] == 0).all()
    assert torch.allclose(total, ref.sum(), rtol=1e-6)
    assert torch.allclose(gx, x.grad, atol=1e-6) and torch.allclose(gw, w.grad, atol=1e-5)


def test_without_gradients_it_only_scores():
    x, w = torch.randn(50, D), torch.randn(V, D)
    y = torch.randint(0, V, (50,))
    with torch.no_grad():
        total, ce = linear_cross_entropy(x, w, y, chunk=8)
    assert torch.allclose(ce, plain(x, w, y), atol=1e-5)


def test_chunks_are_sized_by_bytes_of_logits():
    assert chunk_rows(100, 256) == 100                        # few rows: one chunk
    assert chunk_rows(10**6, 50257) == 256 * 2**20 // (4 * 50257)  # 256 MiB of float32 logits
    assert chunk_rows(10**6, 10**7) == 256                     # never below 256 rows


# ---------------------------------------------------------------------------------------
# through the model: every readout, per-loop and terminal, the penalty, the tie

def tiny(**kw):
    torch.manual_seed(0)
    args = dict(vocab_size=V, block_size=T, n_layer=1, n_head=2, n_embd=D, n_loops=3, dropout=0.0)
    return LoopedGPT(LoopedGPTConfig(**dict(args, **kw)))


def plain_model_loss(model, x, y):
    """The loss written out with materialised logits and F.cross_entropy, as before linear_ce."""
    cfg = model.config
    states = model.hidden_states(x)[1:]
    K = len(states)
    read = range(K) if cfg.loss == 'perloop' else [K - 1]
    ce = [F.cross_entropy(model.logits(states[k], last=(k == K - 1)).view(-1, V).float(), y.view(-1),
                          ignore_index=-1) for k in read]
    loss = sum(ce) / len(ce)
    return loss + cfg.norm_penalty * sum(h.float().pow(2).mean() for h in states) / K


def grads(model, loss):
    model.zero_grad()
    loss.backward()
    return {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize('readout', ['norm', 'raw', 'final_norm'])
@pytest.mark.parametrize('loss', ['perloop', 'terminal'])
def test_model_loss_and_every_gradient_match_the_plain_path(readout, loss):
    model = tiny(readout=readout, loss=loss, norm_penalty=0.01)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randint(0, V, (4, T), generator=g), torch.randint(0, V, (4, T), generator=g)
    y[:, :3] = -1
    _, fused, _ = model(x, y)
    got = grads(model, fused)
    ref = plain_model_loss(model, x, y)
    want = grads(model, ref)
    assert fused.item() == pytest.approx(ref.item(), rel=1e-6)
    assert set(got) == set(want)
    for name in got:
        assert torch.allclose(got[name], want[name], rtol=1e-4, atol=1e-6), name
    # the head is the embedding (tied), and its gradient holds both uses
    assert model.lm_head.weight is model.transformer.wte.weight
    if readout == 'final_norm':  # the last loop's readout gain is trained only through the last loop
        assert got['readout_norm.weight'].abs().sum() > 0


def test_bf16_autocast_matches_the_plain_path_under_autocast():
    model = tiny(readout='final_norm')
    g = torch.Generator().manual_seed(2)
    x, y = torch.randint(0, V, (4, T), generator=g), torch.randint(0, V, (4, T), generator=g)
    with torch.autocast('cpu', dtype=torch.bfloat16):
        _, fused, _ = model(x, y)
    got = grads(model, fused)
    with torch.autocast('cpu', dtype=torch.bfloat16):
        ref = plain_model_loss(model, x, y)
    want = grads(model, ref)
    assert fused.dtype == torch.float32
    assert fused.item() == pytest.approx(ref.item(), rel=2e-2)
    for name in got:
        cos = F.cosine_similarity(got[name].flatten(), want[name].flatten(), dim=0)
        ratio = got[name].norm() / want[name].norm()
        assert cos > 0.99 and abs(ratio - 1) < 0.02 and got[name].dtype == torch.float32, name


def test_bf16_gradient_of_confident_tokens_is_not_rounded_away():
    # targets predicted with p ~ 0.99-0.999: in bf16, p - 1 would be off by up to 20% or zero
    g = torch.Generator().manual_seed(4)
    n = 24
    x = 5 * torch.linalg.qr(torch.randn(D, n, generator=g))[0].T  # (n, D), orthogonal rows
    w = torch.randn(V, D, generator=g) * 0.02
    y = torch.arange(n)
    margin = 8 + 2 * torch.rand(n, generator=g)  # each row's target logit 8-10 above the rest: p 0.97-0.996
    w[y] += margin[:, None] * x / x.pow(2).sum(-1, keepdim=True)
    w.requires_grad_(True)
    xs = x.clone().requires_grad_(True)
    with torch.autocast('cpu', dtype=torch.bfloat16):
        total, ce = linear_cross_entropy(xs, w, y, chunk=16)
    total.backward()
    p = (-ce).exp()
    assert p.min() > 0.95 and p.max() < 0.999  # confident, but the gradient is not zero
    ref = F.cross_entropy(F.linear(x.bfloat16(), w.detach().bfloat16()).float(), y, reduction='none')
    x32 = x.bfloat16().float().requires_grad_(True)
    F.cross_entropy(F.linear(x32, w.detach().bfloat16().float()), y, reduction='sum').backward()
    assert torch.allclose(ce, ref, rtol=1e-2, atol=1e-4)
    per_row = xs.grad.norm(dim=-1) / x32.grad.norm(dim=-1)  # each row's gradient has the right size
    assert ((per_row - 1).abs() < 0.03).all(), per_row


def test_compiled_model_matches_eager():
    model = tiny(readout='final_norm', norm_penalty=0.01)
    g = torch.Generator().manual_seed(3)
    x, y = torch.randint(0, V, (4, T), generator=g), torch.randint(0, V, (4, T), generator=g)
    y[0, 0] = -1
    _, eager, _ = model(x, y)
    want = grads(model, eager)
    _, compiled, stats = torch.compile(model)(x, y)
    got = grads(model, compiled)
    assert compiled.item() == pytest.approx(eager.item(), rel=1e-5)
    assert torch.isfinite(stats['ce']).all()
    for name in got:
        assert torch.allclose(got[name], want[name], rtol=1e-3, atol=1e-5), name
