"""
Numbers and figures as the scripts report them: perplexity, JSON without NaN, atomic JSON
files, mean ± std, the one label a run or a group of seeds goes by, train.py's log lines and
log.jsonl, and eval_depth.py's figures
(from its groups of runs: seeds of one condition as the mean, the standard deviation as error bars).

    python -c "from report import mean_std; print(mean_std([2.51, 2.53, 2.49]))"
    python -c "import json, report; r = json.load(open('assets/cpu-demo/results.json')); report.all_plots(r['groups'], r['runs'], '/tmp')"
"""

import json
import math
import os
from dataclasses import asdict

import numpy as np
import torch

from model import SIZE, LoopedGPT, named_class


def perplexity(loss):
    """exp(loss), or inf where that overflows (an untrained readout can have CE in the hundreds);
    NaN stays NaN."""
    return math.exp(loss) if loss < 700 else float('nan') if math.isnan(loss) else float('inf')


def json_safe(v):
    """JSON has no NaN or inf: they are written as null (e.g. the CE of a loop a terminal loss
    never reads, or a radial fraction with no defined gradient)."""
    if isinstance(v, dict):
        return {k: json_safe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [json_safe(x) for x in v]
    return None if isinstance(v, float) and not math.isfinite(v) else v


def write_json(path, obj):
    """Writes obj (NaN and inf as null) to a temporary file and renames it: never a half-written file.
    allow_nan=False: a non-finite number json_safe did not reach is an error, never an `Infinity` or `NaN`
    token that strict JSON parsers refuse."""
    with open(path + '.tmp', 'w') as f:
        json.dump(json_safe(obj), f, indent=1, allow_nan=False)
    os.replace(path + '.tmp', path)


def mean_std(trees):
    """Elementwise mean and sample standard deviation (n-1) over runs of the same shape: nested
    dicts and lists whose numeric leaves are averaged. Returns (mean, std) trees; std is NaN
    for a single run. Any other leaf is kept where every run agrees; a number missing (None)
    in some runs is NaN; leaves that differ otherwise (a name, a path) are None."""
    first = trees[0]
    if isinstance(first, dict):
        pairs = {k: mean_std([t[k] for t in trees]) for k in first if all(k in t for t in trees)}
        return {k: m for k, (m, _) in pairs.items()}, {k: s for k, (_, s) in pairs.items()}
    if isinstance(first, (list, tuple)) and all(isinstance(t, (list, tuple)) and len(t) == len(first) for t in trees):
        pairs = [mean_std([t[i] for t in trees]) for i in range(len(first))]
        return [m for m, _ in pairs], [s for _, s in pairs]
    if all(isinstance(t, (int, float)) and not isinstance(t, bool) for t in trees):
        n = len(trees)
        if all(t == first for t in trees):  # (keeps an int an int: K, a token count)
            return first, (0.0 if n > 1 else float('nan'))
        mean = sum(trees) / n
        std = math.sqrt(sum((t - mean) ** 2 for t in trees) / (n - 1)) if n > 1 else float('nan')
        return mean, std
    if all(t == first for t in trees):
        return first, None
    if all(t is None or isinstance(t, (int, float)) for t in trees):  # a number missing in some run
        return float('nan'), float('nan')
    return None, None


def pm(mean, std, spec='.3f'):
    """'mean ± std', or just the mean when there is no spread to show (one run). None (NaN read
    back from JSON) is '-'."""
    if mean is None or not math.isfinite(mean):
        return '-'
    spread = std is not None and math.isfinite(std)
    return format(mean, spec) + (f" ± {format(std, spec.lstrip('+'))}" if spread else '')


def model_defaults(config):
    """Every field of the model a run was trained as, at its default, as the class that declares it says: the
    class its training config names (model_class, as train.py saves it), else the paper's LoopedGPT (none named,
    or beyond/'s where beyond/ is not here: its own fields then have no default here)."""
    try:
        cls = named_class((config or {}).get('model_class') or 'model.LoopedGPT')
    except ValueError:
        cls = LoopedGPT
    return asdict(cls.config_class())


def settings_of(run):
    """What a run (or a group's mean) was trained as: its readout, its loss and its depth, with every
    other field of its model config that differs from its default, by the field's name (the size
    fields, model.SIZE, aside), as 'raw readout, perloop CE, <field> <value>, K=4'. The defaults:
    those of the class its config names (model_defaults), else the type's (0, False)."""
    defaults = model_defaults(run.get('config'))
    model = run.get('model') or {k: run[k] for k in defaults if k in run}  # (a results.json before 'model': flat keys)
    extra = ''.join(f", {k}" if v is True else f", {k} {v}" for k, v in model.items()
                    if k not in SIZE + ('readout', 'loss') and v != defaults.get(k, type(v)()))  # (a subclass's field: set or not)
    depth = f"random K, mean {run['trained_K']}" if run.get('random_depth') else f"K={run['trained_K']}"
    return f"{model['readout']} readout, {model['loss']} CE{extra}, {depth}"


def label(group, settings=False):
    """The name a group of seeds goes by in every table and figure: its name, then (its settings
    if asked, and how many seeds where more than one)."""
    parts = ([settings_of(group['mean'])] if settings else []) + ([f"{group['n']} seeds"] if group['n'] > 1 else [])
    return group['name'] + (f" ({', '.join(parts)})" if parts else '')


# -----------------------------------------------------------------------------
# a training run's log: each line printed and, as one JSON object, appended to out_dir/log.jsonl

def log(out_dir, record, line):
    print(line, flush=True)
    with open(os.path.join(out_dir, 'log.jsonl'), 'a') as f:
        f.write(json.dumps(json_safe(record), allow_nan=False) + '\n')


def trim_log(out_dir, iter_num):
    """On resume: keep the log up to the checkpoint (train lines through iter_num, evals before
    it), so that no iteration appears twice once the run continues; a last line cut short (the run
    killed as it wrote) is dropped."""
    path = os.path.join(out_dir, 'log.jsonl')
    if not os.path.exists(path):
        return
    with open(path) as f:
        lines = f.readlines()
    if lines and not lines[-1].endswith('\n'):
        lines.pop()
    keep = [line for line in lines if (r := json.loads(line))['iter'] < iter_num
            or (r['iter'] == iter_num and r['kind'] == 'train')]
    with open(path + '.tmp', 'w') as f:
        f.writelines(keep)
    os.replace(path + '.tmp', path)


def start_log(c, iter_num):
    """out_dir made; its log.jsonl trimmed to the checkpoint on resume, removed for a new run,
    and left as it is for eval_only (which appends its one line)."""
    os.makedirs(c.out_dir, exist_ok=True)
    path = os.path.join(c.out_dir, 'log.jsonl')
    if c.eval_only:
        return
    if c.init_from == 'resume':
        trim_log(c.out_dir, iter_num)
    elif os.path.exists(path):
        os.remove(path)


def fmt(values, spec='.3f'):
    return ' '.join('-' if not math.isfinite(v) else format(v, spec) for v in values)


def eval_line(iter_num, ev):
    """train.py's eval line of ev (train.evaluate's): every K's val loss and ppl, then the diagnostics."""
    return (f"eval {iter_num}: val loss K=1..{len(ev['val_loss'])} {fmt(ev['val_loss'], '.4f')} | "
            f"ppl {fmt(ev['val_ppl'], '.4g')} | |H_k| mean {fmt(ev['norm_mean'], '.1f')} "
            f"p99 {fmt(ev['norm_p99'], '.1f')} | radial {fmt(ev['radial'], '.1e')} | angular {fmt(ev['angular'], '.2e')}"
            + ''.join(f" | {k} {v:.4g}" for k, v in ev.get('select', {}).items()))


class LogSums:
    """What train.py's next train line averages, summed since the last one: the loss, and per loop (up to
    `loops`; with random depth K varies) the CE read there and how many iterations read it, ||H_k|| and how
    many ran loop k, all device tensors (no sync); the iterations and their matmul FLOPs."""

    def __init__(self, loops, device):
        self.loss = torch.zeros((), device=device)
        self.ce, self.ce_read, self.h_norm, self.h_ran = (torch.zeros(loops, device=device) for _ in range(4))
        self.iters, self.flops = 0, 0

    def add(self, loss, ce, h_norm, flops):
        """One train_step's loss, per-loop CE (NaN where unread) and per-loop ||H_k||, and its FLOPs."""
        K = len(ce)
        self.loss += loss
        self.ce[:K] += ce.nan_to_num()
        self.ce_read[:K] += ~ce.isnan()
        self.h_norm[:K] += h_norm
        self.h_ran[:K] += 1
        self.iters += 1
        self.flops += flops


def log_train(out_dir, iter_num, sums, *, seconds, lr, tokens_per_iter, peak, device):
    """The train line of the iterations in sums (a LogSums), read here (the one sync per log line); a
    loop no iteration read has CE NaN ('-'). peak: the device's FLOP/s for MFU, summed over the ranks
    (None: no MFU)."""
    loss, ce, h_norm = sums.loss / sums.iters, sums.ce / sums.ce_read, sums.h_norm / sums.h_ran
    ce, h_norm, loss = ce.tolist(), h_norm.tolist(), loss.item()
    tok_s = tokens_per_iter * sums.iters / seconds
    mfu = sums.flops / seconds / peak if peak else None
    mem = torch.cuda.max_memory_allocated(device) / 2**30 if device.startswith('cuda') else None
    ms = 1000 * seconds / sums.iters
    log(out_dir, dict(kind='train', iter=iter_num, loss=loss, ce=ce, h_norm=h_norm, lr=lr,
                      ms_per_iter=ms, tok_per_s=tok_s, mfu=mfu, peak_mem_gib=mem),
        f"iter {iter_num}: loss {loss:.4f} | ce {fmt(ce)} | |H_k| {fmt(h_norm, '.1f')} | "
        f"lr {lr:.1e} | {ms:.1f} ms/iter | {tok_s:,.0f} tok/s"
        + (f" | mfu {100 * mfu:.1f}%" if mfu else "") + (f" | {mem:.1f} GiB" if mem else ""))


# -----------------------------------------------------------------------------
# figures: one function a figure, each drawing on a new figure and returning it with its file name

def num(values):
    """NaN for None (how results.json writes NaN and inf)."""
    return [float('nan') if v is None else v for v in values]


def err(values):
    """Error bars from a list of standard deviations: None where there are none (one seed)."""
    values = [v if v is not None and math.isfinite(v) else 0.0 for v in values]
    return values if any(values) else None


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


def ppl_vs_k(plt, groups, runs):
    fig, ax = plt.subplots(figsize=(8, 6))
    for g in groups:
        ax.errorbar(ks(g), *per_k(g, 'ppl'), marker='o', capsize=3, label=label(g, settings=True))
    ax.axvline(groups[0]['mean']['trained_K'], color='gray', ls=':', lw=1)
    ax.set(xlabel='inference depth K (loops)', ylabel=f"{groups[0]['mean']['split']} perplexity (per token)",
           title=f'Perplexity vs inference depth (dotted: trained K){seeds_note(groups)}')
    clip_ppl(ax, [p for g in groups for p in per_k(g, 'ppl')[0]])
    legend(ax)
    return fig, 'ppl_vs_k.png'


def norms_vs_k(plt, groups, runs):
    fig, ax = plt.subplots(figsize=(8, 6))
    for g in groups:
        line = ax.errorbar(ks(g), *per_k(g, 'norm_mean'), marker='o', capsize=3, label=f"{label(g, settings=True)}: mean")
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
        ax.errorbar(x, y, yerr=yerr, xerr=xerr, marker='o', capsize=3, label=label(g, settings=True))
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
        ax.stairs(counts / counts.sum(), h['edges'], label=f"{label(g, settings=True)}, loop {h['loop']}")
        nz = np.flatnonzero(counts)
        used += [h['edges'][i] for i in nz] + [h['edges'][i + 1] for i in nz]
    ax.set_xscale('log')
    ax.set_xlim(min(used) / 1.5, max(used) * 1.5)
    ax.set(xlabel='‖H_K‖ of each token at the trained K (log scale, 20 bins a decade)', ylabel='fraction of tokens',
           title='Per-token hidden-state norm at the last trained loop')
    legend(ax)
    return fig, 'norm_hist.png'


def lemma_figure(plt, groups, runs):
    shown = [g for g in groups if g['mean'].get('lemma')]
    if not shown:
        return None
    fig, axes = plt.subplots(1, 3, figsize=(17, 5.5))
    for i, g in enumerate(shown):
        lem, color = g['mean']['lemma'], f'C{i % 10}'
        k = np.arange(1, lem['loops'] + 1)
        axes[0].plot(k, lem['s'], color=color, label=label(g, settings=True))
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
            axes[0].plot(c['train_iter'], c['norm_mean'], color=color[run['name']], label=label(g, settings=True) if first else None)
            axes[0].plot(c['iter'], c['norm_p99'], color=color[run['name']], ls='--', lw=1, marker='.')
            axes[1].plot(c['iter'], c['val_loss_K'], color=color[run['name']], label=label(g, settings=True) if first else None)
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


FIGURES = (ppl_vs_k, norms_vs_k, frontier, norm_hist, lemma_figure, drift)  # the paper's; beyond/eval_decode.py has the exits'


def all_plots(groups, runs, out, figures=FIGURES):
    """Writes the PNGs of figures into out (110 dpi, cut to what is drawn) and returns their paths."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    paths = []
    for figure in figures:
        made = figure(plt, groups, runs)
        if made is None:  # nothing of that kind was measured
            continue
        for fig, name in ([made] if isinstance(made, tuple) else made):  # (else one figure a run, as made)
            fig.savefig(os.path.join(out, name), dpi=110, bbox_inches='tight')
            plt.close(fig)
            paths.append(os.path.join(out, name))
    return paths
