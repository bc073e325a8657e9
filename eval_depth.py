"""
Perplexity, hidden-state norms and throughput against inference depth K, the scale clamp,
Lemma 2 out to many loops and the drift over training, for trained runs; seeds of one
condition are grouped into mean ± std.

    python eval_depth.py out-norm_perloop out-raw_perloop                  # every K from 1 to 2x trained K
    python eval_depth.py out-*-cpu-s* --clamp --lemma_loops 30 --curves --out eval-cpu
    python eval_depth.py out-raw_perloop/ckpt.pt --split test --max_tokens 100000
    python eval_depth.py --from_results a/results.json,b/results.json --out merged   # seeds evaluated apart

Writes a markdown table to stdout and, in --out, results.json (every run, and every group of
seeds) and PNG plots. Perplexity is over the whole split in non-overlapping windows of the
trained block size: every token but the first is scored exactly once. Loading a run and
choosing the scored windows live in data.py. Studies beyond the paper plug in as a Study
(below): python -m beyond.eval_decode is this script with the decoding studies (early exit,
calibrated halting, speculative decoding) added, and redraws their tables from a results.json.
"""

import argparse
import json
import math
import os
import re
import sys
import time
from dataclasses import asdict

import numpy as np
import torch

from configurator import UserError, one_line_errors
from model import summarize, token_diagnostics
from report import FIGURES, all_plots, label, mean_std, model_defaults, num, perplexity, pm, settings_of, write_json
from runtime import autocast, compile_errors, compile_failed, peak_flops, resolve_dtype, setup_device, sync, use_compile
from data import Scoring, load_run, run_folder, score_windows


# -----------------------------------------------------------------------------
# studies beyond the paper plug in here

class Study:
    """A study of each run beside the paper's: main(argv, studies=[...]) calls these hooks, each a
    no-op here (python -m beyond.eval_decode passes its decoding studies). What a study adds to a
    run's record is grouped into mean ± std, written to results.json and read back by
    --from_results as the paper's numbers are."""
    figures = ()  # functions (plt, groups, runs) -> [(name, figure)], as report.FIGURES

    def add_arguments(self, parser): pass
    def check(self, args): pass  # raises UserError
    def prepare(self, loaded, args): return [None] * len(loaded)  # per-run state (it may reorder loaded in place)
    def rows(self, model, states, K, state): return {}  # a batch's per-token rows (loops 1..K), from its states
    def evaluate(self, run, sc, rows, K, args, state): pass  # into run (K: the trained depth)
    def tables(self, group, runs): return ''
    def summary(self, groups, runs): return ''  # one table over the groups, after eval_depth's summary
    def from_results(self, runs, args): return False  # redo part of stored runs; True: they changed


# -----------------------------------------------------------------------------
# passes over the split

@torch.no_grad()
def score_depths(sc, max_loops, clamp, diag_tokens, desc, extra=None):
    """Per-token numbers for every K (depth CE, norms, radial fraction on the first diag_tokens
    tokens, angular change) and those that extra(model, states) makes of each batch's states (the
    studies' rows). Returns (rows, N) tensors."""
    rows = {'ce': [], 'norm': [], 'radial': [], 'angular': []}
    model, seen = sc.model, 0
    with sc.progress(sc.windows, desc) as bar:
        for x, y in sc.batches():
            with sc.ctx:
                states = model.hidden_states(x, max_loops, clamp)
                rows['ce'].append(model.depth_losses(states[1:], y))
                for name, t in (extra(model, states) if extra else {}).items():
                    rows.setdefault(name, []).append(t)
                radial = diag_tokens <= 0 or seen < diag_tokens
                for name, t in token_diagnostics(model, states, y, every_loop_last=True, radial=radial).items():
                    rows[name].append(t)
            seen += y.numel()
            bar.update(1)
    return {name: torch.cat(r, dim=1).cpu() for name, r in rows.items() if r}


