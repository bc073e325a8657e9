"""
Decoding (decoder.py): the static KV cache gives the full forward's logits, per-token early
exit means what it says (an exit at loop j costs j loops; later tokens read the exited
token's stand-in, copied or recomputed), and speculative decoding with the model's own first
loops gives the K-loop model's output: the same greedy text, the same distribution. The policies that lossless
checks cannot see are checked by hand (what speculation drafted, the loop each token exits at), and the compiled
step's code runs here as Python, on its inputs' device.

    python -m pytest -q tests/test_decoder.py
"""

import math
from dataclasses import fields

import pytest
import torch
from torch.nn import functional as F
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from beyond import decoder
from beyond import exits
from beyond.decoder import decode, generate, new_cache
from beyond.additions import FieldGPT, FieldGPTConfig
from conftest import between, exit_confidence, head_logits, masked_states
import model as model_module
from model import LoopedGPT, LoopedGPTConfig

V, T, D, K = 64, 16, 32, 3


def tiny(**kw):
    """The paper's model, or beyond/additions.py's where kw sets one of its fields."""
    torch.manual_seed(0)
    args = dict(dict(vocab_size=V, block_size=T, n_layer=2, n_head=2, n_embd=D, n_loops=K, dropout=0.0), **kw)
    cls = LoopedGPT if set(kw) <= {f.name for f in fields(LoopedGPTConfig)} else FieldGPT
    return cls(cls.config_class(**args)).eval()


def tokens(B=2, n=T, seed=1):
    return torch.randint(0, V, (B, n), generator=torch.Generator().manual_seed(seed))


# the field's scale controls (model.py, docs/depth.md): each changes the block, the loop input or the
# readout, and the decoder must run each as the forward does
CONTROLS = [dict(sandwich_norm=True), dict(inject=True), dict(damping=True, interloop_norm=True), dict(readout='alpha')]


@pytest.mark.parametrize('kw', [dict(readout='norm', interloop_norm=True), dict(readout='raw'), dict(readout='final_norm')]
                         + CONTROLS)
@pytest.mark.parametrize('n_loops', [K, 1, 5])  # the trained K, and others
def test_cached_logits_equal_the_full_forward_at_every_step(kw, n_loops):
    model = tiny(**kw)
    x = tokens()
    with torch.no_grad():
        cache = new_cache(model, 2, n_loops)
        got, loops = decode(model, x[:, :5], cache)  # a prefill of 5 tokens ...
        assert torch.allclose(got, model(x[:, :5], n_loops=n_loops)[0], atol=1e-4)
        assert (loops == n_loops).all()
        for t in range(5, T):  # ... then one token at a time
            got, _ = decode(model, x[:, t:t + 1], cache)
            want = model(x[:, :t + 1], n_loops=n_loops)[0][:, -1:]
            assert torch.allclose(got, want, atol=1e-4), t
    assert cache.length == T


def test_cached_greedy_text_equals_uncached_across_window_restarts():
    model = tiny(readout='final_norm', init_std=0.1)  # (the default init is sure of every token at loop 1)
    prompt = tokens(B=1, n=4)
    mixed = []
    for threshold in (0.0, 0.05, 0.1):
        kw = dict(max_new_tokens=3 * T, top_k=1, exit_threshold=threshold)  # past block_size: restarts
        cached, loops_c, _ = generate(model, prompt, kv_cache=True, **kw)
        uncached, loops_u, _ = generate(model, prompt, kv_cache=False, **kw)
        assert torch.equal(cached, uncached) and torch.equal(loops_c, loops_u), threshold
        assert cached.size(1) == 4 + 3 * T
        mixed.append(len(set(loops_c.flatten().tolist())) > 1)
    assert any(mixed)  # at some threshold, tokens exited at different loops


def test_an_always_firing_exit_decodes_exactly_like_one_loop():
    model = tiny(readout='final_norm')
    prompt = tokens(B=1, n=3)
    torch.manual_seed(5)
    fired, loops, _ = generate(model, prompt, 2 * T, temperature=1.0, exit_threshold=1e-9)
    torch.manual_seed(5)
    one, _, _ = generate(model, prompt, 2 * T, temperature=1.0, n_loops=1)
    assert torch.equal(fired, one) and (loops == 1).all()


def test_a_never_firing_exit_decodes_exactly_like_fixed_k():
    model = tiny()
    prompt = tokens(B=1, n=3)
    torch.manual_seed(6)
    never, loops, _ = generate(model, prompt, 2 * T, exit_threshold=1.0)  # no confidence exceeds 1
    torch.manual_seed(6)
    fixed, _, _ = generate(model, prompt, 2 * T)
    assert torch.equal(never, fixed) and (loops == K).all()


# ---------------------------------------------------------------------------------------
# the causal exit, against a slow token-by-token reference written out here

def reference_causal_exit(model, x, threshold, criterion):
    """Token by token, loop by loop, layer by layer, with keys and values in Python lists: a
    token stops after the first loop whose readout (as the model run with that many loops)
    is confident enough; later tokens then see its key/value of that loop at every later loop."""
    cfg = model.config
    nh, hs = cfg.n_head, cfg.n_embd // cfg.n_head
    keys = [[[] for _ in range(cfg.n_layer)] for _ in range(K)]  # keys[loop][layer][position]
    vals = [[[] for _ in range(cfg.n_layer)] for _ in range(K)]
    logits_out, loops_out = [], []
    for t in range(x.size(0)):
        h = model.transformer.wte(x[t]) + model.transformer.wpe(torch.tensor(t))  # (C,)
        stopped_at, prev = None, None
        for k in range(K):
            if stopped_at is not None:  # stand-ins: this token's key/value of its exit loop
                for layer in range(cfg.n_layer):
                    keys[k][layer].append(keys[stopped_at][layer][t])
                    vals[k][layer].append(vals[stopped_at][layer][t])
                continue
            xk = model.interloop_norm(h) if k > 0 and model.interloop_norm is not None else h
            for layer, block in enumerate(model.transformer.h):
                q, kk, vv = block.attn.c_attn(block.ln_1(xk)).split(cfg.n_embd)
                keys[k][layer].append(kk.view(nh, hs))
                vals[k][layer].append(vv.view(nh, hs))
                Kmat, Vmat = torch.stack(keys[k][layer], 1), torch.stack(vals[k][layer], 1)  # (nh, t+1, hs)
                att = F.softmax((q.view(nh, 1, hs) @ Kmat.transpose(1, 2)) / math.sqrt(hs), dim=-1)
                xk = xk + block.attn.c_proj((att @ Vmat).reshape(cfg.n_embd))
                z = block.ln_2(xk)
                xk = xk + block.mlp.w_down(F.silu(block.mlp.w_gate(z)) * block.mlp.w_up(z))
            h = xk
            out = head_logits(model, h)
            if k == K - 1 or exit_confidence(out, criterion, prev) > threshold:
                stopped_at = k
                logits_out.append(out)
                loops_out.append(k + 1)
            prev = out  # ('converge' compares a loop's readout with the previous loop's)
    return torch.stack(logits_out), torch.tensor(loops_out)


