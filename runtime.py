"""
Device, precision and compile: decided once, here, for every script.

    python -c "from runtime import setup_device, resolve_dtype; d = setup_device('auto'); print(d, resolve_dtype('auto', d))"
"""

import os
import sys
from contextlib import nullcontext

import torch

from configurator import UserError


def setup_device(name='auto'):
    """'auto' -> 'cuda', then 'mps', then 'cpu'; a UserError for a device that is not there.
    Also sets the process-wide math modes: TF32 matmuls on CUDA; on the CPU, denormal floats
    flushed to zero (the default init's saturated softmax is full of them, and arithmetic on them
    made the 44M step several times slower, with the same losses: assets/speed/denormals.md)."""
    if name == 'auto':
        name = 'cuda' if torch.cuda.is_available() else 'mps' if torch.backends.mps.is_available() else 'cpu'
        if name == 'cpu' and torch.version.cuda:  # (a GPU job that silently trains the 44M model on its CPU)
            print(f"note: this torch is a CUDA {torch.version.cuda} build but sees no GPU, so device 'auto' is the "
                  f"CPU (device='cuda' makes that an error)", file=sys.stderr)  # (stderr is line-buffered)
    try:
        kind = torch.device(name).type
    except RuntimeError:
        raise UserError(f"unknown device {name!r}: use auto, cpu, cuda, cuda:N or mps")
    if (kind == 'cuda' and not torch.cuda.is_available()) or (kind == 'mps' and not torch.backends.mps.is_available()):
        raise UserError(f"device {name!r} is not available on this machine: use device='auto' or 'cpu'")
    if kind == 'cuda':
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    if kind == 'cpu':
        torch.set_flush_denormal(True)
    return name


def cpu_has_bf16():
    """Whether this CPU does bfloat16 arithmetic natively (AVX-512 BF16 or AMX), from Linux's
    /proc/cpuinfo; elsewhere False. Without it, bf16 on a CPU is emulated and no faster."""
    try:
        with open('/proc/cpuinfo') as f:
            flags = next((line for line in f if line.startswith('flags')), '').split()
    except OSError:
        return False
    return 'avx512_bf16' in flags or 'amx_bf16' in flags


def resolve_dtype(name, device, training=False):
    """'auto' -> bfloat16 on GPUs that support it, float16 on older CUDA GPUs; on a CPU,
    bfloat16 for training where the CPU has it natively, float32 otherwise and for evaluation
    (cheap on a CPU, and exact). On a CPU with AVX-512 BF16, bf16 trains faster than float32 with
    the same drift, radial fraction and loss over K (assets/speed/speed.md).
    On CUDA, bf16 only where the GPU has it natively: torch.cuda.is_bf16_supported() alone also
    counts emulated bf16 (V100, T4), which is slow; there float16 with a GradScaler is the path."""
    if name != 'auto':
        return name
    if device.startswith('cuda'):
        return 'bfloat16' if torch.cuda.is_bf16_supported(including_emulation=False) else 'float16'
    if device.startswith('cpu') and training and cpu_has_bf16():
        return 'bfloat16'
    return 'float32'


def autocast(device, dtype):
    """The context the forward passes run in: autocast to dtype, or nothing for float32."""
    if dtype == 'float32':
        return nullcontext()
    return torch.autocast(device_type=torch.device(device).type, dtype=getattr(torch, dtype))


def use_compile(setting, device):
    """torch.compile setting 'auto' (on for CUDA), 'on' or 'off' -> bool. Where it is on and the
    compiler cannot build, the scripts say so in one line (compile_failed)."""
    return setting == 'on' or (setting == 'auto' and device.startswith('cuda'))


def compile_errors():
    """What a torch.compile that cannot build raises at its first call: dynamo's wrapper of the
    backend's error, or, for some graphs (a no-grad one), inductor's own."""
    from torch._dynamo.exc import BackendCompilerFailed
    from torch._inductor.exc import InductorError
    return BackendCompilerFailed, InductorError


