"""
A looped GPT: one shared stack of decoder blocks applied K times, read out after every loop.

    python -c "from model import LoopedGPT, LoopedGPTConfig; LoopedGPT(LoopedGPTConfig())"

H_k is the residual stream after loop k. It is read out (decoded to a next-token
distribution) and carried into loop k+1. The blind spot lives in `LoopedGPT.readout`:
an RMSNorm there makes every loop's cross-entropy blind to ||H_k||, while the residual
recurrence keeps growing it (Sharma & Vu 2026, "Dense Supervision Is Not Enough").

Everything the scripts need from the model is here, in one copy: the model and its loss
variants (every loop's CE through linear_ce.py, which never holds the full logits), the
per-loop diagnostics (norms, radial gradient fraction, angular change, Lemma 2), the
checkpoint loader and the FLOPs estimate. Decoding (KV cache, early exit, speculative
decoding) is decoder.py's; device, precision and data helpers live in runtime.py and
data.py. This file imports nothing from the scripts.
"""

import os
from dataclasses import dataclass

import torch
import torch.nn as nn
from torch.nn import functional as F

from linear_ce import readout_ce

READOUTS = ('norm', 'raw', 'final_norm')
LOSSES = ('perloop', 'terminal')


@dataclass
class LoopedGPTConfig:
    block_size: int = 256         # context length (tokens)
    vocab_size: int = 50257       # GPT-2 BPE; 256 for the byte-level tokenizer
    n_layer: int = 8              # blocks in the shared stack (applied n_loops times)
    n_head: int = 8
    n_embd: int = 512             # d, the width of the residual stream
    dropout: float = 0.1
    n_loops: int = 4              # K, loops used in training (any K can be asked for at call time)
    readout: str = 'norm'         # 'norm' | 'raw' | 'final_norm', see LoopedGPT.readout
    loss: str = 'perloop'         # 'perloop': mean CE over loops | 'terminal': last loop's CE
    norm_penalty: float = 0.0     # lambda of the norm penalty (0 = off), see LoopedGPT.forward
    interloop_norm: bool = False  # RMSNorm on the state carried between loops
    init_std: float = 0.0         # 0: PyTorch's default init, as the paper's released code; >0: N(0, init_std)
    exit_train: float = 0.0       # exit-aware training: the fraction of tokens frozen after a random loop (0 = off)

    def __post_init__(self):
        if self.readout not in READOUTS:
            raise ValueError(f"readout must be one of {READOUTS}, got {self.readout!r}")
        if self.loss not in LOSSES:
            raise ValueError(f"loss must be one of {LOSSES}, got {self.loss!r}")
        if self.n_embd % self.n_head != 0:
            raise ValueError(f"n_embd ({self.n_embd}) must be a multiple of n_head ({self.n_head})")
        if self.n_loops < 1:
            raise ValueError(f"n_loops must be >= 1, got {self.n_loops}")
        if not 0 <= self.exit_train < 1:
            raise ValueError(f"exit_train must lie in [0, 1) (0 = off), got {self.exit_train}")
        if self.exit_train > 0 and self.loss != 'perloop':
            raise ValueError("exit_train needs loss='perloop': a token that exits early is read out only at "
                             "its own loops, and terminal CE reads none of them")


class CausalSelfAttention(nn.Module):

    def __init__(self, config):
        super().__init__()
        self.n_head = config.n_head
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=False)  # q, k, v at once
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=False)
        self.dropout = config.dropout

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        # dropout once, on the attention probabilities, as in the paper's released layer (nanoGPT
        # also drops the projected output; the released code does not, and neither do we).
        # (decoder.py runs the same weights on a KV cache, for decoding)
        dropout_p = self.dropout if self.training else 0.0
        if x.device.type == 'cpu' and torch.is_autocast_enabled('cpu'):
            # on a CPU, PyTorch's bf16 attention is slow: forward and backward at the demo's shape
            # took 12.2 ms in bf16 and 4.7 ms in float32, so under CPU autocast it runs in float32
            with torch.autocast('cpu', enabled=False):
                y = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True,
                                                   dropout_p=dropout_p)
        else:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout_p)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # (B, T, C)
        return self.c_proj(y)


