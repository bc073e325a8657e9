"""
Times the training step exactly as train.py runs it (train.train_step: forward, backward,
clip, AdamW), for per-loop and terminal CE side by side, on random tokens: tokens/s,
achieved FLOP/s (MFU on a GPU), peak memory, and this machine's measured matmul peak.

    python bench.py config/norm_perloop.py config/cpu.py                  # the CPU demo's model
    python bench.py config/norm_perloop.py --device=cpu --batch_size=2    # the 44M shape on a CPU
    python bench.py config/norm_perloop.py config/129m.py                 # the 129M shape on a GPU
    python bench.py config/norm_perloop.py config/cpu.py --dtype=float32 --steps=20

Takes train.py's settings (config files, --key=value) and three of its own: --steps (timed
optimizer steps, default 10), --warmup (untimed steps first, default 3; compilation happens
there) and --vocab_size (default: from the dataset's meta.json if it is prepared, else 256
for a '-bytes' dataset and GPT-2's 50,257 otherwise). No data is read.
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

BENCH = {'steps': 10, 'warmup': 3, 'vocab_size': 0}  # bench.py's own settings


def split_argv(argv):
    """bench.py's own --key=value settings, and the rest for train.py."""
    own, rest = dict(BENCH), []
    for arg in argv:
        key, eq, value = arg[2:].partition('=')
        if arg.startswith('--') and key in BENCH:
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
    optimizer = torch.optim.AdamW(model.parameters(), lr=train.learning_rate, betas=(train.beta1, train.beta2),
                                  weight_decay=train.weight_decay, fused=(train.device_type == 'cuda'))
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
          f"{train.device}, {train.dtype}, {'compiled' if compiled else 'eager'}, dropout {cfg.dropout}; "
          f"{own['steps']} timed steps after {own['warmup']} warm-up", flush=True)
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


if __name__ == '__main__':
    try:
        main(sys.argv[1:])
    except train.TrainError as e:
        sys.exit(f"bench.py: error: {e}")
