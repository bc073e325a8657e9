"""
The early-exit page's two tables (docs/early-exit.md) from a results.json of eval_depth.py, its
seeds grouped by condition as eval_depth.py grouped them: every exit criterion against the
oracle, teacher-forced; and every criterion's calibrated pick, causal, with the stand-in that
needs fewer loops.

    python -m beyond.exit_tables assets/cpu-long-criteria/results.json    # -> assets/cpu-long-criteria/exit_tables.md

Prints markdown to stdout.
"""

import argparse
import json
import math
import re

from report import mean_std, pm


def short_name(group):
    """The condition a group of the 4-epoch runs is: out-raw_perloop-cpu-long(-s1) -> raw_perloop."""
    return re.sub(r'^out-|-cpu-long(-s\d+)?$', '', group['name'])


def fmt(values, digits=2, suffix=''):
    """The mean over seeds, its suffix, and ' ± std' where the spread shows at this many digits."""
    mean, std = mean_std(values)
    shown = std if math.isfinite(std) and std >= 0.5 * 10 ** -digits else None
    head, sep, tail = pm(mean, shown, f'.{digits}f').partition(' ± ')
    return head + suffix + sep + tail


def frontier_table(groups, criteria):
    """Teacher-forced: the mean loops a criterion needs at +1% and +5%, and its gap to the oracle."""
    lines = ["Teacher-forced mean loops within +1% / +5% of full-depth ppl (mean over seeds; in brackets: "
             "loops above the oracle's)\n",
             '| criterion | ' + ' | '.join(f"{c} (n={len(g)}) +1% | +5%" for c, g in groups.items()) + ' |',
             '|---|' + '---|---|' * len(groups)]
    for c in ['oracle'] + criteria:
        cells = []
        for g in groups.values():
            for target in ('0.01', '0.05'):
                loops = [r['exit_frontier']['at'][target][c]['loops'] for r in g]
                gaps = [r['exit_frontier']['at'][target][c]['oracle_gap'] for r in g]
                cells.append('—' if None in loops else f"{mean_std(loops)[0]:.2f}" +
                             ('' if c == 'oracle' else f" (+{mean_std(gaps)[0]:.2f})"))
        lines.append(f"| {c} | " + ' | '.join(cells) + ' |')
    return lines


def best_pick(g, criterion, target):
    """The stand-in whose calibrated picks (one a seed) need fewer loops on average, then the faster:
    (stand_in, picks), or None where some seed has no pick."""
    best = None
    for stand_in in ('copy', 'project'):
        picks = [p for r in g for p in r['calibrated']
                 if p['criterion'] == criterion and p['target'] == target and p['stand_in'] == stand_in]
        if len(picks) != len(g):
            continue
        key = (mean_std([p['mean_loops'] for p in picks])[0], -mean_std([p['speedup'] for p in picks])[0])
        if best is None or key < best[0]:
            best = (key, stand_in, picks)
    return None if best is None else best[1:]


def calibrated_table(calibrated, criteria):
    """Causal: each criterion's calibrated pick per target, its ppl against full depth and speed-up."""
    lines = ["\nCalibrated on the first half, causal on the held-back half: mean loops, ppl against full depth, "
             "decode speed-up over fixed K=4 (each seed's own, same run), with the stand-in that needs fewer "
             "loops on average (c: copy, p: project)\n",
             '| criterion | ' + ' | '.join(f"{c} +1% | {c} +5%" for c in calibrated) + ' |',
             '|---|' + '---|---|' * len(calibrated)]
    for c in criteria:
        cells = []
        for g in calibrated.values():
            for target in (0.01, 0.05):
                best = best_pick(g, c, target)
                if best is None:
                    cells.append('—')
                    continue
                stand_in, picks = best
                rel = [100 * (p['ppl'] / p['full_ppl'] - 1) for p in picks]
                cells.append(f"{fmt([p['mean_loops'] for p in picks])}, {mean_std(rel)[0]:+.1f}%, "
                             f"{fmt([p['speedup'] for p in picks], suffix='x')} ({stand_in[0]})")
        lines.append(f"| {c} | " + ' | '.join(cells) + ' |')
    return lines


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('results', help="eval_depth.py's results.json, with exit frontiers (and calibrated picks)")
    args = p.parse_args(argv)
    with open(args.results) as f:
        results = json.load(f)
    runs = results['runs']
    by_name = {run['name']: run for run in runs}
    groups = {short_name(g): [by_name[name] for name in g['runs']] for g in results['groups']}
    criteria = [c for c in runs[0]['exit_frontier']['at']['0.01'] if c != 'oracle']
    lines = frontier_table(groups, criteria)
    calibrated = {c: g for c, g in groups.items() if all('calibrated' in r for r in g)}
    if calibrated:
        lines += calibrated_table(calibrated, criteria)
    print('\n'.join(lines))


if __name__ == '__main__':
    main()
