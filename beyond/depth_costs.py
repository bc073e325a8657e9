"""
The costs of depth at one checkpoint, decoding at batch 1, every part timed side by side in
one run: one loop, one readout, each exit decision, a verify pass per token, sampling; fixed
K = 1..K tok/s; and what they imply for exits and for speculative decoding.

    OMP_NUM_THREADS=2 python -m beyond.depth_costs out-norm_perloop-cpu44m-s1 --dtype float32   # assets/cpu-44m
    OMP_NUM_THREADS=2 python -m beyond.depth_costs out-raw_perloop-cpu-long-s1 --prompt 64      # assets/cpu-long-criteria

Prints a markdown table and the implied speed-ups, then what the pages read from them (summary); run it on a quiet
machine. --from_table FILE prints a stored output again with its summary made anew from its own lines (no timing).
"""

import argparse
import contextlib
import io
import os
import re
import statistics
import time

import torch

from beyond import exits
from beyond.decoder import Stepper, decode, generate, new_cache, draw, next_token_probs, stand_ins
from beyond.eval_decode import acceptance, predicted_speedup, tokens_per_pass
from data import Scoring, load_run, score_windows
from runtime import autocast


def timed(fn, reps):
    """Median seconds of reps calls, after 3 warm-up calls."""
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


SUMMARY = '\nRead from the lines above: '


def summary(text):
    """What the pages quote from a printed output, computed from its printed numbers: one readout over one loop, and
    the measured fixed-K token (1000 / its tok/s) against the sum of its parts, in ms."""
    part = lambda name: float(re.search(rf'^\| {name} \(.*?\) \| ([\d.]+) \|$', text, re.M).group(1))  # noqa: E731
    loop, readout = part('one loop'), part('one readout')
    parts, tok_s = re.search(r'^A fixed-K token, from the parts: .* = ([\d.]+) ms \(.*; measured ([\d,.]+)\)\.$',
                             text, re.M).groups()
    measured = 1000 / float(tok_s.replace(',', ''))
    return (f"{SUMMARY}one readout is {readout / loop:.3f} of one loop; a fixed-K token measured 1000 / {tok_s} = "
            f"{measured:.3f} ms, {measured - float(parts):.3f} ms beyond its parts ({parts} ms).\n")


@torch.inference_mode()
def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('run', nargs='?')
    p.add_argument('--from_table', default=None, help="a stored output: print it again with its summary made anew")
    p.add_argument('--dtype', default='float32', choices=['float32', 'bfloat16'])
    p.add_argument('--prompt', type=int, default=128, help='tokens in the cache when a step is timed')
    p.add_argument('--reps', type=int, default=30)
    p.add_argument('--new_tokens', type=int, default=48, help='tokens sampled to time fixed K')
    p.add_argument('--accept_tokens', type=int, default=2048, help='tokens the acceptance of loop j is measured on')
    p.add_argument('--g', type=int, default=3, help='drafts per verify pass')
    args = p.parse_args(argv)
    if args.from_table:
        with open(args.from_table) as f:
            text = f.read().split(SUMMARY)[0].rstrip('\n') + '\n'
        print(text + summary(text), end='')
        return
    if not args.run:
        p.error('name a run folder (or --from_table FILE)')
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        measure(args)
    print(out.getvalue() + summary(out.getvalue()), end='')


