"""
The figures of eval_depth.py, from its groups of runs (seeds of one condition: the mean,
with the standard deviation as error bars) and its runs.

    python -c "import json, plots; r = json.load(open('assets/results.json')); plots.all_plots(r['groups'], r['runs'], '/tmp')"
"""

import itertools
import math
import os

import numpy as np


def num(values):
    """NaN for None (how results.json writes NaN and inf)."""
    return [float('nan') if v is None else v for v in values]


def err(values):
    """Error bars from a list of standard deviations: None where there are none (one seed)."""
    values = [v if v is not None and math.isfinite(v) else 0.0 for v in values]
    return values if any(values) else None


def label(group):
    g = group['mean']
    extra = (f", penalty {g['norm_penalty']}" if g['norm_penalty'] else '') + \
            (', inter-loop norm' if g['interloop_norm'] else '')
    seeds = f", {group['n']} seeds" if group['n'] > 1 else ''
    return f"{group['name']} ({g['readout']} readout, {g['loss']} CE{extra}, K={g['trained_K']}{seeds})"


def legend(ax, ncol=2):
    """Below the axes, so that no line is hidden behind it."""
    ax.legend(fontsize=7, loc='upper center', bbox_to_anchor=(0.5, -0.13), ncol=ncol, frameon=False)


def clip_ppl(ax, values):
    """Untrained readouts (e.g. early loops of a terminal-loss run) reach perplexities in the
    millions: keep the axis on the range where the runs differ, and say so."""
    values = [v for v in values if v is not None and math.isfinite(v)]
    if not values:
        return
    lo, hi = min(values), max(values)
    if hi > 2 * lo:
        ax.set_ylim(0.97 * lo, 2 * lo)
        ax.set_title(ax.get_title() + f'\n(axis cut at 2x the best, {2 * lo:.1f}; higher points are off the chart)',
                     fontsize=9)


def per_k(g, key):
    """A group's value at every K, and its error bars."""
    return num([r[key] for r in g['mean']['per_K']]), err([r[key] for r in g['std']['per_K']])


def ks(g):
    return [r['K'] for r in g['mean']['per_K']]


def seeds_note(groups):
    return ' (mean ± std over seeds)' if any(g['n'] > 1 for g in groups) else ''


# -----------------------------------------------------------------------------
# one function a figure: each draws on a new figure and returns it with its file name

def ppl_vs_k(plt, groups, runs):
    fig, ax = plt.subplots(figsize=(8, 6))
    for g in groups:
        ax.errorbar(ks(g), *per_k(g, 'ppl'), marker='o', capsize=3, label=label(g))
    ax.axvline(groups[0]['mean']['trained_K'], color='gray', ls=':', lw=1)
    ax.set(xlabel='inference depth K (loops)', ylabel=f"{groups[0]['mean']['split']} perplexity (per token)",
           title=f'Perplexity vs inference depth (dotted: trained K){seeds_note(groups)}')
    clip_ppl(ax, [p for g in groups for p in per_k(g, 'ppl')[0]])
    legend(ax)
    return fig, 'ppl_vs_k.png'


def norms_vs_k(plt, groups, runs):
    fig, ax = plt.subplots(figsize=(8, 6))
    for g in groups:
        line = ax.errorbar(ks(g), *per_k(g, 'norm_mean'), marker='o', capsize=3, label=f"{label(g)}: mean")
        ax.errorbar(ks(g), *per_k(g, 'norm_p99'), ls='--', capsize=3, color=line.lines[0].get_color(),
                    label=f"{g['name']}: p99")
    ax.set_yscale('log')
    ax.set(xlabel='loop k', ylabel='‖H_k‖ per token (L2 norm, log scale)',
           title=f'Hidden-state norm after each loop{seeds_note(groups)}')
    legend(ax)
    return fig, 'norms_vs_k.png'


