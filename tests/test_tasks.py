"""
beyond/tasks.py, a task's evaluation by depth (docs/tasks.md): each length and K scored as the model reads
them, the interventions (the clamp, the cap, under-relaxation), the probe train.py selects a parity run's
checkpoint by (screened), a design's seeds averaged and the bars and shares they pass, merged scorings, the
tables and accuracy.png, and what it writes (strict JSON) and refuses in one line.

    python -m pytest -q tests/test_tasks.py
"""

import json
from types import SimpleNamespace
import re
from dataclasses import asdict

import numpy as np

import pytest
import torch

import beyond.tasks as tasks
import train
from beyond import addition, exits, parity
from configurator import UserError
from conftest import (FIELDS, assert_one_line_error, assert_options_documented, between, describe, describe_legend, hexes,
                      load, matches_snapshot, one_minus_cos, parity_args, run_script, sig, strict, train_in_process)
from data import load_rows
from beyond.additions import FieldGPT, FieldGPTConfig
from model import LoopedGPT, LoopedGPTConfig
from test_model import tiny


# -----------------------------------------------------------------------------
# evaluation by depth: each length and K scored as the model reads them, the trained K a run is scored against,
# the device asked, and the study's mean ||H_K|| recomputed from the states

def test_beyond_tasks_scores_each_length_and_k_as_the_model_reads_them(parity_data, tmp_path, capsys):
    import beyond.tasks as tasks
    out = tmp_path / 'run'
    try:
        train.main(parity_args(parity_data, out, '--max_iters=2', '--eval_interval=2'))
    finally:
        torch.set_flush_denormal(False)
    capsys.readouterr()  # (the training's lines)
    tasks.main([f'--runs={out}', '--lengths=4,12', '--loops=1,3', '--seed=2', '--rows=16',
                '--interventions=clamp,direction,cap', f'--out={tmp_path / "eval"}'])
    printed = capsys.readouterr().out
    assert printed.startswith('exact match (%) by K') and '| design | length | bar |' not in printed  # (no bar's
    # length scored: no shares table, and nothing in its place)
    results = json.loads((tmp_path / 'eval' / 'results.json').read_text())['results']
    assert {(r['length'], r['K'], r['intervention']) for r in results} == {
        (n, k, i) for n in (4, 12) for k in (1, 3) for i in ('none', 'clamp', 'direction', 'cap')}
    assert (tmp_path / 'eval' / 'accuracy.png').stat().st_size > 0
    model, _ = LoopedGPT.from_checkpoint(str(out))
    x, y = tasks.test_strings(2, 12, 16)
    for k in (1, 3):  # by hand: forward with K loops, argmax at the bits, every bit of a string right
        with torch.no_grad():
            right = (model.eval()(x, n_loops=k)[0].argmax(-1) == y)[y >= 0].view(16, 12)
        r = next(r for r in results if (r['length'], r['K'], r['intervention']) == (12, k, 'none'))
        assert r['accuracy'] == pytest.approx(right.float().mean().item())
        assert r['exact'] == pytest.approx(right.all(-1).float().mean().item())
    r = run_script('beyond/tasks.py', f'--runs={out}', '--loops=0', f'--out={tmp_path / "x"}')
    assert_one_line_error(r, 'beyond.tasks', '--loops')


def test_test_strings_are_drawn_from_the_seed_and_the_length_so_each_length_is_its_own_draw():
    """test_strings: rows of exactly `length` steps on default_rng([seed, length, 4]) (recomputed), so the strings of
    two lengths are not one draw's prefixes, and the same (seed, length) is the same strings."""
    for task in (parity.TASK, addition.TASK):
        short, _ = tasks.test_strings(7, 8, 32, task)
        long, _ = tasks.test_strings(7, 16, 32, task)
        want, _ = task.rows(np.random.default_rng([7, 16, 4]), 32, [16], task.row_len([16]), 'test', task.defaults('test'))
        assert np.array_equal(long.numpy(), want) and torch.equal(tasks.test_strings(7, 16, 32, task)[0], long)
        assert not torch.equal(short[:, 1:9], long[:, 1:9])  # (one draw cut at 8 would share them)


def test_an_unknown_intervention_is_one_line_naming_it_and_the_known_ones(tmp_path):
    r = run_script('beyond/tasks.py', f'--runs={tmp_path}', '--interventions=clamp,shrink', f'--out={tmp_path / "x"}')
    assert_one_line_error(r, 'beyond.tasks', 'unknown --interventions shrink: use clamp, direction, cap, relax')
    assert not (tmp_path / 'x').exists()


def test_a_random_depth_run_is_scored_against_its_deepest_trained_k(parity_data, tmp_path):
    # random depth trains a K drawn up to max_loops (n_loops its mean): the trained K beyond.tasks reports (and
    # whose RMS the direction-only readout and the cap hold) is max_loops, a fixed-depth run's its n_loops
    import dataclasses
    import beyond.tasks as tasks
    torch.manual_seed(0)
    cfg = FieldGPTConfig(vocab_size=len(parity.VOCAB), block_size=16, n_layer=1, n_head=2, n_embd=32, n_loops=2,
                         dropout=0.0)
    model = FieldGPT(cfg)
    for name, random_depth, want in (('random', True, 5), ('fixed', False, 2)):
        path = tmp_path / f'{name}.pt'
        torch.save(dict(model_args=dataclasses.asdict(cfg), model_class='beyond.additions.FieldGPT',
                        model=model.state_dict(), config=dict(dataset='parity', data_dir=str(parity_data),
                                                              random_depth=random_depth, n_loops=2, max_loops=5)), path)
        rows = tasks.evaluate([str(path)], [6], [1, 2], 1, 8, ['direction'])
        assert {(r['K'], r['intervention']) for r in rows} == {(k, i) for k in (1, 2) for i in ('none', 'direction')}
        assert {r['trained_K'] for r in rows} == {want}, name


def test_a_checkpoint_without_its_runs_config_is_scored_as_a_fixed_depth_run(tmp_path, monkeypatch):
    # a checkpoint of model_args and weights alone (no 'config': no random_depth, no data folder to look at) is scored
    # against its n_loops, and scores as the same weights saved with a config of random_depth=False do, row for row
    monkeypatch.chdir(tmp_path)  # (no config: check_parity_run looks for ./data/meta.json, absent here)
    torch.manual_seed(0)
    cfg = LoopedGPTConfig(vocab_size=len(parity.VOCAB), block_size=16, n_layer=1, n_head=2, n_embd=16, n_loops=3,
                          dropout=0.0)
    bare = dict(model_args=asdict(cfg), model=LoopedGPT(cfg).state_dict())
    torch.save(bare, tmp_path / 'bare.pt')
    torch.save(dict(bare, config=dict(dataset='parity', data_dir=str(tmp_path), random_depth=False, max_loops=7)),
               tmp_path / 'fixed.pt')
    rows = {name: [{k: v for k, v in r.items() if k not in ('run', 'seconds')}  # (the folder, and the time it took)
                   for r in tasks.evaluate([str(tmp_path / f'{name}.pt')], [6], [1, 2], 1, 8, ['direction'])]
            for name in ('bare', 'fixed')}
    assert {r['trained_K'] for r in rows['bare']} == {cfg.n_loops}
    assert rows['bare'] == rows['fixed'] and len(rows['bare']) == 4


def test_one_row_a_length_is_enough(parity_data, tmp_path, capsys):
    # --rows must be >= 1: one test string a length is scored (its exact match 0% or 100%), none is refused
    import dataclasses
    import beyond.tasks as tasks
    torch.manual_seed(0)
    cfg = FieldGPTConfig(vocab_size=len(parity.VOCAB), block_size=16, n_layer=1, n_head=2, n_embd=32, n_loops=2,
                         dropout=0.0)
    path = tmp_path / 'ckpt.pt'
    torch.save(dict(model_args=dataclasses.asdict(cfg), model_class='beyond.additions.FieldGPT',
                    model=FieldGPT(cfg).state_dict(), config=dict(dataset='parity', data_dir=str(parity_data))), path)
    tasks.main([f'--runs={path}', '--lengths=6', '--loops=1', '--rows=1', f'--out={tmp_path / "eval"}'])
    saved = json.loads((tmp_path / 'eval' / 'results.json').read_text())
    assert saved['rows'] == 1 and [r['exact'] in (0.0, 1.0) for r in saved['results']] == [True]
    with pytest.raises(SystemExit):
        tasks.main([f'--runs={path}', '--rows=0', f'--out={tmp_path / "none"}'])


def test_beyond_tasks_evaluates_on_the_device_asked_and_lists_the_runs_in_results_json(tmp_path, monkeypatch, capsys):
    asked = []

    def evaluate(runs, lengths, loops, seed, rows, interventions, device, dtype, compile, halt):  # (no model: rows of 50 %)
        asked.append((device, dtype, compile, halt))
        return [dict(run=run, length=n, K=k, trained_K=2, intervention='none', accuracy=0.5, exact=0.5, h_norm=1.0,
                     rms=1.0, one_minus_cos=0.0) for run in runs for n in lengths for k in loops]
    monkeypatch.setattr(tasks, 'evaluate', evaluate)
    monkeypatch.setattr(tasks, 'plot', lambda groups, path: None)
    tasks.main(['--runs=out/b-s2,out/a,out/b-s1', '--lengths=4,8', '--loops=1,2', '--device=cuda:1',
                f'--out={tmp_path}'])
    assert asked == [('cuda:1', 'float32', False, None)]  # by default: float32, eager, every position every loop
    tasks.main(['--runs=out/a', '--lengths=4', '--loops=1', '--dtype=bfloat16', '--compile=on', '--halt=angular',
                '--halt_threshold=0.9', f'--out={tmp_path / "fast"}'])
    assert asked[1] == ('cpu', 'bfloat16', True, (exits.CRITERIA['angular'], 0.9))
    assert capsys.readouterr().err == ''  # (a threshold bfloat16 resolves: no note)
    # the default threshold (a relative change under 1e-6) under bfloat16, which resolves about 8e-3: a note, one line
    tasks.main(['--runs=out/a', '--lengths=4', '--loops=1', '--dtype=bfloat16', '--halt=latent', f'--out={tmp_path / "b"}'])
    err = capsys.readouterr().err
    assert err.count('\n') == 1 and err.startswith("beyond.tasks: note: --halt_threshold 0.999999 asks a relative change "
                                                   "under 1e-06, finer than bfloat16's resolution (8e-03)")
    # float32 resolves 1e-6; 1e-2 is coarser than 8e-3; without --halt nothing settles anyway
    for dtype, halt, threshold in (('float32', 'latent', '0.999999'), ('bfloat16', 'latent', '0.99'), ('bfloat16', '', '0.999999')):
        tasks.main(['--runs=out/a', '--lengths=4', '--loops=1', f'--dtype={dtype}', f'--halt={halt}',
                    f'--halt_threshold={threshold}', f'--out={tmp_path / "c"}'])
        assert capsys.readouterr().err == '', (dtype, halt)
    results = json.loads((tmp_path / 'results.json').read_text())
    assert results['runs'] == ['out/b-s2', 'out/a', 'out/b-s1']  # each run once, in the order given
    assert (results['seed'], results['rows'], len(results['results'])) == (1, 256, 3 * 2 * 2)


