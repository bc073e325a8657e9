"""
beyond/depth_table.py, the table of designs (assets/depth's designs.md): each design's verdict (visible, hidden
and drifted or held, removed) from its numbers, the thresholds at their edges, the random draw named, and the
best perplexity over the trained depth.

    python -m pytest -q tests/test_depth_table.py
"""

import pytest

from beyond import depth_table
from configurator import UserError


def test_the_table_of_designs_gives_each_verdict_from_its_numbers():
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
    # the edges themselves, as the docstring writes them: r >= 1e-3 is visible, an RMS of DRIFTED is drifted
    assert depth_table.verdict(1e-3, 1.0) == 'visible' and depth_table.verdict(0.999e-3, 1.0) == 'hidden, held'
    assert depth_table.verdict(None, depth_table.DRIFTED) == 'hidden, drifted'
    assert depth_table.verdict(None, 0.999 * depth_table.DRIFTED) == 'hidden, held'
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


def test_what_the_page_reads_beside_the_table_random_against_fixed_each_seed_and_the_draws():
    """Random depth against the fixed run of its condition (names without the draw's tag and the seed), each seed of a
    group of several, and the draws of K: each number recomputed here from the per-K perplexities and depth.draw_depth."""
    import numpy as np
    import depth

    def run(name, ppl, seed=1, random=False):  # ppl: at K = 1..16
        return dict(name=name, seed=seed, trained_K=4, per_K=[dict(K=k, ppl=p) for k, p in enumerate(ppl, 1)],
                    depth=dict(draw=dict(n_loops=4, depth_sigma=1.0, max_loops=32)) if random else None,
                    curve=dict(iter=[0, 50, 120]))
    fixed = run('out-x-cpu-long-s1', [6.0, 5.0, 5.5, 5.2] + [6.0] * 12)
    rd = [run(f'out-x-rd-cpu-long-s{s}', [5.8, 5.65, 5.4 + s / 5, 5.9] + [6.5] * 3 + [6.6 + s] + [7.0] * 8, s, True)
          for s in (1, 2)]
    groups = [dict(name='out-x-cpu-long-s1', n=1, runs=[fixed['name']], mean=dict(per_K=fixed['per_K'], trained_K=4)),
              dict(name='out-x-rd-cpu-long', n=2, runs=[r['name'] for r in rd],
                   mean=dict(per_K=[dict(K=k + 1, ppl=(a['ppl'] + b['ppl']) / 2) for k, (a, b) in
                                    enumerate(zip(rd[0]['per_K'], rd[1]['per_K']))], trained_K=4, random_depth=True))]
    results = dict(groups=groups, runs=[fixed] + rd)
    row = depth_table.against_fixed(results).splitlines()[-1]
    assert row == f"| out-x-rd-cpu-long (2 seeds) | 5.900 | 5.200 | {100 * (5.9 / 5.2 - 1):+.1f}% | 2: 5.650 | 2: 5.000 | " \
                  f"{100 * (5.65 / 5.0 - 1):+.1f}% |"   # the mean's best is K=2 (K=3: 5.7), the fixed run's too
    seeds = depth_table.per_seed(results).splitlines()[-2:]
    assert seeds[0] == f"| out-x-rd-cpu-long-s1 | 3: 5.600 | {100 * (7.6 / 5.6 - 1):+.1f}% | {100 * (7.0 / 5.6 - 1):+.1f}% | 3: 5.600 | - |"
    assert seeds[1].startswith('| out-x-rd-cpu-long-s2 | 2: 5.650 |')   # (5.8 at K=3)
    ks = np.array([depth.draw_depth(1, it, mean=4, cap=32, sigma=1.0) for it in range(120)])
    line = depth_table.draws(results).splitlines()[-1]
    assert line == (f'| mean 4, σ 1, at most 32 | 1 | 120 | 1 | {ks.mean():.2f} | {100 * (ks == 1).mean():.1f}% | '
                    f'{100 * (ks <= 2).mean():.1f}% | {100 * (ks >= 4).mean():.1f}% | {100 * (ks >= 8).mean():.1f}% | '
                    f'{100 * (ks >= 16).mean():.1f}% |')
    assert depth_table.condition_of('out-raw_perloop-rd1.5-cpu-long-s1') == 'out-raw_perloop-cpu-long'


def test_past_training_reads_the_largest_norms_the_clamp_and_lemma_2_at_the_trained_k_and_the_last_loop():
    per_k = [dict(K=k, ppl=5.0, norm_mean=10.0 * k, norm_p99=20.0 * k, norm_max=30.0 * k, radial=1e-17, angular=1e-3,
                  clamp=dict(ppl=6.0 + k, delta_loss=0.1)) for k in range(1, 17)]
    s = [100.0 + k for k in range(30)]   # s at loops 1..30: 103 at K=4, 129 after the last
    g = dict(name='g', n=1, mean=dict(trained_K=4, per_K=per_k, lemma=dict(s=s)))
    row = depth_table.past_training({'groups': [g, dict(g, name='none', mean=dict(g['mean'], lemma=None))]}).splitlines()
    assert row[-2] == f'| g | 120.0 | 320.0 | 480.0 | 22.0 | 103.0 | 129.0 (loop 30) | {129 / 103:.2f} |'
    assert row[-1] == '| none | 120.0 | 320.0 | 480.0 | 22.0 | - | - | - |'   # no Lemma 2 sweep
