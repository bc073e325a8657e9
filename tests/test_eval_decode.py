"""
beyond/eval_decode.py, the decoding studies eval_depth.py's evaluation takes in (python -m beyond.eval_decode):
early exit teacher-forced and causal with its stand-ins, the oracle's frontier, calibrated halting, speculative
decoding's acceptance and its predicted and timed speed-up, and the retiming of stored results. On the two tiny
runs and their evaluation (conftest's runs and evaluated), and by hand.

    python -m pytest -q tests/test_eval_decode.py
"""

import json
import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from beyond import eval_decode, exits
from conftest import evaluate
from data import Scoring, score_windows
from model import LoopedGPT
from report import mean_std


# -----------------------------------------------------------------------------
# what the evaluation reports: every criterion's exits and frontier, the stand-ins' error, speculative acceptance;
# the exits at the thresholds' extremes

def test_stand_ins_speculative_acceptance_and_calibration_are_reported(evaluated):
    _, _, results = evaluated
    for run in results:
        causal = [e for e in run['early_exit'] if e['mode'] == 'causal']
        assert {e['stand_in'] for e in causal} == {'copy', 'project'}
        assert {e['criterion'] for e in run['early_exit']} == {'max_prob', 'entropy', 'converge', 'angular', 'latent'}
        front = run['exit_frontier']  # every criterion's teacher-forced frontier, against the oracle's
        assert set(front['teacher_forced']) == {'max_prob', 'entropy', 'converge', 'angular', 'latent'}
        for at in front['at'].values():
            assert all(a['loops'] >= at['oracle']['loops'] - 1e-9 for a in at.values())  # nothing beats the bound
        assert set(run['stand_in_error']) == {'copy', 'project'}
        spec = run['speculative']  # loop j's acceptance by loop K, j = 1..K-1
        K = run['trained_K']
        assert len(spec['greedy_agree']) == len(spec['sample_accept']) == K - 1
        assert all(0 <= a <= 1 for a in spec['greedy_agree'] + spec['sample_accept'])


def test_early_exit_thresholds_at_the_extremes(evaluated):
    _, _, results = evaluated
    for run in results:  # an exit at loop k reads out as the model run with k loops
        K = run['trained_K']
        for mode in ('teacher_forced', 'causal'):
            for criterion in ('max_prob', 'entropy'):
                exits = {e['threshold']: e for e in run['early_exit'] if e['criterion'] == criterion and e['mode'] == mode}
                assert exits[1.0]['mean_loops'] == K  # no confidence exceeds 1: every token runs all loops
                assert exits[1.0]['ppl'] == pytest.approx(run['per_K'][K - 1]['ppl'], rel=1e-4)
                assert exits[1e-9]['mean_loops'] == 1  # every token is confident enough at loop 1
                assert exits[1e-9]['ppl'] == pytest.approx(run['per_K'][0]['ppl'], rel=1e-4)


# -----------------------------------------------------------------------------
# early exit by hand: teacher-forced, the oracle's frontier, calibrated halting, the stand-ins' distance

def test_teacher_forced_exit_picks_the_first_confident_loop():
    # 3 loops, 5 tokens: confidences and per-loop CE chosen so that every choice shows
    conf = torch.tensor([[0.9, 0.1, 0.1, 0.6, 0.5],
                         [0.2, 0.8, 0.1, 0.9, 0.7],
                         [0.3, 0.3, 0.2, 0.1, 0.1]])
    ce = torch.tensor([[1.0, 2.0, 3.0, 4.0, 5.0],
                       [10.0, 20.0, 30.0, 40.0, 50.0],
                       [100.0, 200.0, 300.0, 400.0, 500.0]])
    out = eval_decode.teacher_forced_exit({'conf_max_prob': conf, 'conf_entropy': conf, 'conf_converge': conf, 'ce': ce},
                                          [0.5], 3)
    # token 0 exits at loop 1, token 1 at loop 2, token 2 never (last loop), token 3 at loop 1,
    # token 4 at loop 2: a confidence equal to the threshold does not exceed it
    assert out[0]['mean_loops'] == pytest.approx((1 + 2 + 3 + 1 + 2) / 5)
    assert out[0]['loss'] == pytest.approx((1.0 + 20.0 + 300.0 + 4.0 + 50.0) / 5)


