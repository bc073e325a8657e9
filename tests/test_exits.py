"""
The exit-criteria registry (beyond/exits.py): adding a criterion is one entry, and every reader
(the decoder, speculation's draft stop, eval_depth.py's rows, python -m beyond.sample's settings) takes it by name.
Each criterion's confidence and the gate's exit probability by hand, and a confident gate exits.

    python -m pytest -q tests/test_exits.py
"""

import math

import pytest
import torch
from torch.nn import functional as F

import beyond.sample as sample_py
from beyond import exits
from beyond.decoder import decode, generate, new_cache
from beyond.eval_decode import exit_loops, exit_rows
from configurator import UserError
from model import LoopedGPT, LoopedGPTConfig
from test_model import D, batch, tiny
from conftest import between, exit_confidence, head_logits, masked_states, run_script

V, T, K = 64, 12, 3


@pytest.fixture
def margin(monkeypatch):
    """A new criterion, added as a user adds one: the one @criterion entry (here on a copy of the
    registry, so other tests see the registry as shipped)."""
    monkeypatch.setattr(exits, 'CRITERIA', dict(exits.CRITERIA))

    @exits.criterion('margin', readout=True, about='the top probability minus the second')
    def top_margin(h, before, logits, prev):
        top2 = F.softmax(logits.float(), dim=-1).topk(2, dim=-1).values
        return top2[..., 0] - top2[..., 1]
    return top_margin