@pytest.mark.parametrize('criterion', ['max_prob', 'entropy', 'converge'])
def test_the_causal_exit_equals_a_token_by_token_reference(criterion):
    model = tiny(readout='final_norm', interloop_norm=True)
    x = tokens(B=2, n=T)
    with torch.no_grad():
        states = model.hidden_states(x, 2)
        h1, h2 = (head_logits(model, states[k]) for k in (1, 2))
        # about half stop at the first loop that can stop: loop 1, or loop 2 for 'converge' (a threshold
        # between two confidences, not on one: the median is a token's own, where float noise decides)
        threshold = between(exit_confidence(h2, criterion, h1) if criterion == 'converge' else
                            exit_confidence(h1, criterion))
        want = [reference_causal_exit(model, row, threshold, criterion) for row in x]
        # the whole windows at once (as eval_depth.py scores them), two rows exiting differently
        got_logits, got_loops = decode(model, x, new_cache(model, 2), threshold, criterion)
        # and one token at a time through the cache, two rows at once and (as sample.py decodes,
        # through decode's one-token path) each row alone
        cache = new_cache(model, 2)
        steps = [decode(model, x[:, t:t + 1], cache, threshold, criterion) for t in range(T)]
        alone = []
        for b in range(2):
            cache = new_cache(model, 1)
            alone.append([decode(model, x[b:b + 1, t:t + 1], cache, threshold, criterion) for t in range(T)])
    step_logits, step_loops = torch.cat([s[0] for s in steps], 1), torch.cat([s[1] for s in steps], 1)
    for b, (want_logits, want_loops) in enumerate(want):
        assert torch.equal(got_loops[b], want_loops) and torch.equal(step_loops[b], want_loops)
        assert torch.allclose(got_logits[b], want_logits, atol=1e-4)
        assert torch.allclose(step_logits[b], want_logits, atol=1e-4)
        assert torch.equal(torch.cat([s[1][0] for s in alone[b]]), want_loops)
        assert torch.allclose(torch.cat([s[0][0] for s in alone[b]]), want_logits, atol=1e-4)
    # stand-ins were read: some token ran deeper than an earlier token of its row had
    assert any(got_loops[b, t] > got_loops[b, :t].min() for b in range(2) for t in range(1, T))
    assert not torch.equal(got_loops[0], got_loops[1])  # the two rows exit differently


def test_generate_windows_use_every_position_and_keep_three_quarters(monkeypatch):
    model = tiny()
    calls = []
    real = decoder.decode

    def spy(model, idx, cache, *args):
        calls.append((cache.length, idx.size(1)))
        return real(model, idx, cache, *args)
    monkeypatch.setattr(decoder, 'decode', spy)
    generate(model, tokens(B=1, n=T), 3 * T, top_k=1)  # a prompt of exactly block_size tokens
    assert calls[0] == (0, T)  # it fits: no restart before the first token
    assert max(t0 + n for t0, n in calls) == T  # position block_size - 1 is used ...
    keep = T - T // 4
    refills = [n for t0, n in calls if t0 == 0][1:]
    assert refills and all(n == keep for n in refills)  # ... and each restart keeps the last 3/4
    assert len(calls) == 3 * T


def test_decode_refuses_positions_past_the_block():
    model = tiny()
    cache = new_cache(model, 1)
    with torch.no_grad():
        decode(model, tokens(B=1, n=T), cache)
        with pytest.raises(ValueError, match='block_size'):
            decode(model, tokens(B=1, n=1), cache)


# ---------------------------------------------------------------------------------------
# early exit: the loop each token exits at, against its criterion written out here (not the registry's)

def conf_by_hand(criterion, model, h, before):
    """A token's confidence after a loop from its state h and the state before it (C,) each."""
    p = F.softmax(head_logits(model, h).double(), -1)
    if criterion == 'max_prob':
        return p.max().item()
    if criterion == 'entropy':
        return 1 + (p * p.log()).sum().item() / math.log(p.numel())
    if criterion == 'angular':
        return 1 - (h / h.norm() - before / before.norm()).norm().item() / 2
    return math.exp(-(h - before).norm().item() / h.norm().item())  # 'latent'


def exits_by_hand(model, seq, threshold, criterion):
    """Token by token, the loop each token of seq (L,) exits at and its logits there: the first loop
    before K whose confidence exceeds the threshold (else K), on the forward where every earlier token is
    frozen at its own exit (what projected stand-ins give the tokens after it, as tested below)."""
    exit_at = torch.full((1, len(seq)), K)
    with torch.no_grad():
        for t in range(len(seq)):
            states = masked_states(model, seq[None], exit_at)
            exit_at[0, t] = next((k for k in range(1, K)
                                  if conf_by_hand(criterion, model, states[k][0, t], states[k - 1][0, t]) > threshold), K)
        states = masked_states(model, seq[None], exit_at)
        logits = torch.stack([head_logits(model, states[k][0, t]) for t, k in enumerate(exit_at[0].tolist())])
    return exit_at[0], logits


@pytest.mark.parametrize('criterion', ['max_prob', 'entropy', 'angular', 'latent'])
def test_generate_exits_each_token_where_its_criterion_by_hand_first_exceeds_the_threshold(criterion):
    model = tiny(readout='raw', init_std=0.1)
    prompt, n_new = tokens(B=1, n=4), T - 5  # (no window restart: every position is run once)
    with torch.no_grad():  # thresholds between loop-1 confidences, and between loop-2 ones, of the fixed-K text
        seq = generate(model, prompt, n_new, top_k=1)[0][0, :-1]
        states = model.hidden_states(seq[None], 2)
        thresholds = [between(torch.tensor([conf_by_hand(criterion, model, states[k][0, t], states[k - 1][0, t])
                                            for t in range(len(seq))])) for k in (1, 2)]
    seen = []
    for threshold in thresholds:
        out, loops, _ = generate(model, prompt, n_new, top_k=1, exit_threshold=threshold, criterion=criterion,
                                 stand_in='project')
        want_loops, logits = exits_by_hand(model, out[0, :-1], threshold, criterion)
        # new token i is read out at position 3 + i, at that token's exit loop; greedy: its top logit there
        assert loops[0].tolist() == want_loops[3:].tolist(), threshold
        assert out[0, 4:].tolist() == logits[3:].argmax(-1).tolist(), threshold
        seen.append(set(loops[0].tolist()))
    assert any(len(s) > 1 for s in seen), seen  # the threshold decides something: tokens of one text exited apart


# ---------------------------------------------------------------------------------------
# the verify pass and rollback

@pytest.mark.parametrize('readout,cached', [('norm', 5), ('raw', 5), ('final_norm', 5), ('raw', 1)])
def test_several_tokens_on_a_filled_cache_equal_one_at_a_time(readout, cached):
    # (one cached token: the verify pass right after a one-token prompt, the causal mask offset by one)
    model = tiny(readout=readout, interloop_norm=(readout == 'norm'))
    x = tokens()
    with torch.no_grad():
        a, b = new_cache(model, 2), new_cache(model, 2)
        decode(model, x[:, :cached], a)
        decode(model, x[:, :cached], b)
        together, _ = decode(model, x[:, cached:cached + 6], a)  # six new tokens at once on those cached
        apart = torch.cat([decode(model, x[:, t:t + 1], b)[0] for t in range(cached, cached + 6)], 1)
        assert torch.allclose(together, apart, atol=1e-5)
        assert torch.allclose(together, model(x[:, :cached + 6])[0][:, cached:], atol=1e-4)
        for k in range(K):
            assert torch.allclose(a.kv[k][:, 0, ..., :cached + 6, :], b.kv[k][:, 0, ..., :cached + 6, :], atol=1e-5)  # keys


def test_a_rejected_draft_leaves_the_cache_of_the_accepted_tokens():
    model = tiny(readout='raw', init_std=0.3)  # (the default init drafts what loop K says)
    x = tokens(B=1)
    torch.manual_seed(0)
    stepper = decoder.Stepper(model)
    with torch.no_grad():
        cache = new_cache(model, 1)
        decode(model, x[:, :4], cache)
        held, last = x[0, :4].tolist(), x[:, 4:5]  # tokens in the cache; the newest, not yet run
        while True:  # passes until one rejects a draft
            new, drafted, accepted = decoder.speculative_pass(model, last, cache, 1, 3, 1.0, None, 0.0,
                                                              'max_prob', stepper)
            assert new.size(1) == accepted + 1
            held += [int(last)] + new[0, :-1].tolist()
            last = new[:, -1:]
            assert cache.length == len(held)
            if accepted < drafted:
                break
            assert cache.length < T - 4, 'no draft was ever rejected'
        ref = new_cache(model, 1)
        for t, tok in enumerate(held):  # the same tokens decoded one at a time
            decode(model, torch.tensor([[tok]]), ref)
        n = cache.length
        for k in range(K):  # keys and values at every loop and layer
            assert torch.allclose(cache.kv[k][:, 0, ..., :n, :], ref.kv[k][:, 0, ..., :n, :], atol=1e-4)  # keys
            assert torch.allclose(cache.kv[k][:, 1, ..., :n, :], ref.kv[k][:, 1, ..., :n, :], atol=1e-4)  # values
        # and what lies past the length (the rejected drafts) is never read
        assert torch.allclose(decode(model, last, cache)[0], decode(model, last, ref)[0], rtol=1e-5, atol=1e-3)


