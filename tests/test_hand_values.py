"""
Numbers written by hand, where the decoder's equivalence tests run the same code on both sides (the
criteria, the gate, the sandwich norm's hook): max_prob, entropy, the gate's exit probability, the
sandwich norm's gain, the ignore index's edge (a real target 0 is scored; -1 is not), the logged
per-loop norm and angular change, and perplexity at its edges.

    python -m pytest -q tests/test_hand_values.py
"""

import math

import pytest
import torch
from torch.nn import functional as F

from beyond import exits
from beyond.additions import FieldGPT, FieldGPTConfig, sandwich
from model import LoopedGPT, LoopedGPTConfig


def confidence(name, logits):
    return exits.get(name)(None, None, torch.tensor(logits), None).item()


def test_max_prob_by_hand():
    assert confidence('max_prob', [2.0, 1.0, 0.0]) == pytest.approx(math.exp(2) / (math.exp(2) + math.e + 1))
    assert confidence('max_prob', [0.0, 0.0, 0.0, 0.0]) == pytest.approx(0.25)  # uniform: 1 / vocab
    assert confidence('max_prob', [0.0, 5.0, 0.0]) == pytest.approx(math.exp(5) / (math.exp(5) + 2))  # wherever the top is
    assert confidence('max_prob', [102.0, 101.0, 100.0]) == pytest.approx(math.exp(2) / (math.exp(2) + math.e + 1))


def test_entropy_by_hand():
    half_quarter_quarter = [math.log(0.5), math.log(0.25), math.log(0.25)]  # H = 0.5 ln 2 + 2 x 0.25 ln 4 = 1.5 ln 2
    assert confidence('entropy', half_quarter_quarter) == pytest.approx(1 - 1.5 * math.log(2) / math.log(3))
    assert confidence('entropy', [0.0, 0.0, 0.0, 0.0]) == pytest.approx(0.0, abs=1e-6)  # uniform: the least sure
    assert confidence('entropy', [50.0, 0.0, 0.0, 0.0]) == pytest.approx(1.0, abs=1e-6)  # one token: the surest
    sure, unsure = confidence('entropy', [3.0, 0.0, 0.0]), confidence('entropy', [1.0, 0.0, 0.0])
    assert sure > unsure  # sharper is more confident


def test_the_gates_exit_probability_by_hand():
    for reads, scale, features in (('norm', 1.0, [3 / math.sqrt(12.5), 4 / math.sqrt(12.5)]),  # RMS of (3, 4): sqrt(12.5)
                                   ('raw', 5.0, [0.6, 0.8])):  # over its one constant
        gate = exits.ExitGate(2, reads, scale)
        with torch.no_grad():
            gate.linear.weight.copy_(torch.tensor([[1.0, -2.0]]))
            gate.linear.bias.fill_(0.5)
        logit = features[0] * 1.0 - 2.0 * features[1] + 0.5
        h = torch.tensor([3.0, 4.0])
        assert gate(h).item() == pytest.approx(1 / (1 + math.exp(-logit)), rel=1e-6), reads
        assert exits.gate_criterion('gate', gate)(h, None).item() == pytest.approx(1 / (1 + math.exp(-logit)), rel=1e-6)


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


@pytest.mark.parametrize('loss_path', ['fused', 'plain'])
def test_a_real_target_0_is_scored_and_only_minus_1_is_ignored(loss_path):
    # the no-grad scoring path (evaluation's depth losses, a forward under no_grad): token id 0 is a
    # byte like any other; the ignore index is -1
    V, T = 16, 8
    torch.manual_seed(0)
    model = LoopedGPT(LoopedGPTConfig(vocab_size=V, block_size=T, n_layer=1, n_head=2, n_embd=16, n_loops=2,
                                      dropout=0.0, readout='raw', init_std=0.3)).eval()
    model.loss_path = loss_path
    g = torch.Generator().manual_seed(3)
    x = torch.randint(0, V, (2, T), generator=g)
    y = torch.randint(1, V, (2, T), generator=g)
    y[0, :3] = 0  # real targets 0, at known places
    y[1, 5:] = -1  # ignored
    with torch.no_grad():
        logits, _ = model(x)  # the last loop's
        logp = F.log_softmax(logits.double(), dim=-1)
        by_hand = -logp.gather(-1, y.clamp(min=0)[..., None]).squeeze(-1)  # (B, T)
        keep = y >= 0
        per_token = model.depth_losses(model.hidden_states(x)[1:], y)[-1].view(2, T)
        _, loss = model(x, y, n_loops=2)
        terminal = by_hand[keep].mean().item()
        perloop = model.depth_losses(model.hidden_states(x)[1:], y)
    assert per_token[0, :3].tolist() == pytest.approx(by_hand[0, :3].tolist(), rel=1e-5)  # target 0: scored
    assert min(per_token[0, :3].tolist()) > 0.1
    assert per_token[1, 5:].tolist() == [0.0, 0.0, 0.0]  # -1: not scored
    assert per_token[keep].mean().item() == pytest.approx(terminal, rel=1e-5)
    # the per-loop loss divides by the tokens scored: 13 of the 16 in each loop, target 0 among them
    assert loss.item() == pytest.approx((perloop.sum() / (2 * keep.sum())).item(), rel=1e-5)
    assert keep.sum().item() == 13


def test_the_per_loop_norm_and_angular_change_by_hand():
    # two tokens, H_0 -> H_1 -> H_2 in the plane: token 0 turns 45 degrees then 135 more, token 1 only grows
    from model import token_diagnostics
    states = [torch.tensor([[1.0, 0.0], [0.0, 1.0]]), torch.tensor([[1.0, 1.0], [0.0, 3.0]]),
              torch.tensor([[-1.0, 0.0], [0.0, 6.0]])]
    got = token_diagnostics(None, [h[None] for h in states], torch.zeros(1, 2, dtype=torch.long), radial=False)
    s = 1 / math.sqrt(2)
    assert torch.allclose(got['norm'], torch.tensor([[math.sqrt(2), 3.0], [1.0, 6.0]]))  # (K, tokens)
    assert torch.allclose(got['angular'], torch.tensor([[1 - s, 0.0], [1 + s, 0.0]]), atol=1e-7)  # 1 - cos(H_k, H_k-1)


def test_perplexity_by_hand_with_its_overflow_and_nan():
    from report import perplexity
    assert perplexity(0.0) == 1.0 and perplexity(1.0) == pytest.approx(math.e) and perplexity(699.0) == math.exp(699)
    assert perplexity(700.0) == math.inf and perplexity(1e9) == math.inf  # (exp overflows: inf, not an error)
    assert math.isnan(perplexity(float('nan')))  # a NaN loss stays NaN, not inf