def test_the_oracle_frontier_by_hand():
    # 3 loops, 4 tokens. Token 0 is best at loop 1, token 1 gains 1 nat a loop, token 2 gains
    # 0.1 nats at loop 2 only, token 3 is best at loop 2 and worse at loop 3
    ce = torch.tensor([[1.0, 3.0, 2.0, 2.0],
                       [1.5, 2.0, 1.9, 1.0],
                       [2.0, 1.0, 1.9, 1.5]])
    got = eval_decode.oracle_frontier(ce, (0.01, 2.0, 20.0))
    # mu = 0.01: a loop costs more than any CE saved, all at loop 1
    # mu = 2: token 1 saves 2 x 1 = 2 per loop at the cost of 1: loop 3; token 2 saves 0.2 < 1: loop 1;
    #         token 3 saves 2 at loop 2; token 0 stays at 1
    # mu = 20: token 2 saves 2 > 1 at loop 2, and loop 3 saves it nothing more
    assert got['mean_loops'] == pytest.approx([1.0, (1 + 3 + 1 + 2) / 4, (1 + 3 + 2 + 2) / 4])
    assert got['ppl'] == pytest.approx([math.exp(8 / 4), math.exp((1 + 1 + 2 + 1) / 4), math.exp((1 + 1 + 1.9 + 1) / 4)])
    # the frontier's loops at a perplexity limit, and the gap of a criterion to the oracle's
    assert eval_decode.loops_at(got, math.exp(5 / 4)) == 1.75 and eval_decode.loops_at(got, 1.0) is None
    conf = torch.tensor([[0.9, 0.1, 0.1, 0.1], [0.0, 0.1, 0.9, 0.9], [0.0, 0.0, 0.0, 0.0]])  # exits at 1, 3, 2, 2
    front = eval_decode.exit_frontiers({'ce': ce, 'conf_x': conf}, 3, targets=(0.01,), grid=(0.5, 1.0))
    assert front['full_ppl'] == pytest.approx(math.exp(6.4 / 4))
    assert front['teacher_forced']['x']['mean_loops'] == pytest.approx([2.0, 3.0])  # tau 0.5: 1, 3, 2, 2; tau 1: all 3
    x, oracle = front['at']['0.01']['x'], front['at']['0.01']['oracle']
    assert x['loops'] == 2.0 and x['oracle_gap'] == pytest.approx(2.0 - oracle['loops'])