def frontier(plt, groups, runs):
    fig, ax = plt.subplots(figsize=(8, 6))
    for g in groups:
        x, xerr = per_k(g, 'tok_per_s')
        y, yerr = per_k(g, 'ppl')
        ax.errorbar(x, y, yerr=yerr, xerr=xerr, marker='o', capsize=3, label=label(g))
        for k, xi, yi in zip(ks(g), x, y):
            ax.annotate(f"K={k}", (xi, yi), fontsize=6, textcoords='offset points', xytext=(3, 3))
    ax.set_xscale('log')
    ax.set(xlabel=f"forward throughput (tokens/s, {runs[0]['device']}, batch {runs[0]['batch_size']})",
           ylabel='perplexity', title='Compute-quality frontier (lower right is better)')
    clip_ppl(ax, [p for g in groups for p in per_k(g, 'ppl')[0]])
    legend(ax)
    return fig, 'frontier.png'


def norm_hist(plt, groups, runs):
    fig, ax = plt.subplots(figsize=(8, 6))
    used = []
    for g in groups:  # the seeds' tokens pooled
        h = g['mean']['final_norm_hist']
        counts = np.asarray(h['counts'], dtype=float)
        ax.stairs(counts / counts.sum(), h['edges'], label=f"{label(g)}, loop {h['loop']}")
        nz = np.flatnonzero(counts)
        used += [h['edges'][i] for i in nz] + [h['edges'][i + 1] for i in nz]
    ax.set_xscale('log')
    ax.set_xlim(min(used) / 1.5, max(used) * 1.5)
    ax.set(xlabel='‖H_K‖ of each token at the trained K (log scale, 20 bins a decade)', ylabel='fraction of tokens',
           title='Per-token hidden-state norm at the last trained loop')
    legend(ax)
    return fig, 'norm_hist.png'


def early_exit(plt, groups, runs):
    if not any(g['mean']['early_exit'] for g in groups):
        return None
    fig, axes = plt.subplots(1, 2, figsize=(13, 6), sharey=True)
    for ax, mode, title in zip(axes, ('teacher_forced', 'causal'),
                               ('teacher-forced (every loop runs)', 'causal (exited tokens skip later loops)')):
        for i, g in enumerate(groups):
            criteria = list(dict.fromkeys(e['criterion'] for e in g['mean']['early_exit']))
            for criterion, ls in zip(criteria, itertools.cycle(LINES)):
                pts = sorted((e['mean_loops'], e['ppl']) for e in g['mean']['early_exit']
                             if e['mode'] == mode and e['criterion'] == criterion)
                if pts:
                    ax.plot(*zip(*pts), marker='o', ls=ls, color=f'C{i % 10}', label=f"{g['name']}: {criterion}")
        ax.set(xlabel='mean loops used per token', ylabel='perplexity', title=f'Early exit, {title}')
        clip_ppl(ax, [e['ppl'] for g in groups for e in g['mean']['early_exit']])
    legend(axes[0])
    fig.suptitle('Perplexity vs loops used, one line style a criterion')
    return fig, 'early_exit.png'


def exit_frontiers(plt, groups, runs):
    """One figure a run: the oracle's frontier (each token at its best loop for a price mu of a
    nat in loops) and every criterion's teacher-forced frontier, mean loops vs ppl, with
    full-depth ppl +1% and +5% marked. Returns a list of (figure, file name)."""
    made = []
    for run in (r for r in runs if r.get('exit_frontier')):
        f = run['exit_frontier']
        fig, ax = plt.subplots(figsize=(8, 6))
        ax.plot(f['oracle']['mean_loops'], num(f['oracle']['ppl']), color='k', lw=2, label='oracle (bound)')
        for i, (c, tf) in enumerate(f['teacher_forced'].items()):
            pts = sorted(zip(tf['mean_loops'], num(tf['ppl'])))
            ax.plot(*zip(*pts), marker='.', ms=3, ls=LINES[i % len(LINES)], color=f'C{i % 10}', label=c)
        for t, ls in (('0.01', ':'), ('0.05', '--')):
            ax.axhline(f['full_ppl'] * (1 + float(t)), color='gray', ls=ls, lw=1)
        ax.set(xlabel='mean loops used per token (teacher-forced)', ylabel=f"{run['split']} perplexity",
               title=f"Exit deciders against the oracle, {run['name']}\n(gray: full depth +1% dotted, +5% dashed)")
        ax.set_ylim(0.98 * min(num(f['oracle']['ppl'])), 1.25 * f['full_ppl'])
        legend(ax, ncol=3)
        made.append((fig, f"exit_frontier_{run['name']}.png"))
    return made


