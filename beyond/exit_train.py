"""
Exit-aware training (beyond the paper): a model trained to be run with per-token early exits.

    python -m beyond.exit_train config/raw_perloop_exit.py config/cpu.py config/cpu_long.py    # exit_train = 0.25

It is train.py run with this model class (train.main's model_class): the same settings, --help,
checkpoints and log. train.py itself refuses exit_train > 0 and names this command.

With exit_train = f, in each training batch a fraction f of the tokens exits after a loop e
drawn uniformly from 1..K-1: the token is frozen after loop e (its state stays H_e, its residual
updates are dropped in every later block) while the other tokens still attend to it, and its
loss reads loops 1..e only. That is what a decoder with projected stand-ins sees
(beyond/decoder.py): the keys and values of an exited token at a later loop are those of its
exit state. In evaluation (and with exit_train = 0) it is LoopedGPT exactly, so its checkpoints
load as LoopedGPT everywhere else.
"""

import torch

import train
from model import LoopedGPT


class ExitTrainedGPT(LoopedGPT):
    @classmethod
    def cannot_train(cls, config, bptt=0):  # (train.build_model asks: LoopedGPT refuses exit_train > 0)
        if config.exit_train > 0 and bptt:
            return "exit_train runs every loop with a graph: set bptt=0 with it"
        return None

    def masked_states(self, idx, exit_at, n_loops=None):
        """H_0 .. H_K with token t frozen after loop exit_at[t] (B, T) int: H_k = H_exit for k > exit_at.
        Inside each later loop its state is left as it is at every block, so the tokens after it
        attend to the keys and values of its exit state (exactly, at every layer)."""
        K = self.config.n_loops if n_loops is None else n_loops
        h = e = self.embed(idx)
        yield h
        for k in range(1, K + 1):
            keep = (exit_at >= k)[..., None]  # (B, T, 1): still running at loop k
            x = self.loop_input(h, k, e)
            for block in self.transformer.h:
                x = torch.where(keep, block(x), x)
            h = torch.where(keep, x, h)  # (a frozen token keeps H_exit, also past the inter-loop norm)
            yield h

    def forward(self, idx, targets=None, n_loops=None, clamp=False, stats=False, bptt=0):
        K = self.config.n_loops if n_loops is None else n_loops
        if not (self.training and targets is not None and self.config.exit_train > 0 and K > 1 and not clamp):
            return super().forward(idx, targets, n_loops, clamp, stats, bptt)
        # each token, with probability exit_train, exits after a loop e drawn uniformly from 1..K-1
        draw = torch.randint(1, K, targets.shape, device=idx.device)
        exit_at = torch.where(torch.rand(targets.shape, device=idx.device) < self.config.exit_train, draw, K)
        states = list(self.masked_states(idx, exit_at, K))[1:]  # H_1 .. H_K
        per_loop = torch.stack([torch.where(exit_at > k, targets, -1) for k in range(K)])  # (K, B, T): loop k+1 reads
        return (None, *self.loss(states, per_loop, stats))


if __name__ == '__main__':
    train.cli(ExitTrainedGPT, script='python -m beyond.exit_train')