# ---------------------------------------------------------------------------------------
# speculative decoding

@pytest.mark.parametrize('readout', ['norm', 'raw', 'final_norm'])
@pytest.mark.parametrize('j,g', [(1, 1), (1, 3), (K - 1, 1), (K - 1, 3)])
@pytest.mark.parametrize('draft_stop', [0.0, 0.05])
def test_greedy_speculative_text_equals_fixed_k(readout, j, g, draft_stop):
    model = tiny(readout=readout, init_std=0.1, interloop_norm=(readout == 'norm'))
    prompt = tokens(B=1, n=4)
    kw = dict(max_new_tokens=3 * T, top_k=1)  # past block_size: window restarts inside drafts
    fixed, _, _ = generate(model, prompt, **kw)
    spec, loops, stats = generate(model, prompt, draft_loops=j, draft_tokens=g, draft_stop=draft_stop, **kw)
    assert torch.equal(spec, fixed)
    assert stats['passes'] > 0 and 0 <= stats['accepted'] <= stats['drafted'] <= g * stats['passes']
    assert loops.shape == (1, 3 * T)


@pytest.mark.parametrize('kw', CONTROLS)
def test_greedy_speculative_text_equals_fixed_k_with_every_scale_control(kw):
    model = tiny(init_std=0.1, **kw)
    prompt = tokens(B=1, n=4)
    fixed, _, _ = generate(model, prompt, max_new_tokens=2 * T, top_k=1)
    for j in (1, K - 1):
        spec, _, stats = generate(model, prompt, max_new_tokens=2 * T, top_k=1, draft_loops=j, draft_tokens=3,
                                  draft_stop=0.05)
        assert torch.equal(spec, fixed) and stats['passes'] > 0


def exact_joint(model, prompt, loops):
    """P(the next len(loops) tokens), enumerated with the full forward, new token i drawn from
    the model run with loops[i] loops (temperature 1): a (V,) * len(loops) tensor."""
    n_new, vocab = len(loops), model.config.vocab_size
    probs = torch.zeros((vocab,) * n_new)
    for seq in torch.cartesian_prod(*[torch.arange(vocab)] * n_new).view(-1, n_new):
        ids = torch.cat([prompt[0], seq])[None, :-1]
        p = 1.0
        with torch.no_grad():
            for i, k in enumerate(loops):
                p = p * F.softmax(model(ids, n_loops=k)[0][0, prompt.size(1) - 1 + i], -1)[seq[i]]
        probs[tuple(seq)] = p
    return probs


def speculative_frequencies(model, prompt, n):
    """Frequencies of the 3 new tokens over n speculative runs (temperature 1, drafts of 1 loop):
    the first comes from the prefill, the next two from one pass (one draft and the verify's
    token, or a rejected draft's resampled token and one more pass). Also counts the rejections."""
    got, rejected = torch.zeros((model.config.vocab_size,) * 3), 0
    stepper = decoder.Stepper(model)  # (one for every run, as beyond/sample.py keeps one: its cast weights made once)
    for _ in range(n):
        out, _, stats = generate(model, prompt, 3, temperature=1.0, draft_loops=1, draft_tokens=2, stepper=stepper)
        got[tuple(out[0, -3:])] += 1 / n
        rejected += stats['drafted'] - stats['accepted']
    return got, rejected


def test_speculative_sampling_gives_the_k_loop_distribution(monkeypatch):
    model = tiny(readout='norm', init_std=0.8, vocab_size=3)
    prompt = torch.tensor([[0, 1]])
    want = exact_joint(model, prompt, [K, K, K])  # fixed-K sampling of 3 new tokens
    accept_all = exact_joint(model, prompt, [K, 1, 1])  # a rule that kept every 1-loop draft
    # a model that makes the rule work: no sequence dominates, and its 1-loop drafts are often wrong
    assert want.max() < 0.5 and (accept_all - want).abs().sum() / 2 > 0.3
    n, tolerance = 800, 0.1  # (total variation of 27 cells: about 0.04 expected from sampling alone)
    torch.manual_seed(1)
    got, rejected = speculative_frequencies(model, prompt, n)
    assert rejected > n / 5  # the rejection branch ran, and its token came from the residual
    assert (got - want).abs().sum() / 2 < tolerance
    # the control: the same harness with a wrong rule (resampling from p instead of max(p - q, 0))
    # fails the tolerance, so the test can tell the rule from the one a bug would leave
    monkeypatch.setattr(decoder, 'residual', lambda p, q: p)
    torch.manual_seed(1)
    wrong, _ = speculative_frequencies(model, prompt, n)
    assert (wrong - want).abs().sum() / 2 > tolerance


def test_accepting_drafts_by_the_rule():
    p = torch.tensor([[0.5, 0.5, 0.0], [0.0, 0.0, 1.0]])
    q = torch.tensor([[0.0, 1.0, 0.0]])
    torch.manual_seed(0)
    # a draft the target never makes is rejected, and the token comes from max(p - q, 0) alone
    emitted, n = decoder.accept_drafts(torch.tensor([[1.0, 0, 0], [0, 1.0, 0]]), torch.tensor([[0, 0, 1.0]]),
                                       torch.tensor([2]))
    assert emitted.tolist() == [0] and n == 0
    # a draft the target is sure of is kept, and the bonus token comes from the last row
    emitted, n = decoder.accept_drafts(torch.tensor([[0, 0, 1.0], [0, 1.0, 0]]), torch.tensor([[0, 0, 1.0]]),
                                       torch.tensor([2]))
    assert emitted.tolist() == [2, 1] and n == 1
    # accepted with probability p/q = 0.5: about half the time
    kept = sum(decoder.accept_drafts(p, q, torch.tensor([1]))[1] for _ in range(2000)) / 2000
    assert abs(kept - 0.5) < 0.05
    # with q(x) below 1 the ratio is p/q itself: 0.3/0.6 kept half the time, and 0.8/0.4 (over 1) always, where
    # a rule that divided u by q instead (reject where u/q >= p) would keep them 0.18 and 0.32 of the time
    for px, qx, rate, wrong in ((0.3, 0.6, 0.5, 0.3 * 0.6), (0.8, 0.4, 1.0, 0.8 * 0.4)):
        p = torch.tensor([[px, 1 - px], [0.5, 0.5]])
        q = torch.tensor([[qx, 1 - qx]])
        kept = sum(decoder.accept_drafts(p, q, torch.tensor([0]))[1] for _ in range(2000)) / 2000
        assert abs(kept - rate) < 0.05 and abs(wrong - rate) > 0.15, (px, qx, kept)


# ---------------------------------------------------------------------------------------
# speculative decoding: what was drafted, by hand. The K-loop text comes out whatever is drafted, so a wrong draft
# rule (an inverted draft_stop, drafts from the wrong loop) passes every token-for-token check: here the loops each
# draft ran, the tokens proposed and how many were kept, against the j-loop and K-loop models by hand

def confidence_by_hand(model, seq, j, criterion):
    """Loop j's confidence at the last token of seq, and the j-loop model's greedy token there:
    the top probability ('max_prob'), or 1 - ||u_j - u_{j-1}|| / 2 with u = H / ||H|| ('angular')."""
    with torch.no_grad():
        states = model.hidden_states(torch.tensor([seq]), j)
        h, before = states[j][0, -1], states[j - 1][0, -1]
        logits = head_logits(model, h)
    if criterion == 'max_prob':
        conf = F.softmax(logits, -1).max().item()
    else:
        conf = 1 - (h / h.norm() - before / before.norm()).norm().item() / 2
    return conf, int(logits.argmax())


