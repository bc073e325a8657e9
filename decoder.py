"""
Decoding a looped GPT: a static KV cache, per-token early exit that really skips loops (with
copied or recomputed stand-ins), and lossless speculative decoding with the model's own first
loops as the draft.

    python -c "import torch, decoder; from model import LoopedGPT, LoopedGPTConfig; \
m = LoopedGPT(LoopedGPTConfig(n_layer=2, n_embd=64, n_head=2, vocab_size=256, block_size=64)).eval(); \
print(decoder.generate(m, torch.zeros(1, 1, dtype=torch.long), 20, draft_loops=1, draft_tokens=3)[2])"

sample.py and eval_depth.py call this file; model.py knows nothing of it. As in gpt-fast, the
cache has a fixed shape (every step attends over all block_size positions with a mask), so one
compiled step serves every token, loop and layer. A looped model has K x n_layer attention
sites, all in the cache: keys[loop] and values[loop], each (n_layer, B, n_head, block_size, hs).

Exits. A token that stops at loop j is never run through loops j+1..K, but later tokens still
attend to it there, through a stand-in key/value at each later (loop, layer):
  'copy'    its key/value at loop j, same layer (recurrent-depth decoders do this). A whole
            loop stale at layer 1: loop j+1's layer 1 reads its state after loop j, but the
            copy was made from its state before loop j.
  'project' what each layer would compute if its state stayed H_j: layer l's input norm and
            key/value projection applied to H_j (CALM's state propagation). The weights are
            shared across loops, so n_layer projections serve every later loop. Layer 1 of
            loop j+1 is then exact, and a model trained with exit_train sees exactly this.

Speculative decoding (draft_loops = j < K, draft_tokens = g). The first j loops of the model
are the j-loop model, and they compute exactly the keys and values the K-loop model needs at
those loops. A pass drafts up to g tokens one at a time with j loops, then runs loops j+1..K
over all of them at once (the verify pass) and accepts them by the speculative-sampling rule
(Leviathan et al. 2023, Chen et al. 2023); the rejected ones are dropped from the cache by
moving its length back. Nothing is recomputed and no stand-in is read: the output is
distributed exactly as the K-loop model's.
"""

import math

import torch
from torch.nn import functional as F

EXIT_CRITERIA = ('max_prob', 'entropy', 'converge')
STAND_INS = ('copy', 'project')


def exit_confidence(logits, criterion, prev=None):
    """How sure a readout is, in [0, 1], from its logits (..., vocab). An exit stops where it
    exceeds a threshold, so thresholds mean the same for every criterion.
    'max_prob'  the top probability.
    'entropy'   1 - H(p) / ln(vocab).
    'converge'  exp(-KL(p_k || p_{k-1})): 1 when this loop's readout equals the previous loop's
                (prev, the logits of loop k-1), as recurrent-depth decoders stop when the
                prediction stops changing. At loop 1 (prev None) there is nothing to compare: 0."""
    if criterion == 'max_prob':
        return F.softmax(logits.float(), dim=-1).amax(-1)
    if criterion == 'entropy':
        logp = F.log_softmax(logits.float(), dim=-1)
        return 1 + (logp.exp() * logp).sum(-1) / math.log(logits.size(-1))
    if criterion == 'converge':
        if prev is None:
            return torch.zeros(logits.shape[:-1], device=logits.device)
        logp, logq = F.log_softmax(logits.float(), dim=-1), F.log_softmax(prev.float(), dim=-1)
        kl = (logp.exp() * (logp - logq)).sum(-1).clamp_min(0)
        return torch.exp(-kl)
    raise ValueError(f"unknown exit criterion {criterion!r}: use {', '.join(EXIT_CRITERIA)}")


class KVCache:
    """Keys and values of every (loop, layer) site, for up to block_size positions: keys[loop]
    and values[loop] are (n_layer, B, n_head, block_size, hs), separate tensors so that one
    compiled loop step serves every loop. `length` positions hold cached tokens; rolling back
    (speculative decoding) is only moving it back."""

    def __init__(self, config, batch_size, n_loops, device, dtype):
        shape = (config.n_layer, batch_size, config.n_head, config.block_size, config.n_embd // config.n_head)
        self.keys = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(n_loops)]
        self.values = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(n_loops)]
        self.n_loops, self.length = n_loops, 0
        self.slots = torch.arange(config.block_size, device=device)  # (block_size,)