def test_the_task_studys_state_norms_are_the_bits_not_the_start_token(tmp_path):
    torch.manual_seed(0)
    cfg = LoopedGPTConfig(vocab_size=4, block_size=16, n_layer=1, n_head=2, n_embd=16, n_loops=2, dropout=0.0)
    config = dict(data_dir=str(tmp_path), dataset='parity')  # (a parity run's vocabulary; its data not at hand)
    torch.save(dict(model_args=asdict(cfg), model=LoopedGPT(cfg).state_dict(), config=config), tmp_path / 'ckpt.pt')
    results = tasks.evaluate([str(tmp_path)], [12], [1, 3], seed=2, rows=8)
    model = load(tmp_path)
    x, _ = tasks.test_strings(2, 12, 8)  # (8, 13): the start token, then 12 bits
    with torch.no_grad():
        H = model.hidden_states(x, 3)
    assert {r['K'] for r in results} == {1, 3} and all(r['trained_K'] == 2 for r in results)
    for r in results:
        assert set(r) == set(FIELDS['beyond.tasks row'])
        h, prev = H[r['K']][:, 1:].double(), H[r['K'] - 1][:, 1:].double()  # positions 1..12, the bits
        assert r['h_norm'] == pytest.approx(h.norm(dim=-1).mean().item(), rel=1e-5)
        assert r['rms'] == pytest.approx(h.pow(2).mean(-1).sqrt().mean().item(), rel=1e-5)
        assert r['one_minus_cos'] == pytest.approx(one_minus_cos(h, prev).mean().item(), rel=1e-4, abs=1e-7)
        assert r['h_norm'] != pytest.approx(H[r['K']].norm(dim=-1).mean().item(), rel=1e-3)  # (with it: another)


# -----------------------------------------------------------------------------
# the interventions past the trained K: the clamp, the cap, under-relaxation

def tiny_task_model(n_loops):
    """A one-layer FieldGPT on parity's vocabulary (seed 0) and two inputs of 16 tokens."""
    torch.manual_seed(0)
    model = FieldGPT(FieldGPTConfig(vocab_size=4, block_size=16, n_layer=1, n_head=2, n_embd=32, n_loops=n_loops,
                                    dropout=0.0)).eval()
    return model, torch.randint(0, 4, (2, 16), generator=torch.Generator().manual_seed(1))


def test_the_clamp_intervention_is_the_models_own_clamp():
    from beyond.tasks import trajectory
    model, x = tiny_task_model(3)
    with torch.no_grad():
        clamped = list(trajectory(model, x, 3, 'clamp'))
        want = list(model.loop_states(x, 3, clamp=True))
        free = list(trajectory(model, x, 3))
    assert all(torch.equal(a, b) for a, b in zip(clamped, want))
    assert torch.allclose(clamped[3].norm(dim=-1), clamped[1].norm(dim=-1))  # each token held at its loop-1 norm
    assert not torch.allclose(free[3].norm(dim=-1), free[1].norm(dim=-1))


def test_the_cap_holds_every_carried_state_at_most_at_its_rms_and_leaves_smaller_ones():
    from beyond.tasks import trajectory
    model, x = tiny_task_model(4)
    with torch.no_grad():
        free = [h.pow(2).mean(-1).sqrt() for h in trajectory(model, x, 4)][1:]  # each loop's RMS, (B, T)
        rms = between(torch.cat([r.flatten() for r in free]))  # some states above it, some below, none on it
        capped = list(trajectory(model, x, 4, 'cap', rms))[1:]
    first = capped[0].pow(2).mean(-1).sqrt()
    assert (first <= rms * (1 + 1e-5)).all()
    below = free[0] < rms  # loop 1 from the same H_0: the tokens under the cap are left as they are
    assert below.any() and (~below).any()
    assert torch.allclose(first[below], free[0][below]) and torch.allclose(first[~below], torch.full_like(first[~below], rms))
    for h in capped[1:]:
        assert (h.pow(2).mean(-1).sqrt() <= rms * (1 + 1e-5)).all()


def test_under_relaxation_blends_each_loop_past_the_trained_k():
    from beyond.tasks import RELAX, trajectory
    model, x = tiny_task_model(4)
    with torch.no_grad():
        got = list(trajectory(model, x, 5, 'relax', trained_k=2))
        h = e = model.embed(x)
        want = [h]
        for k in range(5):  # by hand: the model's loop, then from the third on 0.75 of the old state and 0.25 of the new
            new = model.loop(model.loop_input(h, k, e))
            h = new if k < 2 else 0.75 * h + 0.25 * new
            want.append(h)
        plain = list(trajectory(model, x, 5))
    assert RELAX == 0.25 and len(got) == 6
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)
    assert all(torch.equal(g, p) for g, p in zip(got[:3], plain[:3])) and not torch.allclose(got[5], plain[5])


# -----------------------------------------------------------------------------
# settling: each string's settled prefix held and not computed again, the halting rule, chunks, autocast, compile

def settling_model(window=2):
    """A parity-shaped FieldGPT (the recipe's additions, random weights) whose positions settle at different loops in
    different strings, and three strings of 24 tokens."""
    torch.manual_seed(0)
    model = FieldGPT(FieldGPTConfig(vocab_size=4, block_size=16, n_layer=1, n_head=2, n_embd=32, n_loops=4, dropout=0.0,
                                    window=window, positions='none', inject=True, interloop_norm=True, init_std=0.1))
    return model.eval(), torch.randint(0, 4, (3, 24), generator=torch.Generator().manual_seed(1))


def settling_run(folder, **config):
    """settling_model's checkpoint in folder, as train.py saves a FieldGPT run (its config: data_dir folder, and
    config); returns the model."""
    model, _ = settling_model()
    torch.save(dict(model_args=asdict(model.config), model=model.state_dict(),
                    config=dict(data_dir=str(folder), **config), model_class='beyond.additions.FieldGPT'),
               folder / 'ckpt.pt')
    return model


SETTLE = (exits.get('latent'), 0.85)  # (the random model's relative changes fall under 0.16 from about loop 5 on)


def test_a_states_bits_are_what_the_model_run_for_that_many_loops_predicts_final_norm_included():
    # bits reads H_k as the last loop of a k-loop call: a final_norm model's normalized readout, not its raw one
    torch.manual_seed(0)
    model = LoopedGPT(LoopedGPTConfig(vocab_size=4, block_size=16, n_layer=1, n_head=2, n_embd=16, dropout=0.0,
                                      readout='final_norm')).eval()
    with torch.no_grad():
        model.readout_norm.weight.uniform_(-1, 1)  # a gain that is not all ones: the norm moves the argmax
        x = torch.randint(0, 4, (8, 16))
        states = list(model.loop_states(x, 5))
        for k in (1, 3, 5):
            assert torch.equal(tasks.bits(model, states[k]), model(x, n_loops=k)[0].argmax(-1))
        assert not torch.equal(model.lm_head(model.readout(states[3], last=False)).argmax(-1),
                               model(x, n_loops=3)[0].argmax(-1))  # (the raw readout would read other bits)


def test_settling_without_a_halt_is_the_models_own_loop_at_every_position():
    model, x = settling_model()
    with torch.no_grad():
        got = list(tasks.settling(model, x, 6, None, tasks.loop_step(model)))
        want = list(model.loop_states(x, 6))
    assert len(got) == 7 and all(torch.equal(h, w) and not lo.any() for (h, lo), w in zip(got, want))


def test_a_settled_position_passed_the_criterion_with_every_one_before_it_and_is_held_from_then_on():
    model, x = settling_model()
    criterion, threshold = SETTLE
    with torch.no_grad():
        states = list(tasks.settling(model, x, 30, SETTLE, tasks.loop_step(model)))
    T = x.size(1)
    for k in range(1, 31):
        (h, lo), (before, lo_before) = states[k], states[k - 1]
        confidence = criterion(h, before)  # (B, T): recomputed from the states yielded
        for b in range(x.size(0)):
            n = int(lo[b])
            assert n >= int(lo_before[b])  # a prefix only grows
            assert (confidence[b, :n] >= threshold).all()  # it and every position before it passed
            assert n == T or confidence[b, n] < threshold  # the first that did not ends it
        for later, _ in states[k + 1:]:  # held bitwise from then on
            for b in range(x.size(0)):
                assert torch.equal(later[b, :int(lo[b])], h[b, :int(lo[b])])
    # the inputs exercise what they test: prefixes that differ between strings, a string that halts before another
    assert any(len(set(lo.tolist())) > 1 for _, lo in states)
    halted = [next(k for k, (_, lo) in enumerate(states) if lo[b] == T) for b in range(x.size(0))]
    assert len(set(halted)) > 1


