"""
runtime.py, where a run meets its machine: the device and its dtype, the flags a CPU reports, the peak an MFU
is against, and the process group each rank joins under torchrun.

    python -m pytest -q tests/test_runtime.py
"""

import itertools
from types import SimpleNamespace

import pytest
import torch

import runtime
from configurator import UserError
from conftest import settings, torchrun_environment


# -----------------------------------------------------------------------------
# the device and its dtype: 'auto' as the hardware allows (a CPU's bf16 read from its flags), a CPU flushes
# denormals, a device that is not there refused in one line

def test_dtype_auto_is_bf16_where_the_hardware_has_it_and_float32_to_evaluate_on_a_cpu(monkeypatch):
    import runtime
    for cpu_bf16, gpu_bf16 in itertools.product((True, False), repeat=2):
        monkeypatch.setattr(runtime, 'cpu_has_bf16', lambda: cpu_bf16)
        monkeypatch.setattr(torch.cuda, 'is_bf16_supported', lambda including_emulation=True: gpu_bf16)
        want = {('cpu', True): 'bfloat16' if cpu_bf16 else 'float32', ('cpu', False): 'float32',
                ('cuda', True): 'bfloat16' if gpu_bf16 else 'float16', ('cuda', False): 'bfloat16' if gpu_bf16 else 'float16'}
        for (device, training), dtype in want.items():
            assert runtime.resolve_dtype('auto', device, training=training) == dtype, (device, training, cpu_bf16, gpu_bf16)
            assert runtime.resolve_dtype('float16', device, training=training) == 'float16'  # a dtype named is kept


@pytest.mark.parametrize('dtype', ['bfloat16', 'float16', 'float32'])
def test_autocast_runs_the_forward_in_its_dtype_on_the_device_named_and_float32_is_none(dtype):
    # the context the forward passes run in: CPU autocast to the dtype for 'cpu' (and 'cpu:0'), nothing at all for
    # float32; a matmul inside shows which
    a = torch.ones(4, 4)
    for device in ('cpu', 'cpu:0'):
        with runtime.autocast(device, dtype):
            assert torch.is_autocast_enabled('cpu') == (dtype != 'float32')
            assert (a @ a).dtype == getattr(torch, dtype)
            assert not torch.is_autocast_enabled('cuda')  # (a CPU run turns no other device's autocast on)
    assert not torch.is_autocast_enabled('cpu')  # and it ends with the block


def test_float32s_context_is_nothing_at_all_no_autocast_turned_off_and_no_warning():
    # "nothing for float32": not an autocast to float32 (which torch refuses with a warning, then turns autocast
    # off), but no context: no warning on entering it, and an autocast around it stays on inside it
    import warnings
    a = torch.ones(4, 4)
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        for device in ('cpu', 'cpu:0'):
            with torch.autocast('cpu', dtype=torch.bfloat16), runtime.autocast(device, 'float32'):
                assert torch.is_autocast_enabled('cpu') and (a @ a).dtype == torch.bfloat16
            with runtime.autocast(device, 'float32'):
                assert not torch.is_autocast_enabled('cpu') and (a @ a).dtype == torch.float32


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


def test_the_cpu_device_flushes_denormals_to_zero():
    from runtime import setup_device
    try:
        torch.set_flush_denormal(False)  # (before the denormal is made: a test before this one may have left it on)
        tiny = torch.tensor([1e-39])  # below float32's smallest normal, 1.2e-38
        assert (tiny * 2).item() != 0  # a denormal, kept without flushing
        assert setup_device('cpu') == 'cpu' and (tiny * 2).item() == 0
    finally:
        torch.set_flush_denormal(False)


def test_auto_says_so_when_a_cuda_build_sees_no_gpu(monkeypatch, capsys):
    from runtime import setup_device
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: False)
    monkeypatch.setattr(torch.backends.mps, 'is_available', lambda: False)
    try:
        for build, said in (('12.8', True), (None, False)):  # a CUDA build without a GPU, then a CPU build
            monkeypatch.setattr(torch.version, 'cuda', build)
            assert setup_device('auto') == 'cpu'
            err = capsys.readouterr().err
            assert ('CUDA 12.8 build but sees no GPU' in err) is said, err
            assert len(err.splitlines()) == int(said)
    finally:
        torch.set_flush_denormal(False)


def test_a_device_that_is_not_there_is_refused():
    c = SimpleNamespace(**settings('--device=gpu'))
    with pytest.raises(UserError, match="'gpu'"):
        runtime.start_process(c.device, c.gradient_accumulation_steps)


@pytest.mark.parametrize('name', ['cuda', 'cuda:1', 'mps'])
def test_a_gpu_named_where_there_is_none_is_one_line_not_the_cpu(monkeypatch, name):
    # device='cuda' (or mps) on a machine without one: an error naming it, where 'auto' would take the CPU
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: False)
    monkeypatch.setattr(torch.backends.mps, 'is_available', lambda: False)
    with pytest.raises(UserError, match=f"device '{name}' is not available on this machine: use device='auto' or 'cpu'"):
        runtime.setup_device(name)


