"""
A looped GPT: one shared stack of decoder blocks applied K times, read out after every loop.

    python -c "from model import LoopedGPT, LoopedGPTConfig; LoopedGPT(LoopedGPTConfig())"

H_k is the residual stream after loop k: read out (decoded to a next-token distribution) and carried
into loop k+1. The blind spot lives in `LoopedGPT.readout`: an RMSNorm there makes every loop's
cross-entropy blind to ||H_k||, while the residual recurrence keeps growing it (Sharma & Vu 2026,
"Dense Supervision Is Not Enough"). What goes beyond the paper subclasses the model and its config
in beyond/additions.py; this file imports nothing from the scripts.
"""

import importlib
import math
import os
from contextlib import nullcontext
from dataclasses import dataclass, fields

import torch
import torch.nn as nn
from torch.nn import functional as F

from linear_ce import linear_cross_entropy

READOUTS = ('norm', 'raw', 'final_norm', 'alpha')
LOSSES = ('perloop', 'terminal')
SIZE = ('block_size', 'vocab_size', 'n_layer', 'n_head', 'n_embd', 'dropout', 'n_loops')  # the fields that size a model


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
    norm_penalty: float = 0.0     # lambda of the norm penalty (0 = off; 0.01 in the paper's runs), see LoopedGPT.forward
    interloop_norm: bool = False  # RMSNorm on the state carried between loops
    init_std: float = 0.0         # 0: PyTorch's default init, as the paper's released code; >0: N(0, init_std)

    def __post_init__(self):
        for name, low, high in (('block_size', 1, None), ('vocab_size', 1, None), ('n_layer', 1, None), ('n_head', 1, None),
                                ('n_embd', 1, None), ('n_loops', 1, None), ('dropout', 0, 1), ('norm_penalty', 0, None),
                                ('init_std', 0, None)):
            value = getattr(self, name)  # (high: excluded)
            if not (value >= low and (high is None or value < high)):
                why = ' (a negative lambda would reward large norms)' if name == 'norm_penalty' else ''
                raise ValueError(f"{name!r} must be {f'in [{low}, {high})' if high else f'>= {low}'}{why}; got {value!r}")
        for name, options in (('readout', READOUTS), ('loss', LOSSES)):
            if getattr(self, name) not in options:
                raise ValueError(f"{name!r} must be one of {', '.join(options)}; got {getattr(self, name)!r}")
        if self.n_embd % self.n_head != 0:
            raise ValueError(f"n_embd ({self.n_embd}) must be a multiple of n_head ({self.n_head})")


# -------------------------------------------------------------------------------------
# the block, as nanoGPT's. Dropout, in training, on the attention probabilities and the MLP's
# output, as the paper's released layer (nanoGPT also drops the attention's output; it does not).
# The modules read their own weights with F.linear: a decoded token makes no module call per matmul.

class CausalSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        C, self.n_head, self.dropout = config.n_embd, config.n_head, config.dropout
        self.c_attn = nn.Linear(C, 3 * C, bias=False)  # q, k, v at once
        self.c_proj = nn.Linear(C, C, bias=False)

    def forward(self, x, cache=None):
        """x (B, T, C). cache: None, the T tokens attend to each other causally; or what beyond/ brings, called with
        the new keys and values (2, B, nh, T, hs) and returning those attended over and their mask (None: causal), as
        gpt-fast's Attention takes its KV cache: beyond/decoder.py's (every cached token too), beyond/additions.py's window
        (keys of its own for each query, (B, nh, T, w, hs): each query is then a batch of one against its w keys)."""
        B, T, C = x.shape
        qkv = F.linear(x, self.c_attn.weight).view(B, T, 3, self.n_head, C // self.n_head).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)  # (B, nh, T, hs) each
        mask = None
        if cache is not None:
            k, v, mask = cache(qkv[1:])
            q = q.unsqueeze(-2) if k.dim() > q.dim() else q  # (B, nh, T, 1, hs) against (B, nh, T, w, hs)
        # under CPU autocast, in float32: PyTorch's bf16 attention was the slower one there (assets/speed/attention.md)
        fp32 = torch.is_autocast_enabled('cpu') and x.device.type == 'cpu'
        if fp32:
            q, k, v = q.float(), k.float(), v.float()
            mask = mask.float() if mask is not None and mask.is_floating_point() else mask  # (an additive mask, too)
        # no mask: causal (a decoded token, one query, attends to every key: all of them come before it)
        with torch.autocast('cpu', enabled=False) if fp32 else nullcontext():
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None and T > 1,
                                               dropout_p=self.dropout if self.training else 0.0)
        return F.linear(y.transpose(1, 2).reshape(B, T, C), self.c_proj.weight)


