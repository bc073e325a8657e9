"""
The blind spot's mechanism and the rest of model.py's promises (the block, the losses and diagnostics by hand,
scale control, K at call time, loading) as executable checks, on a tiny model, on the CPU. It needs nothing from
beyond/ (.ci/paper-alone runs it in a tree without it).

    python -m pytest -q test_model.py
"""

import math
import re
from dataclasses import asdict

import pytest
import torch
from torch.nn import functional as F
from torch.utils.flop_counter import FlopCounterMode

from eval_depth import lemma_sums
from model import LOSSES, READOUTS, Block, LoopedGPT, LoopedGPTConfig, diagnostics, summarize, token_diagnostics

V, T, D = 64, 16, 32


def tiny(cls=LoopedGPT, **kw):
    """A seeded tiny model (cls: LoopedGPT, or a subclass such as beyond/additions.py's, with its config's fields)."""
    args = dict(vocab_size=V, block_size=T, n_layer=2, n_head=2, n_embd=D, n_loops=3, dropout=0.0)
    args.update(kw)
    torch.manual_seed(0)
    return cls(cls.config_class(**args))


def batch(B=4, seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, V, (B, T), generator=g)
    y = torch.randint(0, V, (B, T), generator=g)
    return x, y


def manual_logits(model, h, normalized):
    # the readouts written out independently of model.readout: normalized (RMSNorm and its gain), the alpha
    # readout's H (s_ref / s)^(1 - alpha) with s the RMS of H, or H itself
    if normalized:
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + torch.finfo(h.dtype).eps)
        h = h * model.readout_norm.weight
    elif model.config.readout == 'alpha':
        alpha, s_ref = torch.sigmoid(model.alpha_logit), model.log_s_ref.exp()
        h = h * (s_ref / h.pow(2).mean(-1, keepdim=True).sqrt()) ** (1 - alpha)
    return h @ model.transformer.wte.weight.T


def logits(model, h, last):
    return model.lm_head(model.readout(h, last))  # (the model's own: forward's last step, for any state)


def normalized_at(readout, last):
    """Whether a readout is RMS-normalized (scale-invariant) at a loop read as the last one or not."""
    return {'norm': True, 'final_norm': last, 'raw': False, 'alpha': False}[readout]


def ce(logits, y):
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1))


# ---------------------------------------------------------------------------------------
# the visibility lemma, and the diagnostics that measure it (the radial fraction, each loop's norm and angle, their
# quantiles)

@pytest.mark.parametrize('readout', READOUTS)
def test_a_normalized_readout_is_scale_invariant_and_the_others_are_not(readout):
    x, _ = batch()
    model = tiny(readout=readout).eval()
    with torch.no_grad():
        h = model.hidden_states(x)[-1]
        for last in (True, False):
            a, invariant = logits(model, h, last), normalized_at(readout, last)
            for alpha in (0.1, 3.0, 1000.0):
                b = logits(model, alpha * h, last)
                assert torch.allclose(a, b, rtol=1e-4, atol=1e-4) == invariant, (readout, alpha)
                if readout == 'raw' or (readout == 'final_norm' and not last):
                    assert torch.allclose(alpha * a, b, rtol=1e-4, atol=1e-3)  # raw: logits scale with H
                if readout == 'alpha':  # as s^alpha, alpha = 0.5 at init
                    assert torch.allclose(alpha ** 0.5 * a, b, rtol=1e-4, atol=1e-3)


def test_radial_gradient_fraction_near_zero_only_for_normalized_readout():
    x, y = batch()
    norm = diagnostics(tiny(readout='norm'), x, y)['radial']
    raw = diagnostics(tiny(readout='raw'), x, y)['radial']
    assert len(norm) == len(raw) == 3
    # a fraction |<g, H>| / (||g|| ||H||): in [0, 1], so "near zero" is from above, not any negative value
    assert 0 <= min(norm) and max(norm) < 1e-5, norm
    assert 1e-3 < min(raw) and max(raw) <= 1, raw


@pytest.mark.parametrize('readout', READOUTS)
def test_every_tokens_radial_fraction_lies_in_zero_to_one(readout):
    # token by token, not only the mean: Cauchy-Schwarz bounds |<g, H>| by ||g|| ||H||
    model = tiny(readout=readout).eval()
    x, y = batch()
    with torch.no_grad():
        states = model.hidden_states(x)
    for every_loop_last in (False, True):
        radial = token_diagnostics(model, states, y, every_loop_last=every_loop_last)['radial']
        assert radial.shape == (3, x.numel()) and torch.isfinite(radial).all()
        assert (radial >= 0).all(), radial.min()
        assert (radial <= 1 + 1e-6).all(), radial.max()


