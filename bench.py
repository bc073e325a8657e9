"""
Times the training step exactly as train.py runs it (train.train_step: forward, backward,
clip, AdamW), for per-loop and terminal CE side by side, on random tokens: tokens/s,
achieved FLOP/s (MFU on a GPU), peak memory, and this machine's measured matmul peak.

    python bench.py config/norm_perloop.py config/cpu.py                  # the CPU demo's model
    python bench.py config/norm_perloop.py --device=cpu --batch_size=2    # the 44M shape on a CPU
    python bench.py config/norm_perloop.py config/129m.py                 # the 129M shape on a GPU
    python bench.py config/norm_perloop.py config/cpu.py --dtype=float32 --steps=20
    python bench.py config/norm_perloop.py --device=cpu --batch_size=2 --anchor=../readout-blind-spot

Takes train.py's settings (config files, --key=value; --loss_path=fused|plain picks the
readout loss) and four of its own: --steps (timed optimizer steps, default 10), --warmup
(untimed steps first, default 3; compilation happens there), --vocab_size (default: from the
dataset's meta.json if it is prepared, else 256 for a '-bytes' dataset and GPT-2's 50,257
otherwise) and --anchor. No data is read. ms/step and tokens/s are the mean over the timed
steps (their total time divided by their number), not the best step.

--anchor=PATH: your own clone of the paper's released code (github.com/Rituraj003/readout-blind-spot).
Times its training step side by side with ours, in one process, one step of each in turn
(fp32, eager, the same shapes, dropout, AdamW and clipping as train.py; its loss is the
mean over loops of each loop's F.cross_entropy on materialised logits, plus the norm
penalty as its training script adds it): ours in float32 and eager, ours as configured
(dtype, compile) where that differs, and theirs. Reports each one's median step.
Nothing of the clone is part of this project or its tests.
"""

import ctypes
import gc
import os
import sys
import time

import torch

import train
from data import load_meta
from model import LoopedGPT, LoopedGPTConfig
from runtime import peak_flops, sync, use_compile

BENCH = {'steps': 10, 'warmup': 3, 'vocab_size': 0, 'anchor': ''}  # bench.py's own settings


def split_argv(argv):
    """bench.py's own --key=value settings, and the rest for train.py."""
    own, rest = dict(BENCH), []
    for arg in argv:
        key, eq, value = arg[2:].partition('=')
        if arg.startswith('--') and key == 'anchor':
            if not (eq and value):
                raise train.TrainError(f"--anchor takes the path of a clone of the released code; got {arg!r}")
            own[key] = value
        elif arg.startswith('--') and key in BENCH:
            if not (eq and value.isdigit() and (int(value) >= 1 or key != 'steps')):
                raise train.TrainError(f"--{key} takes a whole number{' >= 1' if key == 'steps' else ''}; got {arg!r}")
            own[key] = int(value)
        else:
            rest.append(arg)
    return own, rest


def vocab_size():
    try:
        return load_meta(os.path.join(train.data_dir, train.dataset))['vocab_size']
    except FileNotFoundError:
        return 256 if train.dataset.endswith('-bytes') else 50257


# -----------------------------------------------------------------------------
# memory: CUDA's allocator peak; on Linux CPUs the process's resident high-water mark

def reset_peak_memory():
    if train.device_type == 'cuda':
        torch.cuda.reset_peak_memory_stats(train.device)
        return
    gc.collect()
    try:  # hand freed memory back to the OS, then restart the kernel's high-water mark at today's size
        ctypes.CDLL('libc.so.6').malloc_trim(0)
        with open('/proc/self/clear_refs', 'w') as f:
            f.write('5')
    except OSError:
        pass


def peak_memory_gib():
    if train.device_type == 'cuda':
        return torch.cuda.max_memory_allocated(train.device) / 2**30
    try:
        with open('/proc/self/status') as f:
            status = dict(line.split(':', 1) for line in f)
        return int(status['VmHWM'].split()[0]) / 2**20  # kB -> GiB
    except (OSError, KeyError):
        return None  # not Linux: no peak to read


