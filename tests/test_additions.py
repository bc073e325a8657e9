"""
The field's model additions (beyond/additions.py): FieldGPT's scale controls (sandwich norm, input injection,
damping), bounded work per loop (a window, no positions) and truncated backprop, each stated as the property it
is there for, alone and beside every other addition the config allows. (Decoding every control as the forward:
tests/test_decoder.py.)

    python -m pytest -q tests/test_additions.py
"""

import itertools
import math
from dataclasses import fields

import pytest
import torch
from torch.nn import functional as F
from torch.utils.flop_counter import FlopCounterMode

import train
from beyond.additions import FieldGPT, FieldGPTConfig, sandwich
from beyond.exit_train import ExitTrainConfig, ExitTrainedGPT
from model import SIZE, LoopedGPT, LoopedGPTConfig
from test_model import D, T, batch, tiny


# -----------------------------------------------------------------------------
# the scale controls: the sandwich norm bounds every update (its gain by hand), damping contracts the carried state,
# injection adds the embedding; every parameter of every control (the paper's and the field's) reaches the logits

def test_sandwich_norm_bounds_every_update_whatever_the_weights():
    # a pre-norm block's update is already blind to the state's scale (its input is normalized) but
    # grows with its output weights, which training is free to grow; the sandwich norm bounds it
    b, plain = tiny(FieldGPT, sandwich_norm=True).transformer.h[0], tiny().transformer.h[0]
    with torch.no_grad():
        for m in (b, plain):
            m.attn.c_proj.weight.mul_(100)
            m.mlp.w_down.weight.mul_(100)
    x = torch.randn(2, 8, 32)
    update = (b(x) - x).pow(2).mean(-1).sqrt()  # two normalized updates of unit gain: RMS at most 2
    assert update.max() < 2.0 + 1e-3
    assert (plain(x) - x).pow(2).mean(-1).sqrt().min() > 10  # without it, the update is the weights' size
    plain.load_state_dict(b.state_dict(), strict=False)  # the same weights, less the sublayers' output norms
    assert not torch.equal(b(x), plain(x))
    for sub in (b.attn, b.mlp):
        sub._forward_hooks.clear()
    assert torch.equal(b(x), plain(x))  # the norms, hooked on the sublayers, are all that the setting adds


def test_the_sandwich_norms_gain_by_hand():
    # RMSNorm(y) * gain of a sublayer's output y: (3, 4), its RMS sqrt(12.5), the gain (2, 0.5)
    sub = torch.nn.Module()
    sub.ln_out, sub.out_dropout = torch.nn.RMSNorm(2, eps=0.0), 0.0
    with torch.no_grad():
        sub.ln_out.weight.copy_(torch.tensor([2.0, 0.5]))
    got = sandwich(sub, (), torch.tensor([[3.0, 4.0]]))
    r = math.sqrt(12.5)
    assert got[0].tolist() == pytest.approx([2 * 3 / r, 0.5 * 4 / r], rel=1e-6)
    # in the model: zero output gains make every update zero, so the block passes its input through
    torch.manual_seed(0)
    block = FieldGPT(FieldGPTConfig(vocab_size=16, block_size=8, n_layer=1, n_head=2, n_embd=8, dropout=0.0,
                                    sandwich_norm=True)).transformer.h[0]
    h = torch.randn(1, 8, 8)
    with torch.no_grad():
        block.attn.ln_out.weight.zero_()
        block.mlp.ln_out.weight.zero_()
        assert torch.equal(block(h), h)
        block.attn.ln_out.weight.fill_(3.0)  # and the attention's gain sets the RMS of its update
        update = block(h) - h
    assert torch.allclose(update.pow(2).mean(-1).sqrt(), torch.full((1, 8), 3.0), rtol=1e-4)


def test_the_sandwich_norms_dropout_drops_in_training_alone():
    # the MLP's dropout, moved after the norm, is training's: there about half of the MLP's normalized update
    # (dropout 0.5) is zeroed; in eval the block is the one without dropout, call after call
    torch.manual_seed(0)
    model = FieldGPT(FieldGPTConfig(vocab_size=16, block_size=8, n_layer=1, n_head=2, n_embd=8, dropout=0.5,
                                    sandwich_norm=True))
    block, h = model.transformer.h[0], torch.randn(4, 8, 8)
    seen = []
    block.mlp.register_forward_hook(lambda module, args, y: seen.append(y))  # (after the sandwich's own hook)
    with torch.no_grad():
        model.train()
        block(h)
        dropped = (seen[-1] == 0).float().mean().item()
        model.eval()
        first, second = block(h), block(h)
        block.mlp.out_dropout = 0.0
        without = block(h)
    assert 0.35 < dropped < 0.65
    assert torch.equal(first, second) and torch.equal(first, without)