def draft_chain(model, seq, j, g, criterion, stop=0.0):
    """The greedy drafts by hand: the j-loop model's token, one after the other, while loop j's
    confidence is at least stop (up to g). Returns (drafts, the confidence at each position looked at)."""
    seq, drafts, confs = list(seq), [], []
    while len(drafts) < g:
        conf, tok = confidence_by_hand(model, seq, j, criterion)
        confs.append(conf)
        if conf < stop:
            break
        drafts.append(tok)
        seq.append(tok)
    return drafts, confs


# (criterion, init_std, j, g, m): drafting stops after m < g drafts, at a confidence below every one before it
SPECULATION = [('max_prob', 0.2, 1, 4, 2), ('max_prob', 0.3, 2, 4, 3), ('angular', 0.3, 2, 5, 4)]


@pytest.mark.parametrize('criterion,init_std,j,g,m', SPECULATION)
def test_a_speculative_pass_drafts_the_j_loop_tokens_up_to_the_draft_stop_and_keeps_those_k_loops_agree_with(
        monkeypatch, criterion, init_std, j, g, m):
    model = tiny(readout='raw', init_std=init_std)
    x = tokens(B=1)
    base = x[0, :5].tolist()  # 4 cached tokens and the newest, not yet run
    free, confs = draft_chain(model, base, j, g, criterion)
    # draft_stop between the m-th draft's confidence and every one before it: the rule drafts m tokens;
    # a rule inverted (stop where sure) drafts none, one that ignores it g
    stop = (confs[m] + min(confs[:m])) / 2
    assert min(confs[:m]) - confs[m] > 1e-3  # (no confidence near the stop: float noise cannot decide)
    drafts, _ = draft_chain(model, base, j, g, criterion, stop)
    assert drafts == free[:m]
    # the verify by hand: the K-loop model's greedy token after each accepted prefix
    target = [confidence_by_hand(model, base + drafts[:i], K, 'max_prob')[1] for i in range(m + 1)]
    accepted = next((i for i in range(m) if drafts[i] != target[i]), m)
    assert accepted < m  # some draft is rejected: the acceptance count is not the draft count
    emitted = drafts[:accepted] + [target[accepted]]

    loops, proposed = [], []
    real_loops, real_accept = decoder.Stepper.loops, decoder.accept_drafts
    monkeypatch.setattr(decoder.Stepper, 'loops', lambda self, x, t0, cache, first, last, *a, **kw: loops.append(
        (first, last, x.size(1))) or real_loops(self, x, t0, cache, first, last, *a, **kw))
    monkeypatch.setattr(decoder, 'accept_drafts', lambda p, q, d: proposed.append((q, d)) or real_accept(p, q, d))
    stepper = decoder.Stepper(model)
    with torch.no_grad():
        cache = new_cache(model, 1)
        decode(model, x[:, :4], cache, stepper=stepper)
        loops.clear()
        new, drafted, n_accepted = decoder.speculative_pass(model, x[:, 4:5], cache, j, g, 1.0, 1, stop, criterion,
                                                            stepper)
    assert drafted == m and n_accepted == accepted and new[0].tolist() == emitted
    (q, proposals), = proposed
    assert proposals.tolist() == drafts and q.argmax(-1).tolist() == drafts  # (top_k=1: q one-hot at the draft)
    # each position drafted ran loops 1..j alone (a criterion that reads loop j-1 too: 1..j-1, then j), the
    # one that stopped drafting too; then one verify pass ran loops j+1..K over all of them
    draft = [(0, j, 1)] if criterion == 'max_prob' else [(0, j - 1, 1), (j - 1, j, 1)]
    assert loops == draft * (m + 1) + [(j, K, m + 1)]
    assert cache.length == 5 + accepted  # the newest token and the accepted drafts stay cached


def test_a_draft_stop_below_every_confidence_drafts_every_token_it_may_and_one_above_none(monkeypatch):
    # generate's totals: a stop no confidence is below drafts as many as a pass may (draft_tokens, less
    # near the end); a stop over 1, none. Inverted, the two swap
    model = tiny(readout='raw', init_std=0.2)
    prompt = tokens(B=1, n=4)
    fixed, _, _ = generate(model, prompt, 8, top_k=1)
    may = []  # how many each pass may draft
    real = decoder.speculative_pass
    monkeypatch.setattr(decoder, 'speculative_pass', lambda model, last, cache, j, g, *a: may.append(g) or real(
        model, last, cache, j, g, *a))
    for stop, drafts_all in ((1e-30, True), (1.5, False)):
        may.clear()
        out, _, stats = generate(model, prompt, 8, top_k=1, draft_loops=1, draft_tokens=2, draft_stop=stop)
        assert torch.equal(out, fixed)  # (lossless either way: the text cannot tell them apart)
        assert stats['passes'] == len(may) and stats['drafted'] == (sum(may) if drafts_all else 0), (stop, may)
        assert max(may) == 2
        # the first new token comes from the prefill; each pass then emits its accepted drafts and one more
        assert 1 + stats['passes'] + stats['accepted'] == 8


# ---------------------------------------------------------------------------------------
# recomputed stand-ins, the convergence criterion in decoding, the compiled loop

def random_gate(seed=3):
    """A learned exit gate with random weights (exits.ExitGate), as a criterion."""
    gate = exits.ExitGate(D, 'norm')
    torch.nn.init.normal_(gate.linear.weight, generator=torch.Generator().manual_seed(seed))
    return exits.gate_criterion('gate', gate)


def teacher_forced_confidence(model, states, criterion):
    """(K, B, T): each loop's confidence from the states of one forward, H_0 .. H_K."""
    prev, rows = None, []
    for k in range(1, len(states)):
        out = head_logits(model, states[k])
        rows.append(exits.get(criterion)(states[k], states[k - 1], out, prev))
        prev = out
    return torch.stack(rows)


@pytest.mark.parametrize('interloop_norm,criterion,control', [(False, 'max_prob', {}), (True, 'max_prob', {}),
                                                              (False, 'angular', {}), (True, 'latent', {}), (True, 'gate', {}),
                                                              (False, 'max_prob', dict(inject=True, damping=True))])
def test_projected_stand_ins_decode_as_the_training_forward_with_that_exit_pattern(interloop_norm, criterion, control):
    # exit-aware training freezes a token after its exit loop and lets the others attend to it;
    # decoding with projected stand-ins must be that same computation, position by position, and
    # the exits must be the pattern the criterion implies on that forward's states (the readout's
    # criteria from its logits, the readout-free ones from the states alone)
    model = tiny(readout='raw', init_std=0.1, interloop_norm=interloop_norm, **control)
    criterion = random_gate() if criterion == 'gate' else criterion
    x = tokens(B=2)
    with torch.no_grad():
        conf = teacher_forced_confidence(model, model.hidden_states(x, K), criterion)
        threshold = between(conf[0] if criterion == 'max_prob' else conf[1])  # about half stop at loop 1 (2)
        logits, loops = decode(model, x, new_cache(model, 2), threshold, criterion, 'project')
        cache = new_cache(model, 2)  # and one token at a time
        steps = [decode(model, x[:, t:t + 1], cache, threshold, criterion, 'project') for t in range(T)]
        alone = []  # each row alone, one token at a time: decode's one-token path
        for b in range(2):
            cache = new_cache(model, 1)
            alone.append([decode(model, x[b:b + 1, t:t + 1], cache, threshold, criterion, 'project') for t in range(T)])
        states = masked_states(model, x, loops)  # the masked training forward, same pattern
        want = torch.stack([head_logits(model, states[k]) for k in range(1, K + 1)])  # (K, B, T, V)
        want = want.gather(0, (loops - 1)[None, ..., None].expand(1, *want.shape[1:])).squeeze(0)
        # the pattern the criterion implies there: the first loop over the threshold (else K)
        implied = 1 + eval_exit_loops(teacher_forced_confidence(model, states, criterion), threshold)
    assert len(set(loops.flatten().tolist())) > 1  # tokens exited at different loops
    assert torch.equal(loops, implied)
    assert torch.allclose(logits, want, atol=1e-4)
    assert torch.equal(torch.cat([s[1] for s in steps], 1), loops)
    assert torch.allclose(torch.cat([s[0] for s in steps], 1), want, atol=1e-4)
    for b in range(2):
        assert torch.equal(torch.cat([s[1] for s in alone[b]], 1)[0], loops[b])
        assert torch.allclose(torch.cat([s[0] for s in alone[b]], 1)[0], want[b], atol=1e-4)
    copied, _ = decode(model, x, new_cache(model, 2), threshold, criterion, 'copy')
    assert not torch.allclose(copied, want, atol=1e-3)  # the copy is something else


