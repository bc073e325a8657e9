"""What each run of a task study cost (assets/parity/reach, assets/addition/reach): the wall seconds study.sh's
task_seed timed, from OUT/logs alone, a markdown table on stdout, one row a run.

    python assets/task_costs.py assets/parity/reach > assets/parity/reach/costs.md
    python assets/task_costs.py OUT --seeds="2501 2502"   # those seeds' runs alone (study.sh's seeds merged)

Each run's logs/<name>-s<seed>.wall (its training: train.py's whole run, evaluations and the select's reads included)
and logs/score-s<seed>.wall (its scoring by python -m beyond.tasks), and, where the study scored it again in
bfloat16, logs/score-bf16-s<seed>.wall; then a row of the median and the largest of each column. Each is one process
on one thread, beside the study's other lane.
"""
import argparse
import glob
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))

from configurator import UserError, error_line  # noqa: E402

COLUMNS = (('training', '{name}-s{seed}.wall'), ('scoring', 'score-s{seed}.wall'),
           ('scoring in bfloat16', 'score-bf16-s{seed}.wall'))


def seconds(path):
    """The wall seconds a .wall file holds (bash's time, TIMEFORMAT=%R), or None where there is none."""
    if not os.path.isfile(path):
        return None
    with open(path) as f:
        text = f.read().strip()
    try:
        return float(text)
    except ValueError:
        raise UserError(f"{path}: {text[:40]!r} is not a number of seconds (a run stopped before its timer wrote?)")


def table(out, seeds=None):
    """The table of the runs in out/logs (of seeds alone, a list of seeds as strings, where given)."""
    logs = os.path.join(out, 'logs')
    runs = sorted((m[1], m[2]) for p in glob.glob(os.path.join(logs, '*-s*.wall'))
                  if (m := re.fullmatch(r'([\w-]+)-s(\d+)\.wall', os.path.basename(p)))
                  and m[1] != 'score' and not m[1].startswith('score-'))  # (the scorings': score-s*, score-bf16-s*)
    if not runs:
        raise UserError(f"{logs} holds no <name>-s<seed>.wall: not a task study's OUT (study.sh's task_seed times them)")
    if seeds is not None:
        missing = sorted(set(seeds) - {s for _, s in runs}, key=int)
        if missing:
            raise UserError(f"{logs} holds no run of seed {', '.join(missing)} (--seeds names the seeds of its runs)")
        runs = [(t, s) for t, s in runs if s in seeds]
    rows = {(t, s): [seconds(os.path.join(logs, name.format(name=t, seed=s))) for _, name in COLUMNS] for t, s in runs}
    shown = [i for i in range(len(COLUMNS)) if any(r[i] is not None for r in rows.values())]
    cell = lambda v: '-' if v is None else f'{v:.1f}'  # noqa: E731
    lines = ['| run | ' + ' | '.join(f'{COLUMNS[i][0]}, s' for i in shown) + ' |', '|---|' + '---|' * len(shown)]
    for (t, s), r in rows.items():
        lines.append(f'| out-{t}-s{s} | ' + ' | '.join(cell(r[i]) for i in shown) + ' |')
    summary = []
    for i in shown:
        values = [r[i] for r in rows.values() if r[i] is not None]
        summary.append(f'**median {statistics.median(values):.1f}, largest {max(values):.1f}**')
    lines.append(f'| **{len(rows)} runs** | ' + ' | '.join(summary) + ' |')
    return '\n'.join(lines) + '\n'


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('out', help="the study's OUT (its logs/ holds the .wall files)")
    p.add_argument('--seeds', default=None, help="only these seeds' runs, comma- or space-separated (default: every run "
                                                 "in OUT/logs)")
    a = p.parse_args(argv)
    seeds = None if a.seeds is None else re.split(r'[,\s]+', a.seeds.strip())
    try:
        if seeds is not None and not all(s.isdigit() for s in seeds):
            raise UserError(f"--seeds={a.seeds!r}: give whole numbers, comma- or space-separated")
        sys.stdout.write(table(a.out, seeds and [str(int(s)) for s in seeds]))
    except (UserError, OSError) as e:
        sys.exit(error_line('task_costs.py', e))


if __name__ == '__main__':
    main()
