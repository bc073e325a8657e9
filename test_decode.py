"""
Decoding: the KV cache gives the full forward's logits, and per-token early exit means what
it says (an exit at loop j costs j loops; later tokens read the exited token's stand-in).

    python -m pytest -q test_decode.py
"""

import math

import pytest
import torch
from torch.nn import functional as F

from model import LoopedGPT, LoopedGPTConfig, exit_confidence

V, T, D, K = 64, 16, 32, 3


def tiny(**kw):
    torch.manual_seed(0)
    args = dict(vocab_size=V, block_size=T, n_layer=2, n_head=2, n_embd=D, n_loops=K, dropout=0.0)
    return LoopedGPT(LoopedGPTConfig(**dict(args, **kw))).eval()


def tokens(B=2, n=T, seed=1):
    return torch.randint(0, V, (B, n), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize('readout', ['norm', 'raw', 'final_norm'])
@pytest.mark.parametrize('n_loops', [K, 1, 5])  # the trained K, and others
def test_cached_logits_equal_the_full_forward_at_every_step(readout, n_loops):
    model = tiny(readout=readout, interloop_norm=(readout == 'norm'))
    x = tokens()
    with torch.no_grad():
        cache = model.new_cache(2, n_loops)
        got, loops = model.decode(x[:, :5], cache)  # a prefill of 5 tokens ...
        assert torch.allclose(got, model(x[:, :5], n_loops=n_loops), atol=1e-4)
        assert (loops == n_loops).all()
        for t in range(5, T):  # ... then one token at a time
            got, _ = model.decode(x[:, t:t + 1], cache)
            want = model(x[:, :t + 1], n_loops=n_loops)[:, -1:]
            assert torch.allclose(got, want, atol=1e-4), t
    assert cache.length == T


def test_cached_greedy_text_equals_uncached_across_window_restarts():
    model = tiny(readout='final_norm', init_std=0.1)  # (the default init is sure of every token at loop 1)
    prompt = tokens(B=1, n=4)
    mixed = []
    for threshold in (0.0, 0.05, 0.1):
        kw = dict(max_new_tokens=3 * T, top_k=1, exit_threshold=threshold)  # past block_size: restarts
        cached, loops_c = model.generate(prompt, kv_cache=True, **kw)
        uncached, loops_u = model.generate(prompt, kv_cache=False, **kw)
        assert torch.equal(cached, uncached) and torch.equal(loops_c, loops_u), threshold
        assert cached.size(1) == 4 + 3 * T
        mixed.append(len(set(loops_c.flatten().tolist())) > 1)
    assert any(mixed)  # at some threshold, tokens exited at different loops


def test_an_always_firing_exit_decodes_exactly_like_one_loop():
    model = tiny(readout='final_norm')
    prompt = tokens(B=1, n=3)
    torch.manual_seed(5)
    fired, loops = model.generate(prompt, 2 * T, temperature=1.0, exit_threshold=1e-9)
    torch.manual_seed(5)
    one, _ = model.generate(prompt, 2 * T, temperature=1.0, n_loops=1)
    assert torch.equal(fired, one) and (loops == 1).all()


def test_a_never_firing_exit_decodes_exactly_like_fixed_k():
    model = tiny()
    prompt = tokens(B=1, n=3)
    torch.manual_seed(6)
    never, loops = model.generate(prompt, 2 * T, exit_threshold=1.0)  # no confidence exceeds 1
    torch.manual_seed(6)
    fixed, _ = model.generate(prompt, 2 * T)
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
        stopped_at = None
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
                xk = xk + block.mlp(block.ln_2(xk))
            h = xk
            out = model.logits(h, last=True)
            if k == K - 1 or exit_confidence(out, criterion) > threshold:
                stopped_at = k
                logits_out.append(out)
                loops_out.append(k + 1)
    return torch.stack(logits_out), torch.tensor(loops_out)


@pytest.mark.parametrize('criterion', ['max_prob', 'entropy'])
def test_the_causal_exit_equals_a_token_by_token_reference(criterion):
    model = tiny(readout='final_norm', interloop_norm=True)
    x = tokens(B=2, n=T)
    with torch.no_grad():
        h1 = model.logits(model.hidden_states(x, 1)[1], last=True)
        threshold = exit_confidence(h1, criterion).median().item()  # about half stop at loop 1
        want = [reference_causal_exit(model, row, threshold, criterion) for row in x]
        # the whole windows at once (as eval_depth.py scores them), two rows exiting differently
        got_logits, got_loops = model.decode(x, model.new_cache(2), threshold, criterion)
        # and one token at a time through the cache (as sample.py decodes)
        cache = model.new_cache(2)
        steps = [model.decode(x[:, t:t + 1], cache, threshold, criterion) for t in range(T)]
    step_logits, step_loops = torch.cat([s[0] for s in steps], 1), torch.cat([s[1] for s in steps], 1)
    for b, (want_logits, want_loops) in enumerate(want):
        assert torch.equal(got_loops[b], want_loops) and torch.equal(step_loops[b], want_loops)
        assert torch.allclose(got_logits[b], want_logits, atol=1e-4)
        assert torch.allclose(step_logits[b], want_logits, atol=1e-4)
    # stand-ins were read: some token ran deeper than an earlier token of its row had
    assert any(got_loops[b, t] > got_loops[b, :t].min() for b in range(2) for t in range(1, T))
    assert not torch.equal(got_loops[0], got_loops[1])  # the two rows exit differently


def test_generate_windows_use_every_position_and_keep_three_quarters(monkeypatch):
    model = tiny()
    calls = []
    decode = LoopedGPT.decode

    def spy(self, idx, cache, *args):
        calls.append((cache.length, idx.size(1)))
        return decode(self, idx, cache, *args)
    monkeypatch.setattr(LoopedGPT, 'decode', spy)
    model.generate(tokens(B=1, n=T), 3 * T, top_k=1)  # a prompt of exactly block_size tokens
    assert calls[0] == (0, T)  # it fits: no restart before the first token
    assert max(t0 + n for t0, n in calls) == T  # position block_size - 1 is used ...
    keep = T - T // 4
    refills = [n for t0, n in calls if t0 == 0][1:]
    assert refills and all(n == keep for n in refills)  # ... and each restart keeps the last 3/4
    assert len(calls) == 3 * T


def test_decode_refuses_several_tokens_on_a_filled_cache():
    model = tiny()
    cache = model.new_cache(1)
    with torch.no_grad():
        model.decode(tokens(B=1, n=4), cache)
        with pytest.raises(ValueError, match='empty cache'):
            model.decode(tokens(B=1, n=2), cache)


def test_decode_refuses_positions_past_the_block():
    model = tiny()
    cache = model.new_cache(1)
    with torch.no_grad():
        model.decode(tokens(B=1, n=T), cache)
        with pytest.raises(ValueError, match='block_size'):
            model.decode(tokens(B=1, n=1), cache)
