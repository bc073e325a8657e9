"""
Perplexity, hidden-state norms and throughput against inference depth K, the scale clamp
and early exit, for one or more trained runs, with the plots that show the blind spot.

    python eval_depth.py out-norm_perloop out-raw_perloop                  # every K from 1 to 2x trained K
    python eval_depth.py out-*-cpu --clamp --exit 0.5,0.7,0.9 --out eval-cpu
    python eval_depth.py out-raw_perloop/ckpt.pt --split test --max_tokens 100000

Writes a markdown table to stdout and, in --out, results.json and PNG plots. Perplexity is
over the whole split in non-overlapping windows of the trained block size: every token but
the first is scored exactly once (the first has no context).
"""

import argparse
import math
import os
import sys
import time
from collections import Counter

import numpy as np
import torch
from torch.nn import functional as F

from data import gather_windows, load_tokens
from model import LoopedGPT, summarize, token_diagnostics
from report import perplexity, write_json
from runtime import autocast, peak_flops, resolve_dtype, setup_device, sync, use_compile


class EvalError(Exception):
    """Something the user can fix; printed as one line."""


# -----------------------------------------------------------------------------
# which tokens are scored

def score_windows(n_tokens, block_size, max_tokens=0):
    """Non-overlapping (start, length) windows: inputs data[start:start+length], targets
    data[start+1:start+1+length]. Together the targets are tokens 1 .. n-1 (or the first
    max_tokens of them), each exactly once."""
    n_targets = n_tokens - 1 if max_tokens <= 0 else min(max_tokens, n_tokens - 1)
    return [(s, min(block_size, n_targets - s)) for s in range(0, n_targets, block_size)]


def batches(data, windows, batch_size, device):
    """Windows of equal length stacked into (B, T) batches; the shorter tail window alone."""
    groups = {}
    for s, n in windows:
        groups.setdefault(n, []).append(s)
    for n, starts in sorted(groups.items(), reverse=True):
        for i in range(0, len(starts), batch_size):
            x, y = gather_windows(data, starts[i:i + batch_size], n)
            yield x.to(device), y.to(device)


# -----------------------------------------------------------------------------
# one pass over the split

@torch.no_grad()
def evaluate(model, data, windows, batch_size, max_loops, clamp, exit_loops, diag_tokens, device, ctx, bar):
    """Per-token numbers for every K (depth CE, norms, radial fraction on the first diag_tokens
    tokens, angular change) and, for loops 1..exit_loops (0: none), the exit readouts'
    confidences and CE. Returns (K, N) tensors."""
    rows = {'ce': [], 'norm': [], 'radial': [], 'angular': [], 'conf_p': [], 'conf_h': [], 'ce_exit': []}
    log_v = math.log(model.config.vocab_size)
    seen = 0
    for x, y in batches(data, windows, batch_size, device):
        with ctx:
            states = model.hidden_states(x, max_loops, clamp)
            rows['ce'].append(model.depth_losses(states[1:], y))
            if exit_loops:
                p_conf, h_conf, ce_exit = [], [], []
                for k in range(1, exit_loops + 1):
                    # a token that exits at loop k is read out as the model run with k loops
                    logp = F.log_softmax(model.logits(states[k], last=True).float(), dim=-1)
                    p_conf.append(logp.max(-1).values.exp().flatten())
                    h_conf.append((1 + (logp.exp() * logp).sum(-1) / log_v).flatten())  # 1 - entropy / ln V
                    ce_exit.append(-logp.gather(-1, y[..., None]).flatten())
                rows['conf_p'].append(torch.stack(p_conf))
                rows['conf_h'].append(torch.stack(h_conf))
                rows['ce_exit'].append(torch.stack(ce_exit))
            radial = diag_tokens <= 0 or seen < diag_tokens
            for name, t in token_diagnostics(model, states, y, every_loop_last=True, radial=radial).items():
                rows[name].append(t)
        seen += y.numel()
        bar.update(1)
    return {name: torch.cat(r, dim=1).cpu() for name, r in rows.items() if r}


def early_exit(per_token, thresholds):
    """Teacher-forced early exit: each token stops at the first loop whose confidence exceeds
    the threshold (else at the last trained loop) and is scored by that loop's distribution."""
    out = []
    K = per_token['ce_exit'].size(0)
    for criterion, conf in (('max_prob', per_token['conf_p']), ('entropy', per_token['conf_h'])):
        for tau in thresholds:
            confident = conf > tau
            confident[-1] = True  # the last loop always answers
            exit_at = confident.float().argmax(dim=0)  # first loop over the threshold, (N,)
            ce = per_token['ce_exit'].gather(0, exit_at[None]).squeeze(0)
            out.append(dict(criterion=criterion, threshold=tau, mean_loops=(exit_at + 1).float().mean().item(),
                            loss=ce.mean().item(), ppl=perplexity(ce.mean().item()), max_loops=K))
    return out


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

