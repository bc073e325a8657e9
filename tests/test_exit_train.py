"""
Exit-aware training (beyond/exit_train.py): a token frozen after its exit loop keeps its state
bit for bit, the others attend to it, its loss reads only its own loops; with exit_train off
(or in evaluation) the model is FieldGPT exactly, and so, its other fields at their defaults, LoopedGPT.

    python -m pytest -q tests/test_exit_train.py
"""

import pytest
import torch
from torch.nn import functional as F

from beyond.exit_train import ExitTrainedGPT
from configurator import UserError
from conftest import assert_one_line_error, run_script, train_args
from model import LoopedGPT
from test_model import batch, manual_logits, tiny  # (the mechanism's tiny model and batch, with this file's class)

def test_exit_training_freezes_a_token_after_its_loop_and_reads_it_only_up_to_there():
    model = tiny(ExitTrainedGPT, readout='raw', exit_train=0.5, init_std=0.1)
    x, y = batch(B=2)
    exit_at = torch.full(x.shape, 3)
    exit_at[0, 2], exit_at[1, 5] = 1, 2  # two tokens exit early
    with torch.no_grad():
        states = model.hidden_states(x)  # unmasked
        masked = list(model.masked_states(x, exit_at))
    for k in (2, 3):  # H_k == H_e for every k > e, bit for bit
        assert torch.equal(masked[k][0, 2], masked[1][0, 2])
    assert torch.equal(masked[3][1, 5], masked[2][1, 5]) and not torch.equal(masked[2][1, 5], masked[1][1, 5])
    # the tokens before an exited one see nothing of the mask; those after it do (they attend to it)
    assert torch.allclose(masked[3][0, :2], states[3][0, :2], atol=1e-6)
    assert not torch.allclose(masked[3][0, 3:], states[3][0, 3:], atol=1e-4)

    # the loss: the mean CE over every (token, loop) read, a token read only at loops <= its exit;
    # the draw is made from the global generator, so replaying it gives the same pattern
    model.train()
    torch.manual_seed(7)
    _, loss = model(x, y)
    stats = model.stats
    torch.manual_seed(7)
    draw = torch.randint(1, 3, y.shape)
    pattern = torch.where(torch.rand(y.shape) < 0.5, draw, 3)
    assert (pattern < 3).any() and (pattern == 3).any()
    with torch.no_grad():
        hs = list(model.masked_states(x, pattern))
    terms, per_loop = [], []
    for k in range(1, 4):
        read = pattern >= k
        logits = manual_logits(model, hs[k], normalized=False)
        ce_k = F.cross_entropy(logits[read], y[read], reduction='none')
        terms.append(ce_k)
        per_loop.append(ce_k.mean())
    assert loss.item() == pytest.approx(torch.cat(terms).mean().item(), rel=1e-5)
    assert stats['ce'].tolist() == pytest.approx(torch.stack(per_loop).tolist(), rel=1e-5)


def test_a_frozen_token_enters_every_block_of_a_later_loop_as_its_exit_state():
    # the masking is per block, not a reset after the loop: inside loop k > e, every block (not only
    # the first) gets the frozen token's H_e, so its keys and values there are those of its exit
    # state, as the decoder's projected stand-ins make them. Reset only after each loop, block 2 would
    # get block 1's update of it, and the tokens after it would attend to a state it never had.
    model = tiny(ExitTrainedGPT, readout='raw', exit_train=0.5, init_std=0.1)  # n_layer=2, K=3
    x, _ = batch(B=2)
    exit_at = torch.full(x.shape, 3)
    exit_at[0, 2], exit_at[1, 5] = 1, 2
    entering = []  # each block call's input, in call order: loop 1 block 1, loop 1 block 2, loop 2 block 1, ...
    hooks = [b.register_forward_pre_hook(lambda m, args: entering.append(args[0].detach().clone()))
             for b in model.transformer.h]
    try:
        with torch.no_grad():
            masked = list(model.masked_states(x, exit_at))
    finally:
        for h in hooks:
            h.remove()
    L = model.config.n_layer
    assert L >= 2 and len(entering) == 3 * L
    for b, t in ((0, 2), (1, 5)):
        e = exit_at[b, t].item()
        for k in range(e + 1, 4):
            for layer in range(L):
                assert torch.equal(entering[(k - 1) * L + layer][b, t], masked[e][b, t]), \
                    f"token ({b}, {t}) frozen after loop {e} enters block {layer + 1} of loop {k} not as H_{e}"
    # and the loop is that stack run by hand from H_{k-1}, each frozen token put back to its exit
    # state after every block (not once after the loop), the running tokens taking each block's output
    with torch.no_grad():
        for k in (2, 3):
            keep, h = (exit_at >= k)[..., None], masked[k - 1]
            for block in model.transformer.h:
                h = torch.where(keep, block(h), masked[k - 1])
            assert torch.equal(h, masked[k]), k


