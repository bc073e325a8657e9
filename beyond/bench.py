"""
Times the training step exactly as train.py runs it (train.train_step: forward, backward,
clip, AdamW), for per-loop and terminal CE side by side, on random tokens: tokens/s,
achieved FLOP/s (MFU on a GPU), peak memory, and this machine's measured matmul peak.

    python -m beyond.bench config/norm_perloop.py config/cpu.py                  # the CPU demo's model
    python -m beyond.bench config/norm_perloop.py --device=cpu --batch_size=2    # the 44M shape on a CPU
    python -m beyond.bench config/norm_perloop.py config/129m.py                 # the 129M shape on a GPU
    python -m beyond.bench config/norm_perloop.py config/cpu.py --dtype=float32 --steps=20
    python -m beyond.bench config/norm_perloop.py --device=cpu --batch_size=2 --anchor=../readout-blind-spot
    python -m beyond.bench --help                                                # its settings and train.py's

Takes train.py's settings (config files, --key=value; --loss_path=fused|plain picks the
readout loss) and four of its own, below. No data is read. ms/step and tokens/s are the
mean over the timed steps (their total time divided by their number), not the best step.

--anchor=PATH: your own clone of the paper's released code (github.com/Rituraj003/readout-blind-spot).
Times its training step side by side with ours, in one process, one step of each in turn
(fp32, eager, the same shapes, dropout, AdamW and clipping as train.py; its loss is the
mean over loops of each loop's F.cross_entropy on materialised logits, plus the norm
penalty as its training script adds it): ours in float32 and eager, ours as configured
(dtype, compile) where that differs, and theirs. Reports each one's median step.
Nothing of the clone is part of this project or its tests.

--profile=True: after the timed steps, one more per-loop step under torch.profiler; prints its ops by
self time (ms, share of the step, calls) and the fused loss's total, the table that says where a
step's time goes beyond its matmuls (casts are aten::copy_, dropout's masks aten::bernoulli_).

--casts=True: one more per-loop step under a dispatch mode that records every cast below autocast:
each tensor cast (a weight or an activation, its shape, in forward or backward), how often, and the
bytes it moves.

--random_depth=True: random-depth training's step (train.py's draw of K per iteration, its bptt)
beside the fixed-K step of the same model, one step of each in turn, in one process: mean ms per
step and tokens/s of each over the same iterations, and the mean K drawn (docs/depth.md).
"""

import ctypes
import gc
import os
import sys
import time
from contextlib import nullcontext
from types import SimpleNamespace

import torch
from torch.nn import functional as F
from torch.utils._python_dispatch import TorchDispatchMode

import train
from configurator import UserError, one_line_errors
from data import load_meta
from depth import draw_depth
from runtime import autocast, peak_flops, resolve_dtype, setup_device, sync, use_compile

# -----------------------------------------------------------------------------
# bench.py's own settings; every setting of train.py is taken too
steps = 10                    # timed optimizer steps, at least 1
warmup = 3                    # untimed steps first (compilation happens there)
vocab_size = 0                # 0: the dataset's (meta.json) if prepared, else 256 for a '-bytes' dataset, GPT-2's 50,257 otherwise
peak_size = 0                 # the square matmul timed for the measured peak (0: 2048 and 4096 on a CPU, 8192 on a GPU)
anchor = ''                   # the path of a clone of the paper's released code: time its step beside ours ('' = off)
profile = False               # one more per-loop step under torch.profiler: its ops by self time, with their calls
casts = False                 # one more per-loop step's casts: each tensor cast, forward or backward, how often, bytes
# -----------------------------------------------------------------------------
BENCH = dict(steps=steps, warmup=warmup, vocab_size=vocab_size, peak_size=peak_size, anchor=anchor, profile=profile,
             casts=casts)


def setup_bench(argv):
    """train.py's settings and bench.py's own, checked: (settings namespace, device, dtype, ctx)."""
    config = train.setup(argv, settings={**train.SETTINGS, **BENCH}, scripts=(__file__, train.__file__))
    for key, lowest in (('steps', 1), ('warmup', 0), ('vocab_size', 0), ('peak_size', 0)):
        if config[key] < lowest:
            raise UserError(f"setting '{key}' must be at least {lowest}; got {config[key]!r}")
    c = SimpleNamespace(**config)
    device = setup_device(c.device)
    if not c.vocab_size:
        try:
            c.vocab_size = load_meta(os.path.join(c.data_dir, c.dataset))['vocab_size']
        except FileNotFoundError:
            c.vocab_size = 256 if c.dataset.endswith('-bytes') else 50257
    dtype = resolve_dtype(c.dtype, device, training=True)
    return c, device, dtype, autocast(device, dtype)


