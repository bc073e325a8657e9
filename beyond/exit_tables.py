"""
The early-exit page's two tables from a results.json of eval_depth.py (its seeds grouped by
condition as eval_depth.py grouped them): every criterion against the oracle, teacher-forced;
and every criterion's calibrated pick, causal, with the stand-in that needs fewer loops.

    python assets/cpu-long-criteria/table.py assets/cpu-long-criteria/results.json
"""

import json
import re
import statistics
import sys


def mean_std(values):
    return statistics.mean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def fmt(values, digits=2, suffix=''):
    m, s = mean_std(values)
    return f"{m:.{digits}f}{suffix}" + (f" ± {s:.{digits}f}" if len(values) > 1 and s >= 0.5 * 10 ** -digits else '')


def label(group):
    return re.sub(r'^out-|-cpu-long(-s\d+)?$', '', group['name'])  # out-raw_perloop-cpu-long(-s1) -> raw_perloop


def main(path):
    with open(path) as f:
        results = json.load(f)
    runs = results['runs']
    by_name = {run['name']: run for run in runs}
    groups = {label(g): [by_name[name] for name in g['runs']] for g in results['groups']}
    criteria = [c for c in runs[0]['exit_frontier']['at']['0.01'] if c != 'oracle']

    print("Teacher-forced mean loops within +1% / +5% of full-depth ppl (mean over seeds; in brackets: "
          "loops above the oracle's)\n")
    print('| criterion | ' + ' | '.join(f"{c} (n={len(g)}) +1% | +5%" for c, g in groups.items()) + ' |')
    print('|---|' + '---|---|' * len(groups))
    for c in ['oracle'] + criteria:
        cells = []
        for g in groups.values():
            for target in ('0.01', '0.05'):
                loops = [r['exit_frontier']['at'][target][c]['loops'] for r in g]
                gaps = [r['exit_frontier']['at'][target][c]['oracle_gap'] for r in g]
                cells.append('—' if None in loops else f"{statistics.mean(loops):.2f}" +
                             ('' if c == 'oracle' else f" (+{statistics.mean(gaps):.2f})"))
        print(f"| {c} | " + ' | '.join(cells) + ' |')

    calibrated = {c: g for c, g in groups.items() if all('calibrated' in r for r in g)}
    if not calibrated:
        return
    print("\nCalibrated on the first half, causal on the held-back half: mean loops, ppl against full depth, "
          "decode speed-up over fixed K=4 (each seed's own, same run), with the stand-in that needs fewer "
          "loops on average (c: copy, p: project)\n")
    print('| criterion | ' + ' | '.join(f"{c} +1% | {c} +5%" for c in calibrated) + ' |')
    print('|---|' + '---|---|' * len(calibrated))
    for c in criteria:
        cells = []
        for g in calibrated.values():
            for target in (0.01, 0.05):
                best = None
                for stand_in in ('copy', 'project'):
                    picks = [p for r in g for p in r['calibrated']
                             if p['criterion'] == c and p['target'] == target and p['stand_in'] == stand_in]
                    if len(picks) != len(g):
                        continue
                    key = (statistics.mean(p['mean_loops'] for p in picks), -statistics.mean(p['speedup'] for p in picks))
                    if best is None or key < best[0]:
                        best = (key, stand_in, picks)
                if best is None:
                    cells.append('—')
                    continue
                _, stand_in, picks = best
                rel = [100 * (p['ppl'] / p['full_ppl'] - 1) for p in picks]
                cells.append(f"{fmt([p['mean_loops'] for p in picks])}, {statistics.mean(rel):+.1f}%, "
                             f"{fmt([p['speedup'] for p in picks], suffix='x')} ({stand_in[0]})")
        print(f"| {c} | " + ' | '.join(cells) + ' |')


if __name__ == '__main__':
    main(sys.argv[1])