def test_damping_contracts_the_carried_state_and_injection_adds_the_embedding():
    h, e = torch.randn(2, 8, 32), torch.randn(2, 8, 32)
    damped = tiny(FieldGPT, damping=True)
    assert torch.equal(damped.loop_input(h, 0, e), h)  # loop 1 reads the embedding as it is
    assert torch.allclose(damped.loop_input(h, 1, e), h / (1 + math.exp(-2.0)))  # sigmoid(2) at init, the released value
    injected = tiny(FieldGPT, inject=True)
    assert torch.equal(injected.loop_input(h, 0, e), h) and torch.equal(injected.loop_input(h, 2, e), h + e)
    # what the run records of its depth controls (eval_depth's learned_depth_settings): the damping factor it learned
    with torch.no_grad():
        damped.damping_logit.fill_(0.5)
    assert damped.learned_scalars() == {'damping': pytest.approx(1 / (1 + math.exp(-0.5)))}
    assert injected.learned_scalars() == {}  # (nothing learned to report)


CONTROLS = [dict(readout='norm'), dict(readout='raw'), dict(readout='final_norm'), dict(readout='alpha'),
            dict(interloop_norm=True), dict(sandwich_norm=True), dict(damping=True), dict(inject=True),
            dict(sandwich_norm=True, damping=True, inject=True, interloop_norm=True, readout='alpha')]


@pytest.mark.parametrize('control', CONTROLS, ids=lambda c: '-'.join(f'{k}={v}' for k, v in c.items()))
def test_every_parameter_of_every_scale_control_reaches_the_logits(control):
    # a gain or a logit the forward forgets to read (the sandwich norm's output gain, the damping
    # factor, the readout's gain, ...) trains nothing and changes nothing: each is perturbed alone
    cls = LoopedGPT if set(control) <= {f.name for f in fields(LoopedGPTConfig)} else FieldGPT  # (the paper's where it can)
    model = tiny(cls, n_layer=1, init_std=0.1, **control).eval()
    x, y = batch(B=2)
    with torch.no_grad():
        base, _ = model(x)
        for name, p in model.named_parameters():
            keep = p.clone()
            p.add_(0.5 * torch.randn(p.shape, generator=torch.Generator().manual_seed(2)))
            moved, _ = model(x)
            p.copy_(keep)
            assert (moved - base).abs().max() > 1e-4, name
        # the control itself changes the per-loop loss (final_norm: its loops before the last), the same
        # weights where they are shared
        plain = tiny(n_layer=1, init_std=0.1).eval()
        plain.load_state_dict(model.state_dict(), strict=False)
        if control != dict(readout='norm'):
            assert abs(plain(x, y)[1].item() - model(x, y)[1].item()) > 1e-4


# -----------------------------------------------------------------------------
# bounded work per loop, for tasks whose longer instances need more loops (docs/tasks.md): a window, no positions

def test_a_token_outside_the_window_has_no_influence():
    torch.manual_seed(0)
    cfg = FieldGPTConfig(vocab_size=4, n_layer=2, n_head=2, n_embd=32, n_loops=2, dropout=0.0, window=2,
                          positions='none', init_std=0.1)
    model = FieldGPT(cfg).eval()
    x = torch.randint(0, 4, (1, 20))
    t = 15  # 2 layers x 2 loops, each moving information one position: t sees t-4 .. t
    with torch.no_grad():
        base = model(x)[0][0, t]
        for s, moves in ((t - 5, False), (t - 9, False), (t - 4, True), (t - 1, True)):
            y = x.clone()
            y[0, s] = (y[0, s] + 1) % 4
            assert (not torch.allclose(model(y)[0][0, t], base, atol=1e-6)) == moves, s
    # a window as long as the sequence is the full causal attention; window 0 is that attention
    full = FieldGPT(FieldGPTConfig(**{**cfg.__dict__, 'window': 0}))
    full.load_state_dict(model.state_dict())
    wide = FieldGPT(FieldGPTConfig(**{**cfg.__dict__, 'window': 20}))
    wide.load_state_dict(model.state_dict())
    with torch.no_grad():
        assert torch.allclose(full.eval()(x)[0], wide.eval()(x)[0], atol=1e-5)
        assert not torch.allclose(full(x)[0], model(x)[0], atol=1e-3)


