"""
The field's model additions, beyond the paper: the paper's model (model.py) subclassed with the scale
controls of other looped models (docs/depth.md), bounded work per loop for tasks (docs/tasks.md) and
truncated backprop for random-depth training. A config names this class and sets its fields:

    python train.py config/sandwich_perloop.py config/cpu.py     # model_class = 'beyond.additions.FieldGPT'
    python -c "from beyond.additions import FieldGPT, FieldGPTConfig; FieldGPT(FieldGPTConfig(inject=True))"

FieldGPT is LoopedGPT exactly with every field at its default. Each addition overrides one hook of the
paper's model, and none touches model.py: the loop input (damping, injection), the embedding
(positions), the stack's attention (a window), the sublayers' outputs (sandwich norm, forward hooks on
the block's modules), the states the loss reads (truncated backprop). A fork adds its own scale control
the same way (tests/test_train.py: a field, the hook it overrides, and nothing else). The blind-spot
question for each: is the scale visible to a loss, removed from the recurrence, or hidden?
"""

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
from torch.nn import functional as F

from model import LoopedGPT, LoopedGPTConfig

POSITIONS = ('learned', 'none')


@dataclass
class FieldGPTConfig(LoopedGPTConfig):
    # beyond the paper: the field's scale controls (docs/depth.md)
    sandwich_norm: bool = False   # RMSNorm on each sublayer's output before it is added (Huginn, Ouro)
    inject: bool = False          # the embedding H_0 added to the input of every loop after the first
    damping: bool = False         # the carried state scaled by a learned sigmoid(a) < 1 between loops
    # beyond the paper: bounded work per loop, for tasks whose longer instances need more loops (docs/tasks.md)
    window: int = 0               # sliding-window attention: each token attends to itself and the w-1 tokens before it (0 = full causal)
    positions: str = 'learned'    # 'learned': absolute position embeddings (wpe) | 'none': none at all (NoPE), any length runs

    def __post_init__(self):
        super().__post_init__()
        if self.positions not in POSITIONS:
            raise ValueError(f"'positions' must be one of {', '.join(POSITIONS)}; got {self.positions!r}")
        if self.window < 0:
            raise ValueError(f"'window' must be >= 0 (0 = full causal attention); got {self.window!r}")


class Window:
    """Sliding-window attention, handed to the model's attention as its cache (model.CausalSelfAttention): token t
    attends to t-w+1 .. t only, so a loop moves information at most w-1 positions and an input n tokens long needs
    about n/(w-1) loops to be read whole (DeepThinking's bounded work per iteration). Each query gets its own w keys
    (a band, O(T w) work and memory, where a (T, T) mask costs O(T^2): 2,048-bit parity strings read thousands of
    loops deep); a window as wide as the input is causal attention."""

    def __init__(self, width):
        self.width = width

    def __call__(self, kv):  # the new keys and values (2, B, nh, T, hs)
        T, w = kv.size(-2), self.width
        if w >= T:
            return kv[0], kv[1], None  # (None: causal)
        band = F.pad(kv, (0, 0, w - 1, 0)).unfold(-2, w, 1).transpose(-1, -2)  # (2, B, nh, T, w, hs): t-w+1 .. t
        mask = torch.arange(T, device=kv.device)[:, None, None] + torch.arange(1 - w, 1, device=kv.device) >= 0
        return band[0], band[1], mask  # mask (T, 1, w): the keys before the first token (its padding) left out


def sandwich(module, args, y):
    """The sandwich norm, a forward hook on each block's attention and MLP: the sublayer's output RMS-normalized
    (its own gain, ln_out) before it is added to the stream, so every update has a bounded size, RMS the gain,
    however large the state (Huginn, Geiping et al. 2025; Ouro). The MLP's dropout moves after the norm."""
    return F.dropout(module.ln_out(y), module.out_dropout, module.training)