def model_class(c):
    return train.model_class_of(vars(c))  # (the paper's, or the class a config names)


def model_config(c, **changes):
    cls = model_class(c)
    return cls.config_class(**{**{k: getattr(c, k) for k in [*train.model_fields(cls), 'vocab_size']}, **changes})


def new_model(c, device, **changes):
    """The model train.py would build (seeded as it is), with its loss path, and its optimizer."""
    torch.manual_seed(c.seed)
    model = model_class(c)(model_config(c, **changes)).to(device)
    model.loss_path = c.loss_path
    optimizer = train.make_optimizer(model, learning_rate=c.learning_rate, betas=(c.beta1, c.beta2),
                                     weight_decay=c.weight_decay)
    return model, optimizer


def random_batches(c, device):
    shape = (c.gradient_accumulation_steps, c.batch_size, c.block_size)
    return (torch.randint(0, c.vocab_size, shape, device=device) for _ in range(2))


# -----------------------------------------------------------------------------
# memory: CUDA's allocator peak; on Linux CPUs the process's resident high-water mark

def reset_peak_memory(device):
    if device.startswith('cuda'):
        torch.cuda.reset_peak_memory_stats(device)
        return
    gc.collect()
    try:  # hand freed memory back to the OS, then restart the kernel's high-water mark at today's size
        ctypes.CDLL('libc.so.6').malloc_trim(0)
        with open('/proc/self/clear_refs', 'w') as f:
            f.write('5')
    except OSError:
        pass


def peak_memory_gib(device):
    if device.startswith('cuda'):
        return torch.cuda.max_memory_allocated(device) / 2**30
    try:
        with open('/proc/self/status') as f:
            status = dict(line.split(':', 1) for line in f)
        return int(status['VmHWM'].split()[0]) / 2**20  # kB -> GiB
    except (OSError, KeyError):
        return None  # not Linux: no peak to read


# -----------------------------------------------------------------------------

def matmul_peak(dtype, device, seconds=1.0, size=0, most=1000):
    """The best FLOP/s of square matmuls in the run's dtype on this device: the ceiling that
    the achieved FLOP/s is compared with (on a GPU, MFU uses the spec sheet instead). size: the
    one matrix size to time (0: the default sizes). Each size is timed for seconds/2 or `most`
    products, whichever comes first (a 2048 product takes tens of ms on a CPU, an 8192 one, 1.1
    TFLOP, over 1 ms on an H100: both run for the time; a small --peak_size stops at the count)."""
    dt = getattr(torch, dtype)
    best = 0.0
    for n in ((size,) if size else (2048, 4096) if device == 'cpu' else (8192,)):
        a, b = torch.randn(n, n, device=device, dtype=dt), torch.randn(n, n, device=device, dtype=dt)
        a @ b
        sync(device)
        reps, t0 = 0, time.perf_counter()
        while reps == 0 or reps < most and time.perf_counter() - t0 < seconds / 2:  # at least one timed product
            a @ b
            reps += 1
            sync(device)
        best = max(best, 2 * n**3 * reps / (time.perf_counter() - t0))
    return best


def bench(loss, c, device, dtype, ctx, profile=False, casts=False):
    """Times train_step for one loss kind; returns a dict of the measurements (with profile, one
    more step under torch.profiler: its key averages, 'profile'; with casts, one more step's census
    of casts, 'casts')."""
    reset_peak_memory(device)
    model, optimizer = new_model(c, device, loss=loss)
    scaler = torch.amp.GradScaler(torch.device(device).type, enabled=(dtype == 'float16'))
    step_model = train.wrap_for_training(model, False, use_compile(c.compile, device), device)
    xs, ys = random_batches(c, device)
    t_start = t0 = time.perf_counter()
    for it in range(c.warmup + c.steps):
        if it == c.warmup:
            sync(device)
            t0 = time.perf_counter()
        loss_value, _, _ = train.train_step(step_model, optimizer, scaler, xs, ys, ctx=ctx, grad_clip=c.grad_clip)
    loss_value.item()  # waits for the last step
    seconds = time.perf_counter() - t0
    tokens = c.steps * xs.numel()
    flops = model.flops_per_token() * tokens / seconds
    out = dict(loss=loss, tok_s=tokens / seconds, ms=1000 * seconds / c.steps, flops=flops,
               warmup_s=t0 - t_start, mem=peak_memory_gib(device))
    if profile:
        activities = [torch.profiler.ProfilerActivity.CPU] + \
            ([torch.profiler.ProfilerActivity.CUDA] if device.startswith('cuda') else [])
        with torch.profiler.profile(activities=activities) as prof:
            train.train_step(step_model, optimizer, scaler, xs, ys, ctx=ctx, grad_clip=c.grad_clip)[0].item()
        out['profile'] = prof.key_averages()
    if casts:
        out['casts'] = cast_census(lambda: train.train_step(step_model, optimizer, scaler, xs, ys, ctx=ctx,
                                                            grad_clip=c.grad_clip)[0].item(), model)
    return out