def lemma_sums(states):
    """Lemma 2 of the paper (the activity lemma), measured. Write each token's state as H = s * u, with s
    the RMS of H over channels and u = H / s (so ||u|| = sqrt(d)). In the drifted regime a loop adds a
    roughly constant radial increment a_k = <u_k, H_{k+1} - H_k>, while the direction moves by
    ||u_{k+1} - u_k|| ~ c / s_k: the larger the scale, the less a loop can turn the state, so extra loops
    stop changing the prediction (K-invariance).
    states: any iterable of H_1, H_2, ..., H_N (each (..., C)), consumed one at a time (model.loop_states
    runs N loops in O(one state)). Returns float64 sums over tokens, to be divided by 'tokens': 's' (N,),
    and 'radial_increment', 'angular_step', 's_times_angular' (N-1,) for k = 1..N-1."""
    sums = {'s': [], 'radial_increment': [], 'angular_step': [], 's_times_angular': []}
    prev = None
    for h in states:
        h = h.detach().double().reshape(-1, h.size(-1))
        s = h.pow(2).mean(-1).sqrt()  # (N,)
        u = h / s[:, None]
        sums['s'].append(s.sum())
        if prev is not None:
            h_prev, s_prev, u_prev = prev
            step = (u - u_prev).norm(dim=-1)
            sums['radial_increment'].append((u_prev * (h - h_prev)).sum(-1).sum())
            sums['angular_step'].append(step.sum())
            sums['s_times_angular'].append((s_prev * step).sum())
        prev = h, s, u
    out = {k: torch.stack(v) if v else torch.zeros(0, dtype=torch.float64) for k, v in sums.items()}
    out['tokens'] = prev[0].size(0)
    return out