def test_calibration_picks_the_fewest_loops_within_the_target(monkeypatch):
    # a made-up model whose causal-exit loss falls as the threshold rises: CE = 3 - tau, loops = 1 + 3 tau
    def fake_exit(ev, K, criterion, threshold, stand_in, windows=None, desc=''):
        n = sum(length for _, length in windows)
        tau = threshold if threshold > 0 else 1.0
        return torch.full((n,), 3.0 - tau), torch.full((n,), 1.0 + 3 * tau)
    monkeypatch.setattr(eval_decode, 'causal_exit', fake_exit)
    monkeypatch.setattr(eval_decode, 'decode_speed', lambda model, prompt, n, K, device, ctx, exit_threshold=0.0, **kw:
                        (100.0 / (1 + 3 * exit_threshold if exit_threshold else 4), 1.0, {}))
    data = np.arange(2000) % 50
    sc = Scoring(None, data, score_windows(2000, 100), 4, 'cpu', None)
    got = eval_decode.calibrate(sc, 4, [0.1, 0.01], ['copy', 'project'], 16, 'x')
    # ppl within 10% of full depth's exp(2): 3 - tau <= 2 + ln 1.1, tau >= 0.9047: the grid's 0.95;
    # within 1%: tau >= 0.99005, none of the grid (0.99 just misses): nothing exits
    n = len(exits.CRITERIA)  # (every criterion, with each stand-in)
    assert [(c['target'], c['threshold']) for c in got] == [(0.1, 0.95)] * 2 * n + [(0.01, 0.999)] * 2 * n
    assert [c['stand_in'] for c in got[:2 * n]] == ['copy'] * n + ['project'] * n
    for c in got:
        assert c['full_ppl'] == pytest.approx(math.exp(2.0)) and c['ppl'] <= (1 + c['target']) * c['full_ppl']
        assert c['calibration_tokens'] + c['heldout_tokens'] == 1999
        assert c['speedup'] == pytest.approx(4 / (1 + 3 * c['threshold']))

    # the limit is full depth's perplexity on the calibration half: here the held-back half is harder (CE 0.5
    # more at every threshold), and a limit from its perplexity would admit thresholds far below 0.95
    def harder_later(ev, K, criterion, threshold, stand_in, windows=None, desc=''):
        ce, loops = fake_exit(ev, K, criterion, threshold, stand_in, windows, desc)
        return (ce if windows[0][0] == 0 else ce + 0.5), loops
    monkeypatch.setattr(eval_decode, 'causal_exit', harder_later)
    got = eval_decode.calibrate(sc, 4, [0.1], ['copy'], 16, 'x')
    assert [c['threshold'] for c in got] == [0.95] * n
    assert got[0]['full_ppl_pick'] == pytest.approx(math.exp(2.0)) and got[0]['full_ppl'] == pytest.approx(math.exp(2.5))

    # causal exits need not improve with the threshold: here exiting everything after loop 1 is
    # as good as full depth, and middling thresholds are worse. The fewest loops win.
    def dip(ev, K, criterion, threshold, stand_in, windows=None, desc=''):
        n = sum(length for _, length in windows)
        ce = 2.0 if threshold < 0.05 else 2.5 if threshold < 0.995 else 2.0
        return torch.full((n,), ce), torch.full((n,), 1.0 if 0 < threshold < 0.05 else 1.0 + 3 * threshold)
    monkeypatch.setattr(eval_decode, 'causal_exit', dip)
    got = eval_decode.calibrate(sc, 4, [0.01], ['copy'], 16, 'x')
    assert [c['threshold'] for c in got] == [1e-6] * n


def test_stand_in_error_is_the_distance_between_loop_keys():
    # layer 0 of loop j reads H_{j-1}: its key there is computed straight from hidden_states. The
    # copied stand-in of a token exiting at loop j is that key; the projected one is layer 0's key
    # of H_j, the state it exits with
    torch.manual_seed(0)
    from model import LoopedGPTConfig
    model = LoopedGPT(LoopedGPTConfig(vocab_size=50, block_size=16, n_layer=2, n_head=2, n_embd=16, n_loops=3,
                                      dropout=0.0, init_std=0.02)).eval()
    data = np.arange(400) % 50
    sc = Scoring(model, data, score_windows(len(data), 16), 2, 'cpu', torch.no_grad())
    got = eval_decode.stand_in_error(sc, 3)
    x, _ = sc.first_batch()
    with torch.no_grad():
        hs = model.hidden_states(x, 3)
        attn = model.transformer.h[0]
        C = 16

        def key(h):  # (B, T, C) -> (B, nh, T, hs)
            return attn.attn.c_attn(attn.ln_1(h)).split(C, dim=2)[1].view(2, 16, 2, 8).transpose(1, 2)
        last = key(hs[2])
        for j in (1, 2):
            for stand_in, h in (('copy', hs[j - 1]), ('project', hs[j])):
                want = ((key(h) - last).norm(dim=-1) / last.norm(dim=-1)).mean().item()
                assert got[stand_in]['keys'][j - 1][0] == pytest.approx(want, rel=1e-5)
    assert got['project']['keys'][1][0] == pytest.approx(0.0, abs=1e-6)  # exiting at K-1: loop K's layer 0 is exact
    for stand_in in ('copy', 'project'):
        assert len(got[stand_in]['keys']) == 2 and len(got[stand_in]['values'][0]) == 2


