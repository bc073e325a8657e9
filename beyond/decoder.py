"""
Decoding a looped GPT: a static KV cache, per-token early exit that really skips loops (with
copied or recomputed stand-ins), and lossless speculative decoding with the model's own first
loops as the draft.

    python -c "import torch; from beyond.decoder import generate; from model import LoopedGPT, LoopedGPTConfig; \
m = LoopedGPT(LoopedGPTConfig(n_layer=2, n_embd=64, n_head=2, vocab_size=256, block_size=64)).eval(); \
print(generate(m, torch.zeros(1, 1, dtype=torch.long), 20, draft_loops=1, draft_tokens=3)[2])"

beyond/sample.py and eval_decode.py call this file; model.py knows nothing of it. The block is the
model's own (model.Block): the decoder runs its own copy of the model's shared stack, the weights
cast once, and hands each attention its KV cache (CausalSelfAttention's cache argument), the way
gpt-fast's Attention takes its cache. As in gpt-fast, the cache has a fixed shape (every step attends over all block_size positions with a mask), so one
compiled loop serves every token, loop and depth (fixed K, exits, drafts); on CUDA it is a CUDA
graph. A looped model has K x n_layer attention sites, all in the cache: kv[loop], (n_layer, 2,
B, n_head, block_size, hs), the loop's keys and values.

Precision. The decoder computes what model.forward computes, under autocast too, since it runs
the same block: the residual stream stays float32 and only the matmuls run in bf16, attention
follows the model's CPU rule, and the weights are cast once per Stepper, not at every token
(gpt-fast casts them at load).

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

import functools
from copy import deepcopy

import torch
import torch.nn as nn
from torch.nn import functional as F

from beyond import exits
from model import MLP
from sample import next_token_probs  # the plain sampler's distribution (temperature, top_k)

STAND_INS = ('copy', 'project')
# (a sliding window is the model's attention mask, which the cache's attention does not apply)
WINDOWED = ("the KV-cache decoder attends over every cached token and this model's attention has a window "
            "(window > 0): sample it with sample.py, which runs model.forward")


def draw(probs):
    """One draw from each row of probs (..., vocab) -> (..., 1): the exponential race, argmax of p_i / E_i with
    E_i ~ Exp(1), which picks i with probability p_i / sum(p) exactly, and costs a few elementwise ops
    (torch.multinomial, the plain sampler's, was a tenth of a cached decoding step on a CPU)."""
    return (probs / torch.empty_like(probs).exponential_()).argmax(-1, keepdim=True)


def windowed(model):
    """Whether the model's attention has a window (beyond/additions.py's window > 0)."""
    return getattr(model.config, 'window', 0) > 0


def compute_dtype(model, device_type):
    """The dtype the matmuls run in: autocast's where it is on, else the weights' own."""
    if torch.is_autocast_enabled(device_type):
        return torch.get_autocast_dtype(device_type)
    return model.lm_head.weight.dtype


class KVCache:
    """Keys and values of every (loop, layer) site, for up to block_size positions, in one tensor
    `all`, (n_loops, n_layer, 2, B, n_head, block_size, hs), so that a stand-in is written into every
    later loop with one copy; kv[loop] is a view of one loop's, (n_layer, 2, B, n_head, block_size,
    hs), so that one compiled loop serves every loop (kv[loop][:, 0] its keys, [:, 1] its values).
    `length` positions hold cached tokens; rolling back (speculative decoding) is moving it back.
    Allocated once and never moved: a CUDA graph replays reads and writes at fixed addresses."""

    def __init__(self, config, batch_size, n_loops, device, dtype):
        shape = (n_loops, config.n_layer, 2, batch_size, config.n_head, config.block_size, config.n_embd // config.n_head)
        self.all = torch.zeros(shape, device=device, dtype=dtype)
        self.kv = list(self.all.unbind(0))
        self.n_loops, self.length = n_loops, 0
        # pragma: no mutate start (CUDA only: no test on a CPU can reach it; tests/mutants.py's docstring)
        if self.all.is_cuda:  # (reduce-overhead records a CUDA graph only if the inputs it mutates stay put)
            for kv in self.kv:
                torch._dynamo.mark_static_address(kv, guard=False)
        # pragma: no mutate end


def new_cache(model, batch_size, n_loops=None, device=None):
    """An empty KVCache in the dtype of the keys and values (autocast's, if on)."""
    device = device or model.lm_head.weight.device
    dtype = compute_dtype(model, torch.device(device).type)
    return KVCache(model.config, batch_size, n_loops or model.config.n_loops, device, dtype)


# -------------------------------------------------------------------------------------
# one loop on the cache: the model's blocks (the Stepper's copy) with each attention handed the cache

class CachedAttention:
    """One loop's cache kv (n_layer, 2, B, nh, block_size, hs) as the model's attention takes it (its cache argument),
    for T new tokens at t0, one layer after the other: each call writes the layer's new keys and values at
    t0..t0+T-1 (a stopped token's stay: its stand-in) and returns the keys and values of positions < t0+T with the
    queries' mask. None: one new token sees every cached one, several on an empty cache the causal mask; several on a
    filled cache (a verify pass): a causal mask offset by t0."""

    def __init__(self, kv, t0, T, running):
        self.kv, self.t0, self.T, self.t1, self.layer = kv, t0, T, t0 + T, 0
        self.keep = None if running is None else running[None, :, None, :, None]  # (1, B, 1, T, 1)
        self.mask = None  # made at the first layer that needs it

    def __call__(self, new):  # (2, B, nh, T, hs): the new keys and values
        site = self.kv[self.layer]  # (2, B, nh, block_size, hs)
        self.layer += 1
        if self.keep is not None:
            new = torch.where(self.keep, new, site[:, :, :, self.t0:self.t1])
        site[:, :, :, self.t0:self.t1] = new
        if self.T > 1 and self.t0 > 0 and self.mask is None:
            # -inf where key j > t0 + query i (additive: SDPA on the CPU took 20 us with it, 32 us with a bool mask)
            self.mask = torch.full((self.T, self.t1), float('-inf'), dtype=new.dtype, device=new.device).triu_(self.t0 + 1)
        return site[0, :, :, :self.t1], site[1, :, :, :self.t1], self.mask


class StaticCachedAttention:
    """CachedAttention in fixed shapes, for torch.compile: one token at position pos (a (1,) tensor),
    attending over all block_size slots with a mask. The new key and value are written with
    index_put_ on the cache input itself (into a slice of it, index_copy_ made inductor clone the
    whole site and copy it back: a site's worth of traffic per layer and loop)."""

    def __init__(self, kv, pos):
        self.kv, self.pos, self.layer = kv, pos, 0
        self.mask = (torch.arange(kv.size(-2), device=pos.device) <= pos)[None]  # (1, block_size)

    def __call__(self, new):  # (2, B, nh, 1, hs)
        layer = torch.full((1,), self.layer, dtype=torch.long, device=new.device)
        new = new[None, :, :, :, 0].to(self.kv.dtype)  # (1, 2, B, nh, hs)
        torch.ops.aten.index_put_(self.kv, [layer, None, None, None, self.pos], new)
        site = self.kv[self.layer]  # (2, B, nh, block_size, hs)
        self.layer += 1
        return site[0], site[1], self.mask


def run_loop(blocks, x, cache):
    """One loop, every layer of the shared stack (the Stepper's copy of the model's blocks), for the new tokens
    x (B, T, C) entering it; cache: this loop's CachedAttention (or its static twin)."""
    for block in blocks:
        x = block(x, cache)
    return x


def static_loop(blocks, x, pos, kv):
    """One loop for one token in fixed shapes, for torch.compile: the position is a tensor pos (1,)
    and kv the loop's cache (a view of the same shape at every loop, K and batch aside), so one
    graph serves every position, every loop and every K: fixed K, exits, drafts."""
    return run_loop(blocks, x, StaticCachedAttention(kv, pos))


def static_token(model, blocks, x, pos, kv, K):
    """A whole fixed-K token for torch.compile: the model's loop input and static_loop K times, one
    graph for this K where static_loop takes K calls of its one graph. Faster where each compiled call
    costs: on the CPU inductor, 1.51x a token at the demo shape and 1.07x at 44M (assets/speed/
    roofline.md); on a GPU one CUDA graph a token instead of K, with the launches between them."""
    e = x
    for k in range(K):
        x = static_loop(blocks, model.loop_input(x, k, e), pos, kv[k])
    return x


@functools.cache
def called_as_forward(cls, forward):
    """cls, its call forward (its forward when asked): without nn.Module.__call__'s dispatch (hooks, tracing state),
    five a block and about a quarter of the Python calls a decoded token made at the demo shape (cProfile). For the
    Stepper's copy (no hooks); one class for each (cls, forward), so a compiled step's guards on the modules' types
    hold across Steppers."""
    return type(cls.__name__, (cls,), {'__call__': forward})


class Weights:
    """What a Stepper runs with in one precision: its own copy of the model's shared stack (the same modules, so
    the same block), in evaluation mode, its matrices cast once to the matmuls' dtype (autocast re-casts a weight
    it is handed at every call unless it is a leaf parameter already in its dtype; in the model's own dtype the
    copy holds the model's parameters themselves); the LM head, cast; the 'project' matrix. The norms' gains stay
    in the stream's dtype, as their input (a bf16 gain on a float32 input runs RMSNorm unfused). The copy's
    submodules and parameters are plain attributes too, so a decoded token reads them without nn.Module's
    __getattr__ (about 17 calls a block: at the demo shape, a few percent of a token)."""

    def __init__(self, model, dtype, static):
        stack = model.transformer.h
        self.blocks = deepcopy(stack, memo={id(p): p for p in stack.parameters()}).eval()  # (the parameters shared)
        for m in self.blocks.modules():
            if isinstance(m, nn.Linear) and m.weight.dtype != dtype:
                m.weight = nn.Parameter(m.weight.detach().to(dtype), requires_grad=False)
            m.__dict__.update(m._modules, **m._parameters)  # (found before Module.__getattr__ is asked)
            if not (m._forward_hooks or m._forward_pre_hooks):  # (a hook, as the sandwich norm's: nn.Module's call)
                m.__class__ = called_as_forward(type(m), type(m).forward)
        fused = []  # (a decoded token's gate and up in one matmul, not two; after the loop above has cast them)
        for m in self.blocks.modules():
            if isinstance(m, MLP):
                m.gate_up = torch.cat([m.w_gate.weight, m.w_up.weight]).detach()
                fused.append(m.gate_up)
        self.head = model.lm_head.weight.detach().to(dtype)  # (the model's head would be cast at every call)
        # the 'project' stand-in in one matmul: rms_norm(x, g_l) @ W_l = rms_norm(x) @ (g_l W_l),
        # so every layer's key/value projection, its input norm's gain folded in, side by side
        # (C, n_layer x 2C) serves all layers at once (n_layer norms and matmuls were 0.1 ms a token)
        C = model.config.n_embd
        self.kv_proj = torch.cat([b.ln_1.weight[:, None] * b.attn.c_attn.weight[C:].t()
                                  for b in model.transformer.h], dim=1).detach().to(dtype)
        # pragma: no mutate start (CUDA only)
        if static:  # CUDA graphs: weights at fixed addresses, not copied into the graph at each replay
            for w in [self.head, self.kv_proj, *self.blocks.parameters(), *fused]:
                torch._dynamo.mark_static_address(w, guard=False)
        # pragma: no mutate end


class Stepper:
    """Runs loops on the cache: eagerly, or (compile=True) a single token's loops one compiled loop
    at a time (static_loop), one graph for every position, loop and depth, or, for a token that runs
    loops 1..K with nothing deciding between them (fixed K), all of them in one graph for that K
    (static_token); several tokens at once (a prefill, a verify pass) and tokens held back by exits
    run eagerly. On CUDA the compiled loop is a CUDA graph (mode='reduce-overhead'): the cache and
    the weights stay at fixed addresses and the position is a persistent tensor written in place.
    Sampling stays outside the graph, a
    choice not yet measured on a GPU: it runs once a token against K loops, exits read a number
    between loops anyway (a readout's or a state's confidence), temperature, top_k and the
    draft rule change per call, and graph-safe RNG would be one more thing to get right. The
    weights are cast once per precision they are used in (Weights)."""

    def __init__(self, model, compile=False, graphs=True):
        """compile: compile the one-token loop and the fixed-K token; graphs: as CUDA graphs where on
        CUDA (False: inductor's default mode, for comparing the two)."""
        if windowed(model):
            raise ValueError(WINDOWED)
        self.model = model
        self.device = model.lm_head.weight.device
        self.device_type = self.device.type
        graphs = compile and graphs and self.device.type == 'cuda'
        # one graph a shape, whole (a graph break is an error), as a CUDA graph where graphs: what these options
        # change a CPU cannot show (no graph break, no CUDA graph; the recompiles are counted by a compiling test)
        options = dict(fullgraph=True, dynamic=False, mode='reduce-overhead' if graphs else None)  # pragma: no mutate
        self.static = torch.compile(static_loop, **options) if compile else None
        self.token = torch.compile(static_token, **options) if compile else None
        self.graphs = graphs
        self.pos = torch.zeros(1, dtype=torch.long, device=self.device)  # the compiled step's position, set in place
        if graphs:  # pragma: no mutate (CUDA only)
            torch._dynamo.mark_static_address(self.pos, guard=False)  # pragma: no mutate
        self.cast = {}
        self.weights()  # (cast now, in the precision of the caller's context)
        self.held = None  # the KVCache generate reuses from call to call (cache)

    def cache(self, batch_size, n_loops):
        """An empty KVCache for generate, the same one (same addresses) at every call of that shape and
        precision: a CUDA graph recorded on it replays in the next call instead of recording anew."""
        dtype = compute_dtype(self.model, self.device_type)
        c = self.held
        if c is None or c.all.shape[:4] != (n_loops, self.model.config.n_layer, 2, batch_size) or c.all.dtype != dtype:
            c = self.held = new_cache(self.model, batch_size, n_loops, self.device)
        c.length = 0
        return c

    def weights(self):
        """The Weights for the precision in force now (autocast's or the model's), made once."""
        key = torch.get_autocast_dtype(self.device_type) if torch.is_autocast_enabled(self.device_type) else None
        w = self.cast.get(key)
        if w is None:
            dtype = compute_dtype(self.model, self.device_type)
            w = self.cast[key] = Weights(self.model, dtype, self.graphs)
        return w

    def loops(self, x, t0, cache, first, last, running=None, e=None):
        """Loops first+1..last (0-based first <= k < last) for the new tokens x (B, T, C) at t0.
        running (B, T) bool: a token that has stopped keeps what its slots hold (its stand-in).
        e: the tokens' embedding H_0, for a model that injects it into every loop (x itself when
        first is 0)."""
        w = self.weights()
        e = x if e is None and first == 0 else e
        static = self.static is not None and x.size(1) == 1 and running is None
        if static:
            self.pos.fill_(t0)
        if static and first == 0 and last > 1:  # a whole token of `last` loops: one graph (static_token)
            x = self.token(self.model, w.blocks, x, self.pos, cache.kv, last)
            return x.clone() if self.graphs else x  # pragma: no mutate (the clone: CUDA only)
        for k in range(first, last):
            x = self.model.loop_input(x, k, e)  # (the inter-loop norm, damping, injection, where the model has them)
            if static:
                x = self.static(w.blocks, x, self.pos, cache.kv[k])
                # a CUDA graph's output is overwritten at its next replay (gpt-fast clones too)
                if self.graphs:  # pragma: no mutate (CUDA only)
                    x = x.clone()  # pragma: no mutate
            else:
                x = run_loop(w.blocks, x, CachedAttention(cache.kv[k], t0, x.size(1), running))
        return x

    def logits(self, h, last):
        """The LM head on the model's readout (forward's last step), the head already in the matmuls' dtype
        (autocast's cast of it, made once): the same numbers."""
        return F.linear(self.model.readout(h, last), self.weights().head)

    def project(self, h, e=None):
        """The 'project' stand-in of tokens with exit state h (B, T, C) (e: their embedding): each
        layer's key and value of h, as the layer would see it in the next loop (after the inter-loop
        norm, if any). Returns (n_layer, 2, B, n_head, T, hs), the layout of a loop's cache."""
        B, T, C = h.shape
        h = self.model.loop_input(h, 1, e)
        nh = self.model.config.n_head
        kv = F.rms_norm(h, (C,), None, self.model.transformer.h[0].ln_1.eps) @ self.weights().kv_proj  # (B, T, n_layer x 2C)
        return kv.view(B, T, -1, 2, nh, C // nh).permute(2, 3, 0, 4, 1, 5)


def fill_stand_ins(cache, src, t0, loop, stopped=None):
    """Tokens at positions t0.. that stopped after loop `loop` (0-based): write their stand-ins
    src (n_layer, 2, B, nh, T, hs) into every later loop's slots, in one copy (see the file's
    docstring). stopped (B, T) bool: only those tokens' (None: every token's)."""
    later = cache.all[loop + 1:, ..., t0:t0 + src.size(-2), :]  # (K - loop - 1, n_layer, 2, B, nh, T, hs)
    src = src.to(later.dtype)
    if stopped is not None:
        src = torch.where(stopped[None, None, :, None, :, None], src, later)
    later.copy_(src)  # (broadcast over the later loops)


def stand_ins(stepper, cache, h, t0, loop, stand_in, e=None):
    """The stand-ins of the tokens at t0.. with state h (B, T, C) after loop `loop` (e: their
    embedding): this loop's own keys and values ('copy') or their projection ('project')."""
    if stand_in == 'copy':
        return cache.kv[loop][..., t0:t0 + h.size(1), :]
    return stepper.project(h, e)


# -------------------------------------------------------------------------------------
# decoding with per-token exits

@torch.no_grad()
def decode(model, idx, cache, exit_threshold=0.0, criterion='max_prob', stand_in='copy', stepper=None):
    """Runs new tokens idx (B, T) at positions cache.length .. cache.length + T - 1 through up
    to cache.n_loops loops, attending to the cached tokens and to each other causally, and
    caches their keys and values.

    Per-token early exit (0 < exit_threshold < 1): after each loop, a token whose confidence
    (criterion: a beyond/exits.py Criterion, or a registered name) exceeds the threshold stops there and is
    answered by that loop's readout, read as the model run with that many loops (an exit at
    loop 1 is exactly the 1-loop model). Its later loops never run; later tokens read its
    stand-in there. When every new token has stopped, the loop ends: a single decoded token
    that exits at loop j costs j loops. A state criterion (criterion.readout False) decides from
    the states, so a token pays for one readout, at its exit (or at the last loop), where a
    readout criterion pays for one at every loop it could stop after.

    Returns (logits (B, T, vocab) from each token's last loop, loops used (B, T) int)."""
    B, T = idx.size()
    K, t0 = cache.n_loops, cache.length
    if t0 + T > model.config.block_size:
        raise ValueError(f"positions up to {t0 + T} exceed block_size {model.config.block_size}")
    stepper = stepper or Stepper(model)
    h = e = model.embed(idx, t0)  # (B, T, C)
    exiting = 0 < exit_threshold < 1  # (no confidence exceeds 1: nothing could stop)
    criterion = exits.get(criterion)
    free = not criterion.readout
    loops = torch.full((B, T), K, dtype=torch.long, device=idx.device)
    if not exiting:  # every loop at once (one compiled call, where compiled)
        out = stepper.logits(stepper.loops(h, t0, cache, 0, K), last=True)
        cache.length = t0 + T
        return out, loops
    if B * T == 1:  # one token (a decoding step): one number decides, nothing to mask
        prev = None
        for k in range(K):
            before, h = h, stepper.loops(h, t0, cache, k, k + 1, e=e)
            if k == K - 1:
                out = stepper.logits(h, last=True)
                break
            out = None if free else stepper.logits(h, last=True)  # the token as the model run with k+1 loops
            # (compared as a tensor, in its dtype, exactly as the many-token path below compares)
            if bool(criterion(h, before, out, prev) > exit_threshold):
                out = stepper.logits(h, last=True) if free else out  # (readout-free: the one readout, at the exit)
                fill_stand_ins(cache, stand_ins(stepper, cache, h, t0, k, stand_in, e), t0, k)
                loops.fill_(k + 1)
                break
            prev = out
        cache.length = t0 + 1
        return out, loops
    logits, prev = None, None
    running, some_stopped, n_running = torch.ones(B, T, dtype=torch.bool, device=idx.device), False, B * T
    for k in range(K):
        x = stepper.loops(h, t0, cache, k, k + 1, running if some_stopped else None, e)
        before, h = h, (torch.where(running[..., None], x, h) if some_stopped else x)  # stopped tokens stay put
        if k == K - 1:
            continue
        out = None if free else stepper.logits(h, last=True)  # (B, T, vocab): each token as the model run with k+1 loops
        stop = running & (criterion(h, before, out, prev) > exit_threshold)
        prev = out
        running = running & ~stop
        n_before, n_running = n_running, int(running.sum())  # the host must know: skipping work is the point
        if n_running < n_before:  # some stopped here: read them out, write their stand-ins
            out = stepper.logits(h, last=True) if out is None else out
            logits = out if logits is None else torch.where(stop[..., None], out, logits)
            loops = torch.where(stop, k + 1, loops)
            fill_stand_ins(cache, stand_ins(stepper, cache, h, t0, k, stand_in, e), t0, k, stop)
            some_stopped = True
        if n_running == 0:  # every new token has stopped: later loops read stand-ins
            break
    else:  # the tokens still running are answered by the last loop
        out = stepper.logits(h, last=True)
        logits = out if logits is None else torch.where(running[..., None], out, logits)
    cache.length = t0 + T
    return logits, loops


# -------------------------------------------------------------------------------------
# sampling, fixed depth or speculative

def residual(p, q):
    """Where the token at a rejected draft comes from: norm(max(p - q, 0)), the part of the
    target p that the draft q under-covers (tests swap in a wrong rule to see the test fail)."""
    return (p - q).clamp_min(0)


def accept_drafts(p, q, drafts):
    """The speculative-sampling rule. p (n+1, V): the target's distributions at the n drafted
    positions and one more; q (n, V): the draft's; drafts (n,) the drafted tokens. Accept draft
    i with probability min(1, p_i(x)/q_i(x)); at the first rejection, sample from
    norm(max(p_i - q_i, 0)) instead and stop; if all are accepted, one more token from p_n.
    The tokens emitted are distributed exactly as sampling from p one at a time. With one-hot
    distributions (top_k=1) this is greedy: a draft is kept while it is the target's argmax.
    Everything is computed on p's device for every position at once, so the host reads one
    number, where the first rejection is. Returns (emitted tokens (m,) long, drafts accepted)."""
    n = drafts.numel()
    if n == 0:
        return draw(p[0]), 0
    rows = torch.arange(n, device=p.device)
    rejected = torch.rand(n, device=p.device) * q[rows, drafts] >= p[rows, drafts]  # keep where u < p/q (no division)
    r = residual(p[:n], q)  # (n, V)
    fix = torch.where(r.sum(-1) > 0, draw(r)[:, 0], drafts)  # (n,) (a zero residual: p = q, nothing to fix)
    first = torch.where(rejected.any(), rejected.int().argmax(), n)  # (argmax: the first rejection)
    i = int(first)  # the one read
    if i < n:
        return torch.cat([drafts[:i], fix[i:i + 1]]), i
    return torch.cat([drafts, draw(p[n])]), n


@torch.no_grad()
def speculative_pass(model, last, cache, j, g, temperature, top_k, draft_stop, criterion, stepper):
    """One pass on a batch-1 cache: `last` (1, 1) is the newest token, not yet run. Draft up to
    g tokens with loops 1..j, one at a time (stopping early at a draft whose loop-j confidence is
    below draft_stop); then loops j+1..K over the newest token and every draft at once; accept.
    Returns (emitted tokens (1, m), drafted, accepted)."""
    t = cache.length
    K = cache.n_loops
    states, embeddings, qs, drafts = [], [], [], []
    tok = last
    criterion = exits.get(criterion)
    for i in range(g + 1):
        e = h = model.embed(tok, t + i)
        before, prev = h, None
        if draft_stop > 0 and criterion.previous:  # the state of loop j-1 too, or its readout
            before = stepper.loops(h, t + i, cache, 0, j - 1)  # (j = 1: the embedding)
            prev = stepper.logits(before, last=True) if criterion.readout and j > 1 else None
            h = stepper.loops(before, t + i, cache, j - 1, j, e=e)
        else:
            h = stepper.loops(h, t + i, cache, 0, j)
        states.append(h)
        embeddings.append(e)
        if i == g:
            break
        logits = stepper.logits(h, last=True)  # (1, 1, vocab): the j-loop model's next token
        if draft_stop > 0 and float(criterion(h, before, logits, prev)) < draft_stop:
            break  # not sure enough to draft: the verify pass gives this position's token
        logits = logits[0]
        q = next_token_probs(logits[0], temperature, top_k)
        qs.append(q)
        tok = draw(q)[None]  # (1, 1)
        drafts.append(tok[0, 0])
    n = len(drafts)
    h = torch.cat(states, dim=1)  # (1, n+1, C): the newest token and the drafts after loop j
    h = stepper.loops(h, t, cache, j, K, e=torch.cat(embeddings, dim=1))
    p = next_token_probs(stepper.logits(h, last=True)[0], temperature, top_k)  # (n+1, vocab)
    emitted, accepted = accept_drafts(p, torch.stack(qs) if qs else p[:0],
                                      torch.stack(drafts) if drafts else torch.zeros(0, dtype=torch.long, device=p.device))
    cache.length = t + len(emitted)  # the newest token and the accepted drafts stay cached
    return emitted[None], n, accepted


@torch.inference_mode()  # (no autograd bookkeeping at all: 12% faster than no_grad, decoding on a CPU)
def generate(model, idx, max_new_tokens, temperature=1.0, top_k=None, n_loops=None, kv_cache=True,
             exit_threshold=0.0, criterion='max_prob', stand_in='copy', draft_loops=0, draft_tokens=1,
             draft_stop=0.0, compile=False, stepper=None):
    """Samples max_new_tokens after idx (B, T), as nanoGPT's generate, at any depth K, with
    per-token early exit (decode) or speculative decoding (draft_loops = j >= 1: batch 1 only).
    Returns (idx with the new tokens, loops used per new token (B, new), stats): stats counts
    the speculative passes, drafted and accepted tokens.

    The context is a window of the last tokens, as in nanoGPT, but it cannot slide one token at
    a time: positions are learned and absolute, so every cached key would have to move. When the
    window is full it restarts from its last 3/4 (one prefill) and grows again. A speculative
    pass drafts only as far as the window allows, so every token is predicted from the same
    context as without speculation. kv_cache=False recomputes the whole window at every step
    through the same decode: the same windows and exits, so greedy text is the same.
    stepper: a Stepper to reuse (its cast weights, compiled loop and cache) across calls, as
    beyond/sample.py does for its samples; default: a new one (with compile)."""
    K = n_loops or model.config.n_loops
    bs = model.config.block_size
    keep = max(1, bs - bs // 4)
    window = max(0, idx.size(1) - keep) if idx.size(1) > bs else 0  # where the context starts
    stepper = stepper or Stepper(model, compile)
    cache = stepper.cache(idx.size(0), K)  # once: a restart refills it in place
    used, stats = [], dict(passes=0, drafted=0, accepted=0)
    while len(used) < max_new_tokens:
        if idx.size(1) - window > bs:
            window = idx.size(1) - keep  # the window would pass block_size: restart from its last 3/4
            cache.length = 0
        remaining = max_new_tokens - len(used)
        if cache.length and kv_cache and draft_loops:
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
        if not cache.length or not kv_cache:  # a (re)fill: the whole window in one pass
            cache.length = 0  # (what lies past the length is never read)
            logits, loops = decode(model, idx[:, window:], cache, exit_threshold, criterion, stand_in, stepper)
        else:  # one token, attending to the cache
            logits, loops = decode(model, idx[:, -1:], cache, exit_threshold, criterion, stand_in, stepper)
        idx_next = draw(next_token_probs(logits[:, -1, :], temperature, top_k))
        idx = torch.cat((idx, idx_next), dim=1)
        used.append(loops[:, -1])
    loops = torch.stack(used, dim=1) if used else torch.zeros(idx.size(0), 0, dtype=torch.long, device=idx.device)
    return idx, loops, stats