@pytest.mark.parametrize('window', [2, 3, 0])
def test_settling_computes_the_unsettled_positions_as_the_whole_loop_does(window):
    # by hand: the loop run on every position, the settled ones then put back; settling runs it on the unsettled ones
    # and the w - 1 before them (a window's keys), or on all of them with full attention (window 0)
    model, x = settling_model(window)
    criterion, threshold = SETTLE
    step, widths, want = tasks.loop_step(model), [], []

    def recorded(h, e, k):  # (the positions each loop is run on)
        widths.append(h.size(1))
        return step(h, e, k)
    T = x.size(1)
    with torch.no_grad():
        got = list(tasks.settling(model, x, 30, SETTLE, recorded))
        h = e = model.embed(x)
        lo, sliced = torch.zeros(x.size(0), dtype=torch.long), 0
        for k in range(30):
            first = int(lo.min())
            sliced += 0 < first < T
            if first < T:  # the unsettled positions and the w - 1 before them (at least w + 1 wide); all with window 0
                want.append(T - max(0, min(first - (window - 1), T - window - 1)) if window else T)
            new = model.loop(model.loop_input(h, k, e))
            held = torch.arange(x.size(1)) < lo[:, None]
            new[held] = h[held]
            lo = torch.tensor([next((t for t in range(x.size(1)) if criterion(new[b, t], h[b, t]) < threshold), x.size(1))
                               for b in range(x.size(0))])
            h = new
            torch.testing.assert_close(got[k + 1][0], h, rtol=1e-5, atol=1e-5)
            assert torch.equal(got[k + 1][1], lo), k
    assert sliced > 0  # (loops with some positions settled, not all: a slice taken and still computed)
    assert widths == want and (min(widths) < T if window else set(widths) == {T})


def test_score_halts_each_string_at_the_loop_its_last_position_settles_whatever_the_chunk():
    model, x = settling_model()
    y = torch.randint(0, 2, x.shape, generator=torch.Generator().manual_seed(2))
    y[:, 0] = -1
    with torch.no_grad():
        states = list(tasks.settling(model, x, 30, SETTLE, tasks.loop_step(model)))
        loops = [5, 12, 20, 30]
        batches = {}

        def counted(chunk):  # the loop, recording how many strings each call runs
            def step(h, e, k):
                batches.setdefault(chunk, set()).add(h.size(0))
                return model.loop(model.loop_input(h, k, e))
            return step
        whole = tasks.score(model, x, y, loops, halt=SETTLE, step=counted(4096))
        one_a_chunk = tasks.score(model, x, y, loops, halt=SETTLE, step=counted(1), chunk=1)  # (under a row: one row)
        two_rows = tasks.score(model, x, y, loops, halt=SETTLE, step=counted(50), chunk=50)  # 50 tokens: two rows of 24
    assert batches == {4096: {3}, 1: {1}, 50: {2, 1}}
    halted = [next((k for k, (_, lo) in enumerate(states) if lo[b] == x.size(1)), None) for b in range(x.size(0))]
    assert len({k for k in halted if k is not None}) > 1
    for K in loops:
        stopped = [k for k in halted if k is not None and k <= K]
        for r in (whole, one_a_chunk, two_rows):
            assert r[K]['halted'] == pytest.approx(len(stopped) / x.size(0))
            assert r[K]['halt_k'] == (pytest.approx(sum(stopped) / len(stopped)) if stopped else None)
        right = (tasks.bits(model, states[K][0]) == y) | (y < 0)
        assert whole[K]['exact'] == one_a_chunk[K]['exact'] == two_rows[K]['exact'] == right.all(-1).float().mean().item()
        assert whole[K]['accuracy'] == one_a_chunk[K]['accuracy'] == pytest.approx(right[y >= 0].float().mean().item())
        assert whole[K]['h_norm'] == pytest.approx(states[K][0].norm(dim=-1)[y >= 0].mean().item(), rel=1e-5)
    assert 'halted' not in tasks.score(model, x, y, loops)[30]
    with pytest.raises(UserError, match='halting holds settled states'):
        tasks.score(model, x, y, loops, 'cap', rms=1.0, halt=SETTLE)


def test_each_length_is_timed_once_in_one_pass_and_costed_a_string_loop(tmp_path, monkeypatch):
    settling_run(tmp_path)
    clock, passes, steps = iter(range(0, 1000, 5)), [], []  # (a clock of 5 s a reading: each pass 5 s)
    monkeypatch.setattr(tasks, 'time', SimpleNamespace(perf_counter=lambda: next(clock)))  # (tasks' clock alone)
    real = tasks.score
    monkeypatch.setattr(tasks, 'score', lambda *a, **kw: passes.append(a[4] if len(a) > 4 else None)
                        or steps.append(kw.get('step')) or real(*a, **kw))
    rows = tasks.evaluate([str(tmp_path)], [10, 20], [3, 6], seed=3, rows=4, interventions=['cap'], halt=SETTLE)
    assert passes == [None, 'cap', None, 'cap']  # one pass a length (and one an intervention), every K read in it
    # one loop step made for the model (compiled once, where asked) runs every pass, the interventions' too
    assert steps[0] is not None and all(step is steps[0] for step in steps)
    for r in rows:
        timed = r['intervention'] == 'none'
        assert (r.get('seconds'), r.get('strings')) == ((5, 4) if timed else (None, None))
        assert ('halted' in r) == timed  # (the cap scores without the halting rule)
    table = tasks.render_costs(rows).splitlines()
    assert table[0] == '| run | bits | strings | seconds | seconds a string | ms a string-loop |' and len(table) == 4
    deep = [r for r in rows if (r['length'], r['K'], r['intervention']) == (20, 6, 'none')][0]
    ran = deep['halted'] * (deep['halt_k'] or 0) + (1 - deep['halted']) * 6  # the halted at their loop, the others at 6
    assert 0 < ran <= 6
    assert table[3] == f"| {tmp_path.name} | 20 | 4 | 5.0 | 1.25 | {5000 / (4 * ran):.2f} |"
    unhalted = [dict(r, halted=0.0, halt_k=None) for r in rows]
    assert tasks.render_costs(unhalted).splitlines()[3].endswith(f"| {5000 / (4 * 6):.2f} |")  # every string 6 loops
    assert tasks.render_costs([dict(r, seconds=None) for r in rows]) == ''  # (results from before the timing: none)


def test_a_compiler_that_cannot_build_the_loop_is_one_line(tmp_path, monkeypatch):
    # --compile where torch.compile cannot build (stood in for by one whose compiled step raises inductor's error, as
    # a missing C++ compiler does at the first call; eval_depth's test runs the real one): one line naming the loop
    # and the error's own first line
    from torch._inductor.exc import InductorError
    settling_run(tmp_path)

    def cannot_build(*a, **kw):
        raise InductorError(RuntimeError('no working C++ compiler (a stand-in)'), None)
    monkeypatch.setattr(torch, 'compile', lambda fn, **kw: cannot_build)
    with pytest.raises(UserError, match=r'torch.compile could not build the loop here \(.*a stand-in'):
        tasks.evaluate([str(tmp_path)], [10], [3], seed=3, rows=4, compile=True)


def test_the_halting_table_reads_each_run_at_its_deepest_k_beside_the_first_fixed_k_as_right_and_counts_the_runs_past_99():
    """render_halting: each run x length read at the deepest K (where its strings halted), the strings halted, the loops
    a string ran (halted ones at their loop), the smallest fixed K reading as many right (>=, an equal one counts),
    and each length's runs whose halting reads >= 99% exact (at 0.99 exactly: counted; 0.989: not), a Wilson interval."""
    def row(run, length, K, exact, halted=0.5, halt_k=None, intervention='none'):
        return dict(run=f'/x/{run}', length=length, K=K, exact=exact, halted=halted, halt_k=halt_k or K / 2,
                    intervention=intervention)
    rows = [row('a', 64, 64, 0.5), row('a', 64, 128, 1.0), row('a', 64, 192, 1.0, halted=0.75, halt_k=100),
            row('b', 64, 64, 0.99), row('b', 64, 128, 0.99, halted=0.0),
            row('c', 64, 64, 0.989), row('c', 64, 128, 0.989, halted=1.0, halt_k=70),
            row('a', 512, 64, 0.0), row('a', 512, 128, 0.999),
            row('a', 512, 128, 0.0, intervention='cap'),  # (an intervention's rows: not the rule's)
            dict(run='/x/d', length=64, K=64, exact=1.0, intervention='none')]  # (a run scored without the rule)
    table = tasks.render_halting(rows).splitlines()
    assert table[2:6] == ['| a | 64 | 75.0% of 192 loops | 123 | 100.0% | K=128 |',  # 0.75 x 100 + 0.25 x 192
                          '| b | 64 | 0.0% of 128 loops | 128 | 99.0% | K=64 |',
                          '| c | 64 | 100.0% of 128 loops | 70 | 98.9% | K=64 |',
                          '| a | 512 | 50.0% of 128 loops | 96 | 99.9% | K=128 |']
    assert len(table) == 11 and table[6] == ''
    low, high = tasks.wilson(2, 3)
    assert table[9] == f'| 64 | 2/3 | {100 * low:.0f}–{100 * high:.0f}% |' and table[10] == '| 512 | 1/1 | 21–100% |'
    assert tasks.render_halting([rows[-1]]) == ''


def test_the_halt_settings_are_a_state_criterion_and_a_threshold_inside_zero_and_one():
    assert tasks.halt_arg('', 0.5) is None
    assert tasks.halt_arg('angular', 0.99) == (exits.CRITERIA['angular'], 0.99)
    assert tasks.HALT_THRESHOLD == 0.999999 and tasks.halt_arg('latent', tasks.HALT_THRESHOLD)[1] == 0.999999
    with pytest.raises(UserError, match="reads the readout; a state criterion settles positions: angular, latent"):
        tasks.halt_arg('max_prob', 0.9)
    for bad in (0.0, 1.0, 1.5):
        with pytest.raises(UserError, match='--halt_threshold must be in'):
            tasks.halt_arg('latent', bad)
    with pytest.raises(UserError, match='unknown exit criterion'):
        tasks.halt_arg('settled', 0.9)


