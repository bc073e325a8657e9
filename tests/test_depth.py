"""
Depth both ways (docs/depth.md): random-depth training's draw and truncated backprop, and the
field's scale controls (beyond/additions.py's sandwich norm, input injection, damping; model.py's
AlphaReadout), each stated as the property it is there for. (Decoding every control as the forward: test_decoder.py.)

    python -m pytest -q tests/test_depth.py
"""

import math

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from beyond.additions import FieldGPT
from conftest import read_log, train_in_process
from model import token_diagnostics
from test_model import batch, tiny
from depth import draw_depth


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
    assert draw_depth(7, 123, mean=4, cap=16, sigma=0.5) == draw_depth(7, 123, mean=4, cap=16, sigma=0.5)
    assert all(draws(draw_depth, n=50, mean=1, cap=16, sigma=0.5) == 1)  # mean 1: always one loop


@pytest.mark.parametrize('inject', [False, True])
def test_truncated_backprop_trains_and_reads_only_the_last_loops(inject):
    model = tiny(FieldGPT, readout='raw', n_loops=4, inject=inject)
    x, y = batch()
    _, loss = model(x, y, bptt=2)
    stats = model.stats
    loss.backward()
    got = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    # by hand: loops 1 and 2 without a graph, then loops 3 and 4 read out (per-loop CE over the two)
    with torch.no_grad():
        h0 = model.embed(x)
        h2 = model.loop(model.loop_input(model.loop(h0), 1, h0))
    e = model.embed(x)  # (with a graph: what injection feeds the trained loops)
    h3 = model.loop(model.loop_input(h2, 2, e))
    h4 = model.loop(model.loop_input(h3, 3, e))
    want = sum(F.cross_entropy(model.lm_head(model.readout(h, False)).flatten(0, 1), y.flatten()) for h in (h3, h4)) / 2
    want.backward()
    assert torch.allclose(loss, want, atol=1e-5)
    for n, p in model.named_parameters():
        assert (p.grad is None) == (n not in got), n
        if p.grad is not None:
            assert torch.allclose(got[n], p.grad, atol=1e-5), n
    assert torch.isnan(stats['ce'][:2]).all() and torch.isfinite(stats['ce'][2:]).all()  # loops 1-2 not read
    assert torch.allclose(stats['h_norm'], torch.stack([h.norm(dim=-1).mean() for h in (model.loop(h0), h2, h3, h4)]))
    # the position embedding reaches the loss only through the loops: through the truncated ones
    # not at all, through injection into the trained ones, yes
    assert ('transformer.wpe.weight' in got) == inject


def test_sandwich_norm_bounds_every_update_whatever_the_weights():
    # a pre-norm block's update is already blind to the state's scale (its input is normalized) but
    # grows with its output weights, which training is free to grow; the sandwich norm bounds it
    b, plain = tiny(FieldGPT, sandwich_norm=True).transformer.h[0], tiny().transformer.h[0]
    with torch.no_grad():
        for m in (b, plain):
            m.attn.c_proj.weight.mul_(100)
            m.mlp.w_down.weight.mul_(100)
    x = torch.randn(2, 8, 32)
    update = (b(x) - x).pow(2).mean(-1).sqrt()  # two normalized updates of unit gain: RMS at most 2
    assert update.max() < 2.0 + 1e-3
    assert (plain(x) - x).pow(2).mean(-1).sqrt().min() > 10  # without it, the update is the weights' size
    plain.load_state_dict(b.state_dict(), strict=False)  # the same weights, less the sublayers' output norms
    assert not torch.equal(b(x), plain(x))
    for sub in (b.attn, b.mlp):
        sub._forward_hooks.clear()
    assert torch.equal(b(x), plain(x))  # the norms, hooked on the sublayers, are all that the setting adds


def test_damping_contracts_the_carried_state_and_injection_adds_the_embedding():
    h, e = torch.randn(2, 8, 32), torch.randn(2, 8, 32)
    damped = tiny(FieldGPT, damping=True)
    assert torch.equal(damped.loop_input(h, 0, e), h)  # loop 1 reads the embedding as it is
    assert torch.allclose(damped.loop_input(h, 1, e), h / (1 + math.exp(-2.0)))  # sigmoid(2) at init, the released value
    injected = tiny(FieldGPT, inject=True)
    assert torch.equal(injected.loop_input(h, 0, e), h) and torch.equal(injected.loop_input(h, 2, e), h + e)


