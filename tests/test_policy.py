"""
The policies that lossless checks cannot see, observed. Speculative decoding emits the K-loop text
whatever it drafts, so a wrong draft rule (an inverted draft_stop, drafts from the wrong loop) passes
every token-for-token check: here what was drafted (the loops each draft ran, the tokens proposed,
how many were kept) is checked against the j-loop and K-loop models by hand. An exit's loop is checked
against its criterion written out here, not the registry's. The parity rows hold both bits and both
targets, each the running XOR by hand (all-zero strings pass every other parity check), and
train.py's draw of rows reaches every row.

    python -m pytest -q tests/test_policy.py
"""

import math

import numpy as np
import pytest
import torch
from torch.nn import functional as F

import data
from beyond import decoder, parity
from beyond.decoder import decode, generate, new_cache
from data import Rows, load_rows, train_batches
from test_decoder import K, T, between, head_logits, masked_states, tiny, tokens


# ---------------------------------------------------------------------------------------
# speculative decoding: what was drafted, by hand

def confidence_by_hand(model, seq, j, criterion):
    """Loop j's confidence at the last token of seq, and the j-loop model's greedy token there:
    the top probability ('max_prob'), or 1 - ||u_j - u_{j-1}|| / 2 with u = H / ||H|| ('angular')."""
    with torch.no_grad():
        states = model.hidden_states(torch.tensor([seq]), j)
        h, before = states[j][0, -1], states[j - 1][0, -1]
        logits = head_logits(model, h)
    if criterion == 'max_prob':
        conf = F.softmax(logits, -1).max().item()
    else:
        conf = 1 - (h / h.norm() - before / before.norm()).norm().item() / 2
    return conf, int(logits.argmax())


def draft_chain(model, seq, j, g, criterion, stop=0.0):
    """The greedy drafts by hand: the j-loop model's token, one after the other, while loop j's
    confidence is at least stop (up to g). Returns (drafts, the confidence at each position looked at)."""
    seq, drafts, confs = list(seq), [], []
    while len(drafts) < g:
        conf, tok = confidence_by_hand(model, seq, j, criterion)
        confs.append(conf)
        if conf < stop:
            break
        drafts.append(tok)
        seq.append(tok)
    return drafts, confs


# (criterion, init_std, j, g, m): drafting stops after m < g drafts, at a confidence below every one before it
SPECULATION = [('max_prob', 0.2, 1, 4, 2), ('max_prob', 0.3, 2, 4, 3), ('angular', 0.3, 2, 5, 4)]


@pytest.mark.parametrize('criterion,init_std,j,g,m', SPECULATION)
def test_a_speculative_pass_drafts_the_j_loop_tokens_up_to_the_draft_stop_and_keeps_those_k_loops_agree_with(
        monkeypatch, criterion, init_std, j, g, m):
    model = tiny(readout='raw', init_std=init_std)
    x = tokens(B=1)
    base = x[0, :5].tolist()  # 4 cached tokens and the newest, not yet run
    free, confs = draft_chain(model, base, j, g, criterion)
    # draft_stop between the m-th draft's confidence and every one before it: the rule drafts m tokens;
    # a rule inverted (stop where sure) drafts none, one that ignores it g
    stop = (confs[m] + min(confs[:m])) / 2
    assert min(confs[:m]) - confs[m] > 1e-3  # (no confidence near the stop: float noise cannot decide)
    drafts, _ = draft_chain(model, base, j, g, criterion, stop)
    assert drafts == free[:m]
    # the verify by hand: the K-loop model's greedy token after each accepted prefix
    target = [confidence_by_hand(model, base + drafts[:i], K, 'max_prob')[1] for i in range(m + 1)]
    accepted = next((i for i in range(m) if drafts[i] != target[i]), m)
    assert accepted < m  # some draft is rejected: the acceptance count is not the draft count
    emitted = drafts[:accepted] + [target[accepted]]

    loops, proposed = [], []
    real_loops, real_accept = decoder.Stepper.loops, decoder.accept_drafts
    monkeypatch.setattr(decoder.Stepper, 'loops', lambda self, x, t0, cache, first, last, *a, **kw: loops.append(
        (first, last, x.size(1))) or real_loops(self, x, t0, cache, first, last, *a, **kw))
    monkeypatch.setattr(decoder, 'accept_drafts', lambda p, q, d: proposed.append((q, d)) or real_accept(p, q, d))
    stepper = decoder.Stepper(model)
    with torch.no_grad():
        cache = new_cache(model, 1)
        decode(model, x[:, :4], cache, stepper=stepper)
        loops.clear()
        new, drafted, n_accepted = decoder.speculative_pass(model, x[:, 4:5], cache, j, g, 1.0, 1, stop, criterion,
                                                            stepper)
    assert drafted == m and n_accepted == accepted and new[0].tolist() == emitted
    (q, proposals), = proposed
    assert proposals.tolist() == drafts and q.argmax(-1).tolist() == drafts  # (top_k=1: q one-hot at the draft)
    # each position drafted ran loops 1..j alone (a criterion that reads loop j-1 too: 1..j-1, then j), the
    # one that stopped drafting too; then one verify pass ran loops j+1..K over all of them
    draft = [(0, j, 1)] if criterion == 'max_prob' else [(0, j - 1, 1), (j - 1, j, 1)]
    assert loops == draft * (m + 1) + [(j, K, m + 1)]
    assert cache.length == 5 + accepted  # the newest token and the accepted drafts stay cached


