"""
A looped GPT: one shared stack of decoder blocks applied K times, read out after every loop.

    python -c "from model import LoopedGPT, LoopedGPTConfig; LoopedGPT(LoopedGPTConfig())"

H_k is the residual stream after loop k. It is read out (decoded to a next-token
distribution) and carried into loop k+1. The blind spot lives in `LoopedGPT.readout`:
an RMSNorm there makes every loop's cross-entropy blind to ||H_k||, while the residual
recurrence keeps growing it (Sharma & Vu 2026, "Dense Supervision Is Not Enough").

Everything the scripts need from the model is here, in one copy: the block's math (block(),
which training and beyond/decoder.py's cached decoding both run), the model and its loss
variants (every loop's CE through linear_ce.py, which never holds the full logits), the scale
clamp, the per-loop diagnostics (norms, radial gradient fraction, angular change, Lemma 2), the
checkpoint loader and the FLOPs estimate. What goes beyond the paper builds on it from beyond/
(exit-aware training is a subclass there); device, precision and data helpers live in
runtime.py and data.py. This file imports nothing from the scripts.
"""

import os
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn as nn
from torch.nn import functional as F

from linear_ce import linear_cross_entropy

READOUTS = ('norm', 'raw', 'final_norm', 'alpha')
LOSSES = ('perloop', 'terminal')
POSITIONS = ('learned', 'none')
SIZE = ('block_size', 'vocab_size', 'n_layer', 'n_head', 'n_embd', 'dropout', 'n_loops')  # the fields that size a model, not its mechanism


@dataclass
class LoopedGPTConfig:
    block_size: int = 256         # context length (tokens)
    vocab_size: int = 50257       # GPT-2 BPE; 256 for the byte-level tokenizer
    n_layer: int = 8              # blocks in the shared stack (applied n_loops times)
    n_head: int = 8               # attention heads (n_embd a multiple of it)
    n_embd: int = 512             # d, the width of the residual stream
    dropout: float = 0.1          # in [0, 1): on the attention probabilities, the MLP output and the embeddings
    n_loops: int = 4              # K, loops used in training (any K can be asked for at call time)
    readout: str = 'norm'         # 'norm' | 'raw' | 'final_norm' | 'alpha', see LoopedGPT.readout
    loss: str = 'perloop'         # 'perloop': mean CE over loops | 'terminal': last loop's CE
    norm_penalty: float = 0.0     # lambda of the norm penalty (0 = off; 0.01 in the paper's runs), see LoopedGPT.loss
    interloop_norm: bool = False  # RMSNorm on the state carried between loops
    # beyond the paper: the field's scale controls (docs/depth.md), each at its place below
    sandwich_norm: bool = False   # RMSNorm on each sublayer's output before it is added (Huginn, Ouro)
    inject: bool = False          # the embedding H_0 added to the input of every loop after the first
    damping: bool = False         # the carried state scaled by a learned sigmoid(a) < 1 between loops
    init_std: float = 0.0         # 0: PyTorch's default init, as the paper's released code; >0: N(0, init_std)
    exit_train: float = 0.0       # beyond the paper, exit-aware training: the fraction of tokens frozen after a
                                  # random loop (0 = off); beyond/exit_train.py's ExitTrainedGPT trains with it
    # beyond the paper: bounded work per loop, for tasks whose longer instances need more loops (docs/tasks.md)
    window: int = 0               # sliding-window attention: each token attends to itself and the w-1 tokens before it (0 = full causal)
    positions: str = 'learned'    # 'learned': absolute position embeddings (wpe) | 'none': none at all (NoPE), any length runs

    def __post_init__(self):
        for name, low, high in (('block_size', 1, None), ('vocab_size', 1, None), ('n_layer', 1, None),
                                ('n_head', 1, None), ('n_embd', 1, None), ('n_loops', 1, None), ('dropout', 0, 1),
                                ('norm_penalty', 0, None), ('init_std', 0, None), ('exit_train', 0, 1)):
            value = getattr(self, name)  # (high: excluded)
            if not (value >= low and (high is None or value < high)):
                why = ' (a negative lambda would reward large norms)' if name == 'norm_penalty' else ''
                raise ValueError(f"{name!r} must be {f'in [{low}, {high})' if high else f'>= {low}'}{why}; got {value!r}")
        if self.readout not in READOUTS:
            raise ValueError(f"'readout' must be one of {', '.join(READOUTS)}; got {self.readout!r}")
        if self.positions not in POSITIONS:
            raise ValueError(f"'positions' must be one of {', '.join(POSITIONS)}; got {self.positions!r}")
        if self.window < 0:
            raise ValueError(f"'window' must be >= 0 (0 = full causal attention); got {self.window!r}")
        if self.loss not in LOSSES:
            raise ValueError(f"'loss' must be one of {', '.join(LOSSES)}; got {self.loss!r}")
        if self.n_embd % self.n_head != 0:
            raise ValueError(f"n_embd ({self.n_embd}) must be a multiple of n_head ({self.n_head})")
        if self.exit_train > 0 and self.loss != 'perloop':
            raise ValueError("exit_train needs loss='perloop': a token that exits early is read out only at "
                             "its own loops, and terminal CE reads none of them")


