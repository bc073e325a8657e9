"""
Device, precision and compile: decided once, here, for every script.

    python -c "from runtime import setup_device, resolve_dtype; d = setup_device('auto'); print(d, resolve_dtype('auto', d))"
"""

from contextlib import nullcontext

import torch


def setup_device(name='auto'):
    """'auto' -> 'cuda', then 'mps', then 'cpu'; raises ValueError for a device that is not there.
    Also sets the process-wide math modes: TF32 matmuls on CUDA; on the CPU, denormal floats
    flushed to zero (the default init's saturated softmax is full of them: the 44M shape ran
    at 99 s per iteration without this and 21 s with it, with the same losses)."""
    if name == 'auto':
        name = 'cuda' if torch.cuda.is_available() else 'mps' if torch.backends.mps.is_available() else 'cpu'
    try:
        kind = torch.device(name).type
    except RuntimeError:
        raise ValueError(f"unknown device {name!r}: use auto, cpu, cuda, cuda:N or mps")
    if (kind == 'cuda' and not torch.cuda.is_available()) or (kind == 'mps' and not torch.backends.mps.is_available()):
        raise ValueError(f"device {name!r} is not available on this machine: use device='auto' or 'cpu'")
    if kind == 'cuda':
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    if kind == 'cpu':
        torch.set_flush_denormal(True)
    return name


def resolve_dtype(name, device):
    """'auto' -> bfloat16 on GPUs that support it, float16 on older CUDA GPUs, float32 elsewhere."""
    if name != 'auto':
        return name
    if device.startswith('cuda'):
        return 'bfloat16' if torch.cuda.is_bf16_supported() else 'float16'
    return 'float32'


def autocast(device, dtype):
    """The context the forward passes run in: autocast to dtype, or nothing for float32."""
    if dtype == 'float32':
        return nullcontext()
    return torch.autocast(device_type=torch.device(device).type, dtype=getattr(torch, dtype))


def use_compile(setting, device):
    """torch.compile setting 'auto' (on for CUDA), 'on' or 'off' -> bool."""
    return setting == 'on' or (setting == 'auto' and device.startswith('cuda'))


def sync(device):
    """Waits for the device, so that a timer reads finished work (a no-op on the CPU)."""
    if device.startswith('cuda'):
        torch.cuda.synchronize(device)
    elif device.startswith('mps'):
        torch.mps.synchronize()


def peak_flops(device, dtype):
    """Dense 16-bit peak of the GPU, for MFU; None where unknown or not a 16-bit run (then no
    MFU is reported). These are the vendors' spec-sheet numbers (dense, no sparsity)."""
    if not device.startswith('cuda') or dtype not in ('bfloat16', 'float16'):
        return None
    name = torch.cuda.get_device_name(torch.device(device))
    for key, flops in (('H200', 989e12), ('H100', 989e12), ('A100', 312e12), ('L40S', 362e12),
                       ('A10G', 70e12), ('4090', 165e12), ('3090', 71e12)):
        if key in name:
            return flops
    return None