def eval_exit_loops(conf, tau):
    from beyond.eval_decode import exit_loops
    return exit_loops(conf.clone(), tau)


def count_readouts(monkeypatch):
    """Counts Stepper.logits calls: the decoder's readouts."""
    calls = []
    real = decoder.Stepper.logits
    monkeypatch.setattr(decoder.Stepper, 'logits', lambda self, h, last: calls.append(h.shape) or real(self, h, last))
    return calls


@pytest.mark.parametrize('criterion', ['angular', 'latent', 'gate'])
def test_a_readout_free_exit_reads_out_once_and_waits_once_a_loop(monkeypatch, criterion):
    model = tiny(readout='raw', init_std=0.3)
    criterion = random_gate() if criterion == 'gate' else criterion
    x = tokens(B=1)
    calls = count_readouts(monkeypatch)
    with torch.inference_mode():
        stepper = decoder.Stepper(model)
        cache = new_cache(model, 1)
        decode(model, x[:, :4], cache, stepper=stepper)
        for threshold, want_loops in ((1 - 1e-12, K), (1e-9, 1)):  # never stops (float32 < 1 - 1e-12), stops at loop 1
            calls.clear()
            cache.length = 4
            with HostReads() as reads:
                _, loops = decode(model, x[:, 4:5], cache, threshold, criterion, stepper=stepper)
            assert int(loops) == want_loops and len(calls) == 1  # one readout: at the exit or the last loop
            assert reads.reads == ['__bool__'] * min(want_loops, K - 1)  # one number per loop that could stop
        calls.clear()
        decode(model, x[:, 4:5], cache, 1 - 1e-12, 'max_prob', stepper=stepper)  # the control: a readout's criterion
        assert len(calls) == K  # reads out after every loop it could stop after, and at the last
        calls.clear()  # many tokens at once: a readout only at the loops where some stop
        _, loops = decode(model, x[:, :8], new_cache(model, 1), 1 - 1e-12, criterion, stepper=stepper)
        assert (loops == K).all() and len(calls) == 1


def test_the_converge_criterion_never_exits_at_loop_one_and_can_exit_later():
    model = tiny(readout='raw', init_std=0.1)
    x = tokens(B=2)
    with torch.no_grad():
        states = model.hidden_states(x, 2)
        h1, h2 = (head_logits(model, states[k]) for k in (1, 2))
        threshold = between(exit_confidence(h2, 'converge', h1))  # about half could stop at loop 2
        _, loops = decode(model, x, new_cache(model, 2), threshold, 'converge', 'project')
        _, never = decode(model, x, new_cache(model, 2), 1.0, 'converge', 'project')  # no confidence exceeds 1
    assert loops.min() >= 2  # loop 1 has nothing to compare with
    assert (loops < K).any() and (loops == K).any()  # and the branch runs: some stop before K, some do not
    assert (never == K).all()


def test_one_compiled_loop_serves_every_depth_exit_and_draft():
    # one loop graph for every K (2, 3 and 6), every exit depth, every draft, and one token graph for each
    # fixed K: a loop graph more would be a recompile of static_loop, and past dynamo's recompile limit a
    # silent eager fallback. With the limit at 3 (static_token's three K) and fail_on_recompile_limit_hit,
    # a fourth graph of either raises here instead. (config.patch, not monkeypatch: undoing a
    # monkeypatch deleted the setting from dynamo's config for later tests)
    with torch._dynamo.config.patch(recompile_limit=3, fail_on_recompile_limit_hit=True):
        one_compiled_loop_for_every_depth()


def one_compiled_loop_for_every_depth():
    from torch._dynamo.utils import counters
    torch._dynamo.reset()
    counters.clear()
    model = tiny(readout='final_norm', init_std=0.1, interloop_norm=True, n_layer=1)  # (one layer: half the cold compile)
    prompt = tokens(B=1, n=4)
    exited, passes = False, 0
    for n_loops in (2, 3, 6):
        for kw in (dict(), dict(exit_threshold=0.1), dict(exit_threshold=0.9, criterion='angular'),
                   dict(draft_loops=1, draft_tokens=2)):
            kw = dict(kw, n_loops=n_loops, max_new_tokens=T, top_k=1)  # (past block_size: a window restart)
            eager = generate(model, prompt, **kw)
            compiled = generate(model, prompt, compile=True, **kw)
            assert torch.equal(eager[0], compiled[0]) and torch.equal(eager[1], compiled[1]), kw
            exited |= bool((compiled[1] < n_loops).any())
            passes += compiled[2]['passes']
    assert exited and passes > 0  # exits and drafts really ran through the compiled loop
    assert counters['stats']['unique_graphs'] == 1 + 3  # the loop's, and a token's for each fixed K
    with torch.inference_mode():  # and the logits of one step (no_grad would be a graph of its own)
        a, b = new_cache(model, 1), new_cache(model, 1)
        decode(model, prompt, a)
        decode(model, prompt, b)
        want = decode(model, prompt[:, -1:], a)[0]
        got = decode(model, prompt[:, -1:], b, stepper=decoder.Stepper(model, compile=True))[0]
    assert torch.allclose(want, got, atol=1e-5)


@pytest.mark.parametrize('n_loops', [1, K])
def test_a_compiled_stepper_traces_with_static_shapes_a_graph_for_each_batch_size(monkeypatch, n_loops):
    # each compiled graph, the loop (static_loop: K=1, every token through it) and the fixed-K token
    # (static_token: K loops, no exit), is specialised to its shapes (kernels for that batch size; on CUDA, a
    # graph's fixed buffers): a new batch size is a graph of its own, where dynamo's default would make the
    # second one of symbolic sizes and serve every later size with it. Traced by dynamo alone (a backend that
    # keeps the graphs' inputs, no inductor)
    graphs, compile = [], torch.compile

    def keep(gm, example_inputs):
        graphs.append([tuple(t.shape) if isinstance(t, torch.Tensor) else t for t in example_inputs])
        return gm.forward
    monkeypatch.setattr(torch, 'compile', lambda fn, **kw: compile(fn, **{**kw, 'backend': keep}))
    torch._dynamo.reset()
    model = tiny(n_layer=1)
    stepper = decoder.Stepper(model, compile=True)
    for B in (1, 2, 3):
        prompt = tokens(B=B, n=4, seed=B)
        eager = generate(model, prompt, 2, top_k=1, n_loops=n_loops)
        assert torch.equal(generate(model, prompt, 2, top_k=1, n_loops=n_loops, stepper=stepper)[0], eager[0])
    torch._dynamo.reset()
    assert len(graphs) == 3, graphs
    for B, inputs in zip((1, 2, 3), graphs):  # the weights or the layer's cache, the position, the state (B, 1, C)
        assert all(isinstance(shape, tuple) and all(isinstance(n, int) for n in shape) for shape in inputs), inputs
        assert (B, 1, D) in inputs


def test_the_compiled_step_run_as_python_decodes_as_the_eager_step(monkeypatch):
    # mutmut cannot run the tests that compile (the one-compiled-loop test above is deselected there): with
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
    for model in (model, tiny(readout='final_norm', init_std=0.5, n_layer=3)):  # (3 layers: each its own slot, in order)
        with torch.inference_mode():
            stepper = decoder.Stepper(model, compile=True)
            a, b = new_cache(model, 1), new_cache(model, 1)
            decode(model, prompt, a)
            decode(model, prompt, b)
            want = decode(model, prompt[:, -1:], a)[0]
            got = decode(model, prompt[:, -1:], b, stepper=stepper)[0]
        assert torch.allclose(want, got, atol=1e-5)
        assert torch.allclose(a.all[..., :5, :], b.all[..., :5, :], atol=1e-5)  # the same keys and values cached