def load_run(path, device, split, data_dir):
    try:
        model, ckpt = LoopedGPT.from_checkpoint(path, device)
    except (FileNotFoundError, ValueError) as e:
        raise EvalError(str(e))
    config = ckpt.get('config', {})
    folder = os.path.join(data_dir or config.get('data_dir', 'data'), config.get('dataset', ''))
    try:
        data, meta = load_tokens(folder, split)
    except FileNotFoundError as e:
        raise EvalError(str(e))
    if meta['vocab_size'] != model.config.vocab_size:
        raise EvalError(f"{path} was trained with vocab {model.config.vocab_size}, but {folder} has vocab "
                        f"{meta['vocab_size']} ({meta['tokenizer']}): evaluate on the data it was trained on")
    return model.eval(), config, data


def plan(model, config, data, args):
    """(max_loops, batch size, windows, progress steps) of one run's evaluation."""
    max_loops = args.max_loops or 2 * model.config.n_loops
    batch_size = args.batch_size or config.get('batch_size', 16)
    windows = score_windows(len(data), model.config.block_size, args.max_tokens)
    lengths = Counter(n for _, n in windows)  # batches() stacks windows of one length
    n_batches = sum(math.ceil(count / batch_size) for count in lengths.values())
    return max_loops, batch_size, windows, (1 + args.clamp) * n_batches + max_loops


def evaluate_run(path, model, config, data, args, device, dtype, bar):
    cfg = model.config
    ctx = autocast(device, dtype)
    max_loops, batch_size, windows, _ = plan(model, config, data, args)
    last = min(cfg.n_loops, max_loops)  # the trained K, or the deepest loop evaluated if fewer
    run = dict(path=path, readout=cfg.readout, loss=cfg.loss, norm_penalty=cfg.norm_penalty,
               interloop_norm=cfg.interloop_norm, trained_K=cfg.n_loops, split=args.split,
               tokens_scored=int(sum(n for _, n in windows)), batch_size=batch_size, device=device, dtype=dtype)
    folder = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
    run['name'] = os.path.basename(os.path.normpath(folder))

    exit_loops = last if args.exit else 0
    free = evaluate(model, data, windows, batch_size, max_loops, False, exit_loops, args.diag_tokens, device, ctx, bar)
    clamped = evaluate(model, data, windows, batch_size, max_loops, True, 0, args.diag_tokens, device, ctx, bar) \
        if args.clamp else None

    def stats(per_token, K):  # the summary of loop K as a dict of floats
        return {k: v[0] for k, v in summarize({k: per_token[k][K - 1:K] for k in ('norm', 'radial', 'angular')}).items()}

    # throughput at each K, compiled as trained (one graph per K)
    setting = config.get('compile', 'off') if args.compile == 'as_trained' else args.compile
    fwd = model
    if use_compile(setting, device):
        torch._dynamo.config.cache_size_limit = max(64, torch._dynamo.config.cache_size_limit)
        fwd = torch.compile(model)
    run['compiled'] = fwd is not model
    x, _ = next(batches(data, windows[:batch_size], batch_size, device))
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
        bar.update(1)

    # one fixed log grid (20 bins a decade, 0.1 to 1e7) so that runs can be compared bin by bin
    edges = np.logspace(-1, 7, 161)
    counts, _ = np.histogram(free['norm'][last - 1].double().numpy().clip(edges[0], edges[-1]), bins=edges)
    run['final_norm_hist'] = dict(loop=last, edges=edges.tolist(), counts=counts.tolist())
    run['early_exit'] = early_exit(free, args.exit) if args.exit else []
    return run


# -----------------------------------------------------------------------------
# reporting

def describe(run):
    extra = (f", penalty {run['norm_penalty']}" if run['norm_penalty'] else '') + \
            (', inter-loop norm' if run['interloop_norm'] else '')
    return f"{run['readout']} readout, {run['loss']} CE{extra}, K={run['trained_K']}"