def test_final_norm_radial_fraction_is_raw_before_the_last_loop_and_normalized_at_it():
    # the fraction is that of each loop's own readout: for final_norm, raw at loops 1..K-1 and the
    # RMSNorm at loop K (or at every loop with every_loop_last, each read as the model run with K = k).
    # The same weights under 'raw' and 'norm' give the two references, token by token
    x, y = batch()
    model = tiny(readout='final_norm').eval()
    with torch.no_grad():
        model.readout_norm.weight.uniform_(0.5, 2.0)  # a gain that is not 1: the norm model must use it too
        states = model.hidden_states(x)
    refs = {}
    for readout in ('raw', 'norm'):
        ref = tiny(readout=readout).eval()
        ref.load_state_dict(model.state_dict(), strict=(readout == 'norm'))  # (raw has no readout_norm)
        with torch.no_grad():
            assert torch.equal(ref.hidden_states(x)[-1], states[-1])  # the same stack
        refs[readout] = token_diagnostics(ref, states, y)['radial']
    assert refs['raw'].min() > 1e-3 and refs['norm'].max() < 1e-5  # two clearly different references
    got = token_diagnostics(model, states, y)['radial']
    assert torch.allclose(got[:2], refs['raw'][:2], rtol=1e-4, atol=1e-9), "loops 1..K-1 are read out raw"
    assert got[2].max() < 1e-5, f"loop K is read out normalized (scale-blind), got radial up to {got[2].max():.2e}"
    assert torch.equal(got[2], refs['norm'][2])  # the same readout, the same numbers
    every = token_diagnostics(model, states, y, every_loop_last=True)['radial']
    assert every.max() < 1e-5, "every_loop_last: each loop is the last one, normalized"


def test_radial_fraction_matches_a_finite_difference_along_h():
    # |dCE(a*H)/da at a=1| = |<g, H>|: checks what token_diagnostics measures, token by token
    model = tiny(readout='raw').eval()
    x, y = batch(B=1)
    with torch.no_grad():
        states = model.hidden_states(x)
    frac = token_diagnostics(model, states, y)['radial'][-1]
    h = states[-1][0]
    eps = 1e-3
    for t in (0, 7):
        def tok_ce(a):
            return F.cross_entropy(logits(model, a * h[t], last=True).double(), y[0, t])
        radial_deriv = (tok_ce(1 + eps) - tok_ce(1 - eps)) / (2 * eps)
        hh = h[t].detach().clone().requires_grad_(True)
        (g,) = torch.autograd.grad(F.cross_entropy(logits(model, hh, last=True), y[0, t]), hh)
        expect = abs(radial_deriv.item()) / (g.norm() * hh.norm()).item()
        assert frac[t].item() == pytest.approx(expect, rel=1e-2)


def test_radial_fraction_leaves_out_tokens_whose_gradient_is_zero():
    # a token predicted with probability 1 (saturated softmax) has no gradient and so no direction
    model = tiny(readout='raw').eval()
    x, _ = batch()
    with torch.no_grad():
        states = [1e4 * h for h in model.hidden_states(x)]
        pred = logits(model, states[-1], last=True).argmax(-1)
    y = pred.clone()
    y[:, ::2] = (pred[:, ::2] + 1) % V  # even positions: a wrong, confident prediction (large gradient)
    per_token = token_diagnostics(model, states, y)
    radial = per_token['radial'][-1].view(y.shape)
    assert torch.isnan(radial[:, 1::2]).all()
    assert torch.isfinite(radial[:, ::2]).all() and (radial[:, ::2] <= 1 + 1e-9).all()
    assert math.isfinite(summarize(per_token)['radial'][-1])


def test_the_per_loop_norm_and_angular_change_by_hand():
    # two tokens, H_0 -> H_1 -> H_2 in the plane: token 0 turns 45 degrees then 135 more, token 1 only grows
    states = [torch.tensor([[1.0, 0.0], [0.0, 1.0]]), torch.tensor([[1.0, 1.0], [0.0, 3.0]]),
              torch.tensor([[-1.0, 0.0], [0.0, 6.0]])]
    got = token_diagnostics(None, [h[None] for h in states], torch.zeros(1, 2, dtype=torch.long), radial=False)
    s = 1 / math.sqrt(2)
    assert torch.allclose(got['norm'], torch.tensor([[math.sqrt(2), 3.0], [1.0, 6.0]]))  # (K, tokens)
    assert torch.allclose(got['angular'], torch.tensor([[1 - s, 0.0], [1 + s, 0.0]]), atol=1e-7)  # 1 - cos(H_k, H_k-1)


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

# ---------------------------------------------------------------------------------------
# the block: it drops the MLP's output in training (model.py's block comment) and each of its RMSNorms
# (ln_1, ln_2) uses the layer's eps

def tiny_block(**kw):
    torch.manual_seed(0)
    return Block(LoopedGPTConfig(block_size=16, vocab_size=64, n_layer=1, n_head=2, n_embd=D, n_loops=1, **kw))


