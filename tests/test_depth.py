"""
Random depth (depth.py; docs/depth.md): the K each training step runs, drawn from (seed, iteration) alone,
Poisson's draw with its mean, cap and tail, and the progressive draw; a run with
random depth resumes as the uninterrupted one and logs the loops it ran, and one compiled loop serves every K.
(The truncated backprop the draws train with is beyond/additions.py's: tests/test_additions.py.)

    python -m pytest -q tests/test_depth.py
"""

import os

import numpy as np
import pytest
import torch

import depth
from beyond.additions import FieldGPT
from conftest import read_log, train_in_process
from depth import draw_depth
from test_model import batch, tiny


# -----------------------------------------------------------------------------
# the draws

def test_the_depth_draw_has_mean_n_loops_a_cap_a_tail_and_no_rank():
    def draws(rule, n=4000, **kw):
        return np.array([rule(7, it, **kw) for it in range(n)])

    k = draws(draw_depth, mean=4, cap=64, sigma=0.5)
    assert k.min() >= 1 and abs(k.mean() - 4) < 0.1  # mean K = n_loops (4000 draws: std of the mean ~0.03)
    # a rule that forgets the 1 it adds (lambda of mean n_loops, not n_loops - 1) misses the mean by 1
    def wrong(seed, it, *, mean, cap, sigma):
        return draw_depth(seed, it, mean=mean + 1, cap=cap, sigma=sigma)
    assert abs(draws(wrong, mean=4, cap=64, sigma=0.5).mean() - 4) > 0.5
    assert draws(draw_depth, mean=4, cap=6, sigma=0.5).max() == 6  # the cap is reached and never passed
    heavy = draws(draw_depth, mean=4, cap=64, sigma=1.0)
    assert (heavy >= 12).mean() > 2 * (k >= 12).mean() > 0  # a larger sigma: more deep draws
    # and the same mean (E[lambda] = mean - 1 at any sigma: config/random_depth.py's 1.0 here; the std of
    # 4000 draws' mean ~0.07, so a lambda 15% off its mean of 3 is seen)
    assert abs(heavy.mean() - 4) < 0.25
    assert draw_depth(7, 123, mean=4, cap=16, sigma=0.5) == draw_depth(7, 123, mean=4, cap=16, sigma=0.5)
    assert all(draws(draw_depth, n=50, mean=1, cap=16, sigma=0.5) == 1)  # mean 1: always one loop


def test_progressive_draw_is_detached_loops_then_graph_loops_within_the_cap():
    cap = 8
    draws = np.array([depth.draw_progressive(5, it, cap=cap) for it in range(4000)])
    K, k = draws[:, 0], draws[:, 1]

    def follows_the_rule(K, k):  # n = K - k ~ U[0, cap), then k ~ U[1, cap - n]
        n = K - k
        if (k < 1).any() or (K > cap).any():
            return False
        freq = np.bincount(n, minlength=cap) / len(n)
        if len(freq) > cap or (freq == 0).any():
            return False
        k_mean = np.array([k[n == v].mean() for v in range(cap)])
        return (np.abs(freq - 1 / cap).max() < 0.03 and np.abs(k_mean - (cap - np.arange(cap) + 1) / 2).max() < 0.5)

    assert follows_the_rule(K, k)
    assert not follows_the_rule(K, K)                                  # a wrong rule: every loop with a graph
    rng = np.random.default_rng(0)
    assert not follows_the_rule(rng.integers(1, cap + 1, 4000), np.ones(4000, dtype=int))  # or one graph loop alone
    assert depth.draw_progressive(5, 17, cap=cap) == depth.draw_progressive(5, 17, cap=cap)


# -----------------------------------------------------------------------------
# random depth in a run: resumed, logged, compiled

@pytest.mark.parametrize('extra', [(), ('--random_depth=True', '--max_loops=6', '--bptt=2',
                                         '--model_class=beyond.additions.FieldGPT')])