class SwiGLU(nn.Module):
    # hidden width 4d with three matrices: this is the shape whose parameter count gives the
    # paper's "44M" (d=512, 8 layers) and "129M" (d=768, 12 layers) with its 20k vocabulary.

    def __init__(self, config):
        super().__init__()
        hidden = 4 * config.n_embd
        self.w_gate = nn.Linear(config.n_embd, hidden, bias=False)
        self.w_up = nn.Linear(config.n_embd, hidden, bias=False)
        self.w_down = nn.Linear(hidden, config.n_embd, bias=False)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x):
        return self.dropout(self.w_down(F.silu(self.w_gate(x)) * self.w_up(x)))


class Block(nn.Module):
    # pre-norm: the residual stream itself is never normalized inside the stack, so whatever
    # scale it has is carried from loop to loop (the paper's activity lemma).

    def __init__(self, config):
        super().__init__()
        self.ln_1 = nn.RMSNorm(config.n_embd)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.RMSNorm(config.n_embd)
        self.mlp = SwiGLU(config)

    def forward(self, x, keep=None):
        # keep (B, T, 1), exit-aware training only: 0 for a token that has exited, whose state
        # then stays put through the block (its residual updates are dropped)
        if keep is None:
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))
        x = x + keep * self.attn(self.ln_1(x))
        return x + keep * self.mlp(self.ln_2(x))