def test_an_evaluation_copies_its_models_stack_once_and_a_new_model_gets_its_own(monkeypatch):
    # stepper_of: one Stepper (a copy of the stack, its weights cast) serves every exit pass and timed decode of
    # the model being evaluated; another model gets its own, and each model's exits are those a fresh Stepper gives
    from beyond import decoder
    from model import LoopedGPTConfig
    made = []

    class Counted(decoder.Stepper):
        def __init__(self, model, *a, **kw):
            made.append(model)
            super().__init__(model, *a, **kw)
    monkeypatch.setattr(eval_decode, 'Stepper', Counted)
    monkeypatch.setattr(eval_decode, 'STEPPER', [])
    data = np.arange(400) % 50
    for seed in (0, 1):
        torch.manual_seed(seed)
        model = LoopedGPT(LoopedGPTConfig(vocab_size=50, block_size=16, n_layer=2, n_head=2, n_embd=16, n_loops=3,
                                          dropout=0.0, init_std=0.5)).eval()
        sc = Scoring(model, data, score_windows(len(data), 16), 2, 'cpu', torch.no_grad())
        prompt = sc.first_batch()[0][:1, :8]
        for threshold in (0.2, 0.4):
            ce, loops = eval_decode.causal_exit(sc, 3, exits.CRITERIA['max_prob'], threshold, 'copy')
            want_ce, want_loops = [], []
            for x, y in sc.batches(sc.windows):  # by hand, with a Stepper of its own
                with torch.no_grad():
                    logits, used = decoder.decode(model, x, decoder.new_cache(model, x.size(0), 3, 'cpu'),
                                                  exit_threshold=threshold, criterion=exits.CRITERIA['max_prob'],
                                                  stand_in='copy', stepper=decoder.Stepper(model))
                want_ce.append(torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), y.flatten(),
                                                                 reduction='none'))
                want_loops.append(used.flatten())
            assert torch.allclose(ce, torch.cat(want_ce), atol=1e-5) and torch.equal(loops, torch.cat(want_loops))
            assert 1 < loops.float().mean() < 3  # (tokens exit at different loops: the stand-ins are read)
            eval_decode.decode_speed(model, prompt, 3, 3, 'cpu', torch.no_grad(), exit_threshold=threshold)
        assert len(made) == seed + 1 and made[seed] is model  # (one for each model's every pass and decode)


# -----------------------------------------------------------------------------
# speculative decoding: the acceptance and its predicted speed-up by hand, and the timed bench

def test_speculative_acceptance_and_its_predicted_speed_up_by_hand():
    p_j = torch.tensor([[0.7, 0.2, 0.1], [0.1, 0.6, 0.3]]).log()
    p_K = torch.tensor([[0.5, 0.4, 0.1], [0.2, 0.2, 0.6]]).log()
    agree, accept = eval_decode.acceptance(p_j, p_K)
    assert agree.tolist() == [1.0, 0.0]  # argmax 0 == 0; argmax 1 != 2
    assert accept.tolist() == pytest.approx([0.5 + 0.2 + 0.1, 0.1 + 0.2 + 0.3])  # sum of the minima
    # g = 1 draft kept with a = 0.5: 1.5 tokens a pass; with j = 1 of K = 4 a pass costs
    # 2 draft steps of 1/4 and a verify of 3/4 of a token: 1.5 / 1.25 = 1.2x
    assert eval_decode.tokens_per_pass(0.5, 1) == pytest.approx(1.5)
    assert eval_decode.predicted_speedup(0.5, 1, 1, 4) == pytest.approx(1.2)
    assert eval_decode.tokens_per_pass(1.0, 3) == 4.0