# -------------------------------------------------------------------------------------
# the block: its math once, as a function of its weights; training (Block) and the decoder
# (beyond/decoder.py, with its weights cast once and its KV cache) both run it

class BlockWeights(NamedTuple):
    """One layer's weights as block() reads them, each (out, in) as nn.Linear keeps them."""
    ln_1: torch.Tensor            # (C,) the attention's input RMSNorm gain
    ln_2: torch.Tensor            # (C,) the MLP's input RMSNorm gain
    eps: object                   # the RMSNorms' eps (None: the dtype's own)
    qkv: torch.Tensor             # (3C, C) q, k and v at once
    proj: torch.Tensor            # (C, C) the attention's output projection
    gate_up: object               # SwiGLU's gate and up: a pair of (4C, C), or one (8C, C), both in one matmul
    down: torch.Tensor            # (C, 4C)
    post_attn: object = None      # (C,) sandwich norm: the gain of the RMSNorm on the attention's output (None: off)
    post_mlp: object = None       # (C,) and on the MLP's output


def attention(q, k, v, mask=None, is_causal=False, dropout_p=0.0):
    """Scaled dot-product attention, (B, nh, T, hs) each. Under autocast on a CPU it runs in float32:
    PyTorch's bf16 attention was the slower one there (assets/speed/attention.md; with AMX and dropout,
    as fast in a training step: assets/speed/roofline.md)."""
    if torch.is_autocast_enabled('cpu') and q.device.type == 'cpu':
        q, k, v = q.float(), k.float(), v.float()
        mask = mask.float() if mask is not None and mask.is_floating_point() else mask  # (an additive mask, too)
        with torch.autocast('cpu', enabled=False):
            return attention(q, k, v, mask, is_causal, dropout_p)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal, dropout_p=dropout_p)


def causal_attention(dropout_p, window=0):
    """attend for block(): the T tokens attend to each other causally, nothing cached. window w > 0: token
    t attends to t-w+1 .. t only, so a loop moves information at most w-1 positions and an input n tokens
    long needs about n/(w-1) loops to be read whole (DeepThinking's bounded work per iteration)."""
    if window <= 0:
        return lambda qkv: attention(qkv[0], qkv[1], qkv[2], is_causal=True, dropout_p=dropout_p)

    def attend(qkv):
        T = qkv.size(-2)
        t = torch.arange(T, device=qkv.device)
        offset = t[:, None] - t[None, :]  # (T, T): how far back key s sits from query t
        return attention(qkv[0], qkv[1], qkv[2], mask=(offset >= 0) & (offset < window), dropout_p=dropout_p)
    return attend


def add_product(x, a, w, dropout=0.0, post=None, eps=None):
    """x + dropout(a @ w.T), a residual update. The product runs in autocast's dtype where it is on and
    is added to the stream in the stream's dtype (float32). post: the sandwich norm's gain,
    x + RMSNorm(a @ w.T): every update has a bounded size (RMS the gain), however large the state
    (Huginn, Geiping et al. 2025; Ouro)."""
    y = F.linear(a, w)
    if post is not None:
        y = F.rms_norm(y, (y.size(-1),), post, eps)
    return x + (F.dropout(y, dropout) if dropout else y)


def swiglu(h, gate_up):
    """SwiGLU's hidden activation silu(h W_gate) * (h W_up), (N, C) -> (N, 4C)."""
    gate, up = (F.linear(h, w) for w in gate_up) if isinstance(gate_up, tuple) else F.linear(h, gate_up).chunk(2, -1)
    return F.silu(gate) * up