class HostReads(TorchFunctionMode):
    """Records the calls by which the host waits for the device: reading a number (bool(), int(),
    float(), .item(), .tolist()) and nonzero (its size depends on the data)."""
    READS = ('__bool__', '__int__', '__float__', '__index__', 'item', 'tolist', 'nonzero')

    def __enter__(self):
        self.reads = []
        return super().__enter__()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, '__name__', '') in self.READS:
            self.reads.append(func.__name__)
        return func(*args, **(kwargs or {}))


class HostData(TorchDispatchMode):
    """Records the tensors made from Python data (aten.lift_fresh: a list index, torch.tensor(...)),
    each a host-to-device copy and a stream sync on a GPU, seen here on the CPU too."""

    def __enter__(self):
        self.made = []
        return super().__enter__()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.__name__.startswith('lift_fresh'):
            self.made.append(func.__name__)
        return func(*args, **(kwargs or {}))


def test_sampling_with_top_k_makes_no_tensor_from_host_data():
    logits = torch.randn(1, V)
    with HostData() as probs:
        p = decoder.next_token_probs(logits, 0.8, 10)
        decoder.draw(p)
    assert probs.made == [] and (p > 0).sum() == 10
    with HostData() as listed:  # the detector sees the list index sampling once used
        logits[..., [-1]]
    assert listed.made == ['lift_fresh.default']


def test_the_host_waits_for_no_fixed_k_step_and_once_a_speculative_pass():
    model = tiny(readout='raw', init_std=0.3)
    x = tokens(B=1)
    with torch.inference_mode():
        stepper = decoder.Stepper(model)
        cache = new_cache(model, 1)
        decode(model, x[:, :4], cache, stepper=stepper)
        with HostReads() as fixed:  # fixed-K steps and their sampling: nothing read (the caller reads the tokens)
            for t in range(4, 8):
                decoder.draw(decoder.next_token_probs(decode(model, x[:, t:t + 1], cache, stepper=stepper)[0][:, -1],
                                                        1.0, 10))
        with HostReads() as speculative:  # drafting and verifying: where the first rejection is, once
            _, drafted, _ = decoder.speculative_pass(model, x[:, 8:9], cache, 1, 3, 1.0, None, 0.0, 'max_prob', stepper)
        with HostReads() as exits:  # exits: one number per loop that could stop (skipping work is the point)
            _, loops = decode(model, x[:, 12:13], cache, 0.99, stepper=stepper)
    assert fixed.reads == [] and drafted == 3
    assert speculative.reads == ['__int__']
    assert exits.reads == ['__bool__'] * min(int(loops), K - 1)


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


def test_generate_makes_every_tensor_on_the_models_device_whatever_the_default_device(monkeypatch):
    # a tensor made without device= lands on torch's default device, the CPU here, so on a CPU-only machine a
    # forgotten device= cannot be seen. With the default device 'meta' and the model on the CPU, every tensor
    # the decoder makes without its inputs' device is a meta tensor, and mixing it with a CPU one raises (a
    # GPU's copy and wait at every step, or its error). Each path: fixed K with top_k, exits with either
    # stand-in, speculative drafts by the sampling rule and none drafted, no cache, a window restart, no new
    # token, and the compiled step run as Python (torch.compile the identity, as above)
    monkeypatch.setattr(torch, 'compile', lambda fn, **kw: fn)
    model = tiny(interloop_norm=True, init_std=0.5)
    prompt = tokens(1, 4)
    cases = [(6, dict(top_k=5)), (6, dict(exit_threshold=0.5)), (6, dict(exit_threshold=0.5, stand_in='project')),
             (6, dict(draft_loops=1, draft_tokens=3)), (4, dict(draft_loops=1, draft_tokens=3, draft_stop=2.0)),
             (6, dict(kv_cache=False)), (T + 2, dict(top_k=1)), (0, dict()),
             (6, dict(compile=True, exit_threshold=0.5)), (6, dict(compile=True, draft_loops=1, draft_tokens=2))]
    for n, kw in cases:
        torch.manual_seed(0)
        want = generate(model, prompt, n, **kw)
        torch.set_default_device('meta')
        try:
            torch.manual_seed(0)
            got = generate(model, prompt, n, **kw)
        finally:
            torch.set_default_device(None)
        assert got[0].device.type == got[1].device.type == 'cpu', kw
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]) and got[2] == want[2], kw
    assert torch.tensor(0.0).device.type == 'cpu'  # (the default restored)


# ---------------------------------------------------------------------------------------
# precision: the decoder decodes the model that model.forward computes, in bf16 too

def drifted(K=3):
    """A tiny model whose states are large, as after drift (||H|| ~ 1,600 at d=32, ~300 a
    channel, where bf16's spacing is 2): large position embeddings and stack updates. A norm
    readout, as in the drifted runs: the prediction rests on the small part the loops add."""
    model = tiny(readout='norm', n_loops=K, block_size=32)
    with torch.no_grad():
        model.transformer.wpe.weight.mul_(300)
        for block in model.transformer.h:
            block.attn.c_proj.weight.mul_(30)
            block.mlp.w_down.weight.mul_(30)
    return model


def stepwise_logits(model, x, stepper):
    """Logits of every position of x (1, T), decoded one token at a time through the cache."""
    cache = new_cache(model, 1)
    return torch.cat([decode(model, x[:, t:t + 1], cache, stepper=stepper)[0] for t in range(x.size(1))], 1).float()


