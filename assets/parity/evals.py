"""What the probe saw in a task study's runs, run by run, from their logs (docs/tasks.md): at each evaluation train.py
logs its select's scores (beyond.tasks.probe or screened_probe: probe_error, the share of probe strings with a bit wrong
at K = 2n and 4n; screened_probe's is 1 plus its screen's error where the screen of the strings' first halves fails, and
its screen_error is logged beside it; long_probe's is the reach read's error where the screened probe passed, else 1 plus
the screened probe's, whose whole_error it logs beside it). A markdown table on stdout:

    python assets/parity/evals.py --results=assets/parity/inits/results.json assets/parity/inits/logs/parity-norm-il-s10*.jsonl

A row a run (LOG: its log.jsonl; its train.py output LOG less .jsonl plus .log, where a run of several initializations
says where each fresh start came): its evaluations past the first (those with a checkpoint), how many passed the screen
(and, for long_probe, the whole probe), its evaluations with every probe string right (probe error 0: for long_probe,
every read right, the reach read's too) in each initialization, the last step with one, the
evaluation the rule keeps (the lowest probe error, the earliest of equals: train.py's select) with its probe error (and
the initialization it came in, where there were several), and
whether the run passes each bar of beyond.tasks.BARS (--results: the study's results.json, its shares with no
intervention). Then a row of totals, and one line: how many runs kept a checkpoint with every probe string right and
how many of them pass every bar, against the runs that kept none.
"""
import argparse
import json
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..'))

from configurator import UserError, error_line  # noqa: E402
from beyond.tasks import BARS  # noqa: E402

FRESH = re.compile(r'^initialization \d+ of \d+: a fresh start at iteration (\d+)$', re.M)  # (train.py's line)


def evaluations(log):
    """The evaluations past the first of a run's log.jsonl: [(iteration, probe error, screen error or None, the
    screened probe's error or None: long_probe's whole_error)]."""
    with open(log) as f:
        evals = [r for r in map(json.loads, f) if r.get('kind') == 'eval' and r['iter'] > 0]
    if not evals or not all('probe_error' in r.get('select', {}) for r in evals):
        raise UserError(f"{log}: no evaluation logs a probe_error (a run whose select is beyond.tasks.probe or "
                        "screened_probe)")
    return [(r['iter'], r['select']['probe_error'], r['select'].get('screen_error'), r['select'].get('whole_error'))
            for r in evals]


def fresh_starts(log):
    """The iterations where the run's later initializations started, from its train.py output (none: one)."""
    out = log[:-len('.jsonl')] + '.log' if log.endswith('.jsonl') else None
    if not out or not os.path.isfile(out):
        return []
    with open(out) as f:
        return [int(i) for i in FRESH.findall(f.read())]


def run_row(log):
    """One run's record: its name, evaluations, evaluations past the screen (None: no screen), probe-perfect
    evaluations by initialization, the last probe-perfect step (None: none), and the kept evaluation."""
    evals, starts = evaluations(log), fresh_starts(log)
    perfect = [0] * (len(starts) + 1)
    for it, error, *_ in evals:
        if error == 0:
            perfect[sum(s < it for s in starts)] += 1  # (an evaluation at a fresh start's iteration ran before it)
    screened = [s for _, _, s, _ in evals if s is not None]
    probed = [w for *_, w in evals if w is not None]
    kept = min(evals, key=lambda e: e[1])  # (min keeps the earliest of equals)
    return dict(run='out-' + os.path.basename(log)[:-len('.jsonl')], evaluations=len(evals),
                screened=sum(s == 0 for s in screened) if screened else None,
                probed=sum(w == 0 for w in probed) if probed else None, perfect=perfect,
                last=max((it for it, e, *_ in evals if e == 0), default=None),
                kept=(kept[0], kept[1], 1 + sum(s < kept[0] for s in starts) if starts else None))


def passing(results):
    """{bits: the names of the runs passing that bar with no intervention} of a study's results.json (its shares, each
    design's; a bar no run was scored deep enough for is left out)."""
    with open(results) as f:
        shares = json.load(f).get('shares', [])
    out = {}
    for s in shares:
        if s['intervention'] == 'none':
            out.setdefault(s['length'], set()).update(os.path.basename(os.path.normpath(r)) for r in s['passed_runs'])
    return out