@pytest.mark.parametrize('w', [1, 2, 3, 11, 12, 13, 40])
def test_the_window_is_a_band_of_w_keys_a_query_equal_to_the_masked_attention(w):
    # the window hands each query its own w keys (O(T w), where a (T, T) mask is O(T^2)); the attention over them is
    # the one over every key with the band t-w+1 .. t masked in by hand, and a window as wide as the input is causal
    from beyond.additions import Window
    torch.manual_seed(0)
    T = 12
    q, k, v = torch.randn(3, 2, 3, T, 8).unbind(0)
    t = torch.arange(T)
    band = (t[:, None] - t[None, :] >= 0) & (t[:, None] - t[None, :] < w)  # (T, T), by hand
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=band)
    keys, values, mask = Window(w)(torch.stack([k, v]))
    if w < T:
        assert keys.shape == (2, 3, T, w, 8) and mask.shape == (T, 1, w)
        assert int(mask.sum()) == int(band.sum())  # the padding before the first token left out, no key twice
    else:
        assert mask is None and torch.equal(keys, k)
    attn = model_attention(q, keys, values, mask)
    assert torch.allclose(attn, want, atol=1e-6)


def model_attention(q, k, v, mask):
    """model.CausalSelfAttention's attention on (q, k, v, mask) as the cache hands them over, through the module
    itself: its c_attn made to emit q, k, v (an identity on C = nh * hs inputs) and its projection an identity."""
    from model import CausalSelfAttention
    B, nh, T, hs = q.shape
    attn = CausalSelfAttention(LoopedGPTConfig(n_embd=nh * hs, n_head=nh, dropout=0.0))
    with torch.no_grad():
        attn.c_attn.weight.copy_(torch.cat([torch.eye(nh * hs)] * 3))
        attn.c_proj.weight.copy_(torch.eye(nh * hs))
    x = q.transpose(1, 2).reshape(B, T, nh * hs)
    y = attn(x, cache=lambda kv: (k, v, mask))
    return y.view(B, T, nh, hs).transpose(1, 2)


def test_without_positions_any_length_runs_and_learned_positions_refuse():
    cfg = dict(vocab_size=4, n_layer=1, n_head=2, n_embd=32, n_loops=2, dropout=0.0, block_size=8)
    nope = FieldGPT(FieldGPTConfig(**cfg, positions='none')).eval()
    assert nope(torch.zeros(1, 50, dtype=torch.long))[0].shape == (1, 50, 4)
    learned = FieldGPT(FieldGPTConfig(**cfg)).eval()
    assert learned(torch.zeros(1, 8, dtype=torch.long))[0].shape == (1, 8, 4)  # block_size itself runs
    for n in (9, 50):  # one past it, and far past it: the clear error, not a broadcast one
        with pytest.raises(ValueError, match=f'sequence of length {n} exceeds block_size 8'):
            learned(torch.zeros(1, n, dtype=torch.long))
    with pytest.raises(ValueError, match="'positions' must be one of"):
        FieldGPTConfig(**cfg, positions='rope')
    with pytest.raises(ValueError, match="'window' must be >= 0"):
        FieldGPTConfig(**cfg, window=-1)


# -----------------------------------------------------------------------------
# truncated backprop (FieldGPT.forward's bptt, random-depth training's): the loss reads, penalises and trains only
# the loops that run with a graph, the FLOPs estimate of a step is the counted one, and at and past the K a step
# runs every loop is read (config/random_depth.py, bptt 8, draws K < 8 most steps)

