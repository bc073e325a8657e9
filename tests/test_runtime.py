"""
runtime.py, where a run meets its machine: the device and its dtype, the flags a CPU reports, the peak an MFU
is against, and the process group each rank joins under torchrun.

    python -m pytest -q tests/test_runtime.py
"""

import pytest
import torch

import runtime
from conftest import torchrun_environment


# -----------------------------------------------------------------------------
# under torchrun: each rank its own GPU over NCCL, a CPU rank gloo

def test_under_torchrun_each_rank_takes_its_own_gpu_over_nccl_and_a_cpu_rank_gloo(monkeypatch):
    # rank 1 of two: its GPU is cuda:LOCAL_RANK, bound to an NCCL group; a CPU rank joins a gloo group.
    # No GPU here: CUDA's presence is faked for setup_device, and the group's start is recorded
    calls = []
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: True)
    monkeypatch.setattr(torch.cuda, 'set_device', lambda device: calls.append(('set_device', device)))
    monkeypatch.setattr(torch.distributed, 'init_process_group', lambda **kw: calls.append(kw))
    torchrun_environment(monkeypatch, 1, 2)
    tf32 = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    try:  # (setup_device's process-wide switches, restored)
        assert runtime.start_process('cuda', 4) == (True, 1, 2, 'cuda:1', 2)
        assert calls == [('set_device', 'cuda:1'), dict(backend='nccl', device_id=torch.device('cuda:1'))]
        calls.clear()
        assert runtime.start_process('cpu', 2) == (True, 1, 2, 'cpu', 1)
        assert calls == [dict(backend='gloo', device_id=None)]
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32
        torch.set_flush_denormal(False)


# -----------------------------------------------------------------------------
# the CPU's flags

@pytest.mark.parametrize('flags, native', [('fpu avx512f avx512_bf16', True), ('fpu amx_bf16 amx_tile', True),
                                           ('fpu avx512f avx2', False), (None, False)])
def test_native_bf16_is_read_from_the_cpu_flags_of_proc_cpuinfo(monkeypatch, flags, native):
    """runtime.cpu_has_bf16 (which decides dtype='auto' on a CPU) reads Linux's /proc/cpuinfo: AVX-512 BF16
    or AMX is native bf16, any other CPU is not, and a machine without the file (macOS) is not either."""
    import io

    def fake_open(path, *args, **kwargs):
        if path != '/proc/cpuinfo' or flags is None:
            raise FileNotFoundError(path)
        return io.StringIO(f'processor\t: 0\nmodel name\t: a CPU\nflags\t\t: {flags}\nbugs\t\t: none\n')
    monkeypatch.setattr(runtime, 'open', fake_open, raising=False)
    assert runtime.cpu_has_bf16() is native


# -----------------------------------------------------------------------------
# the peak an MFU is against

def test_mfu_is_against_the_16_bit_peak_only_for_a_16_bit_run(monkeypatch):
    import runtime
    monkeypatch.setattr(torch.cuda, 'get_device_name', lambda device=None: 'NVIDIA H100 80GB HBM3')
    assert runtime.peak_flops('cuda', 'bfloat16') == runtime.peak_flops('cuda', 'float16') == 989e12
    assert runtime.peak_flops('cuda', 'float32') is None  # (its peak is another: no MFU rather than a wrong one)
    assert runtime.peak_flops('cpu', 'bfloat16') is None
