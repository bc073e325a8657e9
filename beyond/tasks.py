"""
Depth on a task whose longer instances need more loops (docs/tasks.md): trained runs on a task in rows (running
parity, python -m beyond.parity; binary addition, python -m beyond.addition: the task told from the run), scored on
fresh strings of each test length at each K.

    python -m beyond.tasks --runs=out-parity,out-parity-norm --lengths=16,32,64 --loops=16,32,64,128,256 --seed=1 --out=eval-parity

For each run, length and K: the per-position accuracy (the bits whose running parity the model gets
right), the whole-string exact match (every bit right), the mean ||H_K|| over the string's positions and
1 - cos(H_K, H_{K-1}) (how far the last loop still turns the state). One state is held at a time
(model.loop_states), so K can be several hundred. With --interventions, the same at every K under:
  clamp      the paper's scale clamp: each token's state rescaled after every loop to its loop-1 norm
  direction  a direction-only readout: the state read out at a fixed RMS (the run's mean RMS at its
             trained K on these strings), the recurrence untouched (sotaku's first intervention); it
             changes the probabilities, never the argmax a bit is scored by: a check that the two agree
  cap        a per-token RMS cap at that same RMS on the carried state, every loop (sotaku's second)
  relax      under-relaxation past the trained K: H_k = 0.75 H_k-1 + 0.25 F(H_k-1) (sotaku's third)
Thousands of loops on thousands of bits: strings are scored a chunk at a time (about 4,096 tokens: a loop's
activations stay in cache), --dtype runs the loops under autocast (the residual stream float32, as in training),
--compile compiles one loop, and --halt holds each string's settled prefix (a state criterion of beyond.exits,
'latent': the state's relative change under 1 - --halt_threshold, at a position and every one before it) and
stops computing it: a window model runs each loop on the positions past it alone, and a string all of whose
positions have settled has halted (the halting rule, tabled beside the fixed K).
Runs whose folder names differ only in a trailing -s<seed> are one design: its mean and std over those seeds
at each length, K and intervention, and where the runs were scored deep enough, its share of seeds passing each
bar of BARS (k/n, a 95% interval; assets/parity/seeds). --merge tables the results.json of several scorings
together, and probe() and screened_probe() are train.py's selects for a parity run (config/parity.py's: the
second). Writes the tables to stdout, DIR/results.json (the rows, the designs and the shares) and DIR/accuracy.png
(exact match against K, one line per design with its seeds' spread, one panel per length).
"""

import argparse
import json
import math
import os
import re
import sys
import time
from typing import NamedTuple, Optional

import numpy as np
import torch
from torch.nn import functional as F

from configurator import UserError, error_line
from data import data_folder, load_meta, load_rows
from model import LoopedGPT
from report import write_json
from runtime import autocast, compile_errors, compile_failed, sync
from beyond import exits
from beyond import addition, parity  # noqa: F401  (each registers its task)
from beyond.task_rows import TASKS

INTERVENTIONS = ('clamp', 'direction', 'cap', 'relax')
RELAX = 0.25  # the share of a loop's new state that under-relaxation keeps


def int_list(text, name):
    try:
        values = [int(v) for v in text.split(',') if v]
    except ValueError:
        raise UserError(f"--{name} {text!r}: a comma-separated list of integers")
    if not values or min(values) < 1:
        raise UserError(f"--{name} {text!r}: at least one value, each >= 1")
    return sorted(set(values))


def test_strings(seed, length, rows, task=parity.TASK):
    """rows fresh strings of exactly `length` steps of a task (parity's bits by default), from (seed, length) alone,
    its test split's kind (addition's: half a carry the whole length): (x, y) int64 (rows, the task's row length)."""
    x, y = task.rows(np.random.default_rng([seed, length, 4]), rows, [length], task.row_len([length]), 'test',
                     task.defaults('test'))
    return torch.from_numpy(x.astype(np.int64)), torch.from_numpy(y.astype(np.int64))


def run_task(run, model, ckpt):
    """The task a run was trained on (a Task of beyond.task_rows.TASKS): its data's meta.json 'task' where the run's data
    folder is at hand, else its config's dataset name, else the one task whose vocabulary is the model's. One error
    line for a run of none (a text run would be scored as if its tokens were a task's)."""
    config = ckpt.get('config', {})
    try:
        name = load_meta(data_folder(config)).get('task')
    except FileNotFoundError:
        name = os.path.basename(os.path.normpath(config.get('dataset', ''))) or None
        if name not in TASKS:
            sizes = [t.name for t in TASKS.values() if len(t.vocab) == model.config.vocab_size]
            name = sizes[0] if len(sizes) == 1 else None
    task = TASKS.get(name)
    if task is None or model.config.vocab_size != len(task.vocab):
        known = ', '.join(f'{t.name} (vocab {len(t.vocab)})' for t in TASKS.values())
        raise UserError(f"{run} was trained on {config.get('dataset', 'unknown data')} (vocab {model.config.vocab_size}), "
                        f"not on a task in rows: {known}, made by python -m beyond.<task>; beyond.tasks scores those only")
    return task


