"""
eval_depth.py with the decoding studies (beyond the paper): does depth pay as a compute knob in
real decoding? Early exit scored teacher-forced and causally (with copied or recomputed
stand-ins), calibrated halting with measured decode speed, and speculative decoding with the
model's own first loops (acceptance from the states, and measured tok/s against what it predicts).

    python -m beyond.eval_decode out-raw_perloop-cpu-long-s1 --exit 0.5,0.9 --stand_in copy,project
    python -m beyond.eval_decode out-raw_perloop-cpu-long-s* --calibrate 0.01,0.05
    python -m beyond.eval_decode out-raw_perloop-cpu-long-s1 --criteria=angular,gate,gate-raw --calibrate 0.01,0.05
    python -m beyond.eval_decode out-raw_perloop-cpu-long-s1 --speculative
    python -m beyond.eval_decode --from_results a/results.json,b/results.json --retime --out merged

It takes every flag of eval_depth.py and these (add_decoding_arguments); the studies plug into
eval_depth.main as one eval_depth.Study (DecodingStudies), and --from_results redraws the paper's
tables and theirs. Each study takes a data.Scoring (the model, the split's windows, the batch
size, the device and the precision context).
"""

import itertools
import math
import re
import time

import numpy as np
import torch

from beyond import exits
from beyond.decoder import STAND_INS, WINDOWED, Stepper, decode, draw, generate, new_cache, next_token_probs, stand_ins, windowed
import eval_depth
from configurator import UserError
from data import Scoring, load_run, run_folder, score_windows
from report import clip_ppl, label, legend, num, perplexity, pm
from runtime import autocast, setup_device, sync


def exit_loops(conf, tau):
    """conf (K, N): the 0-based loop each token stops at, the first whose confidence exceeds tau
    (the last loop always answers). (N,) long."""
    confident = conf > tau
    confident[-1] = True
    return confident.float().argmax(dim=0)  # (argmax: the first loop over the threshold)


def teacher_forced_exit(per_token, thresholds, K):
    """Each token stops at the first loop k <= K whose confidence exceeds the threshold (else at
    K) and is scored by that loop's readout, every loop having run on the true prefix at full
    depth: the paper's measurement. What it saves is only what a decoder could save if exited
    tokens cost nothing later; causal_exit measures what one does. Every criterion with a
    conf_<name> row in per_token."""
    out = []
    for key in [k for k in per_token if k.startswith('conf_')]:
        for tau in thresholds:
            exit_at = exit_loops(per_token[key][:K].clone(), tau)
            ce = per_token['ce'][:K].gather(0, exit_at[None]).squeeze(0)
            out.append(dict(mode='teacher_forced', criterion=key[5:], threshold=tau,
                            mean_loops=(exit_at + 1).float().mean().item(), loss=ce.mean().item(),
                            ppl=perplexity(ce.mean().item())))
    return out


# -------------------------------------------------------------------------------------
# the bound: the best any per-token decider could do, and every criterion against it

ORACLE_MU = tuple(np.logspace(-2, 3, 41).tolist())  # nats^-1: the price of a nat of CE, in loops
# thresholds of the teacher-forced frontiers (cheap: no decoding), dense near 1 where the
# readout-free criteria sit
FRONTIER_GRID = tuple(sorted({*np.round(np.linspace(0.02, 0.98, 49), 4).tolist(),
                              *(1 - np.logspace(-1.5, -5, 22)).tolist(), 1e-6, 1.0}))  # (1: nothing exits)


def oracle_frontier(ce, mu_grid=ORACLE_MU):
    """The teacher-forced oracle: for each mu, every token exits at the loop k that minimizes
    k + mu * CE_k (its CE there, teacher-forced; the fewest loops on a tie). ce (K, N), the
    per-token CE of each depth. Small mu: every token at loop 1; large mu: each at its own
    best loop, which can beat full depth (it picks each token's luckiest loop): a bound on any
    per-token decider, not a target. Returns dict(mu, mean_loops, ppl) lists."""
    ce = ce.double()
    cost = torch.arange(1, ce.size(0) + 1, dtype=torch.float64)[:, None]  # (K, 1) loops
    out = dict(mu=list(mu_grid), mean_loops=[], ppl=[])
    for mu in mu_grid:
        at = (cost + mu * ce).argmin(0)  # (torch.argmin: the first of equal values, the fewest loops)
        out['mean_loops'].append((at + 1).double().mean().item())
        out['ppl'].append(perplexity(ce.gather(0, at[None]).mean().item()))
    return out


def loops_at(frontier, limit):
    """The fewest mean loops of a frontier's points (dict mean_loops, ppl lists) with ppl <= limit;
    None if none is."""
    within = [n for n, p in zip(frontier['mean_loops'], frontier['ppl']) if p <= limit]
    return min(within) if within else None


def exit_frontiers(per_token, K, targets=(0.01, 0.05), grid=FRONTIER_GRID):
    """The oracle's frontier and every criterion's teacher-forced one (its threshold swept over
    grid), and the mean loops each needs at +target of full-depth ppl, with its gap to the
    oracle's, in loops: how far each decider is from the best possible."""
    full = perplexity(per_token['ce'][K - 1].mean().item())
    oracle = oracle_frontier(per_token['ce'][:K])
    tf = {}
    for e in teacher_forced_exit(per_token, grid, K):
        f = tf.setdefault(e['criterion'], dict(threshold=[], mean_loops=[], ppl=[]))
        for key in f:
            f[key].append(e[key])
    at = {}
    for target in targets:
        limit = full * (1 + target)
        best = loops_at(oracle, limit)
        row = at[f'{target:g}'] = {}
        for c, f in tf.items():
            loops = loops_at(f, limit)
            row[c] = dict(loops=loops, oracle_gap=None if best is None or loops is None else loops - best)
        row['oracle'] = dict(loops=best, oracle_gap=0.0)
    return dict(full_ppl=full, oracle=oracle, teacher_forced=tf, at=at)


STEPPER = []  # the Stepper of the model evaluated last (stepper_of)


