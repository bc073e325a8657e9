"""
The field's model additions (beyond/additions.py): FieldGPT's scale controls (sandwich norm, input injection,
damping), bounded work per loop (a window, no positions) and truncated backprop, each stated as the property it
is there for, alone and beside every other addition the config allows. (Decoding every control as the forward:
tests/test_decoder.py.)

    python -m pytest -q tests/test_additions.py
"""

import math
from dataclasses import fields

import pytest
import torch
from torch.nn import functional as F
from torch.utils.flop_counter import FlopCounterMode

from beyond.additions import FieldGPT, FieldGPTConfig, sandwich
from model import LoopedGPT, LoopedGPTConfig
from test_model import D, T, batch, tiny


# -----------------------------------------------------------------------------
# the scale controls

def test_the_sandwich_norms_gain_by_hand():
    # RMSNorm(y) * gain of a sublayer's output y: (3, 4), its RMS sqrt(12.5), the gain (2, 0.5)
    sub = torch.nn.Module()
    sub.ln_out, sub.out_dropout = torch.nn.RMSNorm(2, eps=0.0), 0.0
    with torch.no_grad():
        sub.ln_out.weight.copy_(torch.tensor([2.0, 0.5]))
    got = sandwich(sub, (), torch.tensor([[3.0, 4.0]]))
    r = math.sqrt(12.5)
    assert got[0].tolist() == pytest.approx([2 * 3 / r, 0.5 * 4 / r], rel=1e-6)
    # in the model: zero output gains make every update zero, so the block passes its input through
    torch.manual_seed(0)
    block = FieldGPT(FieldGPTConfig(vocab_size=16, block_size=8, n_layer=1, n_head=2, n_embd=8, dropout=0.0,
                                    sandwich_norm=True)).transformer.h[0]
    h = torch.randn(1, 8, 8)
    with torch.no_grad():
        block.attn.ln_out.weight.zero_()
        block.mlp.ln_out.weight.zero_()
        assert torch.equal(block(h), h)
        block.attn.ln_out.weight.fill_(3.0)  # and the attention's gain sets the RMS of its update
        update = block(h) - h
    assert torch.allclose(update.pow(2).mean(-1).sqrt(), torch.full((1, 8), 3.0), rtol=1e-4)


# -----------------------------------------------------------------------------
# older checkpoints: written before beyond/additions.py, they hold beyond/'s fields in model_args and no
# model_class, and load as the class that declares the fields off their defaults

def test_an_older_checkpoint_loads_as_the_class_its_fields_name(tmp_path):
    # checkpoints written before beyond/additions.py hold beyond/'s fields in model_args and no model_class:
    # at their defaults the model is the paper's (the fields dropped); off them, the class that declares them
    from beyond.exit_train import ExitTrainedGPT, ExitTrainConfig
    from model import MOVED
    shape = dict(vocab_size=16, block_size=8, n_layer=1, n_head=2, n_embd=8, n_loops=2, dropout=0.0)
    x = torch.randint(0, 16, (1, 8))
    for moved, cls in ((dict(), LoopedGPT), (dict(sandwich_norm=True, positions='none'), FieldGPT),
                       (dict(exit_train=0.25, damping=True), ExitTrainedGPT)):
        torch.manual_seed(0)
        model = cls(cls.config_class(**shape, **moved)).eval()
        old_args = {**vars(LoopedGPTConfig(**shape)), **MOVED, **moved}  # every field the older config had
        torch.save(dict(model_args=old_args, model=model.state_dict()), tmp_path / 'ckpt.pt')
        loaded, _ = LoopedGPT.from_checkpoint(str(tmp_path))
        assert type(loaded) is cls and all(getattr(loaded.config, k) == v for k, v in moved.items())
        with torch.no_grad():
            assert torch.equal(loaded.eval()(x)[0], model(x)[0])
    assert set(MOVED) == {f.name for f in fields(ExitTrainConfig)} - {f.name for f in fields(LoopedGPTConfig)}
    assert all(getattr(ExitTrainConfig(), k) == v for k, v in MOVED.items())  # (MOVED: their defaults, as declared)


# -----------------------------------------------------------------------------
# every parameter of every scale control (the paper's and the field's) reaches the logits

CONTROLS = [dict(readout='norm'), dict(readout='raw'), dict(readout='final_norm'), dict(readout='alpha'),
            dict(interloop_norm=True), dict(sandwich_norm=True), dict(damping=True), dict(inject=True),
            dict(sandwich_norm=True, damping=True, inject=True, interloop_norm=True, readout='alpha')]


