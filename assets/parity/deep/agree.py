"""
Whether the scorer's fast path reads what the full pass reads (assets/parity/deep/README.md): two beyond.tasks
results.json of one run, one scored with --halt (each string's settled prefix held, not computed again), one without,
compared at every length and K both scored: exact match and per-bit accuracy side by side, and the largest
differences.

    python assets/parity/deep/agree.py HALTED/results.json FULL/results.json
"""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', '..'))

from configurator import UserError, error_line  # noqa: E402


def rows(path):
    try:
        with open(path) as f:
            return {(r['run'], r['length'], r['K']): r for r in json.load(f)['results'] if r['intervention'] == 'none'}
    except (OSError, ValueError, KeyError) as e:
        raise UserError(f"{path}: not a beyond.tasks results.json ({e})")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    try:
        if len(argv) != 2:
            raise UserError('give two results.json: the run scored with --halt, then without')
        halted, full = (rows(p) for p in argv)
        both = sorted(halted.keys() & full.keys(), key=lambda k: (k[1], k[2]))
        if not both:
            raise UserError(f'{argv[0]} and {argv[1]} share no run, length and K')
    except UserError as e:
        sys.exit(error_line('agree.py', e))
    lines = ['| run | bits | K | exact match, halted | exact match, full | accuracy, halted | accuracy, full |',
             '|---|---|---|---|---|---|---|']
    for key in both:
        h, f = halted[key], full[key]
        lines.append(f"| {os.path.basename(os.path.normpath(key[0]))} | {key[1]} | {key[2]} | {100 * h['exact']:.1f}% | "
                     f"{100 * f['exact']:.1f}% | {100 * h['accuracy']:.3f}% | {100 * f['accuracy']:.3f}% |")
    d_exact = max(abs(halted[k]['exact'] - full[k]['exact']) for k in both)
    d_acc = max(abs(halted[k]['accuracy'] - full[k]['accuracy']) for k in both)
    print('\n'.join(lines))
    print(f"\n{len(both)} (length, K) read both ways: the largest difference in exact match {100 * d_exact:.2f} points, "
          f"in per-bit accuracy {100 * d_acc:.4f} points")


if __name__ == '__main__':
    main()
