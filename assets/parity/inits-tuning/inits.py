"""How often training offers a checkpoint that extrapolates, initialization by initialization (docs/tasks.md#two-
initializations): for one variant's runs (their log.jsonl), the evaluations whose probe error is 0 (every 48-bit probe
string right at K=96 and 192) in each initialization, and the share of runs and of initializations with at least one.
One markdown row; with --header, the table's head first.

    python assets/parity/inits-tuning/inits.py --name=NAME --inits=2 [--every=50] LOG...
"""
import argparse
import bisect
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', '..'))

from train import init_starts  # noqa: E402


def evaluations(path):
    """(iteration, probe error) of each evaluation past the first in a run's log."""
    with open(path) as f:
        return [(e['iter'], e['select']['probe_error']) for e in map(json.loads, f)
                if e.get('kind') == 'eval' and e['iter'] > 0]


def perfect_by_init(evals, inits, every=1):
    """The count of evaluations with probe error 0 in each initialization, as train.py cuts the run's iterations (the
    last evaluation's, the run's end) into inits; an evaluation at an initialization's start is the one before's (it ran
    before the fresh start). Only the evaluations at multiples of every."""
    starts = init_starts(max(it for it, _ in evals), inits)
    counts = [0] * inits
    for it, error in evals:
        if it % every == 0:
            counts[bisect.bisect_left(starts, it) - 1] += error == 0
    return counts


def row(name, paths, inits, every):
    counts = [perfect_by_init(evaluations(p), inits, every) for p in paths]
    runs = sum(any(c) for c in counts)
    tried = sum(c > 0 for run in counts for c in run)
    seeds = ', '.join('+'.join(map(str, c)) for c in counts)
    return f"| {name} | {runs}/{len(paths)} | {tried}/{len(paths) * inits} | {seeds} |"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--name', required=True, help="the variant's name in the table")
    p.add_argument('--inits', type=int, default=1, help='the initializations each run trained')
    p.add_argument('--every', type=int, default=1, help='only the evaluations at multiples of this many steps')
    p.add_argument('--header', action='store_true', help="the table's head first")
    p.add_argument('logs', nargs='+', help="the runs' log.jsonl files, one per seed")
    a = p.parse_args(argv)
    if a.header:
        print('| initializations, learning rate | runs with a probe-perfect evaluation | initializations with one | such evaluations, seed by '
              'seed (each initialization\'s) |\n|---|---|---|---|')
    print(row(a.name, a.logs, a.inits, a.every))


if __name__ == '__main__':
    sys.exit(main())