def test_evaluate_runs_the_loops_under_the_autocast_asked_with_the_residual_in_float32(tmp_path):
    model = settling_run(tmp_path, dataset='parity')
    fp32, bf16 = (tasks.evaluate([str(tmp_path)], [20], [2, 6], seed=3, rows=4, dtype=d) for d in ('float32', 'bfloat16'))
    x, y = tasks.test_strings(3, 20, 4)
    with torch.no_grad(), torch.autocast('cpu', torch.bfloat16):
        states = list(model.loop_states(x, 6))
        want = tasks.score(model, x, y, [2, 4, 6])  # (4: the trained K, read for the direction readout's RMS)
    assert all(h.dtype == torch.float32 for h in states)
    for r in bf16:
        assert r['h_norm'] == want[r['K']]['h_norm'] and r['accuracy'] == want[r['K']]['accuracy']
    assert [r['h_norm'] for r in fp32] != [r['h_norm'] for r in bf16]


def test_a_compiled_loop_is_one_graph_for_every_width_the_settled_prefix_leaves(monkeypatch):
    from torch._dynamo.utils import counters
    real = torch.compile
    monkeypatch.setattr(torch, 'compile', lambda fn, **kw: real(fn, backend='eager', **kw))  # (dynamo's graphs, no codegen)
    model, x = settling_model()
    torch._dynamo.reset()
    counters.clear()
    try:
        with torch.no_grad():
            got = list(tasks.settling(model, x, 30, SETTLE, tasks.loop_step(model, compile=True)))
            graphs = counters['stats']['unique_graphs']
    finally:
        torch._dynamo.reset()
    want = list(tasks.settling(model, x, 30, SETTLE, tasks.loop_step(model)))
    widths = {int(lo.min()) for _, lo in got}  # the widths change loop by loop
    assert graphs <= 3 < len(widths)  # loop 1 and the loops after it (the inter-loop norm and injection from loop 2; a
                                      # guard dynamo re-checks once): no width its own
    assert all(torch.equal(a[1], b[1]) and torch.allclose(a[0], b[0], atol=1e-5) for a, b in zip(got, want))


# -----------------------------------------------------------------------------
# the probe, train.py's select for parity (config/parity.py): read at twice and four times the length, screened on
# the first halves

def test_the_probe_reads_its_own_split_at_twice_and_four_times_its_length(parity_data, tmp_path):
    # train.py's select for parity (config/parity.py): the probe split at K = 2n and 4n, recomputed here from
    # the model's forward (every position's logits) and its hidden states
    import beyond.tasks as tasks
    torch.manual_seed(2)  # (weights at std 0.3: a state that still turns past 6 loops, bits that change with K)
    model = FieldGPT(FieldGPTConfig(vocab_size=4, block_size=16, n_layer=1, n_head=2, n_embd=32, n_loops=1, dropout=0.0,
                                    init_std=0.3, interloop_norm=True, inject=True)).eval()
    rows = load_rows(str(parity_data / 'parity'), 'probe')
    x, y = (torch.from_numpy(a.astype(np.int64)) for a in (rows.x, rows.y))
    with torch.no_grad():
        got = tasks.probe(model, dict(data_dir=str(parity_data), dataset='parity'))
        bits = {k: model(x, n_loops=k)[0].argmax(-1) for k in (6, 12)}  # 3-bit strings: K = 6 and 12
        h = model.hidden_states(x, 12)
    exact = {k: ((b == y) | (y < 0)).all(-1).float().mean().item() for k, b in bits.items()}
    assert exact[6] != exact[12] and 0 < min(exact.values())  # (inputs where the lower of the two is not either)
    assert got['probe_error'] == pytest.approx(1 - min(exact.values()))
    changed = ((bits[6] != bits[12]) & (y >= 0)).any(-1).float().mean().item()
    assert 0 < changed < 1 and got['probe_disagreement'] == pytest.approx(changed)
    turn = (1 - torch.nn.functional.cosine_similarity(h[12], h[11], dim=-1))[y >= 0].mean().item()
    assert got['probe_turn'] == pytest.approx(turn, rel=1e-5) and list(got) == ['probe_error', 'probe_disagreement', 'probe_turn']
    assert not model.training
    # a data folder written before the probe split (and the long one): one line that says what makes one
    (tmp_path / 'old').mkdir()
    meta = json.loads((parity_data / 'parity' / 'meta.json').read_text())
    for part in ('row_len', 'rows', 'lengths', 'tokens'):
        meta[part].pop('probe'), meta[part].pop('long')
    (tmp_path / 'old' / 'meta.json').write_text(json.dumps(meta))
    with pytest.raises(UserError, match=r"select 'beyond.tasks.probe' reads the data's probe split: .* has no probe "
                                        r"split \(it has train, val, test\) \(python -m beyond.parity writes one\)"):
        tasks.probe(model, dict(data_dir=str(tmp_path), dataset='old', select='beyond.tasks.probe'))


def test_the_screened_probe_is_the_screened_read_of_the_runs_own_probe_split(parity_data):
    # config/parity.py's select: screened_read on the strings of the run's probe split, read here with load_rows
    # (not the test or the long split: their strings read differently)
    torch.manual_seed(2)
    model = FieldGPT(FieldGPTConfig(vocab_size=4, block_size=16, n_layer=1, n_head=2, n_embd=32, n_loops=1, dropout=0.0,
                                    init_std=0.3, interloop_norm=True, inject=True)).eval()
    split = {name: tuple(torch.from_numpy(a.astype(np.int64)) for a in load_rows(str(parity_data / 'parity'), name))
             for name in ('probe', 'test')}
    got = tasks.screened_probe(model, dict(data_dir=str(parity_data), dataset='parity'))
    assert got == tasks.screened_read(model, *split['probe']) != tasks.screened_read(model, *split['test'])


def test_the_screened_probe_reads_the_whole_strings_only_past_its_screen(monkeypatch):
    # config/parity.py's select: the first halves at K = n and 2n first; the whole strings (K = 2n and 4n) only where
    # every half is right, else 1 + the screen's error. A model whose head is zero reads every bit as 0 (argmax's
    # first of equals), so a string is right exactly where its running parity stays 0.
    import beyond.tasks as tasks
    model, _ = tiny_task_model(1)
    with torch.no_grad():
        model.lm_head.weight.zero_()  # (tied: the embedding too)

    def strings(*rows):  # 8-bit strings as the probe split holds them: the start token, the bits, their parities
        x = torch.tensor([[parity.VOCAB['bos'], *r] for r in rows])
        y = torch.cat([torch.full((len(rows), 1), -1), torch.tensor(rows).cumsum(1) % 2], 1)
        return x, y

    reads = []
    read = tasks.read_probe
    monkeypatch.setattr(tasks, 'read_probe', lambda m, x, y: reads.append(x.shape[1]) or read(m, x, y))
    # every first half all 0: the screen passes, and 2 of the 4 whole strings have a 1 in their second half
    x, y = strings([0, 0, 0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 1, 0, 0], [0, 0, 0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0, 0, 1])
    got = tasks.screened_read(model, x, y)
    assert reads == [5, 9] and got['screen_error'] == 0 and got['probe_error'] == pytest.approx(0.5)
    assert got['probe_error'] == pytest.approx(read(model, x, y)['probe_error'])
    # one first half with a 1: the screen fails (1 string in 4), the whole strings are not read
    reads.clear()
    x, y = strings([0, 0, 1, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 1, 0, 0], [0, 0, 0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0, 0, 0])
    got = tasks.screened_read(model, x, y)
    assert reads == [5] and got['screen_error'] == pytest.approx(0.25) and got['probe_error'] == pytest.approx(1.25)
    assert read(model, x, y)['probe_error'] == pytest.approx(0.5)  # (what the unscreened read would have kept)
    assert list(got) == ['probe_error', 'screen_error', 'probe_disagreement', 'probe_turn']


def test_the_reach_read_is_exact_match_at_one_and_a_quarter_and_twice_the_length_on_the_scorers_fast_path(monkeypatch):
    # long_probe's reach read: 2-bit strings at K = ceil(2.5) = 3 and 4, through score with the halting rule the scorer's
    # --halt=latent runs; 1 - the lower exact match, recomputed here from the model's forward at each K
    import math
    torch.manual_seed(16)  # (weights at std 0.3: bits that change with K)
    model = FieldGPT(FieldGPTConfig(vocab_size=4, block_size=16, n_layer=1, n_head=2, n_embd=32, n_loops=1, dropout=0.0,
                                    init_std=0.3, interloop_norm=True, inject=True, positions='none', window=2)).eval()
    x, y = tasks.test_strings(7, 2, 64)
    with torch.no_grad():
        exact = {k: ((model(x, n_loops=k)[0].argmax(-1) == y) | (y < 0)).all(-1).float().mean().item() for k in range(1, 6)}
    assert exact[3] != exact[4] and 0 < min(exact[3], exact[4]) and exact[2] != exact[4] != exact[5]  # (K one off reads other)
    calls = []
    score = tasks.score
    monkeypatch.setattr(tasks, 'score', lambda *a, **k: calls.append((a[3], k)) or score(*a, **k))
    assert tasks.reach_read(model, x, y) == pytest.approx(1 - min(exact[3], exact[4]))
    (loops, kwargs), = calls  # one pass for both K
    assert sorted(loops) == [math.ceil(1.25 * 2), 4] == [3, 4]
    assert kwargs['halt'] == (exits.get('latent'), tasks.HALT_THRESHOLD)
    for n, ks in ((8, [10, 16]), (5, [7, 10]), (48, [60, 96])):  # (factors near 1.25 and rounding told apart: 1.5 x 8
        calls.clear()                                             # is 12, floor(6.25) 6, round(60.0) the same as ceil)
        tasks.reach_read(model, *tasks.test_strings(7, n, 2))
        assert sorted(calls[0][0]) == ks, n