def test_a_draft_stop_below_every_confidence_drafts_every_token_it_may_and_one_above_none(monkeypatch):
    # generate's totals: a stop no confidence is below drafts as many as a pass may (draft_tokens, less
    # near the end); a stop over 1, none. Inverted, the two swap
    model = tiny(readout='raw', init_std=0.2)
    prompt = tokens(B=1, n=4)
    fixed, _, _ = generate(model, prompt, 8, top_k=1)
    may = []  # how many each pass may draft
    real = decoder.speculative_pass
    monkeypatch.setattr(decoder, 'speculative_pass', lambda model, last, cache, j, g, *a: may.append(g) or real(
        model, last, cache, j, g, *a))
    for stop, drafts_all in ((1e-30, True), (1.5, False)):
        may.clear()
        out, _, stats = generate(model, prompt, 8, top_k=1, draft_loops=1, draft_tokens=2, draft_stop=stop)
        assert torch.equal(out, fixed)  # (lossless either way: the text cannot tell them apart)
        assert stats['passes'] == len(may) and stats['drafted'] == (sum(may) if drafts_all else 0), (stop, may)
        assert max(may) == 2
        # the first new token comes from the prefill; each pass then emits its accepted drafts and one more
        assert 1 + stats['passes'] + stats['accepted'] == 8


# ---------------------------------------------------------------------------------------
# early exit: the loop each token exits at, against its criterion written out here

def conf_by_hand(criterion, model, h, before):
    """A token's confidence after a loop from its state h and the state before it (C,) each."""
    p = F.softmax(head_logits(model, h).double(), -1)
    if criterion == 'max_prob':
        return p.max().item()
    if criterion == 'entropy':
        return 1 + (p * p.log()).sum().item() / math.log(p.numel())
    if criterion == 'angular':
        return 1 - (h / h.norm() - before / before.norm()).norm().item() / 2
    return math.exp(-(h - before).norm().item() / h.norm().item())  # 'latent'


def exits_by_hand(model, seq, threshold, criterion):
    """Token by token, the loop each token of seq (L,) exits at and its logits there: the first loop
    before K whose confidence exceeds the threshold (else K), on the forward where every earlier token is
    frozen at its own exit (what projected stand-ins give the tokens after it: test_decoder.py)."""
    exit_at = torch.full((1, len(seq)), K)
    with torch.no_grad():
        for t in range(len(seq)):
            states = masked_states(model, seq[None], exit_at)
            exit_at[0, t] = next((k for k in range(1, K)
                                  if conf_by_hand(criterion, model, states[k][0, t], states[k - 1][0, t]) > threshold), K)
        states = masked_states(model, seq[None], exit_at)
        logits = torch.stack([head_logits(model, states[k][0, t]) for t, k in enumerate(exit_at[0].tolist())])
    return exit_at[0], logits


@pytest.mark.parametrize('criterion', ['max_prob', 'entropy', 'angular', 'latent'])
def test_generate_exits_each_token_where_its_criterion_by_hand_first_exceeds_the_threshold(criterion):
    model = tiny(readout='raw', init_std=0.1)
    prompt, n_new = tokens(B=1, n=4), T - 5  # (no window restart: every position is run once)
    with torch.no_grad():  # thresholds between loop-1 confidences, and between loop-2 ones, of the fixed-K text
        seq = generate(model, prompt, n_new, top_k=1)[0][0, :-1]
        states = model.hidden_states(seq[None], 2)
        thresholds = [between(torch.tensor([conf_by_hand(criterion, model, states[k][0, t], states[k - 1][0, t])
                                            for t in range(len(seq))])) for k in (1, 2)]
    seen = []
    for threshold in thresholds:
        out, loops, _ = generate(model, prompt, n_new, top_k=1, exit_threshold=threshold, criterion=criterion,
                                 stand_in='project')
        want_loops, logits = exits_by_hand(model, out[0, :-1], threshold, criterion)
        # new token i is read out at position 3 + i, at that token's exit loop; greedy: its top logit there
        assert loops[0].tolist() == want_loops[3:].tolist(), threshold
        assert out[0, 4:].tolist() == logits[3:].argmax(-1).tolist(), threshold
        seen.append(set(loops[0].tolist()))
    assert any(len(s) > 1 for s in seen), seen  # the threshold decides something: tokens of one text exited apart


