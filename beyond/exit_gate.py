"""
A learned exit gate: Linear(d, 1) on the state after each loop, trained with the language model
frozen on a finished run (CALM's early-exit classifier; Ouro's second stage, without its
first), saved with the run as out_dir/<name>.pt and used as an exit criterion by python -m beyond.sample and
eval_depth.py. Training takes a few minutes on a CPU: one frozen pass over `tokens` training
tokens, then logistic regression on the states it kept.

    python -m beyond.exit_gate --out_dir=out-raw_perloop-cpu-long-s1                     # gate.pt: the normalized state
    python -m beyond.exit_gate --out_dir=out-raw_perloop-cpu-long-s1 --reads=raw --name=gate-raw
    python -m beyond.sample --out_dir=out-raw_perloop-cpu-long-s1 --exit_criterion=gate --exit_threshold=0.5
    python -m beyond.eval_decode out-raw_perloop-cpu-long-s1 --criteria=angular,gate,gate-raw --calibrate 0.01,0.05

The gate (beyond/exits.py's ExitGate, and how a name finds its file) gives an exit probability,
a confidence in [0, 1] like every criterion's: a token stops after the first loop where it exceeds the threshold. It decides from the state
alone, so a decoder that uses it reads out once, at the exit. What it reads is the blind-spot
question: 'norm' sees the RMS-normalized state, the direction a norm readout sees (Ouro's
gate); 'raw' sees the state itself, scale included (the paper's released gate, CALM's).

The target (a setting; the default chosen by measurement, below):
  'improve'  1 where loop k's CE is within eps of the best CE of loops k..K: more loops would
             not help this token by more than eps (the loss improvement of the next loops).
  'agree'    1 where loop k's argmax is loop K's (CALM's consistency target).
Loop K always answers, so the gate is trained on loops 1..K-1. 'improve' with eps 0.05 by
measurement: it needed fewer loops than 'agree' at +1% of full-depth ppl, eps mattered little,
and the normalized state beat the raw one (assets/gate-targets/README.md).

Settings are the globals below, overridden by --key=value as in train.py. One line on stderr:
gate=<file> reads=<norm|raw> target=<...> pairs=<n> base_rate=<p> heldout_bce=<base> -> <gate>.
"""

import math
import sys
import time

import numpy as np
import torch
from torch.nn import functional as F

from beyond import exits
from beyond.exits import ExitGate, gate_path, save_gate
from configurator import UserError, configure, one_line_errors
from data import batches, load_run, run_folder
from runtime import autocast, resolve_dtype, setup_device

# -----------------------------------------------------------------------------
out_dir = 'out'               # the run folder (holding ckpt.pt); the gate is written next to it
name = 'gate'                 # the gate's file out_dir/<name>.pt, and its criterion's name ('gate', 'gate-raw', ...)
reads = 'norm'                # 'norm': the RMS-normalized state H / RMS(H) | 'raw': H itself (over one fixed scale)
target = 'improve'            # 'improve': 1 where CE at loop k is within eps of the best of loops k..K | 'agree': 1 where loop k's argmax is loop K's
eps = 0.05                    # nats: the CE a token may give up to stop (target='improve')
tokens = 65536                # training tokens the gate learns from (evenly spaced windows of the train split)
holdout = 0.1                 # the fraction of those windows held out to report the gate's loss
iters = 400                   # Adam steps of the logistic regression
lr = 0.01                     # Adam's learning rate
batch_size = 4096             # (token, loop) pairs a step
seed = 1337
device = 'auto'               # 'auto' | 'cpu' | 'cuda' | 'mps'
dtype = 'auto'                # the frozen pass's precision: 'auto' | 'float32' | 'bfloat16' | 'float16'
data_dir = ''                 # where prepare.py wrote the run's data; '': the run's own
# -----------------------------------------------------------------------------
SETTINGS = {k: v for k, v in list(globals().items()) if not k.startswith('_') and k.islower()
            and (v is None or isinstance(v, (int, float, bool, str)))}
READS = ('norm', 'raw')
TARGETS = ('improve', 'agree')


# -----------------------------------------------------------------------------
# what the gate learns from

def gate_labels(ce, argmax, target, eps):
    """Labels of loops 1..K-1 from the frozen model's per-token CE (K, N) at each depth and the
    argmax (K, N) of each depth's readout: 'improve' 1 where ce[k] <= min(ce[k:]) + eps,
    'agree' 1 where argmax[k] == argmax[K-1]. Returns (K-1, N) float32."""
    if target == 'improve':
        best_later = ce.flip(0).cummin(0).values.flip(0)  # best_later[k] = min(ce[k:])
        return (ce[:-1] <= best_later[:-1] + eps).float()
    if target == 'agree':
        return (argmax[:-1] == argmax[-1:]).float()
    raise UserError(f"target must be one of {', '.join(TARGETS)}; got {target!r}")


@torch.no_grad()
def collect(model, data, n_tokens, ctx, device, batch=16):
    """One frozen pass over about n_tokens tokens of data in evenly spaced windows of the block
    size: the states after loops 1..K-1 (K-1, N, C) float32 on the CPU, the per-token CE of
    each depth (K, N) and each depth's argmax (K, N), N in window order."""
    T, K = model.config.block_size, model.config.n_loops
    n = max(1, math.ceil(n_tokens / T))
    windows = [(int(s), T) for s in np.linspace(0, len(data) - T - 1, n).astype(np.int64)]
    states, ce, argmax = [], [], []
    for x, y in batches(data, windows, batch, device):  # (one length: in window order)
        with ctx:
            hs = model.hidden_states(x, K)[1:]  # H_1 .. H_K
            ce.append(model.depth_losses(hs, y).cpu())
            argmax.append(torch.stack([model.lm_head(model.readout(h, last=True)).argmax(-1).flatten() for h in hs]).cpu())
        states.append(torch.stack([h.float().reshape(-1, h.size(-1)) for h in hs[:-1]]).cpu())
    return torch.cat(states, 1), torch.cat(ce, 1), torch.cat(argmax, 1)