def test_random_depth_resumes_as_the_uninterrupted_run_and_logs_the_loops_run(tiny_data, tmp_path, extra):
    common = ('--eval_interval=5', '--dropout=0.1', '--max_iters=10', '--n_loops=3', *extra)
    train_in_process(tiny_data, tmp_path / 'full', *common)
    train_in_process(tiny_data, tmp_path / 'split', *common, '--max_iters=5')  # (a later setting wins)
    train_in_process(tiny_data, tmp_path / 'split', *common, '--init_from=resume')
    full, split = read_log(tmp_path / 'full'), read_log(tmp_path / 'split')
    assert [e['loss'] for e in full if e['kind'] == 'train'] == [e['loss'] for e in split if e['kind'] == 'train']
    ran = [sum(v is not None for v in e['h_norm']) for e in full if e['kind'] == 'train']  # the loops each step ran
    evals = [e for e in full if e['kind'] == 'eval']
    if extra:
        assert len(set(ran)) > 1 and max(ran) <= 6  # K drawn per step, at most the cap
        assert all(len(e['val_loss']) == 6 for e in evals)  # evaluated to the cap
        # per-loop CE over the last two loops run: a step that ran K loops read loops K-1 and K
        for e in full:
            if e['kind'] == 'train':
                read = [i + 1 for i, v in enumerate(e['ce']) if v is not None]
                K = sum(v is not None for v in e['h_norm'])
                assert read == list(range(max(1, K - 1), K + 1)), (read, K)
    else:
        assert set(ran) == {3} and all(len(e['val_loss']) == 3 for e in evals)


def test_random_depth_compiles_one_loop_that_serves_every_k(monkeypatch):
    from contextlib import nullcontext
    from torch._dynamo.utils import counters
    import train
    real = torch.compile
    monkeypatch.setattr(torch, 'compile', lambda fn, **kw: real(fn, backend='eager'))  # (dynamo's graphs, no codegen)
    x, y = batch()
    graphs = {}
    for random_depth in (True, False):
        model = tiny(FieldGPT, readout='raw', n_loops=3)
        opt = train.make_optimizer(model, learning_rate=1e-3, betas=(0.9, 0.99), weight_decay=0.0)
        scaler = torch.amp.GradScaler('cpu', enabled=False)
        step_model = train.wrap_for_training(model, False, True, 'cpu', random_depth)
        torch._dynamo.reset()
        counters.clear()
        seen = []
        # (the whole model compiled: each new K a graph of its own, not a symbolic K that fails to trace)
        with torch._dynamo.config.patch(automatic_dynamic_shapes=False):
            for depths in ((1, 3, 5), (7, 4)):
                for K in depths:
                    train.train_step(step_model, opt, scaler, x[None], y[None], ctx=nullcontext(), grad_clip=1.0,
                                     n_loops=K, bptt=2)
                seen.append(counters['stats']['unique_graphs'])
        graphs[random_depth] = seen
    torch._dynamo.reset()
    # the loop alone: a graph for each way a loop can run (with or without a graph of its own, its input
    # with or without one), none for a new K
    first, then = graphs[True]
    assert first <= 4 and then == first
    assert graphs[False][1] >= graphs[False][0] + 2  # the whole model compiled: a graph for each new K


def test_a_step_of_the_progressive_draw_is_the_draw_its_settings_give():
    """step_depth: 'progressive' is draw_progressive with the run's seed and cap, and without random_depth the
    trained K and c.bptt."""
    from types import SimpleNamespace
    c = SimpleNamespace(random_depth=True, depth_draw='progressive', seed=5, max_loops=6, bptt=3, n_loops=4,
                        depth_sigma=0.5)
    draws = [depth.step_depth(c, it) for it in range(200)]
    assert draws == [depth.draw_progressive(5, it, cap=6) for it in range(200)]
    assert depth.step_depth(SimpleNamespace(**dict(c.__dict__, random_depth=False)), 7) == (None, 3)


def test_the_random_depth_overlay_trains_any_condition_with_bptt_on_the_model_that_has_it():
    # config/random_depth.py on a paper condition: truncated backprop is beyond/additions.py's, so the run's model is
    # FieldGPT (the paper's with it), the condition's loss and readout kept; a class without it is refused in one line
    from conftest import HERE, settings
    from configurator import UserError
    config = os.path.join(HERE, 'config')
    for name in ('raw_perloop.py', 'norm_terminal.py', 'sandwich_perloop.py'):
        alone = settings(os.path.join(config, name))
        c = settings(os.path.join(config, name), os.path.join(config, 'random_depth.py'))
        assert c['model_class'] == 'beyond.additions.FieldGPT', name
        assert c['random_depth'] and c['bptt'] == 8 and c['max_loops'] == 32 and c['depth_sigma'] == 1.0
        assert (c['readout'], c['loss']) == (alone['readout'], alone['loss']) and c['out_dir'] == alone['out_dir'] + '-rd'
    with pytest.raises(UserError, match='ExitTrainedGPT does not .* beyond.additions.FieldGPT does'):
        settings(os.path.join(config, 'raw_perloop_exit.py'), os.path.join(config, 'random_depth.py'))