@torch.no_grad()
def lemma(sc, n_loops, max_tokens, name):
    """Lemma 2 out to n_loops loops on the first max_tokens scored tokens: per loop, the token
    means of s_k, the radial increment, the angular step and s_k x angular step (lemma_sums),
    one state held at a time. c, the constant of the angular step's c / s_k law, is the median
    of s_k x angular step over the second half of the loops (the drifted regime, if any)."""
    sums, n = None, 0
    model = sc.model
    sub = score_windows(sum(n for _, n in sc.windows) + 1, model.config.block_size, max_tokens)
    with sc.progress(sub, f"{name}: Lemma 2, {n_loops} loops") as bar:
        for x, _ in sc.batches(sub):
            with sc.ctx:
                got = lemma_sums(h for k, h in enumerate(model.loop_states(x, n_loops)) if k >= 1)
            n += got.pop('tokens')
            sums = got if sums is None else {k: sums[k] + v for k, v in got.items()}
            bar.update(1)
    out = {k: (v / n).tolist() for k, v in sums.items()}
    out['c'] = float(np.median(out['s_times_angular'][(n_loops - 1) // 2:]))
    return dict(loops=n_loops, tokens=n, **out)


@torch.no_grad()
def throughput(model, x, n_loops, iters, device):
    """Tokens per second of a depth-K forward pass (the last loop's logits for every position)
    at the eval batch size: warm-up first, then synchronised timing."""
    for _ in range(2):
        model(x, n_loops=n_loops)
    sync(device)
    t0 = time.perf_counter()
    for _ in range(iters):
        model(x, n_loops=n_loops)
    sync(device)
    return x.numel() * iters / (time.perf_counter() - t0)


# -----------------------------------------------------------------------------
# one run

def learned_depth_settings(model, config):
    """What a run learned or drew of its depth controls: the model's learned scalars (alpha of an
    AlphaReadout, a learned contraction) and the random-depth draw it trained with (None where none)."""
    out = model.learned_scalars()
    if config.get('random_depth'):
        out['draw'] = {k: config.get(k) for k in ('n_loops', 'depth_sigma', 'max_loops', 'bptt')}
    return out or None


def evaluate_run(path, model, config, data, args, device, dtype, studies=(), states=()):
    cfg = model.config
    ctx = autocast(device, dtype)
    max_loops = args.max_loops or 2 * cfg.n_loops
    batch_size = args.batch_size or config.get('batch_size', 16)
    windows = score_windows(len(data), cfg.block_size, args.max_tokens)
    last = min(cfg.n_loops, max_loops)  # the trained K, or the deepest loop evaluated if fewer
    name = os.path.basename(os.path.normpath(run_folder(path)))
    run = dict(name=name, path=path, model=asdict(cfg), trained_K=cfg.n_loops, random_depth=bool(config.get('random_depth')),
               depth=learned_depth_settings(model, config), seed=config.get('seed'), config=config, split=args.split,
               tokens_scored=int(sum(n for _, n in windows)), batch_size=batch_size, device=device, dtype=dtype)

    sc = Scoring(model, data, windows, batch_size, device, ctx)  # what each study of this run needs
    # the timing's forward, compiled as trained (the shared stack once: one graph serves every K), and
    # built first: a compiler that cannot build is one line before minutes of scoring, not after
    setting = config.get('compile', 'off') if args.compile == 'as_trained' else args.compile
    fwd = model
    if use_compile(setting, device):
        fwd = type(model)(cfg).to(device).eval()
        fwd.load_state_dict(model.state_dict())
        fwd.loop = torch.compile(fwd.loop)
        try:
            with ctx, torch.no_grad():
                fwd(sc.first_batch()[0], n_loops=1)
        except compile_errors() as e:
            raise compile_failed(e, 'the timing forward')
    run['compiled'] = fwd is not model

    def extra(model, hs):  # the studies' rows of a batch, at loops 1..the trained K
        return {k: v for study, state in zip(studies, states) for k, v in study.rows(model, hs, last, state).items()}
    free = score_depths(sc, max_loops, False, args.diag_tokens, f"{name}: K=1..{max_loops}", extra)
    clamped = score_depths(sc, max_loops, True, args.diag_tokens, f"{name}: clamped") if args.clamp else None

    def stats(per_token, K):  # the summary of loop K as a dict of floats
        return {k: v[0] for k, v in summarize({k: per_token[k][K - 1:K] for k in ('norm', 'radial', 'angular')}).items()}

    # throughput at each K (fwd: above)
    x, _ = sc.first_batch()
    peak = peak_flops(device, dtype)
    run['per_K'] = []
    for K in range(1, max_loops + 1):
        with ctx:
            tok_s = throughput(fwd, x, K, args.bench_iters, device)
        loss = free['ce'][K - 1].mean().item()
        row = dict(K=K, loss=loss, ppl=perplexity(loss), tok_per_s=tok_s,
                   mfu=model.flops_per_token(K, training=False, T=x.size(1)) * tok_s / peak if peak else None,
                   **stats(free, K))
        if clamped is not None:
            c_loss = clamped['ce'][K - 1].mean().item()
            row['clamp'] = dict(loss=c_loss, ppl=perplexity(c_loss), delta_loss=c_loss - loss, **stats(clamped, K))
        run['per_K'].append(row)

    # one fixed log grid (20 bins a decade, 0.1 to 1e7) so that runs can be compared bin by bin
    edges = np.logspace(-1, 7, 161)
    counts, _ = np.histogram(free['norm'][last - 1].double().numpy().clip(edges[0], edges[-1]), bins=edges)
    run['final_norm_hist'] = dict(loop=last, edges=edges.tolist(), counts=counts.tolist())
    for study, state in zip(studies, states):
        study.evaluate(run, sc, free, last, args, state)
    if args.lemma_loops:
        run['lemma'] = lemma(sc, args.lemma_loops, args.lemma_tokens, name)
    if args.curves:
        run['curve'] = read_curve(run_folder(path), cfg.n_loops)
    return run


# -----------------------------------------------------------------------------
# conditions: runs that differ only in seed are one condition, reported as mean ± std

IDENTITY = ('seed', 'out_dir', 'init_from', 'eval_only', 'device', 'compile', 'log_interval', 'eval_interval',
            'eval_iters', 'always_save_checkpoint', 'data_dir', 'loss_path', 'diag_tokens',
            'model_class')  # settings that do not make a condition (a model class: its fields do)
SHAPE = ('n_layer', 'n_head', 'n_embd', 'n_loops', 'block_size')


def condition(config):
    config = {**model_defaults(config), **config}  # (a model field the run has not: its class's default)
    return tuple(sorted((k, repr(v)) for k, v in config.items() if k not in IDENTITY))


def group_runs(runs, configs):
    """Groups runs by their training settings less IDENTITY (seed, out_dir, ...). Returns the
    groups (name, runs, seeds, n, and the mean and std of every number of the runs) and notes:
    one line for each pair of groups that differ only in model shape (kept apart)."""
    by_key = {}
    for run, config in zip(runs, configs):
        by_key.setdefault(condition(config) if config else ('path', run['path']), []).append((run, config))
    groups, notes = [], []
    for members in by_key.values():
        mean, std = mean_std([run for run, _ in members])
        names = [run['name'] for run, _ in members]
        stem = re.sub(r'[-_](s|seed)\d+$', '', names[0])
        groups.append(dict(name=stem if len(members) > 1 else names[0], runs=names,
                           seeds=[run['seed'] for run, _ in members], n=len(members), mean=mean, std=std))
    keys = list(by_key)
    for i, a in enumerate(keys):
        for b in keys[i + 1:]:
            if a[0] == 'path' or b[0] == 'path':  # a run without its training config: nothing to compare
                continue
            ca, cb = dict(a), dict(b)
            differ = sorted(k for k in set(ca) | set(cb) if ca.get(k) != cb.get(k))
            if differ and set(differ) <= set(SHAPE):
                shape = ', '.join(f"{k} {ca.get(k)} vs {cb.get(k)}" for k in differ)
                notes.append(f"{by_key[a][0][0]['name']} and {by_key[b][0][0]['name']} differ only in seed and "
                             f"model shape ({shape}): not one condition, reported apart")
    return groups, notes


# -----------------------------------------------------------------------------
# the drift over training, from each run's log.jsonl

def read_curve(folder, K):
    """From out_dir/log.jsonl: per eval line, the iteration, p99 ||H_K|| and the validation loss
    at K=1 and at the trained K (n_loops: with random depth the lines log every loop to max_loops,
    its mean K is the trained one); per train line (denser), the mean ||H_K|| over the training
    batches since the line before, starting from the first eval line's mean (on its validation
    batch, before the first step)."""
    path = os.path.join(folder, 'log.jsonl')
    try:
        with open(path) as f:
            records = [json.loads(line) for line in f]
    except (OSError, ValueError) as e:
        raise UserError(f"--curves reads {path}, written by train.py: {getattr(e, 'strerror', None) or e}")
    evals = [r for r in records if r.get('kind') == 'eval']
    trains = [r for r in records if r.get('kind') == 'train']
    if not evals:
        raise UserError(f"{path} has no eval lines: --curves needs a run that train.py evaluated at least once")
    return dict(iter=[r['iter'] for r in evals], norm_p99=[r['norm_p99'][K - 1] for r in evals],
                val_loss_1=num([r['val_loss'][0] for r in evals]),  # (NaN: a diverged run logs null losses)
                val_loss_K=num([r['val_loss'][K - 1] for r in evals]),
                train_iter=[evals[0]['iter']] + [r['iter'] for r in trains],
                norm_mean=[evals[0]['norm_mean'][K - 1]] + [r['h_norm'][K - 1] for r in trains])


# -----------------------------------------------------------------------------
# reporting

def table(groups):
    clamp = any('clamp' in r for g in groups for r in g['mean']['per_K'])
    head = ['run', 'K', 'ppl'] + (['ppl clamped', 'Δ loss clamp'] if clamp else []) + \
        ['mean ‖H_K‖', 'p99 ‖H_K‖', 'max ‖H_K‖', 'radial frac', '1-cos', 'tok/s']
    lines = ['| ' + ' | '.join(head) + ' |', '|' + '---|' * len(head)]
    for g in groups:
        for r, s in zip(g['mean']['per_K'], g['std']['per_K']):
            mark = '*' if r['K'] == g['mean']['trained_K'] else ''
            cells = [label(g), f"{r['K']}{mark}", pm(r['ppl'], s['ppl'])]
            if clamp:
                cells += [pm(r['clamp']['ppl'], s['clamp']['ppl']), pm(r['clamp']['delta_loss'], s['clamp']['delta_loss'], '+.4f')]
            cells += [pm(r['norm_mean'], s['norm_mean'], '.1f'), pm(r['norm_p99'], s['norm_p99'], '.1f'),
                      pm(r['norm_max'], s['norm_max'], '.1f'), pm(r['radial'], None, '.1e'),
                      pm(r['angular'], None, '.1e'), pm(r['tok_per_s'], None, ',.0f')]
            lines.append('| ' + ' | '.join(cells) + ' |')
    return '\n'.join(lines)


def render(groups, runs, studies=()):
    """Every table main prints, as one text: the depth table, each group's studies' tables, Lemma 2, the summary."""
    text = table(groups) + '\n' + ''.join(study.tables(g, runs) for g in groups for study in studies)
    text += lemma_table(groups) + '\n' if any(g['mean'].get('lemma') for g in groups) else ''
    text += summary_table(groups) + '\n' + loss_table(groups)
    text += lemma_summary(groups) + '\n' if any(g['mean'].get('lemma') for g in groups) else ''
    return text + ''.join(study.summary(groups, runs) for study in studies)


def sig(x):
    """Three significant digits, thousands split; below 1e-3 in e-notation."""
    return format(x, ',.0f') if abs(x) >= 1000 else format(x, '.3g') if x == 0 or abs(x) >= 1e-3 else format(x, '.1e')


def lemma_summary(groups):
    """Lemma 2 at the trained K and at the last loop measured, one row a group: s_k, a_k, the angular step and
    s_k x the step."""
    lemmas = [(g, g['mean']['lemma']) for g in groups if g['mean'].get('lemma')]
    ks = {(g['mean']['trained_K'], lem['loops'] - 1) for g, lem in lemmas}
    (k, last), = ks if len(ks) == 1 else [('K', 'last')]
    lines = [f'\nLemma 2 at the trained K and at the last loop measured (token means; step = ‖u_k+1 − u_k‖)',
             f'| run | s_{k} | s_{last} | a_{k} | a_{last} | step, loop {k} | step, loop {last} | s × step, loop {k} | '
             f'loop {last} |', '|---|---|---|---|---|---|---|---|---|']
    for g, lem in lemmas:
        at = (g['mean']['trained_K'] - 1, lem['loops'] - 2)
        cells = [sig(lem[key][i]) for key in ('s', 'radial_increment', 'angular_step', 's_times_angular') for i in at]
        lines.append(f"| {label(g)} | " + ' | '.join(cells) + ' |')
    return '\n'.join(lines)


def short(mean, std=None):
    """mean [± std] as the pages show them: two decimals below 100, none from 100 on (thousands split), and in
    e-notation from 100,000 on."""
    if mean is None or not math.isfinite(mean):
        return '-'
    spec = '.2f' if abs(mean) < 100 else ',.0f' if abs(mean) < 1e5 else '.1e'
    return format(mean, spec) + (f" ± {format(std, spec)}" if std is not None and math.isfinite(std) else '')


def summary_table(groups):
    """One row a group, as the pages quote it: ppl at K = 1..the trained K and at its multiples by 2, 4, ..; the
    best K; and at the trained K: mean ‖H_K‖, the radial fraction, 1 - cos, the clamp's Δ loss (if evaluated), and
    Lemma 2's s_K and angular step (if measured)."""
    trained = {g['mean']['trained_K'] for g in groups}
    T = trained.pop() if len(trained) == 1 else None
    t = str(T) if T else 'K'
    evaluated = {r['K'] for g in groups for r in g['mean']['per_K']}
    top = max(g['mean']['trained_K'] for g in groups)
    Ks = sorted(k for k in evaluated if k <= top or any(k == g['mean']['trained_K'] * 2 ** i for g in groups
                                                         for i in range(1, 10)))
    clamp = any('clamp' in r for g in groups for r in g['mean']['per_K'])
    lem = any(g['mean'].get('lemma') for g in groups)
    head = ['run'] + [f"K={k}" + (' (trained)' if k == T else '') for k in Ks] + [
        'best K', f'mean ‖H_{t}‖', 'radial frac', f'1 − cos, loop {t}'] + (
        [f'Δ loss clamp, K={t}'] if clamp else []) + ([f's_{t}', f'step, loop {t}'] if lem else [])
    lines = [f"\nsummary: ppl by K (mean ± std over seeds), the best K, and the state at the trained K{'' if T else ' (its *)'}",
             '| ' + ' | '.join(head) + ' |', '|' + '---|' * len(head)]
    for g in groups:
        mean = {r['K']: r for r in g['mean']['per_K']}
        std = {r['K']: s for r, s in zip(g['mean']['per_K'], g['std']['per_K'])}
        k, at = g['mean']['trained_K'], mean.get(g['mean']['trained_K'], {})
        cells = [label(g)] + [short(mean[K]['ppl'], std[K]['ppl']) if K in mean else '-' for K in Ks]
        cells += [str(min(mean, key=lambda K: mean[K]['ppl'])), short(at.get('norm_mean')),
                  pm(at.get('radial'), None, '.1e'), pm(at.get('angular'), None, '.1e')]
        if clamp:
            cells.append(pm(at['clamp']['delta_loss'], std[k]['clamp']['delta_loss'], '+.4f') if 'clamp' in at else '-')
        if lem:
            lm = g['mean'].get('lemma')
            cells += [format(lm['s'][k - 1], '.3g'), format(lm['angular_step'][k - 1], '.2g')] if lm and lm['loops'] > k \
                else ['-', '-']
        lines.append('| ' + ' | '.join(cells) + ' |')
    return '\n'.join(lines)


def loss_table(groups):
    """Where the summary shows a perplexity in e-notation (100,000 or more), the loss it comes from, in nats, at every K
    evaluated (mean ± std over seeds): the number the pages compare there. Empty otherwise."""
    if not any(r['ppl'] >= 1e5 for g in groups for r in g['mean']['per_K']):
        return ''
    Ks = sorted({r['K'] for g in groups for r in g['mean']['per_K']})
    lines = ['\nloss by K (nats, mean ± std over seeds), as the perplexities above come from it',
             '| run | ' + ' | '.join(f'K={k}' for k in Ks) + ' |', '|' + '---|' * (len(Ks) + 1)]
    for g in groups:
        at = {r['K']: (r['loss'], s['loss']) for r, s in zip(g['mean']['per_K'], g['std']['per_K'])}
        lines.append(f"| {label(g)} | " + ' | '.join(pm(*at[k], '.2f') if k in at else '-' for k in Ks) + ' |')
    return '\n'.join(lines) + '\n'


def lemma_table(groups):
    lines = ['\nLemma 2 (token means): s_k, radial increment a_k, angular step, s_k x angular step, at loops 1, 2, 4, 8, ..',
             '| run | k | s_k | a_k | ‖u_k+1 − u_k‖ | s_k ‖u_k+1 − u_k‖ |', '|---|---|---|---|---|---|']
    for g in groups:
        lem = g['mean'].get('lemma')
        if not lem:
            continue
        for k in [2 ** i for i in range(10) if 2 ** i < lem['loops']]:
            lines.append(f"| {label(g)} | {k} | {lem['s'][k - 1]:.4g} | {lem['radial_increment'][k - 1]:.4g} | "
                         f"{lem['angular_step'][k - 1]:.3e} | {lem['s_times_angular'][k - 1]:.4g} |")
    return '\n'.join(lines)


# -----------------------------------------------------------------------------

def check_settings(args, studies=()):
    """Every check on the arguments, in one place (and each study's on its own)."""
    if args.max_loops is not None and args.max_loops < 1:
        raise UserError(f"--max_loops must be at least 1, got {args.max_loops}")
    if args.lemma_loops and args.lemma_loops < 2:
        raise UserError(f"--lemma_loops needs at least 2 loops (a step is between two loops); got {args.lemma_loops}")
    if args.lemma_loops < 0 or args.lemma_tokens < 1:
        raise UserError("--lemma_loops must be >= 0, and --lemma_tokens >= 1")
    if args.batch_size < 0 or args.max_tokens < 0 or args.bench_iters < 1 or args.diag_tokens < 0:
        raise UserError("--batch_size, --max_tokens and --diag_tokens must be >= 0 (0: the default), --bench_iters >= 1")
    for study in studies:
        study.check(args)


def make_out(path):
    """The output folder, made and tried once the runs have loaded and before they are evaluated."""
    try:
        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, '.write-test'), 'w'):
            pass
        os.remove(os.path.join(path, '.write-test'))
    except OSError as e:
        raise UserError(f"cannot write to --out {path}: {e.strerror}")


def evaluate_runs(args, studies=()):
    """Loads every run (failing early on bad input), evaluates each, and groups seeds."""
    check_settings(args, studies)
    if not args.runs:
        raise UserError("no runs given: name run folders (or checkpoint files), or --from_results")
    device = setup_device(args.device)
    dtype = resolve_dtype(args.dtype, device)
    loaded = [(path, *load_run(path, device, args.split, args.data_dir)) for path in args.runs]  # fail early
    if args.curves:
        for path, model, *_ in loaded:
            read_curve(run_folder(path), model.config.n_loops)
    states = list(zip(*[study.prepare(loaded, args) for study in studies])) or [()] * len(loaded)
    make_out(args.out)
    runs = []
    for (path, model, config, data), state in zip(loaded, states):
        run = evaluate_run(path, model, config, data, args, device, dtype, studies, state)
        print(f"{run['name']}: {settings_of(run)}; {run['tokens_scored']:,} {args.split} tokens scored", file=sys.stderr)
        runs.append(run)
    groups, notes = group_runs(runs, [config for _, _, config, _ in loaded])
    return runs, groups, notes


def from_results(path, names):
    """The runs, groups and notes of an earlier results.json; with names, only the groups so
    named or holding a run so named (folder names, as in the tables)."""
    paths = path.split(',')
    runs, groups, notes = [], [], []
    for one in paths:
        try:
            with open(one) as f:
                results = json.load(f)
            runs += results['runs']
            groups += results['groups']
            notes += results.get('notes', [])
        except (OSError, ValueError, KeyError) as e:
            raise UserError(f"cannot read {one} as eval_depth.py's results.json ({type(e).__name__})")
    if len(paths) > 1:  # runs from several evaluations: grouped anew by their training settings
        if not all('config' in run for run in runs):
            raise UserError("--from_results with several files needs results.json files that record each run's "
                            "training config (written by this version of eval_depth.py)")
        groups, notes = group_runs(runs, [run['config'] for run in runs])
    if names:
        names = {os.path.basename(os.path.normpath(n)) for n in names}
        groups = [g for g in groups if g['name'] in names or names & set(g['runs'])]
        if not groups:
            raise UserError(f"{path} has none of {', '.join(sorted(names))}")
        kept = {name for g in groups for name in g['runs']}
        runs = [run for run in runs if run['name'] in kept]
    return runs, groups, notes


def main(argv=None, studies=(), script='eval_depth.py'):
    """The script: argv its arguments (default: the command line's); studies, those run beside
    the paper's (Study objects); script, the name its errors and results.json give. Each run is
    loaded as the class its checkpoint records (LoopedGPT, or a subclass in beyond/)."""
    p = argparse.ArgumentParser(prog=script, description=__doc__.split('\n\n')[0])
    p.add_argument('runs', nargs='*', help='run folders (holding ckpt.pt) or checkpoint files; with --from_results, '
                                           'the groups or runs to show (default: all)')
    p.add_argument('--from_results', default=None,
                   help='print the tables and draw the plots of an earlier results.json, without evaluating (several, '
                        'comma-separated: their runs are grouped together, e.g. seeds evaluated apart)')
    p.add_argument('--split', default='val', choices=['val', 'test'])
    p.add_argument('--max_loops', type=int, default=None, help='evaluate K = 1..max_loops (default: 2x trained K)')
    p.add_argument('--max_tokens', type=int, default=0, help='score only the first N tokens (0: the whole split)')
    p.add_argument('--batch_size', type=int, default=0, help='windows per batch (default: the training batch size)')
    p.add_argument('--clamp', action='store_true', help='also evaluate with the recurrent scale clamp')
    p.add_argument('--lemma_loops', type=int, default=0, help='Lemma 2 out to this many loops (0: off; e.g. 30)')
    p.add_argument('--lemma_tokens', type=int, default=16384, help='tokens the Lemma-2 sweep runs on')
    p.add_argument('--curves', action='store_true', help="the drift over training, from each run's log.jsonl")
    p.add_argument('--out', default='eval-out', help='folder for results.json and the plots')
    p.add_argument('--data_dir', default=None, help="where prepare.py wrote the data (default: the run's data_dir)")
    p.add_argument('--device', default='auto', help="'auto' (cuda, then mps, then cpu), 'cpu', 'cuda', 'cuda:1', 'mps'")
    p.add_argument('--dtype', default='auto', choices=['auto', 'float32', 'bfloat16', 'float16'])
    p.add_argument('--compile', default='as_trained', choices=['as_trained', 'on', 'off'],
                   help='for the throughput timing')
    p.add_argument('--bench_iters', type=int, default=10, help='timed forward passes per K')
    p.add_argument('--diag_tokens', type=int, default=0,
                   help='compute the radial fraction on the first N tokens only (0: all; it runs the readout '
                        'in float64 at every loop, slow for a 50k vocabulary on a CPU)')
    for study in studies:
        study.add_arguments(p)
    argv = sys.argv[1:] if argv is None else [str(a) for a in argv]
    args = p.parse_args(argv)
    changed = not args.from_results or ',' in args.from_results  # (several: merged, grouped anew)
    with one_line_errors(script):
        if args.from_results:
            runs, groups, notes = from_results(args.from_results, args.runs)
            make_out(args.out)
            if any([study.from_results(runs, args) for study in studies]):
                changed = True
                groups, notes = group_runs(runs, [run.get('config') for run in runs])
        else:
            runs, groups, notes = evaluate_runs(args, studies)
    for note in notes:
        print(f"{script}: note: {note}", file=sys.stderr)
    print(render(groups, runs, studies), end='')
    if changed:
        write_json(os.path.join(args.out, 'results.json'),
                   dict(command=' '.join([script, *argv]), runs=runs, groups=groups, notes=notes))
    for path in all_plots(groups, runs, args.out, FIGURES + tuple(f for study in studies for f in study.figures)):
        print(f"wrote {path}", file=sys.stderr)


if __name__ == '__main__':
    main()