def block(x, w, n_head, attend, dropout=0.0):
    """One pre-norm block: x + attn(ln_1(x)), then x + mlp(ln_2(x)). x (B, T, C), the residual
    stream, is never normalized itself, so whatever scale it has is carried from loop to loop
    (the paper's activity lemma). w: the layer's BlockWeights. attend(qkv), qkv (3, B, nh, T, hs)
    -> (B, nh, T, hs): causal_attention, or the decoder's attention over its KV cache. dropout, in
    training: on the attention probabilities and the MLP's output, as in the paper's released layer
    (nanoGPT also drops the attention's projected output; the released code does not, nor do we)."""
    B, T, C = x.shape
    x = x.reshape(B * T, C)  # (B*T, C) rows
    qkv = F.linear(F.rms_norm(x, (C,), w.ln_1, w.eps), w.qkv)  # (B*T, 3C)
    y = attend(qkv.view(B, T, 3, n_head, C // n_head).permute(2, 0, 3, 1, 4))  # (B, nh, T, hs)
    x = add_product(x, y.transpose(1, 2).reshape(B * T, C), w.proj, post=w.post_attn, eps=w.eps)
    x = add_product(x, swiglu(F.rms_norm(x, (C,), w.ln_2, w.eps), w.gate_up), w.down, dropout, w.post_mlp, w.eps)
    return x.view(B, T, C)


class Block(nn.Module):
    # the parameters of one layer, named as in the checkpoints; the math is block()'s. SwiGLU's hidden
    # width is 4d with three matrices: the shape whose parameter count gives the paper's "44M" (d=512,
    # 8 layers) and "129M" (d=768, 12 layers) with its 20k vocabulary.

    def __init__(self, config):
        super().__init__()
        C, self.n_head, self.dropout, self.window = config.n_embd, config.n_head, config.dropout, config.window
        self.ln_1 = nn.RMSNorm(C)
        self.attn = nn.Module()  # (plain containers: the parameter names stay attn.c_attn.weight, mlp.w_up.weight, ...)
        self.attn.c_attn = nn.Linear(C, 3 * C, bias=False)  # q, k, v at once
        self.attn.c_proj = nn.Linear(C, C, bias=False)
        self.ln_2 = nn.RMSNorm(C)
        self.mlp = nn.Module()
        self.mlp.w_gate = nn.Linear(C, 4 * C, bias=False)
        self.mlp.w_up = nn.Linear(C, 4 * C, bias=False)
        self.mlp.w_down = nn.Linear(4 * C, C, bias=False)
        if config.sandwich_norm:  # the sublayers' output norms (Huginn's norm_2 and norm_4)
            self.attn.ln_out = nn.RMSNorm(C)
            self.mlp.ln_out = nn.RMSNorm(C)

    def weights(self):
        post = (self.attn.ln_out.weight, self.mlp.ln_out.weight) if hasattr(self.attn, 'ln_out') else (None, None)
        return BlockWeights(self.ln_1.weight, self.ln_2.weight, self.ln_1.eps, self.attn.c_attn.weight,
                            self.attn.c_proj.weight, (self.mlp.w_gate.weight, self.mlp.w_up.weight), self.mlp.w_down.weight,
                            *post)

    def forward(self, x):
        p = self.dropout if self.training else 0.0
        return block(x, self.weights(), self.n_head, causal_attention(p, self.window), dropout=p)


class LoopedGPT(nn.Module):
    config_class = LoopedGPTConfig  # its fields: train.py's model settings, the checkpoint's model_args
    # how readout_loss computes the CE: 'fused' (linear_ce.py) or 'plain' (F.cross_entropy). Another way to
    # compute the same loss, not another model, so it is in neither the config nor the checkpoint;
    # train.py sets it on the model from its loss_path setting (a constant to torch.compile)
    loss_path = 'fused'

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.vocab_size, config.n_embd),
            wpe=nn.Embedding(config.block_size, config.n_embd),
            h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),  # the one shared stack
        ))
        # the readout's RMSNorm; 'raw' and 'alpha' have none (an unused parameter would also trip DDP)
        self.readout_norm = nn.RMSNorm(config.n_embd) if config.readout in ('norm', 'final_norm') else None
        if config.readout == 'alpha':  # alpha = sigmoid(logit), 0.5 at init; s_ref = exp(log_s_ref), 1 at init
            self.alpha_logit = nn.Parameter(torch.zeros(()))
            self.log_s_ref = nn.Parameter(torch.zeros(()))
        self.interloop_norm = nn.RMSNorm(config.n_embd) if config.interloop_norm else None
        if config.damping:  # sigmoid(2) = 0.88 at init, as the released code's raw_alpha
            self.damping_logit = nn.Parameter(torch.tensor(2.0))
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tied: the head is the token embedding

        # Initialisation. Default: PyTorch's own (embeddings N(0,1), tied to the head; nn.Linear's
        # uniform init), as in the paper's released code. The absolute norms the paper reports
        # (tens at init for d=512, tens of thousands after drift) depend on it. It also means
        # the loss at init is far above ln(vocab): the N(0,1) tied embedding makes the model
        # predict its own input token with logits of order d. init_std > 0 gives nanoGPT-style
        # N(0, init_std) weights instead, with the loss at init close to ln(vocab).
        if config.init_std > 0:
            for name, p in self.named_parameters():
                if p.dim() == 2:
                    torch.nn.init.normal_(p, mean=0.0, std=config.init_std)

    # ---------------------------------------------------------------------------------
    # the loop

    @property
    def max_length(self):
        """The longest sequence the model reads: block_size with learned positions; None (any) without."""
        return self.config.block_size if self.config.positions == 'learned' else None

    def embed(self, idx, t0=0):
        """H_0, the state that enters loop 1: token plus position embeddings of idx (B, T) at
        positions t0.. (a decoder's new tokens sit after its cache), (B, T, C)."""
        T = idx.size(1)
        h = F.embedding(idx, self.transformer.wte.weight)  # (B, T, C)
        if self.max_length is not None:  # learned positions ('none', NoPE: only the causal mask tells them apart)
            if t0 + T > self.max_length:
                raise ValueError(f"sequence of length {t0 + T} exceeds block_size {self.config.block_size}")
            h = h + self.transformer.wpe.weight[t0:t0 + T]
        return F.dropout(h, self.config.dropout) if self.training else h  # (functional: no module calls a decoded token)

    def loop_input(self, h, k, e=None):
        """What loop k (1-based) starts from: H_{k-1} itself, or with the inter-loop norm, RMSNorm(H_{k-1})
        from loop 2 on: a scale-removing recurrence, the next loop starts from a state of fixed RMS
        (the gain), so no scale can be carried and accumulate. The readout and the penalty still
        see the un-normalized H_{k-1}. Beyond the paper, from loop 2 on (docs/depth.md):
        damping, h * sigmoid(a), a learned contraction of the carried state (the paper's released
        code, models/ar_looplm.py, after OpenMythos); injection, h + e with e = H_0 the loop's
        embedding (the input injection of Huginn and Parcae, here with no adapter)."""
        if k == 1:
            return h
        cfg = self.config
        if cfg.interloop_norm:
            h = self.interloop_norm(h)
        if cfg.damping:
            h = h * torch.sigmoid(self.damping_logit).to(h.dtype)
        if cfg.inject:
            if e is None:
                raise ValueError("this model injects its embedding into every loop: pass e, the tokens' H_0")
            h = h + e
        return h

    def loop(self, x):
        """One pass of the shared stack, (B, T, C) -> (B, T, C): the same weights at every loop,
        so one compiled graph of it serves every K (eval_depth.py's timing compiles this)."""
        for block in self.transformer.h:
            x = block(x)
        return x

    def loop_states(self, idx, n_loops=None, clamp=False, first=0):
        """Runs the shared stack K times, yielding H_0, H_1, ..., H_K one at a time, each (B, T, C);
        H_0 is the embedding that enters loop 1. A caller that keeps only the newest state holds
        one state however many loops run (eval_depth.py's Lemma-2 sweep runs 30).
        clamp: the recurrent scale clamp, an evaluation-only intervention (the paper's, section 5):
        each token's state is rescaled after every loop to the norm it had after loop 1, keeping
        its direction. If CE barely changes, the scale the recurrence accumulated carried little
        predictive information.
        first: truncated backprop (random-depth training): loops 1..first run without a graph."""
        K = self.config.n_loops if n_loops is None else n_loops
        if K < 1:
            raise ValueError(f"n_loops must be >= 1, got {K}")
        h = e = self.embed(idx)
        yield h
        for k in range(1, K + 1):
            with torch.set_grad_enabled(torch.is_grad_enabled() and k > first):
                h = self.loop(self.loop_input(h, k, e))
            if clamp and k == 1:
                norm_1 = h.norm(dim=-1, keepdim=True)
            elif clamp:
                h = h * (norm_1 / h.norm(dim=-1, keepdim=True))
            yield h

    def hidden_states(self, idx, n_loops=None, clamp=False):
        """[H_0, H_1, ..., H_K], each (B, T, C): loop_states as a list."""
        return list(self.loop_states(idx, n_loops, clamp))

    def readout(self, h, last):
        """The readout r(H_k) that the LM head decodes, and the blind spot. (..., C) -> (..., C).

        'norm': RMSNorm (with gain). r(a*H) = r(H) for any a > 0, so the cross-entropy has
        no derivative along H (visibility lemma): nothing in the loss sees ||H||, and the
        recurrence is free to grow it.
        'raw': H itself. Scaling H scales the logits, so CE sees the norm and a gradient
        holds it in check.
        'final_norm': raw at loops 1..K-1 (those losses see the scale), normalized at the
        last loop of this call (`last`), whose loss does not.
        'alpha' (beyond the paper; the released code's AlphaReadout, models/refiner.py): with s
        the RMS of H, gamma(s) u for u = H / s and gamma(s) = s_ref^(1-alpha) s^alpha, alpha and
        s_ref learned: a continuum from a normalized readout (alpha = 0) to the raw one (alpha = 1).
        The CE sees the scale as s^alpha, so alpha is the model's own choice of how much to see.
        """
        cfg = self.config
        if cfg.readout == 'norm' or (cfg.readout == 'final_norm' and last):
            # (the gain is cast to h's dtype: a no-op in training, float64 for the diagnostics)
            return F.rms_norm(h, (h.size(-1),), self.readout_norm.weight.to(h.dtype), self.readout_norm.eps)
        if cfg.readout == 'alpha':  # gamma(s) u = H (s_ref / s)^(1 - alpha), in log space
            log_s = h.pow(2).mean(-1, keepdim=True).clamp_min(1e-12).log() / 2
            alpha = torch.sigmoid(self.alpha_logit).to(h.dtype)
            return h * ((1 - alpha) * (self.log_s_ref.to(h.dtype) - log_s)).exp()
        return h

    def logits(self, h, last):
        """(..., C) -> (..., vocab): the LM head (tied to the token embedding) on the readout."""
        return F.linear(self.readout(h, last), self.lm_head.weight.to(h.dtype))

    def readout_loss(self, states, targets, last, head=None):
        """Cross-entropy of reading out each of `states` (each (B, T, C)); targets (B, T), or
        (len(states), B, T) for targets of each state's own; -1 is ignored, as F.cross_entropy's
        ignore_index. `last[i]` says whether states[i] is read out as the last loop. Returns (the
        mean CE over every (token, state) read, differentiable; per-token CE (len(states), B*T)
        float32, detached). loss_path 'plain': the logits of every token, then F.cross_entropy; 'fused'
        (linear_ce.py): the same loss with the logits made a chunk of tokens at a time, never held for
        all tokens, and the gradients made in the same pass.
        head: the LM head's weight (default lm_head.weight; detached, no gradient is made for it)."""
        r = torch.cat([self.readout(h, is_last).reshape(-1, h.size(-1)) for h, is_last in zip(states, last)])
        head = self.lm_head.weight if head is None else head
        y = targets.expand(len(states), *targets.shape[-2:]).reshape(-1)
        if self.loss_path == 'plain':  # the textbook loss: every row's logits (N, vocab), then F.cross_entropy
            logits = F.linear(r, head.to(r.dtype))  # (float32 at least; the diagnostics' float64 stays float64)
            ce = F.cross_entropy(logits.to(torch.promote_types(logits.dtype, torch.float32)), y, ignore_index=-1,
                                 reduction='none')
            total, ce = ce.sum(), ce.detach()
        else:  # the same loss a chunk of rows at a time, with its gradients made in the same pass
            total, ce = linear_cross_entropy(r, head.to(r.dtype), y)
        return total / (y >= 0).sum(), ce.view(len(states), -1).float()  # (a tensor count: no sync)

    # ---------------------------------------------------------------------------------
    # forward and losses

    def forward(self, idx, targets=None, n_loops=None, clamp=False, stats=False, bptt=0):
        """idx, targets: (B, T) token ids. Returns (logits, loss), as nanoGPT's model does:
        without targets, the last loop's logits (B, T, vocab) and None; with targets, None and
        the training loss (linear_ce computes every loop's CE a chunk of tokens at a time, never
        holding K full-vocabulary logit tensors, so the logits are not made).
        stats=True (with targets) adds a third item, per-loop tensors (K,) from the same pass,
        not read here so the caller decides when to sync: 'ce' (NaN for loops the loss does
        not read) and 'h_norm' (mean ||H_k|| over tokens, float32).
        bptt > 0 (random-depth training, train.py): truncated backprop, only the last bptt loops
        run with a graph, and the loss reads only them (per-loop CE over those, the penalty on them)."""
        K = self.config.n_loops if n_loops is None else n_loops
        first = max(0, K - bptt) if bptt and targets is not None else 0
        states = list(self.loop_states(idx, K, clamp, first))[1:]  # H_1 .. H_K
        if targets is None:
            return self.logits(states[-1], last=True), None
        return (None, *self.loss(states, targets, stats, first))

    def loss(self, states, targets, stats=False, first=0):
        """The training loss of states [H_1 .. H_K] against targets (B, T), or (K, B, T) with each
        loop's own (-1: not read there). Returns (loss,), or (loss, stats) with stats=True.
        first: loops 1..first ran without a graph (truncated backprop): the loss reads none of them."""
        K = len(states)
        # per-loop CE: the mean over loops of each loop's CE; terminal: the last loop's alone
        # (a slice, not a list of loops: indexing a device tensor with a list copies it there, a host sync a step)
        read = slice(first, K) if self.config.loss == 'perloop' else slice(K - 1, K)
        y = targets.expand(K, *targets.shape[-2:])[read]  # (loops read, B, T)
        loss, ce_tokens = self.readout_loss(states[read], y, [k == K - 1 for k in range(K)[read]])
        if self.config.norm_penalty > 0:
            # norm penalty, as in the paper's released training script: lambda * the mean over the
            # K loops of mean(H_k^2), the mean square activation (||H_k||^2 / d averaged over
            # tokens). The paper writes lambda * sum_k ||H_k||^2; the released code averages the
            # loops, so lambda=0.01 is as strong at any K. Every loop, whatever the CE reads: it
            # is the recurrence that grows the scale.
            loss = loss + self.config.norm_penalty * torch.stack([h.float().pow(2).mean() for h in states[first:]]).mean()
        if not stats:
            return (loss,)
        valid = (y >= 0).flatten(1).float()  # (loops read, B*T)
        ce = torch.full((K,), float('nan'), device=states[0].device)
        ce[read] = (ce_tokens * valid).sum(1) / valid.sum(1)  # loop k's mean CE over the tokens it reads
        h_norm = torch.stack([h.detach().float().norm(dim=-1).mean() for h in states])
        return loss, {'ce': ce, 'h_norm': h_norm}

    @torch.no_grad()
    def depth_losses(self, states, targets):
        """Per-token CE of the model run with K = 1, 2, ... loops, from the states of one pass
        ([H_1 .. H_K], from hidden_states): run with K loops, the model reads H_K out as its
        last loop, so row K-1 is what forward(n_loops=K) would score. (K, B*T) float32."""
        return self.readout_loss(states, targets, [True] * len(states))[1]

    # ---------------------------------------------------------------------------------
    # what training needs to know of the model

    @classmethod
    def cannot_train(cls, config, bptt=0):
        """Why this class cannot train config (with truncated backprop through the last bptt
        loops), as one line; None if it can. Exit-aware training is beyond the paper: the class
        that trains it is beyond/exit_train.py's."""
        if config.exit_train > 0:
            return (f"exit_train={config.exit_train} needs the exit-aware model, which is beyond the paper: "
                    "run python -m beyond.exit_train with the same arguments")
        return None

    def may_skip_parameters(self, varying_depth=False):
        """Whether a training step can leave a parameter without a gradient (DDP must be told): the
        between-loop ones at K=1 (one loop has no 'between'), and when K varies (random depth), the
        position embedding when truncated backprop leaves loop 1 without a graph."""
        between = self.interloop_norm is not None or hasattr(self, 'damping_logit')
        return varying_depth or (between and self.config.n_loops == 1) or self.config.positions == 'none'

    def learned_scalars(self):
        """The scalars the model learned of its scale, by name: alpha and s_ref of the alpha readout,
        the damping factor (an empty dict where it has none)."""
        out = {}
        if self.config.readout == 'alpha':
            out['alpha'] = torch.sigmoid(self.alpha_logit).item()
            out['s_ref'] = self.log_s_ref.exp().item()
        if self.config.damping:
            out['damping'] = torch.sigmoid(self.damping_logit).item()
        return out

    # ---------------------------------------------------------------------------------
    # size and cost

    def get_num_params(self, non_embedding=True):
        """Parameters of the model, counted once however many loops run. As in nanoGPT, the
        position embeddings are subtracted by default; the token embedding is counted since
        it is also the head (tied)."""
        n_params = sum(p.numel() for p in self.parameters())
        if non_embedding:
            n_params -= self.transformer.wpe.weight.numel()
        return n_params

    def flops_per_token(self, n_loops=None, supervised_loops=None, training=True, T=None, bptt=0):
        """Matmul FLOPs per token: the shared stack K times, the readout once per supervised
        loop, attention over T positions. Training counts forward + backward (x3), as in the
        PaLM appendix B estimate that nanoGPT uses (linear_ce's three head matmuls per read loop
        are exactly that x3); with truncated backprop (bptt > 0) only the last bptt loops and
        their readouts have a backward."""
        cfg = self.config
        K = n_loops or cfg.n_loops
        graph = min(K, bptt) if bptt and training else K  # the loops with a graph
        if supervised_loops is None:
            supervised_loops = graph if (training and cfg.loss == 'perloop') else 1
        T = T or cfg.block_size
        stack = sum(p.numel() for n, p in self.transformer.h.named_parameters() if p.dim() == 2)
        attn = 2 * cfg.n_layer * T * cfg.n_embd  # q@k and att@v, one multiply-add each per (t, d)
        head = cfg.n_embd * cfg.vocab_size
        forward = 2 * (K * (stack + attn) + supervised_loops * head)
        return forward + 4 * (graph * (stack + attn) + supervised_loops * head) if training else forward

    @classmethod
    def from_checkpoint(cls, path, device='cpu'):
        """Rebuilds a model from a checkpoint written by train.py (a file, or a run folder
        holding ckpt.pt). Returns (model, checkpoint dict). The one loader everything uses."""
        if os.path.isdir(path):
            path = os.path.join(path, 'ckpt.pt')
        if not os.path.isfile(path):
            raise FileNotFoundError(f"no checkpoint at {path} (train.py writes <out_dir>/ckpt.pt)")
        try:  # weights_only: a checkpoint holds tensors and plain values, never code
            ckpt = torch.load(path, map_location=device, weights_only=True)
        except Exception as e:
            raise ValueError(f"{path} is not a checkpoint written by train.py (torch.load: {type(e).__name__})")
        if not isinstance(ckpt, dict) or not {'model_args', 'model'} <= ckpt.keys():
            raise ValueError(f"{path} is not a checkpoint written by train.py (it has no model_args and model)")
        try:
            model = cls(cls.config_class(**ckpt['model_args']))
            model.load_state_dict(ckpt['model'])
        except Exception as e:
            raise ValueError(f"cannot load the checkpoint {path} ({type(e).__name__}: {str(e)[:200]})")
        return model.to(device), ckpt


