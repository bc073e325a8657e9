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