def trajectory(model, x, K, intervention=None, rms=None, trained_k=None):
    """H_0, H_1 .. H_K of the model on x, one at a time; intervention 'clamp' (loop_states' own), 'cap' (each
    token's carried RMS capped at rms, every loop), 'relax' (past loop trained_k, each loop's output blended into
    the state it was given at RELAX), else the plain loop."""
    if intervention not in ('cap', 'relax'):
        yield from model.loop_states(x, K, clamp=intervention == 'clamp')
        return
    h = e = model.embed(x)
    yield h
    for k in range(K):
        new = model.loop(model.loop_input(h, k, e))
        if intervention == 'cap':
            h = new * (rms / new.pow(2).mean(-1, keepdim=True).sqrt()).clamp(max=1.0)
        else:
            h = new if k < trained_k else (1 - RELAX) * h + RELAX * new
        yield h


def bits(model, h):
    """The bit the model reads out of each state of h (B, T, C): its argmax."""
    return model.lm_head(model.readout(h, last=True)).argmax(-1)


def settling(model, x, K, halt, step):
    """H_0 .. H_K of the model on x with each string's settled prefix held (halt: a state criterion of beyond.exits
    and its threshold, or None: every position every loop). A position has settled when halt's confidence in its last
    loop's change passes the threshold at it and at every position before it; settled positions are held from then
    on, and a window model does not compute them again (the loop runs on the positions past the shortest settled
    prefix and the w - 1 before them, its keys; with full attention, on all of them). A state after loop k does not
    depend on how many loops follow, so one pass serves every K. Yields (H_k, each string's settled prefix length
    after loop k, (B,)); step(h, e, k) is one loop (model.loop(model.loop_input(h, k, e)), compiled or not)."""
    h = e = model.embed(x)
    B, T = x.shape
    lo = torch.zeros(B, dtype=torch.long, device=x.device)
    yield h, lo
    w = getattr(model.config, 'window', 0)
    for k in range(K):
        first = int(lo.min())
        if first < T:
            start = max(0, min(first - (w - 1), T - w - 1)) if w else 0  # (wider than the window: its band, one graph)
            new = step(h[:, start:].contiguous(), e[:, start:].contiguous(), k)[:, first - start:]  # first .. T-1
            # (contiguous: a compiled step's one graph serves every width, where a view's strides would each need one)
            old = h[:, first:]
            if int(lo.max()) > first:  # a string whose prefix settled further than another's: its own held
                held = torch.arange(first, T, device=x.device) < lo[:, None]  # (B, T - first)
                new = torch.where(held[..., None], old, new)
            if halt is not None:  # (at loop 1 the change from H_0, the embedding, as beyond.exits reads it)
                criterion, threshold = halt
                moving = criterion(new, old) < threshold  # (B, T - first); False where held
                lo = torch.where(moving.any(1), first + moving.float().argmax(1), T)
            h = torch.cat([h[:, :first], new], 1) if first else new
        yield h, lo


HALT_THRESHOLD = 0.999999  # 'latent': a relative change of the state below 1e-6


def halt_arg(name, threshold):
    """--halt and --halt_threshold: settling's (criterion, threshold), or None for ''."""
    if not name:
        return None
    criterion = exits.get(name)
    if criterion.readout:
        raise UserError(f"--halt {name!r} reads the readout; a state criterion settles positions: "
                        f"{', '.join(n for n, c in exits.CRITERIA.items() if not c.readout)}")
    if not 0 < threshold < 1:
        raise UserError(f"--halt_threshold must be in (0, 1); got {threshold}")
    return criterion, threshold


def halt_note(halt, threshold, dtype):
    """A line on stderr's worth where --halt asks a relative change finer than --dtype resolves (None where it does
    not): under bfloat16 autocast each loop's output carries rounding of about the dtype's eps, so a state may never
    change by less than 1 - threshold, nothing settles, and every position runs every loop (the scores are right)."""
    eps = torch.finfo(getattr(torch, dtype)).eps
    if halt and 1 - threshold < eps:
        return (f"beyond.tasks: note: --halt_threshold {threshold} asks a relative change under {1 - threshold:.0e}, "
                f"finer than {dtype}'s resolution ({eps:.0e}): a state may never settle, so every position may run "
                f"every loop (a coarser --halt_threshold, or --dtype=float32, halts)")
    return None


def loop_step(model, compile=False):
    """One loop as settling runs it, step(h, e, k); compiled (torch.compile, dynamic shapes: the unsettled positions
    shrink loop by loop) where compile is on."""
    def step(h, e, k):
        return model.loop(model.loop_input(h, k, e))
    return torch.compile(step, dynamic=True) if compile else step