class _Casts(TorchDispatchMode):
    """Records every dtype-changing copy (aten._to_copy, or copy_ between dtypes) below autocast."""

    def __init__(self, weights):
        super().__init__()
        self.weights, self.seen = weights, {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        src = dst = None
        if func is torch.ops.aten._to_copy.default and kwargs.get('dtype') not in (None, args[0].dtype):
            src, dst = args[0], kwargs['dtype']
        elif func is torch.ops.aten.copy_.default and args[0].dtype != args[1].dtype:
            src, dst = args[1], args[0].dtype
        if src is not None:
            phase = 'backward' if torch._C._current_graph_task_id() != -1 else 'forward'
            what = 'weight' if src.untyped_storage().data_ptr() in self.weights else 'activation'
            key = (phase, what, tuple(src.shape), f"{str(src.dtype)[6:]} -> {str(dst)[6:]}")
            n, b = self.seen.get(key, (0, 0))
            self.seen[key] = (n + 1, b + src.numel() * (src.element_size() + torch.empty((), dtype=dst).element_size()))
        return func(*args, **kwargs)


def cast_census(step, model):
    """Runs step() once, recording each cast autocast and the model make: {(phase, 'weight' or
    'activation', shape, 'from -> to'): (count, bytes read and written)}."""
    mode = _Casts({p.untyped_storage().data_ptr() for p in model.parameters()})
    with mode:
        step()
    return mode.seen


def print_casts(seen, top=12):
    """The census as a table: the casts by bytes moved, and their totals per phase and kind."""
    total = sum(b for _, b in seen.values())
    print(f"\ncasts in one per-loop step: {sum(n for n, _ in seen.values()):,} casts, "
          f"{total / 2**20:,.0f} MiB read and written")
    print('| phase | tensor | shape | dtypes | casts | MiB | share |')
    print('|---|---|---|---|---|---|---|')
    for (phase, what, shape, dtypes), (n, b) in sorted(seen.items(), key=lambda kv: -kv[1][1])[:top]:
        print(f"| {phase} | {what} | {'x'.join(map(str, shape)) or 'scalar'} | {dtypes} | {n:,} | "
              f"{b / 2**20:,.1f} | {100 * b / total:.0f}% |")
    for phase in ('forward', 'backward'):
        for what in ('weight', 'activation'):
            n = sum(v[0] for k, v in seen.items() if k[:2] == (phase, what))
            b = sum(v[1] for k, v in seen.items() if k[:2] == (phase, what))
            print(f"| {phase} | {what}s, in total | | | {n:,} | {b / 2**20:,.1f} | {100 * b / max(total, 1):.0f}% |")


def print_profile(events, device, top=15):
    """The profiled step's ops by self time (on a GPU, device time), with the fused loss's total."""
    cuda = device.startswith('cuda')
    self_us = (lambda e: e.self_device_time_total) if cuda else (lambda e: e.self_cpu_time_total)
    ops = sorted((e for e in events if self_us(e) > 0), key=self_us, reverse=True)
    total = sum(self_us(e) for e in ops)
    print(f"\nprofile of one per-loop step: {total / 1e3:,.0f} ms of {'device' if cuda else 'CPU'} self time in all")
    print('| op | self ms | share | calls |')
    print('|---|---|---|---|')
    for e in ops[:top]:
        print(f"| {e.key} | {self_us(e) / 1e3:,.1f} | {100 * self_us(e) / total:.0f}% | {e.count:,} |")
    for e in events:
        if e.key == 'LinearCrossEntropy':  # the fused readout loss's forward, in total (it makes the gradients too)
            t = e.device_time_total if cuda else e.cpu_time_total
            print(f"| LinearCrossEntropy, in total | {t / 1e3:,.1f} | {100 * t / total:.0f}% | {e.count:,} |")


def main(argv):
    c, device, dtype, ctx = setup_bench(argv)
    cfg = model_config(c)
    compiled = use_compile(c.compile, device)
    print(f"{model_class(c)(cfg).get_num_params() / 1e6:.2f}M parameters (d={cfg.n_embd}, {cfg.n_layer} layers, "
          f"K={cfg.n_loops}, vocab {cfg.vocab_size}), batch {c.gradient_accumulation_steps}x{c.batch_size}x"
          f"{c.block_size}, {device}, {dtype}, {'compiled' if compiled else 'eager'}, dropout {cfg.dropout}, "
          f"loss path {c.loss_path}; {c.steps} timed steps after {c.warmup} warm-up", flush=True)
    if c.anchor:
        return side_by_side(c, device, dtype, ctx)
    if c.random_depth:
        return random_depth_side_by_side(c, device, ctx)
    rows = [bench(loss, c, device, dtype, ctx, profile=c.profile and first, casts=c.casts and first)
            for first, loss in ((True, 'perloop'), (False, 'terminal'))]
    peak = peak_flops(device, dtype)
    measured = matmul_peak(dtype, device, size=c.peak_size)
    print(f"\nmatmul peak measured here ({dtype}): {measured / 1e12:.3f} TFLOP/s"
          + (f"; spec-sheet peak for MFU: {peak / 1e12:.0f} TFLOP/s" if peak else ''))
    print('| loss | tokens/s | ms/step | achieved TFLOP/s | of measured matmul peak |'
          + (' MFU |' if peak else '') + ' peak memory | warm-up |')
    print('|---|---|---|---|---|' + ('---|' if peak else '') + '---|---|')
    for r in rows:
        mem = f"{r['mem']:.2f} GiB" if r['mem'] is not None else 'n/a'
        print(f"| {r['loss']} | {r['tok_s']:,.0f} | {r['ms']:.1f} | {r['flops'] / 1e12:.3f} | "
              f"{100 * r['flops'] / measured:.0f}% |" + (f" {100 * r['flops'] / peak:.1f}% |" if peak else '')
              + f" {mem} | {r['warmup_s']:.1f} s |")
    if rows[0]['mem'] and rows[1]['mem']:
        print(f"per-loop / terminal peak memory: {rows[0]['mem'] / rows[1]['mem']:.2f}x "
              f"({'CUDA allocator peak' if device.startswith('cuda') else 'resident set high-water mark'})")
    if c.profile:
        print_profile(rows[0]['profile'], device)
    if c.casts:
        print_casts(rows[0]['casts'])


def random_depth_side_by_side(c, device, ctx):
    """--random_depth: the fixed-K step and the random-depth step, one of each in turn (depth.py's
    draw for iteration it, truncated as its bptt), each compiled as train.py would (wrap_for_training)."""
    xs, ys = random_batches(c, device)
    compiled = use_compile(c.compile, device)
    steps = {}
    for name, random in (('fixed K', False), ('random depth', True)):
        model, opt = new_model(c, device)
        step_model = train.wrap_for_training(model, False, compiled, device, random)
        scaler = torch.amp.GradScaler(torch.device(device).type, enabled=False)
        steps[name] = (step_model, opt, scaler, random)
    times, drawn = {name: 0.0 for name in steps}, []
    for it in range(c.warmup + c.steps):
        K = draw_depth(c.seed, it, mean=c.n_loops, cap=c.max_loops, sigma=c.depth_sigma)
        if it >= c.warmup:
            drawn.append(K)
        for name, (step_model, opt, scaler, random) in steps.items():
            sync(device)
            t0 = time.perf_counter()
            train.train_step(step_model, opt, scaler, xs, ys, ctx=ctx, grad_clip=c.grad_clip,
                             n_loops=K if random else None, bptt=c.bptt if random else 0)[0].item()
            if it >= c.warmup:
                times[name] += time.perf_counter() - t0
    tokens = c.steps * xs.numel()
    print(f"random depth: K drawn with mean {c.n_loops}, sigma {c.depth_sigma}, at most {c.max_loops}, bptt {c.bptt}; "
          f"the {c.steps} timed steps drew a mean K of {sum(drawn) / len(drawn):.2f} (min {min(drawn)}, max {max(drawn)})")
    print('| step | ms/step | tokens/s | time per token vs fixed K |')
    print('|---|---|---|---|')
    for name, seconds in times.items():
        print(f"| {name} | {1000 * seconds / c.steps:.1f} | {tokens / seconds:,.0f} | {seconds / times['fixed K']:.3f}x |")


# -----------------------------------------------------------------------------
# --anchor: the released code's step beside ours

def released_model(path, cfg):
    """The released AutoregressiveLoopLM with our config's shape, from a clone at `path`."""
    models_dir = os.path.join(os.path.abspath(path), 'models', 'ar_looplm.py')
    if not os.path.isfile(models_dir):
        raise UserError(f"--anchor={path}: no models/ar_looplm.py there (give a clone of "
                               "github.com/Rituraj003/readout-blind-spot)")
    sys.path.insert(0, os.path.abspath(path))
    try:
        from models.ar_looplm import build_ar_looplm_from_config
    finally:
        sys.path.pop(0)
    model = {'d_model': cfg.n_embd, 'num_heads': cfg.n_head, 'num_layers': cfg.n_layer, 'ff_multiplier': 4,
             'num_loops': cfg.n_loops, 'dropout': cfg.dropout, 'inter_loop_norm': cfg.interloop_norm,
             'use_decode_norm': cfg.readout != 'raw', 'decode_norm_final_only': cfg.readout == 'final_norm'}
    return build_ar_looplm_from_config({'model': model, 'data': {'seq_len': cfg.block_size}},
                                       vocab_size=cfg.vocab_size)


def side_by_side(c, device, dtype, ctx):
    cfg = model_config(c)
    xs, ys = random_batches(c, device)
    compiled = use_compile(c.compile, device)

    def ours(step_ctx, compile_it, fp16):
        model, opt = new_model(c, device)
        step_model = train.wrap_for_training(model, False, compile_it, device)
        scaler = torch.amp.GradScaler(torch.device(device).type, enabled=fp16)

        def step(it):
            train.seed_step(c.seed, it, 0)
            return train.train_step(step_model, opt, scaler, xs, ys, ctx=step_ctx, grad_clip=c.grad_clip)[0]
        return step

    def theirs():
        torch.manual_seed(c.seed)
        model = released_model(c.anchor, cfg).to(device).train()
        opt = train.make_optimizer(model, learning_rate=c.learning_rate, betas=(c.beta1, c.beta2),
                                   weight_decay=c.weight_decay)
        lam = cfg.norm_penalty

        def step(it):
            train.seed_step(c.seed, it, 0)
            total = 0.0
            for x, y in zip(xs, ys):
                out = model(x)
                logits = out['all_logits'] if cfg.loss == 'perloop' else out['all_logits'][-1:]
                loss = sum(F.cross_entropy(l.reshape(-1, cfg.vocab_size), y.reshape(-1)) for l in logits) / len(logits)
                if lam > 0:
                    loss = loss + lam * torch.stack(out['all_hidden_norms_sq']).mean()
                loss = loss / len(xs)
                loss.backward()
                total = total + loss.detach()
            if c.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), c.grad_clip)
            opt.step()
            opt.zero_grad(set_to_none=True)
            return total
        return step

    runs = {'ours, float32, eager': ours(nullcontext(), False, False)}
    if dtype != 'float32' or compiled:
        runs[f"ours as configured ({dtype}, {'compiled' if compiled else 'eager'})"] = ours(ctx, compiled,
                                                                                         dtype == 'float16')
    runs['released code, float32, eager'] = theirs()
    print(f"side by side with {c.anchor}: {c.steps} timed steps of each in turn after {c.warmup}; "
          f"loss {cfg.loss}, norm penalty {cfg.norm_penalty}", flush=True)
    times = {name: [] for name in runs}
    for it in range(c.warmup + c.steps):
        for name, step in runs.items():
            sync(device)
            t0 = time.perf_counter()
            step(it).item()
            if it >= c.warmup:
                times[name].append(time.perf_counter() - t0)
    ref = sorted(times['released code, float32, eager'])[c.steps // 2]
    tokens = xs.numel()
    print('| step | median ms/step | tokens/s | speed vs the released code |')
    print('|---|---|---|---|')
    for name, ts in times.items():
        med = sorted(ts)[c.steps // 2]
        print(f"| {name} | {1000 * med:.1f} | {tokens / med:,.0f} | {ref / med:.2f}x |")


if __name__ == '__main__':
    with one_line_errors('bench.py'):
        main(sys.argv[1:])