def new_cache(model, batch_size, n_loops=None, device=None):
    """An empty KVCache in the dtype of the keys and values (autocast's, if on)."""
    device = device or model.lm_head.weight.device
    device_type = torch.device(device).type
    dtype = torch.get_autocast_dtype(device_type) if torch.is_autocast_enabled(device_type) \
        else model.lm_head.weight.dtype
    return KVCache(model.config, batch_size, n_loops or model.config.n_loops, device, dtype)


# -------------------------------------------------------------------------------------
# one loop on the cache

def stack_weights(model):
    """The shared stack's weights as plain tensors, one tuple per layer, read once: a decoding
    step then makes no nn.Module calls (their Python overhead was a large part of a step)."""
    return [(b.ln_1.weight, b.ln_1.eps, b.attn.c_attn.weight, b.attn.c_proj.weight, b.ln_2.weight, b.ln_2.eps,
             b.mlp.w_gate.weight, b.mlp.w_up.weight, b.mlp.w_down.weight) for b in model.transformer.h]


def _block(x, w, nh, attend):
    """One pre-norm block, written out with the layer's weights w; attend(q, k, v) -> (B, nh, T, hs)
    stores the new keys/values and attends over the cache."""
    ln1, eps1, w_qkv, w_proj, ln2, eps2, w_gate, w_up, w_down = w
    B, T, C = x.shape
    qkv = F.linear(F.rms_norm(x, (C,), ln1, eps1), w_qkv).view(B, T, 3, nh, C // nh)
    q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each (B, nh, T, hs)
    x = x + F.linear(attend(q, k, v).transpose(1, 2).reshape(B, T, C), w_proj)
    a = F.rms_norm(x, (C,), ln2, eps2)
    return x + F.linear(F.silu(F.linear(a, w_gate)) * F.linear(a, w_up), w_down)


def run_loop(layers, nh, x, t0, keys, values, running=None):
    """One loop, every layer of the shared stack, for T new tokens at positions t0..t0+T-1, each
    attending to the cached positions up to its own (a causal mask offset by the cache). x: (B, T, C)
    the state entering the loop; keys, values: this loop's cache (n_layer, B, n_head, block_size, hs),
    written at t0..t0+T-1. running (B, T) bool: a token that has stopped keeps what its slots hold
    (its stand-in) and its output is not used. Eager: attends over the filled part of the cache."""
    T = x.size(1)
    t1 = t0 + T
    # one new token sees every cached one; several on an empty cache, the plain causal mask; several
    # on a filled cache (a verify pass), a causal mask offset by t0
    mask = None if T == 1 or t0 == 0 else \
        torch.ones(T, t1, dtype=torch.bool, device=x.device).tril(diagonal=t0)
    for layer, w in enumerate(layers):
        def attend(q, k, v):
            kc, vc = keys[layer], values[layer]
            if running is not None:
                keep = running[:, None, :, None]  # (B, 1, T, 1)
                k, v = torch.where(keep, k, kc[:, :, t0:t1]), torch.where(keep, v, vc[:, :, t0:t1])
            kc[:, :, t0:t1] = k
            vc[:, :, t0:t1] = v
            return F.scaled_dot_product_attention(q, kc[:, :, :t1].to(q.dtype), vc[:, :, :t1].to(q.dtype),
                                                  attn_mask=mask, is_causal=T > 1 and t0 == 0)
        x = _block(x, w, nh, attend)
    return x


def static_loop(layers, nh, x, pos, slots, keys, values):
    """run_loop for one token in fixed shapes, for torch.compile: the position is a tensor pos (1,),
    and attention runs over all block_size slots with a mask, so one graph serves every position
    and, each loop's cache being an argument of the same shape, every loop."""
    mask = slots[None, :] <= pos[:, None]  # (1, block_size)
    for layer, w in enumerate(layers):
        def attend(q, k, v):
            keys[layer].index_copy_(2, pos, k.to(keys[layer].dtype))
            values[layer].index_copy_(2, pos, v.to(values[layer].dtype))
            return F.scaled_dot_product_attention(q, keys[layer].to(q.dtype), values[layer].to(q.dtype), attn_mask=mask)
        x = _block(x, w, nh, attend)
    return x


class Stepper:
    """Runs loops on the cache: eagerly, or (compile=True) a single token's loop through one
    compiled graph (static_loop) that serves every loop and position; several tokens at once (a
    prefill, a verify pass) and tokens held back by exits run eagerly."""

    def __init__(self, model, compile=False):
        self.model, self.nh = model, model.config.n_head
        self.layers = stack_weights(model)
        self.static = torch.compile(static_loop, fullgraph=True, dynamic=False) if compile else None

    def loop(self, x, t0, cache, k, running=None):
        if k > 0 and self.model.interloop_norm is not None:
            x = self.model.interloop_norm(x)  # the scale-removing recurrence, before every loop but the first
        if self.static is not None and x.size(1) == 1 and running is None:
            pos = cache.slots[t0:t0 + 1]
            return self.static(self.layers, self.nh, x, pos, cache.slots, cache.keys[k], cache.values[k])
        return run_loop(self.layers, self.nh, x, t0, cache.keys[k], cache.values[k], running)


def embed(model, idx, t0):
    """Token and position embeddings of idx (B, T) at positions t0.. : H_0, (B, T, C)."""
    return model.transformer.wte.weight[idx] + model.transformer.wpe.weight[t0:t0 + idx.size(1)]


def fill_stand_ins(model, cache, h, pos, stopped, loop, stand_in):
    """Tokens `stopped` (B, T) stopped after loop `loop` (0-based) with state h (B, T, C):
    write their stand-ins into every later loop's slots at pos (see the file's docstring)."""
    K = cache.n_loops
    if loop + 1 >= K:
        return
    if stand_in == 'copy':
        k_src = cache.keys[loop].index_select(3, pos)  # (n_layer, B, nh, T, hs)
        v_src = cache.values[loop].index_select(3, pos)
    else:  # 'project': each layer's key/value of the exit state, as the layer would see it next loop
        x = model.interloop_norm(h) if model.interloop_norm is not None else h
        B, T, C = x.shape
        k_src, v_src = [], []
        for block in model.transformer.h:
            _, k, v = block.attn.c_attn(block.ln_1(x)).split(C, dim=2)
            k_src.append(k.view(B, T, block.attn.n_head, -1).transpose(1, 2))
            v_src.append(v.view(B, T, block.attn.n_head, -1).transpose(1, 2))
        k_src, v_src = torch.stack(k_src), torch.stack(v_src)
    sel = stopped[None, :, None, :, None]  # (1, B, 1, T, 1)
    for later in range(loop + 1, K):
        for store, src in ((cache.keys[later], k_src), (cache.values[later], v_src)):
            store.index_copy_(3, pos, torch.where(sel, src.to(store.dtype), store.index_select(3, pos)))


# -------------------------------------------------------------------------------------
# decoding with per-token exits

@torch.no_grad()
def decode(model, idx, cache, exit_threshold=0.0, criterion='max_prob', stand_in='copy', stepper=None):
    """Runs new tokens idx (B, T) at positions cache.length .. cache.length + T - 1 through up
    to cache.n_loops loops, attending to the cached tokens and to each other causally, and
    caches their keys and values.

    Per-token early exit (0 < exit_threshold < 1): after each loop, a token whose readout is
    confident enough (exit_confidence > threshold) stops there and is answered by that readout,
    read as the model run with that many loops (an exit at loop 1 is exactly the 1-loop model).
    Its later loops never run; later tokens read its stand-in there. When every new token has
    stopped, the loop ends: a single decoded token that exits at loop j costs j loops.

    Returns (logits (B, T, vocab) from each token's last loop, loops used (B, T) int)."""
    B, T = idx.size()
    K, t0 = cache.n_loops, cache.length
    if t0 + T > model.config.block_size:
        raise ValueError(f"positions up to {t0 + T} exceed block_size {model.config.block_size}")
    stepper = stepper or Stepper(model)
    h = embed(model, idx, t0)  # (B, T, C)
    exits = 0 < exit_threshold < 1  # (no confidence exceeds 1: nothing could stop)
    logits, prev = None, None
    loops = torch.full((B, T), K, dtype=torch.long, device=idx.device)
    running, some_stopped = torch.ones(B, T, dtype=torch.bool, device=idx.device), False
    for k in range(K):
        x = stepper.loop(h, t0, cache, k, running if some_stopped else None)
        h = torch.where(running[..., None], x, h) if some_stopped else x  # stopped tokens stay put
        if k == K - 1 or not exits:
            continue
        out = model.logits(h, last=True)  # (B, T, vocab): each token as the model run with k+1 loops
        stop = running & (exit_confidence(out, criterion, prev) > exit_threshold)
        prev = out
        logits = out if logits is None else torch.where(stop[..., None], out, logits)
        loops = torch.where(stop, k + 1, loops)
        running = running & ~stop
        n_running = int(running.sum())  # the host must know: skipping work is the point
        if n_running < running.numel():
            fill_stand_ins(model, cache, h, torch.arange(t0, t0 + T, device=idx.device), stop, k, stand_in)
            some_stopped = True
        if n_running == 0:  # every new token has stopped: later loops read stand-ins
            break
    else:  # the tokens still running are answered by the last loop
        out = model.logits(h, last=True)
        logits = out if logits is None else torch.where(running[..., None], out, logits)
    cache.length = t0 + T
    return logits, loops


# -------------------------------------------------------------------------------------
# sampling, fixed depth or speculative

def next_token_probs(logits, temperature, top_k):
    """(..., vocab) logits -> the distribution sampled from, after temperature and top_k."""
    logits = logits.float() / max(temperature, 1e-8)
    if top_k is not None:
        v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
        logits = logits.masked_fill(logits < v[..., [-1]], -float('inf'))
    return F.softmax(logits, dim=-1)


def accept_drafts(p, q, drafts):
    """The speculative-sampling rule. p (n+1, V): the target's distributions at the n drafted
    positions and one more; q (n, V): the draft's; drafts (n,) the drafted tokens. Accept draft
    i with probability min(1, p_i(x)/q_i(x)); at the first rejection, sample from
    norm(max(p_i - q_i, 0)) instead and stop; if all are accepted, one more token from p_n.
    The tokens emitted are distributed exactly as sampling from p one at a time. With one-hot
    distributions (top_k=1) this is greedy: a draft is kept while it is the target's argmax.
    Returns (emitted tokens (m,) long, number of drafts accepted)."""
    n = drafts.numel()
    if n:
        px, qx = p[torch.arange(n), drafts], q[torch.arange(n), drafts]
        ok = torch.rand(n, device=p.device) * qx < px  # u < p/q, without dividing by q
        bad = (~ok).nonzero()
        if bad.numel():
            i = int(bad[0])
            residual = (p[i] - q[i]).clamp_min(0)
            fix = torch.multinomial(residual / residual.sum(), 1) if residual.sum() > 0 else drafts[i:i + 1]
            return torch.cat([drafts[:i], fix]), i
    return torch.cat([drafts, torch.multinomial(p[n], 1)]), n


@torch.no_grad()
def speculative_pass(model, last, cache, j, g, temperature, top_k, draft_stop, criterion, stepper):
    """One pass on a batch-1 cache: `last` (1, 1) is the newest token, not yet run. Draft up to
    g tokens with loops 1..j, one at a time (stopping early at a draft whose loop-j confidence is
    below draft_stop); then loops j+1..K over the newest token and every draft at once; accept.
    Returns (emitted tokens (1, m), drafted, accepted)."""
    t = cache.length
    K = cache.n_loops
    states, qs, drafts = [], [], []
    tok = last
    for i in range(g + 1):
        h, prev = embed(model, tok, t + i), None
        for k in range(j):
            h = stepper.loop(h, t + i, cache, k)
            if draft_stop > 0 and criterion == 'converge' and k == j - 2:
                prev = model.logits(h, last=True)
        states.append(h)
        if i == g:
            break
        logits = model.logits(h, last=True)[0]  # (1, vocab): the j-loop model's next token
        if draft_stop > 0 and float(exit_confidence(logits, criterion, prev[0] if prev is not None else None)) < draft_stop:
            break  # not sure enough to draft: the verify pass gives this position's token
        q = next_token_probs(logits[0], temperature, top_k)
        qs.append(q)
        tok = torch.multinomial(q, 1)[None]  # (1, 1)
        drafts.append(tok[0, 0])
    n = len(drafts)
    h = torch.cat(states, dim=1)  # (1, n+1, C): the newest token and the drafts after loop j
    for k in range(j, K):
        h = stepper.loop(h, t, cache, k)
    p = next_token_probs(model.logits(h, last=True)[0], temperature, top_k)  # (n+1, vocab)
    emitted, accepted = accept_drafts(p, torch.stack(qs) if qs else p[:0],
                                      torch.stack(drafts) if drafts else torch.zeros(0, dtype=torch.long, device=p.device))
    cache.length = t + len(emitted)  # the newest token and the accepted drafts stay cached
    return emitted[None], n, accepted


@torch.inference_mode()  # (no autograd bookkeeping at all: 12% faster than no_grad, decoding on a CPU)
def generate(model, idx, max_new_tokens, temperature=1.0, top_k=None, n_loops=None, kv_cache=True,
             exit_threshold=0.0, criterion='max_prob', stand_in='copy', draft_loops=0, draft_tokens=1,
             draft_stop=0.0, compile=False):
    """Samples max_new_tokens after idx (B, T), as nanoGPT's generate, at any depth K, with
    per-token early exit (decode) or speculative decoding (draft_loops = j >= 1: batch 1 only).
    Returns (idx with the new tokens, loops used per new token (B, new), stats): stats counts
    the speculative passes, drafted and accepted tokens.

    The context is a window of the last tokens, as in nanoGPT, but it cannot slide one token at
    a time: positions are learned and absolute, so every cached key would have to move. When the
    window is full it restarts from its last 3/4 (one prefill) and grows again. A speculative
    pass drafts only as far as the window allows, so every token is predicted from the same
    context as without speculation. kv_cache=False recomputes the whole window at every step
    through the same decode: the same windows and exits, so greedy text is the same."""
    K = n_loops or model.config.n_loops
    bs = model.config.block_size
    keep = max(1, bs - bs // 4)
    window = max(0, idx.size(1) - keep) if idx.size(1) > bs else 0  # where the context starts
    stepper = Stepper(model, compile)
    cache, used = None, []
    stats = dict(passes=0, drafted=0, accepted=0)
    while len(used) < max_new_tokens:
        if idx.size(1) - window > bs:
            window = idx.size(1) - keep  # the window would pass block_size: restart from its last 3/4
            cache = None
        remaining = max_new_tokens - len(used)
        if cache is not None and kv_cache and draft_loops:
            room = bs - 1 - cache.length  # drafts must stay inside the window (position < block_size)
            new, drafted, accepted = speculative_pass(model, idx[:, -1:], cache, draft_loops,
                                                      min(draft_tokens, room, remaining - 1), temperature, top_k,
                                                      draft_stop, criterion, stepper)
            stats['passes'] += 1
            stats['drafted'] += drafted
            stats['accepted'] += accepted
            idx = torch.cat((idx, new), dim=1)
            used += [torch.full((1,), K, device=idx.device)] * new.size(1)
            continue
        if cache is None or not kv_cache:  # a (re)fill: the whole window in one pass
            cache = new_cache(model, idx.size(0), K, idx.device)
            logits, loops = decode(model, idx[:, window:], cache, exit_threshold, criterion, stand_in, stepper)
        else:  # one token, attending to the cache
            logits, loops = decode(model, idx[:, -1:], cache, exit_threshold, criterion, stand_in, stepper)
        idx_next = torch.multinomial(next_token_probs(logits[:, -1, :], temperature, top_k), num_samples=1)
        idx = torch.cat((idx, idx_next), dim=1)
        used.append(loops[:, -1])
    loops = torch.stack(used, dim=1) if used else torch.zeros(idx.size(0), 0, dtype=torch.long)
    return idx, loops, stats