# -------------------------------------------------------------------------------------
# diagnostics: shared by train.py (every eval_interval), eval_depth.py and sample.py

def token_diagnostics(model, states, targets, every_loop_last=False, radial=True, chunk=2048):
    """Per-token, per-loop diagnostics from the states of one batch ([H_0 .. H_K], as from
    hidden_states). Returns a dict of (K, N) float32 tensors on the states' device:
    'norm'    ||H_k|| per token
    'radial'  |<g, H_k>| / (||g|| ||H_k||) with g = dCE_k/dH_k, the gradient of loop k's own
              readout loss (not the loss through later loops). ~0 when the readout is
              scale-invariant: that is the blind spot, measured. NaN where g is zero.
    'angular' 1 - cos(H_k, H_{k-1}): how far loop k turns the state (H_0 is the embedding).
    Loop k's readout is the last one only at k = K, as in training; every_loop_last=True
    reads every loop as the last, i.e. as the model run with K = k loops. radial=False skips
    the radial fraction (NaN), the only part that runs the readout."""
    K = len(states) - 1
    out = {'norm': [], 'radial': [], 'angular': []}
    device_type = states[0].device.type
    # The radial fraction is computed in float64 without autocast: the quantity sits near 1e-9
    # for a normalized readout, far below bf16 (~4e-3) and near float32 (~1e-7) rounding, and
    # a saturated float32 softmax (as at the default init, CE ~ 80) underflows the gradient
    # to noise. The readout runs in the dtype of its input (LoopedGPT.readout); MPS has no float64.
    precise = torch.float32 if device_type == 'mps' else torch.float64
    C = states[0].size(-1)
    targets = targets.reshape(-1)
    with torch.autocast(device_type=device_type, enabled=False):
        for k in range(1, K + 1):
            h_all = states[k].detach().reshape(-1, C)
            prev_all = states[k - 1].detach().reshape(-1, C)
            rows = {'norm': [], 'radial': [], 'angular': []}
            for i in range(0, h_all.size(0), chunk):  # in chunks: float64 logits are 8 bytes x vocab per token
                h, prev = h_all[i:i + chunk].to(precise), prev_all[i:i + chunk].to(precise)
                rows['norm'].append(h.norm(dim=-1))
                rows['angular'].append(1 - F.cosine_similarity(h, prev, dim=-1))
                if not radial:
                    rows['radial'].append(torch.full_like(h[:, 0], float('nan')))
                    continue
                h.requires_grad_(True)
                with torch.enable_grad():
                    loss, _ = model.readout_loss([h], targets[i:i + chunk], [every_loop_last or k == K],
                                                 head=model.lm_head.weight.detach())  # only dCE/dh is needed
                    (g,) = torch.autograd.grad(loss * h.size(0), h)  # each token's own dCE_t/dh_t
                g_norm = g.norm(dim=-1)
                frac = (g * h).sum(-1).abs() / (g_norm * h.norm(dim=-1))
                # a token predicted with probability 1 to machine precision has a zero gradient and
                # no direction: its fraction is NaN and left out of the mean (see summarize)
                rows['radial'].append(frac.masked_fill(g_norm <= torch.finfo(precise).tiny ** 0.5, float('nan')))
            for name, r in rows.items():
                out[name].append(torch.cat(r).detach().float())
    return {name: torch.stack(rows) for name, rows in out.items()}