class MLP(nn.Module):
    # SwiGLU with a hidden width of 4d and three matrices: the shape whose parameter count gives the paper's
    # "44M" (d=512, 8 layers) and "129M" (d=768, 12 layers) with its 20k vocabulary
    def __init__(self, config):
        super().__init__()
        C, self.dropout = config.n_embd, config.dropout
        self.w_gate = nn.Linear(C, 4 * C, bias=False)
        self.w_up = nn.Linear(C, 4 * C, bias=False)
        self.w_down = nn.Linear(4 * C, C, bias=False)
        self.gate_up = None  # beyond/decoder.py's copy sets w_gate and w_up side by side, (8C, C): one matmul a token

    def forward(self, x):
        gate, up = ((F.linear(x, self.w_gate.weight), F.linear(x, self.w_up.weight)) if self.gate_up is None
                    else F.linear(x, self.gate_up).chunk(2, -1))
        h = F.silu(gate) * up  # (B, T, 4C)
        y = F.linear(h, self.w_down.weight)
        return F.dropout(y, self.dropout) if self.training else y


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln_1 = nn.RMSNorm(config.n_embd)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.RMSNorm(config.n_embd)
        self.mlp = MLP(config)

    def forward(self, x, cache=None):
        # pre-norm: x, the residual stream (float32 under autocast), is never normalized itself, so whatever
        # scale it has is carried from loop to loop (the paper's activity lemma)
        x = x + self.attn(self.ln_1(x), cache)
        x = x + self.mlp(self.ln_2(x))
        return x


# -------------------------------------------------------------------------------------