# -----------------------------------------------------------------------------
# the peak an MFU is against: each GPU's own, a 16-bit run's only

def test_each_gpu_name_torch_reports_finds_its_own_peak():
    from runtime import peak_flops_of
    names = {'NVIDIA H100 80GB HBM3': 989e12, 'NVIDIA H100 PCIe': 756e12, 'NVIDIA H100 NVL': 835e12,
             'NVIDIA H200': 989e12, 'NVIDIA H200 NVL': 835e12, 'NVIDIA A100-SXM4-80GB': 312e12,
             'NVIDIA L40S': 362e12, 'NVIDIA A10G': 70e12, 'NVIDIA GeForce RTX 4090': 165e12, 'Tesla T4': None}
    assert {name: peak_flops_of(name) for name in names} == names


def test_mfu_is_against_the_16_bit_peak_only_for_a_16_bit_run(monkeypatch):
    import runtime
    monkeypatch.setattr(torch.cuda, 'get_device_name', lambda device=None: 'NVIDIA H100 80GB HBM3')
    assert runtime.peak_flops('cuda', 'bfloat16') == runtime.peak_flops('cuda', 'float16') == 989e12
    assert runtime.peak_flops('cuda', 'float32') is None  # (its peak is another: no MFU rather than a wrong one)
    assert runtime.peak_flops('cpu', 'bfloat16') is None


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


def test_a_cuda_device_turns_tf32_matmuls_on(monkeypatch):
    """setup_device: TF32 matmuls on CUDA (its docstring), and only there."""
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: True)
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
        runtime.setup_device('cpu')
        assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == (False, False)
        assert runtime.setup_device('cuda') == 'cuda'
        assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == (True, True)
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before
        torch.set_flush_denormal(False)


def test_the_device_is_auto_unless_named():
    """setup_device(name='auto'): with no name, the first of cuda, mps and cpu that is there."""
    try:
        assert runtime.setup_device() == runtime.setup_device('auto') == (
            'cuda' if torch.cuda.is_available() else 'mps' if torch.backends.mps.is_available() else 'cpu')
    finally:
        torch.set_flush_denormal(False)


def test_auto_takes_cuda_then_mps_then_the_cpu_as_each_is_there(monkeypatch):
    """setup_device('auto'): 'cuda', then 'mps', then 'cpu', the first that is there (each machine's presence faked:
    no GPU here), so a Mac without CUDA trains on its GPU, not its CPU."""
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    try:
        for cuda, mps in itertools.product((True, False), repeat=2):
            monkeypatch.setattr(torch.cuda, 'is_available', lambda: cuda)
            monkeypatch.setattr(torch.backends.mps, 'is_available', lambda: mps)
            assert runtime.setup_device('auto') == ('cuda' if cuda else 'mps' if mps else 'cpu'), (cuda, mps)
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before
        torch.set_flush_denormal(False)


def test_under_torchrun_a_rank_leaves_by_os_exit_with_its_status_and_its_output_flushed(monkeypatch):
    """exit_process: under torchrun a rank leaves without Python's teardown (os._exit: no SystemExit, no atexit),
    its stdout and stderr flushed first; outside torchrun, sys.exit with the status."""
    import io
    import os
    import sys

    class Left(BaseException):
        pass
    out, err, left = io.BytesIO(), io.BytesIO(), []

    def os_exit(status):
        left.append((status, out.getvalue(), err.getvalue()))
        raise Left  # (os._exit itself would end pytest's process)
    monkeypatch.setattr(os, '_exit', os_exit)
    monkeypatch.setattr(sys, 'stdout', io.TextIOWrapper(out, encoding='utf-8'))  # (block-buffered: not a terminal)
    monkeypatch.setattr(sys, 'stderr', io.TextIOWrapper(err, encoding='utf-8'))
    torchrun_environment(monkeypatch, 1, 2)
    print('a last line', end='')
    print('a last warning', end='', file=sys.stderr)
    with pytest.raises(Left):
        runtime.exit_process(3)
    assert left == [(3, b'a last line', b'a last warning')]
    monkeypatch.delenv('RANK')
    with pytest.raises(SystemExit) as e:
        runtime.exit_process(3)
    assert e.value.code == 3 and len(left) == 1


def test_sync_waits_for_the_device_it_is_named_and_nothing_on_the_cpu(monkeypatch):
    """sync(device): a CUDA device's synchronize (that device), MPS's, nothing on the CPU (each faked: no GPU here),
    so a timer reads finished work wherever it runs."""
    waited = []
    monkeypatch.setattr(torch.cuda, 'synchronize', lambda device=None: waited.append(('cuda', device)))
    monkeypatch.setattr(torch.mps, 'synchronize', lambda: waited.append(('mps',)))
    for device in ('cuda', 'cuda:1', 'mps', 'cpu'):
        runtime.sync(device)
    assert waited == [('cuda', 'cuda'), ('cuda', 'cuda:1'), ('mps',)]