def summarize(per_token):
    """(K, N) per-token diagnostics -> dict of per-loop python lists: norm mean/median/p99/max,
    mean radial fraction, mean angular change. One device sync."""
    norm = per_token['norm'].float()
    # quantiles on a subsample if huge: torch.quantile takes at most 2**24 elements per row. The indices in
    # float64: in float32 the last, N - 1, rounds to N itself for some N past 2**24 (an IndexError at 2**25)
    q = norm if norm.size(1) <= 2**24 else \
        norm[:, torch.linspace(0, norm.size(1) - 1, 2**24, dtype=torch.float64).long()]
    stats = torch.stack([norm.mean(1), q.median(1).values, torch.quantile(q, 0.99, dim=1), norm.amax(1),
                         per_token['radial'].float().nanmean(1), per_token['angular'].float().mean(1)])
    names = ['norm_mean', 'norm_median', 'norm_p99', 'norm_max', 'radial', 'angular']
    return dict(zip(names, stats.cpu().tolist()))


def diagnostics(model, idx, targets, n_loops=None, clamp=False):
    """The per-loop diagnostics of one batch, as train.py logs them."""
    was_training = model.training
    model.eval()
    with torch.no_grad():
        states = model.hidden_states(idx, n_loops, clamp)
    per_token = token_diagnostics(model, states, targets)
    model.train(was_training)
    return summarize(per_token)


