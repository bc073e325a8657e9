"""
The table of designs (docs/depth.md): for each condition of an eval_depth.py results.json (seeds
as eval_depth.py grouped them, mean over seeds), what its state's scale does and what depth does
to it, and a verdict measured from two of its numbers.

    python -m beyond.depth_table assets/depth/results.json > assets/depth/designs.md

After it, what the page reads from the runs beside the table: each random-depth design against its fixed-depth
run (at the trained K and at the best K up to it), each seed of a design with several (its best K and what K=8 and
K=16 cost over it), and each random-depth design's draws of K over its training (depth.draw_depth, seed by seed
as trained: the first seed's).

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
import re
import sys

import depth

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


def learned(depth_record):
    """What a learned control learned (AlphaReadout's alpha, the damping factor), or '-'."""
    d = depth_record or {}
    return ', '.join(f"{k} {d[k]:.3f}" for k in ('alpha', 'damping') if isinstance(d.get(k), float)) or '-'


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
    knobs = learned(m.get('depth'))
    draw = (m.get('depth') or {}).get('draw') or {}
    depth = 'fixed' if not m.get('random_depth') else \
        f"random, mean {draw['n_loops']}, σ {draw['depth_sigma']:g}" if 'depth_sigma' in draw else 'random'
    cells = [label(g), depth] + [fmt(ppl[k], ',.3f') for k in (1, 2, 4, 8, 16)] + \
        [fmt(best, ',.3f'), f"{100 * (ppl[8] / best - 1):+,.1f}%", f"{100 * (ppl[16] / best - 1):+,.1f}%",
         fmt(at_k['norm_mean'], ',.1f'), fmt(at_k['norm_p99'], ',.1f'), fmt(per_k[16]['norm_mean'], ',.1f'),
         fmt(at_k['radial'], '.1e'), fmt(at_k['angular'], '.1e'), fmt(clamp, '+.4f'),
         fmt(min(exits), '.2f') if exits else '-', knobs,
         verdict(at_k['radial'], rms, scale_still(m.get('lemma'), K))]
    return '| ' + ' | '.join(cells) + ' |'


def table(results):
    head = ['design', 'depth', 'K=1', 'K=2', 'K=4', 'K=8', 'K=16', 'best K≤trained', 'K=8 vs best', 'K=16 vs best',
            'mean ‖H_K‖', 'p99 ‖H_K‖', 'mean ‖H_16‖', 'radial frac', '1 − cos', 'clamp Δloss, K=16',
            'exit +1%: loops', 'learned', 'the scale is']
    lines = ['| ' + ' | '.join(head) + ' |', '|' + '---|' * len(head)]
    return '\n'.join(lines + [row(g) for g in results['groups']])


DRAW_TAG = re.compile(r'-rd[^-]*')  # a random-depth design's tag in its name: -rd, -rd1.5, -rdm8


def condition_of(name):
    """The design a run or group name trains, without its draw and seed: out-raw_perloop-rd1.5-cpu-long-s1 ->
    out-raw_perloop-cpu-long."""
    return re.sub(r'-s\d+$', '', DRAW_TAG.sub('', name))


def best(per_K, up_to):
    """(K, ppl) of the lowest perplexity at K <= up_to (the first of equals)."""
    ppl = {r['K']: r['ppl'] for r in per_K if r['K'] <= up_to}
    k = min(ppl, key=lambda k: (ppl[k], k))
    return k, ppl[k]


def at(per_K, K):
    return next(r['ppl'] for r in per_K if r['K'] == K)


def against_fixed(results):
    """Each random-depth group against the fixed-depth group of its condition: ppl at K=4 and the best K up to the
    trained K, each with its change in %."""
    groups = results['groups']
    fixed = {condition_of(g['name']): g for g in groups if not g['mean'].get('random_depth')}
    lines = ['\nrandom depth against fixed depth: ppl at K=4 and the best K up to the trained K (K: ppl), the change in %',
             '| design | K=4 | fixed K=4 | change | best | fixed best | change |', '|---|---|---|---|---|---|---|']
    for g in groups:
        f = fixed.get(condition_of(g['name']))
        if not g['mean'].get('random_depth') or f is None:
            continue
        m, fm = g['mean'], f['mean']
        (k, b), (fk, fb) = best(m['per_K'], m['trained_K']), best(fm['per_K'], fm['trained_K'])
        a, fa = at(m['per_K'], 4), at(fm['per_K'], 4)
        lines.append(f"| {label(g)} | {a:.3f} | {fa:.3f} | {100 * (a / fa - 1):+.1f}% | {k}: {b:.3f} | {fk}: {fb:.3f} | "
                     f"{100 * (b / fb - 1):+.1f}% |")
    return '\n'.join(lines)


def past_training(results):
    """Each group's state past its trained depth: the largest norms at the trained K and at K=16, the perplexity at
    K=16 with the clamp, and Lemma 2's s at the trained K and after the sweep's last loop (the verdict's 'removed'
    compares the two: STILL)."""
    lines = ['\nthe state past the trained depth: max ‖H_K‖ at the trained K, p99 and max ‖H_16‖, ppl at K=16 with the '
             "clamp, and Lemma 2's s at the trained K and after the sweep's last loop",
             '| design | max ‖H_K‖ | p99 ‖H_16‖ | max ‖H_16‖ | ppl K=16, clamped | s_K | s, last loop | ratio |',
             '|---|---|---|---|---|---|---|---|']
    for g in results['groups']:
        m = g['mean']
        per_k = {r['K']: r for r in m['per_K']}
        K, s = m['trained_K'], (m.get('lemma') or {}).get('s') or []
        lemma = [fmt(s[K - 1], ',.1f'), f"{s[-1]:,.1f} (loop {len(s)})", f"{s[-1] / s[K - 1]:.2f}"] if len(s) > K else ['-'] * 3
        lines.append(f"| {label(g)} | {fmt(per_k[K]['norm_max'], ',.1f')} | {fmt(per_k[16]['norm_p99'], ',.1f')} | "
                     f"{fmt(per_k[16]['norm_max'], ',.1f')} | {fmt(per_k[16].get('clamp', {}).get('ppl'), ',.1f')} | "
                     + ' | '.join(lemma) + ' |')
    return '\n'.join(lines)


def per_seed(results):
    """Each seed of a group of several, as the table's columns show a group: its best K up to the trained K (K: ppl),
    K=8 and K=16 over it; then its best K up to 16 (K: ppl), to see whether a K past the trained depth beats it."""
    by_name = {r['name']: r for r in results['runs']}
    lines = ['\neach seed of the designs with several: the best K up to the trained K (K: ppl), K=8 and K=16 against it, '
             'the best K up to 16, and what it learned', '| run | best K≤trained | K=8 vs best | K=16 vs best | best K≤16 | '
             'learned |', '|---|---|---|---|---|---|']
    for g in results['groups']:
        if g['n'] < 2:
            continue
        for name in g['runs']:
            r = by_name[name]
            (k, b), (k16, b16) = best(r['per_K'], r['trained_K']), best(r['per_K'], 16)
            lines.append(f"| {name} | {k}: {b:.3f} | {100 * (at(r['per_K'], 8) / b - 1):+.1f}% | "
                         f"{100 * (at(r['per_K'], 16) / b - 1):+.1f}% | {k16}: {b16:.3f} | {learned(r.get('depth'))} |")
    return '\n'.join(lines)


def draws(results):
    """The draws of K over a random-depth run's training, one row for each draw trained (its mean, sigma and cap,
    the first seed of its groups, its iterations: the last of its curve's evaluations), whatever the design (the
    draw is a function of the seed and the iteration alone, depth.draw_depth): their mean K, and the share of K = 1,
    K <= 2, and K >= 4, 8, 16, in %."""
    by_name = {r['name']: r for r in results['runs']}
    rows = {}
    for g in results['groups']:
        r = by_name[g['runs'][0]]
        d = (r.get('depth') or {}).get('draw') or {}
        iters = ((r.get('curve') or {}).get('iter') or [None])[-1]   # (evaluated without --curves: not known)
        if g['mean'].get('random_depth') and 'depth_sigma' in d and iters:
            key = (d['n_loops'], d['depth_sigma'], d['max_loops'], r['seed'], iters)
            rows.setdefault(key, []).append(g)
    lines = ["\nthe draws of K over a random-depth run's training (each draw trained, at its groups' first seed): their mean, "
             'and the share of each depth', '| draw | seed | draws | designs | mean K | K=1 | K≤2 | K≥4 | K≥8 | K≥16 |',
             '|---|---|---|---|---|---|---|---|---|---|']
    for (mean, sigma, cap, seed, iters), groups in rows.items():
        ks = [depth.draw_depth(seed, it, mean=mean, cap=cap, sigma=sigma) for it in range(iters)]
        share = lambda ok: f'{100 * sum(map(ok, ks)) / len(ks):.1f}%'  # noqa: E731
        lines.append(f"| mean {mean}, σ {sigma:g}, at most {cap} | {seed} | {iters:,} | {len(groups)} | "
                     f"{sum(ks) / len(ks):.2f} | {share(lambda k: k == 1)} | {share(lambda k: k <= 2)} | "
                     f"{share(lambda k: k >= 4)} | {share(lambda k: k >= 8)} | {share(lambda k: k >= 16)} |")
    return '\n'.join(lines)


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
    print(against_fixed(results))
    print(past_training(results))
    print(per_seed(results))
    print(draws(results))


if __name__ == '__main__':
    with one_line_errors('depth_table.py'):
        main(sys.argv[1:])