# ---------------------------------------------------------------------------------------
# the parity rows: both bits, both targets, each target the XOR so far by hand

def running_xor(x):
    """Each row's targets by hand: -1 at bos and the pads, the XOR of the bits so far at each bit."""
    y = np.full(x.shape, -1)
    for r, row in enumerate(x):
        acc = 0
        for i, tok in enumerate(row[1:], start=1):
            if tok == parity.VOCAB['pad']:
                break
            acc ^= int(tok)
            y[r, i] = acc
    return y


def assert_balanced(values, what):
    """Uniform 0/1 values: each within 6 binomial standard deviations of half (n p (1 - p) = n / 4)."""
    n, ones = len(values), int(np.sum(values))
    assert set(np.unique(values).tolist()) == {0, 1}, what
    assert abs(ones - n / 2) < 6 * math.sqrt(n) / 2, (what, ones, n)


def test_parity_rows_hold_both_bits_and_both_targets_each_the_running_xor_by_hand(tmp_path):
    x, y = parity.parity_rows(np.random.default_rng(0), 500, list(range(1, 9)), 9)
    lengths = (x[:, 1:] != parity.VOCAB['pad']).sum(1)
    assert set(lengths.tolist()) == set(range(1, 9))  # every length drawn
    assert np.array_equal(y, running_xor(x))
    bits, targets = x[:, 1:][y[:, 1:] >= 0], y[y >= 0]
    assert_balanced(bits, 'input bits')  # both bits, half each: all-zero strings would give all-zero targets
    assert_balanced(targets, 'targets')  # the XOR of uniform bits is uniform
    # the files python -m beyond.parity writes: the same in every split
    parity.main(['--out_dir', str(tmp_path), '--seed', '5', '--train_rows', '200', '--val_rows', '40',
                 '--test_rows', '40', '--train_lengths', '6', '--val_lengths', '10', '--test_lengths', '4-12'])
    for split in ('train', 'val', 'test'):
        rows = load_rows(str(tmp_path), split)
        assert np.array_equal(rows.y, running_xor(rows.x)), split
        assert_balanced(rows.x[:, 1:][rows.y[:, 1:] >= 0], f'{split} bits')
        assert_balanced(rows.y[rows.y >= 0], f'{split} targets')


# ---------------------------------------------------------------------------------------
# train.py's draw of rows: every row can be drawn

def rows_drawn(rows, iters=20, batch_size=16, n_micro=2):
    """How often each row is drawn in the first iters iterations of rank 0 (seed 1)."""
    counts = np.zeros(len(rows.x), dtype=int)
    for it in range(iters):
        xs, _ = train_batches(rows, it, 0, seed=1, n_micro=n_micro, batch_size=batch_size, block_size=3, device='cpu')
        np.add.at(counts, xs[..., 0].flatten().numpy(), 1)
    return counts


class ShortDraw:
    """A draw that never reaches the last row: integers(low, high) drawn below high - 1."""
    def __init__(self, rng):
        self.rng = rng

    def integers(self, low, high, size=None):
        return self.rng.integers(low, high - 1, size=size)


def test_over_enough_draws_every_row_is_drawn(monkeypatch):
    n_rows = 10
    ids = np.repeat(np.arange(n_rows, dtype=np.uint8)[:, None], 3, axis=1)  # row i holds i: a drawn row names itself
    rows = Rows(x=ids, y=ids.astype(np.int16))
    counts = rows_drawn(rows)
    # 640 uniform draws of 10 rows: a row is missed with probability 0.9^640 ~ 5e-30, and its count is
    # Binomial(640, 0.1), 64 +- 7.6: within 6 standard deviations of 64 for any seed but astronomically few
    draws, p = counts.sum(), 1 / n_rows
    assert draws == 640 and (counts > 0).all()
    assert (np.abs(counts - draws * p) < 6 * math.sqrt(draws * p * (1 - p))).all(), counts
    # the control: the same check on a rule one row short fails it
    real = np.random.default_rng
    monkeypatch.setattr(data.np.random, 'default_rng', lambda seed: ShortDraw(real(seed)))
    short = rows_drawn(rows)
    assert short[-1] == 0 and (short[:-1] > 0).all()
