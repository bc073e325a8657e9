"""
bench.py, both modes, at a tiny shape with one timed step: the table it prints, and its
side-by-side with a stand-in for the released code (a few lines written here, with the
released code's interface: models/ar_looplm.py's build_ar_looplm_from_config).

    python -m pytest -q tests/test_bench.py
"""


import pytest
import torch

from beyond import bench
from configurator import UserError
from conftest import assert_one_line_error, run_script

TINY = ['--device=cpu', '--compile=off', '--n_layer=1', '--n_head=2', '--n_embd=32', '--n_loops=2',
        '--block_size=16', '--batch_size=2', '--dataset=none-bytes', '--steps=1', '--warmup=0']

RELEASED = '''
import torch
from torch import nn


class LoopLM(nn.Module):
    def __init__(self, d, vocab_size, loops):
        super().__init__()
        self.emb, self.mix, self.head = nn.Embedding(vocab_size, d), nn.Linear(d, d), nn.Linear(d, vocab_size)
        self.loops = loops

    def forward(self, x):
        h, logits, norms = self.emb(x), [], []
        for _ in range(self.loops):
            h = h + torch.tanh(self.mix(h))
            logits.append(self.head(h))
            norms.append(h.pow(2).mean())
        return {'all_logits': logits, 'all_hidden_norms_sq': norms}


def build_ar_looplm_from_config(config, vocab_size):
    return LoopLM(config['model']['d_model'], vocab_size, config['model']['num_loops'])
'''


@pytest.fixture(autouse=True)
def denormals_back_off():
    yield
    torch.set_flush_denormal(False)  # bench.main's setup_device turns flushing on, process-wide


def table(text):
    return [line.split(' | ') for line in text.splitlines() if line.startswith('| ') and '---' not in line]


def test_one_step_of_each_loss_is_timed(capsys):
    bench.main(TINY + ['--dtype=float32', '--loss_path', 'plain', '--peak_size=256'])  # (the peak: one small product)
    out = capsys.readouterr().out
    assert '(d=32, 1 layers, K=2, vocab 256), batch 1x2x16, cpu, float32, eager' in out and 'loss path plain' in out
    rows = table(out)
    assert rows[0][:3] == ['| loss', 'tokens/s', 'ms/step'] and [r[0] for r in rows[1:]] == ['| perloop', '| terminal']
    for row in rows[1:]:
        assert float(row[1].replace(',', '')) > 0 and float(row[2]) > 0
    assert 'matmul peak measured here (float32)' in out and 'per-loop / terminal peak memory' in out


def test_ms_per_step_and_tokens_per_s_are_the_means_over_the_timed_steps(capsys):
    # the timed steps' total time over their number, not the total: ms/step x tokens/s is the tokens of one step
    # (batch 2 x 16), whatever the number of steps (three here; one would not tell a total from a mean)
    bench.main([a for a in TINY if a != '--steps=1'] + ['--steps=3', '--dtype=float32', '--peak_size=256'])
    for row in table(capsys.readouterr().out)[1:]:
        tok_s, ms = float(row[1].replace(',', '')), float(row[2])
        assert tok_s * ms / 1000 == pytest.approx(2 * 16, rel=0.1), row


def test_side_by_side_with_the_released_code(capsys, tmp_path):
    (tmp_path / 'models').mkdir()
    (tmp_path / 'models' / 'ar_looplm.py').write_text(RELEASED)
    bench.main(TINY + ['--dtype=bfloat16', f'--anchor={tmp_path}', '--norm_penalty=0.01'])
    out = capsys.readouterr().out
    assert f'side by side with {tmp_path}: 1 timed steps' in out and 'norm penalty 0.01' in out
    names = [r[0] for r in table(out)[1:]]
    assert names == ['| ours, float32, eager', '| ours as configured (bfloat16, eager)', '| released code, float32, eager']
    assert table(out)[-1][-1] == '1.00x |'  # the released code against itself


def test_bad_settings_are_one_line():
    # the one subprocess: the error path as a user meets it
    assert_one_line_error(run_script('beyond/bench.py', *TINY, '--steps=0'), 'bench.py', "'steps'", 'at least 1')


@pytest.mark.parametrize('argv,needle', [
    (['--warmup=-1'], "'warmup'"), (['--steps=1.5'], 'an int'), (['--step=3'], "did you mean 'steps'"),
    (['--anchor=/nonexistent/clone'], 'models/ar_looplm.py')])
def test_bad_settings_name_what_is_wrong(argv, needle):
    with pytest.raises(UserError, match=needle):
        bench.main(TINY + argv)


def test_help_lists_its_own_settings_and_train_pys(capsys):
    with pytest.raises(SystemExit):
        bench.main(['--help'])
    out = capsys.readouterr().out
    assert out.startswith('usage: python -m beyond.bench') and '[beyond/bench.py]' in out and '[train.py]' in out and '[model.py: LoopedGPTConfig]' in out
    assert '--steps=10' in out and 'timed optimizer steps' in out and '--n_loops=4' in out


def test_the_cast_census_sees_each_weight_cast_once_a_step(capsys):
    """--casts: under bf16 autocast each weight is cast once a step (autocast's cache serves every loop
    and the backward), every activation cast is counted with its phase; with the cache off (a rule that
    re-casts weights per loop) the census shows the repeated casts, so its count can fail."""
    import train
    from model import LoopedGPT, LoopedGPTConfig
    torch.manual_seed(0)
    model = LoopedGPT(LoopedGPTConfig(n_layer=1, n_head=2, n_embd=32, n_loops=3, block_size=16, vocab_size=64,
                                      dropout=0.0))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler('cpu', enabled=False)
    x, y = (torch.randint(0, 64, (1, 2, 16)) for _ in range(2))
    matrices = [p for p in model.transformer.h.parameters() if p.dim() == 2]  # the shared block's (5)

    def census(cache):
        ctx = torch.autocast('cpu', dtype=torch.bfloat16, cache_enabled=cache)
        return bench.cast_census(lambda: train.train_step(model, opt, scaler, x, y, ctx=ctx, grad_clip=1.0), model)

    def weight_casts(seen, phase):
        return sum(n for (p, what, _, _), (n, _) in seen.items() if (p, what) == (phase, 'weight'))

    cached = census(True)
    assert weight_casts(cached, 'forward') == len(matrices) + 1  # + the tied head, which the loss casts once
    assert weight_casts(cached, 'backward') == 0
    assert sum(n for (p, what, _, _), (n, _) in cached.items() if (p, what) == ('backward', 'activation')) > 0
    uncached = census(False)
    assert weight_casts(uncached, 'forward') == 3 * len(matrices) + 1  # K = 3 loops, each casting every matrix again
    bench.print_casts(cached)
    out = capsys.readouterr().out
    assert 'casts in one per-loop step' in out and '| forward | weights, in total | | | ' in out


def test_the_matmul_peak_stops_at_its_count_of_products_or_its_time():
    # a small matrix stops at `most` timed products (after one untimed), long before its time; a large
    # budget of products stops at the time, with at least one product however short the time
    class Products(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            self.n += getattr(func, '__name__', '') == 'matmul'  # (a @ b)
            return func(*args, **(kwargs or {}))

    with Products() as count:
        count.n = 0
        assert bench.matmul_peak('float32', 'cpu', seconds=4.0, size=8, most=5) > 0
    assert count.n == 1 + 5
    with Products() as count:
        count.n = 0
        bench.matmul_peak('float32', 'cpu', seconds=0.0, size=8, most=10 ** 9)
    assert count.n == 1 + 1