@torch.no_grad()
def score(model, x, y, loops, intervention=None, rms=None, trained_k=None, halt=None, step=None, chunk=4096):
    """{K: row of measurements} at each K in loops, from one pass of max(loops) loops, the strings scored about chunk
    tokens at a time (a loop's activations stay in cache: a row of 2,048 bits runs faster on its own than 64 at once).
    With halt (settling's: no intervention or 'direction' only), each row also has `halted`, the share of strings every
    position of which had settled by K (the halting rule: a string stops there, its state held), and `halt_k` the
    mean loop at which the halted ones stopped (None: none had)."""
    if halt is not None and intervention not in (None, 'direction'):
        raise UserError(f"halting holds settled states: it scores without an intervention or with 'direction', not {intervention!r}")
    step = step or loop_step(model)
    sums = {k: dict.fromkeys(('exact', 'right', 'scored', 'h_norm', 'rms', 'one_minus_cos', 'halted', 'halt_k'), 0.0)
            for k in loops}
    rows_per_chunk = max(1, chunk // x.size(1))
    for xc, yc in zip(x.split(rows_per_chunk), y.split(rows_per_chunk)):
        scored = yc >= 0  # (B, T): the bits, not the start token
        halt_k = torch.full((xc.size(0),), -1, device=xc.device)
        unsettled = torch.zeros_like(halt_k)
        states = (settling(model, xc, max(loops), halt, step) if intervention in (None, 'direction') else
                  ((h, unsettled) for h in trajectory(model, xc, max(loops), intervention, rms, trained_k)))
        prev = None
        for k, (h, lo) in enumerate(states):
            halt_k = torch.where((halt_k < 0) & (lo == xc.size(1)), k, halt_k)  # the loop a string's last position settled
            if k in sums:
                read = h if intervention != 'direction' else h * (rms / h.pow(2).mean(-1, keepdim=True).sqrt())
                right = (bits(model, read) == yc) | ~scored  # (B, T)
                add = dict(exact=right.all(-1).sum(), right=right[scored].sum(), scored=scored.sum(),
                           h_norm=h.float().norm(dim=-1)[scored].sum(), rms=h.float().pow(2).mean(-1).sqrt()[scored].sum(),
                           one_minus_cos=(1 - F.cosine_similarity(h.float(), prev.float(), dim=-1))[scored].sum(),
                           halted=(halt_k >= 0).sum(), halt_k=halt_k[halt_k >= 0].sum())
                for name, v in add.items():
                    sums[k][name] += v.item()
            prev = h
    out = {}
    for k, s in sums.items():
        out[k] = dict(accuracy=s['right'] / s['scored'], exact=s['exact'] / x.size(0), h_norm=s['h_norm'] / s['scored'],
                      rms=s['rms'] / s['scored'], one_minus_cos=s['one_minus_cos'] / s['scored'])
        if halt is not None:
            out[k].update(halted=s['halted'] / x.size(0), halt_k=s['halt_k'] / s['halted'] if s['halted'] else None)
    return out


def probe_rows(settings, split='probe'):
    """The run's probe split (python -m beyond.parity's: strings longer than training's, drawn on a stream of their
    own; never the test split), or its long split, as (x, y) int64 tensors; one error line where the data has none."""
    try:
        rows = load_rows(data_folder(settings), split)
    except FileNotFoundError as e:
        raise UserError(f"select {settings.get('select')!r} reads the data's {split} split: {e} (python -m beyond.parity "
                        "writes one)")
    return tuple(torch.from_numpy(a.astype(np.int64)) for a in (rows.x, rows.y))


@torch.no_grad()
def read_probe(model, x, y):
    """Strings x, y read at K = 2n and 4n, n their length, past the trained K. Returns, the first the one kept lowest:
      probe_error         1 - the lower of the two whole-string exact matches (every bit right, at both depths)
      probe_disagreement  the share of strings whose bits change from K = 2n to 4n (no labels read)
      probe_turn          1 - cos(H_4n, H_4n-1), the turn of the last loop (no labels read)"""
    device = next(model.parameters()).device
    x, y = x.to(device), y.to(device)
    scored, n = y >= 0, int((y >= 0).sum(1).max())
    seen = {}
    for k, h in enumerate(model.loop_states(x, 4 * n)):
        if k == 4 * n - 1:
            before = h
        if k in (2 * n, 4 * n):
            seen[k] = bits(model, h)
    exact = [((b == y) | ~scored).all(-1).float().mean().item() for b in seen.values()]
    return dict(probe_error=1 - min(exact),
                probe_disagreement=((seen[2 * n] != seen[4 * n]) & scored).any(-1).float().mean().item(),
                probe_turn=(1 - F.cosine_similarity(h, before, dim=-1))[scored].mean().item())


def probe(model, settings):
    """train.py's select for a parity run (select = 'beyond.tasks.probe'): read_probe on the run's probe split."""
    return read_probe(model, *probe_rows(settings))


def screened_probe(model, settings):
    """train.py's select for the parity recipe (config/parity.py: select = 'beyond.tasks.screened_probe'):
    screened_read on the run's probe split."""
    return screened_read(model, *probe_rows(settings))


def screened_read(model, x, y):
    """read_probe on strings x, y made only where a screen at a quarter of its work passes. The screen is read_probe
    on the strings' first halves (h = n // 2 bits, n the longest, at K = 2h and 4h: the states the whole strings hold
    there, for attention looks back, never ahead). It asks more of those bits than the whole read does: right already
    at K = 2h, two loops a bit, where the whole read asks it at 4h and 8h. Returns, the first the one kept lowest:
      probe_error         the whole strings' read_probe error where the screen has every string right, else 1 + the
                          screen's: a checkpoint past the screen ranks above every one that is not
      screen_error        the screen's read_probe error
      probe_disagreement, probe_turn  the screen's (read_probe's label-free values, on the first halves)"""
    half = 1 + int((y >= 0).sum(1).max()) // 2  # the start token and the first h bits
    screen = read_probe(model, x[:, :half], y[:, :half])
    error = read_probe(model, x, y)['probe_error'] if screen['probe_error'] == 0 else 1 + screen['probe_error']
    return dict(probe_error=error, screen_error=screen['probe_error'],
                probe_disagreement=screen['probe_disagreement'], probe_turn=screen['probe_turn'])


def reach_read(model, x, y):
    """Strings x, y read fast: at K = ceil(1.25 n) and 2n, n their scored positions (a loop carries a step one position
    on, so an exact run is right from about n loops; one that needs more is slow, one wrong at both approximates), in one
    pass through score's fast path as python -m beyond.tasks --halt=latent scores (each string's settled prefix held:
    a long read costs a fraction of the plain loop's). Returns 1 - the lower of the two whole-string exact matches."""
    n = int((y >= 0).sum(1).max())
    ks = sorted({math.ceil(1.25 * n), 2 * n})
    read = score(model, x, y, ks, halt=halt_arg('latent', HALT_THRESHOLD))
    return 1 - min(read[k]['exact'] for k in ks)


def long_probe(model, settings):
    """train.py's select for the recipes (config/parity.py, config/addition.py: select = 'beyond.tasks.long_probe'):
    screened_read on the run's probe split and, only where it reads every probe string right, reach_read on the probe
    strings and on the long split's (python -m beyond.parity's 'long': 256 bits by default, on a stream of their own).
    It asks what the probe cannot: the probe's strings right at 1.25 loops a position, not only at 2 and 4, and strings
    far longer right as well, where an approximation that holds on the probe's length breaks. Returns, the first the
    one kept lowest:
      probe_error   the reach error (1 - the lower exact match of both reach_reads) where the probe passed, else
                    1 + screened_read's probe_error: a checkpoint past the probe ranks above every one that is not
      screen_error, probe_disagreement, probe_turn  screened_read's
      whole_error   screened_read's probe_error (the whole probe's error past the screen, else 1 + the screen's)
      reach_error   the reach error, where the probe passed (absent where it did not: nothing was read)"""
    x, y = probe_rows(settings)
    got = screened_read(model, x, y)
    whole = got['probe_error']
    if whole > 0:
        return dict(got, probe_error=1 + whole, whole_error=whole)
    lx, ly = probe_rows(settings, 'long')
    reach = max(reach_read(model, x, y), reach_read(model, lx, ly))
    return dict(got, probe_error=reach, whole_error=whole, reach_error=reach)


def evaluate(runs, lengths, loops, seed, rows, interventions=(), device='cpu', dtype='float32', compile=False,
             halt=None):
    """Every run x length x K (x intervention): a list of result rows. dtype: the loops under autocast to it
    (runtime.autocast: the residual stream stays float32, as in training); compile: each loop compiled (loop_step);
    halt (settling's (criterion, threshold)): settled positions held, and each row's halting columns."""
    results = []
    for run in runs:
        try:
            model, ckpt = LoopedGPT.from_checkpoint(run, device)
        except (FileNotFoundError, ValueError) as e:
            raise UserError(str(e))
        task = run_task(run, model, ckpt)
        model.eval()
        step = loop_step(model, compile)
        cfg = model.config
        if getattr(cfg, 'positions', 'learned') == 'learned' and task.row_len([max(lengths)]) > cfg.block_size:
            raise UserError(f"{run} learned positions up to {cfg.block_size} tokens: it cannot read a string of "
                            f"{max(lengths)} steps, {task.row_len([max(lengths)])} tokens a row (train with "
                            f"positions='none' for longer strings)")
        trained_k = ckpt.get('config', {}).get('max_loops') if ckpt.get('config', {}).get('random_depth') else cfg.n_loops
        for length in lengths:
            x, y = (t.to(device) for t in test_strings(seed, length, rows, task))
            try:
                with autocast(device, dtype):
                    start = time.perf_counter()
                    base = score(model, x, y, sorted(set(loops) | {trained_k}), halt=halt, step=step)
                    sync(device)
                    seconds = time.perf_counter() - start  # (the first length's with the compile, where it is on)
                    rms = base[trained_k]['rms']  # the fixed RMS of the direction-only readout and the cap
                    measured = [(None, base)] + [(i, score(model, x, y, loops, i, rms, trained_k, step=step,
                                                           halt=halt if i == 'direction' else None))
                                                 for i in interventions]
            except compile_errors() as e:
                raise compile_failed(e, 'the loop')
            for name, measured in measured:
                for k in loops:
                    results.append(dict(run=run, length=length, K=k, trained_K=trained_k,
                                        intervention=name or 'none', **measured[k],
                                        **({} if name else dict(seconds=seconds, strings=x.size(0)))))
    return results


MEASURES = ('accuracy', 'exact', 'h_norm', 'one_minus_cos')


def design_of(run):
    """The design a run folder belongs to: its name less a trailing -s<seed>."""
    return re.sub(r'-s\d+$', '', os.path.basename(os.path.normpath(run)))


def designs(results):
    """Each design x length x K x intervention: the number of seeds and the mean and std (population, over
    seeds) of each measure."""
    groups = {}
    for r in results:
        groups.setdefault((design_of(r['run']), r['length'], r['K'], r['intervention']), []).append(r)
    return [dict(design=d, length=n, K=k, intervention=i, seeds=len(rs),
                 **{m: float(np.mean([r[m] for r in rs])) for m in MEASURES},
                 **{f'{m}_std': float(np.std([r[m] for r in rs])) for m in MEASURES})
            for (d, n, k, i), rs in groups.items()]


class Bar(NamedTuple):
    """A bar a run passes or fails, fixed before training (docs/tasks.md, on every seed): it reaches `reach` exact match
    on strings of `length` bits at some K <= by_k and holds within `within` of that value at every K scored after it
    up to held_to, or up to hold x that K (then scored that deep, or that K does not count); neither: reaching it is
    enough."""
    length: int
    by_k: int
    held_to: Optional[int] = None
    reach: float = 0.95
    within: float = 0.02
    hold: Optional[float] = None

    def text(self):
        held = (f", held to {self.held_to}" if self.held_to else
                f", held within {100 * self.within:.0f} to {self.hold:g}x that K" if self.hold else '')
        return f"≥{100 * self.reach:.0f}% by K={self.by_k}{held}"


# the 8x bars (4x and 8x the trained length), and the 256x ones: 99% by K=2,560, held to 1.25x the K it is first
# reached; 1,024 steps (addition's 64x, assets/addition): 99% by K=1,216, so that 1.25x it is within a list to 1,536
BARS = (Bar(32, 96, 384), Bar(64, 256), Bar(512, 2560, reach=0.99, within=0.01, hold=1.25),
        Bar(1024, 1216, reach=0.99, within=0.01, hold=1.25), Bar(2048, 2560, reach=0.99, within=0.01, hold=1.25))
HALTING_REACH = 0.99  # the exact match a halting rule's reading (a K chosen without labels) must reach to count


def passes(exact, bar):
    """exact {K: whole-string exact match}: whether it passes the bar (a Bar)."""
    def held(k0):
        if bar.hold and max(exact) < bar.hold * k0:
            return False  # (not scored deep enough to see it hold)
        to = bar.held_to or (bar.hold * k0 if bar.hold else 0)
        return all(exact[k] >= exact[k0] - bar.within for k in exact if k0 < k <= to)
    return any(exact[k0] >= bar.reach and held(k0) for k0 in exact if k0 <= bar.by_k)


def wilson(k, n, z=1.96):
    """The 95% interval (Wilson's score interval) of a share k/n."""
    p, z2 = k / n, z * z
    mid, half = (p + z2 / (2 * n)) / (1 + z2 / n), z / (1 + z2 / n) * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return max(0.0, mid - half), min(1.0, mid + half)


def shares(results):
    """Each design x bar x intervention whose runs were scored far enough (to held_to, or by_k): the runs that
    pass, k of n, with a 95% interval, and the mean ||H_K|| at the deepest K scored of the runs that pass and of
    those that fail."""
    runs = {}
    for r in results:
        runs.setdefault((design_of(r['run']), r['length'], r['intervention'], r['run']), {})[r['K']] = r
    out = []
    for bar in BARS:
        length, by_k, held_to = bar.length, bar.by_k, bar.held_to
        keys = dict.fromkeys((d, i) for d, n, i, _ in runs if n == length)
        for design, intervention in keys:
            rows = {run: rs for (d, n, i, run), rs in runs.items() if (d, n, i) == (design, length, intervention)}
            if min(max(rs) for rs in rows.values()) < (held_to or by_k):  # (a run not scored that deep cannot be judged)
                continue
            passed = [passes({k: r['exact'] for k, r in rs.items()}, bar) for rs in rows.values()]
            deep = [rs[max(rs)]['h_norm'] for rs in rows.values()]
            low, high = wilson(sum(passed), len(rows))
            out.append(dict(design=design, length=length, by_K=by_k, held_to=held_to, bar=bar.text(), intervention=intervention,
                            passed=sum(passed), runs=len(rows), low=low, high=high,
                            passed_runs=[run for run, ok in zip(rows, passed) if ok],
                            h_norm_pass=float(np.mean([h for h, ok in zip(deep, passed) if ok])) if any(passed) else None,
                            h_norm_fail=float(np.mean([h for h, ok in zip(deep, passed) if not ok])) if not all(passed) else None))
    return out


def render_shares(rows):
    lines = [f'| design | length | bar | intervention | runs passing | 95% interval | mean ‖H_K‖ at the deepest K: pass, fail |',
             '|---|---|---|---|---|---|---|']
    for r in rows:
        bar = r.get('bar') or Bar(r['length'], r['by_K'], r['held_to']).text()  # (a results.json from before bar texts)
        norms = ', '.join('-' if v is None else f'{v:.3g}' for v in (r['h_norm_pass'], r['h_norm_fail']))
        lines.append(f"| {r['design']} | {r['length']} | {bar} | {r['intervention']} | {r['passed']}/{r['runs']} | "
                     f"{100 * r['low']:.0f}–{100 * r['high']:.0f}% | {norms} |")
    return '\n'.join(lines)


def render_design_shares(rows):
    """One row a design, as docs/tasks.md shows the shares with no intervention: each bar's runs passing (k/n) and its
    95% interval (the 8x bars always, the 256x ones where scored), then the mean ||H_K|| at the deepest K of the first
    bar scored: its passing and failing runs."""
    rows = [r for r in rows if r['intervention'] == 'none']
    if not rows:
        return ''
    scored = [b.length for b in BARS if any(r['length'] == b.length for r in rows)]
    bars = [b.length for b in BARS if not b.hold or b.length in scored]  # (the 8x bars always, a dash where not scored)
    head = ['design'] + [c for n in bars for c in (f'{n} bits: passing', '95% interval')] + [
        f'mean ‖H_K‖ at the deepest K, {scored[0]} bits: pass, fail']
    lines = ['| ' + ' | '.join(head) + ' |', '|' + '---|' * len(head)]
    for design in dict.fromkeys(r['design'] for r in rows):
        at = {r['length']: r for r in rows if r['design'] == design}
        cells = [design]
        for n in bars:
            r = at.get(n)
            cells += [f"{r['passed']}/{r['runs']}", f"{100 * r['low']:.0f}–{100 * r['high']:.0f}%"] if r else ['-', '-']
        first = at.get(scored[0])
        cells.append(', '.join(norm_cell(v) for v in (first['h_norm_pass'], first['h_norm_fail'])) if first else '-')
        lines.append('| ' + ' | '.join(cells) + ' |')
    return '\n'.join(lines)


def render_rescues(rows):
    """Each design and length scored under interventions: its runs passing with none, and under each intervention
    the runs passing, the runs it rescues (failing with none) and the passing runs it loses."""
    none = {(r['design'], r['length']): r for r in rows if r['intervention'] == 'none'}
    others = list(dict.fromkeys(r['intervention'] for r in rows if r['intervention'] != 'none'))
    keys = [k for k in none if any((r['design'], r['length']) == k for r in rows if r['intervention'] != 'none')]
    if not keys:
        return ''
    lines = ['| design | bits | none | ' + ' | '.join(others) + ' |', '|---|---|---|' + '---|' * len(others)]
    for design, length in keys:
        base = none[design, length]
        cells = [design, str(length), f"{base['passed']}/{base['runs']}"]
        for i in others:
            r = next((r for r in rows if (r['design'], r['length'], r['intervention']) == (design, length, i)), None)
            if r is None:
                cells.append('-')
                continue
            ok, was = set(r['passed_runs']), set(base['passed_runs'])
            cells.append(f"{r['passed']}/{r['runs']}: {len(ok - was)} rescued, {len(was - ok)} lost")
        lines.append('| ' + ' | '.join(cells) + ' |')
    return '\n'.join(lines)


def norm_cell(v):
    # (from 999.5 up: three significant figures would round it to 1e+03)
    return '-' if v is None or not math.isfinite(v) else f'{v:,.0f}' if abs(v) >= 999.5 else f'{v:.3g}'


def render_pivots(groups):
    """Exact match (%) by K, mean ± std over seeds, one table an intervention (none first), one row a design and
    length (by length, then design); then the mean ||H_K|| by K with no intervention, mean over seeds, the longest
    strings first (where a drift shows most). Each length's rows under a header of their own (after a blank line), so
    that a page can show one length's rows as a table."""
    order = ['none'] + [i for i in INTERVENTIONS if i != 'none']
    found = [i for i in order if any(g['intervention'] == i for g in groups)]
    lengths = sorted({g['length'] for g in groups})
    designs_ = list(dict.fromkeys(g['design'] for g in groups))
    tables = []
    for i, measure in [(i, 'exact') for i in found] + ([('none', 'h_norm')] if 'none' in found else []):
        at = {(g['design'], g['length'], g['K']): g for g in groups if g['intervention'] == i}
        ks = sorted({k for _, _, k in at})
        title = (f'exact match (%) by K, {i}, mean ± std over seeds' if measure == 'exact' else
                 'mean ‖H_K‖ by K, none, mean over seeds, the longest strings first')
        head = ['| design, bits | ' + ' | '.join(f'K={k}' for k in ks) + ' |', '|---|' + '---|' * len(ks)]
        lines = [title] + head
        for n in (lengths if measure == 'exact' else lengths[::-1]):
            if len(lines) > 3 and any((d, n, k) in at for d in designs_ for k in ks):
                lines += [''] + head
            for d in designs_:
                if not any((d, n, k) in at for k in ks):
                    continue
                cells = []
                for k in ks:
                    g = at.get((d, n, k))
                    cells.append('-' if g is None else norm_cell(g['h_norm']) if measure == 'h_norm' else
                                 f"{100 * g['exact']:.0f} ± {100 * g['exact_std']:.0f}")
                lines.append(f'| {d}, {n} | ' + ' | '.join(cells) + ' |')
        tables.append('\n'.join(lines))
    return '\n\n'.join(tables)


def unaided_runs(results, keep):
    """{(run, length): its rows with no intervention that keep(row) holds for}, in the order first seen."""
    rows = {}
    for r in results:
        if r['intervention'] == 'none' and keep(r):
            rows.setdefault((r['run'], r['length']), []).append(r)
    return rows


def loops_ran(row):
    """The mean loops a string ran to the row's K: where it halted, or K (every string K, scored without a halt)."""
    return row['halted'] * (row['halt_k'] or 0) + (1 - row['halted']) * row['K'] if 'halted' in row else row['K']


def render_halting(results):
    """Each run and length scored with a halting rule, the rule beside a fixed K: every string read where it halted
    (its state held from there on) or, if it never did, at the deepest K scored; the strings halted, the loops a string
    ran (mean) and the exact match; then the smallest K of the list at which a fixed depth reads as many right; and
    each length's share of runs whose halting reads HALTING_REACH exact, with a 95% interval."""
    rows = unaided_runs(results, lambda r: 'halted' in r)
    if not rows:
        return ''
    lines = ['| run | bits | strings halted by the deepest K | loops a string ran, mean | exact match, halting | '
             'fixed K reading as many right |', '|---|---|---|---|---|---|']
    deepest = {key: max(rs, key=lambda r: r['K']) for key, rs in rows.items()}  # (where every string was read)
    for (run, length), rs in rows.items():
        last = deepest[run, length]
        ran = loops_ran(last)
        fixed = min((r['K'] for r in rs if r['exact'] >= last['exact']), default=None)
        lines.append(f"| {os.path.basename(os.path.normpath(run))} | {length} | {100 * last['halted']:.1f}% of "
                     f"{last['K']} loops | {ran:.0f} | {100 * last['exact']:.1f}% | K={fixed} |")
    lines += ['', f'| bits | runs whose halting reads ≥{100 * HALTING_REACH:.0f}% exact | 95% interval |', '|---|---|---|']
    for length in sorted({n for _, n in rows}):
        ok = [last['exact'] >= HALTING_REACH for (_, n), last in deepest.items() if n == length]
        low, high = wilson(sum(ok), len(ok))
        lines.append(f"| {length} | {sum(ok)}/{len(ok)} | {100 * low:.0f}–{100 * high:.0f}% |")
    return '\n'.join(lines)


def render_costs(results):
    """What each run's scoring of each length cost (rows timed by evaluate: every K in one pass, no intervention): its
    seconds, per string, and per string-loop (the loops a string ran: to the deepest K, or where it halted)."""
    rows = unaided_runs(results, lambda r: r.get('seconds') is not None)
    if not rows:
        return ''
    lines = ['| run | bits | strings | seconds | seconds a string | ms a string-loop |', '|---|---|---|---|---|---|']
    for (run, length), rs in rows.items():
        last = max(rs, key=lambda r: r['K'])
        n = last['strings']
        lines.append(f"| {os.path.basename(os.path.normpath(run))} | {length} | {n} | {last['seconds']:.1f} | "
                     f"{last['seconds'] / n:.2f} | {1000 * last['seconds'] / (n * loops_ran(last)):.2f} |")
    return '\n'.join(lines)


def render(results):
    lines = ['| run | length | K | intervention | accuracy | exact match | mean ‖H_K‖ | 1 - cos |',
             '|---|---|---|---|---|---|---|---|']
    for r in results:
        lines.append(f"| {os.path.basename(os.path.normpath(r['run']))} | {r['length']} | {r['K']} | {r['intervention']} | "
                     f"{100 * r['accuracy']:.1f}% | {100 * r['exact']:.1f}% | {r['h_norm']:.3g} | {r['one_minus_cos']:.2e} |")
    return '\n'.join(lines)


def render_designs(groups):
    lines = ['| design | seeds | length | K | intervention | accuracy | exact match | mean ‖H_K‖ |',
             '|---|---|---|---|---|---|---|---|']
    for g in groups:
        lines.append(f"| {g['design']} | {g['seeds']} | {g['length']} | {g['K']} | {g['intervention']} | "
                     f"{100 * g['accuracy']:.1f} ± {100 * g['accuracy_std']:.1f}% | "
                     f"{100 * g['exact']:.1f} ± {100 * g['exact_std']:.1f}% | {g['h_norm']:.3g} ± {g['h_norm_std']:.2g} |")
    return '\n'.join(lines)


def plot(groups, path):
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    lengths = sorted({g['length'] for g in groups})
    fig, axes = plt.subplots(1, len(lengths), figsize=(4 * len(lengths) + 2, 3.2), squeeze=False)
    for ax, length in zip(axes[0], lengths):
        for i, design in enumerate(dict.fromkeys(g['design'] for g in groups)):
            rows = [g for g in groups if g['design'] == design and g['length'] == length and g['intervention'] == 'none']
            k = [g['K'] for g in rows]
            mean, std = np.array([g['exact'] for g in rows]) * 100, np.array([g['exact_std'] for g in rows]) * 100
            line, = ax.plot(k, mean, marker='o', markersize=3, linestyle=('-', '--', ':')[i // 10 % 3],
                            label=f"{design} ({rows[0]['seeds']})")  # past ten colours, another line style
            ax.fill_between(k, np.clip(mean - std, 0, 100), np.clip(mean + std, 0, 100), color=line.get_color(), alpha=0.15)
        ax.set_xscale('log', base=2)
        ax.set_title(f'{length} bits')
        ax.set_xlabel('K (loops)')
        ax.set_ylim(-2, 102)
    axes[0][0].set_ylabel('whole-string exact match (%)')
    axes[0][-1].legend(fontsize=7, loc='upper left', bbox_to_anchor=(1.02, 1), borderaxespad=0)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def merged(paths):
    """The result rows of several results.json files (beyond.tasks's), and their test seed and rows, which must agree."""
    found = []
    for path in paths:
        try:
            with open(path) as f:
                found.append(json.load(f))
        except (OSError, ValueError) as e:
            raise UserError(f"--merge {path}: {e}")
    for key in ('seed', 'rows'):
        if len({json.dumps(r[key]) for r in found}) > 1:
            raise UserError(f"--merge: the files were scored with different --{key} ({sorted({r[key] for r in found})})")
    return [row for r in found for row in r['results']], found[0]['seed'], found[0]['rows']


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--runs', default='', help='run folders (or checkpoints), comma-separated')
    p.add_argument('--merge', default='', help="results.json files of earlier scorings, comma-separated, tabled together "
                                               "in place of --runs (a study scores its runs in parallel)")
    p.add_argument('--lengths', default='16,32,64', help='test string lengths in bits, comma-separated')
    p.add_argument('--loops', default='16,32,64,128,256', help='the K to score at, comma-separated')
    p.add_argument('--seed', type=int, default=1, help='seeds the test strings (each length its own)')
    p.add_argument('--rows', type=int, default=256, help='test strings per length')
    p.add_argument('--interventions', default='', help=f"comma-separated, of {', '.join(INTERVENTIONS)} (none: '')")
    p.add_argument('--device', default='cpu', help="'cpu' | 'cuda' | 'mps'")
    p.add_argument('--dtype', default='float32', choices=('float32', 'bfloat16', 'float16'),
                   help='the loops under autocast to it (the residual stream stays float32)')
    p.add_argument('--compile', default='off', choices=('on', 'off'), help='each loop compiled (torch.compile)')
    p.add_argument('--halt', default='', help="a state criterion of beyond.exits ('latent', 'angular'): each string's "
                                              "settled positions held, not computed again, and the halting columns "
                                              "(none: '', every position every loop)")
    p.add_argument('--halt_threshold', type=float, default=HALT_THRESHOLD,
                   help="the criterion's confidence a position's last loop must reach to settle")
    p.add_argument('--out', required=True, help='folder for results.json and accuracy.png')
    args = p.parse_args(argv)
    try:
        interventions = [i for i in args.interventions.split(',') if i]
        bad = [i for i in interventions if i not in INTERVENTIONS]
        if bad:
            raise UserError(f"unknown --interventions {', '.join(bad)}: use {', '.join(INTERVENTIONS)}")
        if args.rows < 1:
            raise UserError(f"--rows must be >= 1; got {args.rows}")
        if bool(args.runs) == bool(args.merge):
            raise UserError("give --runs (runs to score) or --merge (results.json files to table together), one of them")
        if args.merge:
            results, seeds, rows = merged([f for f in args.merge.split(',') if f])
        else:
            results = evaluate([r for r in args.runs.split(',') if r], int_list(args.lengths, 'lengths'),
                               int_list(args.loops, 'loops'), args.seed, args.rows, interventions, args.device,
                               args.dtype, args.compile == 'on', halt_arg(args.halt, args.halt_threshold))
            seeds, rows = args.seed, args.rows
    except UserError as e:
        sys.exit(error_line('beyond.tasks', e))
    note = None if args.merge else halt_note(args.halt, args.halt_threshold, args.dtype)
    if note:
        print(note, file=sys.stderr)
    groups, passing = designs(results), shares(results)
    extra = [t for t in (render_design_shares(passing), render_rescues(passing), render_pivots(groups)) if t]
    extra += [t for t in (render_halting(results), render_costs(results)) if t]
    print((render_shares(passing) + '\n\n' if passing else '') + ''.join(t + '\n\n' for t in extra)
          + render_designs(groups) + '\n\n' + render(results))
    os.makedirs(args.out, exist_ok=True)
    write_json(os.path.join(args.out, 'results.json'),  # (a diverged run's NaN and inf as null)
               dict(seed=seeds, rows=rows, runs=list(dict.fromkeys(r['run'] for r in results)),
                    results=results, designs=groups, shares=passing))
    plot(groups, os.path.join(args.out, 'accuracy.png'))


if __name__ == '__main__':
    main()