def error_cell(error, reach=False):
    """A probe error as shown: its share of strings wrong, or the screen's where the screen failed (error above 1);
    reach (long_probe's): the reach read's share, the whole probe's above 1, the screen's above 2."""
    if reach:
        return f'screen {100 * (error - 2):.1f}%' if error > 2 else f'probe {100 * (error - 1):.1f}%' if error > 1 else (
            f'{100 * error:.1f}%' if error == 0 else f'reach {100 * error:.1f}%')
    return f'screen {100 * (error - 1):.1f}%' if error > 1 else f'{100 * error:.1f}%'


def kept_in(init):
    """The initialization an evaluation came in, as a kept cell shows it (nothing for a run of one)."""
    return '' if init is None else f" ({init}{({1: 'st', 2: 'nd', 3: 'rd'}).get(init, 'th')})"


def table(logs, results=None):
    rows = [run_row(log) for log in logs]
    passed = passing(results) if results else {}
    bars = [b.length for b in BARS if b.length in passed or not b.hold]  # (the 256x bars where scored)
    verdict = lambda row, n: '-' if n not in passed else 'pass' if row['run'] in passed[n] else 'fail'  # noqa: E731
    reach = any(r['probed'] is not None for r in rows)  # (long_probe's runs: a column for the whole probe)
    perfect = 'every read right' if reach else 'probe-perfect'
    lines = ['| run | evaluations | past the screen | ' + ('past the probe | ' if reach else '')
             + f"{perfect}, by initialization | last {'step with every read right' if reach else 'probe-perfect step'} | "
             'kept: step, probe error | '
             + ' | '.join(f'{n} bits' for n in bars) + ' |',
             '|---|---|---|---|---|---|' + '---|' * (len(bars) + reach)]
    dash = lambda v: '-' if v is None else v  # noqa: E731
    for r in rows:
        lines.append(f"| {r['run']} | {r['evaluations']} | {dash(r['screened'])} | "
                     + (f"{dash(r['probed'])} | " if reach else '')
                     + f"{'+'.join(map(str, r['perfect']))} | {'-' if r['last'] is None else format(r['last'], ',')} | "
                     f"{r['kept'][0]:,}: {error_cell(r['kept'][1], reach)}{kept_in(r['kept'][2])} | "
                     + ' | '.join(verdict(r, n) for n in bars) + ' |')
    n, inits = len(rows), sum(len(r['perfect']) for r in rows)
    screened = [r['screened'] for r in rows if r['screened'] is not None]
    lasts = [r['last'] for r in rows if r['last'] is not None]
    kept = [r for r in rows if r['kept'][1] == 0]
    probed = [r['probed'] for r in rows if r['probed'] is not None]
    lines.append(f"| **{n} runs** | **{sum(r['evaluations'] for r in rows)}** | **{sum(screened) if screened else '-'}** | "
                 + (f"**{sum(probed)}** | " if reach else '') +
                 f"**{sum(any(r['perfect']) for r in rows)}/{n} runs, {sum(c > 0 for r in rows for c in r['perfect'])}"
                 f"/{inits} initializations** | **{format(max(lasts), ',') if lasts else '-'}** | "
                 f"**{len(kept)}/{n} at 0.0%** | " + ' | '.join(
                     f"**{sum(r['run'] in passed[b] for r in rows)}/{n}**" if b in passed else '-' for b in bars) + ' |')
    out = '\n'.join(lines) + '\n'
    if passed and all(b in passed for b in bars):
        both = lambda rs: sum(all(r['run'] in passed[b] for b in bars) for r in rs)  # noqa: E731
        others = [r for r in rows if r['kept'][1] != 0]
        out += (f"\nKept a checkpoint with {'every read' if reach else 'every probe string'} right: {len(kept)} of {n} runs, {both(kept)} of them "
                f"passing every bar" + (f"; of the {len(others)} that kept none, {both(others)} "
                                        f"{'passes' if both(others) == 1 else 'pass'} every bar" if others else '') + '.\n')
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--results', default='', help="the study's results.json (python -m beyond.tasks'): each run's "
                                                 "verdict on each bar (none: '-')")
    p.add_argument('logs', nargs='+', help="the runs' log.jsonl files, one per run")
    a = p.parse_args(argv)
    try:
        sys.stdout.write(table(a.logs, a.results or None))
    except (UserError, OSError, ValueError, KeyError) as e:
        sys.exit(error_line('evals.py', e))


if __name__ == '__main__':
    main()