def test_the_long_probe_reads_fast_and_long_only_where_the_screened_probe_passes(monkeypatch):
    # config/parity.py's and config/addition.py's select: screened_read on the probe; where it passes, the reach read on
    # the probe's strings and then the long split's, the error the worse of the two; else 1 + screened_read's error
    # (its screen's failure 2 + the screen's). A model whose head is zero reads every bit as 0, so a string is right
    # exactly where its running parity stays 0 (at every K).
    model, _ = tiny_task_model(1)
    with torch.no_grad():
        model.lm_head.weight.zero_()

    def strings(*rows):
        x = torch.tensor([[parity.VOCAB['bos'], *r] for r in rows])
        return x, torch.cat([torch.full((len(rows), 1), -1), torch.tensor(rows).cumsum(1) % 2], 1)

    zeros = strings(*[[0] * 8] * 4)
    split = {}
    run, asked = dict(data_dir='data', dataset='parity-7'), []  # (the run's settings: the splits are read from its data)
    monkeypatch.setattr(tasks, 'probe_rows', lambda settings, name='probe': asked.append((settings, name)) or split[name])
    reads = []
    reach = tasks.reach_read
    monkeypatch.setattr(tasks, 'reach_read', lambda m, x, y: reads.append(x.shape[1]) or reach(m, x, y))
    long_ones = strings(*[[0] * 12] * 3, [0] * 11 + [1])  # 1 of 4 long strings with a 1: a reach error of 0.25
    # the screen fails (1 first half in 4 with a 1): nothing past it is read
    split.update(probe=strings([0, 1, 0, 0, 0, 0, 0, 0], *[[0] * 8] * 3), long=long_ones)
    got = tasks.long_probe(model, run)
    assert reads == [] and got['probe_error'] == pytest.approx(2.25) and got['whole_error'] == pytest.approx(1.25)
    assert got['screen_error'] == pytest.approx(0.25) and 'reach_error' not in got
    # the screen passes and the whole probe fails (2 of 4 strings with a 1 in their second half): still not read
    split['probe'] = strings([0] * 8, [0, 0, 0, 0, 0, 1, 0, 0], [0] * 8, [0, 0, 0, 0, 0, 0, 0, 1])
    got = tasks.long_probe(model, run)
    assert reads == [] and got['probe_error'] == pytest.approx(1.5) and got['whole_error'] == pytest.approx(0.5)
    # the whole probe passes: the reach read on the probe's strings (9 tokens) and the long split's (13)
    split['probe'] = zeros
    got = tasks.long_probe(model, run)
    assert reads == [9, 13] and got['probe_error'] == got['reach_error'] == pytest.approx(0.25) and got['whole_error'] == 0
    assert list(got) == ['probe_error', 'screen_error', 'probe_disagreement', 'probe_turn', 'whole_error', 'reach_error']
    # every read right: 0, the score train.py's stop_score = 0 ends a run at
    reads.clear()
    split['long'] = strings(*[[0] * 12] * 4)
    assert tasks.long_probe(model, run)['probe_error'] == 0 and reads == [9, 13]
    assert asked[-2:] == [(run, 'probe'), (run, 'long')] and all(settings is run for settings, _ in asked)


def test_a_data_folder_without_the_long_split_is_one_line_naming_what_writes_one(parity_data, tmp_path):
    # the long probe on data written before its split: one error line, not a traceback
    import shutil
    shutil.copytree(parity_data / 'parity', tmp_path / 'old')
    meta = json.loads((tmp_path / 'old' / 'meta.json').read_text())
    for part in ('row_len', 'rows', 'lengths', 'tokens'):
        meta[part].pop('long')
    (tmp_path / 'old' / 'meta.json').write_text(json.dumps(meta))
    x, y = tasks.probe_rows(dict(data_dir=str(tmp_path), dataset='old'))
    assert x.shape == (64, 4)  # (the probe is there)
    with pytest.raises(UserError, match=r"^select 'beyond.tasks.long_probe' reads the data's long split: .* has no long split "
                                        r"\(it has train, val, test, probe\) \(python -m beyond.parity writes one\)$"):
        tasks.probe_rows(dict(data_dir=str(tmp_path), dataset='old', select='beyond.tasks.long_probe'), 'long')


def test_the_screen_reads_the_states_the_whole_strings_hold_on_their_first_halves():
    # attention looks back, never ahead: a string cut after n/2 bits holds, at every loop, the states its whole
    # string holds there (up to float rounding), so the screen reads what the whole read would on those bits
    import beyond.tasks as tasks
    torch.manual_seed(2)
    model = FieldGPT(FieldGPTConfig(vocab_size=4, block_size=16, n_layer=1, n_head=2, n_embd=32, n_loops=1, dropout=0.0,
                                    init_std=0.3, interloop_norm=True, inject=True, positions='none', window=2)).eval()
    x, y = tasks.test_strings(5, 12, 16)
    with torch.no_grad():
        for whole, cut in zip(model.loop_states(x, 12), model.loop_states(x[:, :7], 12)):
            torch.testing.assert_close(cut, whole[:, :7], rtol=1e-4, atol=1e-4)
            assert (tasks.bits(model, cut) == tasks.bits(model, whole)[:, :7]).all()
        screen, halves = tasks.screened_read(model, x, y), tasks.read_probe(model, x[:, :7], y[:, :7])
        others = [tasks.read_probe(model, x[:, :t], y[:, :t]) for t in (6, 8, 13)]  # (a cut one off, and the whole)
    # the label-free values are the halves' (their turn tells the cuts apart: the right cut, not a neighbour)
    assert screen['probe_turn'] == pytest.approx(halves['probe_turn']) and screen['screen_error'] == halves['probe_error']
    assert all(screen['probe_turn'] != pytest.approx(o['probe_turn']) for o in others)
    assert screen['probe_disagreement'] == halves['probe_disagreement']


# -----------------------------------------------------------------------------
# designs, bars and shares; merged scorings; the tables

def test_designs_average_a_design_over_its_seeds_only():
    from beyond.tasks import designs
    def row(run, exact, K=4):
        return dict(run=run, length=8, K=K, intervention='none', accuracy=exact, exact=exact, h_norm=10 * exact,
                    one_minus_cos=0.0)
    rows = [row('r/out-parity-norm-il-s1', 1.0), row('/x/out-parity-norm-il-s12/', 0.5), row('out-parity-norm-s1', 0.25),
            row('r/out-parity-norm-il-s1', 0.0, K=8)]
    got = {(g['design'], g['K']): g for g in designs(rows)}
    assert set(got) == {('out-parity-norm-il', 4), ('out-parity-norm', 4), ('out-parity-norm-il', 8)}
    g = got['out-parity-norm-il', 4]  # two seeds of one design, not the norm design nor the other K
    assert (g['seeds'], g['exact'], g['exact_std'], g['h_norm']) == (2, 0.75, 0.25, 7.5)
    assert (got['out-parity-norm', 4]['seeds'], got['out-parity-norm', 4]['exact_std']) == (1, 0.0)


def test_a_run_passes_the_bar_where_it_reaches_95_percent_in_time_and_holds_within_2_points():
    from beyond.tasks import BARS, Bar, passes
    assert BARS[:2] == ((32, 96, 384, 0.95, 0.02, None), (64, 256, None, 0.95, 0.02, None))  # (docs/tasks.md's 8x bars)
    b32, b64 = Bar(32, 96, 384), Bar(64, 256)
    assert passes({16: 0.5, 32: 0.96, 64: 0.94, 384: 0.94}, b32)  # 2 points below 96%: still held
    assert not passes({16: 0.5, 32: 0.96, 64: 0.94, 384: 0.93}, b32)  # 3 points: not held
    assert not passes({16: 0.94, 128: 1.0, 384: 1.0}, b32)  # 95% only after K=96
    assert passes({16: 0.95}, b32) and not passes({16: 0.9499}, b32)  # 95% itself passes
    assert passes({16: 0.99, 32: 0.5, 48: 0.97, 384: 0.97}, b32)  # the reach that holds, not the first
    assert passes({64: 0.3, 256: 0.95, 384: 0.1}, b64) and not passes({64: 0.3, 384: 1.0}, b64)


def test_a_256x_bar_holds_within_1_point_to_a_quarter_past_the_k_it_is_first_reached():
    from beyond.tasks import BARS, passes
    bar = BARS[-1]
    assert (bar.length, bar.by_k, bar.reach, bar.within, bar.hold) == (2048, 2560, 0.99, 0.01, 1.25)  # (the issue's)
    assert BARS[2] == bar._replace(length=512)
    add = BARS[3]  # addition's 64x (assets/addition, scored to K=1,536): first reached by 1,216, so held to 1,520
    assert add == bar._replace(length=1024, by_k=1216) and add.by_k * add.hold <= 1536 < (add.by_k + 64) * add.hold
    assert passes({1216: 1.0, 1472: 0.995, 1536: 0.0}, add) and not passes({1280: 1.0, 1536: 1.0}, add)
    assert passes({2000: 0.99, 2500: 0.98}, bar)  # held within a point to 2,500 = 1.25 x 2,000
    assert not passes({2000: 0.99, 2500: 0.975}, bar)  # 1.5 points below: not held
    assert passes({2000: 0.99, 2400: 0.97, 2501: 0.5}, bar._replace(within=0.02)) and not passes({2000: 0.99, 2400: 0.97, 2501: 0.5}, bar)
    assert passes({2000: 0.99, 2500: 0.99, 2501: 0.1}, bar)  # past 1.25x it need not hold
    assert not passes({2000: 0.99, 2400: 1.0}, bar)  # not scored to 1.25x: not seen to hold
    assert not passes({2600: 1.0, 4000: 1.0}, bar)  # first reached past K=2,560
    assert passes({1000: 0.5, 2500: 0.985, 2560: 1.0, 3200: 1.0}, bar)  # 98.5% is under 99%: the K that reaches it
    assert not passes({2000: 0.989, 2500: 1.0}, bar)  # (0.989 < 0.99; 2,500 not held to 3,125)
    assert bar.text() == '≥99% by K=2560, held within 1 to 1.25x that K' and BARS[0].text() == '≥95% by K=96, held to 384'
    # the points within, as a percentage of exact matches (0.07 is 7 points, 0.7 seventy)
    assert [bar._replace(within=w).text() for w in (0.07, 0.7)] == [
        '≥99% by K=2560, held within 7 to 1.25x that K', '≥99% by K=2560, held within 70 to 1.25x that K']