def test_training_drops_the_mlp_output_and_rescales_the_rest():
    p = 0.5
    blk = tiny_block(dropout=p)
    with torch.no_grad():
        blk.attn.c_proj.weight.zero_()  # the attention adds nothing: the update is the MLP's alone
    x = torch.randn(2, 8, D)
    with torch.no_grad():
        want = blk.eval()(x) - x     # (B, T, D) the MLP's update, nothing dropped
        torch.manual_seed(1)
        got = blk.train()(x) - x
    assert (want != 0).all()
    dropped = got == 0
    assert 0.35 < dropped.float().mean() < 0.65  # about p of the 512 entries
    assert torch.allclose(got[~dropped], want[~dropped] / (1 - p), rtol=1e-5, atol=1e-6)


def test_training_drops_attention_probabilities_at_the_configs_rate():
    # the attention's dropout is on its probabilities (dropout_p), in training only: the module under a seed is
    # F.scaled_dot_product_attention with that dropout_p under the same seed, and in eval mode nothing is dropped
    p = 0.5
    attn = tiny_block(dropout=p).attn
    x = torch.randn(2, 8, D)
    B, T, _ = x.shape
    with torch.no_grad():
        q, k, v = (t.view(B, T, 2, D // 2).transpose(1, 2) for t in attn.c_attn(x).split(D, -1))
        torch.manual_seed(1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=p).transpose(1, 2).reshape(B, T, D)
        want, kept = attn.c_proj(y), attn.c_proj(F.scaled_dot_product_attention(q, k, v, is_causal=True)
                                                  .transpose(1, 2).reshape(B, T, D))
        torch.manual_seed(1)
        assert torch.allclose(attn.train()(x), want, atol=1e-6)
        assert torch.allclose(attn.eval()(x), kept, atol=1e-6) and not torch.allclose(want, kept, atol=1e-3)


def reference_block(blk, x):
    """x + attn(ln_1(x)), then x + mlp(ln_2(x)), through the layer's own modules (their eps included)."""
    B, T, _ = x.shape
    q, k, v = blk.attn.c_attn(blk.ln_1(x)).split(D, -1)
    heads = [t.view(B, T, 2, D // 2).transpose(1, 2) for t in (q, k, v)]  # (B, nh, T, hs)
    y = F.scaled_dot_product_attention(*heads, is_causal=True).transpose(1, 2).reshape(B, T, D)
    x = x + blk.attn.c_proj(y)
    h = blk.ln_2(x)
    return x + blk.mlp.w_down(F.silu(blk.mlp.w_gate(h)) * blk.mlp.w_up(h))


def test_every_norm_of_the_block_uses_the_layers_eps():
    blk = tiny_block(dropout=0.0).eval()
    x = 0.3 * torch.randn(2, 8, D)  # RMS ~0.3: an eps of 1 changes each norm's output about 3x
    blk.ln_1.eps = blk.ln_2.eps = 1.0
    with torch.no_grad():
        got, want = blk(x), reference_block(blk, x)
        blk.ln_1.eps = blk.ln_2.eps = None
        default = reference_block(blk, x)
    assert not torch.allclose(want, default, atol=1e-3)  # (the eps matters at this scale)
    assert torch.allclose(got, want, atol=1e-5)


# ---------------------------------------------------------------------------------------
# size, cost, initialisation

def test_param_count_does_not_depend_on_k_and_matches_the_formula():
    counts = {K: tiny(n_loops=K).get_num_params() for K in (1, 4, 9)}
    assert len(set(counts.values())) == 1
    per_block = 4 * D * D + 3 * 4 * D * D + 2 * D  # attention, SwiGLU, two RMSNorm gains
    assert counts[1] == V * D + 2 * per_block + D  # tied embedding/head + stack + readout norm gain


def test_param_count_with_the_embeddings_is_every_parameter_the_position_embeddings_too():
    # get_num_params as nanoGPT's: non_embedding=False counts the position embeddings (T x D) as well
    per_block = 4 * D * D + 3 * 4 * D * D + 2 * D
    model = tiny()
    assert model.get_num_params(non_embedding=False) == V * D + 2 * per_block + D + T * D
    assert model.get_num_params(non_embedding=False) - model.get_num_params() == T * D


def test_flops_estimate_matches_a_counted_forward():
    for loss, sup in [('perloop', 3), ('terminal', 1)]:
        model = tiny(loss=loss).eval()
        x, y = batch()
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            model(x, y)
        per_token = counter.get_total_flops() / x.numel()
        # the counter sees every matmul but not F.scaled_dot_product_attention on the CPU, so
        # add attention as the estimate counts it: q@k and att@v over all T positions, 2*T*d
        # FLOPs each per token, per layer, per loop
        attention = 3 * 2 * (2 * T * D * 2)
        assert per_token + attention == model.flops_per_token(training=False, supervised_loops=sup, T=T)


def test_loss_at_init_is_ln_vocab_with_small_init():
    x, y = batch()
    for readout in ('norm', 'raw'):
        _, loss = tiny(readout=readout, init_std=0.02)(x, y)
        assert abs(loss.item() - math.log(V)) < 0.1, (readout, loss.item())


def test_default_init_predicts_its_input_token():
    # documents the paper's default init (see LoopedGPT.__init__): far above ln V at init
    x, _ = batch()
    _, loss = tiny()(x, x)
    _, loss_shift = tiny()(x, torch.roll(x, 1, dims=1))
    assert loss.item() < math.log(V) < loss_shift.item()


def test_without_a_norm_penalty_the_loss_is_the_ce_alone_even_where_the_norms_square_past_float32():
    # norm_penalty 0 adds no term at all: the blind spot's norm-readout model with states of 1e20 (their squares past
    # float32's range, the readout still finite) has the CE as its loss; a penalty > 0 reads those squares: inf
    model = tiny(readout='norm', n_loops=2).eval()
    with torch.no_grad():
        model.transformer.wte.weight.mul_(1e20)
    x, y = batch(B=2)
    with torch.no_grad():
        loss = model(x, y)[1]
        assert torch.isfinite(loss) and loss == model.stats['ce'].mean()  # (per-loop CE: the mean over the loops)
        model.config.norm_penalty = 1e-4
        assert model(x, y)[1] == math.inf


# ---------------------------------------------------------------------------------------
# losses, by hand

@pytest.mark.parametrize('readout', READOUTS)
@pytest.mark.parametrize('loss_kind', LOSSES)
def test_perloop_terminal_and_penalty_losses_match_a_hand_computation(readout, loss_kind):
    x, y = batch()
    K = 3
    for lam in (0.0, 0.01):
        model = tiny(readout=readout, loss=loss_kind, norm_penalty=lam)
        if readout == 'alpha':  # alpha and s_ref off their init, so a rule that forgets either reads another number
            with torch.no_grad():
                model.alpha_logit.fill_(0.7)
                model.log_s_ref.fill_(1.5)
        model.eval()  # same numbers as train mode here (dropout 0); no_grad path for the states
        with torch.no_grad():
            states = model.hidden_states(x)[1:]
        per_loop = [ce(manual_logits(model, states[k], normalized_at(readout, k == K - 1)), y) for k in range(K)]
        expect = {'perloop': sum(per_loop) / K, 'terminal': per_loop[-1]}[loss_kind]
        # the penalty as released: lambda * the mean over the K loops of mean(H_k^2)
        expect = expect + lam * sum(h.pow(2).sum(-1).mean() / D for h in states) / K
        model.train()
        _, loss = model(x, y)  # train mode: the fused readout loss with its gradients
        stats = model.stats  # the per-loop numbers of that pass
        assert loss.item() == pytest.approx(expect.item(), rel=1e-5)
        got_ce = stats['ce']
        if loss_kind == 'perloop':
            assert torch.allclose(got_ce, torch.stack(per_loop), rtol=1e-5)
        else:
            assert torch.isnan(got_ce[:-1]).all() and got_ce[-1].item() == pytest.approx(per_loop[-1].item(), rel=1e-5)
        assert torch.allclose(stats['h_norm'], torch.stack([h.norm(dim=-1).mean() for h in states]))


def test_final_norm_uses_raw_readout_before_the_last_loop_only():
    x, y = batch()
    model = tiny(readout='final_norm').eval()
    with torch.no_grad():
        model.readout_norm.weight.fill_(0.5)  # make normalized and raw clearly different
        for K in (2, 3, 5):  # "last" is the last loop of the call, also for overridden K
            states = model.hidden_states(x, n_loops=K)[1:]
            for k, h in enumerate(states):
                got = logits(model, h, last=(k == K - 1))
                assert torch.allclose(got, manual_logits(model, h, normalized=(k == K - 1)), atol=1e-4)
                assert not torch.allclose(got, manual_logits(model, h, normalized=(k != K - 1)), atol=1e-2)
            assert torch.allclose(model(x, n_loops=K)[0], manual_logits(model, states[-1], True), atol=1e-4)


def test_depth_losses_equal_running_the_model_with_k_loops():
    x, y = batch()
    for readout in ('norm', 'final_norm'):
        model = tiny(readout=readout, loss='terminal').eval()
        with torch.no_grad():
            depth = model.depth_losses(model.hidden_states(x, n_loops=5)[1:], y)
        for K in range(1, 6):
            with torch.no_grad():
                _, loss = model(x, y, n_loops=K)
            assert depth[K - 1].mean().item() == pytest.approx(loss.item(), rel=1e-5)


def test_perloop_backward_never_holds_k_logit_tensors():
    # linear_ce makes the gradients chunk by chunk in the forward pass: nothing of vocab size is saved
    model = tiny(vocab_size=4096)
    x, y = batch()
    big = []

    def pack(t):
        if t.numel() >= x.numel() * 4096:
            big.append(tuple(t.shape))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        _, loss = model(x, y)
    assert big == [], big
    loss.backward()  # and the recompute gives gradients
    assert model.transformer.wte.weight.grad.abs().sum() > 0


@pytest.mark.parametrize('loss_path', ['fused', 'plain'])
def test_a_real_target_0_is_scored_and_only_minus_1_is_ignored(loss_path):
    # the no-grad scoring path (evaluation's depth losses, a forward under no_grad): token id 0 is a
    # byte like any other; the ignore index is -1
    V, T = 16, 8
    torch.manual_seed(0)
    model = LoopedGPT(LoopedGPTConfig(vocab_size=V, block_size=T, n_layer=1, n_head=2, n_embd=16, n_loops=2,
                                      dropout=0.0, readout='raw', init_std=0.3)).eval()
    model.loss_path = loss_path
    g = torch.Generator().manual_seed(3)
    x = torch.randint(0, V, (2, T), generator=g)
    y = torch.randint(1, V, (2, T), generator=g)
    y[0, :3] = 0  # real targets 0, at known places
    y[1, 5:] = -1  # ignored
    with torch.no_grad():
        logits, _ = model(x)  # the last loop's
        logp = F.log_softmax(logits.double(), dim=-1)
        by_hand = -logp.gather(-1, y.clamp(min=0)[..., None]).squeeze(-1)  # (B, T)
        keep = y >= 0
        per_token = model.depth_losses(model.hidden_states(x)[1:], y)[-1].view(2, T)
        _, loss = model(x, y, n_loops=2)
        terminal = by_hand[keep].mean().item()
        perloop = model.depth_losses(model.hidden_states(x)[1:], y)
    assert per_token[0, :3].tolist() == pytest.approx(by_hand[0, :3].tolist(), rel=1e-5)  # target 0: scored
    assert min(per_token[0, :3].tolist()) > 0.1
    assert per_token[1, 5:].tolist() == [0.0, 0.0, 0.0]  # -1: not scored
    assert per_token[keep].mean().item() == pytest.approx(terminal, rel=1e-5)
    # the per-loop loss divides by the tokens scored: 13 of the 16 in each loop, target 0 among them
    assert loss.item() == pytest.approx((perloop.sum() / (2 * keep.sum())).item(), rel=1e-5)
    assert keep.sum().item() == 13


@pytest.mark.parametrize('loss_path', ['fused', 'plain'])
def test_the_models_eval_ce_under_cpu_bf16_autocast_is_float32_softmax_of_bf16_logits(loss_path):
    model = tiny(n_layer=1, n_loops=2).eval()
    model.loss_path = loss_path
    x, y = batch(B=4)
    with torch.no_grad(), torch.autocast('cpu', dtype=torch.bfloat16):
        states = model.hidden_states(x)[1:]
        got = model.depth_losses(states, y)
        logits = [model.lm_head(model.readout(h, last=True)) for h in states]  # bf16
    want = torch.stack([F.cross_entropy(z.float().flatten(0, 1), y.flatten(), reduction='none') for z in logits])
    assert logits[0].dtype == torch.bfloat16 and got.dtype == torch.float32
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize('loss_path', ['fused', 'plain'])
def test_the_ce_of_a_bf16_models_logits_is_float32_softmax_without_autocast_too(loss_path):
    # readout_loss's CE is float32 at least, whatever the logits' dtype: a model cast to bf16 (no autocast on) makes
    # bf16 logits, and each token's CE is the float32 cross-entropy of those logits, not bf16's (off by ~0.1 here)
    model = tiny(n_layer=1, n_loops=2).eval().to(torch.bfloat16)
    model.loss_path = loss_path
    x, y = batch(B=4)
    with torch.no_grad():
        states = model.hidden_states(x)[1:]
        got = model.depth_losses(states, y)
        logits = [model.lm_head(model.readout(h, last=True)) for h in states]
    assert states[0].dtype == logits[0].dtype == torch.bfloat16 and got.dtype == torch.float32
    want = torch.stack([F.cross_entropy(z.float().flatten(0, 1), y.flatten(), reduction='none') for z in logits])
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-5)


def test_under_cpu_autocast_the_attention_runs_in_float32(monkeypatch):
    # PyTorch's bf16 attention was the slower one on a CPU (assets/speed/attention.md): under CPU autocast the
    # block's q, k, v go to the attention in float32 and it computes in float32 (autocast off inside: its output is
    # float32 too), its matmuls (c_attn, c_proj) in bf16; without autocast, as they are
    seen = []
    sdpa = F.scaled_dot_product_attention

    def attention(q, k, v, **kw):
        out = sdpa(q, k, v, **kw)
        seen.append((q.dtype, out.dtype))
        return out
    monkeypatch.setattr(F, 'scaled_dot_product_attention', attention)
    model = tiny(n_layer=1, n_loops=1).eval()
    x, _ = batch(B=2)
    with torch.no_grad(), torch.autocast('cpu', dtype=torch.bfloat16):
        model(x)
    with torch.no_grad():
        model(x)
    assert seen == [(torch.float32, torch.float32), (torch.float32, torch.float32)]
    with torch.no_grad(), torch.autocast('cpu', dtype=torch.bfloat16):  # (the projections are autocast's: bf16)
        assert model.transformer.h[0].attn.c_attn(torch.randn(2, D)).dtype == torch.bfloat16


def test_without_autocast_the_attention_runs_in_the_states_own_dtype():
    # float32 is autocast's alone: a float64 model's attention, no autocast on, is float64 causal attention,
    # softmax(q k^T / sqrt(hs)) v over the positions up to each token's, by hand to float64's rounding
    torch.manual_seed(0)
    attn = tiny(n_layer=1, n_loops=1).double().eval().transformer.h[0].attn
    B, T, nh = 2, 5, attn.n_head
    x = torch.randn(B, T, D, dtype=torch.float64)
    with torch.no_grad():
        y = attn(x)
        q, k, v = (x @ attn.c_attn.weight.T).split(D, -1)
        heads = lambda t: t.view(B, T, nh, D // nh).transpose(1, 2)  # noqa: E731
        q, k, v = heads(q), heads(k), heads(v)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(D // nh)
        scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float('-inf'))
        want = (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, D) @ attn.c_proj.weight.T
    assert y.dtype == torch.float64
    assert torch.allclose(y, want, rtol=1e-12, atol=1e-14)


# ---------------------------------------------------------------------------------------
# scale control: inter-loop norm and the clamp

def test_interloop_norm_makes_every_carried_state_rms_equal_its_gain():
    x, _ = batch()
    for interloop in (True, False):
        model = tiny(interloop_norm=interloop, n_loops=4).eval()
        entering = []
        model.transformer.h[0].register_forward_pre_hook(lambda m, args: entering.append(args[0].detach()))
        if interloop:
            with torch.no_grad():
                model.interloop_norm.weight.uniform_(0.5, 2.0)
        with torch.no_grad():
            states = model.hidden_states(x)
        assert len(entering) == 4
        assert torch.equal(entering[0], states[0])  # loop 1 starts from the embedding
        for s in entering[1:]:
            if interloop:
                rms = (s / model.interloop_norm.weight).pow(2).mean(-1).sqrt()
                assert torch.allclose(rms, torch.ones_like(rms), atol=1e-4)
            else:
                rms = s.pow(2).mean(-1).sqrt()
                assert not torch.allclose(rms, torch.ones_like(rms), atol=1e-1)


def test_clamp_restores_loop1_norms_and_keeps_directions():
    x, _ = batch()
    model = tiny(n_loops=4).eval()
    with torch.no_grad():
        free = model.hidden_states(x, n_loops=6)
        clamped = model.hidden_states(x, n_loops=6, clamp=True)
    assert torch.equal(free[1], clamped[1])  # K=1 untouched
    n1 = free[1].norm(dim=-1)
    for h in clamped[2:]:
        assert torch.allclose(h.norm(dim=-1), n1, rtol=1e-5)
    assert not torch.allclose(free[2].norm(dim=-1), n1, rtol=1e-2)  # there was something to clamp
    assert torch.allclose(F.cosine_similarity(free[2], clamped[2], dim=-1), torch.ones_like(n1), atol=1e-5)


def test_the_alpha_readout_spans_the_normalized_readout_to_the_raw_one():
    model = tiny(readout='alpha')
    x, y = batch()
    with torch.no_grad():
        states = model.hidden_states(x)
        h = states[-1]
        model.alpha_logit.fill_(60.0)  # alpha = 1: the raw readout, exactly H
        assert torch.allclose(model.readout(h, True), h, rtol=1e-6)
        model.alpha_logit.fill_(-60.0)  # alpha = 0: RMS s_ref whatever the scale, the normalized readout
        model.log_s_ref.fill_(math.log(3.0))
        r = model.readout(h, True)
        assert torch.allclose(r.pow(2).mean(-1).sqrt(), torch.full(h.shape[:-1], 3.0), rtol=1e-5)
        assert torch.allclose(model.readout(100 * h, True), r, rtol=1e-5)
    radial = {}
    for logit in (-60.0, 0.0, 60.0):
        with torch.no_grad():
            model.alpha_logit.fill_(logit)
        radial[logit] = token_diagnostics(model, states, y)['radial'][-1].nanmean().item()
    # what the loss can see of the scale: nothing at alpha = 0 (the blind spot), more as alpha grows
    assert radial[-60.0] < 1e-6 < radial[0.0] < radial[60.0]


# ---------------------------------------------------------------------------------------
# K at call time, learning, determinism, loading

def test_k_can_be_overridden_beyond_training_k():
    model = tiny(n_loops=3).eval()
    x, y = batch()
    with torch.no_grad():
        assert len(model.hidden_states(x, n_loops=8)) == 9
        assert model(x, n_loops=8)[0].shape == (4, T, V)
        model(x, y, n_loops=8)
    assert model.stats['ce'].shape == (8,) and torch.isfinite(model.stats['ce']).all()
    assert len(diagnostics(model, x, y, n_loops=7)['norm_mean']) == 7
    with pytest.raises(ValueError, match='n_loops'):
        model.hidden_states(x, n_loops=0)


@pytest.mark.parametrize('readout', READOUTS)
def test_overfits_one_batch(readout):
    model = tiny(readout=readout, init_std=0.02)
    x, y = batch(B=2)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(150):
        _, loss = model(x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.2, loss.item()


def test_same_seed_same_loss_and_different_seed_different_loss():
    def one_step(seed):
        torch.manual_seed(seed)
        model = LoopedGPT(LoopedGPTConfig(vocab_size=V, block_size=T, n_layer=2, n_head=2, n_embd=D,
                                          n_loops=3, dropout=0.1))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        x, y = batch()
        _, loss = model(x, y)
        loss.backward()
        opt.step()
        _, loss = model(x, y)
        return loss.item()
    assert one_step(0) == one_step(0)
    assert one_step(0) != one_step(1)


def test_from_checkpoint_rebuilds_the_model(tmp_path):
    model = tiny(readout='final_norm', interloop_norm=True).eval()
    torch.save({'model_args': asdict(model.config), 'model': model.state_dict()}, tmp_path / 'ckpt.pt')
    for path in (tmp_path, tmp_path / 'ckpt.pt'):
        loaded, ckpt = LoopedGPT.from_checkpoint(str(path))
        x, _ = batch()
        with torch.no_grad():
            assert torch.equal(loaded.eval()(x)[0], model(x)[0])
        assert loaded.config == model.config
    with pytest.raises(FileNotFoundError, match='no checkpoint'):
        LoopedGPT.from_checkpoint(str(tmp_path / 'nowhere'))


def test_a_checkpoint_whose_weights_or_fields_do_not_fit_its_model_is_one_error_naming_it(tmp_path):
    # weights of another shape, a weight missing, a field the config refuses: a ValueError naming the file and what
    # went wrong, never a model built with weights it did not load
    model = tiny()
    state, args = model.state_dict(), asdict(model.config)
    missing = {k: v for k, v in state.items() if k != 'lm_head.weight' and k != 'transformer.wte.weight'}
    for name, ckpt in (('shape', {'model_args': {**args, 'n_embd': 2 * args['n_embd']}, 'model': state}),
                       ('missing', {'model_args': args, 'model': missing}),
                       ('field', {'model_args': {**args, 'readout': 'rms'}, 'model': state})):
        torch.save(ckpt, tmp_path / f'{name}.pt')
        with pytest.raises(ValueError, match=f'cannot load the checkpoint {re.escape(str(tmp_path / name))}.pt') as e:
            LoopedGPT.from_checkpoint(str(tmp_path / f'{name}.pt'))
        assert '\n' not in str(e.value), name


def test_bad_config_is_refused():
    for bad in (dict(readout='rms'), dict(loss='mean'), dict(n_loops=0), dict(n_head=3)):
        with pytest.raises(ValueError):
            tiny(**bad)


# ---------------------------------------------------------------------------------------
# Lemma 2: radial increment and angular step

def test_lemma_quantities_equal_a_direct_computation_from_hidden_states():
    model = tiny(n_loops=3).eval()
    x, _ = batch()
    N = 7
    with torch.no_grad():
        got = lemma_sums(h for k, h in enumerate(model.loop_states(x, n_loops=N)) if k >= 1)
        H = [h.reshape(-1, D).double() for h in model.hidden_states(x, n_loops=N)[1:]]
    n = H[0].size(0)
    assert got['tokens'] == n and got['s'].shape == (N,) and got['angular_step'].shape == (N - 1,)
    for k in range(N):
        s_k = torch.sqrt((H[k] ** 2).sum(-1) / D)  # RMS over channels, token by token
        assert torch.allclose(got['s'][k] / n, s_k.mean())
        if k < N - 1:
            u_k, u_next = H[k] / s_k[:, None], H[k + 1] / torch.sqrt((H[k + 1] ** 2).sum(-1) / D)[:, None]
            assert torch.allclose(got['radial_increment'][k] / n, ((H[k + 1] - H[k]) * u_k).sum(-1).mean())
            step = torch.linalg.vector_norm(u_next - u_k, dim=-1)
            assert torch.allclose(got['angular_step'][k] / n, step.mean())
            assert torch.allclose(got['s_times_angular'][k] / n, (s_k * step).mean())


def test_s_times_angular_step_is_constant_for_a_residual_recurrence_of_the_direction():
    # H_{k+1} = H_k + b(u_k), with b a fixed function of the direction only (the activity
    # lemma's pre-norm update): b(u) = alpha u + beta J u, J a random rotation by 90 degrees in
    # d/2 planes (J u is orthogonal to u, and as long). The radial increment <u, b> is
    # constant, so the scale grows; the tangential part of b has a constant length, so the
    # direction moves by c / s_k: the angular step falls while s_k * angular step stays put.
    torch.manual_seed(0)
    d, alpha, beta = 64, 2.0, 1.0
    Q = torch.linalg.qr(torch.randn(d, d, dtype=torch.float64))[0]
    J0 = torch.zeros(d, d, dtype=torch.float64)
    J0[0::2, 1::2] = torch.eye(d // 2, dtype=torch.float64)
    J0[1::2, 0::2] = -torch.eye(d // 2, dtype=torch.float64)
    J = Q.T @ J0 @ Q

    def b(u):
        return alpha * u + beta * u @ J.T

    def states(h):
        for _ in range(30):
            yield h
            h = h + b(h / h.pow(2).mean(-1, keepdim=True).sqrt())
    got = lemma_sums(states(50 * torch.randn(8, d, dtype=torch.float64)))  # s starts near 50
    s = got['s'] / got['tokens']
    step = got['angular_step'] / got['tokens']
    product = got['s_times_angular'] / got['tokens']
    inc = got['radial_increment'] / got['tokens']
    assert s[-1] > 2 * s[0]                            # the scale grew
    assert step[-1] < 0.6 * step[0]                    # so the direction moved less and less
    assert product.max() / product.min() < 1.03        # but s * step stayed put: the 1/s law
    assert torch.allclose(inc, torch.full_like(inc, alpha * d))  # a constant radial increment


@pytest.mark.parametrize('readout', READOUTS)
@pytest.mark.parametrize('loss_kind', LOSSES)
def test_forward_returns_logits_and_loss_as_nanogpt(readout, loss_kind):
    # a fork that drops the model into nanoGPT's loop (`logits, loss = model(X, Y)`) just works: two items
    # always, in training and evaluation, with and without targets, at any K; the per-loop numbers of the
    # pass are model.stats, from that pass (no second forward)
    model = tiny(readout=readout, loss=loss_kind)
    x, y = batch()
    for training, K in ((True, None), (False, None), (False, 5)):
        model.train(training)
        out = model(x, n_loops=K)
        assert isinstance(out, tuple) and len(out) == 2
        logits, loss = out
        assert logits.shape == (*x.shape, V) and loss is None
        out = model(x, y, n_loops=K)
        assert isinstance(out, tuple) and len(out) == 2
        logits, loss = out
        assert logits is None and loss.dim() == 0  # (the fused loss makes no logits)
        ce, h_norm = model.stats['ce'], model.stats['h_norm']
        assert ce.shape == h_norm.shape == (K or model.config.n_loops,)
        read = ce if loss_kind == 'perloop' else ce[-1:]  # per-loop CE: the mean over loops; terminal: the last
        assert read.mean().item() == pytest.approx(loss.item(), rel=1e-5) and ce.isnan().sum() == len(ce) - len(read)


def test_the_radial_fraction_is_measured_in_float64():
    # a normalized readout's fraction is rounding alone (~1e-16 in float64): a float32 measurement would report
    # its own rounding, ~1e-8, as the blind spot's size. Token by token, it is the float64 fraction by hand
    model = tiny(readout='norm').eval()
    x, y = batch()
    with torch.no_grad():
        states = model.hidden_states(x)
    got = token_diagnostics(model, states, y)['radial'][-1]
    h = states[-1].reshape(-1, D).double().requires_grad_(True)
    ce = F.cross_entropy(F.linear(model.readout(h, last=True), model.lm_head.weight.detach().double()), y.flatten(),
                         reduction='sum')
    (g,) = torch.autograd.grad(ce, h)
    want = ((g * h).sum(-1).abs() / (g.norm(dim=-1) * h.norm(dim=-1))).detach()
    assert want.max() < 1e-14  # (the case: far below float32's rounding)
    assert torch.allclose(got.double(), want, rtol=1e-3, atol=1e-15), (got.max(), want.max())
