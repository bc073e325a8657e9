"""
train.py from the outside (subprocesses on tiny data made by prepare.py), and configurator.py.

    python -m pytest -q test_train.py
"""

import json
import os
import subprocess
import sys

import pytest
import torch

from conftest import HERE, assert_one_line_error, run_script, train_args
from configurator import ConfigError, configure


def read_log(out_dir):
    with open(os.path.join(out_dir, 'log.jsonl')) as f:
        return [json.loads(line) for line in f]


def train(tiny_data, out_dir, *extra):
    r = run_script('train.py', *train_args(tiny_data, out_dir, *extra))
    assert r.returncode == 0, r.stderr
    return r


def test_training_lowers_the_loss_and_logs_every_loop(tiny_data, tmp_path):
    out = tmp_path / 'run'
    r = train(tiny_data, out, '--max_iters=60', '--eval_interval=30', '--readout=raw', '--n_loops=3')
    log = read_log(out)
    trains = [e for e in log if e['kind'] == 'train']
    evals = [e for e in log if e['kind'] == 'eval']
    assert [e['iter'] for e in trains] == list(range(1, 61))
    assert [e['iter'] for e in evals] == [0, 30, 60]
    for e in trains:
        assert len(e['ce']) == len(e['h_norm']) == 3
        assert e['ms_per_iter'] > 0 and e['tok_per_s'] > 0 and e['lr'] == pytest.approx(3e-3)
        assert e['mfu'] is None and e['peak_mem_gib'] is None  # CUDA only
    for e in evals:
        for key in ('val_loss', 'val_ppl', 'norm_mean', 'norm_median', 'norm_p99', 'norm_max', 'radial', 'angular'):
            assert len(e[key]) == 3, key
    assert sum(e['loss'] for e in trains[-10:]) / 10 < 0.8 * sum(e['loss'] for e in trains[:10]) / 10
    assert evals[-1]['val_loss'][-1] < evals[0]['val_loss'][-1] - 1.0
    assert 'iter 60: loss' in r.stdout and 'eval 60: val loss K=1..3' in r.stdout
    assert os.path.isfile(out / 'ckpt.pt') and not os.path.exists(out / 'ckpt.pt.tmp')


def test_terminal_loss_logs_null_for_unsupervised_loops(tiny_data, tmp_path):
    train(tiny_data, tmp_path / 'run', '--max_iters=3', '--eval_interval=3', '--loss=terminal')
    trains = [e for e in read_log(tmp_path / 'run') if e['kind'] == 'train']
    assert all(e['ce'][0] is None and e['ce'][1] is not None for e in trains)


def test_resume_reproduces_the_uninterrupted_run(tiny_data, tmp_path):
    common = ('--eval_interval=6', '--dropout=0.1', '--max_iters=12')  # dropout: the torch RNG must resume too
    train(tiny_data, tmp_path / 'full', *common)
    train(tiny_data, tmp_path / 'split', *common[:2], '--max_iters=6')
    train(tiny_data, tmp_path / 'split', *common, '--init_from=resume')
    full = [e['loss'] for e in read_log(tmp_path / 'full') if e['kind'] == 'train']
    split_log = read_log(tmp_path / 'split')
    split = [e['loss'] for e in split_log if e['kind'] == 'train']
    assert len(full) == len(split) == 12
    assert split == full  # bit for bit: same batches, same dropout masks, same optimizer state
    assert len(set(full)) == 12
    assert [e['iter'] for e in split_log if e['kind'] == 'eval'] == [0, 6, 12]  # no iteration twice

    # eval_only on the resumed checkpoint evaluates that model and appends to the log
    train(tiny_data, tmp_path / 'split', *common, '--init_from=resume', '--eval_only=True')
    after = read_log(tmp_path / 'split')
    assert after[:-1] == split_log and after[-1]['kind'] == 'eval' and after[-1]['iter'] == 12
    assert after[-1]['val_loss'] == split_log[-1]['val_loss']


def test_two_rank_resume_reproduces_the_uninterrupted_run(tiny_data, tmp_path):
    # two CPU ranks over gloo: rank 0's logged loss follows the all-reduced gradients, so it
    # diverges after a resume if rank 1's dropout masks do not replay those of the full run
    def torchrun(out, *extra):
        r = subprocess.run([sys.executable, '-m', 'torch.distributed.run', '--standalone', '--nproc_per_node=2',
                            os.path.join(HERE, 'train.py'), *train_args(tiny_data, out, '--eval_interval=4',
                            '--dropout=0.2', '--gradient_accumulation_steps=2', *extra)],
                           capture_output=True, text=True, timeout=300, env=dict(os.environ, OMP_NUM_THREADS='1'))
        assert r.returncode == 0, r.stderr[-3000:]
    torchrun(tmp_path / 'full', '--max_iters=8')
    torchrun(tmp_path / 'split', '--max_iters=4')
    torchrun(tmp_path / 'split', '--max_iters=8', '--init_from=resume')
    full = [e['loss'] for e in read_log(tmp_path / 'full') if e['kind'] == 'train']
    split = [e['loss'] for e in read_log(tmp_path / 'split') if e['kind'] == 'train']
    assert len(full) == 8 and split == full
    torchrun(tmp_path / 'split', '--max_iters=8', '--init_from=resume', '--eval_only=True')  # every rank stops
    # one loop leaves the inter-loop norm unused: DDP must be told, or its second step fails
    torchrun(tmp_path / 'one_loop', '--max_iters=3', '--interloop_norm=True', '--n_loops=1')