def stepper_of(model):
    """The eager Stepper of the model being evaluated, one for its whole evaluation: a Stepper copies the shared
    stack and casts its weights (once per precision), which each of an evaluation's hundreds of exit passes and
    timed decodes would otherwise repeat (at the tiny test shape, a sixth of its time). An evaluation never
    changes its model's weights; the Stepper of the model asked about last is kept (it holds that model)."""
    if not STEPPER or STEPPER[0].model is not model:
        STEPPER[:] = [Stepper(model)]
    return STEPPER[0]


@torch.no_grad()
def causal_exit(sc, K, criterion, threshold, stand_in, windows=None, desc=''):
    """The split scored as the decoder runs it (decoder.decode on each window): a token that
    stops at loop j never runs the later loops, and the tokens after it attend to its stand-in
    there. sc: a data.Scoring; windows: a subset of its windows (default: all); criterion: a
    beyond/exits.py Criterion. Returns per-token CE and loops used, (N,) each."""
    model = sc.model
    windows = sc.windows if windows is None else windows
    ce, loops = [], []
    with sc.ctx:
        stepper = stepper_of(model)  # (its weights cast once)
    with sc.progress(windows, desc) as bar:
        for x, y in sc.batches(windows):
            with sc.ctx:
                logits, used = decode(model, x, new_cache(model, x.size(0), K, sc.device), exit_threshold=threshold,
                                      criterion=criterion, stand_in=stand_in, stepper=stepper)
            logp = torch.log_softmax(logits.float(), dim=-1)
            ce.append(-logp.gather(-1, y[..., None]).flatten().cpu())
            loops.append(used.flatten().cpu())
            bar.update(1)
    return torch.cat(ce), torch.cat(loops)


def causal_exits(sc, K, thresholds, stand_ins, name, criteria=None):
    """Every criterion (name -> beyond/exits.py Criterion) at every threshold with every stand-in, scored causally."""
    criteria = criteria or exits.CRITERIA
    out = []
    for stand_in, criterion, tau in itertools.product(stand_ins, criteria, thresholds):
        ce, loops = causal_exit(sc, K, criteria[criterion], tau, stand_in,
                                desc=f"{name}: causal exit, {stand_in}, {criterion} > {tau}")
        out.append(dict(mode='causal', stand_in=stand_in, criterion=criterion, threshold=tau,
                        mean_loops=loops.float().mean().item(), loss=ce.mean().item(), ppl=perplexity(ce.mean().item())))
    return out


@torch.no_grad()
def stand_in_error(sc, K):
    """What a stand-in misses, on the first batch: for a token exiting at loop j < K, the token
    mean of ||k' - k_K|| / ||k_K|| at each layer, where k_K is its key at the last loop (run at
    full depth) and k' the stand-in read there: 'copy' its key at loop j, 'project' the layer's
    key of its exit state H_j. The same for values. [loop j][layer] lists."""
    model = sc.model
    x, _ = sc.first_batch()
    cache = new_cache(model, x.size(0), K, sc.device)
    with sc.ctx:
        T, stepper = x.size(1), stepper_of(model)
        decode(model, x, cache, stepper=stepper)
        states = model.hidden_states(x, K)  # H_0 .. H_K
    true = cache.kv[K - 1][..., :T, :].float()  # (n_layer, 2, B, nh, T, hs)
    out = {}
    for stand_in in ('copy', 'project'):
        rows = {'keys': [], 'values': []}
        for j in range(K - 1):
            got = stand_ins(stepper, cache, states[j + 1], 0, j, stand_in, states[0]).float()
            err = ((got - true).norm(dim=-1) / true.norm(dim=-1).clamp_min(1e-12)).mean(dim=(2, 3, 4))  # (L, 2)
            rows['keys'].append(err[:, 0].tolist())
            rows['values'].append(err[:, 1].tolist())
        out[stand_in] = rows
    return out


@torch.no_grad()
def decode_speed(model, prompt, n_new, K, device, ctx, seed=0, **kw):
    """Tokens per second of real sampling (cached, batch 1), the mean loops the new tokens used,
    and the speculative stats (passes, drafted, accepted)."""
    torch.manual_seed(seed)
    with ctx:
        stepper = stepper_of(model)  # (its weights cast before the clock, as beyond/sample.py keeps one for its samples)
        generate(model, prompt, min(8, n_new), n_loops=K, stepper=stepper, **kw)  # warm-up
        sync(device)
        t0 = time.perf_counter()
        _, used, stats = generate(model, prompt, n_new, n_loops=K, stepper=stepper, **kw)
        sync(device)
    return n_new / (time.perf_counter() - t0), used.float().mean().item(), stats


def speedup(model, prompt, n_new, K, device, ctx, reps=3, **kw):
    """Fixed-K and adaptive (kw) decoding timed in turn, reps times each, best of each: a load
    that comes and goes on the machine hits both alike. Returns (fixed tok/s, tok/s, mean loops)."""
    fixed, adaptive = [], []
    for _ in range(reps):
        fixed.append(decode_speed(model, prompt, n_new, K, device, ctx)[0])
        tok_s, loops, _ = decode_speed(model, prompt, n_new, K, device, ctx, **kw)
        adaptive.append(tok_s)
    return max(fixed), max(adaptive), loops


