"""
Exit-aware training (beyond the paper): a model trained to be run with per-token early exits.

    python train.py config/raw_perloop_exit.py config/cpu.py config/cpu_long.py           # exit_train = 0.25
    python -m beyond.exit_train config/raw_perloop_exit.py config/cpu.py config/cpu_long.py   # the same run

ExitTrainedGPT is FieldGPT (beyond/additions.py) with one more field, so train.py trains it wherever a
config names it (model_class, as config/raw_perloop_exit.py does), and python -m beyond.exit_train is
train.py with it as the default class: the same settings, --help, checkpoints and log.

With exit_train = f, in each training batch a fraction f of the tokens exits after a loop e
drawn uniformly from 1..K-1: the token is frozen after loop e (its state stays H_e, its residual
updates are dropped in every later block) while the other tokens still attend to it, and its
loss reads loops 1..e only. That is what a decoder with projected stand-ins sees
(beyond/decoder.py): the keys and values of an exited token at a later loop are those of its
exit state. In evaluation (and with exit_train = 0) it is FieldGPT exactly.
"""

from dataclasses import dataclass

import torch

from beyond.additions import FieldGPT, FieldGPTConfig


@dataclass
class ExitTrainConfig(FieldGPTConfig):
    exit_train: float = 0.0       # the fraction of tokens frozen after a random loop in training (0 = off), see beyond/exit_train.py

    def __post_init__(self):
        super().__post_init__()
        if not 0 <= self.exit_train < 1:
            raise ValueError(f"'exit_train' must be in [0, 1); got {self.exit_train!r}")
        if self.exit_train > 0 and self.loss != 'perloop':
            raise ValueError("exit_train needs loss='perloop': a token that exits early is read out only at "
                             "its own loops, and terminal CE reads none of them")


class ExitTrainedGPT(FieldGPT):
    config_class = ExitTrainConfig
    exit_at = None  # (B, T): the loop each token of this training batch exits after (forward sets it)

    def forward(self, idx, targets=None, n_loops=None, clamp=False):  # (no bptt: every loop runs with a graph)
        K = self.config.n_loops if n_loops is None else n_loops
        if not (self.training and targets is not None and self.config.exit_train > 0 and K > 1 and not clamp):
            return super().forward(idx, targets, n_loops, clamp)
        # each token, with probability exit_train, exits after a loop e drawn uniformly from 1..K-1
        draw = torch.randint(1, K, targets.shape, device=idx.device)
        self.exit_at = torch.where(torch.rand(targets.shape, device=idx.device) < self.config.exit_train, draw, K)
        per_loop = torch.stack([torch.where(self.exit_at > k, targets, -1) for k in range(K)])  # (K, B, T): loop k+1 reads
        try:
            return super().forward(idx, per_loop, n_loops)
        finally:
            self.exit_at = None

    def loop_states(self, idx, n_loops=None, clamp=False):  # (in a training forward: the masked states)
        if self.exit_at is None:
            return super().loop_states(idx, n_loops, clamp)
        return self.masked_states(idx, self.exit_at, n_loops)

    def masked_states(self, idx, exit_at, n_loops=None):
        """H_0 .. H_K with token t frozen after loop exit_at[t] (B, T) int: H_k = H_exit for k > exit_at.
        Inside each later loop its state is left as it is at every block, so the tokens after it attend to the
        keys and values of its exit state (exactly, at every layer)."""
        h = e = self.embed(idx)
        yield h
        for k in range(self.config.n_loops if n_loops is None else n_loops):
            keep = (exit_at > k)[..., None]  # (B, T, 1): still running at loop k+1
            x = self.loop_input(h, k, e)
            for block in self.transformer.h:
                x = torch.where(keep, block(x, self.window), x)
            h = torch.where(keep, x, h)  # (a frozen token keeps H_exit, also past the inter-loop norm)
            yield h


if __name__ == '__main__':
    import train
    train.cli(ExitTrainedGPT, script='python -m beyond.exit_train')