def lemma(plt, groups, runs):
    shown = [g for g in groups if g['mean'].get('lemma')]
    if not shown:
        return None
    fig, axes = plt.subplots(1, 3, figsize=(17, 5.5))
    for i, g in enumerate(shown):
        lem, color = g['mean']['lemma'], f'C{i % 10}'
        k = np.arange(1, lem['loops'] + 1)
        axes[0].plot(k, lem['s'], color=color, label=label(g))
        axes[1].plot(k[:-1], lem['radial_increment'], color=color)
        axes[2].plot(k[:-1], lem['angular_step'], color=color)
        axes[2].plot(k[:-1], lem['c'] / np.asarray(lem['s'][:-1]), color=color, ls=':', lw=1)
    axes[0].set(yscale='log', xlabel='loop k', ylabel='s_k = RMS of H_k (log scale)', title='Scale s_k')
    axes[1].set(xlabel='loop k', ylabel='a_k = <u_k, H_k+1 - H_k>', title='Radial increment per loop')
    axes[2].set(yscale='log', xlabel='loop k', ylabel='‖u_k+1 - u_k‖ (log scale)',
                title='Angular step (dotted: c / s_k, c fitted on the later loops)')
    fig.suptitle(f"Lemma 2 out to {shown[0]['mean']['lemma']['loops']} loops: the larger s_k, "
                 "the less a loop turns the state")
    legend(axes[0], ncol=1)
    return fig, 'lemma.png'


def drift(plt, groups, runs):
    """Every run's curve from its log.jsonl; a diverged run's non-finite values (null in the
    JSON) are gaps in its line."""
    if not any('curve' in run for run in runs):
        return None
    color = {name: f'C{i % 10}' for i, g in enumerate(groups) for name in g['runs']}
    fig, axes = plt.subplots(1, 2, figsize=(14, 6))
    for g in groups:
        for run in (r for r in runs if r['name'] in g['runs'] and 'curve' in r):
            c, first = {k: num(v) for k, v in run['curve'].items()}, run['name'] == g['runs'][0]
            axes[0].plot(c['train_iter'], c['norm_mean'], color=color[run['name']], label=label(g) if first else None)
            axes[0].plot(c['iter'], c['norm_p99'], color=color[run['name']], ls='--', lw=1, marker='.')
            axes[1].plot(c['iter'], c['val_loss_K'], color=color[run['name']], label=label(g) if first else None)
            axes[1].plot(c['iter'], c['val_loss_1'], color=color[run['name']], ls=':', lw=1)
    axes[0].set(yscale='log', xlabel='training iteration', ylabel='‖H_K‖ at the trained K (log scale)',
                title='Drift over training: mean (solid, training batches) and p99 (dashed, validation)')
    axes[1].set(xlabel='training iteration', ylabel='validation loss',
                title='Validation loss at the trained K (solid) and at K=1 (dotted)')
    finite = [v for run in runs if 'curve' in run for v in num(run['curve']['val_loss_K']) if math.isfinite(v)]
    if finite:
        axes[1].set_ylim(0.97 * min(finite), 1.6 * min(finite))
    legend(axes[0], ncol=1)
    fig.suptitle('Every run, from its log.jsonl (one colour per condition)')
    return fig, 'drift.png'


LINES = ('-', '--', ':', '-.', (0, (5, 1)), (0, (1, 1)), (0, (3, 1, 1, 1)))  # one a criterion
FIGURES = (ppl_vs_k, norms_vs_k, frontier, norm_hist, early_exit, exit_frontiers, lemma, drift)


def all_plots(groups, runs, out):
    """Writes the PNGs into out and returns their paths."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    paths = []
    for figure in FIGURES:
        made = figure(plt, groups, runs)
        if made is None:  # nothing of that kind was measured
            continue
        for fig, name in (made if isinstance(made, list) else [made]):  # (a list: one figure a run)
            fig.savefig(os.path.join(out, name), dpi=110, bbox_inches='tight')
            plt.close(fig)
            paths.append(os.path.join(out, name))
    return paths