def held_prompt(sc):
    """The prompt calibrated halting times decoding from: the first 64 tokens of the first
    held-back window (the second half of the scored windows), batch 1."""
    x, _ = sc.first_batch(sc.windows[len(sc.windows) // 2:][:1], 1)
    return x[:, :64]


# thresholds calibrated halting tries; 1e-6: every token stops after loop 1 (the 1-loop model)
CALIBRATION_GRID = (1e-6, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 0.999)


def calibrate(sc, K, targets, stand_ins, decode_tokens, name, reference=None, grid=CALIBRATION_GRID, criteria=None):
    """Calibrated halting, made real. Every threshold of the grid is scored with causal exits on
    the first half of the scored windows; for each target, stand-in and criterion, the one that
    uses the fewest loops there while keeping perplexity within (1 + target) of full depth is
    picked (threshold 1, where nothing exits, if none does). A grid and not a bisection: with
    causal exits a higher threshold can hurt. The pick is reported on the held-back second half:
    perplexity and mean loops of the causal exit, and the measured speed-up of real decoding
    over fixed K. The reference is this model's own full depth, or `reference` (dict name, pick,
    held: another run's full-depth ppl on the two halves, as eval_depth.py passes for an
    exit-trained run: its normally trained twin). criteria: name -> Criterion (default: every registered one)."""
    model, windows, device, ctx = sc.model, sc.windows, sc.device, sc.ctx
    criteria = criteria or exits.CRITERIA
    half = len(windows) // 2
    if half == 0:
        raise ValueError(f"--calibrate needs at least two windows of {model.config.block_size} tokens to split into "
                         "calibration and held-back halves: raise --max_tokens")
    pick, held = windows[:half], windows[half:]
    full_pick = causal_exit(sc, K, 'max_prob', 0.0, 'copy', pick, f"{name}: full depth")[0]
    full_held = causal_exit(sc, K, 'max_prob', 0.0, 'copy', held, f"{name}: full depth")[0]
    scores = {}  # (stand_in, criterion, threshold) -> (ppl, mean loops) on the calibration half
    for stand_in, criterion, tau in itertools.product(stand_ins, criteria, grid):
        ce, loops = causal_exit(sc, K, criteria[criterion], tau, stand_in, pick,
                                f"{name}: calibrating, {stand_in}, {criterion} > {tau:g}")
        scores[stand_in, criterion, tau] = perplexity(ce.mean().item()), loops.float().mean().item()
    prompt = held_prompt(sc)
    full_ppl_pick = perplexity(full_pick.mean().item())
    own = dict(name='own', pick=full_ppl_pick, held=perplexity(full_held.mean().item()))
    ref = reference or own
    out = []
    for target, stand_in, criterion in itertools.product(targets, stand_ins, criteria):
        limit = ref['pick'] * (1 + target)
        within = [tau for tau in grid if scores[stand_in, criterion, tau][0] <= limit]
        tau = min(within, key=lambda t: scores[stand_in, criterion, t][1]) if within else 1.0
        ce, loops = causal_exit(sc, K, criteria[criterion], tau, stand_in, held,
                                f"{name}: held-back, {stand_in}, {criterion} > {tau:g}")
        fixed_tok_s, tok_s, decode_loops = speedup(model, prompt, decode_tokens, K, device, ctx, exit_threshold=tau,
                                                   criterion=criteria[criterion], stand_in=stand_in)
        out.append(dict(stand_in=stand_in, criterion=criterion, target=target, threshold=tau,
                        calibration_tokens=int(sum(n for _, n in pick)), heldout_tokens=int(sum(n for _, n in held)),
                        ppl=perplexity(ce.mean().item()), full_ppl=own['held'], full_ppl_pick=own['pick'],
                        reference=ref['name'], reference_ppl=ref['held'],
                        mean_loops=loops.float().mean().item(), decode_tokens=decode_tokens,
                        decode_tok_per_s=tok_s, fixed_decode_tok_per_s=fixed_tok_s, speedup=tok_s / fixed_tok_s,
                        decode_mean_loops=decode_loops))
    return out


# -------------------------------------------------------------------------------------
# speculative decoding

def acceptance(logits_j, logits_K):
    """Per token: whether loop j's argmax is loop K's (greedy acceptance), and the sampling
    acceptance sum_x min(p_j(x), p_K(x)) at temperature 1 (the chance that a token drafted
    from p_j is kept). (..., vocab) -> two (...,) float tensors."""
    p, q = torch.softmax(logits_K.float(), -1), torch.softmax(logits_j.float(), -1)
    return (logits_j.argmax(-1) == logits_K.argmax(-1)).float(), torch.minimum(p, q).sum(-1)


def tokens_per_pass(a, g):
    """Expected tokens a pass emits with g drafts, each kept with probability a (independently):
    1 + a + ... + a^g = (1 - a^(g+1)) / (1 - a)."""
    return g + 1.0 if a >= 1 else (1 - a ** (g + 1)) / (1 - a)


def predicted_speedup(a, j, g, K, draft_cost=None, verify_cost=None):
    """The speed-up over fixed K of passes drafting g tokens with j loops: tokens per pass over
    the pass's cost in fixed-K tokens. A pass runs g+1 draft steps (the newest token and the g
    drafts, loops 1..j) and one verify pass (loops j+1..K over all of them). Ideal costs (only
    the loops count, the verify's g+1 tokens cost one token's worth): draft j/K, verify (K-j)/K."""
    draft_cost = j / K if draft_cost is None else draft_cost
    verify_cost = (K - j) / K if verify_cost is None else verify_cost
    return tokens_per_pass(a, g) / ((g + 1) * draft_cost + verify_cost)


@torch.no_grad()
def step_costs(model, prompt, K, j, g, device, ctx, reps=20):
    """Measured seconds of a fixed-K token, a j-loop draft step, and a verify pass over g+1
    tokens (loops j+1..K), on a cache holding the prompt (batch 1)."""
    cache = new_cache(model, 1, K, device)
    t = prompt.size(1)
    with ctx:
        stepper = stepper_of(model)
        decode(model, prompt, cache, stepper=stepper)
        tok = prompt[:, -1:]

        def timed(fn):
            fn()
            sync(device)
            t0 = time.perf_counter()
            for _ in range(reps):
                fn()
            sync(device)
            return (time.perf_counter() - t0) / reps

        def fixed():
            cache.length = t
            draw(next_token_probs(decode(model, tok, cache, stepper=stepper)[0][:, -1], 1.0, None))

        def draft():
            h = model.embed(tok, t)
            h = stepper.loops(h, t, cache, 0, j)
            draw(next_token_probs(stepper.logits(h, last=True)[0, -1], 1.0, None))

        h0 = model.embed(prompt[:, -1:].expand(1, g + 1), t)

        def verify():
            h = stepper.loops(h0, t, cache, j, K, e=h0)  # (the drafts' states stand in for their own)
            next_token_probs(stepper.logits(h, last=True)[0], 1.0, None)

        return timed(fixed), timed(draft), timed(verify)


SPEC_GRID = dict(g=(1, 2, 3, 4, 6), draft_stop=(0.0, 0.3, 0.5))


def speculative_bench(model, prompt, K, n_new, device, ctx, acceptance_by_j, name, grid=SPEC_GRID):
    """Decode speed of speculative decoding for every (j, g, draft_stop), greedy (top_k=1) and
    sampled (temperature 1), against fixed K (same prompt and seed), with the speed-up its
    measured acceptance and step costs predict."""
    out = []
    fixed = {mode: decode_speed(model, prompt, n_new, K, device, ctx, temperature=1.0,
                                top_k=1 if mode == 'greedy' else None)[0] for mode in ('greedy', 'sample')}
    for j in range(1, K):
        for g in grid['g']:
            t_fixed, t_draft, t_verify = step_costs(model, prompt, K, j, g, device, ctx)
            for stop, mode in itertools.product(grid['draft_stop'], ('greedy', 'sample')):
                tok_s, _, st = decode_speed(model, prompt, n_new, K, device, ctx, temperature=1.0,
                                            top_k=1 if mode == 'greedy' else None, draft_loops=j, draft_tokens=g,
                                            draft_stop=stop)
                per_pass = n_new / max(st['passes'], 1)
                drafted = st['drafted'] / max(st['passes'], 1)
                # what the measured costs predict: tokens per pass over the pass's measured time
                predicted = per_pass * t_fixed / ((drafted + 1) * t_draft + t_verify)
                out.append(dict(j=j, g=g, draft_stop=stop, mode=mode, tok_per_s=tok_s, fixed_tok_per_s=fixed[mode],
                                speedup=tok_s / fixed[mode], accept_rate=st['accepted'] / max(st['drafted'], 1),
                                tokens_per_pass=per_pass, drafted_per_pass=drafted, predicted_speedup=predicted,
                                ideal_speedup=predicted_speedup(acceptance_by_j[mode][j - 1], j, g, K),
                                t_fixed=t_fixed, t_draft=t_draft, t_verify=t_verify))
    return out


# -------------------------------------------------------------------------------------
# eval_depth.py's part: its decoding flags, the rows of its pass, the studies of a run, the tables

def add_decoding_arguments(p):
    p.add_argument('--exit', default='', help='early-exit thresholds in (0, 1], e.g. 0.5,0.7,0.9: teacher-forced '
                                              'and causal (as the decoder runs it). Holds a few (batch, block, vocab) '
                                              'float32 tensors: with a 50k vocabulary, lower --batch_size')
    p.add_argument('--calibrate', default='',
                   help='calibrated halting: allowed relative ppl increases over full depth, e.g. 0.01,0.05')
    p.add_argument('--stand_in', default='copy,project',
                   help="the stand-ins --exit and --calibrate score: copy, project or both (comma-separated)")
    p.add_argument('--criteria', default=None,
                   help="the exit criteria --exit and --calibrate score, comma-separated: " + exits.names() +
                        ". Default: every registered one (python -m beyond.exits lists them), and gate where a run has gate.pt")
    p.add_argument('--retime', action='store_true',
                   help="with --from_results: time every calibrated pick's decode speed-up again (on a quiet machine; "
                        "with --device auto, on the device the runs were timed on), and write the results to --out")
    p.add_argument('--speculative', action='store_true',
                   help='time speculative decoding for every draft depth j, draft length g and draft_stop (batch 1)')
    p.add_argument('--decode_tokens', type=int, default=256,
                   help='tokens sampled to time decoding (--calibrate, --speculative)')


def parse_thresholds(text):
    try:
        values = [float(v) for v in text.split(',') if v.strip()]
    except ValueError:
        raise UserError(f"--exit takes comma-separated thresholds like 0.5,0.9; got {text!r}")
    bad = [v for v in values if not 0 < v <= 1]
    if bad or not values:
        raise UserError(f"--exit thresholds must lie in (0, 1]; got {text!r}")
    return values


def check_decoding_arguments(args):
    """Every check on the decoding flags, in one place (after eval_depth.check_settings's own)."""
    if args.decode_tokens < 1:
        raise UserError(f"--decode_tokens must be at least 1; got {args.decode_tokens}")
    bad_targets = UserError(f"--calibrate takes allowed relative perplexity increases in (0, 1), like 0.01 or "
                            f"0.01,0.05; got {args.calibrate!r}")
    try:
        args.calibrate = [float(v) for v in args.calibrate.split(',') if v.strip()]
    except ValueError:
        raise bad_targets from None
    if not all(0 < v < 1 for v in args.calibrate):
        raise bad_targets
    args.exit = parse_thresholds(args.exit) if args.exit else []
    if args.criteria is not None:
        args.criteria = list(dict.fromkeys(v.strip() for v in args.criteria.split(',') if v.strip()))
        if not args.criteria:
            raise UserError(f"--criteria takes exit criteria, comma-separated: {exits.names()}")
        for name in args.criteria:
            exits.check_name(name, '--criteria')
    args.stand_in = [v.strip() for v in args.stand_in.split(',') if v.strip()]
    bad = [v for v in args.stand_in if v not in STAND_INS]
    if bad or not args.stand_in:
        raise UserError(f"--stand_in takes {' and/or '.join(STAND_INS)}, comma-separated; got {','.join(bad) or 'nothing'}")


def exit_rows(model, states, K, criteria=None):
    """From one pass's states [H_0 .. H_K'] of a batch: for loops 1..K, each criterion's confidence
    ('conf_<name>', (K, N)) and the speculative acceptance of loop j's readout by loop K's
    ('greedy_agree', 'sample_accept', (K-1, N)). A token that exits at loop k is read out as the
    model run with k loops; three (B, T, vocab) readouts are alive at a time."""
    criteria = criteria or exits.CRITERIA
    last_out, prev, conf, agree, accept = model.lm_head(model.readout(states[K], last=True)), None, [], [], []
    for k in range(1, K + 1):
        out = model.lm_head(model.readout(states[k], last=True)) if k < K else last_out
        conf.append([c(states[k], states[k - 1], out, prev).flatten() for c in criteria.values()])
        if k < K:  # speculative decoding: is the k-loop model's token kept by loop K?
            a, b = acceptance(out, last_out)
            agree.append(a.flatten())
            accept.append(b.flatten())
        prev = out
    rows = {f'conf_{c}': torch.stack([row[i] for row in conf]) for i, c in enumerate(criteria)}
    if agree:
        rows['greedy_agree'], rows['sample_accept'] = torch.stack(agree), torch.stack(accept)
    return rows


def gates_of(criteria):
    """What a results.json records of a run's learned gates: name -> what each reads."""
    return {n: dict(reads=c.gate.reads) for n, c in (criteria or {}).items() if c.gate is not None}


def decoding_studies(run, sc, free, K, args, reference=None, criteria=None):
    """The decoding studies of one run, into run: the oracle and the teacher-forced frontiers, and
    as the flags ask, early exit (--exit), calibrated halting (--calibrate) and speculative timing
    (--speculative). free: the per-token rows of eval_depth.score_depths; K: the trained depth."""
    criteria = criteria or exits.CRITERIA
    run['early_exit'] = []
    if K > 1:
        run['speculative'] = dict(greedy_agree=free['greedy_agree'].mean(1).tolist(),
                                  sample_accept=free['sample_accept'].mean(1).tolist())
        # the oracle bound and every criterion's teacher-forced frontier (no decoding: cheap)
        run['exit_frontier'] = exit_frontiers(free, K)
    if args.exit:
        run['early_exit'] = teacher_forced_exit(free, args.exit, K) + \
            causal_exits(sc, K, args.exit, args.stand_in, run['name'], criteria)
        if K > 1:
            run['stand_in_error'] = stand_in_error(sc, K)
    if args.calibrate:
        try:
            run['calibrated'] = calibrate(sc, K, args.calibrate, args.stand_in, args.decode_tokens, run['name'],
                                          reference, criteria=criteria)
        except ValueError as e:
            raise UserError(str(e))
    if args.speculative and K > 1:
        x1, _ = sc.first_batch(sc.windows[-1:], 1)
        by_j = dict(greedy=run['speculative']['greedy_agree'], sample=run['speculative']['sample_accept'])
        prompt = x1[:, :min(64, sc.model.config.block_size // 2)]  # (room in the block for every draft length timed)
        run['speculative_bench'] = speculative_bench(sc.model, prompt, K, args.decode_tokens, sc.device, sc.ctx, by_j,
                                                     run['name'])


def retime(runs, device, data_dir=None):
    """Times again every calibrated pick of earlier runs (a results.json's), in place: decode
    speed-ups are the one part of an evaluation that a busy machine distorts."""
    for run in runs:
        if not run.get('calibrated'):
            continue
        model, _, data = load_run(run['path'], device, run['split'], data_dir)
        windows = score_windows(len(data), model.config.block_size, run['tokens_scored'])
        ctx = autocast(device, run['dtype'])
        prompt = held_prompt(Scoring(model, data, windows, 1, device, ctx))  # calibrate's prompt
        criteria = exits.run_criteria(run_folder(run['path']), model, sorted({c['criterion'] for c in run['calibrated']}))
        for c in run['calibrated']:
            fixed, tok_s, loops = speedup(model, prompt, c['decode_tokens'], run['trained_K'], device, ctx,
                                          exit_threshold=c['threshold'], criterion=criteria[c['criterion']],
                                          stand_in=c['stand_in'])
            c.update(fixed_decode_tok_per_s=fixed, decode_tok_per_s=tok_s, speedup=tok_s / fixed, decode_mean_loops=loops,
                     retimed=True)


def decoding_tables(g, runs):
    """The decoding studies' tables of a group, as eval_depth.py prints them after its own."""
    out = []
    if g['mean'].get('exit_frontier'):
        out.append(frontier_table(g))
    if g['mean'].get('early_exit'):
        out.append(exit_table(g))
    if 'calibrated' in g['mean']:
        out.append(calibration_table(g, runs))
    if 'speculative' in g['mean']:
        out.append(speculative_table(g))
    return ''.join(t + '\n' for t in out)


# -------------------------------------------------------------------------------------
# tables

def exit_table(g):
    K = g['mean']['final_norm_hist']['loop']
    full = g['mean']['per_K'][K - 1]
    stand_ins = sorted({e['stand_in'] for e in g['mean']['early_exit'] if e['mode'] == 'causal'})
    lines = [f"\nearly exit, {label(g)} (no exit, K={K}: ppl {pm(full['ppl'], g['std']['per_K'][K - 1]['ppl'])})",
             '| criterion | threshold | teacher-forced: mean loops | ppl | ' +
             ' | '.join(f"causal, {s}: mean loops | ppl" for s in stand_ins) + ' |',
             '|---|---|---|---|' + '---|---|' * len(stand_ins)]
    rows = {(e['mode'], e['stand_in'] if e['mode'] == 'causal' else None, e['criterion'], e['threshold']): (e, s)
            for e, s in zip(g['mean']['early_exit'], g['std']['early_exit'])}
    for (mode, _, criterion, tau), (tf, tf_s) in rows.items():
        if mode != 'teacher_forced':
            continue
        cells = [criterion, f"{tau}", pm(tf['mean_loops'], tf_s['mean_loops'], '.2f'), pm(tf['ppl'], tf_s['ppl'])]
        for s in stand_ins:
            ca, ca_s = rows[('causal', s, criterion, tau)]
            cells += [pm(ca['mean_loops'], ca_s['mean_loops'], '.2f'), pm(ca['ppl'], ca_s['ppl'])]
        lines.append('| ' + ' | '.join(cells) + ' |')
    err = g['mean'].get('stand_in_error')
    for s, rows_ in (err or {}).items():
        keys = rows_['keys']
        lines.append(f"stand-in error ({s}), ||k' - k_{K}|| / ||k_{K}|| (mean over layers) for a token exiting at loop j = "
                     + ', '.join(f"{j + 1}: {sum(row) / len(row):.3f}" for j, row in enumerate(keys)))
    return '\n'.join(lines)


def frontier_table(g):
    """Each criterion's teacher-forced mean loops at +1% and +5% of full-depth ppl, and its gap
    in loops to the oracle's (the fewest loops any per-token decider could use there)."""
    f, fs = g['mean']['exit_frontier'], g['std']['exit_frontier']
    targets = list(f['at'])
    lines = [f"\nexit deciders against the oracle, {label(g)}: teacher-forced mean loops within +target of full-depth "
             f"ppl {pm(f['full_ppl'], fs['full_ppl'])} (gap: loops above the oracle's)",
             '| criterion | ' + ' | '.join(f"+{100 * float(t):g}%: loops | gap" for t in targets) + ' |',
             '|---|' + '---|---|' * len(targets)]
    for c in ['oracle'] + [c for c in f['at'][targets[0]] if c != 'oracle']:
        cells = [c]
        for t in targets:
            a, s = f['at'][t][c], fs['at'][t][c]
            cells += [pm(a['loops'], s['loops'], '.2f'), pm(a['oracle_gap'], s['oracle_gap'], '+.2f')]
        lines.append('| ' + ' | '.join(cells) + ' |')
    return '\n'.join(lines)


def calibration_table(g, runs=()):
    """runs: the group's runs (each seed names its own reference: an exit-trained run is measured
    against its normally trained twin of the same seed)."""
    members = [r for r in runs if r['name'] in g['runs'] and r.get('calibrated')]
    lines = [f"\ncalibrated halting, {label(g)}: threshold picked on the first half of the tokens, "
             "reported on the held-back second half",
             '| stand-in | criterion | target (of) | threshold | ppl (exit) | ppl (full K) | mean loops | decode tok/s fixed K | adaptive | speed-up |',
             '|---|---|---|---|---|---|---|---|---|---|']
    for i, (c, s) in enumerate(zip(g['mean']['calibrated'], g['std']['calibrated'])):
        refs = [(r['calibrated'][i]['reference'], r['calibrated'][i]['reference_ppl']) for r in members] or \
            [(c['reference'], c['reference_ppl'])]
        of = '' if all(name == 'own' for name, _ in refs) else \
            ' (' + ', '.join(f"{name}: {ppl:.3f}" for name, ppl in refs) + ')'
        lines.append(f"| {c['stand_in']} | {c['criterion']} | +{100 * c['target']:g}%{of} | {pm(c['threshold'], s['threshold'], '.3f')} | "
                     f"{pm(c['ppl'], s['ppl'])} | {pm(c['full_ppl'], s['full_ppl'])} | "
                     f"{pm(c['mean_loops'], s['mean_loops'], '.2f')} | {pm(c['fixed_decode_tok_per_s'], s['fixed_decode_tok_per_s'], ',.0f')} | "
                     f"{pm(c['decode_tok_per_s'], s['decode_tok_per_s'], ',.0f')} | {pm(c['speedup'], s['speedup'], '.2f')}x |")
    return '\n'.join(lines)


def speculative_table(g):
    spec = g['mean']['speculative']
    K = len(spec['greedy_agree']) + 1
    lines = [f"\nspeculative decoding, {label(g)}: acceptance of loop j's readout by loop {K}'s, and the ideal "
             "speed-up (1 - a^(g+1)) / (1 - a) / ((g+1) j/K + (K-j)/K) at the best g",
             '| j | greedy agree | sample accept | ideal speed-up, greedy | sampled |', '|---|---|---|---|---|']
    for j in range(1, K):
        best = {m: max(predicted_speedup(spec[key][j - 1], j, n, K) for n in SPEC_GRID['g'])
                for m, key in (('greedy', 'greedy_agree'), ('sample', 'sample_accept'))}
        lines.append(f"| {j} | {spec['greedy_agree'][j - 1]:.3f} | {spec['sample_accept'][j - 1]:.3f} | "
                     f"{best['greedy']:.2f}x | {best['sample']:.2f}x |")
    bench = g['mean'].get('speculative_bench')
    if bench:
        lines += ['', '| mode | j | g | draft_stop | tok/s | fixed K | speed-up | predicted (measured costs) | '
                      'accept rate | tokens/pass |', '|---|---|---|---|---|---|---|---|---|---|']
        for mode in ('greedy', 'sample'):
            rows = sorted((r for r in bench if r['mode'] == mode), key=lambda r: -r['speedup'])[:5]
            for r in rows:
                lines.append(f"| {mode} | {r['j']} | {r['g']} | {r['draft_stop']:g} | {r['tok_per_s']:,.0f} | "
                             f"{r['fixed_tok_per_s']:,.0f} | {r['speedup']:.2f}x | {r['predicted_speedup']:.2f}x | "
                             f"{r['accept_rate']:.3f} | {r['tokens_per_pass']:.2f} |")
    return '\n'.join(lines)


def speculative_summary(groups):
    """One row a group with timed speculative decoding, as docs/speculative.md quotes it: loop j's acceptance by loop
    K, greedy and sampled; the best setting of each mode (j, g, draft_stop): its tok/s over fixed K's; the best greedy
    setting's tokens per pass; and each best setting's timed speed-up as a share of the one its acceptance and
    measured step costs predict."""
    groups = [g for g in groups if g['mean'].get('speculative_bench')]
    if not groups:
        return ''
    lines = ['\nspeculative decoding, the best settings: acceptance by loop K (j = 1, 2, ..), the best (j, g, draft_stop) '
             'of each mode, and its speed-up as a share of the predicted one',
             '| run | greedy agree, j=1/2/3 | sample accept, j=1/2/3 | best greedy (j, g, stop): tok/s / fixed K | '
             'best sampled | tokens per pass, greedy | of the predicted, greedy / sampled |', '|---|---|---|---|---|---|---|']
    for g in groups:
        spec, bench = g['mean']['speculative'], g['mean']['speculative_bench']
        best = {m: max((r for r in bench if r['mode'] == m), key=lambda r: r['speedup']) for m in ('greedy', 'sample')}
        cell = lambda r: (f"({r['j']}, {r['g']}, {r['draft_stop']:g}): {r['tok_per_s']:,.0f} / {r['fixed_tok_per_s']:,.0f} "  # noqa: E731
                          f"= {r['speedup']:.2f}x")
        lines.append(f"| {label(g)} | {' / '.join(f'{a:.2f}' for a in spec['greedy_agree'])} | "
                     f"{' / '.join(f'{a:.2f}' for a in spec['sample_accept'])} | {cell(best['greedy'])} | "
                     f"{cell(best['sample'])} | {best['greedy']['tokens_per_pass']:.2f} | "
                     + ' / '.join(f"{100 * best[m]['speedup'] / best[m]['predicted_speedup']:.0f}%" for m in best) + ' |')
    return '\n'.join(lines) + '\n'


SUMMARY_EXITS = (('max_prob', 0.9, ('teacher_forced', 'copy', 'project')),   # the exits exit_summary shows: the
                 ('converge', 0.5, ('project',)))                           # readout's confidence, and converge


def twin_change(g, runs):
    """An exit-trained group's full depth against its normally trained twins (the runs its calibration is measured
    against, each seed's own): the mean over its seeds of ppl / the twin's ppl - 1 at the trained K, in %; None for
    a group without twins (or whose twins these results do not hold)."""
    by_name = {r['name']: r for r in runs}
    at = lambda r: next(k['ppl'] for k in r['per_K'] if k['K'] == r['trained_K'])  # noqa: E731
    pairs = [(by_name[n], by_name.get(by_name[n]['calibrated'][0].get('reference')))
             for n in g['runs'] if n in by_name and by_name[n].get('calibrated')]
    if not pairs or any(twin is None for _, twin in pairs):
        return None
    return 100 * sum(at(r) / at(twin) - 1 for r, twin in pairs) / len(pairs)


def fewest_loops(g, target):
    """The calibrated pick of a target with the fewest mean loops (the first of equals, in the table's order), as
    'criterion, stand-in: mean loops [± std], ppl, speed-up ± std'; 'none' where every pick runs the trained K."""
    picks = [(c, s or {}) for c, s in zip(g['mean']['calibrated'], g['std'].get('calibrated') or [None] * 999)
             if c['target'] == target]
    c, s = min(picks, key=lambda p: p[0]['mean_loops'])
    if c['mean_loops'] >= g['mean']['trained_K'] - 0.005:
        return 'none'
    spread = lambda key, spec: pm(c[key], s.get(key) if s.get(key) else None, spec)  # noqa: E731
    return f"{c['criterion']}, {c['stand_in']}: {spread('mean_loops', '.2f')}, {c['ppl']:.2f}, {spread('speedup', '.2f')}x"


def exit_summary(groups, runs):
    """One row a group with early exits and calibrated halting, as docs/early-exit.md quotes it: full depth (ppl at
    the trained K) and, exit-trained, against its normally trained twins (twin_change); each exit of SUMMARY_EXITS
    as ppl (mean loops), teacher-forced and causal with its stand-ins; and each target's calibrated pick with the
    fewest loops (fewest_loops). Then the decode speed-ups of every calibrated pick of every run, by the mean loops it
    decoded with: every token after the same loop, or per token between two loops."""
    groups = [g for g in groups if g['mean'].get('early_exit') and g['mean'].get('calibrated')]
    if not groups:
        return ''
    targets = sorted({c['target'] for g in groups for c in g['mean']['calibrated']})
    head = ['run', 'full depth', 'against its twin'] + [
        f"{c} > {t:g}: {'teacher-forced' if m == 'teacher_forced' else f'causal, {m}'}"
        for c, t, modes in SUMMARY_EXITS for m in modes] + [f'fewest loops within +{100 * t:g}%' for t in targets]
    lines = ['\nearly exit, one row a group: full depth at the trained K (exit-trained: against the normally trained '
             "twins, each seed's own), exits as ppl (mean loops), and the calibrated pick with the fewest loops "
             '(criterion, stand-in: mean loops, ppl, decode speed-up over fixed K)',
             '| ' + ' | '.join(head) + ' |', '|' + '---|' * len(head)]
    for g in groups:
        K = g['mean']['trained_K']
        change = twin_change(g, runs)
        cells = [label(g), short_pm(g, K), '-' if change is None else f'{change:+.1f}%']
        for criterion, threshold, modes in SUMMARY_EXITS:
            for m in modes:
                e = [e for e in g['mean']['early_exit'] if e['criterion'] == criterion and e['threshold'] == threshold
                     and (e['mode'] == m if m == 'teacher_forced' else e.get('stand_in') == m and e['mode'] == 'causal')]
                cells.append(f"{three(e[0]['ppl'])} ({e[0]['mean_loops']:.2f})" if e else '-')
        cells += [fewest_loops(g, t) for t in targets]
        lines.append('| ' + ' | '.join(cells) + ' |')
    return '\n'.join(lines) + '\n' + speedup_by_loops(runs)


def three(x):
    """Three significant digits, trailing zeros kept (5.80, 30.9); thousands split from 1,000 on."""
    return format(x, ',.0f') if abs(x) >= 1000 else format(x, '#.3g')


def short_pm(g, K):
    """A group's ppl at K, mean ± std (one seed: the mean), as eval_depth's summary shows it."""
    i = next(i for i, k in enumerate(g['mean']['per_K']) if k['K'] == K)
    return eval_depth.short(g['mean']['per_K'][i]['ppl'], g['std']['per_K'][i]['ppl'] if g['n'] > 1 else None)


def speedup_by_loops(runs):
    """Every calibrated pick of every run (its retimed speed-up where retimed), by the mean loops it decoded with."""
    picks = [(c['decode_mean_loops'], c['speedup']) for r in runs for c in r.get('calibrated') or []]
    if not picks:
        return ''
    K = max(r['trained_K'] for r in runs if r.get('calibrated'))
    kinds = {}
    for loops, s in picks:
        key = (f'every token, {loops:.0f} loop' + 's' * (loops != 1)) if loops == int(loops) else \
            f'per token, {math.floor(loops)} to {math.ceil(loops)} loops'
        kinds.setdefault(key, []).append((loops, s))
    order = lambda k: (float(re.search(r'\d+', k).group()) + (0.5 if k.startswith('per') else 0))  # noqa: E731
    lines = [f'\ndecode speed-up over fixed K={K} of the {len(picks)} calibrated picks of the runs, by the mean loops '
             'they decoded with', '| decoded with | picks | mean loops | speed-up |', '|---|---|---|---|']
    for key in sorted(kinds, key=order):
        ls, ss = zip(*kinds[key])
        span = lambda v, spec: format(min(v), spec) + ('' if min(v) == max(v) else f' to {max(v):{spec}}')  # noqa: E731
        lines.append(f'| {key} | {len(ls)} | {span(ls, ".2f")} | {span(ss, ".2f")}x |')
    return '\n'.join(lines) + '\n'


# -------------------------------------------------------------------------------------
# figures (report.all_plots draws them after the paper's)

LINES = ('-', '--', ':', '-.', (0, (5, 1)), (0, (1, 1)), (0, (3, 1, 1, 1)))  # one a criterion


def early_exit_figure(plt, groups, runs):
    if not any(g['mean'].get('early_exit') for g in groups):
        return None
    fig, axes = plt.subplots(1, 2, figsize=(13, 6), sharey=True)
    for ax, mode, title in zip(axes, ('teacher_forced', 'causal'),
                               ('teacher-forced (every loop runs)', 'causal (exited tokens skip later loops)')):
        for i, g in enumerate(groups):
            criteria = list(dict.fromkeys(e['criterion'] for e in g['mean'].get('early_exit') or []))
            for criterion, ls in zip(criteria, itertools.cycle(LINES)):
                pts = sorted((e['mean_loops'], e['ppl']) for e in g['mean'].get('early_exit') or []
                             if e['mode'] == mode and e['criterion'] == criterion)
                if pts:
                    ax.plot(*zip(*pts), marker='o', ls=ls, color=f'C{i % 10}', label=f"{g['name']}: {criterion}")
        ax.set(xlabel='mean loops used per token', ylabel='perplexity', title=f'Early exit, {title}')
        clip_ppl(ax, [e['ppl'] for g in groups for e in g['mean'].get('early_exit') or []])
    legend(axes[0])
    fig.suptitle('Perplexity vs loops used, one line style a criterion')
    return fig, 'early_exit.png'


def exit_frontier_figures(plt, groups, runs):
    """One figure a run: the oracle's frontier (each token at its best loop for a price mu of a
    nat in loops) and every criterion's teacher-forced frontier, mean loops vs ppl, with
    full-depth ppl +1% and +5% marked. Yields (figure, file name), each saved and closed before the next."""
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
        yield fig, f"exit_frontier_{run['name']}.png"


FIGURES = (early_exit_figure, exit_frontier_figures)


# -------------------------------------------------------------------------------------
# the studies as one eval_depth.Study, and the script

class DecodingStudies(eval_depth.Study):
    """eval_depth's hooks for the studies above: the flags, each run's exit criteria (its gates
    found by name), the exit rows of its pass, the studies, their tables and figures, --retime."""
    figures = FIGURES

    def __init__(self):
        self.twins = {}  # condition and seed of a normally trained run -> its calibrated pick

    def add_arguments(self, parser):
        add_decoding_arguments(parser)

    def check(self, args):
        check_decoding_arguments(args)

    def prepare(self, loaded, args):
        # calibrated halting of an exit-trained run is measured against its normally trained twin (the
        # same settings and seed with exit_train=0), when that run is evaluated too: so those go first
        loaded.sort(key=lambda r: r[2].get('exit_train', 0.0) > 0)
        for path, model, _, _ in loaded:
            if windowed(model):  # (the causal exits, calibration and speculation decode through the cache)
                raise UserError(f"{path}: {WINDOWED.replace('sample it with sample.py', 'evaluate it with eval_depth.py')}")
        return [exits.run_criteria(run_folder(path), model, args.criteria) for path, model, _, _ in loaded]

    def rows(self, model, states, K, criteria):
        return exit_rows(model, states, K, criteria)

    def evaluate(self, run, sc, rows, K, args, criteria):
        config = run['config']
        key = lambda c: eval_depth.condition(c) + (('seed', repr(c.get('seed'))),)  # noqa: E731
        run['gates'] = gates_of(criteria)
        decoding_studies(run, sc, rows, K, args, self.twins.get(key({**config, 'exit_train': 0.0})), criteria)
        if run.get('calibrated') and not config.get('exit_train'):
            self.twins[key(config)] = dict(name=run['name'], pick=run['calibrated'][0]['full_ppl_pick'],
                                           held=run['calibrated'][0]['full_ppl'])

    def tables(self, group, runs):
        return decoding_tables(group, runs)

    def summary(self, groups, runs):
        return exit_summary(groups, runs) + speculative_summary(groups)

    def from_results(self, runs, args):
        if not args.retime:
            return False
        # --device auto: the device the runs were timed on (a GPU box does not retime CPU runs on its GPU)
        device = args.device if args.device != 'auto' else runs[0].get('device', 'auto') if runs else 'auto'
        try:
            retime(runs, setup_device(device), args.data_dir)
        except ValueError as e:
            raise UserError(str(e))
        return True


def main(argv=None):
    eval_depth.main(argv, studies=[DecodingStudies()], script='python -m beyond.eval_decode')


if __name__ == '__main__':
    main()