def test_the_speculative_summary_is_each_groups_best_bench_row_read_again():
    """The summary docs/speculative.md embeds: its best setting of each mode is the first row of that mode in the
    group's own bench table (sorted by speed-up), read back from the printed table; its share is speed-up over
    predicted, from the same printed cells."""
    bench = [dict(mode=m, j=j, g=n, draft_stop=stop, tok_per_s=t, fixed_tok_per_s=f, speedup=t / f, predicted_speedup=p,
                  accept_rate=0.9, tokens_per_pass=tp)
             for m, j, n, stop, t, f, p, tp in (('greedy', 1, 4, 0.0, 1878.0, 1166.0, 1.9, 4.57),
                                                ('greedy', 2, 3, 0.3, 1200.0, 1166.0, 1.2, 2.1),
                                                ('sample', 1, 6, 0.0, 2082.0, 1227.0, 2.2, 6.4),
                                                ('sample', 1, 2, 0.5, 1300.0, 1227.0, 1.1, 2.0))]
    g = dict(name='run', n=1, mean=dict(speculative=dict(greedy_agree=[0.959, 0.974, 0.987], sample_accept=[0.972, 0.981,
                                                                                                            0.991]),
                                        speculative_bench=bench))
    printed = eval_decode.speculative_table(g).splitlines()
    first = {m: next(l for l in printed if l.startswith(f'| {m} |')).strip('|').split('|') for m in ('greedy', 'sample')}
    row = eval_decode.speculative_summary([g, dict(g, mean={})]).splitlines()[-1].strip('|').split('|')   # (one row)
    for m, cell in (('greedy', row[3]), ('sample', row[4])):
        c = [x.strip() for x in first[m]]
        assert cell.strip() == f'({c[1]}, {c[2]}, {c[3]}): {c[4]} / {c[5]} = {c[6]}'
    assert [x.strip() for x in row[:3]] == ['run', '0.96 / 0.97 / 0.99', '0.97 / 0.98 / 0.99']
    assert row[5].strip() == '4.57' and row[6].strip() == f'{100 * 1878 / 1166 / 1.9:.0f}% / {100 * 2082 / 1227 / 2.2:.0f}%'
    assert eval_decode.speculative_summary([dict(g, mean={})]) == ''


def test_calibration_speculative_timing_and_retime(runs, tmp_path):
    # (a short split: calibration scores 13 thresholds x 3 criteria x 2 stand-ins on its first half)
    out = tmp_path / 'cal'
    r = evaluate(runs[0], '--calibrate=0.05', '--max_tokens=512', '--decode_tokens=8', '--speculative',
                 '--bench_iters=1', '--max_loops=2', '--criteria=max_prob,angular', '--out', out)
    assert 'calibrated halting' in r.stdout and '| greedy | 1 |' in r.stdout
    run = json.loads((out / 'results.json').read_text())['runs'][0]
    assert {c['stand_in'] for c in run['calibrated']} == {'copy', 'project'}
    assert {c['criterion'] for c in run['calibrated']} == {'max_prob', 'angular'}  # (--criteria: a readout's, a state's)
    for c in run['calibrated']:
        assert c['threshold'] in eval_decode.CALIBRATION_GRID + (1.0,)  # 1.0: nothing within the target exits
        assert c['speedup'] == pytest.approx(c['decode_tok_per_s'] / c['fixed_decode_tok_per_s'])
        assert 'retimed' not in c
    bench = run['speculative_bench']  # K=2: draft with loop 1, every g and draft_stop, greedy and sampled
    assert len(bench) == len(eval_decode.SPEC_GRID['g']) * len(eval_decode.SPEC_GRID['draft_stop']) * 2
    for row in bench:
        assert row['j'] == 1 and 0 <= row['accept_rate'] <= 1 and row['tokens_per_pass'] >= 1
        assert row['speedup'] == pytest.approx(row['tok_per_s'] / row['fixed_tok_per_s'])

    again = tmp_path / 'retimed'  # the calibrated picks timed again, nothing else recomputed
    evaluate('--from_results', out / 'results.json', '--retime', '--out', again)
    rerun = json.loads((again / 'results.json').read_text())['runs'][0]
    assert [c['threshold'] for c in rerun['calibrated']] == [c['threshold'] for c in run['calibrated']]
    for c in rerun['calibrated']:
        assert c['retimed'] and c['speedup'] == pytest.approx(c['decode_tok_per_s'] / c['fixed_decode_tok_per_s'])