@pytest.mark.parametrize('inject', [False, True])
def test_truncated_backprop_trains_and_reads_only_the_last_loops(inject):
    model = tiny(FieldGPT, readout='raw', n_loops=4, inject=inject)
    x, y = batch()
    _, loss = model(x, y, bptt=2)
    stats = model.stats
    loss.backward()
    got = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    # by hand: loops 1 and 2 without a graph, then loops 3 and 4 read out (per-loop CE over the two)
    with torch.no_grad():
        h0 = model.embed(x)
        h2 = model.loop(model.loop_input(model.loop(h0), 1, h0))
    e = model.embed(x)  # (with a graph: what injection feeds the trained loops)
    h3 = model.loop(model.loop_input(h2, 2, e))
    h4 = model.loop(model.loop_input(h3, 3, e))
    want = sum(F.cross_entropy(model.lm_head(model.readout(h, False)).flatten(0, 1), y.flatten()) for h in (h3, h4)) / 2
    want.backward()
    assert torch.allclose(loss, want, atol=1e-5)
    for n, p in model.named_parameters():
        assert (p.grad is None) == (n not in got), n
        if p.grad is not None:
            assert torch.allclose(got[n], p.grad, atol=1e-5), n
    assert torch.isnan(stats['ce'][:2]).all() and torch.isfinite(stats['ce'][2:]).all()  # loops 1-2 not read
    assert torch.allclose(stats['h_norm'], torch.stack([h.norm(dim=-1).mean() for h in (model.loop(h0), h2, h3, h4)]))
    # the position embedding reaches the loss only through the loops: through the truncated ones
    # not at all, through injection into the trained ones, yes
    assert ('transformer.wpe.weight' in got) == inject


def test_truncated_backprop_penalises_only_the_loops_that_run_with_a_graph():
    # what the loss reports is what trains: the loops without a graph are in neither the CE nor the penalty
    lam = 0.1
    model = tiny(FieldGPT, n_layer=1, readout='raw', n_loops=4, norm_penalty=lam, init_std=0.1)
    x, y = batch(B=2)
    with torch.no_grad():
        h = model.hidden_states(x)  # H_0 .. H_4, the same values the truncated forward computes
    read = h[3:]  # loops 3 and 4 (bptt 2)
    want = sum(F.cross_entropy(model.lm_head(model.readout(s, False)).flatten(0, 1), y.flatten()) for s in read) / 2
    want = want + lam * sum(s.pow(2).mean() for s in read) / 2
    _, loss = model(x, y, bptt=2)
    assert loss.item() == pytest.approx(want.item(), rel=1e-5)
    every = want + lam * (sum(s.pow(2).mean() for s in h[1:]) / 4 - sum(s.pow(2).mean() for s in read) / 2)
    assert abs(every.item() - want.item()) > 1e-3  # (the penalty over all four loops would be another number)


@pytest.mark.parametrize('loss', ['perloop', 'terminal'])
def test_the_flops_estimate_is_a_counted_training_step_with_truncated_backprop(loss):
    # the training step counted matmul by matmul (forward and backward) is the estimate MFU divides by,
    # at every bptt: truncated loops have a forward and no backward, and are not read out
    model = tiny(FieldGPT, n_layer=2, n_loops=4, loss=loss, init_std=0.1)
    x, y = batch(B=4)
    for bptt in (0, 1, 2, 4):
        with FlopCounterMode(display=False) as counter:
            _, l = model(x, y, bptt=bptt)
            l.backward()
        model.zero_grad()
        graph = bptt or 4
        # the counter does not see F.scaled_dot_product_attention on the CPU: attention as the estimate
        # counts it, 2*T*d a token per layer for q@k and for att@v, x1 forward and x2 backward
        attention = (4 + 2 * graph) * 2 * 2 * (2 * T * D)
        assert counter.get_total_flops() / x.numel() + attention == model.flops_per_token(backward_loops=bptt, T=T), bptt


def step(model, x, y, K, bptt):
    """loss, per-loop CE and every parameter's gradient of one training forward and backward."""
    model.zero_grad()
    _, loss = model(x, y, n_loops=K, bptt=bptt)
    loss.backward()
    return loss.detach(), model.stats['ce'], {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize('K,bptt', [(2, 2), (2, 3), (2, 8), (4, 4), (4, 5)])
def test_bptt_at_or_past_the_drawn_depth_reads_and_trains_every_loop_that_ran(K, bptt):
    # truncated backprop counts from the last loop: with bptt >= K every loop that ran has a graph and is read,
    # the loss, the penalty, the per-loop CE and the gradients those of the untruncated step
    model = tiny(FieldGPT, n_layer=1, n_loops=4, readout='raw', norm_penalty=0.1)
    x, y = batch(B=2)
    want, got = step(model, x, y, K, 0), step(model, x, y, K, bptt)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]) and got[1].isfinite().all()
    assert got[2].keys() == want[2].keys() and all(torch.equal(got[2][n], want[2][n]) for n in want[2])
    assert model.flops_per_token(K, backward_loops=bptt) == model.flops_per_token(K)
    # one loop short of K is truncated: the first loop is not read, and the loss is another number
    short = step(model, x, y, K, K - 1)
    assert short[1][0].isnan() and short[1][1:].isfinite().all() and not torch.equal(short[0], want[0])
    assert model.flops_per_token(K, backward_loops=K - 1) < model.flops_per_token(K)


