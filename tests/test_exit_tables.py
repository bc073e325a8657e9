"""
beyond/exit_tables.py, the criteria study's exit tables (assets/cpu-long-criteria's exit_tables.md): seeds
averaged, the stand-in that needs fewer loops kept, and the committed tables made again from their results.

    python -m pytest -q tests/test_exit_tables.py
"""

import json
import os

from beyond import exit_tables
from conftest import HERE


def frontier(at_01, at_05):
    """An exit_frontier record: criterion -> (loops, oracle_gap) at +1% and +5%."""
    return {'at': {t: {c: {'loops': loops, 'oracle_gap': gap} for c, (loops, gap) in at.items()}
                   for t, at in (('0.01', at_01), ('0.05', at_05))}}


def pick(criterion, target, stand_in, loops, ppl, speedup):
    return dict(criterion=criterion, target=target, stand_in=stand_in, mean_loops=loops, ppl=ppl, full_ppl=10.0,
                speedup=speedup)


def test_exit_tables_averages_seeds_and_keeps_the_stand_in_that_needs_fewer_loops(tmp_path, capsys):
    runs = [
        dict(name='out-raw_perloop-cpu-long-s1', exit_frontier=frontier({'oracle': (1.0, 0.0), 'latent': (2.0, 1.0)},
                                                                        {'oracle': (1.0, 0.0), 'latent': (1.5, 0.5)}),
             calibrated=[pick('latent', 0.01, 'copy', 2, 10.1, 1.0), pick('latent', 0.01, 'project', 3, 10.2, 2.0),
                         pick('latent', 0.05, 'copy', 1, 10.5, 3.0)]),
        dict(name='out-raw_perloop-cpu-long-s2', exit_frontier=frontier({'oracle': (1.5, 0.0), 'latent': (3.0, 1.5)},
                                                                        {'oracle': (1.0, 0.0), 'latent': (2.5, 1.5)}),
             calibrated=[pick('latent', 0.01, 'copy', 4, 10.3, 2.0), pick('latent', 0.01, 'project', 3, 10.4, 2.0),
                         pick('latent', 0.05, 'copy', 2, 10.3, 1.0)]),
        dict(name='out-norm_perloop-cpu-long-s1', exit_frontier=frontier({'oracle': (1.0, 0.0), 'latent': (None, None)},
                                                                         {'oracle': (1.0, 0.0), 'latent': (1.0, 0.0)})),
    ]
    groups = [dict(name='out-raw_perloop-cpu-long', runs=[r['name'] for r in runs[:2]]),
              dict(name='out-norm_perloop-cpu-long-s1', runs=[runs[2]['name']])]
    (tmp_path / 'results.json').write_text(json.dumps(dict(runs=runs, groups=groups)))
    exit_tables.main([str(tmp_path / 'results.json')])
    lines = capsys.readouterr().out.splitlines()
    assert '| criterion | raw_perloop (n=2) +1% | +5% | norm_perloop (n=1) +1% | +5% |' in lines
    assert '| oracle | 1.25 | 1.00 | 1.00 | 1.00 |' in lines
    assert '| latent | 2.50 (+1.25) | 2.00 (+1.00) | — | 1.00 (+0.00) |' in lines  # (norm: no pick at +1%)
    # +1%: copy and project both need 3 loops on average, project is faster; +5%: copy alone
    assert '| criterion | raw_perloop +1% | raw_perloop +5% |' in lines
    assert '| latent | 3.00, +3.0%, 2.00x (p) | 1.50 ± 0.71, +4.0%, 2.00x ± 1.41 (c) |' in lines


def test_exit_tables_makes_the_committed_tables_again(capsys):
    exit_tables.main([os.path.join(HERE, 'assets/cpu-long-criteria/results.json')])
    with open(os.path.join(HERE, 'assets/cpu-long-criteria/exit_tables.md')) as f:
        assert capsys.readouterr().out == f.read()