def table(runs):
    clamp = any('clamp' in r for run in runs for r in run['per_K'])
    head = ['run', 'K', 'ppl'] + (['ppl clamped', 'Δ loss clamp'] if clamp else []) + \
        ['mean ‖H_K‖', 'p99 ‖H_K‖', 'max ‖H_K‖', 'radial frac', '1-cos', 'tok/s']
    lines = ['| ' + ' | '.join(head) + ' |', '|' + '---|' * len(head)]
    for run in runs:
        for r in run['per_K']:
            mark = '*' if r['K'] == run['trained_K'] else ''
            cells = [run['name'], f"{r['K']}{mark}", f"{r['ppl']:.3f}"]
            if clamp:
                cells += [f"{r['clamp']['ppl']:.3f}", f"{r['clamp']['delta_loss']:+.4f}"]
            cells += [f"{r['norm_mean']:.1f}", f"{r['norm_p99']:.1f}", f"{r['norm_max']:.1f}",
                      f"{r['radial']:.1e}", f"{r['angular']:.1e}", f"{r['tok_per_s']:,.0f}"]
            lines.append('| ' + ' | '.join(cells) + ' |')
    return '\n'.join(lines)


def plots(runs, out):
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    paths = []

    def save(fig, name):
        fig.savefig(os.path.join(out, name), dpi=110, bbox_inches='tight')
        plt.close(fig)
        paths.append(os.path.join(out, name))

    def label(run):
        return f"{run['name']} ({describe(run)})"

    def legend(ax):  # below the axes, so that no line is hidden behind it
        ax.legend(fontsize=7, loc='upper center', bbox_to_anchor=(0.5, -0.13), ncol=2, frameon=False)

    def clip_ppl(ax, values):
        # untrained readouts (e.g. early loops of a terminal-loss run) reach perplexities in the
        # millions; keep the axis on the range where the runs differ and say so
        lo, hi = min(values), max(values)
        if hi > 2 * lo:
            ax.set_ylim(0.97 * lo, 2 * lo)
            ax.set_title(ax.get_title() + f'\n(axis cut at 2x the best, {2 * lo:.1f}; higher points are off the chart)',
                         fontsize=9)

    fig, ax = plt.subplots(figsize=(8, 6))
    for run in runs:
        ks = [r['K'] for r in run['per_K']]
        ax.plot(ks, [r['ppl'] for r in run['per_K']], marker='o', label=label(run))
    ax.axvline(runs[0]['trained_K'], color='gray', ls=':', lw=1)
    ax.set(xlabel='inference depth K (loops)', ylabel=f"{runs[0]['split']} perplexity (per token)",
           title='Perplexity vs inference depth (dotted: trained K)')
    clip_ppl(ax, [r['ppl'] for run in runs for r in run['per_K']])
    legend(ax)
    save(fig, 'ppl_vs_k.png')

    fig, ax = plt.subplots(figsize=(8, 6))
    for run in runs:
        ks = [r['K'] for r in run['per_K']]
        line, = ax.plot(ks, [r['norm_mean'] for r in run['per_K']], marker='o', label=f"{label(run)}: mean")
        ax.plot(ks, [r['norm_p99'] for r in run['per_K']], ls='--', color=line.get_color(), label=f"{run['name']}: p99")
    ax.set_yscale('log')
    ax.set(xlabel='loop k', ylabel='‖H_k‖ per token (L2 norm, log scale)',
           title='Hidden-state norm after each loop')
    legend(ax)
    save(fig, 'norms_vs_k.png')

    fig, ax = plt.subplots(figsize=(8, 6))
    for run in runs:
        ax.plot([r['tok_per_s'] for r in run['per_K']], [r['ppl'] for r in run['per_K']], marker='o', label=label(run))
        for r in run['per_K']:
            ax.annotate(f"K={r['K']}", (r['tok_per_s'], r['ppl']), fontsize=6, textcoords='offset points', xytext=(3, 3))
    ax.set_xscale('log')
    ax.set(xlabel=f"forward throughput (tokens/s, {runs[0]['device']}, batch {runs[0]['batch_size']})",
           ylabel='perplexity', title='Compute-quality frontier (lower right is better)')
    clip_ppl(ax, [r['ppl'] for run in runs for r in run['per_K']])
    legend(ax)
    save(fig, 'frontier.png')

    fig, ax = plt.subplots(figsize=(8, 6))
    used = []
    for run in runs:
        h = run['final_norm_hist']
        counts = np.asarray(h['counts'], dtype=float)
        ax.stairs(counts / counts.sum(), h['edges'], label=f"{label(run)}, loop {h['loop']}")
        used += [h['edges'][i] for i in np.flatnonzero(counts)] + [h['edges'][i + 1] for i in np.flatnonzero(counts)]
    ax.set_xscale('log')
    ax.set_xlim(min(used) / 1.5, max(used) * 1.5)
    ax.set(xlabel='‖H_K‖ of each token at the trained K (log scale, 20 bins a decade)', ylabel='fraction of tokens',
           title='Per-token hidden-state norm at the last trained loop')
    legend(ax)
    save(fig, 'norm_hist.png')

    if any(run['early_exit'] for run in runs):
        fig, ax = plt.subplots(figsize=(8, 6))
        for i, run in enumerate(runs):
            for criterion, ls in (('max_prob', '-'), ('entropy', '--')):
                pts = sorted((e['mean_loops'], e['ppl']) for e in run['early_exit'] if e['criterion'] == criterion)
                if pts:
                    ax.plot(*zip(*pts), marker='o', ls=ls, color=f'C{i % 10}', label=f"{run['name']}: {criterion}")
        ax.set(xlabel='mean loops used per token', ylabel='perplexity',
               title='Early exit (teacher-forced): perplexity vs loops used (solid: max prob, dashed: entropy)')
        clip_ppl(ax, [e['ppl'] for run in runs for e in run['early_exit']])
        legend(ax)
        save(fig, 'early_exit.png')
    return paths