def test_a_rank_reseeds_its_dropout_from_seed_rank_and_iteration(monkeypatch):
    import train
    monkeypatch.setattr(train, 'seed', 7, raising=False)
    draws = {}
    for it, rank in ((3, 0), (3, 1), (4, 1), (3, 1)):
        train.seed_step(it, rank)
        draws.setdefault((it, rank), []).append(torch.rand(4))
    assert torch.equal(*draws[(3, 1)])  # the same step on the same rank: the same masks, resumed or not
    assert not torch.equal(draws[(3, 0)][0], draws[(3, 1)][0]) and not torch.equal(draws[(3, 1)][0], draws[(4, 1)][0])


def test_the_last_iteration_is_evaluated_and_saved(tiny_data, tmp_path):
    train(tiny_data, tmp_path / 'run', '--max_iters=7', '--eval_interval=5')
    assert [e['iter'] for e in read_log(tmp_path / 'run') if e['kind'] == 'eval'] == [0, 5, 7]
    ckpt = torch.load(tmp_path / 'run' / 'ckpt.pt', weights_only=True)
    assert ckpt['iter_num'] == 7 and ckpt['data_position'] == 7


def test_a_non_finite_loss_stops_cleanly_and_keeps_the_checkpoint(tiny_data, tmp_path):
    out = tmp_path / 'run'
    train(tiny_data, out, '--max_iters=4', '--eval_interval=4')
    before = (out / 'ckpt.pt').read_bytes()
    r = run_script('train.py', *train_args(tiny_data, out, '--max_iters=40', '--eval_interval=4',
                                           '--init_from=resume', '--learning_rate=1e12', '--grad_clip=0.0'))
    assert_one_line_error(r, 'train.py', 'non-finite', 'lower learning_rate')
    assert (out / 'ckpt.pt').read_bytes() == before
    assert not os.path.exists(out / 'ckpt.pt.tmp')


def test_config_errors_are_one_clear_line(tiny_data, tmp_path):
    args = train_args(tiny_data, tmp_path / 'x', '--eval_only=True')
    assert_one_line_error(run_script('train.py', *args, '--learning_rat=1e-3'), 'train.py', "'learning_rat'")
    assert_one_line_error(run_script('train.py', *args, '--batch_size=big'), 'train.py', "'batch_size'", 'int')
    assert_one_line_error(run_script('train.py', *args, '--max_iters=1.5'), 'train.py', "'max_iters'")
    assert_one_line_error(run_script('train.py', *args, '--readout=rms'), 'train.py', "'readout'", 'raw')
    bad = tmp_path / 'bad.py'
    bad.write_text("n_layers = 4\n")
    assert_one_line_error(run_script('train.py', bad, *args), 'train.py', "'n_layers'", str(bad))
    assert_one_line_error(run_script('train.py', 'config/nope.py', *args), 'train.py', 'config/nope.py')
    assert_one_line_error(run_script('train.py', *args, '--device=gpu'), 'train.py', "'gpu'")
    r = run_script('train.py', *args, '--learning_rate=1')  # an int where a float is expected is fine
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize('bad,needle', [
    (['--n_loops=0'], "'n_loops'"), (['--n_embd=100', '--n_head=3'], 'multiple of n_head'),
    (['--norm_penalty=-1'], 'reward large norms'), (['--learning_rate=-3e-4'], "'learning_rate'"),
    (['--dropout=1.0'], "'dropout'"), (['--dropout=-0.1'], "'dropout'"), (['--batch_size=0'], "'batch_size'"),
    (['--block_size=0'], "'block_size'"), (['--eval_iters=0'], "'eval_iters'"), (['--beta2=1.5'], "'beta2'"),
    (['--grad_clip=-1.0'], "'grad_clip'"), (['--epochs=0'], "'epochs'"), (['--seed=-1'], "'seed'"),
    (['--exit_train=1.0'], "'exit_train'"), (['--exit_train=-0.5'], "'exit_train'"),
    (['--exit_train=0.5', '--loss=terminal'], "exit_train needs loss='perloop'")])
def test_settings_that_make_no_sense_are_one_clear_line(tiny_data, tmp_path, bad, needle):
    r = run_script('train.py', *train_args(tiny_data, tmp_path / 'x', *bad))
    assert_one_line_error(r, 'train.py', needle)
    assert not (tmp_path / 'x').exists()  # refused before anything was written