class FieldGPT(LoopedGPT):
    config_class = FieldGPTConfig
    no_graph = 0  # loops 1..no_graph of this forward run without a graph (truncated backprop; forward sets it)

    def __init__(self, config):
        super().__init__(config)
        if config.sandwich_norm:  # Huginn's norm_2 and norm_4 (parameters attn.ln_out, mlp.ln_out)
            for block in self.transformer.h:
                block.attn.out_dropout, block.mlp.out_dropout, block.mlp.dropout = 0.0, block.mlp.dropout, 0.0
                for sub in (block.attn, block.mlp):
                    sub.ln_out = nn.RMSNorm(config.n_embd)
                    sub.register_forward_hook(sandwich)
        if config.damping:  # sigmoid(2) = 0.88 at init, as the released code's raw_alpha
            self.damping_logit = nn.Parameter(torch.tensor(2.0))
        self.window = Window(config.window) if config.window else None

    def embed(self, idx, t0=0):
        if self.config.positions == 'learned':
            return super().embed(idx, t0)
        # NoPE: no position embedding (only the causal mask tells positions apart), so any length runs
        h = F.embedding(idx, self.transformer.wte.weight)
        return F.dropout(h, self.config.dropout) if self.training else h

    @property
    def max_length(self):
        """The longest sequence the model reads: block_size with learned positions, any without."""
        return self.config.block_size if self.config.positions == 'learned' else math.inf

    def loop_input(self, h, k, e):
        """The paper's loop input (the inter-loop norm), then from loop 2 on: damping, h * sigmoid(a), a learned
        contraction of the carried state (the released code's models/ar_looplm.py, after OpenMythos); injection,
        h + e with e = H_0 the loop's embedding (the input injection of Huginn and Parcae, here with no adapter)."""
        h = super().loop_input(h, k, e)
        if k > 0 and self.config.damping:
            h = h * torch.sigmoid(self.damping_logit).to(h.dtype)
        if k > 0 and self.config.inject:
            h = h + e
        return h

    def loop(self, x):
        for block in self.transformer.h:  # (the window, where there is one: None is the paper's causal attention)
            x = block(x, self.window)
        return x

    def forward(self, idx, targets=None, n_loops=None, clamp=False, bptt=0):
        """LoopedGPT.forward, and with bptt > 0 (train.py's truncated backprop, with random depth) only the last bptt
        loops run with a graph and the loss reads only them (their CE, the penalty on them); self.stats has every loop."""
        K = self.config.n_loops if n_loops is None else n_loops
        self.no_graph = max(0, K - bptt) if bptt and targets is not None else 0
        try:
            logits, loss = super().forward(idx, targets, n_loops, clamp)
        finally:
            skipped, self.no_graph = self.no_graph, 0
        if skipped:  # the loops without a graph: no CE, their mean ||H_k|| all the same
            norms = torch.stack([h.float().norm(dim=-1).mean() for h in self.skipped])
            self.stats = dict(ce=torch.cat([torch.full_like(norms, math.nan), self.stats['ce']]),
                              h_norm=torch.cat([norms, self.stats['h_norm']]))
            del self.skipped
        return logits, loss

    def loop_states(self, idx, n_loops=None, clamp=False):
        states = super().loop_states(idx, n_loops, clamp)
        if not self.no_graph:
            yield from states
            return
        yield next(states)  # H_0, with its graph (injection reads it at every loop)
        with torch.no_grad():  # (the generator runs each loop as it is asked for the state)
            self.skipped = [next(states) for _ in range(self.no_graph)]
        yield from states

    def may_skip_parameters(self, varying_depth=False):
        # and damping at K=1, and the position embedding NoPE never reads
        damped_once = self.config.damping and self.config.n_loops == 1
        return super().may_skip_parameters(varying_depth) or damped_once or self.config.positions == 'none'

    def learned_scalars(self):
        out = super().learned_scalars()
        if self.config.damping:
            out['damping'] = torch.sigmoid(self.damping_logit).item()
        return out