# -----------------------------------------------------------------------------

def matmul_peak(dtype, seconds=1.0):
    """The best FLOP/s of square matmuls in the run's dtype on this device: the ceiling that
    the achieved FLOP/s is compared with (on a GPU, MFU uses the spec sheet instead)."""
    dt = getattr(torch, dtype)
    best = 0.0
    for n in ((2048, 4096) if train.device_type == 'cpu' else (8192,)):
        a, b = torch.randn(n, n, device=train.device, dtype=dt), torch.randn(n, n, device=train.device, dtype=dt)
        a @ b
        sync(train.device)
        reps, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds / 2:
            a @ b
            reps += 1
            sync(train.device)
        best = max(best, 2 * n**3 * reps / (time.perf_counter() - t0))
    return best


def bench(loss, own, config):
    """Times train_step for one loss kind; returns a dict of the measurements."""
    args = {k: config[k] for k in train.MODEL_ARGS if k != 'vocab_size'}
    torch.manual_seed(train.seed)
    reset_peak_memory()
    model = LoopedGPT(LoopedGPTConfig(**dict(args, vocab_size=own['vocab_size'], loss=loss))).to(train.device)
    optimizer = train.make_optimizer(model)
    scaler = torch.amp.GradScaler(train.device_type, enabled=(train.dtype == 'float16'))
    step_model = torch.compile(model) if use_compile(train.compile, train.device) else model
    n_micro = train.gradient_accumulation_steps
    shape = (n_micro, train.batch_size, train.block_size)
    xs = torch.randint(0, own['vocab_size'], shape, device=train.device)
    ys = torch.randint(0, own['vocab_size'], shape, device=train.device)
    t_start = time.perf_counter()
    for it in range(own['warmup'] + own['steps']):
        if it == own['warmup']:
            sync(train.device)
            t0 = time.perf_counter()
        loss_value, _, _ = train.train_step(step_model, optimizer, scaler, xs, ys, it, rank=0)
    loss_value.item()  # waits for the last step
    seconds = time.perf_counter() - t0
    tokens = own['steps'] * n_micro * train.batch_size * train.block_size
    flops = model.flops_per_token() * tokens / seconds
    return dict(loss=loss, tok_s=tokens / seconds, ms=1000 * seconds / own['steps'], flops=flops,
                warmup_s=t0 - t_start, mem=peak_memory_gib())


def main(argv):
    own, rest = split_argv(argv)
    config = train.setup(rest)
    own['vocab_size'] = own['vocab_size'] or vocab_size()
    cfg = LoopedGPTConfig(**dict({k: config[k] for k in train.MODEL_ARGS if k != 'vocab_size'},
                                 vocab_size=own['vocab_size']))
    n_params = LoopedGPT(cfg).get_num_params() / 1e6
    compiled = use_compile(train.compile, train.device)
    print(f"{n_params:.2f}M parameters (d={cfg.n_embd}, {cfg.n_layer} layers, K={cfg.n_loops}, vocab "
          f"{cfg.vocab_size}), batch {train.gradient_accumulation_steps}x{train.batch_size}x{train.block_size}, "
          f"{train.device}, {train.dtype}, {'compiled' if compiled else 'eager'}, dropout {cfg.dropout}, "
          f"loss path {train.loss_path}; "
          f"{own['steps']} timed steps after {own['warmup']} warm-up", flush=True)
    if own['anchor']:
        return side_by_side(own, config)
    rows = [bench(loss, own, config) for loss in ('perloop', 'terminal')]
    peak = peak_flops(train.device, train.dtype)
    measured = matmul_peak('float32' if train.dtype == 'float32' else train.dtype)
    print(f"\nmatmul peak measured here ({train.dtype}): {measured / 1e12:.3f} TFLOP/s"
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
              f"({'CUDA allocator peak' if train.device_type == 'cuda' else 'resident set high-water mark'})")