def compile_failed(e, what):
    """The one line for a torch.compile that cannot build `what` here (inductor needs a working C++
    compiler and Python's headers on a CPU, Triton on a GPU), from its error e (compile_errors)."""
    cause = next((line for line in str(e).splitlines() if line.strip()), type(e).__name__)
    return UserError(f"compile is on but torch.compile could not build {what} here ({cause[:200]}); it needs a "
                     "working C++ compiler and Python's headers (Triton on a GPU): run with --compile=off")


def sync(device):
    """Waits for the device, so that a timer reads finished work (a no-op on the CPU)."""
    if device.startswith('cuda'):
        torch.cuda.synchronize(device)
    elif device.startswith('mps'):
        torch.mps.synchronize()


def peak_flops(device, dtype):
    """Dense 16-bit peak of the GPU, for MFU; None where unknown or not a 16-bit run (then no
    MFU is reported). These are the vendors' spec-sheet numbers (dense, no sparsity). The
    PCIe and NVL boards have lower clocks and power than SXM, so they are matched first, by
    the name CUDA reports ('NVIDIA H100 PCIe', 'NVIDIA H100 NVL', 'NVIDIA H200 NVL'; SXM boards
    report e.g. 'NVIDIA H100 80GB HBM3' and 'NVIDIA H200')."""
    if not device.startswith('cuda') or dtype not in ('bfloat16', 'float16'):
        return None
    return peak_flops_of(torch.cuda.get_device_name(torch.device(device)))


GPU_PEAKS = (  # (substring of the device name, dense bf16/fp16 FLOP/s); the first match wins
    ('H100 PCIe', 756e12), ('H100 NVL', 835e12), ('H200 NVL', 835e12),
    ('H200', 989e12), ('H100', 989e12), ('A100', 312e12), ('L40S', 362e12),
    ('A10G', 70e12), ('4090', 165e12), ('3090', 71e12))


def peak_flops_of(name):
    """The dense 16-bit peak for a CUDA device name, or None where unknown."""
    return next((flops for key, flops in GPU_PEAKS if key.lower() in name.lower()), None)


# -----------------------------------------------------------------------------
# processes

def under_torchrun():
    return int(os.environ.get('RANK', -1)) != -1


def start_process(device, gradient_accumulation_steps):
    """This process's part in a training run: (ddp, rank, world_size, device, n_micro), n_micro its
    micro-steps per optimizer step. Under torchrun one process per GPU (NCCL), or per CPU
    process (gloo: how the tests run two ranks); on one device none of the DDP part runs."""
    device = setup_device(device)
    if not under_torchrun():
        return False, 0, 1, device, gradient_accumulation_steps
    rank, world_size = int(os.environ['RANK']), int(os.environ['WORLD_SIZE'])
    if gradient_accumulation_steps % world_size:
        raise UserError(f"gradient_accumulation_steps ({gradient_accumulation_steps}) must be a "
                        f"multiple of the number of GPUs ({world_size})")
    cuda = device.startswith('cuda')
    if cuda:
        device = f"cuda:{int(os.environ['LOCAL_RANK'])}"
        torch.cuda.set_device(device)
    # device_id binds the NCCL communicator to this rank's GPU up front (no lazy init, no guessing)
    torch.distributed.init_process_group(backend='nccl' if cuda else 'gloo',
                                         device_id=torch.device(device) if cuda else None)
    return True, rank, world_size, device, gradient_accumulation_steps // world_size


def exit_process(status):
    """The end of a script's process with this status. Under torchrun a rank leaves without Python's
    teardown: PyTorch keeps a DDP model's process group alive past destroy_process_group, and when
    one of gloo's worker threads frees its last tensor after the interpreter has begun to shut
    down, the rank aborts ("terminate called without an active exception", pytorch/pytorch#179291;
    9 of 260 two-rank runs here). Freeing the DDP model earlier can hang instead: its process group's
    destructor, holding the GIL, joins a gloo thread that waits for the GIL to free a tensor (4 of 11
    two-rank runs on a busy 2-core machine). So train.main ends a rank's process here before its
    model is freed. Every file is written and closed by then."""
    if under_torchrun():
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    sys.exit(status)