def test_under_bf16_autocast_the_decoder_is_the_forward(monkeypatch):
    model = drifted()
    x = torch.randint(0, V, (1, 32), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        exact = model(x)[0]  # float32, the reference both are measured against
        assert model.hidden_states(x)[-1].norm(dim=-1).mean() > 1000
        with torch.autocast('cpu', dtype=torch.bfloat16):
            forward = model(x)[0].float()
            stepper = decoder.Stepper(model)
            decoded = stepwise_logits(model, x, stepper)
            h = stepper.loops(model.embed(x[:, :1], 0), 0, new_cache(model, 1), 0, K)
            weights = stepper.weights()
            # the control: an old rule, the residual added in the matmuls' dtype, which turns the stream into
            # bf16 after the first block
            def bf16_stream(block, x, cache=None):
                x = (x + block.attn(block.ln_1(x), cache)).to(torch.bfloat16)
                return (x + block.mlp(block.ln_2(x))).to(torch.bfloat16)
            with monkeypatch.context() as m:
                m.setattr(model_module.Block, 'forward', bf16_stream)
                old_rule = stepwise_logits(model, x, decoder.Stepper(model))
    assert h.dtype == torch.float32  # the residual stream stays float32, as in model.Block
    assert weights.blocks[0].attn.c_attn.weight.dtype == torch.bfloat16  # and the weights were cast once, to bf16
    assert model.transformer.h[0].attn.c_attn.weight.dtype == torch.float32  # (a copy's: the model's are as they were)
    err = {name: (logits - exact).abs().max().item() for name, logits in
           dict(forward=forward, decoded=decoded, old_rule=old_rule).items()}
    assert err['decoded'] <= 1.5 * err['forward'], err  # within the forward's own bf16 error
    assert err['old_rule'] > 2 * err['forward'], err  # (it was 4.4x: the bound tells the rules apart)


def test_greedy_text_under_bf16_autocast_is_the_forwards():
    model = drifted()
    prompt = torch.randint(0, V, (1, 4), generator=torch.Generator().manual_seed(2))
    with torch.no_grad(), torch.autocast('cpu', dtype=torch.bfloat16):
        decoded, _, _ = generate(model, prompt, 28, top_k=1)
        forward = prompt
        for _ in range(28):  # nanoGPT's way: the whole context through model.forward, the argmax
            forward = torch.cat([forward, model(forward)[0][:, -1:].argmax(-1)], 1)
    assert torch.equal(decoded, forward)


def test_a_decoding_step_under_autocast_casts_no_weight():
    # autocast casts a weight it is handed at every call unless it is a leaf parameter; the
    # Stepper holds its weights already cast, so one step copies nothing weight-sized
    class Casts(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.big = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is torch.ops.aten._to_copy.default and args[0].numel() >= D * D:
                self.big.append(tuple(args[0].shape))
            return func(*args, **(kwargs or {}))

    model = tiny(interloop_norm=True)
    x = tokens(B=1, n=8)
    with torch.no_grad(), torch.autocast('cpu', dtype=torch.bfloat16):
        stepper = decoder.Stepper(model)
        cache = new_cache(model, 1)
        decode(model, x[:, :7], cache, stepper=stepper)
        with Casts() as casts:
            decode(model, x[:, 7:], cache, stepper=stepper)
            decode(model, x[:, 7:], new_cache(model, 1), 0.5, stepper=stepper)  # (exits read the head per loop)
        with Casts() as control:
            head_logits(model, torch.zeros(1, D))  # the model's own readout casts its head
    assert casts.big == [] and control.big == [(V, D)]


def test_a_steppers_weights_are_the_precision_in_force_at_each_call_each_made_once():
    # Stepper.weights: the Weights for the precision in force now (autocast's or the model's), made once for
    # each. A Stepper made in float32 and then called under bf16 autocast casts a bf16 copy (the model's
    # float32 head, cast), not the float32 one it was made with; each precision's copy is kept and reused
    model = tiny()
    stepper = decoder.Stepper(model)  # (float32: the model's own precision)
    fp32 = stepper.weights()
    with torch.autocast('cpu', dtype=torch.bfloat16):
        bf16 = stepper.weights()
        assert stepper.weights() is bf16
    assert stepper.weights() is fp32 and fp32.head.dtype == torch.float32
    assert bf16 is not fp32 and bf16.head.dtype == torch.bfloat16
    assert torch.equal(bf16.head, model.lm_head.weight.detach().to(torch.bfloat16))
    assert bf16.blocks[0].attn.c_attn.weight.dtype == torch.bfloat16


@pytest.mark.skipif(not torch.cuda.is_available(), reason='needs a CUDA GPU')
def test_on_cuda_the_bf16_decoder_is_the_forward_and_a_fixed_k_step_never_waits():
    model = drifted().cuda()
    x = torch.randint(0, V, (1, 32), generator=torch.Generator().manual_seed(1)).cuda()
    with torch.no_grad():
        exact = model(x)[0]
        with torch.autocast('cuda', dtype=torch.bfloat16):
            forward = model(x)[0].float()
            decoded = stepwise_logits(model, x, decoder.Stepper(model))
    err_forward, err_decoded = ((logits - exact).abs().max().item() for logits in (forward, decoded))
    assert err_decoded <= 1.5 * err_forward, (err_decoded, err_forward)
    with torch.inference_mode(), torch.autocast('cuda', dtype=torch.bfloat16):
        stepper, cache = decoder.Stepper(model), new_cache(model, 1)
        decode(model, x[:, :4], cache, stepper=stepper)
        torch.cuda.set_sync_debug_mode('error')  # a fixed-K step that waited for the GPU would raise
        try:
            for t in range(4, 8):
                decoder.draw(decoder.next_token_probs(decode(model, x[:, t:t + 1], cache, stepper=stepper)[0][:, -1],
                                                        1.0, 10))
        finally:
            torch.cuda.set_sync_debug_mode('default')


# the decoding settings CUDA graphs must decode as eager does, one test case each (one flip hides no other)
GRAPH_SETTINGS = {'fixed-K': dict(), 'exit-max_prob': dict(exit_threshold=0.1),
                  'exit-angular': dict(exit_threshold=0.9, criterion='angular'),
                  'speculative': dict(draft_loops=1, draft_tokens=2)}


def teacher_forced(model, x, stepper, kw):
    """Logits (n, V) float32 and loops (n,) of every position of x (1, T) decoded one token at a time with
    setting kw's exits; for a speculative setting, the draft's (its j loops: the one-loop graph) then the
    K-loop model's (the verify pass's distribution, one token at a time)."""
    exit_kw = {k: v for k, v in kw.items() if k in ('exit_threshold', 'criterion')}
    depths = [kw['draft_loops'], None] if 'draft_loops' in kw else [None]
    logits, loops = [], []
    for n_loops in depths:
        cache = new_cache(model, 1, n_loops)
        for t in range(x.size(1)):
            out, used = decode(model, x[:, t:t + 1], cache, stepper=stepper, **exit_kw)
            logits.append(out[0, -1].float())
            loops.append(used[0, -1])
    return torch.stack(logits), torch.stack(loops)


def graphs_against_eager(kw, device):
    """CUDA graphs (compile=True on CUDA) against eager decoding with setting kw, on device:
    in bf16 the same tokens through both, logits within bf16's tolerance; in float32 greedy text, exact."""
    from torch._dynamo.utils import counters
    model = drifted().to(device)
    x = torch.randint(0, V, (1, 32), generator=torch.Generator().manual_seed(1)).to(device)
    skips = counters['inductor']['cudagraph_skips']
    with torch.inference_mode():
        exact = model(x)[0][0]  # float32
        with torch.autocast(device, dtype=torch.bfloat16):
            # the tolerance: each path rounds bf16 its own way (inductor fuses and reorders), about as far
            # from float32 as the bf16 forward is, so two of them are within twice that of each other
            tol = 2 * (model(x)[0][0].float() - exact).abs().max().item()
            eager, eager_loops = teacher_forced(model, x, decoder.Stepper(model), kw)
            graphs, graph_loops = teacher_forced(model, x, decoder.Stepper(model, compile=True), kw)
    same = eager_loops == graph_loops  # (an exit decided on a near-tie may go the other way: a flip of its own)
    assert same.float().mean() >= 0.75, (eager_loops, graph_loops)
    err = (graphs - eager)[same].abs().max().item()
    assert err <= tol, (err, tol)
    # float32 (TF32 off): greedy decoding, past block_size (a window restart), the same tokens and loops
    prompt = x[:, :4]
    tf32 = torch.backends.cuda.matmul.allow_tf32  # (runtime.setup_device turns it on for CUDA)
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        eager = generate(model, prompt, 40, top_k=1, **kw)
        graphs = generate(model, prompt, 40, top_k=1, compile=True, **kw)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
    assert torch.equal(eager[0], graphs[0]) and torch.equal(eager[1], graphs[1])
    assert counters['inductor']['cudagraph_skips'] == skips  # (a skipped graph would have tested the compiled loop)


@pytest.mark.skipif(not torch.cuda.is_available(), reason='needs a CUDA GPU')
@pytest.mark.parametrize('setting', GRAPH_SETTINGS)
def test_on_cuda_graphs_decode_as_eager(setting):
    graphs_against_eager(GRAPH_SETTINGS[setting], 'cuda')


def test_the_exponential_race_samples_the_distribution():
    p = torch.tensor([0.5, 0.3, 0.2, 0.0])
    torch.manual_seed(0)
    draws = decoder.draw(p.expand(20000, 4).contiguous()).flatten()
    freq = torch.bincount(draws, minlength=4).float() / draws.numel()
    assert torch.allclose(freq, p, atol=0.01) and freq[3] == 0  # a zero-probability token is never drawn


def test_a_steppers_copy_of_the_stack_is_called_without_nn_modules_dispatch(monkeypatch):
    # Weights: the copy's modules are called as their forward (called_as_forward), not through nn.Module.__call__ (its
    # hooks and tracing state: about a quarter of a decoded token's Python calls at the demo shape); the model's own
    # modules keep it, as the control shows
    model = tiny()
    called, call = [], torch.nn.Module.__call__

    def counted(self, *args, **kwargs):
        called.append(type(self).__name__)
        return call(self, *args, **kwargs)
    monkeypatch.setattr(torch.nn.Module, '__call__', counted)
    x = tokens(B=1, n=4)
    with torch.no_grad():
        model(x)
        assert {'Block', 'CausalSelfAttention', 'MLP'} <= set(called)  # (the count sees the model's own modules)
        stepper, cache = decoder.Stepper(model), new_cache(model, 1)
        decode(model, x[:, :3], cache, stepper=stepper)
        called.clear()
        decode(model, x[:, 3:], cache, stepper=stepper)
    assert not {'Block', 'CausalSelfAttention', 'MLP', 'Linear', 'RMSNorm'} & set(called), called


def test_a_reused_stepper_keeps_its_cache_and_decodes_the_same_text():
    # sample.py and gpu_check.py hand generate one Stepper for every call: the weights are cast, the
    # loop compiled and the KV cache allocated once (a CUDA graph recorded on the cache then replays
    # in the next call instead of recording anew), and a call starts from an empty cache
    model = tiny(init_std=0.5)
    prompt = tokens(B=1, n=5)
    alone, _, _ = generate(model, prompt, 2 * T, top_k=1)  # (past block_size: a window restart too)
    stepper = decoder.Stepper(model)
    first, _, _ = generate(model, prompt, 2 * T, top_k=1, stepper=stepper)
    held = stepper.held.all.data_ptr()
    second, _, _ = generate(model, prompt, 2 * T, top_k=1, stepper=stepper)
    assert stepper.held.all.data_ptr() == held
    assert torch.equal(first, alone) and torch.equal(second, alone)
    generate(model, tokens(B=2, n=5), 3, top_k=1, stepper=stepper)  # another batch size: a cache of its own
    assert stepper.held.all.shape[3] == 2


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


def test_a_windowed_model_is_refused_by_the_cache_decoder_in_one_line():
    # the cache's attention reads every cached token, a windowed model's reads the last w: refused,
    # not decoded wrong (beyond.sample and eval_decode say it as their one line)
    shape = dict(vocab_size=64, block_size=16, n_layer=1, n_head=2, n_embd=16, dropout=0.0)
    with pytest.raises(ValueError, match=r'window > 0\): sample it with sample.py'):
        decoder.Stepper(FieldGPT(FieldGPTConfig(**shape, window=4)))
    decoder.Stepper(FieldGPT(FieldGPTConfig(**shape)))  # (window 0: the paper's attention, decoded)
    decoder.Stepper(LoopedGPT(LoopedGPTConfig(**shape)))


def test_a_new_cache_holds_keys_and_values_in_the_dtype_they_are_computed_in():
    model = tiny()
    assert new_cache(model, 2).all.dtype == torch.float32
    with torch.autocast('cpu', dtype=torch.bfloat16):  # autocast's dtype, not the float32 weights'
        cache = new_cache(model, 2)
    assert cache.all.dtype == torch.bfloat16 and cache.all.shape == (K, 2, 2, 2, 2, T, D // 2)
    assert new_cache(tiny().to(torch.bfloat16), 1, n_loops=1).all.dtype == torch.bfloat16  # bf16 weights' own


def test_a_steppers_copy_shares_the_models_weights_in_their_dtype_and_reads_gate_and_up_as_one_matrix():
    # in the model's dtype the copy holds the model's own parameters (no second copy of the weights); cast, they
    # are constants (no gradient); each module reads its submodules and weights as plain attributes; each MLP
    # holds w_gate and w_up side by side, the one matmul a decoded token makes
    model = tiny()
    same = decoder.Weights(model, torch.float32, static=False)
    for mine, theirs in zip(same.blocks, model.transformer.h):
        assert mine.attn.c_attn.weight is theirs.attn.c_attn.weight and mine.mlp.w_down.weight is theirs.mlp.w_down.weight
        assert torch.equal(mine.mlp.gate_up, torch.cat([theirs.mlp.w_gate.weight, theirs.mlp.w_up.weight]))
        assert {'attn', 'mlp', 'ln_1', 'ln_2'} <= vars(mine).keys() and 'weight' in vars(mine.attn.c_attn)
    cast = decoder.Weights(model, torch.bfloat16, static=False)
    linears = [p for p in cast.blocks.parameters() if p.dtype == torch.bfloat16]
    assert len(linears) == 2 * 5 and not any(p.requires_grad for p in linears)  # (2 layers x 5 matrices)


@pytest.mark.parametrize('interloop_norm', [False, True])
def test_a_projected_stand_in_is_each_layers_key_and_value_of_the_state_with_the_layers_own_norm(interloop_norm):
    """Stepper.project: each layer's key and value of h as the layer would see it in the next loop (after the
    inter-loop norm, if any), through that layer's input norm, its eps included (0.5 here: far from the default)."""
    model = tiny(readout='raw', init_std=0.1, interloop_norm=interloop_norm).eval()
    for m in model.modules():
        if isinstance(m, torch.nn.RMSNorm):
            m.eps = 0.5
    h = 0.3 * torch.randn(2, 5, D, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        got = decoder.Stepper(model).project(h)
        x = model.loop_input(h, 1, None)
        want = []
        for b in model.transformer.h:
            kv = F.linear(b.ln_1(x), b.attn.c_attn.weight[D:]).view(2, 5, 2, 2, D // 2)  # (B, T, k|v, nh, hs)
            want.append(kv.permute(2, 0, 3, 1, 4))  # (2, B, nh, T, hs)
    assert torch.allclose(got, torch.stack(want), atol=1e-5)


def test_stand_ins_fill_every_later_loop_of_the_stopped_tokens_only():
    """fill_stand_ins: the stand-ins of the tokens at t0.. that stopped after loop `loop` go into every later loop's
    slots, cast to the cache's dtype; with stopped given, only those tokens' slots change (None: every token's)."""
    from types import SimpleNamespace
    K, L, B, nh, T_max, hs, T, t0, loop = 4, 2, 2, 2, 6, 3, 2, 1, 1
    before = torch.randn(K, L, 2, B, nh, T_max, hs, generator=torch.Generator().manual_seed(0)).bfloat16()
    src = torch.randn(L, 2, B, nh, T, hs, generator=torch.Generator().manual_seed(1))
    stopped = torch.tensor([[True, False], [False, True]])  # (B, T)
    cache = SimpleNamespace(all=before.clone())
    decoder.fill_stand_ins(cache, src, t0, loop, stopped)
    for b in range(B):
        for t in range(T):
            want = src[:, :, b, :, t].bfloat16() if stopped[b, t] else before[loop + 1:, :, :, b, :, t0 + t]
            assert torch.equal(cache.all[loop + 1:, :, :, b, :, t0 + t], want.expand_as(cache.all[loop + 1:, :, :, b, :, t0 + t]))
    assert torch.equal(cache.all[:loop + 1], before[:loop + 1])  # the loops that ran keep their own
    keep = torch.ones(T_max, dtype=torch.bool)
    keep[t0:t0 + T] = False
    assert torch.equal(cache.all[..., keep, :], before[..., keep, :])  # other positions untouched
    cache = SimpleNamespace(all=before.clone())
    decoder.fill_stand_ins(cache, src, t0, loop)  # every token's
    assert torch.equal(cache.all[loop + 1:, ..., t0:t0 + T, :], src.bfloat16().expand(K - loop - 1, *src.shape))


def test_a_stepper_casts_its_weights_when_made_in_the_precision_of_the_context_it_is_made_in():
    # "cast now, in the precision of the caller's context": a Stepper made under bf16 autocast holds the bf16 copy of
    # the stack's matrices before its first token (a timed decode that makes its Stepper first casts before the
    # clock); one made outside autocast holds the model's own precision's
    torch.manual_seed(0)
    model = LoopedGPT(LoopedGPTConfig(vocab_size=32, block_size=16, n_layer=1, n_head=2, n_embd=16, n_loops=2,
                                      dropout=0.0)).eval()
    with torch.autocast('cpu', dtype=torch.bfloat16):
        made = decoder.Stepper(model)
    assert list(made.cast) == [torch.bfloat16] and made.cast[torch.bfloat16].head.dtype == torch.bfloat16
    assert list(decoder.Stepper(model).cast) == [None]
