"""
The table of designs (docs/depth.md): for each condition of an eval_depth.py results.json (seeds
as eval_depth.py grouped them, mean over seeds), what its state's scale does and what depth does
to it, and a verdict measured from two of its numbers.

    python -m beyond.depth_table assets/depth/results.json > assets/depth/designs.md

Columns: perplexity at K = 1, 2, 4, 8, 16 and the best K up to the trained K (n_loops: 4, or the mean K
of a random-depth run); K=8 and K=16 against that best, what depth past training costs;
mean and p99 ||H_K|| at the trained K (the mean K of a random-depth run) and mean ||H_16||; the
radial fraction and 1 - cos at the trained K; the clamp's change of the loss at K=16; the fewest
mean loops a calibrated exit reached within +1% of full depth (held-back tokens); what a learned
control learned (AlphaReadout's alpha, the damping factor). The verdict, from the radial fraction
r and the state's RMS s = ||H_K|| / sqrt(d) at the trained K (the embedding's at init: sqrt(2),
token and position embeddings N(0, 1), the default init):
  visible            r >= 1e-3: the loss has a gradient along the state, it sees the scale;
  removed            r < 1e-3, and the loops past K leave the scale where it is: Lemma 2's mean s
                     after the last loop of eval_depth.py's --lemma_loops sweep (30) within 5% of s
                     at K (the inter-loop norm: 1.00; a drifted state keeps growing, 1.20 for
                     norm_perloop with random depth; the released damping shrinks it, 0.74);
  hidden, drifted    r < 1e-3 and s >= 10: the loss cannot see the scale, and it grew in training;
  hidden, held       r < 1e-3 and s < 10: the loss cannot see it, and something else held it.
"""

import argparse
import json
import math
import sys

from configurator import UserError, one_line_errors
from report import label

VISIBLE = 1e-3  # radial fraction: a scale-invariant readout gives ~1e-17 in float64, a raw one ~1e-2
DRIFTED = 10.0  # the state's RMS, against the embedding's sqrt(2) at init
STILL = 0.05    # Lemma 2's s after the sweep's last loop against s at K: the recurrence leaves the scale alone


def verdict(radial, rms, still=False):
    if radial is not None and radial >= VISIBLE:
        return 'visible'
    if still:
        return 'removed'
    return 'hidden, drifted' if rms >= DRIFTED else 'hidden, held'


def scale_still(lemma, K):
    """Whether the loops past K leave the state's scale where it is: Lemma 2's mean s (sums over tokens)
    after the sweep's last loop within STILL of s at loop K; False without a sweep past K."""
    s = (lemma or {}).get('s') or []
    return len(s) > K and abs(s[-1] / s[K - 1] - 1) < STILL


def fmt(v, spec):
    return '-' if v is None or (isinstance(v, float) and not math.isfinite(v)) else format(v, spec)


def row(g):
    m = g['mean']
    per_k = {r['K']: r for r in m['per_K']}
    if 16 not in per_k:
        raise UserError(f"{g['name']} was evaluated to K={max(per_k)}: the table needs K=16 (eval_depth.py --max_loops 16)")
    K = m['trained_K']
    ppl = {k: per_k[k]['ppl'] for k in (1, 2, 4, 8, 16)}
    best = min(per_k[k]['ppl'] for k in range(1, min(K, max(per_k)) + 1))
    at_k = per_k[K]
    rms = at_k['norm_mean'] / math.sqrt(m['config']['n_embd'])
    clamp = per_k[16].get('clamp', {}).get('delta_loss')
    exits = [c['mean_loops'] for c in m.get('calibrated') or [] if abs(c['target'] - 0.01) < 1e-9]
    learned = m.get('depth') or {}
    knobs = ', '.join(f"{k} {learned[k]:.3f}" for k in ('alpha', 'damping') if isinstance(learned.get(k), float))
    draw = learned.get('draw') or {}
    depth = 'fixed' if not m.get('random_depth') else \
        f"random, mean {draw['n_loops']}, σ {draw['depth_sigma']:g}" if 'depth_sigma' in draw else 'random'
    cells = [label(g), depth] + [fmt(ppl[k], ',.3f') for k in (1, 2, 4, 8, 16)] + \
        [fmt(best, ',.3f'), f"{100 * (ppl[8] / best - 1):+,.1f}%", f"{100 * (ppl[16] / best - 1):+,.1f}%",
         fmt(at_k['norm_mean'], ',.1f'), fmt(at_k['norm_p99'], ',.1f'), fmt(per_k[16]['norm_mean'], ',.1f'),
         fmt(at_k['radial'], '.1e'), fmt(at_k['angular'], '.1e'), fmt(clamp, '+.4f'),
         fmt(min(exits), '.2f') if exits else '-', knobs or '-',
         verdict(at_k['radial'], rms, scale_still(m.get('lemma'), K))]
    return '| ' + ' | '.join(cells) + ' |'


def table(results):
    head = ['design', 'depth', 'K=1', 'K=2', 'K=4', 'K=8', 'K=16', 'best K≤trained', 'K=8 vs best', 'K=16 vs best',
            'mean ‖H_K‖', 'p99 ‖H_K‖', 'mean ‖H_16‖', 'radial frac', '1 − cos', 'clamp Δloss, K=16',
            'exit +1%: loops', 'learned', 'the scale is']
    lines = ['| ' + ' | '.join(head) + ' |', '|' + '---|' * len(head)]
    return '\n'.join(lines + [row(g) for g in results['groups']])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    p.add_argument('results', help="a results.json written by eval_depth.py (runs evaluated with --max_loops 16)")
    args = p.parse_args(argv)
    try:
        with open(args.results) as f:
            results = json.load(f)
    except (OSError, ValueError) as e:
        raise UserError(f"cannot read {args.results}: {getattr(e, 'strerror', None) or e}")
    print(table(results))


if __name__ == '__main__':
    with one_line_errors('depth_table.py'):
        main(sys.argv[1:])
