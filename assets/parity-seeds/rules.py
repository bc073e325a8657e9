"""
The checkpoint rules of docs/tasks.md compared on the same runs: each rule picks one of a run's kept checkpoints
(train.py --keep_checkpoints=True: ckpt-<iter>.pt at every evaluation) from what its log.jsonl recorded there, and
the pick is scored on fresh test strings against the first bar of beyond.tasks.BARS. Ties go to the earliest.

    python assets/parity-seeds/rules.py --runs=out-parity-norm-il-s1001,out-parity-norm-il-s1002 --seed=3001

Rules: val_loss, the validation loss at the trained K (train.py's default); probe_error, the recipe's (its probe
split's strings, every bit right at K = 2n and 4n); probe_disagreement and probe_turn, which read no labels (the
share of probe strings whose bits change from 2n to 4n; 1 - cos of the last loop); last, the last checkpoint.
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


def picks(run):
    """{rule: the iteration whose checkpoint it keeps}, from run/log.jsonl's evaluations with a kept checkpoint."""
    with open(os.path.join(run, 'log.jsonl')) as f:
        evals = [r for r in map(json.loads, f) if r.get('kind') == 'eval' and r['iter'] > 0]
    if not evals or not all(os.path.exists(os.path.join(run, f"ckpt-{r['iter']}.pt")) for r in evals):
        raise UserError(f"{run} did not keep every evaluation's checkpoint (train with --keep_checkpoints=True)")
    n_loops = torch.load(os.path.join(run, f"ckpt-{evals[0]['iter']}.pt"), weights_only=True)['model_args']['n_loops']
    measure = dict(val_loss=lambda r: r['val_loss'][n_loops - 1], last=lambda r: -r['iter'],
                   **{rule: (lambda r, rule=rule: r['select'][rule]) for rule in RULES[1:4]})
    return {rule: min(evals, key=measure[rule])['iter'] for rule in RULES}  # (min keeps the first of equals)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0].strip())
    p.add_argument('--runs', required=True, help='run folders, comma-separated')
    p.add_argument('--seed', type=int, default=1, help='seeds the test strings')
    p.add_argument('--rows', type=int, default=256, help='test strings')
    p.add_argument('--loops', default='16,24,32,48,64,96,128,192,256,384', help='the K scored, comma-separated')
    args = p.parse_args(argv)
    length, by_k, held_to = BARS[0]
    try:
        loops = int_list(args.loops, 'loops')
        x, y = test_strings(args.seed, length, args.rows)
        runs, passed, cache = [r for r in args.runs.split(',') if r], {rule: [] for rule in RULES}, {}
        lines = ['| run | ' + ' | '.join(RULES) + ' |', '|---|' + '---|' * len(RULES)]
        for run in runs:
            chosen, cells = picks(run), []
            for rule in RULES:
                it = chosen[rule]
                if (run, it) not in cache:
                    model = LoopedGPT.from_checkpoint(os.path.join(run, f'ckpt-{it}.pt'))[0].eval()
                    exact = {k: v['exact'] for k, v in score(model, x, y, loops).items()}
                    cache[run, it] = (passes(exact, by_k, held_to), max(exact.values()))
                ok, best = cache[run, it]
                passed[rule].append(ok)
                cells.append(f"{it}: {100 * best:.1f}% {'pass' if ok else 'fail'}")
            lines.append(f'| {os.path.basename(os.path.normpath(run))} | ' + ' | '.join(cells) + ' |')
    except (UserError, FileNotFoundError, ValueError) as e:
        sys.exit(error_line('rules.py', e))
    n = len(runs)
    lines.append('| **passing** | ' + ' | '.join(
        f"**{sum(passed[r])}/{n}** ({'–'.join(f'{100 * v:.0f}' for v in wilson(sum(passed[r]), n))}%)" for r in RULES) + ' |')
    print(f'Each rule\'s checkpoint (its iteration: the best exact match on {args.rows} {length}-bit strings over '
          f'K={args.loops}, seed {args.seed}; pass: >= 95% by K={by_k}, held within 2 points to {held_to}).\n')
    print('\n'.join(lines))


if __name__ == '__main__':
    main()