def lemma_sums(states):
    """Lemma 2 of the paper (the activity lemma), measured. Write each token's state as
    H = s * u, with s the RMS of H over channels and u = H / s (so ||u|| = sqrt(d)). In the
    drifted regime a loop adds a roughly constant radial increment a_k = <u_k, H_{k+1} - H_k>,
    while the direction moves by ||u_{k+1} - u_k|| ~ c / s_k: the larger the scale, the less a
    loop can turn the state, so extra loops stop changing the prediction (K-invariance).

    states: any iterable of H_1, H_2, ..., H_N (each (..., C)), consumed one at a time, so
    only two states are held (pass model.loop_states to run N loops in O(one state)).
    Returns float64 sums over tokens, to be divided by 'tokens' (and summed across batches):
    's' (N,), and 'radial_increment', 'angular_step', 's_times_angular' (N-1,) for k = 1..N-1."""
    sums = {'s': [], 'radial_increment': [], 'angular_step': [], 's_times_angular': []}
    prev = None
    for h in states:
        h = h.detach().double().reshape(-1, h.size(-1))
        s = h.pow(2).mean(-1).sqrt()  # (N,)
        u = h / s[:, None]
        sums['s'].append(s.sum())
        if prev is not None:
            h_prev, s_prev, u_prev = prev
            step = (u - u_prev).norm(dim=-1)
            sums['radial_increment'].append((u_prev * (h - h_prev)).sum(-1).sum())
            sums['angular_step'].append(step.sum())
            sums['s_times_angular'].append((s_prev * step).sum())
        prev = h, s, u
    out = {k: torch.stack(v) if v else torch.zeros(0, dtype=torch.float64) for k, v in sums.items()}
    out['tokens'] = prev[0].size(0)
    return out
