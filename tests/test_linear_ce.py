"""
The fused, chunked readout loss (linear_ce.py) gives the plain path's loss and gradients:
logits materialised, then F.cross_entropy. On its own, and through every readout of the model; its compiled
form gives its eager form's, on its inputs' device, holding one chunk's logits at a time.

    python -m pytest -q tests/test_linear_ce.py
"""

import pytest
import torch
from torch.nn import functional as F

import linear_ce
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


def test_a_second_backward_is_refused_not_scaled_twice():
    # backward scales the saved gradients in place (no second vocabulary-sized buffer): a second
    # backward through retain_graph would read scaled ones, so it is an error, not a wrong gradient
    x, w = torch.randn(10, D, requires_grad=True), torch.randn(V, D, requires_grad=True)
    total, _ = linear_cross_entropy(x, w, torch.randint(0, V, (10,)), chunk=4)
    (0.5 * total).backward(retain_graph=True)
    first = w.grad.clone()
    with pytest.raises(RuntimeError, match='backward ran twice'):
        total.backward()
    assert torch.equal(w.grad, first)  # nothing accumulated from the refused pass


def test_float64_is_computed_in_float64_both_ways():
    # the diagnostics' radial fraction sits near 1e-9 and needs the gradient in float64: a float32
    # softmax buffer (or the compiled form's .float()) would leave it float32-accurate, ~1e-7 off
    g = torch.Generator().manual_seed(0)
    x = torch.randn(40, D, generator=g, dtype=torch.float64, requires_grad=True)
    w = torch.randn(V, D, generator=g, dtype=torch.float64)
    y = torch.randint(0, V, (40,), generator=g)
    total, ce = linear_cross_entropy(x, w, y, chunk=16)
    (gx,) = torch.autograd.grad(total, x)
    ref = F.cross_entropy(F.linear(x, w), y, reduction='sum')
    (want,) = torch.autograd.grad(ref, x)
    assert ce.dtype == gx.dtype == torch.float64
    assert (gx - want).abs().max() < 1e-13 and (total - ref).abs() < 1e-10
    z = F.linear(x.detach(), w)
    ce_c, g_c = linear_ce._softmax_grad_compiled(z, y)
    assert g_c.dtype == torch.float64 and (g_c @ w - want).abs().max() < 1e-13


def test_without_gradients_it_only_scores():
    x, w = torch.randn(50, D), torch.randn(V, D)
    y = torch.randint(0, V, (50,))
    with torch.no_grad():
        total, ce = linear_cross_entropy(x, w, y, chunk=8)
    assert torch.allclose(ce, plain(x, w, y), atol=1e-5)


