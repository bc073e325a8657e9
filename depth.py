"""
Random depth (docs/depth.md; config/random_depth.py, config/parity.py): the K each training step runs,
drawn per iteration from (seed, iteration) alone, so every rank runs the same K (DDP needs one graph
shape) and a resumed run draws what it would have. train.py asks step_depth at every iteration.
"""

import math

import numpy as np


def draw_depth(seed, it, *, mean, cap, sigma):
    """K for iteration `it` of random-depth training: 1 + Poisson(lambda) with lambda log-normal of mean
    mean - 1 (Huginn's draw, Geiping et al. 2025: a Poisson's mean drawn per step gives a heavy tail of
    deep draws, which train the loops past the mean), capped at cap."""
    rng = np.random.default_rng([seed, it, 2])
    lam = (mean - 1) * math.exp(sigma * rng.standard_normal() - sigma ** 2 / 2)  # E[lam] = mean - 1
    return int(min(cap, 1 + rng.poisson(lam)))


def draw_progressive(seed, it, *, cap):
    """(K, graph loops) for iteration `it` of the progressive loss (Bansal et al. 2022, DeepThinking): n ~ U[0, cap)
    loops run without a graph, then k ~ U[1, cap - n] with one, so K = n + k <= cap. The loss reads the k graph
    loops (truncated backprop through k): a loop learns to improve whatever state it is handed, not to reach
    the answer from the embedding in a fixed number of loops."""
    rng = np.random.default_rng([seed, it, 3])
    n = int(rng.integers(0, cap))
    k = int(rng.integers(1, cap - n + 1))
    return n + k, k


def step_depth(c, it):
    """(K, bptt) of training iteration `it` under the settings c: K None (the trained K) and c.bptt without
    random_depth; else depth_draw's draw ('poisson': draw_depth, with c.bptt; 'progressive': its own bptt)."""
    if not c.random_depth:
        return None, c.bptt
    if c.depth_draw == 'progressive':
        return draw_progressive(c.seed, it, cap=c.max_loops)
    return draw_depth(c.seed, it, mean=c.n_loops, cap=c.max_loops, sigma=c.depth_sigma), c.bptt


def deepest(c):
    """The deepest K a training step can run, evaluated during training and logged by a train line: max_loops with
    random_depth, else n_loops."""
    return c.max_loops if c.random_depth else c.n_loops