@pytest.mark.parametrize('control', CONTROLS, ids=lambda c: '-'.join(f'{k}={v}' for k, v in c.items()))
def test_every_parameter_of_every_scale_control_reaches_the_logits(control):
    # a gain or a logit the forward forgets to read (the sandwich norm's output gain, the damping
    # factor, the readout's gain, ...) trains nothing and changes nothing: each is perturbed alone
    cls = LoopedGPT if set(control) <= {f.name for f in fields(LoopedGPTConfig)} else FieldGPT  # (the paper's where it can)
    model = tiny(cls, n_layer=1, init_std=0.1, **control).eval()
    x, y = batch(B=2)
    with torch.no_grad():
        base, _ = model(x)
        for name, p in model.named_parameters():
            keep = p.clone()
            p.add_(0.5 * torch.randn(p.shape, generator=torch.Generator().manual_seed(2)))
            moved, _ = model(x)
            p.copy_(keep)
            assert (moved - base).abs().max() > 1e-4, name
        # the control itself changes the per-loop loss (final_norm: its loops before the last), the same
        # weights where they are shared
        plain = tiny(n_layer=1, init_std=0.1).eval()
        plain.load_state_dict(model.state_dict(), strict=False)
        if control != dict(readout='norm'):
            assert abs(plain(x, y)[1].item() - model(x, y)[1].item()) > 1e-4


# -----------------------------------------------------------------------------
# truncated backprop: the loss reads and penalises only the loops that run with a graph, and the FLOPs estimate
# of a step is the counted one

def test_truncated_backprop_penalises_only_the_loops_that_run_with_a_graph():
    # what the loss reports is what trains: the loops without a graph are in neither the CE nor the penalty
    lam = 0.1
    model = tiny(FieldGPT, n_layer=1, readout='raw', n_loops=4, norm_penalty=lam, init_std=0.1)
    x, y = batch(B=2)
    with torch.no_grad():
        h = model.hidden_states(x)  # H_0 .. H_4, the same values the truncated forward computes
    read = h[3:]  # loops 3 and 4 (bptt 2)
    want = sum(F.cross_entropy(model.lm_head(model.readout(s, False)).flatten(0, 1), y.flatten()) for s in read) / 2
    want = want + lam * sum(s.pow(2).mean() for s in read) / 2
    _, loss = model(x, y, bptt=2)
    assert loss.item() == pytest.approx(want.item(), rel=1e-5)
    every = want + lam * (sum(s.pow(2).mean() for s in h[1:]) / 4 - sum(s.pow(2).mean() for s in read) / 2)
    assert abs(every.item() - want.item()) > 1e-3  # (the penalty over all four loops would be another number)


@pytest.mark.parametrize('loss', ['perloop', 'terminal'])
def test_the_flops_estimate_is_a_counted_training_step_with_truncated_backprop(loss):
    # the training step counted matmul by matmul (forward and backward) is the estimate MFU divides by,
    # at every bptt: truncated loops have a forward and no backward, and are not read out
    model = tiny(FieldGPT, n_layer=2, n_loops=4, loss=loss, init_std=0.1)
    x, y = batch(B=4)
    for bptt in (0, 1, 2, 4):
        with FlopCounterMode(display=False) as counter:
            _, l = model(x, y, bptt=bptt)
            l.backward()
        model.zero_grad()
        graph = bptt or 4
        # the counter does not see F.scaled_dot_product_attention on the CPU: attention as the estimate
        # counts it, 2*T*d a token per layer for q@k and for att@v, x1 forward and x2 backward
        attention = (4 + 2 * graph) * 2 * 2 * (2 * T * D)
        assert counter.get_total_flops() / x.numel() + attention == model.flops_per_token(backward_loops=bptt, T=T), bptt


# -----------------------------------------------------------------------------
# truncated backprop (FieldGPT.forward's bptt, random-depth training's) at and past the K a step runs:
# config/random_depth.py (bptt 8) draws K < 8 most steps

def step(model, x, y, K, bptt):
    """loss, per-loop CE and every parameter's gradient of one training forward and backward."""
    model.zero_grad()
    _, loss = model(x, y, n_loops=K, bptt=bptt)
    loss.backward()
    return loss.detach(), model.stats['ce'], {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize('K,bptt', [(2, 2), (2, 3), (2, 8), (4, 4), (4, 5)])
def test_bptt_at_or_past_the_drawn_depth_reads_and_trains_every_loop_that_ran(K, bptt):
    # truncated backprop counts from the last loop: with bptt >= K every loop that ran has a graph and is read,
    # the loss, the penalty, the per-loop CE and the gradients those of the untruncated step
    model = tiny(FieldGPT, n_layer=1, n_loops=4, readout='raw', norm_penalty=0.1)
    x, y = batch(B=2)
    want, got = step(model, x, y, K, 0), step(model, x, y, K, bptt)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]) and got[1].isfinite().all()
    assert got[2].keys() == want[2].keys() and all(torch.equal(got[2][n], want[2][n]) for n in want[2])
    assert model.flops_per_token(K, backward_loops=bptt) == model.flops_per_token(K)
    # one loop short of K is truncated: the first loop is not read, and the loss is another number
    short = step(model, x, y, K, K - 1)
    assert short[1][0].isnan() and short[1][1:].isfinite().all() and not torch.equal(short[0], want[0])
    assert model.flops_per_token(K, backward_loops=K - 1) < model.flops_per_token(K)