def test_the_share_of_seeds_passing_is_k_of_n_with_wilsons_interval():
    from beyond.tasks import shares, wilson
    assert wilson(9, 10) == pytest.approx((0.5958, 0.9821), abs=1e-4)  # (the published Wilson interval of 9/10)
    assert wilson(0, 10) == pytest.approx((0.0, 0.2775), abs=1e-4) and wilson(10, 10) == pytest.approx((0.7225, 1.0), abs=1e-4)
    def rows(run, exact, h, length=32, intervention='none', loops=(32, 384)):
        return [dict(run=run, length=length, K=k, intervention=intervention, exact=exact, h_norm=h if k == max(loops) else 0.0)
                for k in loops]
    results = (rows('r/out-parity-a-s1', 1.0, 10.0) + rows('r/out-parity-a-s2', 0.5, 30.0) + rows('r/out-parity-a-s3', 0.97, 20.0)
               + rows('r/out-parity-b-s1', 0.2, 5.0) + rows('r/out-parity-a-s1', 0.0, 1.0, intervention='cap')
               + rows('r/out-parity-a-s1', 1.0, 2.0, length=64, loops=(64,))  # (not scored to K=256: no 64-bit bar)
               + rows('r/out-parity-b-s1', 1.0, 2.0, length=64, loops=(256,)))
    got = {(r['design'], r['length'], r['intervention']): r for r in shares(results)}
    assert set(got) == {('out-parity-a', 32, 'none'), ('out-parity-b', 32, 'none'), ('out-parity-a', 32, 'cap'),
                        ('out-parity-b', 64, 'none')}
    a = got['out-parity-a', 32, 'none']
    assert (a['passed'], a['runs'], a['h_norm_pass'], a['h_norm_fail']) == (2, 3, 15.0, 30.0)
    assert (a['low'], a['high']) == wilson(2, 3) and a['passed_runs'] == ['r/out-parity-a-s1', 'r/out-parity-a-s3']
    assert (got['out-parity-b', 32, 'none']['passed'], got['out-parity-b', 32, 'none']['h_norm_pass']) == (0, None)
    assert (got['out-parity-a', 32, 'cap']['passed'], got['out-parity-b', 64, 'none']['h_norm_fail']) == (0, None)
    # each row records its bar (results.json's shares): the 32-bit one's K and the K it holds to, and its text
    bar32, bar64 = (next(b for b in tasks.BARS if b.length == n) for n in (32, 64))
    assert [(a[k], got['out-parity-b', 64, 'none'][k]) for k in ('by_K', 'held_to', 'bar')] == [
        (bar32.by_k, bar64.by_k), (bar32.held_to, bar64.held_to), (bar32.text(), bar64.text())]


def test_merged_scorings_table_together_and_must_share_their_test_strings(tmp_path, capsys):
    import beyond.tasks as tasks
    row = dict(run='r/out-parity-a-s1', length=32, K=16, intervention='none', accuracy=1.0, exact=1.0, h_norm=3.0,
               one_minus_cos=0.0)
    for name, seed, run in (('one', 5, 'r/out-parity-a-s1'), ('two', 5, 'r/out-parity-a-s2'), ('odd', 6, 'x')):
        (tmp_path / name).mkdir()
        (tmp_path / name / 'results.json').write_text(json.dumps(dict(seed=seed, rows=8, runs=[run], results=[dict(row, run=run)])))
    tasks.main([f'--merge={tmp_path}/one/results.json,{tmp_path}/two/results.json', f'--out={tmp_path / "all"}'])
    saved = json.loads((tmp_path / 'all' / 'results.json').read_text())
    assert (saved['seed'], saved['rows'], saved['runs']) == (5, 8, ['r/out-parity-a-s1', 'r/out-parity-a-s2'])
    assert [(g['design'], g['seeds']) for g in saved['designs']] == [('out-parity-a', 2)]
    capsys.readouterr()
    tasks.main([f'--merge={tmp_path}/odd/results.json', f'--out={tmp_path / "alone"}'])  # one file is a merge too
    # a merge scores nothing: no halting note, even with settings that would give a scoring one
    halting = ['--halt=latent', '--halt_threshold=0.9999', '--dtype=bfloat16']
    assert tasks.halt_note('latent', 0.9999, 'bfloat16') and 'note:' not in capsys.readouterr().err
    tasks.main([f'--merge={tmp_path}/odd/results.json', *halting, f'--out={tmp_path / "alone"}'])
    assert 'note:' not in capsys.readouterr().err
    assert json.loads((tmp_path / 'alone' / 'results.json').read_text())['seed'] == 6
    for bad, says in ((f'{tmp_path}/one/results.json,{tmp_path}/odd/results.json', 'different --seed ([5, 6])'),
                      (f'{tmp_path}/none.json', 'No such file')):
        with pytest.raises(SystemExit) as e:
            tasks.main([f'--merge={bad}', f'--out={tmp_path / "x"}'])
        assert says in str(e.value.code) and str(e.value.code).startswith('beyond.tasks: error: --merge')
    with pytest.raises(SystemExit) as e:  # both, or neither
        tasks.main([f'--merge={tmp_path}/one/results.json', '--runs=r', f'--out={tmp_path / "x"}'])
    assert 'one of them' in str(e.value.code)


def test_the_tables_print_one_header_and_one_line_a_row():
    from beyond.tasks import render, render_designs
    row = dict(run='/x/out-parity-s1/', length=8, K=4, intervention='clamp', accuracy=0.875, exact=0.5, h_norm=12.345,
               one_minus_cos=0.00123)
    assert render([row, dict(row, K=8)]).split('\n') == [
        '| run | length | K | intervention | accuracy | exact match | mean ‖H_K‖ | 1 - cos |',
        '|---|---|---|---|---|---|---|---|',
        '| out-parity-s1 | 8 | 4 | clamp | 87.5% | 50.0% | 12.3 | 1.23e-03 |',
        '| out-parity-s1 | 8 | 8 | clamp | 87.5% | 50.0% | 12.3 | 1.23e-03 |']
    group = dict(design='out-parity', seeds=2, length=8, K=4, intervention='none', accuracy=0.875, accuracy_std=0.125,
                 exact=0.5, exact_std=0.25, h_norm=12.345, h_norm_std=0.5)
    assert render_designs([group]).split('\n') == [
        '| design | seeds | length | K | intervention | accuracy | exact match | mean ‖H_K‖ |',
        '|---|---|---|---|---|---|---|---|',
        '| out-parity | 2 | 8 | 4 | none | 87.5 ± 12.5% | 50.0 ± 25.0% | 12.3 ± 0.5 |']


# -----------------------------------------------------------------------------
# accuracy.png: design 'a' of three seeds (spreads that reach below 0 and above 100 %, and none), design 'b' of
# one, over three lengths; a clamp intervention's rows are not in the figure

def task_rows():
    exact = {('a', 1): [0.0, 0.0, 0.6], ('a', 2): [0.5, 0.5, 0.5], ('a', 4): [1.0, 1.0, 0.4],
             ('b', 1): [0.1], ('b', 2): [0.3], ('b', 4): [0.9]}
    rows = []
    for (design, k), values in exact.items():
        for seed, e in enumerate(values):
            for length in (8, 16, 32):
                run = f'out/{design}-s{seed}' if len(values) > 1 else f'out/{design}'
                rows += [dict(run=run, length=length, K=k, trained_K=2, intervention=i, accuracy=e, exact=e,
                              h_norm=1.0, rms=1.0, one_minus_cos=0.0) for i in ('none', 'clamp')]
    return rows


def task_figure(monkeypatch):
    """The figure tasks.plot saves (its file not written), and the designs it drew."""
    import matplotlib.figure
    designs, saved = tasks.designs(task_rows()), []
    monkeypatch.setattr(matplotlib.figure.Figure, 'savefig', lambda fig, *args, **kw: saved.append(fig))
    tasks.plot(designs, 'accuracy.png')
    return saved[0], designs


def test_the_task_figure_has_a_panel_per_length_with_each_designs_seed_spread_as_a_band(plt, monkeypatch):
    fig, designs = task_figure(monkeypatch)
    assert [ax.get_title() for ax in fig.axes] == ['8 bits', '16 bits', '32 bits']
    # laid out tight: the panels fill the figure (matplotlib's default margins leave 12.5% on the left)
    assert fig.subplotpars.left < 0.1 and fig.subplotpars.right > 0.9
    assert [describe_legend(ax) and describe_legend(ax)['labels'] for ax in fig.axes] == [None, None, ['a (3)', 'b (1)']]
    legend = fig.axes[-1].get_legend()  # outside the last panel, to its right
    assert legend._loc == 2 and describe_legend(fig.axes[-1])['anchor'][0] > 1
    for ax, length in zip(fig.axes, (8, 16, 32)):
        assert len(ax.lines) == len(ax.collections) == 2  # (no line for the clamp rows)
        for line, band, design in zip(ax.lines, ax.collections, 'ab'):
            rows = [g for g in designs if (g['design'], g['length'], g['intervention']) == (design, length, 'none')]
            mean, std = 100 * np.array([g['exact'] for g in rows]), 100 * np.array([g['exact_std'] for g in rows])
            assert sig(line.get_xdata()) == sig([g['K'] for g in rows]) and sig(line.get_ydata()) == sig(mean)
            # the band: mean ± std of the seeds, never past what a percentage can be, see-through, in the line's colour
            y = band.get_paths()[0].vertices[:, 1]
            assert set(sig(y)) == set(sig(np.clip(mean - std, 0, 100))) | set(sig(np.clip(mean + std, 0, 100)))
            (face,) = band.get_facecolor()
            assert band.get_alpha() == face[3] == 0.15 and hexes([face[:3]]) == hexes([line.get_color()])
        assert min(ax.collections[0].get_paths()[0].vertices[:, 1]) == 0  # ('a' reaches below 0 and above 100 %)
        assert max(ax.collections[0].get_paths()[0].vertices[:, 1]) == 100