def test_missing_data_names_the_prepare_command(tmp_path):
    r = run_script('train.py', f'--data_dir={tmp_path}', '--dataset=wikitext-2-bytes', '--device=cpu')
    assert_one_line_error(r, 'train.py', 'python prepare.py --dataset wikitext-2 --tokenizer bytes')
    r = run_script('train.py', f'--data_dir={tmp_path}', '--device=cpu')
    assert_one_line_error(r, 'train.py', '`python prepare.py`')


def test_resume_refuses_a_checkpoint_that_does_not_match(tiny_data, tmp_path):
    out = tmp_path / 'run'
    train(tiny_data, out, '--max_iters=2', '--eval_interval=2')
    r = run_script('train.py', *train_args(tiny_data, out, '--init_from=resume', '--n_embd=64'))
    assert_one_line_error(r, 'train.py', 'n_embd=32')
    r = run_script('train.py', *train_args(tiny_data, tmp_path / 'none', '--init_from=resume'))
    assert_one_line_error(r, 'train.py', 'no checkpoint')


def test_every_condition_config_loads_and_overlays_compose():
    defaults = dict(out_dir='out', readout='norm', loss='perloop', norm_penalty=0.0, interloop_norm=False,
                    exit_train=0.0, n_layer=8, n_head=8, n_embd=512, batch_size=64)
    config = os.path.join(HERE, 'config')
    conditions = sorted(f for f in os.listdir(config) if f not in ('cpu.py', 'cpu_long.py', '129m.py'))
    assert len(conditions) == 10  # the paper's eight, and two with exit-aware training
    seen = set()
    for name in conditions:
        c = configure(defaults, [os.path.join(config, name), os.path.join(config, '129m.py')])
        assert c['out_dir'] == f"out-{name[:-3]}-129m" and c['n_embd'] == 768
        seen.add((c['readout'], c['loss'], c['norm_penalty'], c['interloop_norm'], c['exit_train']))
        long = configure(dict(defaults, max_iters=0, epochs=4.0, eval_interval=500, dataset='x', device='auto',
                              compile='auto', dropout=0.1, block_size=256, learning_rate=3e-4, eval_iters=40,
                              log_interval=50),
                         [os.path.join(config, name), os.path.join(config, 'cpu.py'), os.path.join(config, 'cpu_long.py')])
        assert long['out_dir'] == f"out-{name[:-3]}-cpu-long" and long['max_iters'] == 0 and long['epochs'] == 4.0
    assert len(seen) == 10  # ten different conditions


def test_batches_are_a_function_of_the_iteration(monkeypatch):
    import numpy as np
    import train
    for name, value in dict(seed=1, block_size=8, batch_size=4, device_type='cpu', device='cpu').items():
        monkeypatch.setattr(train, name, value, raising=False)
    data = np.arange(10000, dtype=np.uint16)
    a, b, again = (train.train_batches(data, it, 0, 2)[0] for it in (0, 1, 0))
    assert torch.equal(a, again) and not torch.equal(a, b)
    assert not torch.equal(a[0], a[1])  # the micro-steps of one iteration differ too
    assert not torch.equal(train.train_batches(data, 0, 1, 2)[0], a)  # and so do ranks


def test_configurator_types():
    s = dict(lr=3e-4, n=4, flag=False, name='a')
    assert configure(s, ['--lr=1']) == dict(s, lr=1.0)
    assert type(configure(s, ['--lr=1'])['lr']) is float
    assert configure(s, ['--name=wikitext-2', '--flag=True'])['name'] == 'wikitext-2'
    for bad in (['--n=True'], ['--n=2.0'], ['--flag=1'], ['--lr=fast'], ['--nope=1'], ['--n']):
        with pytest.raises(ConfigError):
            configure(s, bad)


def test_mfu_peaks_tell_pcie_and_nvl_boards_from_sxm():
    from runtime import peak_flops_of
    assert peak_flops_of('NVIDIA H100 PCIe') == 756e12
    assert peak_flops_of('NVIDIA H100 NVL') == peak_flops_of('NVIDIA H200 NVL') == 835e12
    assert peak_flops_of('NVIDIA H100 80GB HBM3') == peak_flops_of('NVIDIA H200') == 989e12
    assert peak_flops_of('Tesla V100-SXM2-16GB') is None


def test_loss_path_is_a_checked_setting():
    import linear_ce
    import train as train_module
    assert train_module.loss_path == 'fused' and train_module.CHOICES['loss_path'] == linear_ce.PATHS


def test_gpu_check_stops_with_one_line_without_cuda():
    if torch.cuda.is_available():
        pytest.skip('this machine has CUDA')
    r = subprocess.run(['bash', os.path.join(HERE, 'gpu_check.sh'), '/nonexistent/never-made'],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and r.stdout == ''
    assert len(r.stderr.strip().splitlines()) == 1 and 'no CUDA GPU' in r.stderr
