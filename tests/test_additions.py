"""
The field's model additions (beyond/additions.py): FieldGPT's scale controls (sandwich norm, input injection,
damping), bounded work per loop (a window, no positions) and truncated backprop, each stated as the property it
is there for, alone and beside every other addition the config allows. (Decoding every control as the forward:
tests/test_decoder.py.)

    python -m pytest -q tests/test_additions.py
"""

import math

import pytest
import torch

from beyond.additions import FieldGPT, FieldGPTConfig, sandwich


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