def test_the_task_figure_is_drawn_as_its_description_says(plt, monkeypatch):
    assert matches_snapshot('figures.json', 'beyond.tasks.plot', describe(task_figure(monkeypatch)[0])), \
        'accuracy.png differs from tests/snapshots/figures.json (UPDATE_SNAPSHOTS=1 rewrites it after a deliberate change)'


def task_rows_of(n_designs):
    """One seed of each of n_designs designs, at one length and two K."""
    return [dict(run=f'out/d{d}', length=8, K=k, trained_K=2, intervention='none', accuracy=0.5, exact=0.5, h_norm=1.0,
                 rms=1.0, one_minus_cos=0.0) for d in range(n_designs) for k in (1, 2)]


def test_the_task_figure_is_written_and_closed(plt, tmp_path):
    # a study draws one figure a scoring: each left open would stay in pyplot's memory (and warn past 20)
    plt.figure()  # (the caller's own figure stays open)
    before = plt.get_fignums()
    tasks.plot(tasks.designs(task_rows()), str(tmp_path / 'accuracy.png'))
    assert (tmp_path / 'accuracy.png').stat().st_size > 0 and plt.get_fignums() == before
    plt.close('all')


def test_the_task_figure_draws_designs_past_ten_in_another_line_style(plt, monkeypatch):
    # ten colours, then the colours again with dashes, then dotted: 25 designs stay told apart
    import matplotlib.figure
    saved = []
    monkeypatch.setattr(matplotlib.figure.Figure, 'savefig', lambda fig, *args, **kw: saved.append(fig))
    tasks.plot(tasks.designs(task_rows_of(25)), 'accuracy.png')
    lines = saved[0].axes[0].lines
    assert [l.get_linestyle() for l in lines] == ['-'] * 10 + ['--'] * 10 + [':'] * 5
    assert len({(hexes([l.get_color()])[0], l.get_linestyle()) for l in lines}) == 25


def test_the_task_figures_legend_sits_flush_at_its_anchor_right_of_the_last_panel(plt, monkeypatch):
    fig, _ = task_figure(monkeypatch)
    fig.canvas.draw()
    ax = fig.axes[-1]
    box = ax.get_legend().get_window_extent()
    x, y = ax.transAxes.transform((1.02, 1))  # the anchor: its upper left corner there, no padding between
    assert box.x0 == pytest.approx(x, abs=0.5) and box.y1 == pytest.approx(y, abs=0.5)


def test_the_task_figure_is_saved_at_100_dpi_whatever_the_matplotlib_settings(plt, tmp_path):
    # accuracy.png is (4 x lengths + 2) x 3.2 inches at 100 dpi: 1400 x 320 pixels for three lengths, also
    # where a matplotlibrc sets another dpi for saved figures or for figures
    import struct
    for rc in ({'savefig.dpi': 72}, {'figure.dpi': 150}):
        with plt.rc_context(rc):
            tasks.plot(tasks.designs(task_rows()), str(tmp_path / 'accuracy.png'))
        png = (tmp_path / 'accuracy.png').read_bytes()
        assert png[:8] == b'\x89PNG\r\n\x1a\n' and struct.unpack('>II', png[16:24]) == (1400, 320), rc


# -----------------------------------------------------------------------------
# what it writes and what it refuses: strict JSON when a run diverges, a run trained on text in one line

def test_a_tasks_results_json_is_strict_json_when_a_run_diverges(tmp_path, monkeypatch):
    # beyond.tasks writes through report.write_json: a diverged run's inf and NaN are null
    import beyond.tasks as tasks
    row = dict(run='out-parity', length=4, K=1, trained_K=1, intervention='none', accuracy=0.5, exact=0.0,
               h_norm=float('nan'), rms=float('inf'), one_minus_cos=float('nan'))
    monkeypatch.setattr(tasks, 'evaluate', lambda *a, **kw: [row])
    monkeypatch.setattr(tasks, 'plot', lambda groups, path: None)
    tasks.main(['--runs=out-parity', '--lengths=4', '--loops=1', f'--out={tmp_path}'])
    written = strict((tmp_path / 'results.json').read_text())
    assert written['results'][0]['rms'] is None and written['designs'][0]['h_norm'] is None


def test_a_run_whose_data_is_not_at_hand_is_told_its_task_by_its_dataset_name_before_its_vocabulary(tmp_path,
                                                                                                   monkeypatch):
    # run_task without the run's data folder: its config's dataset name (the folder's last part) names the task; the
    # model's vocabulary only where that name is no task's. A name of another vocabulary's task is refused, not taken
    # for the task of the model's, and of two tasks of one vocabulary the name tells which
    from dataclasses import replace
    model = tiny(n_layer=1, n_loops=2, vocab_size=4)  # (parity's vocabulary)
    ckpt = lambda dataset: dict(model_args=asdict(model.config), config=dict(data_dir=str(tmp_path), dataset=dataset))  # noqa: E731
    with pytest.raises(UserError, match=r'trained on addition \(vocab 4\)'):
        tasks.run_task('four', model, ckpt('addition'))
    monkeypatch.setitem(tasks.TASKS, 'parity2', replace(tasks.TASKS['parity'], name='parity2'))
    assert tasks.run_task('four', model, ckpt('tasks/parity2/')).name == 'parity2'
    assert tasks.run_task('four', model, ckpt('parity')).name == 'parity'


def test_beyond_tasks_refuses_a_run_trained_on_text(tiny_data, tmp_path):
    import beyond.tasks as tasks
    out = tmp_path / 'text-run'
    train_in_process(tiny_data, out, '--max_iters=1', '--eval_interval=1', '--eval_iters=1')
    with pytest.raises(SystemExit) as e:
        tasks.main([f'--runs={out}', '--lengths=4', '--loops=1,2', '--rows=4', f'--out={tmp_path / "eval"}'])
    message = str(e.value.code)
    assert message.startswith('beyond.tasks: error:') and '\n' not in message, message
    assert str(out) in message and 'tiny-bytes' in message and 'vocab 256' in message and 'parity' in message
    assert not (tmp_path / 'eval').exists()
    # a model of parity's vocabulary whose data (here, at hand) is text is refused too; one whose data is
    # not at hand is taken on its vocabulary
    model = tiny(n_layer=1, n_loops=4, vocab_size=4)
    ckpt = dict(model_args=asdict(model.config), config=dict(data_dir=str(tiny_data), dataset='tiny-bytes'))
    with pytest.raises(UserError, match='tiny-bytes'):
        tasks.run_task('four', model, ckpt)
    assert tasks.run_task('four', model, dict(ckpt, config=dict(data_dir=str(tmp_path), dataset='parity'))).name == 'parity'
    # the task told from the run: its data's meta.json, else its dataset's name, else the one task of its vocabulary
    from beyond import addition
    six = tiny(n_layer=1, n_loops=4, vocab_size=6)
    nowhere = dict(model_args=asdict(six.config), config=dict(data_dir=str(tmp_path), dataset='parity-2004'))
    assert tasks.run_task('six', six, nowhere).name == 'addition'  # (no data, a name of neither: the vocabulary's)
    assert tasks.run_task('four', model, dict(nowhere, config=dict(data_dir=str(tmp_path), dataset='x'))).name == 'parity'
    addition.main(['--out_dir', str(tmp_path / 'addition'), '--train_rows', '8', '--val_rows', '4', '--test_rows', '4',
                   '--probe_rows', '4', '--train_lengths', '3', '--val_lengths', '4', '--test_lengths', '4',
                   '--probe_lengths', '5'])
    at_hand = dict(data_dir=str(tmp_path), dataset='addition')
    assert tasks.run_task('six', six, dict(nowhere, config=at_hand)).name == 'addition'
    with pytest.raises(UserError) as e:
        tasks.run_task('four', model, dict(ckpt, config=at_hand))  # addition's data, parity's vocabulary: neither
    assert 'trained on addition (vocab 4)' in str(e.value) and {'parity (vocab 4)', 'addition (vocab 6)'} <= set(
        re.findall(r'\w+ \(vocab \d\)', str(e.value)))


# -----------------------------------------------------------------------------
# the command line: every option documented in --help, as tests/snapshots/argparse.json holds it

def test_every_option_of_an_argparse_script_is_documented_in_its_help(monkeypatch):
    assert_options_documented('beyond/tasks.py', tasks.main, monkeypatch)


def test_a_run_reads_strings_past_its_block_size_only_without_learned_positions(tmp_path):
    """evaluate: a run with learned positions cannot read a string longer than its block_size (one line saying so);
    one trained with positions='none' (FieldGPT) reads any length; a folder with no checkpoint is one line naming it."""
    torch.manual_seed(0)
    config = dict(data_dir=str(tmp_path), dataset='parity')
    for name, cls, cfg in (('learned', LoopedGPT, LoopedGPTConfig(vocab_size=4, block_size=16, n_layer=1, n_head=2,
                                                                    n_embd=16, n_loops=2, dropout=0.0)),
                           ('none', FieldGPT, FieldGPTConfig(vocab_size=4, block_size=16, n_layer=1, n_head=2, n_embd=16,
                                                             n_loops=2, dropout=0.0, positions='none'))):
        (tmp_path / name).mkdir()
        torch.save(dict(model_args=asdict(cfg), model=cls(cfg).state_dict(), config=config,
                        model_class=f'{cls.__module__}.{cls.__qualname__}'), tmp_path / name / 'ckpt.pt')
    with pytest.raises(UserError, match='learned positions up to 16 tokens'):
        tasks.evaluate([str(tmp_path / 'learned')], [20], [1], seed=2, rows=4)
    assert len(tasks.evaluate([str(tmp_path / 'learned')], [15], [1], seed=2, rows=4)) == 1  # 15 bits + start: 16
    assert {r['length'] for r in tasks.evaluate([str(tmp_path / 'none')], [40], [1, 2], seed=2, rows=4)} == {40}
    # an addition's row holds its carry-out position too: 14 bits + start + carry out fill 16 tokens, 15 do not
    add = LoopedGPTConfig(vocab_size=6, block_size=16, n_layer=1, n_head=2, n_embd=16, n_loops=2, dropout=0.0)
    (tmp_path / 'add').mkdir()
    torch.save(dict(model_args=asdict(add), model=LoopedGPT(add).state_dict(), model_class='model.LoopedGPT',
                    config=dict(data_dir=str(tmp_path), dataset='addition')), tmp_path / 'add' / 'ckpt.pt')
    with pytest.raises(UserError, match='a string of 15 steps, 17 tokens a row'):
        tasks.evaluate([str(tmp_path / 'add')], [15], [1], seed=2, rows=4)
    assert len(tasks.evaluate([str(tmp_path / 'add')], [14], [1], seed=2, rows=4)) == 1
    with pytest.raises(UserError, match=f'no checkpoint at {tmp_path / "empty"}'):
        (tmp_path / 'empty').mkdir()
        tasks.evaluate([str(tmp_path / 'empty')], [8], [1], seed=2, rows=4)