# -----------------------------------------------------------------------------
# every pair of model additions the config allows (the paper's and beyond/'s) trains a step and feeds each loop
# the input its documented rule gives, computed here by hand from the state before it and the embedding (a rule
# that is right alone can be wrong beside another: damping that also damps the injected embedding passes every
# single-addition test)

PAIR_V, PAIR_T, PAIR_K = 16, 8, 3  # the pairs' tiny model: vocabulary, block, loops


# one entry per model addition, the paper's and beyond/'s (bptt: FieldGPT.forward's, train.py's truncated backprop),
# each off its default
ADDITIONS = dict(sandwich_norm=dict(sandwich_norm=True), inject=dict(inject=True), damping=dict(damping=True),
                 window=dict(window=2), positions=dict(positions='none'), interloop_norm=dict(interloop_norm=True),
                 norm_penalty=dict(norm_penalty=0.01), raw=dict(readout='raw'), final_norm=dict(readout='final_norm'),
                 alpha=dict(readout='alpha'), terminal=dict(loss='terminal'), exit_train=dict(exit_train=0.5),
                 bptt=dict(bptt=1))


REFUSED = {('terminal', 'exit_train'), ('exit_train', 'bptt')}  # the pairs the config (or train.py) refuses


PAIRS = [(a, b) for a, b in itertools.combinations(ADDITIONS, 2)
         if ADDITIONS[a].keys() != ADDITIONS[b].keys()]  # (one readout at a time)


def test_every_model_field_is_an_addition_here():
    # a new field of the configs (its size fields and its init aside) joins ADDITIONS, and so every pair
    covered = {k for kw in ADDITIONS.values() for k in kw}
    assert {f.name for f in fields(ExitTrainConfig)} - set(SIZE) - {'init_std'} <= covered
    assert not {'sandwich_norm', 'inject', 'damping', 'window', 'positions', 'exit_train'} & {
        f.name for f in fields(LoopedGPTConfig)}  # the paper's config holds none of beyond/'s


def build(kw):
    """A tiny model with the additions kw (bptt: returned apart), its between-loop gain and damping
    logit moved off their init so a rule that forgets one reads another number."""
    kw = dict(kw)
    bptt = kw.pop('bptt', 0)
    cls = ExitTrainedGPT if kw.get('exit_train') else FieldGPT
    torch.manual_seed(0)
    model = cls(cls.config_class(**dict(dict(vocab_size=PAIR_V, block_size=PAIR_T, n_layer=1, n_head=2, n_embd=16,
                                              n_loops=PAIR_K, dropout=0.0, init_std=0.1), **kw)))
    with torch.no_grad():
        if model.interloop_norm is not None:
            model.interloop_norm.weight.uniform_(0.5, 1.5, generator=torch.Generator().manual_seed(1))
        if model.config.damping:
            model.damping_logit.fill_(0.3)  # sigmoid 0.57
    return model, bptt


def loop_input_by_hand(model, h, e):
    """What loop k >= 2 starts from, by model.loop_input's documented rule: the carried state H_{k-1},
    RMS-normalized (times the gain) with the inter-loop norm, then times sigmoid(a) with damping, then
    plus the embedding H_0, neither normalized nor damped, with injection."""
    cfg = model.config
    if cfg.interloop_norm:
        h = h / torch.sqrt(h.pow(2).mean(-1, keepdim=True) + torch.finfo(h.dtype).eps) * model.interloop_norm.weight
    if cfg.damping:
        h = h / (1 + math.exp(-model.damping_logit.item()))
    if cfg.inject:
        h = h + e
    return h