# -----------------------------------------------------------------------------
# the calibration table and retiming

def test_the_exit_summary_reads_again_from_the_groups_own_tables():
    """The summary docs/early-exit.md embeds, one row a group: full depth against the normally trained twins is the
    mean of each seed's own ratio (not the ratio of the means); each exit's cell is its row of the group's exit table;
    the calibrated pick with the fewest loops is the calibration table's row with the lowest mean loops (the first of
    equals); 'none' where every pick runs K. The speed-ups by loops count every run's picks."""
    def run(name, ppl4, ref, picks):
        return dict(name=name, trained_K=4, final_norm_hist=dict(loop=4), per_K=[dict(K=k, ppl=ppl4 + 4 - k) for k in (1, 2, 3, 4)],
                    early_exit=[dict(mode=m, stand_in=s, criterion=c, threshold=t, mean_loops=l + 0.1 * (ppl4 > 5.2),
                                     ppl=ppl4 + l, loss=0.0)
                                for c, t, l in (('max_prob', 0.9, 3.0), ('converge', 0.5, 2.0), ('max_prob', 0.5, 1.0))
                                for m, s in (('teacher_forced', None), ('causal', 'copy'), ('causal', 'project'))],
                    calibrated=[dict(stand_in=s, criterion=c, target=0.01, threshold=0.5, ppl=ppl4 + 0.01, full_ppl=ppl4,
                                     reference=ref, reference_ppl=5.0, mean_loops=l, decode_mean_loops=l,
                                     fixed_decode_tok_per_s=100.0, decode_tok_per_s=100.0 * sp, speedup=sp)
                                for s, c, l, sp in picks])
    fixed = [('copy', 'max_prob', 4.0, 1.0), ('project', 'max_prob', 4.0, 0.98)]
    early = [('copy', 'max_prob', 3.5, 0.9), ('copy', 'converge', 2.0, 1.4), ('project', 'converge', 2.0, 1.3)]
    runs = [run('n-s1', 5.0, 'own', early), run('n-s2', 5.5, 'own', early),
            run('e-s1', 6.0, 'n-s1', fixed), run('e-s2', 5.5, 'n-s2', fixed)]
    groups = []
    for name in ('n', 'e'):
        members = [r for r in runs if r['name'].startswith(name)]
        mean, std = mean_std(members)
        groups.append(dict(name=name, n=2, runs=[r['name'] for r in members], mean=mean, std=std))
    rows = [line.strip('|').split('|') for line in eval_decode.exit_summary(groups, runs).splitlines()
            if line.startswith('| n ') or line.startswith('| e ')]
    n, e = [[c.strip() for c in row] for row in rows]
    assert (n[2], e[2]) == ('-', f'{100 * ((6.0 / 5.0 - 1) + (5.5 / 5.5 - 1)) / 2:+.1f}%') == ('-', '+10.0%')  # (means: +9.5%)
    for g, row in zip(groups, (n, e)):
        exit_rows = {tuple(c.strip() for c in line.strip('|').split('|')[:2]): [c.strip() for c in line.strip('|').split('|')]
                     for line in eval_decode.exit_table(g).splitlines() if line.startswith('| max_prob') or line.startswith('| converge')}
        mp, cv = exit_rows['max_prob', '0.9'], exit_rows['converge', '0.5']
        for cell, (loops, ppl) in zip(row[3:7], ((mp[2], mp[3]), (mp[4], mp[5]), (mp[6], mp[7]), (cv[6], cv[7]))):
            assert cell == f"{float(ppl.split(' ')[0]):#.3g} ({loops.split(' ')[0]})"
    table = [[c.strip() for c in line.strip('|').split('|')] for line in eval_decode.calibration_table(groups[0], runs).splitlines()
             if line.startswith('| copy') or line.startswith('| project')]
    fewest = min(table, key=lambda r: float(r[6].split(' ')[0]))
    assert n[7] == f"{fewest[1]}, {fewest[0]}: {fewest[6].split(' ')[0]}, {float(fewest[4].split(' ')[0]):.2f}, {fewest[9].replace(' ± 0.00', '')}" \
        == 'converge, copy: 2.00, 5.26, 1.40x'   # (no spread over seeds: shown without its ± 0.00)
    assert e[7] == 'none'
    by_loops = eval_decode.speedup_by_loops(runs)
    assert 'of the 10 calibrated picks' in by_loops and '| every token, 2 loops | 4 | 2.00 | 1.30 to 1.40x |' in by_loops
    assert '| per token, 3 to 4 loops | 2 | 3.50 | 0.90x |' in by_loops and '| every token, 4 loops | 4 | 4.00 | 0.98 to 1.00x |' in by_loops
    assert eval_decode.exit_summary([dict(groups[0], mean={})], runs) == ''