def test_exit_train_off_draws_nothing_and_takes_the_plain_path():
    x, y = batch()
    a, b = tiny(LoopedGPT, readout='raw'), tiny(ExitTrainedGPT, readout='raw', exit_train=0.3)
    a.train(), b.train()
    torch.manual_seed(3)
    _, loss_a = a(x, y)
    after_a = torch.rand(1)
    torch.manual_seed(3)
    b.eval()  # exit training acts only in training mode: evaluation is at full depth for every token
    _, loss_b = b(x, y)
    after_b = torch.rand(1)
    assert torch.equal(after_a, after_b)  # exit_train=0 (and eval) consume no random numbers
    assert torch.equal(loss_a, loss_b)  # and compute the same loss, bit for bit
    with pytest.raises(ValueError, match='exit_train'):
        tiny(ExitTrainedGPT, exit_train=1.0)


def test_exit_training_runs_as_the_class_a_config_names_and_through_its_own_entry_point(tiny_data, tmp_path):
    # the paper's model has no exit_train: on train.py without a model_class that has it, one line naming it
    r = run_script('train.py', *train_args(tiny_data, tmp_path / 'a', '--exit_train=0.25', '--max_iters=1'))
    assert_one_line_error(r, 'train.py', "unknown setting 'exit_train'", 'model_class')
    assert not (tmp_path / 'a' / 'ckpt.pt').exists()
    # python -m beyond.exit_train is train.py with ExitTrainedGPT: it trains, and its checkpoint loads as that class
    r = run_script('beyond/exit_train.py', *train_args(tiny_data, tmp_path / 'b', '--exit_train=0.25', '--max_iters=2'))
    assert r.returncode == 0, r.stderr
    model, ckpt = LoopedGPT.from_checkpoint(str(tmp_path / 'b'))
    assert type(model).__name__ == 'ExitTrainedGPT' and ckpt['model_class'] == 'beyond.exit_train.ExitTrainedGPT'
    assert ckpt['model_args']['exit_train'] == 0.25 and ckpt['iter_num'] == 2
    # its --help is its own, over train.py's settings; what its class cannot train is one line
    r = run_script('beyond/exit_train.py', '--help')
    assert r.stdout.startswith('usage: python -m beyond.exit_train') and '--exit_train=0.0' in r.stdout
    import train
    assert train.setup(['config/raw_perloop_exit.py'])['exit_train'] == 0.25  # (train.py: the config names the class)
    with pytest.raises(UserError, match='truncated backprop'):
        train.setup(['--exit_train=0.25', '--bptt=2'], model_class=ExitTrainedGPT)
    train.setup(['--exit_train=0.25'], model_class=ExitTrainedGPT)  # (without bptt: fine)
    # in-process, train.main trains the class it is given (the seam beyond/ uses), and that class's exit path runs
    seen = []
    class Spy(ExitTrainedGPT):
        def masked_states(self, *a, **k):
            seen.append(1)
            return super().masked_states(*a, **k)
    try:
        train.main(train_args(tiny_data, tmp_path / 'c', '--exit_train=0.25', '--max_iters=1'), model_class=Spy)
    finally:
        torch.set_flush_denormal(False)
    assert seen, "train.main(model_class=...) did not train the class it was given"