@pytest.mark.parametrize('a,b', PAIRS, ids=[f'{a}+{b}' for a, b in PAIRS])
def test_each_pair_of_additions_trains_a_step_and_feeds_each_loop_its_input_by_hand(a, b, monkeypatch):
    kw = {**ADDITIONS[a], **ADDITIONS[b]}
    settings = dict(train.SETTINGS, **{k: v for k, v in kw.items() if k != 'bptt'}, bptt=kw.get('bptt', 0),
                    model_class='beyond.exit_train.ExitTrainedGPT' if 'exit_train' in kw else 'beyond.additions.FieldGPT')
    cls = train.model_class_of(settings)
    settings = {**train.model_fields(cls), **settings}
    if (a, b) in REFUSED:  # refused in one line, by the config or by train.py (its forward has no truncated backprop)
        with pytest.raises(train.UserError, match='exit_train|truncated backprop'):
            train.check_settings(settings, cls)
        return
    train.check_settings(settings, cls)
    model, bptt = build(kw)
    g = torch.Generator().manual_seed(2)
    x, y = torch.randint(0, PAIR_V, (2, PAIR_T), generator=g), torch.randint(0, PAIR_V, (2, PAIR_T), generator=g)
    # what each loop's block is handed, and every state the training forward carries, where the loop makes it:
    # the paper's loop (truncated backprop runs its first loops without a graph), or exit-aware training's
    # masked states, where a frozen token's state is its exit state, not the block's output
    inputs, states = [], []
    model.transformer.h[0].register_forward_pre_hook(lambda m, args: inputs.append(args[0].detach().clone()))
    owner = ExitTrainedGPT if isinstance(model, ExitTrainedGPT) else LoopedGPT
    real = owner.loop_states

    def spy(*args, **kwargs):
        for h in real(*args, **kwargs):
            states.append(h.detach().clone())
            yield h
    monkeypatch.setattr(owner, 'loop_states', spy)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model.train()
    _, loss = model(x, y, bptt=bptt) if bptt else model(x, y)
    assert len(inputs) == PAIR_K and len(states) == PAIR_K + 1
    with torch.no_grad():  # the embedding by hand: token rows, plus position rows where positions are learned
        e = model.transformer.wte.weight[x] + (model.transformer.wpe.weight[:PAIR_T] if model.config.positions == 'learned'
                                               else 0)
        assert torch.allclose(states[0], e) and torch.allclose(inputs[0], e)  # loop 1 reads the embedding as it is
        for k in range(2, PAIR_K + 1):
            assert torch.allclose(inputs[k - 1], loop_input_by_hand(model, states[k - 1], e), atol=1e-6), k
    # one optimizer step: a finite loss and finite gradients, and the parameters move
    assert torch.isfinite(loss)
    loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    before = [p.detach().clone() for p in model.parameters()]
    optimizer.step()
    assert any(not torch.equal(p, q) for p, q in zip(model.parameters(), before))
    assert all(torch.isfinite(p).all() for p in model.parameters())
    _, loss = model(x, y, bptt=bptt) if bptt else model(x, y)
    assert torch.isfinite(loss)


# -----------------------------------------------------------------------------
# older checkpoints: written before beyond/additions.py, they hold beyond/'s fields in model_args and name no
# model_class. Loading one is one line that says what to do; done, it loads as the model it was trained as

def test_an_older_checkpoint_is_one_line_that_says_what_to_do_and_done_it_loads(tmp_path):
    import re
    shape = dict(vocab_size=16, block_size=8, n_layer=1, n_head=2, n_embd=8, n_loops=2, dropout=0.0)
    paper = {f.name for f in fields(LoopedGPTConfig)}
    moved = {f.name: f.default for f in fields(ExitTrainConfig) if f.name not in paper}  # (every field it held)
    x, path = torch.randint(0, 16, (1, 8)), tmp_path / 'ckpt.pt'
    for off, cls in ((dict(), LoopedGPT), (dict(sandwich_norm=True, positions='none'), FieldGPT),
                     (dict(exit_train=0.25, damping=True), ExitTrainedGPT)):
        torch.manual_seed(0)
        model = cls(cls.config_class(**shape, **off)).eval()
        old = dict(model_args={**vars(LoopedGPTConfig(**shape)), **moved, **off}, model=model.state_dict())
        torch.save(old, path)
        with pytest.raises(ValueError) as e:
            LoopedGPT.from_checkpoint(str(path))
        message = str(e.value)
        assert '\n' not in message and 'model_class' in message and all(k in message for k in moved), message
        torch.save(dict(old, model_class=re.search(r'beyond\.\S+GPT', message).group()), path)  # the class it names
        loaded, _ = LoopedGPT.from_checkpoint(str(path))
        assert all(getattr(loaded.config, k) == v for k, v in old['model_args'].items())
        with torch.no_grad():
            assert torch.equal(loaded.eval()(x)[0], model(x)[0])