def bce(gate, x, y):
    with torch.no_grad():
        return F.binary_cross_entropy_with_logits(gate.logit(x), y).item()


def fit(gate, x, y, iters, lr, batch_size, seed=0):
    """Logistic regression of labels y (M,) on states x (M, C), by Adam on minibatches. The bias
    starts at the base rate's logit, so any loss below the base rate's is learned from the state."""
    rate = y.mean().clamp(1e-4, 1 - 1e-4)
    with torch.no_grad():
        gate.linear.bias.fill_(math.log(rate / (1 - rate)))
    opt = torch.optim.Adam(gate.parameters(), lr=lr)
    g = torch.Generator().manual_seed(seed)
    for _ in range(iters):
        i = torch.randint(0, x.size(0), (min(batch_size, x.size(0)),), generator=g)
        loss = F.binary_cross_entropy_with_logits(gate.logit(x[i]), y[i])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return gate


def train_gate(model, data, n_tokens, reads, target, eps, iters, lr, batch_size, holdout, ctx, device, seed=0):
    """Collects the frozen states and trains a gate on them. Returns (gate, info): info holds the
    pairs, base rate and held-out BCE of the base rate's constant and of the gate."""
    states, ce, argmax = collect(model, data, n_tokens, ctx, device)
    y = gate_labels(ce, argmax, target, eps)  # (K-1, N)
    K1, N, C = states.shape
    n_test = int(N * holdout) // model.config.block_size * model.config.block_size  # whole windows, at the end
    train, test = slice(0, N - n_test), slice(N - n_test, N)
    x_tr, y_tr = states[:, train].reshape(-1, C), y[:, train].reshape(-1)
    x_te, y_te = states[:, test].reshape(-1, C), y[:, test].reshape(-1)
    scale = x_tr.pow(2).mean(-1).sqrt().mean().item() if reads == 'raw' else 1.0
    gate = ExitGate(C, reads, scale)
    rate = y_tr.mean().item()
    info = dict(pairs=x_tr.size(0), heldout_pairs=x_te.size(0), base_rate=rate,
                label_rate_by_loop=y.mean(1).tolist())
    fit(gate, x_tr, y_tr, iters, lr, batch_size, seed)
    if x_te.size(0):
        r = min(max(rate, 1e-4), 1 - 1e-4)
        info['heldout_bce_base'] = F.binary_cross_entropy(torch.full_like(y_te, r), y_te).item()
        info['heldout_bce'] = bce(gate, x_te, y_te)
    info['train_bce'] = bce(gate, x_tr, y_tr)
    return gate.eval(), info


# -----------------------------------------------------------------------------

def check_settings(config):
    """Every check on the settings, in one place."""
    if config['reads'] not in READS:
        raise UserError(f"reads must be one of {', '.join(READS)}; got {config['reads']!r}")
    if config['target'] not in TARGETS:
        raise UserError(f"target must be one of {', '.join(TARGETS)}; got {config['target']!r}")
    if not exits.is_gate(config['name']) or not config['name'].replace('-', '_').isidentifier():
        raise UserError(f"name must be 'gate' or start with 'gate-' (it names the criterion: gate, gate-raw, ...); "
                        f"got {config['name']!r}")
    if config['tokens'] < 1 or config['iters'] < 1 or config['batch_size'] < 1 or config['eps'] < 0 or config['lr'] <= 0:
        raise UserError("tokens, iters and batch_size must be >= 1, eps >= 0 and lr > 0")
    if not 0 <= config['holdout'] < 1:
        raise UserError(f"holdout must lie in [0, 1); got {config['holdout']}")


def main(argv):
    config = configure(SETTINGS, argv)
    check_settings(config)
    dev = setup_device(config['device'])
    model, _, data = load_run(config['out_dir'], dev, 'train', config['data_dir'] or None)
    if model.config.n_loops < 2:
        raise UserError(f"{config['out_dir']} was trained with one loop: there is no earlier loop to exit at")
    torch.manual_seed(config['seed'])
    ctx = autocast(dev, resolve_dtype(config['dtype'], dev))
    t0 = time.perf_counter()
    gate, info = train_gate(model, data, config['tokens'], config['reads'], config['target'], config['eps'],
                            config['iters'], config['lr'], config['batch_size'], config['holdout'], ctx, dev,
                            config['seed'])
    path = gate_path(run_folder(config['out_dir']), config['name'])
    save_gate(path, gate, model, dict(target=config['target'], eps=config['eps'], tokens=config['tokens'], info=info))
    print(f"gate={path} reads={config['reads']} target={config['target']} pairs={info['pairs']} "
          f"base_rate={info['base_rate']:.3f} heldout_bce={info.get('heldout_bce_base', float('nan')):.4f} -> "
          f"{info.get('heldout_bce', float('nan')):.4f} seconds={time.perf_counter() - t0:.1f}", file=sys.stderr)


if __name__ == '__main__':
    with one_line_errors('exit_gate.py'):
        main(sys.argv[1:])
