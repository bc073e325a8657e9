"""
The checkpoint rules of docs/tasks.md compared on the same runs: each rule picks one of a run's kept checkpoints
(train.py --keep_checkpoints=True: ckpt-<iter>.pt at every evaluation) from what its log.jsonl recorded there, and
the pick is scored on fresh test strings against the first bar of beyond.tasks.BARS. Ties go to the earliest.

    python assets/parity/rules.py --runs=out-parity-norm-il-s1001,out-parity-norm-il-s1002 --seed=3001

--bits=64 scores the picks against the 64-bit bar instead; --every=50,100 adds the probe's rule over only the
evaluations at multiples of each of those steps (what the same run would keep, evaluated that much less often).

Rules: val_loss, the validation loss at the trained K (train.py's default); probe_error, the run's select's
(beyond.tasks.probe: its probe split's strings, every bit right at K = 2n and 4n; screened_probe: the same, read past
a screen of their first halves); probe_disagreement and probe_turn, which read no labels (the share of probe strings
whose bits change from 2n to 4n; 1 - cos of the last loop; screened_probe's on the first halves); last, the last
checkpoint.
"""

import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..'))

from configurator import UserError, error_line  # noqa: E402
from model import LoopedGPT  # noqa: E402
from beyond.tasks import BARS, int_list, passes, score, test_strings, wilson  # noqa: E402

RULES = ('val_loss', 'probe_error', 'probe_disagreement', 'probe_turn', 'last')


def every(steps):
    """The name of the probe's rule over the evaluations at multiples of steps."""
    return f'probe_error, every {steps} steps'


def picks(run, sparser=()):
    """{rule: the iteration whose checkpoint it keeps}, from run/log.jsonl's evaluations with a kept checkpoint;
    with, for each of sparser, the probe's rule over the evaluations at its multiples (every(steps))."""
    with open(os.path.join(run, 'log.jsonl')) as f:
        evals = [r for r in map(json.loads, f) if r.get('kind') == 'eval' and r['iter'] > 0]
    if not evals or not all(os.path.exists(os.path.join(run, f"ckpt-{r['iter']}.pt")) for r in evals):
        raise UserError(f"{run} did not keep every evaluation's checkpoint (train with --keep_checkpoints=True)")
    n_loops = torch.load(os.path.join(run, f"ckpt-{evals[0]['iter']}.pt"), weights_only=True)['model_args']['n_loops']
    measure = dict(val_loss=lambda r: r['val_loss'][n_loops - 1], last=lambda r: -r['iter'],
                   **{rule: (lambda r, rule=rule: r['select'][rule]) for rule in RULES[1:4]})
    chosen = {rule: min(evals, key=measure[rule])['iter'] for rule in RULES}  # (min keeps the first of equals)
    interval = min((b['iter'] - a['iter'] for a, b in zip(evals, evals[1:])), default=evals[0]['iter'])
    for steps in sparser:
        kept = [r for r in evals if r['iter'] % steps == 0]
        if steps % interval or not kept:
            raise UserError(f"--every {steps}: {run} evaluated every {interval} steps, and {steps} is not a multiple of "
                            "that with an evaluation at it")
        chosen[every(steps)] = min(kept, key=measure['probe_error'])['iter']
    return chosen


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0].strip())
    p.add_argument('--runs', required=True, help='run folders, comma-separated')
    p.add_argument('--seed', type=int, default=1, help='seeds the test strings')
    p.add_argument('--rows', type=int, default=256, help='test strings')
    p.add_argument('--loops', default='16,24,32,48,64,96,128,192,256,384', help='the K scored, comma-separated')
    p.add_argument('--bits', type=int, default=BARS[0].length, choices=[b.length for b in BARS], help='the bar (its length)')
    p.add_argument('--every', default='', help='steps, comma-separated: the probe\'s rule at their multiples too')
    args = p.parse_args(argv)
    bar, = [b for b in BARS if b.length == args.bits]
    length = bar.length
    try:
        loops = int_list(args.loops, 'loops')
        sparser = int_list(args.every, 'every') if args.every else []
        rules = RULES + tuple(every(n) for n in sparser)
        x, y = test_strings(args.seed, length, args.rows)
        runs, passed, cache = [r for r in args.runs.split(',') if r], {rule: [] for rule in rules}, {}
        lines = ['| run | ' + ' | '.join(rules) + ' |', '|---|' + '---|' * len(rules)]
        for run in runs:
            chosen, cells = picks(run, sparser), []
            for rule in rules:
                it = chosen[rule]
                if (run, it) not in cache:
                    model = LoopedGPT.from_checkpoint(os.path.join(run, f'ckpt-{it}.pt'))[0].eval()
                    exact = {k: v['exact'] for k, v in score(model, x, y, loops).items()}
                    cache[run, it] = (passes(exact, bar), max(exact.values()))
                ok, best = cache[run, it]
                passed[rule].append(ok)
                cells.append(f"{it}: {100 * best:.1f}% {'pass' if ok else 'fail'}")
            lines.append(f'| {os.path.basename(os.path.normpath(run))} | ' + ' | '.join(cells) + ' |')
    except (UserError, FileNotFoundError, ValueError) as e:
        sys.exit(error_line('rules.py', e))
    n = len(runs)
    lines.append('| **passing** | ' + ' | '.join(
        f"**{sum(passed[r])}/{n}** ({'–'.join(f'{100 * v:.0f}' for v in wilson(sum(passed[r]), n))}%)" for r in rules) + ' |')
    held = (f', held within {100 * bar.within:.0f} points to {bar.held_to}' if bar.held_to else
            f', held within {100 * bar.within:.0f} to {bar.hold:g}x that K' if bar.hold else '')
    print(f'Each rule\'s checkpoint (its iteration: the best exact match on {args.rows} {length}-bit strings over '
          f'K={args.loops}, seed {args.seed}; pass: >= {100 * bar.reach:.0f}% by K={bar.by_k}{held}).\n')
    print('\n'.join(lines))


if __name__ == '__main__':
    main()