class LoopedGPT(nn.Module):
    config_class = LoopedGPTConfig  # its fields: train.py's model settings, the checkpoint's model_args
    # how readout_loss computes the CE: 'fused' (linear_ce.py) or 'plain' (F.cross_entropy): the same loss, so in
    # neither the config nor the checkpoint; train.py sets it from its loss_path setting (a constant to torch.compile)
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
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tied: the head is the token embedding
        # Init: PyTorch's own (embeddings N(0,1), tied to the head), as the paper's released code: the norms it
        # reports depend on it, and the loss at init is far above ln(vocab) (the tied N(0,1) embedding predicts its
        # own input token with logits of order d). init_std > 0: nanoGPT-style N(0, init_std) matrices.
        if config.init_std > 0:
            for p in self.parameters():
                if p.dim() == 2:
                    torch.nn.init.normal_(p, mean=0.0, std=config.init_std)

    def readout(self, h, last):
        """The readout r(H_k) that the LM head decodes, and the blind spot. (..., C) -> (..., C).

        'norm': RMSNorm (with gain). r(a*H) = r(H) for any a > 0, so the cross-entropy has no derivative
        along H (visibility lemma): nothing in the loss sees ||H||, and the recurrence is free to grow it.
        'raw': H itself. Scaling H scales the logits, so CE sees the norm and a gradient holds it in check.
        'final_norm': raw at loops 1..K-1 (those losses see the scale), normalized at the last loop of
        this call (`last`), whose loss does not.
        'alpha' (the paper's released code, models/refiner.py): with s the RMS of H, gamma(s) u for
        u = H / s and gamma(s) = s_ref^(1-alpha) s^alpha, alpha and s_ref learned: a continuum from the
        normalized readout (alpha = 0) to the raw one (alpha = 1); the CE sees the scale as s^alpha.
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

    def forward(self, idx, targets=None, n_loops=None, clamp=False):
        """idx, targets: (B, T) token ids (target -1: not scored); n_loops: K (default the trained K). As nanoGPT's,
        (logits, loss): without targets the last loop's logits (B, T, vocab) and None; with targets None and the loss.
        With targets there are no logits: linear_ce.py makes each loop's CE a chunk of tokens at a time, never all.
        The training log's per-loop numbers of the pass stay in self.stats, on the device: 'ce' (K,), each loop's
        mean CE (NaN where the loss does not read it), and 'h_norm' (K,), each loop's mean ||H_k||."""
        states = list(self.loop_states(idx, n_loops, clamp))[1:]  # H_1 .. H_K, each (B, T, C)
        if targets is None:
            return self.lm_head(self.readout(states[-1], last=True)), None
        K = len(states)
        read = slice(0, K) if self.config.loss == 'perloop' else slice(K - 1, K)  # per-loop CE: every loop; terminal: the last
        loss, ce = self.readout_loss(states[read], targets, [k == K - 1 for k in range(K)[read]])  # (the mean over loops)
        if self.config.norm_penalty > 0:
            # the norm penalty as the paper's released script: lambda * the mean over the K loops of mean(H_k^2) (the
            # paper writes a sum over loops). Every loop, whatever the CE reads: it is the recurrence that grows the scale
            loss = loss + self.config.norm_penalty * torch.stack([h.float().pow(2).mean() for h in states]).mean()
        scored = (targets >= 0).expand(ce.size(0), *targets.shape[-2:]).flatten(1).float()  # (loops read, B*T)
        self.stats = dict(ce=torch.full((K,), math.nan, device=ce.device),
                          h_norm=torch.stack([h.detach().float().norm(dim=-1).mean() for h in states]))
        self.stats['ce'][read] = (ce * scored).sum(1) / scored.sum(1)  # (a slice: indexing with a list is a host sync)
        return None, loss

    # ---------------------------------------------------------------------------------
    # the loop

    def loop_states(self, idx, n_loops=None, clamp=False):
        """H_0 (the embedding), H_1, ..., H_K, each (B, T, C), one at a time: a caller keeping only the newest
        holds one state however many loops run. clamp: the recurrent scale clamp (the paper's section 5, for
        evaluation): each token's state rescaled after every loop to its norm after loop 1, its direction kept;
        if CE barely changes, the scale the recurrence accumulated carried little predictive information."""
        K = self.config.n_loops if n_loops is None else n_loops
        if K < 1:
            raise ValueError(f"n_loops must be >= 1, got {K}")
        h = e = self.embed(idx)
        yield h
        for k in range(K):  # loop k+1 runs the shared stack on H_k
            h = self.loop(self.loop_input(h, k, e))
            if clamp and k == 0:
                norm_1 = h.norm(dim=-1, keepdim=True)
            elif clamp:
                h = h * (norm_1 / h.norm(dim=-1, keepdim=True))
            yield h

    def embed(self, idx, t0=0):
        """H_0 (B, T, C): token plus position embeddings of idx (B, T) at t0.. (a decoder's tokens after its cache)."""
        T = idx.size(1)
        if t0 + T > self.config.block_size:
            raise ValueError(f"sequence of length {t0 + T} exceeds block_size {self.config.block_size}")
        h = F.embedding(idx, self.transformer.wte.weight) + self.transformer.wpe.weight[t0:t0 + T]
        return F.dropout(h, self.config.dropout) if self.training else h  # (no module call for a decoded token)

    def loop_input(self, h, k, e):
        """What loop k+1 starts from (e = H_0, for a subclass): H_k, or with the inter-loop norm RMSNorm(H_k) from loop
        2 on, a scale-removing recurrence: each loop starts at a fixed RMS (the gain), no scale is carried to grow.
        The readout and the penalty still see the un-normalized H_k."""
        return self.interloop_norm(h) if k > 0 and self.interloop_norm is not None else h

    def loop(self, x):
        """One pass of the shared stack, (B, T, C) -> (B, T, C): the same weights at every loop, so one
        compiled graph of it serves every K (random-depth training and eval_depth.py's timing compile it)."""
        for block in self.transformer.h:
            x = block(x)
        return x

    def hidden_states(self, idx, n_loops=None, clamp=False):
        return list(self.loop_states(idx, n_loops, clamp))  # [H_0, H_1, ..., H_K], each (B, T, C)

    # ---------------------------------------------------------------------------------
    # the loss

    def readout_loss(self, states, targets, last, head=None):
        """Cross-entropy of reading out each of `states` (each (B, T, C)) against targets (B, T), or
        (len(states), B, T), each state's own; -1 is not scored. last[i]: states[i] is read as the last loop.
        Returns (the mean CE over every (token, state) scored; per-token CE (len(states), B*T) float32, detached).
        loss_path 'plain': every row's logits, then F.cross_entropy; 'fused' (linear_ce.py): the same loss a chunk
        of rows at a time, its gradients made in the same pass. head: the LM head's weight (default lm_head's)."""
        r = torch.cat([self.readout(h, is_last).reshape(-1, h.size(-1)) for h, is_last in zip(states, last)])
        head = self.lm_head.weight if head is None else head
        y = targets.expand(len(states), *targets.shape[-2:]).reshape(-1)
        if self.loss_path == 'plain':  # the textbook loss: the logits of every row (N, vocab), then F.cross_entropy
            logits = F.linear(r, head.to(r.dtype))  # (float32 at least; the diagnostics' float64 stays float64)
            ce = F.cross_entropy(logits.to(torch.promote_types(logits.dtype, torch.float32)), y, ignore_index=-1,
                                 reduction='none')
            total, ce = ce.sum(), ce.detach()
        else:
            total, ce = linear_cross_entropy(r, head.to(r.dtype), y)
        return total / (y >= 0).sum(), ce.view(len(states), -1).float()  # (a tensor count: no sync)

    @torch.no_grad()
    def depth_losses(self, states, targets):
        """Per-token CE of the model run with K = 1, 2, ... loops, from the states of one pass ([H_1 .. H_K]):
        run with K loops, the model reads H_K as its last loop. (K, B*T) float32."""
        return self.readout_loss(states, targets, [True] * len(states))[1]

    # ---------------------------------------------------------------------------------
    # what training and evaluation ask of the model

    def may_skip_parameters(self, varying_depth=False):
        """Whether a step can leave a parameter without a gradient (DDP must be told): the inter-loop norm at K=1
        (one loop has no 'between'), and with varying K (random depth) whatever a subclass adds."""
        return varying_depth or (self.interloop_norm is not None and self.config.n_loops == 1)

    def learned_scalars(self):
        """The scalars the model learned of its scale: alpha and s_ref of the alpha readout."""
        alpha = self.config.readout == 'alpha'
        return dict(alpha=torch.sigmoid(self.alpha_logit).item(), s_ref=self.log_s_ref.exp().item()) if alpha else {}

    def get_num_params(self, non_embedding=True):
        """Parameters, counted once however many loops run; as nanoGPT's, less the position embeddings."""
        return sum(p.numel() for p in self.parameters()) - (self.transformer.wpe.weight.numel() if non_embedding else 0)

    def flops_per_token(self, n_loops=None, supervised_loops=None, training=True, T=None, backward_loops=None):
        """Matmul FLOPs per token: the shared stack K times, the readout once per supervised loop, attention over
        T positions; training x3 (forward + backward, PaLM's appendix B, as nanoGPT; linear_ce's three head matmuls
        a read loop are exactly that). backward_loops: the last loops with a backward (truncated backprop; all)."""
        cfg = self.config
        K = n_loops or cfg.n_loops
        graph = min(K, backward_loops or K) if training else K
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
        """The model a checkpoint written by train.py holds (a file, or a run folder holding ckpt.pt), rebuilt as
        the class it records (model_class; none, the paper's). Returns (model, checkpoint dict). The one loader
        everything uses."""
        path = os.path.join(path, 'ckpt.pt') if os.path.isdir(path) else path
        if not os.path.isfile(path):
            raise FileNotFoundError(f"no checkpoint at {path} (train.py writes <out_dir>/ckpt.pt)")
        try:  # weights_only: a checkpoint holds tensors and plain values, never code
            ckpt = torch.load(path, map_location=device, weights_only=True)
        except Exception as e:
            raise ValueError(f"{path} is not a checkpoint written by train.py (torch.load: {type(e).__name__})")
        if not isinstance(ckpt, dict) or not {'model_args', 'model'} <= ckpt.keys():
            raise ValueError(f"{path} is not a checkpoint written by train.py (it has no model_args and model)")
        name, args = ckpt.get('model_class', 'model.LoopedGPT'), ckpt['model_args']
        model_class = cls if name == f'{cls.__module__}.{cls.__qualname__}' else named_class(name)
        unknown = sorted(args.keys() - {f.name for f in fields(model_class.config_class)})
        if unknown:  # (one line that says what to do, where the config would raise a TypeError)
            raise ValueError(f"{path} holds model fields {name} has not ({', '.join(unknown)}): set its model_class "
                             "to the class that declares them and save it again (beyond.exit_train.ExitTrainedGPT "
                             "declares every one the paper's model once held)")
        try:
            model = model_class(model_class.config_class(**args))
            model.load_state_dict(ckpt['model'])
        except Exception as e:
            raise ValueError(f"cannot load the checkpoint {path} ({type(e).__name__}: {' '.join(str(e).split())[:200]})")
        return model.to(device), ckpt