def test_a_registered_criterion_is_taken_by_name_everywhere(margin):
    torch.manual_seed(0)
    model = LoopedGPT(LoopedGPTConfig(vocab_size=V, block_size=16, n_layer=1, n_head=2, n_embd=32, n_loops=K,
                                      dropout=0.0, readout='raw', init_std=0.1)).eval()
    x = torch.randint(0, V, (2, T), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        states = model.hidden_states(x)
        conf = exit_rows(model, states, K)['conf_margin']  # eval_depth.py's rows hold it by name
        assert conf.shape == (K, 2 * T)
        threshold = between(conf[0])  # about half stop after loop 1 (between two confidences, on none)
        logits, loops = decode(model, x, new_cache(model, 2), threshold, 'margin', 'project')
        # the pattern it implies on the forward with that exit pattern (frozen tokens, projected stand-ins)
        masked = masked_states(model, x, loops)
        by_hand = torch.stack([margin(None, None, head_logits(model, masked[k]), None) for k in range(1, K + 1)])
    assert 1 < len(set(loops.flatten().tolist()))
    assert torch.equal(loops.flatten(), exit_loops(by_hand.flatten(1), threshold) + 1)
    # speculative decoding's draft stop and python -m beyond.sample's settings read it too
    with torch.inference_mode():
        out, _, stats = generate(model, x[:1, :4], 6, top_k=1, draft_loops=1, draft_tokens=2, draft_stop=0.3,
                                 criterion='margin')
    assert out.shape == (1, 10) and stats['passes'] > 0
    sample_py.check_settings(dict(sample_py.SETTINGS, exit_criterion='margin'))


def test_an_unknown_name_is_one_line_naming_the_setting_and_the_names_there_are():
    # resolve checks the name before it looks for a gate file: a typo is named as a criterion, not as a missing gate
    for call in (lambda: exits.resolve('maxprob'), lambda: exits.check_name('maxprob')):
        with pytest.raises(UserError, match=r"^exit criterion: unknown exit criterion 'maxprob'; use .*max_prob"):
            call()
    with pytest.raises(UserError, match=r"^--criteria: unknown exit criterion"):
        exits.check_name('maxprob', '--criteria')


def test_names_resolve_in_one_place():
    assert exits.get('angular') is exits.CRITERIA['angular'] and not exits.get('angular').readout
    assert exits.get('converge').previous and not exits.get('max_prob').previous
    for good in ('gate', 'gate-raw'):
        assert exits.check_name(good) == good
    for bad in ('margin', 'gates', 'gate-'):  # not registered, and not a gate's name
        with pytest.raises(UserError, match='unknown exit criterion'):
            exits.check_name(bad, 'exit_criterion')
    with pytest.raises(UserError, match="python -m beyond.exit_gate --out_dir=nowhere --name=gate-raw"):
        exits.resolve('gate-raw', 'nowhere', None)  # a gate's name needs its trained file


def test_the_listed_names_are_the_ones_a_user_types():
    # names() is what --help and every unknown-criterion message list: the registered criteria, each as it is
    # typed, then the learned gates' names, each accepted as typed, and the command that trains one
    import re
    builtin, gates = exits.names().split(', or a learned gate ')
    assert builtin.split(', ') == list(exits.CRITERIA)
    quoted = re.findall(r"'([^']*)'", gates)
    assert quoted == ['gate', 'gate-raw'] and all(exits.check_name(n) == n for n in quoted)
    assert gates.endswith('...: python -m beyond.exit_gate)')


# -----------------------------------------------------------------------------
# the criteria and the gate's exit probability, by hand (the decoder's equivalence tests run the same code on
# both sides)

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


def test_a_gate_made_without_reads_reads_the_normalized_state():
    # reads' default is 'norm' (Ouro's gate): the direction only, so a state and ten times it exit alike, and the
    # probability is the one by hand of (3, 4) over its RMS sqrt(12.5)
    gate = exits.ExitGate(2)
    with torch.no_grad():
        gate.linear.weight.copy_(torch.tensor([[1.0, -2.0]]))
        gate.linear.bias.fill_(0.5)
    logit = (3.0 - 2.0 * 4.0) / math.sqrt(12.5) + 0.5
    h = torch.tensor([3.0, 4.0])
    assert gate(h).item() == pytest.approx(1 / (1 + math.exp(-logit)), rel=1e-6)
    assert gate(10 * h).item() == pytest.approx(gate(h).item(), rel=1e-6)


@pytest.mark.parametrize('dtype', [torch.bfloat16, torch.float16])
def test_the_gate_is_float32_whatever_autocast_is_on(dtype):
    # its threshold must not move with the precision the loops run in: the same probability, bit for bit, in float32,
    # for a state the loops made under autocast (float32, the residual stream) and for one in the low precision
    torch.manual_seed(0)
    for reads in ('norm', 'raw'):
        gate = exits.ExitGate(64, reads, scale=3.0)
        torch.nn.init.normal_(gate.linear.weight)
        h = 3 * torch.randn(5, 64)
        want = gate(h)
        with torch.autocast('cpu', dtype=dtype):
            got, low = gate(h), gate(h.to(dtype))
        assert got.dtype == low.dtype == torch.float32
        assert torch.equal(got, want), reads
        assert torch.equal(low, gate(h.to(dtype).float())), reads  # (the low-precision state read in float32)
        # the gate's product in the low precision moves it: the check can tell
        assert not torch.equal(torch.sigmoid(F.linear(gate.features(h).to(dtype), gate.linear.weight.to(dtype),
                                                      gate.linear.bias.to(dtype)).squeeze(-1)).float(), want)


def test_the_readout_free_criteria_by_hand():
    h = torch.tensor([3.0, 4.0])
    def conf(h, before, c):
        return exits.get(c)(h, before)
    assert conf(h, 1000 * h, 'angular').item() == pytest.approx(1.0)  # scale-free: no turn, whatever the sizes
    assert conf(h, -h, 'angular').item() == pytest.approx(0.0, abs=1e-7)  # turned around: the largest step
    assert conf(h, torch.tensor([-4.0, 3.0]), 'angular').item() == pytest.approx(1 - math.sin(math.pi / 4))  # 90 degrees
    tiny_turn = torch.tensor([1.0, 1e-4])  # 1 - cos = 5e-9 rounds to 0 in float32; the step does not
    assert conf(tiny_turn, torch.tensor([1.0, 0.0]), 'angular').item() == pytest.approx(1 - 5e-5, abs=1e-7)
    assert conf(h, torch.zeros(2), 'latent').item() == pytest.approx(math.exp(-1))  # ||H_1 - H_0|| / ||H_1|| = 1
    assert conf(h, 0.9 * h, 'latent').item() == pytest.approx(math.exp(-0.1))  # radial growth counts for latent
    assert conf(1e4 * h, 0.9e4 * h, 'latent').item() == pytest.approx(math.exp(-0.1))  # relative: scale-free too
    assert not exits.get('angular').readout and not exits.get('latent').readout  # decided without a readout
    with pytest.raises(UserError, match='unknown exit criterion'):
        conf(h, h, 'margin')


def test_the_convergence_criterion_on_hand_made_distributions():
    p = torch.tensor([0.5, 0.25, 0.25]).log()
    assert exit_confidence(p, 'converge', p.clone()).item() == pytest.approx(1.0)  # nothing changed
    q = torch.tensor([0.25, 0.5, 0.25]).log()
    kl = 0.5 * math.log(2) + 0.25 * math.log(0.5)  # KL(p || q), by hand
    assert exit_confidence(p, 'converge', q).item() == pytest.approx(math.exp(-kl))
    assert exit_confidence(p, 'converge', None).item() == 0.0  # loop 1: nothing to compare with
    assert exit_confidence(p + 3.0, 'converge', p).item() == pytest.approx(1.0)  # logits, not probabilities
    with pytest.raises(UserError, match='converge'):  # (the error names the criteria there are)
        exits.get('margin')


# -----------------------------------------------------------------------------
# the learned gate's sign: a confident gate exits

def gate_of(bias, weight=None):
    gate = exits.ExitGate(D, 'norm')
    with torch.no_grad():
        gate.linear.bias.fill_(bias)
        if weight is not None:
            gate.linear.weight.copy_(weight)
    return gate


def test_a_confident_gate_exits_and_an_unsure_one_runs_every_loop():
    model = tiny(n_layer=1, readout='raw', init_std=0.1)
    x, _ = batch(B=2)
    with torch.no_grad():
        _, sure = decode(model, x, new_cache(model, 2), 0.5, exits.gate_criterion('gate', gate_of(10.0)), 'project')
        _, unsure = decode(model, x, new_cache(model, 2), 0.5, exits.gate_criterion('gate', gate_of(-10.0)), 'project')
    assert (sure == 1).all() and (unsure == model.config.n_loops).all()


def test_a_resolved_name_is_the_criterion_of_that_name_a_learned_gate_too(tmp_path):
    # resolve(name) is the Criterion the name means, named as typed: a registered one's name is its key, and a
    # learned gate's criterion carries the gate file's name ('gate-raw' from <folder>/gate-raw.pt)
    model = tiny()
    for name in exits.CRITERIA:
        assert exits.resolve(name).name == name
    exits.save_gate(str(tmp_path / 'gate-raw.pt'), exits.ExitGate(D, 'raw'), model, {})
    gate = exits.resolve('gate-raw', str(tmp_path), model)
    assert gate.name == 'gate-raw' and gate.gate.reads == 'raw' and not gate.readout


def test_python_m_beyond_exits_lists_each_registered_criterion_by_name_with_what_it_reads():
    r = run_script('beyond/exits.py')
    assert r.returncode == 0, r.stderr
    rows = [line.split(' | ') for line in r.stdout.splitlines() if line.startswith('| ') and '---' not in line][1:]
    listed = {row[0][2:]: row[1] for row in rows}
    assert set(listed) == set(exits.CRITERIA) | {'gate, gate-<name>'}
    for name, c in exits.CRITERIA.items():  # (each Criterion's own name: test_a_resolved_name_is_the_criterion_...)
        assert listed[name] == ('H_k, H_k-1' if not c.readout else
                                'the readout' + (", and the previous loop's" if c.previous else ''))


def test_a_gate_is_named_gate_or_gate_dash_and_a_name_of_its_own_of_any_length():
    # is_gate: 'gate', or 'gate-' followed by at least one character (a one-letter name included); nothing else
    assert exits.is_gate('gate') and exits.is_gate('gate-r') and exits.is_gate('gate-raw')
    assert not any(exits.is_gate(n) for n in ('gate-', 'gates', 'gater', 'max_prob', 'agate', ''))