# -----------------------------------------------------------------------------
# --anchor: the released code's step beside ours

def released_model(path, cfg):
    """The released AutoregressiveLoopLM with our config's shape, from a clone at `path`."""
    models_dir = os.path.join(os.path.abspath(path), 'models', 'ar_looplm.py')
    if not os.path.isfile(models_dir):
        raise train.TrainError(f"--anchor={path}: no models/ar_looplm.py there (give a clone of "
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


def side_by_side(own, config):
    from contextlib import nullcontext
    from torch.nn import functional as F
    cfg = LoopedGPTConfig(**dict({k: config[k] for k in train.MODEL_ARGS if k != 'vocab_size'},
                                 vocab_size=own['vocab_size']))
    V, K = cfg.vocab_size, cfg.n_loops
    shape = (train.gradient_accumulation_steps, train.batch_size, train.block_size)
    xs, ys = (torch.randint(0, V, shape, device=train.device) for _ in range(2))
    shipped_ctx = train.ctx
    compiled = use_compile(train.compile, train.device)
    scaler = torch.amp.GradScaler(train.device_type, enabled=False)

    def ours(ctx, compile_it):
        torch.manual_seed(train.seed)
        model = LoopedGPT(cfg).to(train.device)
        opt = train.make_optimizer(model)
        step_model = torch.compile(model) if compile_it else model
        scale = torch.amp.GradScaler(train.device_type, enabled=(ctx is shipped_ctx and train.dtype == 'float16'))

        def step(it):
            train.ctx = ctx
            return train.train_step(step_model, opt, scale, xs, ys, it, rank=0)[0]
        return step

    def theirs():
        torch.manual_seed(train.seed)
        model = released_model(own['anchor'], cfg).to(train.device).train()
        opt = train.make_optimizer(model)
        lam = cfg.norm_penalty

        def step(it):
            train.seed_step(it, 0)
            total = 0.0
            for x, y in zip(xs, ys):
                out = model(x)
                logits = out['all_logits'] if cfg.loss == 'perloop' else out['all_logits'][-1:]
                loss = sum(F.cross_entropy(l.reshape(-1, V), y.reshape(-1)) for l in logits) / len(logits)
                if lam > 0:
                    loss = loss + lam * torch.stack(out['all_hidden_norms_sq']).mean()
                loss = loss / len(xs)
                loss.backward()
                total = total + loss.detach()
            if train.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), train.grad_clip)
            opt.step()
            opt.zero_grad(set_to_none=True)
            return total
        return step

    runs = {'ours, float32, eager': ours(nullcontext(), False)}
    if train.dtype != 'float32' or compiled:
        runs[f"ours as configured ({train.dtype}, {'compiled' if compiled else 'eager'})"] = ours(shipped_ctx, compiled)
    runs['released code, float32, eager'] = theirs()
    print(f"side by side with {own['anchor']}: {own['steps']} timed steps of each in turn after {own['warmup']}; "
          f"loss {cfg.loss}, norm penalty {cfg.norm_penalty}", flush=True)
    times = {name: [] for name in runs}
    for it in range(own['warmup'] + own['steps']):
        for name, step in runs.items():
            sync(train.device)
            t0 = time.perf_counter()
            step(it).item()
            if it >= own['warmup']:
                times[name].append(time.perf_counter() - t0)
    train.ctx = shipped_ctx
    ref = sorted(times['released code, float32, eager'])[own['steps'] // 2]
    tokens = shape[0] * shape[1] * shape[2]
    print('| step | median ms/step | tokens/s | speed vs the released code |')
    print('|---|---|---|---|')
    for name, ts in times.items():
        med = sorted(ts)[own['steps'] // 2]
        print(f"| {name} | {1000 * med:.1f} | {tokens / med:,.0f} | {ref / med:.2f}x |")


if __name__ == '__main__':
    try:
        main(sys.argv[1:])
    except train.TrainError as e:
        sys.exit(f"bench.py: error: {e}")