# -------------------------------------------------------------------------------------
# model classes by name: a config names one (train.py's model_class), and the checkpoint records it

def named_class(name, setting='model_class'):
    """The model class (or the function: train.py's select) `name` ('module.Class') names, imported; a ValueError of
    one line, naming the setting, if it cannot be."""
    module, _, attr = name.rpartition('.')
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError, ValueError) as e:
        gone = isinstance(e, ModuleNotFoundError) and module.startswith('beyond')
        where = ' (beyond/ is not here: the paper needs only the top level)' if gone else ''
        raise ValueError(f"{setting} {name!r} cannot be loaded{where}: {type(e).__name__}: {e}")


# -------------------------------------------------------------------------------------
# diagnostics: shared by train.py (every eval_interval), eval_depth.py and sample.py

def token_diagnostics(model, states, targets, every_loop_last=False, radial=True, chunk=2048):
    """Per-token, per-loop diagnostics from the states of one batch ([H_0 .. H_K], as from hidden_states).
    Returns a dict of (K, N) float32 tensors on the states' device:
    'norm' ||H_k|| per token; 'angular' 1 - cos(H_k, H_{k-1}), how far loop k turns the state;
    'radial' |<g, H_k>| / (||g|| ||H_k||), g = dCE_k/dH_k the gradient of loop k's own readout loss: ~0
    when the readout is scale-invariant, the blind spot measured (NaN where g is zero; radial=False: NaN).
    Loop k is read as the last only at k = K, as in training (every_loop_last: at every k, the K=k model)."""
    K = len(states) - 1
    out = {'norm': [], 'radial': [], 'angular': []}
    device_type = states[0].device.type
    # in float64 without autocast: the fraction sits near 1e-9 for a normalized readout, below bf16's and float32's
    # rounding, and a saturated float32 softmax (CE ~ 80 at the default init) underflows the gradient (MPS: no float64)
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
                # a token predicted with probability 1 has a zero gradient, no direction: NaN, left out of the mean
                rows['radial'].append(frac.masked_fill(g_norm <= torch.finfo(precise).tiny ** 0.5, float('nan')))
            for name, r in rows.items():
                out[name].append(torch.cat(r).detach().float())
    return {name: torch.stack(rows) for name, rows in out.items()}


def summarize(per_token):
    """(K, N) per-token diagnostics -> dict of per-loop python lists: norm mean/median/p99/max,
    mean radial fraction, mean angular change. One device sync."""
    norm = per_token['norm'].float()
    # quantiles of a subsample past torch.quantile's 2**24 a row (float64 indices: float32 rounds N - 1 to N past 2**24)
    q = norm if norm.size(1) <= 2**24 else norm[:, torch.linspace(0, norm.size(1) - 1, 2**24, dtype=torch.float64).long()]
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