class LoopedGPT(nn.Module):
    # how readout_loss computes the CE (linear_ce.readout_ce): 'fused' or 'plain'. Another way to
    # compute the same loss, not another model, so it is in neither the config nor the checkpoint;
    # train.py sets it on the model from its loss_path setting (a constant to torch.compile)
    loss_path = 'fused'

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.vocab_size, config.n_embd),
            wpe=nn.Embedding(config.block_size, config.n_embd),
            drop=nn.Dropout(config.dropout),
            h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),  # the one shared stack
        ))
        # the readout's RMSNorm; 'raw' has none (an unused parameter would also trip DDP)
        self.readout_norm = nn.RMSNorm(config.n_embd) if config.readout != 'raw' else None
        self.interloop_norm = nn.RMSNorm(config.n_embd) if config.interloop_norm else None
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

    def loop_states(self, idx, n_loops=None, clamp=False, exit_at=None):
        """Runs the shared stack K times, yielding H_0, H_1, ..., H_K one at a time, each (B, T, C);
        H_0 is the embedding that enters loop 1. A caller that keeps only the newest state holds
        one state however many loops run (eval_depth.py's Lemma-2 sweep runs 30).
        exit_at (B, T) int, exit-aware training: token t runs loops 1..exit_at[t] and is frozen
        after them (H_k = H_exit for k > exit_at, its residual updates dropped in every block),
        while the other tokens attend to it, as a decoder with recomputed stand-ins sees it."""
        K = self.config.n_loops if n_loops is None else n_loops
        if K < 1:
            raise ValueError(f"n_loops must be >= 1, got {K}")
        B, T = idx.size()
        if T > self.config.block_size:
            raise ValueError(f"sequence of length {T} exceeds block_size {self.config.block_size}")
        pos = torch.arange(T, dtype=torch.long, device=idx.device)
        h = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))  # (B, T, C)
        yield h
        for k in range(1, K + 1):
            x = h
            if k > 1 and self.interloop_norm is not None:
                # scale-removing recurrence: the next loop starts from a state of fixed RMS
                # (the gain), so no scale can be carried and accumulate. Applied after H_{k-1}
                # was read out; the readout and the penalty see the un-normalized H_{k-1}.
                x = self.interloop_norm(x)
            keep = None if exit_at is None else (exit_at >= k)[..., None].to(x.dtype)  # (B, T, 1)
            x = self.loop(x, keep)
            if keep is not None:  # a frozen token keeps its state (also past the inter-loop norm)
                x = torch.where(keep.bool(), x, h)
            if clamp and k == 1:
                norm_1 = x.norm(dim=-1, keepdim=True)
            elif clamp:
                # eval-time recurrent scale clamp: rescale each token's state back to the norm
                # it had after loop 1, keeping its direction. If CE barely changes, the scale
                # the recurrence accumulated carried little predictive information.
                x = x * (norm_1 / x.norm(dim=-1, keepdim=True))
            h = x
            yield h

    def loop(self, x, keep=None):
        """One pass of the shared stack, (B, T, C) -> (B, T, C): the same weights at every loop,
        so one compiled graph of it serves every K (eval_depth.py's timing compiles this)."""
        for block in self.transformer.h:
            x = block(x, keep=keep)
        return x

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
        """
        if self.config.readout == 'norm' or (self.config.readout == 'final_norm' and last):
            # (the gain is cast to h's dtype: a no-op in training, float64 for the diagnostics)
            return F.rms_norm(h, (h.size(-1),), self.readout_norm.weight.to(h.dtype), self.readout_norm.eps)
        return h

    def logits(self, h, last):
        """(..., C) -> (..., vocab): the LM head (tied to the token embedding) on the readout."""
        return F.linear(self.readout(h, last), self.lm_head.weight.to(h.dtype))

    def readout_loss(self, states, targets, last, head=None):
        """Cross-entropy of reading out each of `states` (each (B, T, C)) against targets (B, T);
        `last[i]` says whether states[i] is read out as the last loop. Returns (the sum over
        states of each one's mean CE over tokens, differentiable; per-token CE (len(states),
        B*T) float32, detached). Through linear_ce: the logits are made a chunk of tokens at a
        time and never held for all tokens, and the gradients are made in the same pass.
        head: the LM head's weight (default lm_head.weight; detached, no gradient is made for it)."""
        r = torch.cat([self.readout(h, is_last).reshape(-1, h.size(-1)) for h, is_last in zip(states, last)])
        head = self.lm_head.weight if head is None else head
        if targets.dim() == 3:  # (len(states), B, T): targets of their own for each state
            y = targets.reshape(len(states), -1)[0]
            total, ce = readout_ce(r, head.to(r.dtype), targets.reshape(-1), self.loss_path)
        else:
            y = targets.reshape(-1)
            total, ce = readout_ce(r, head.to(r.dtype), y.repeat(len(states)), self.loss_path)
        n_valid = (y >= 0).sum()  # ignore_index -1, as F.cross_entropy's; a tensor, so no sync
        return total / n_valid, ce.view(len(states), -1).float()

    # ---------------------------------------------------------------------------------
    # forward and losses

    def forward(self, idx, targets=None, n_loops=None, clamp=False, stats=False):
        """idx, targets: (B, T) token ids. Returns (logits, loss), as nanoGPT's model does.
        Without targets: the last loop's logits (B, T, vocab) and None. With targets: None and
        the training loss; the logits are not made (linear_ce computes every loop's CE a chunk
        of tokens at a time, never holding K full-vocabulary logit tensors).
        stats=True (with targets) adds a third item, per-loop tensors (K,) from the same pass,
        not read here so the caller decides when to sync: 'ce' (NaN for loops the loss does
        not read) and 'h_norm' (mean ||H_k|| over tokens, float32)."""
        K = self.config.n_loops if n_loops is None else n_loops
        exit_at = None
        if self.training and targets is not None and self.config.exit_train > 0 and K > 1:
            # exit-aware training: each token, with probability exit_train, exits after a loop e drawn
            # uniformly from 1..K-1; it is frozen after loop e and its loss reads loops 1..e only
            draw = torch.randint(1, K, targets.shape, device=idx.device)
            exit_at = torch.where(torch.rand(targets.shape, device=idx.device) < self.config.exit_train, draw, K)
        states = list(self.loop_states(idx, n_loops, clamp, exit_at))[1:]  # H_1 .. H_K
        if targets is None:
            return self.logits(states[-1], last=True), None

        # per-loop CE: the mean over loops of each loop's CE; terminal: the last loop's alone
        read = list(range(K)) if self.config.loss == 'perloop' else [K - 1]
        if exit_at is None:
            total, ce_tokens = self.readout_loss([states[k] for k in read], targets, [k == K - 1 for k in read])
            loss = total / len(read)
        else:  # loop k reads only the tokens still running there: the mean over every (token, loop) read
            per_loop = torch.stack([torch.where(exit_at > k, targets, -1) for k in read])  # (K, B, T)
            total, ce_tokens = self.readout_loss([states[k] for k in read], per_loop, [k == K - 1 for k in read])
            loss = total * ((targets >= 0).sum() / (per_loop >= 0).sum())

        if self.config.norm_penalty > 0:
            # norm penalty, as in the paper's released training script: lambda * the mean over the
            # K loops of mean(H_k^2), the mean square activation (||H_k||^2 / d averaged over
            # tokens). The paper writes lambda * sum_k ||H_k||^2; the released code averages the
            # loops, so lambda=0.01 is as strong at any K. Every loop, whatever the CE reads: it
            # is the recurrence that grows the scale.
            loss = loss + self.config.norm_penalty * torch.stack([h.float().pow(2).mean() for h in states]).mean()

        if not stats:
            return None, loss
        # ce[k]: loop k's mean CE over the tokens it reads (with exit training, those still running)
        valid = (targets.reshape(-1) >= 0).float() if exit_at is None else (per_loop >= 0).flatten(1).float()
        ce = torch.full((K,), float('nan'), device=idx.device)
        ce[read] = (ce_tokens * valid).sum(1) / valid.sum(-1)
        h_norm = torch.stack([h.detach().float().norm(dim=-1).mean() for h in states])
        return None, loss, {'ce': ce, 'h_norm': h_norm}

    @torch.no_grad()
    def depth_losses(self, states, targets):
        """Per-token CE of the model run with K = 1, 2, ... loops, from the states of one pass
        ([H_1 .. H_K], from hidden_states): run with K loops, the model reads H_K out as its
        last loop, so row K-1 is what forward(n_loops=K) would score. (K, B*T) float32."""
        return self.readout_loss(states, targets, [True] * len(states))[1]

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

    def flops_per_token(self, n_loops=None, supervised_loops=None, training=True, T=None):
        """Matmul FLOPs per token: the shared stack K times, the readout once per supervised
        loop, attention over T positions. Training counts forward + backward (x3), as in the
        PaLM appendix B estimate that nanoGPT uses (linear_ce's three head matmuls per read loop
        are exactly that x3)."""
        cfg = self.config
        K = n_loops or cfg.n_loops
        if supervised_loops is None:
            supervised_loops = K if (training and cfg.loss == 'perloop') else 1
        T = T or cfg.block_size
        stack = sum(p.numel() for n, p in self.transformer.h.named_parameters() if p.dim() == 2)
        attn = 2 * cfg.n_layer * T * cfg.n_embd  # q@k and att@v, one multiply-add each per (t, d)
        head = cfg.n_embd * cfg.vocab_size
        forward = 2 * (K * (stack + attn) + supervised_loops * head)
        return 3 * forward if training else forward

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
            model = cls(LoopedGPTConfig(**ckpt['model_args']))
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
    # quantiles on a subsample if huge: torch.quantile takes at most 2**24 elements per row
    q = norm if norm.size(1) <= 2**24 else norm[:, torch.linspace(0, norm.size(1) - 1, 2**24).long()]
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