# -----------------------------------------------------------------------------

def parse_thresholds(text):
    try:
        values = [float(v) for v in text.split(',') if v.strip()]
    except ValueError:
        raise EvalError(f"--exit takes comma-separated thresholds like 0.5,0.9; got {text!r}")
    bad = [v for v in values if not 0 < v <= 1]
    if bad or not values:
        raise EvalError(f"--exit thresholds must lie in (0, 1]; got {text!r}")
    return values


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('runs', nargs='+', help='run folders (holding ckpt.pt) or checkpoint files')
    p.add_argument('--split', default='val', choices=['val', 'test'])
    p.add_argument('--max_loops', type=int, default=None, help='evaluate K = 1..max_loops (default: 2x trained K)')
    p.add_argument('--max_tokens', type=int, default=0, help='score only the first N tokens (0: the whole split)')
    p.add_argument('--batch_size', type=int, default=0, help='windows per batch (default: the training batch size)')
    p.add_argument('--clamp', action='store_true', help='also evaluate with the recurrent scale clamp')
    p.add_argument('--exit', default='', help='early-exit confidence thresholds in (0, 1], e.g. 0.5,0.7,0.9')
    p.add_argument('--out', default='eval-out', help='folder for results.json and the plots')
    p.add_argument('--data_dir', default=None, help="where prepare.py wrote the data (default: the run's data_dir)")
    p.add_argument('--device', default='auto')
    p.add_argument('--dtype', default='auto', choices=['auto', 'float32', 'bfloat16', 'float16'])
    p.add_argument('--compile', default='as_trained', choices=['as_trained', 'on', 'off'],
                   help='for the throughput timing')
    p.add_argument('--bench_iters', type=int, default=10, help='timed forward passes per K')
    p.add_argument('--diag_tokens', type=int, default=0,
                   help='compute the radial fraction on the first N tokens only (0: all; it runs the readout '
                        'in float64 at every loop, slow for a 50k vocabulary on a CPU)')
    args = p.parse_args(argv)
    try:
        if args.max_loops is not None and args.max_loops < 1:
            raise EvalError(f"--max_loops must be at least 1, got {args.max_loops}")
        args.exit = parse_thresholds(args.exit) if args.exit else []
        try:
            device = setup_device(args.device)
        except ValueError as e:
            raise EvalError(str(e))
        dtype = resolve_dtype(args.dtype, device)
        from tqdm import tqdm
        loaded = [(path, *load_run(path, device, args.split, args.data_dir)) for path in args.runs]  # fail early
        runs = []
        with tqdm(total=sum(plan(m, c, d, args)[-1] for _, m, c, d in loaded), desc='evaluating',
                  unit='step', file=sys.stderr) as bar:
            for path, model, config, data in loaded:
                run = evaluate_run(path, model, config, data, args, device, dtype, bar)
                tqdm.write(f"{run['name']}: {describe(run)}; {run['tokens_scored']:,} {args.split} tokens scored",
                           file=sys.stderr)
                runs.append(run)
    except EvalError as e:
        sys.exit(f"eval_depth.py: error: {e}")

    os.makedirs(args.out, exist_ok=True)
    print(table(runs))
    for run in runs:
        if run['early_exit']:
            K = run['final_norm_hist']['loop']
            print(f"\nearly exit, {run['name']} (teacher-forced; no exit, K={K}: ppl {run['per_K'][K - 1]['ppl']:.3f})")
            print('| criterion | threshold | mean loops | ppl |\n|---|---|---|---|')
            for e in run['early_exit']:
                print(f"| {e['criterion']} | {e['threshold']} | {e['mean_loops']:.2f} | {e['ppl']:.3f} |")
    write_json(os.path.join(args.out, 'results.json'), dict(command=' '.join(sys.argv), runs=runs))
    for path in plots(runs, args.out):
        print(f"wrote {path}", file=sys.stderr)


if __name__ == '__main__':
    main()