def test_the_early_exit_figure_skips_groups_without_exits():
    """--from_results of a study with no exits (assets/heldout) draws its figures: no early-exit figure, no KeyError."""
    assert eval_decode.early_exit_figure(None, [dict(name='g', mean={})], []) is None


def test_calibration_table_names_each_seeds_reference():
    # an exit-trained seed is measured against its own normally trained twin: the table names each
    def run(seed, ref_ppl):
        return dict(name=f'exit-s{seed}', calibrated=[dict(
            stand_in='copy', criterion='max_prob', target=0.01, threshold=0.9, ppl=5.7, full_ppl=5.8, mean_loops=3.0,
            reference=f'twin-s{seed}', reference_ppl=ref_ppl, fixed_decode_tok_per_s=100.0, decode_tok_per_s=110.0,
            speedup=1.1)])
    members = [run(1, 5.5), run(2, 5.6)]
    mean, std = mean_std(members)
    table = eval_decode.calibration_table(dict(name='exit', n=2, runs=['exit-s1', 'exit-s2'], mean=mean, std=std), members)
    assert '(twin-s1: 5.500, twin-s2: 5.600)' in table and 'None' not in table


def test_retime_with_device_auto_times_on_the_device_the_runs_were_timed_on(monkeypatch):
    # on a box where CUDA is visible, --from_results --retime (device auto) retimes CPU runs on the CPU
    seen = []
    monkeypatch.setattr(eval_decode, 'retime', lambda runs, device, data_dir=None: seen.append(device))
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: True)
    try:
        study = eval_decode.DecodingStudies()
        assert study.from_results([{'device': 'cpu'}], SimpleNamespace(retime=True, device='auto', data_dir=None))
        assert not study.from_results([{'device': 'cpu'}], SimpleNamespace(retime=False, device='auto', data_dir=None))
    finally:
        torch.set_flush_denormal(False)
    assert seen == ['cpu']


def test_each_token_stops_at_its_first_confident_loop_and_the_last_loop_always_answers():
    """exit_loops: the first loop whose confidence exceeds tau (strictly), and the last loop for a token that is
    never confident."""
    conf = torch.tensor([[0.2, 0.9, 0.5, 0.1],
                         [0.8, 0.95, 0.5, 0.2],
                         [0.1, 0.1, 0.7, 0.3]])  # (K=3, N=4)
    assert eval_decode.exit_loops(conf.clone(), 0.5).tolist() == [1, 0, 2, 2]  # 0.5 is not over 0.5; token 3 never
    assert eval_decode.exit_loops(conf.clone(), 0.99).tolist() == [2, 2, 2, 2]