def test_the_alpha_readout_spans_the_normalized_readout_to_the_raw_one():
    model = tiny(readout='alpha')
    x, y = batch()
    with torch.no_grad():
        states = model.hidden_states(x)
        h = states[-1]
        model.alpha_logit.fill_(60.0)  # alpha = 1: the raw readout, exactly H
        assert torch.allclose(model.readout(h, True), h, rtol=1e-6)
        model.alpha_logit.fill_(-60.0)  # alpha = 0: RMS s_ref whatever the scale, the normalized readout
        model.log_s_ref.fill_(math.log(3.0))
        r = model.readout(h, True)
        assert torch.allclose(r.pow(2).mean(-1).sqrt(), torch.full(h.shape[:-1], 3.0), rtol=1e-5)
        assert torch.allclose(model.readout(100 * h, True), r, rtol=1e-5)
    radial = {}
    for logit in (-60.0, 0.0, 60.0):
        with torch.no_grad():
            model.alpha_logit.fill_(logit)
        radial[logit] = token_diagnostics(model, states, y)['radial'][-1].nanmean().item()
    # what the loss can see of the scale: nothing at alpha = 0 (the blind spot), more as alpha grows
    assert radial[-60.0] < 1e-6 < radial[0.0] < radial[60.0]


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


def test_the_table_of_designs_gives_each_verdict_from_its_numbers():
    from beyond import depth_table
    from configurator import UserError

    def group(name, radial, norms, lemma_s=None):  # norms: mean ||H_k|| at k = 1..16; lemma_s: Lemma 2's s, loops 1..30
        per_k = [dict(K=k, ppl=10.0 - k / 10 if k <= 4 else 9.6 + (k - 4) / 10, norm_mean=n, norm_p99=2 * n,
                      radial=radial, angular=1e-3) for k, n in enumerate(norms, 1)]
        mean = dict(trained_K=4, per_K=per_k, config=dict(n_embd=100), lemma=dict(s=lemma_s) if lemma_s else None)
        return dict(name=name, n=1, mean=mean, std={})

    small, large = [50.0] * 16, [1500.0] * 16  # RMS 5 and 150 at d = 100
    growing = [100.0 + 2 * k for k in range(30)]  # s grows 1.49x from loop 4 to loop 30
    still = [100.0] * 3 + [110.0] * 26 + [113.0]  # s from loop 4 to 30 within 5% (2.7%)
    out = depth_table.table({'groups': [group('raw', 2e-2, large, still), group('norm', 1e-17, large, growing),
                                        group('sandwich', 1e-17, small), group('interloop', 1e-17, large, still)]})
    rows = {line.split(' | ')[0][2:]: line for line in out.splitlines()[2:]}
    assert rows['raw'].endswith('| visible |') and rows['norm'].endswith('| hidden, drifted |')
    assert rows['sandwich'].endswith('| hidden, held |')  # (no sweep: nothing says the scale stays put)
    assert rows['interloop'].endswith('| removed |')  # hidden from the loss, and the loops leave it alone
    edge = depth_table.table({'groups': [group('above', 2 * depth_table.VISIBLE, large, growing),
                                         group('below', depth_table.VISIBLE / 2, large, growing)]})
    assert '| visible |' in edge.splitlines()[2] and '| hidden, drifted |' in edge.splitlines()[3]  # at the threshold
    assert '| 9.600 | +4.2% | +12.5% |' in rows['raw']  # best K<=4 9.6 (K=4); K=8 10.0, K=16 10.8
    drawn = group('raw', 2e-2, large, still)
    drawn['mean'].update(random_depth=True, depth=dict(draw=dict(n_loops=4, depth_sigma=1.5)))
    assert '| raw | random, mean 4, σ 1.5 | 9.900 |' in depth_table.table({'groups': [drawn]})  # the draw, named
    deep = group('raw', 2e-2, large, still)  # a mean of 8 loops: the best is over K <= 8, K=16 is past it
    deep['mean'].update(trained_K=8, random_depth=True, depth=dict(draw=dict(n_loops=8, depth_sigma=1.0)))
    deep['mean']['per_K'][7]['ppl'] = 9.0
    assert '| 9.000 | +0.0% | +20.0% |' in depth_table.table({'groups': [deep]})  # K <= 4 would give 9.6
    with pytest.raises(UserError, match='max_loops 16'):
        depth_table.table({'groups': [group('short', 1e-9, small[:8])]})