def test_the_shares_table_gives_each_bar_the_runs_passing_their_interval_and_the_norms_of_both_sides():
    """render_shares, on shares of hand-made rows: a row a design x bar x intervention, its bar as written (≥95% by
    K=.., held to ..), k/n, the Wilson interval in percent, and the mean ||H_K|| at the deepest K of the runs that pass
    and of those that fail ('-' where there are none)."""
    def rows(run, exact_by_k, h):
        return [dict(run=run, length=32, K=k, intervention='none', exact=e, h_norm=h) for k, e in exact_by_k.items()]
    good = {96: 0.97, 384: 0.99}
    results = rows('out/p-s1', good, 10.0) + rows('out/p-s2', good, 20.0) + rows('out/p-s3', {96: 0.5, 384: 0.5}, 70.0)
    results += rows('out/q-s1', good, 5.0)
    table = tasks.render_shares(tasks.shares(results)).splitlines()
    low, high = tasks.wilson(2, 3)
    assert table[2] == f"| p | 32 | ≥95% by K=96, held to 384 | none | 2/3 | {100 * low:.0f}–{100 * high:.0f}% | 15, 70 |"
    low, high = tasks.wilson(1, 1)
    assert table[3] == f"| q | 32 | ≥95% by K=96, held to 384 | none | 1/1 | {100 * low:.0f}–{100 * high:.0f}% | 5, - |"
    assert len(table) == 4  # (no 64-bit rows: none scored)
    # rows of a results.json from before the bar's text was kept: the bar told again from its length, K and hold
    older = [{k: v for k, v in r.items() if k != 'bar'} for r in tasks.shares(results)]
    assert tasks.render_shares(older).splitlines() == table


def test_the_pages_tables_a_design_a_row_the_rescues_and_exact_match_by_k():
    """What docs/tasks.md embeds, read again from the rows by hand: a design's shares on one row (each bar's k/n and
    interval, the first bar's norms of both sides), each intervention's runs passing with the failing runs it rescues
    and the passing ones it loses, and exact match by K as the mean ± std over seeds of each (length, K), in %."""
    def rows(run, exact_by_k, h, length=32, intervention='none'):
        return [dict(run=run, length=length, K=k, intervention=intervention, exact=e, h_norm=h, accuracy=e,
                     one_minus_cos=0.0) for k, e in exact_by_k.items()]
    good, bad = {96: 0.97, 384: 0.99}, {96: 0.5, 384: 0.5}
    results = rows('o/p-s1', good, 10.0) + rows('o/p-s2', bad, 2000.0) + rows('o/p-s3', good, 20.0)
    results += rows('o/p-s1', bad, 1.0, intervention='cap') + rows('o/p-s2', good, 1.0, intervention='cap')
    results += rows('o/p-s3', good, 1.0, intervention='cap')
    results += rows('o/p-s1', {256: 1.0}, 3.0, length=64) + rows('o/p-s2', {256: 0.0}, 3.0, length=64)
    results += rows('o/p-s3', {256: 0.0}, 3.0, length=64)
    passing = tasks.shares(results)
    one = tasks.render_design_shares(passing).splitlines()[2]
    (l32, h32), (l64, h64) = tasks.wilson(2, 3), tasks.wilson(1, 3)
    assert one == (f'| p | 2/3 | {100 * l32:.0f}–{100 * h32:.0f}% | 1/3 | {100 * l64:.0f}–{100 * h64:.0f}% | '
                   f'{(10 + 20) / 2:.3g}, 2,000 |')
    # under the cap s1 fails (lost), s2 passes (rescued): 2/3 as with none, one rescued and one lost
    assert tasks.render_rescues(passing).splitlines()[2] == '| p | 32 | 2/3 | 2/3: 1 rescued, 1 lost |'
    pivot = re.split(r'\n\n(?=exact match|mean)', tasks.render_pivots(tasks.designs(results)))
    first = pivot[0].splitlines()
    head = ['| design, bits | K=96 | K=256 | K=384 |', '|---|---|---|---|']
    assert first[1:3] == head
    mean, std = np.mean([97, 50, 97]), np.std([97, 50, 97])
    assert first[3] == f'| p, 32 | {mean:.0f} ± {std:.0f} | - | {np.mean([99, 50, 99]):.0f} ± {np.std([99, 50, 99]):.0f} |'
    assert first[4:7] == [''] + head  # each length's rows under a header of their own: a table a page can show alone
    assert first[7:] == [f"| p, 64 | - | {100 / 3:.0f} ± {np.std([100, 0, 0]):.0f} | - |"]
    assert pivot[1].startswith('exact match (%) by K, cap') and pivot[2].startswith('mean ‖H_K‖ by K, none')
    assert len(pivot[1].splitlines()) == 4  # (the cap scored 32-bit strings only: one header)
    norms = pivot[2].splitlines()
    assert norms[3] == '| p, 64 | - | 3 | - |'   # (the longest strings first)
    assert norms[4:7] == [''] + head
    assert norms[7] == f"| p, 32 | {np.mean([10, 2000, 20]):,.0f} | - | {np.mean([10, 2000, 20]):,.0f} |"
    assert tasks.render_rescues([r for r in passing if r['intervention'] == 'none']) == ''


def test_the_design_shares_name_the_first_bars_bits_and_a_bar_not_scored_is_a_dash():
    # a design scored only at the first bar's length: its other bar's cells are dashes, and the norm column's head
    # names the first bar's bits (32), not its K
    rows = [dict(intervention='none', design='a', length=32, passed=3, runs=4, low=0.3, high=0.95, h_norm_pass=2.0,
                 h_norm_fail=40.0)]
    head, _, row = tasks.render_design_shares(rows).splitlines()
    assert head.endswith(f'mean ‖H_K‖ at the deepest K, {tasks.BARS[0].length} bits: pass, fail |') and ' 32 bits: pass' in head
    assert row.split(' | ')[1:5] == ['3/4', '30–95%', '-', '-'] and '512 bits' not in head  # (a 256x bar: where scored)
    deep = [dict(rows[0], length=2048, passed=9, runs=10, low=0.6, high=0.98, h_norm_pass=24.0, h_norm_fail=None)]
    head, _, row = tasks.render_design_shares(deep).splitlines()
    assert head.split(' | ')[1:] == ['32 bits: passing', '95% interval', '64 bits: passing', '95% interval',
                                     '2048 bits: passing', '95% interval', 'mean ‖H_K‖ at the deepest K, 2048 bits: pass, fail |']
    assert row == '| a | - | - | - | - | 9/10 | 60–98% | 24, - |'


def test_a_design_with_no_row_at_a_length_gets_no_row_there():
    # design b scored at 64 bits only: no 'b, 32' row of dashes in the 32-bit rows
    groups = [dict(design=d, length=n, K=k, intervention='none', exact=1.0, exact_std=0.0, h_norm=5.0)
              for d, n in (('a', 32), ('a', 64), ('b', 64)) for k in (32, 64)]
    exact = re.split(r'\n\n(?=exact match|mean)', tasks.render_pivots(groups))[0]
    assert '| a, 32 |' in exact and '| b, 64 |' in exact and '| b, 32 |' not in exact


def test_a_norm_of_a_thousand_or_more_is_written_whole_with_thousands_separators():
    # the tables' mean ||H_K|| cells (norm_cell): from 1,000 up (as rounded) a whole number with thousands separators (1,000 itself
    # too, not 1e+03), below it three significant figures; a missing or non-finite norm a dash
    cells = {1000.0: '1,000', 1000.4: '1,000', 2499.6: '2,500', 123456.7: '123,457', 999.0: '999', 12.345: '12.3',
             999.7: '1,000', 999.4: '999', -999.7: '-1,000',  # (what rounds to 1,000 is written so, never 1e+03)
             0.5: '0.5', None: '-', float('inf'): '-', float('nan'): '-'}
    assert {v: tasks.norm_cell(v) for v in cells} == cells
    rows = [dict(intervention='none', design='a', length=32, passed=1, runs=2, low=0.1, high=0.9, h_norm_pass=1000.0,
                 h_norm_fail=1500.0)]
    assert tasks.render_design_shares(rows).splitlines()[2].endswith(' | 1,000, 1,500 |')


def test_a_compiled_loop_step_traces_one_graph_from_its_first_width_on(monkeypatch):
    # loop_step's compiled step has dynamic shapes from its first call: the widths settling hands it shrink loop by
    # loop, and the graph traced at the first width serves every later one (dynamo's default would trace the first
    # width static and a second graph at the next). Traced by dynamo alone (a backend that counts, no codegen)
    graphs, real = [], torch.compile

    def keep(gm, example_inputs):
        graphs.append(gm)
        return gm.forward
    monkeypatch.setattr(torch, 'compile', lambda fn, **kw: real(fn, **{**kw, 'backend': keep}))
    model, x = settling_model()
    torch._dynamo.reset()
    try:
        with torch.no_grad():
            e = model.embed(x)
            step, eager = tasks.loop_step(model, compile=True), tasks.loop_step(model)
            for width in (20, 9):
                h = e[:, -width:].contiguous()
                assert torch.allclose(step(h, h, 1), eager(h, h, 1), atol=1e-5)
    finally:
        torch._dynamo.reset()
    assert len(graphs) == 1
