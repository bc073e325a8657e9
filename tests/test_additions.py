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

from beyond.additions import FieldGPT, FieldGPTConfig, sandwich
from model import LoopedGPT, LoopedGPTConfig


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