@pytest.mark.parametrize('n', [1, 7, 8, 9, 16, 17, 23])
def test_scoring_keeps_every_row_of_every_chunk(n):
    # the no-grad path takes its own chunk loop (no autograd Function): every row is scored,
    # whether the rows fill the last chunk, leave one row alone in it (9, 17) or one row short (7, 23)
    g = torch.Generator().manual_seed(n)
    x, w = torch.randn(n, D, generator=g), torch.randn(V, D, generator=g)
    y = torch.randint(0, V, (n,), generator=g)
    y[n // 2] = -1  # an ignored row scores 0 here too
    want = plain(x, w, y)
    with torch.no_grad():
        total, ce = linear_cross_entropy(x, w, y, chunk=8)
    assert ce.shape == (n,), f"{n} rows in chunks of 8 scored {ce.shape[0]} rows"
    assert torch.allclose(ce, want, atol=1e-5) and ce[n // 2] == 0
    assert total.item() == pytest.approx(want.sum().item(), rel=1e-6)
    # and the scores are the training path's, row by row
    _, trained = linear_cross_entropy(x.clone().requires_grad_(True), w, y, chunk=8)
    assert torch.allclose(ce, trained, atol=1e-5)


def test_the_model_scores_every_token_when_its_rows_span_several_chunks(monkeypatch):
    # the model's batches fit one chunk of chunk_rows (at least MIN_CHUNK = 256 rows); with
    # chunks of 7 rows its no-grad readout (depth_losses, the eval's) crosses chunks, the last
    # of them one row (4 x 16 = 64 = 9 x 7 + 1 tokens per loop), and must still score every token
    monkeypatch.setattr(linear_ce, 'MIN_CHUNK', 1)
    monkeypatch.setitem(linear_ce.CHUNK_BYTES, 'cpu', 7 * 4 * V)
    assert chunk_rows(64, V) == 7
    model = tiny(readout='final_norm').eval()
    g = torch.Generator().manual_seed(10)
    x, y = torch.randint(0, V, (4, T), generator=g), torch.randint(0, V, (4, T), generator=g)
    with torch.no_grad():
        states = model.hidden_states(x)[1:]
        depth = [model.depth_losses([h], y)[0] for h in states]  # one loop at a time: 64 rows each
        want = [plain(model.readout(h, True).view(-1, D), model.lm_head.weight, y.view(-1)) for h in states]
    for k, (got, ref) in enumerate(zip(depth, want)):
        assert got.shape == (4 * T,), f"loop {k + 1}: {got.shape[0]} of {4 * T} tokens scored"
        assert torch.allclose(got, ref, atol=1e-5), k


def test_chunks_are_sized_by_bytes_of_logits():
    assert chunk_rows(100, 256) == 100                        # few rows: one chunk
    assert chunk_rows(10**6, 50257) == 256 * 2**20 // (4 * 50257)  # 256 MiB of float32 logits
    assert chunk_rows(10**6, 10**7) == 256                     # never below 256 rows
    assert chunk_rows(10**6, 50257, 'cuda') == 2**30 // (4 * 50257) // 128 * 128  # 1 GiB on a GPU, 128-row multiples
    assert chunk_rows(100, 50257, 'cuda') == 100


def test_saturated_softmax_loss_is_exact():
    # the default init's logits: CE ~ 100, every non-target probability far below float32's
    # smallest normal number, where -log(p_target) alone would be inf
    g = torch.Generator().manual_seed(5)
    x = torch.randn(64, D, generator=g, requires_grad=True)
    w = (10 * torch.randn(V, D, generator=g)).requires_grad_(True)
    y = torch.randint(0, V, (64,), generator=g)
    total, ce = linear_cross_entropy(x, w, y, chunk=16)
    total.backward()
    ref = plain(x, w, y)
    assert ref.max() > 100 and torch.isfinite(ce).all()
    assert torch.allclose(ce, ref, rtol=1e-6, atol=1e-4)
    gx = x.grad.clone()
    x.grad = None
    ref.sum().backward()
    assert torch.allclose(gx, x.grad, atol=1e-5)


@pytest.mark.parametrize('dtype', ['float32', 'bfloat16'])
def test_compiled_without_graph_breaks_matches_the_plain_path(dtype):
    g = torch.Generator().manual_seed(6)
    x = torch.randn(300, D, generator=g, requires_grad=True)
    w = torch.randn(V, D, generator=g, requires_grad=True)
    y = torch.randint(0, V, (300,), generator=g)
    y[::7] = -1
    ctx = torch.autocast('cpu', dtype=torch.bfloat16, enabled=(dtype == 'bfloat16'))

    def loss(f, **kw):
        x.grad = w.grad = None
        with ctx:
            total, ce = f(x, w, y, **kw)
        (0.5 * total).backward()
        return total.detach(), ce, x.grad.clone(), w.grad.clone()

    # fullgraph: a graph break is an error. backend aot_eager (see test_compiled_model_matches_eager)
    fused = torch.compile(linear_cross_entropy, fullgraph=True, backend='aot_eager')
    got, want = loss(fused, chunk=128), loss(plain_cross_entropy)  # (the textbook loss, below)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == 'float32' else dict(rtol=2e-2, atol=2e-3)
    assert torch.allclose(got[0], want[0], rtol=tol['rtol'])
    assert torch.allclose(got[1], want[1], **tol) and (got[1][::7] == 0).all()
    for a, b in zip(got[2:], want[2:]):
        if dtype == 'float32':
            assert torch.allclose(a, b, **tol)
        else:
            assert F.cosine_similarity(a.flatten(), b.flatten(), dim=0) > 0.999


def test_float16_gradient_keeps_small_probabilities():
    # under float16 the gradient is made before any loss scale multiplies it: probabilities of
    # 1e-9 would flush to zero in float16, so it is made in float32
    g = torch.Generator().manual_seed(7)
    x = torch.randn(32, D, generator=g)
    w = torch.randn(V, D, generator=g) * 0.01
    y = torch.arange(32)
    w[y] += 21 * x / x.pow(2).sum(-1, keepdim=True)  # each target logit 21 above the rest: others p ~ 1e-9 / V
    w.requires_grad_(True)
    with torch.autocast('cpu', dtype=torch.float16):
        total, _ = linear_cross_entropy(x, w, y, chunk=16)
    total.backward()
    w16 = w.detach().half().float().requires_grad_(True)
    F.cross_entropy(F.linear(x.half().float(), w16), y, reduction='sum').backward()
    others = w16.grad[32:]  # rows of tokens that are never targets: only tiny probabilities reach them
    assert others.abs().max() > 0 and others.abs().max() < 1e-6
    assert F.cosine_similarity(w.grad[32:].flatten(), others.flatten(), dim=0) > 0.99


def plain_cross_entropy(x, weight, targets):
    """The textbook loss with linear_cross_entropy's arguments and returns: every row's logits, then
    F.cross_entropy (float32 at least) and autograd, as model.readout_loss's 'plain' path."""
    logits = F.linear(x, weight)
    ce = F.cross_entropy(logits.to(torch.promote_types(logits.dtype, torch.float32)), targets, ignore_index=-1,
                         reduction='none')
    return ce.sum(), ce.detach()


@pytest.mark.parametrize('with_autocast', [False, True])
def test_the_models_two_loss_paths_give_the_same_loss_and_gradients(with_autocast, monkeypatch):
    # model.readout_loss: loss_path 'plain' runs F.cross_entropy on the logits, 'fused' linear_ce's pass
    # (and not F.cross_entropy: a spy counts its calls); the same loss, per-token CE and gradients
    calls = []
    real = F.cross_entropy
    monkeypatch.setattr(F, 'cross_entropy', lambda *a, **k: calls.append(1) or real(*a, **k))
    model = tiny(readout='final_norm', norm_penalty=0.01)
    g = torch.Generator().manual_seed(9)
    x, y = torch.randint(0, V, (4, T), generator=g), torch.randint(0, V, (4, T), generator=g)
    y[0, :5] = -1
    out = {}
    for path in ('fused', 'plain'):
        model.loss_path = path
        model.zero_grad()
        calls.clear()
        with torch.autocast('cpu', dtype=torch.bfloat16, enabled=with_autocast):
            states = model.hidden_states(x)[1:]
            loss, ce = model.readout_loss(states, y, [False, False, True])
        loss.backward()
        assert bool(calls) == (path == 'plain')  # the plain path ran exactly when asked for
        assert not ce.requires_grad and ce.dtype == torch.float32 and (ce[:, :5] == 0).all()
        out[path] = loss.item(), ce, [p.grad.clone() for p in model.parameters() if p.grad is not None]
    rel = 1e-5 if not with_autocast else 2e-2
    assert out['fused'][0] == pytest.approx(out['plain'][0], rel=rel)
    assert torch.allclose(out['fused'][1], out['plain'][1], rtol=rel, atol=rel)
    for a, b in zip(out['fused'][2], out['plain'][2]):
        assert F.cosine_similarity(a.flatten(), b.flatten(), dim=0) > 1 - rel


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
    ce = [F.cross_entropy(model.lm_head(model.readout(states[k], k == K - 1)).view(-1, V).float(), y.view(-1),
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
    _, fused = model(x, y)
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
        _, fused = model(x, y)
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
    # backend aot_eager: dynamo's graph of the training forward and AOT autograd's backward of it
    # (the fused loss's custom autograd Function included), run as traced, where our code can break.
    # Inductor's kernels (a cold compile of this forward and backward is ~13 s on a 2-core CPU) are
    # compiled in test_decoder.py's one-compiled-loop test and gpu_check's --cpu steps.
    model = tiny(readout='final_norm', norm_penalty=0.01, n_loops=2)  # (two loops: the shared stack twice)
    g = torch.Generator().manual_seed(3)
    x, y = torch.randint(0, V, (4, T), generator=g), torch.randint(0, V, (4, T), generator=g)
    y[0, 0] = -1
    _, eager = model(x, y)
    want = grads(model, eager)
    model.stats = None
    _, compiled = torch.compile(model, backend='aot_eager')(x, y)
    got = grads(model, compiled)
    assert compiled.item() == pytest.approx(eager.item(), rel=1e-5)
    assert torch.isfinite(model.stats['ce']).all()  # (the compiled forward leaves its per-loop numbers too)
    for name in got:
        assert torch.allclose(got[name], want[name], rtol=1e-3, atol=1e-5), name


def test_the_loss_path_compiles_to_one_graph_either_way():
    # the model's loss_path attribute is a constant to dynamo: no graph break (fullgraph), and
    # one graph per path that later steps reuse (no recompile per call)
    from torch._dynamo.testing import CompileCounter
    g = torch.Generator().manual_seed(4)
    x, y = torch.randint(0, V, (4, T), generator=g), torch.randint(0, V, (4, T), generator=g)
    calls = {}
    for path in linear_ce.PATHS:
        torch._dynamo.reset()
        model = tiny()
        model.loss_path = path
        counter = CompileCounter()  # counts the graphs dynamo makes, then runs them eagerly (no inductor: fast)
        step = torch.compile(model, backend=counter, fullgraph=True)
        for _ in range(3):
            step(x, y)[1].backward()
        calls[path] = counter.frame_count
    torch._dynamo.reset()
    assert calls == {'fused': 1, 'plain': 1}


# ---------------------------------------------------------------------------------------
# the loss's compiled form (the branch torch.compile traces, taken here eagerly) gives its eager form's loss,
# per-row CE and gradients, each row's its own softmax's whatever the scale of the chunk's other rows; it makes its
# tensors on its inputs' device (the default device 'meta' changes nothing) and holds no (chunk, V) tensor beyond
# each chunk's logits but the one float32 buffer of a narrower dtype

def fused_loss_inputs(seed, ignored=True):
    """x (40, D) and the head w (50, D), both with gradients, and 40 targets (ignored: every fifth -1, not scored)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(40, D, generator=g, requires_grad=True)
    w = torch.randn(50, D, generator=g, requires_grad=True)
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
    x = torch.randn(16, D, generator=g)
    x[::2] *= 0.05  # logits ~0.3
    x[1::2] *= 20.0  # logits ~100 apart: up to ~300
    x.requires_grad_(True)
    w = torch.randn(50, D, generator=g)
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
    wide = ChunkByVocabulary(16, 50)  # (D = 32 rows: the head's weight transposed is not one)
    with wide, torch.autocast('cpu', dtype=torch.bfloat16, enabled=autocast):
        linear_cross_entropy(x, w, y, chunk=16)  # 3 chunks: 16, 16 and 8 rows
    made = sorted(str(dtype) for dtype, _ in wide.storages.values())
    assert made == (['torch.bfloat16'] * 3 + ['torch.float32'] if autocast else ['torch.float32'] * 3)


# ---------------------------------------------------------------------------------------
# the no-grad scoring (eval, eval_depth, the diagnostics' CE) under CPU bf16 autocast: the matmul in bf16, the
# log-softmax in float32 (CPU autocast leaves log_softmax in its input's dtype: bf16 would be ~1e-2 nats off)

def test_scoring_without_gradients_under_cpu_bf16_autocast_takes_the_log_softmax_in_float32():
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(300, 32, generator=g), 0.5 * torch.randn(256, 32, generator=g)
    y = torch.randint(0, 256, (300,), generator=g)
    y[::9] = -1
    with torch.no_grad(), torch.autocast('cpu', dtype=torch.bfloat16):
        total, ce = linear_cross_entropy(x, w, y, chunk=128)
    logits = F.linear(x.bfloat16(), w.bfloat16())  # what autocast's matmul gives
    want = F.cross_entropy(logits.float(), y, ignore_index=-1, reduction='none')
    assert ce.dtype == torch.float32 and torch.allclose(ce, want, rtol=1e-6, atol=1e-6)
    assert total.item() == pytest.approx(want.sum().item(), rel=1e-6)
    in_bf16 = -torch.log_softmax(logits, -1).gather(1, y.clamp(min=0)[:, None]).squeeze(1).float()
    assert (in_bf16 - want)[y >= 0].abs().mean() > 5e-3  # (the wrong precision is another number)


# ---------------------------------------------------------------------------------------
# a scaled loss's gradient: rounded once

def test_the_gradient_of_a_scaled_loss_is_the_scaled_gradient_rounded_once():
    # backward multiplies the gradients linear_ce made in the forward pass by the loss's own gradient
    # (a mean's 1/N, a GradScaler's scale), in float32 as autograd's product would, and rounds once to
    # the input's dtype. Rounded to bf16 first, 1/3 is 0.33398: every gradient of a bf16 input 0.2% too large
    g = torch.Generator().manual_seed(3)
    w = torch.randn(64, D, generator=g) / D ** 0.5
    y = torch.randint(0, 64, (24,), generator=g)
    for dtype in (torch.bfloat16, torch.float32):
        x = torch.randn(24, D, generator=g).to(dtype)

        def grad(scale):
            xr = x.clone().requires_grad_(True)
            total, _ = linear_cross_entropy(xr, w.to(dtype), y, chunk=16)
            (total * scale).backward()
            return xr.grad
        unit = grad(1.0)
        assert torch.equal(grad(1 / 3), (unit.float() * torch.tensor(1 / 3)).to(dtype)), dtype


def test_the_weight_gradient_of_bf16_weights_is_summed_over_chunks_in_float32():
    """forward: grad_w is summed over the chunks in float32 (w_wide) and rounded to the weight's bf16 once, so its
    error is one rounding's, however many chunks (summed in bf16 it grows with them)."""
    g = torch.Generator().manual_seed(0)
    N, C, V = 1024, 32, 64
    x = torch.randn(N, C, generator=g).bfloat16()
    w = (torch.randn(V, C, generator=g) * 0.3).bfloat16().requires_grad_()
    t = torch.randint(0, V, (N,), generator=g)
    linear_cross_entropy(x, w, t, chunk=8)[0].backward()  # 128 chunks
    w64 = w.detach().double().requires_grad_()
    F.cross_entropy(x.double() @ w64.t(), t, reduction='sum').backward()
    error = (w.grad.double() - w64.grad).norm() / w64.grad.norm()
    one_rounding = (w64.grad.bfloat16().double() - w64.grad).norm() / w64.grad.norm()
    assert w.grad.dtype == torch.bfloat16 and error < 1.5 * one_rounding, (error, one_rounding)


def test_the_gradients_matmuls_run_in_autocasts_dtype_except_float32_under_float16():
    # dCE/dlogits is made before any loss scale multiplies it: under float16 its small probabilities would flush to
    # zero, so its matmuls run in float32 there; under bf16 autocast, and without autocast, in the matmul's own dtype
    from linear_ce import _dtypes
    x, w = torch.randn(2, 4), torch.randn(3, 4)
    for dtype, want in ((torch.float16, (torch.float16, torch.float32)), (torch.bfloat16, (torch.bfloat16, torch.bfloat16))):
        with torch.autocast('cpu', dtype=dtype):
            assert _dtypes(x, w) == want, dtype
    assert _dtypes(x, w) == (torch.float32, torch.float32)
    assert _dtypes(x.double(), w) == (torch.float64, torch.float64)


@pytest.mark.parametrize('grad', [True, False])
def test_the_chunk_is_chunk_rows_of_the_rows_the_vocabulary_and_the_device(monkeypatch, grad):
    # the chunking is exact, so a wrong chunk size shows only in memory and speed: the rows per chunk asked for are
    # chunk_rows(rows, vocabulary (the head's first dimension, not its width), device type), with and without gradients
    asked = []
    monkeypatch.setattr(linear_ce, 'chunk_rows', lambda *a: asked.append(a) or chunk_rows(*a))
    x = torch.randn(300, 8, requires_grad=grad)
    weight = torch.randn(40, 8, requires_grad=grad)
    linear_cross_entropy(x, weight, torch.randint(0, 40, (300,)))
    assert asked == [(300, 40, 'cpu')]