def measure(args):
    """Times every part and prints the tables (main adds the summary)."""
    model, config, data = load_run(args.run, 'cpu', 'val')
    ctx = autocast('cpu', args.dtype)
    K, C = model.config.n_loops, model.config.n_embd
    sc = Scoring(model, data, score_windows(len(data), model.config.block_size, args.accept_tokens), 4, 'cpu', ctx)
    prompt = torch.as_tensor(data[:args.prompt].astype('int64'))[None]
    t = prompt.size(1)
    with ctx:
        stepper = Stepper(model)
        cache = new_cache(model, 1, K)
        decode(model, prompt, cache, stepper=stepper)
        tok = prompt[:, -1:]
        h0 = model.embed(tok, t)
        h1 = stepper.loops(h0, t, cache, 0, 1)
        h2 = stepper.loops(h1, t, cache, 1, 2, e=h0)
        logits1, logits2 = stepper.logits(h1, last=True), stepper.logits(h2, last=True)

        loop = timed(lambda: stepper.loops(h0, t, cache, 0, 1), args.reps)
        readout = timed(lambda: stepper.logits(h1, last=True), args.reps)
        decide = {name + ('' if c.readout else ' (no readout)'): timed(lambda c=c: bool(c(h2, h1, logits2, logits1) > 0.5), args.reps)
                  for name, c in exits.CRITERIA.items()}  # (as decoder.decode decides)
        sampling = timed(lambda: draw(next_token_probs(logits2[:, -1], 1.0, None)), args.reps)
        project = timed(lambda: stand_ins(stepper, cache, h1, t, 0, 'project', h0), args.reps)  # (an exit's later keys/values)
        hg = model.embed(prompt[:, -1:].expand(1, args.g + 1), t)
        verify = {j: timed(lambda j=j: stepper.logits(stepper.loops(hg, t, cache, j, K, e=hg), last=True), args.reps)
                  for j in range(1, K)}
        fixed = {}
        for k in range(1, K + 1):
            generate(model, prompt, 8, n_loops=k, stepper=stepper)  # warm-up (the weights cast once, as the parts')
            t0 = time.perf_counter()
            generate(model, prompt, args.new_tokens, n_loops=k, stepper=stepper)
            fixed[k] = args.new_tokens / (time.perf_counter() - t0)
        # acceptance of loop j's readout by loop K's, on the first accept_tokens validation tokens
        agree, accept = torch.zeros(K - 1), torch.zeros(K - 1)
        n = 0
        for x, _ in sc.batches():
            states = model.hidden_states(x, K)
            last = model.lm_head(model.readout(states[K], last=True))
            for j in range(1, K):
                a, b = acceptance(model.lm_head(model.readout(states[j], last=True)), last)
                agree[j - 1] += a.sum().float()
                accept[j - 1] += b.sum().float()
            n += x.numel()
        agree, accept = (agree / n).tolist(), (accept / n).tolist()

    ms = lambda s: f"{1000 * s:.3f}"  # noqa: E731
    print(f"# {os.path.basename(os.path.normpath(args.run))}: d={C}, {model.config.n_layer} layers, K={K}, "
          f"vocab {model.config.vocab_size}, {args.dtype}, {torch.get_num_threads()} threads, batch 1, "
          f"{t} tokens cached, median of {args.reps}\n")
    print('| part | ms |\n|---|---|')
    print(f"| one loop (the {model.config.n_layer}-layer stack, one token) | {ms(loop)} |")
    print(f"| one readout ({C} x {model.config.vocab_size}) | {ms(readout)} |")
    for c, s in decide.items():
        print(f"| exit decision: {c} | {ms(s)} |")
    print(f"| sampling from the readout | {ms(sampling)} |")
    print(f"| an exited token's projected stand-ins (every layer's keys and values from its exit state) | {ms(project)} |")
    for j, s in verify.items():
        print(f"| verify pass, loops {j + 1}..{K} over {args.g + 1} tokens, per token | {ms(s / (args.g + 1))} |")
    print('\n| fixed K | tok/s (sampled, cached) |\n|---|---|')
    for k, v in fixed.items():
        print(f"| {k} | {v:,.1f} |")

    per_token_fixed = K * loop + readout + sampling
    print(f"\nA fixed-K token, from the parts: {K} x {ms(loop)} + {ms(readout)} + {ms(sampling)} = {ms(per_token_fixed)} ms "
          f"({1 / per_token_fixed:,.1f} tok/s; measured {fixed[K]:,.1f}).")
    print('\n| exit after loop e | with a readout per loop (max_prob) | speed-up | decided without a readout (angular) | speed-up '
          '| the same, projected stand-ins | speed-up |')
    print('|---|---|---|---|---|---|---|')
    for e in range(1, K):
        with_readout = e * (loop + readout + decide['max_prob']) + sampling
        without = e * (loop + decide['angular (no readout)']) + readout + sampling
        projected = without + project
        print(f"| {e} | {ms(with_readout)} ms | {per_token_fixed / with_readout:.2f}x | {ms(without)} ms | "
              f"{per_token_fixed / without:.2f}x | {ms(projected)} ms | {per_token_fixed / projected:.2f}x |")
    print(f"\nSpeculative decoding, g = {args.g} drafts per pass; acceptance a of loop j's token by loop {K}'s "
          f"on {n:,} validation tokens; ideal = only loops cost; measured costs = the parts above:")
    print('| j | greedy agree | sample accept | tokens/pass (sampled) | ideal speed-up | with the measured costs |')
    print('|---|---|---|---|---|---|')
    for j in range(1, K):
        a = accept[j - 1]
        draft = j * loop + readout + sampling
        cost = ((args.g + 1) * draft + verify[j]) / per_token_fixed
        print(f"| {j} | {agree[j - 1]:.3f} | {a:.3f} | {tokens_per_pass(a, args.g):.2f} | "
              f"{predicted_speedup(a, j, args.g, K):.2f}x | {tokens_per_pass(a, args.g) / cost:.2f}x |")


if __name__ == '__main__':
    main()
