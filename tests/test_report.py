"""
report.py, what the scripts write and draw: perplexity at its edges, the results files and the log (strict
JSON: a non-finite number is null), a group's mean and spread, the labels and every figure of eval_depth.py
(drawn from a results dict made by hand, nothing trained, and described against tests/snapshots/figures.json),
and train.py's printed lines with their MFU and memory.

    python -m pytest -q tests/test_report.py
"""

import json
import math
import os
from dataclasses import asdict, fields
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import report
from beyond.exit_train import ExitTrainConfig
from conftest import another, describe, hexes, matches_snapshot, read_log, sig, strict
from model import SIZE, LoopedGPTConfig
from report import settings_of


# -----------------------------------------------------------------------------
# perplexity

def test_perplexity_by_hand_with_its_overflow_and_nan():
    from report import perplexity
    assert perplexity(0.0) == 1.0 and perplexity(1.0) == pytest.approx(math.e) and perplexity(699.0) == math.exp(699)
    assert perplexity(700.0) == math.inf and perplexity(1e9) == math.inf  # (exp overflows: inf, not an error)
    assert math.isnan(perplexity(float('nan')))  # a NaN loss stays NaN, not inf


# -----------------------------------------------------------------------------
# NaN and inf in results.json and log.jsonl: null, valid JSON for a strict parser; what cannot be null (a dict's key)
# is an error, not a file or a line with a 'NaN' in it

NON_FINITE = dict(loss=float('inf'), ce=[float('nan'), 1.5, -float('inf')], nested={'radial': (float('nan'),)},
                  numpy=np.float64('inf'), iter=3, name='x')


AS_NULL = dict(loss=None, ce=[None, 1.5, None], nested={'radial': [None]}, numpy=None, iter=3, name='x')


def test_non_finite_numbers_are_written_as_null_to_results_and_the_log(tmp_path, capsys):
    report.write_json(str(tmp_path / 'results.json'), NON_FINITE)
    assert strict((tmp_path / 'results.json').read_text()) == AS_NULL
    report.log(str(tmp_path), NON_FINITE, 'a line')
    report.log(str(tmp_path), dict(NON_FINITE, iter=4), 'another')
    lines = (tmp_path / 'log.jsonl').read_text().splitlines()
    assert [strict(line) for line in lines] == [AS_NULL, dict(AS_NULL, iter=4)]
    assert capsys.readouterr().out == 'a line\nanother\n'


def test_a_results_file_has_null_for_a_non_finite_value_and_refuses_one_it_cannot_null(tmp_path):
    path = tmp_path / 'results.json'
    report.write_json(str(path), dict(ppl=[5.0, float('nan')], loss={'K=1': float('inf')}))
    assert json.loads(path.read_text()) == dict(ppl=[5.0, None], loss={'K=1': None})
    # a non-finite dict key is no value json_safe makes null: an error, not a file with a 'NaN' in it
    with pytest.raises(ValueError):
        report.write_json(str(tmp_path / 'keys.json'), {float('nan'): 1.0})
    assert not (tmp_path / 'keys.json').exists()


def test_the_log_refuses_a_non_finite_number_it_cannot_null_as_a_results_file_does(tmp_path, capsys):
    # log.jsonl is written by the rule of write_json: what json_safe cannot make null (a dict's key) is an
    # error, not a line with a 'NaN' or 'Infinity' in it
    for key in (float('nan'), float('inf')):
        with pytest.raises(ValueError):
            report.log(str(tmp_path), {key: 1.0, 'iter': 3}, 'a line')
    report.log(str(tmp_path), {'iter': 4, 'loss': float('nan')}, 'another')  # (a value: null)
    assert (tmp_path / 'log.jsonl').read_text() == '{"iter": 4, "loss": null}\n'



def test_each_log_line_is_printed_as_it_is_logged_not_held_in_a_buffer(tmp_path, monkeypatch):
    # a run's output sent to a file (nohup, a job's log) is block-buffered: each logged line must reach the
    # file when it is logged, not when a buffer of 8 KiB fills or the run ends
    import io
    raw = io.BytesIO()
    monkeypatch.setattr('sys.stdout', io.TextIOWrapper(raw, encoding='utf-8'))  # (not a terminal: no line buffering)
    report.log(str(tmp_path), {'iter': 1}, 'iter 1: a line')
    assert raw.getvalue() == b'iter 1: a line\n'
    report.log(str(tmp_path), {'iter': 2}, 'iter 2: another')
    assert raw.getvalue() == b'iter 1: a line\niter 2: another\n'
    assert (tmp_path / 'log.jsonl').read_text() == '{"iter": 1}\n{"iter": 2}\n'

# -----------------------------------------------------------------------------
# train.py's lines: each printed line shows its record's numbers in their places (the still run's, conftest's); the
# train line's MFU against the peak (log_train called by the test that checks it, with a peak given: the still
# run's calls are its fixture's), and peak memory

def printed_line(r):
    """train.py's line of the log record r, as each label names its field."""
    row = lambda key, spec: ' '.join('-' if v is None else format(v, spec) for v in r[key])  # noqa: E731
    if r['kind'] == 'train':
        return (f"iter {r['iter']}: loss {r['loss']:.4f} | ce {row('ce', '.3f')} | |H_k| {row('h_norm', '.1f')} | "
                f"lr {r['lr']:.1e} | {r['ms_per_iter']:.1f} ms/iter | {r['tok_per_s']:,.0f} tok/s | mfu {100 * r['mfu']:.1f}%")
    return (f"eval {r['iter']}: val loss K=1..{len(r['val_loss'])} {row('val_loss', '.4f')} | ppl {row('val_ppl', '.4g')} | "
            f"|H_k| mean {row('norm_mean', '.1f')} p99 {row('norm_p99', '.1f')} | radial {row('radial', '.1e')} | "
            f"angular {row('angular', '.2e')}")


def test_on_resume_the_log_keeps_train_lines_through_the_checkpoint_and_evals_before_it(tmp_path):
    # the checkpoint at iteration 4 was saved at its eval: the run goes on from 4, so 4's eval comes again (and
    # the train lines after 4, and a last line cut short as the run was killed, go); nothing appears twice
    lines = [dict(kind=kind, iter=it) for it in range(7) for kind in ('train', 'eval') if kind == 'train' or it % 2 == 0]
    with open(tmp_path / 'log.jsonl', 'w') as f:
        f.writelines(json.dumps(r) + '\n' for r in lines)
        f.write('{"kind": "train", "it')
    report.trim_log(str(tmp_path), 4)
    kept = [json.loads(line) for line in open(tmp_path / 'log.jsonl')]
    assert kept == [r for r in lines if r['iter'] < 4 or r == dict(kind='train', iter=4)]
    assert dict(kind='eval', iter=2) in kept and dict(kind='eval', iter=4) not in kept
    report.trim_log(str(tmp_path / 'none'), 4)  # no log yet: nothing to trim, no error


def test_a_new_run_starts_its_log_afresh_a_resume_trims_it_and_eval_only_leaves_it(tmp_path):
    lines = [dict(kind='train', iter=it) for it in range(6)]
    for init_from, eval_only, want in (('scratch', False, None), ('resume', False, lines[:4]), ('resume', True, lines),
                                       ('scratch', True, lines)):
        out = tmp_path / f'{init_from}-{eval_only}'
        out.mkdir()
        (out / 'log.jsonl').write_text(''.join(json.dumps(r) + '\n' for r in lines))
        report.start_log(SimpleNamespace(out_dir=str(out), init_from=init_from, eval_only=eval_only), 3)
        got = [json.loads(line) for line in open(out / 'log.jsonl')] if (out / 'log.jsonl').exists() else None
        assert got == want, (init_from, eval_only)
    report.start_log(SimpleNamespace(out_dir=str(tmp_path / 'new' / 'run'), init_from='scratch', eval_only=False), 0)
    assert (tmp_path / 'new' / 'run').is_dir()  # (out_dir made, with its parents)


def test_each_printed_line_shows_its_records_numbers_in_their_places(still_run):
    from report import eval_line
    _, log, printed = still_run
    lines = printed.splitlines()
    for r in log:
        assert printed_line(r) in lines, printed_line(r)
    # the tiny run's norms agree to one decimal: a record whose every field is its own number
    ev = dict(val_loss=[1.25], val_ppl=[3.5], norm_mean=[10.5], norm_median=[20.5], norm_p99=[30.5], norm_max=[40.5],
              radial=[5e-3], angular=[6e-4])
    assert eval_line(7, ev) == printed_line(dict(kind='eval', iter=7, **ev))


def test_the_train_line_and_its_record_give_the_mfu_against_the_peak(tmp_path, capsys):
    sums = report.LogSums(3, 'cpu')
    for loss, ce, h_norm in ((2.5, [3.0, 2.0], [1.0, 4.0]), (1.5, [2.0, 1.0], [1.0, 2.0])):  # K=2 of 3: loop 3 unread
        sums.add(torch.tensor(loss), torch.tensor(ce), torch.tensor(h_norm), flops=1.5e9)
    # 3e9 FLOPs in 0.5 s against a peak of 1e10 FLOP/s: 60 % of the peak
    report.log_train(str(tmp_path), 8, sums, seconds=0.5, lr=3e-4, tokens_per_iter=512, peak=1e10, device='cpu')
    report.log_train(str(tmp_path), 9, sums, seconds=0.5, lr=3e-4, tokens_per_iter=512, peak=None,
                     device='cpu')  # (no peak known: no MFU)
    assert capsys.readouterr().out.splitlines() == [
        'iter 8: loss 2.0000 | ce 2.500 1.500 - | |H_k| 1.0 3.0 - | lr 3.0e-04 | 250.0 ms/iter | 2,048 tok/s | mfu 60.0%',
        'iter 9: loss 2.0000 | ce 2.500 1.500 - | |H_k| 1.0 3.0 - | lr 3.0e-04 | 250.0 ms/iter | 2,048 tok/s']
    with open(tmp_path / 'log.jsonl') as f:
        records = [json.loads(line) for line in f]
    assert records[0] == dict(kind='train', iter=8, loss=2.0, ce=[2.5, 1.5, None], h_norm=[1.0, 3.0, None], lr=3e-4,
                              ms_per_iter=250.0, tok_per_s=2048.0, mfu=pytest.approx(0.6), peak_mem_gib=None)
    assert records[1]['mfu'] is None


def test_peak_memory_is_cudas_peak_in_gib(tmp_path, monkeypatch, capsys):
    from report import log_train
    monkeypatch.setattr(torch.cuda, 'max_memory_allocated', lambda device: 3 * 2 ** 30 + 2 ** 29)
    from report import LogSums
    sums = LogSums(1, 'cpu')
    sums.add(torch.tensor(2.0), torch.ones(1), torch.ones(1), flops=0)
    log_train(str(tmp_path), 1, sums, seconds=1.0, lr=1e-3, tokens_per_iter=1, peak=None, device='cuda')
    assert read_log(tmp_path)[0]['peak_mem_gib'] == 3.5 and '| 3.5 GiB' in capsys.readouterr().out


# -----------------------------------------------------------------------------
# a group's mean and spread, and the label a group of seeds goes by

def test_a_group_of_one_run_with_a_nan_value_has_a_nan_mean_and_spread():
    # a diverged run's NaN (its val loss, in memory as eval_depth scores it): alone in its group, mean and std
    # are NaN, as a NaN among several runs makes them; nothing raises
    mean, std = report.mean_std([dict(loss=[float('nan'), 2.0], K=3)])
    assert math.isnan(mean['loss'][0]) and math.isnan(std['loss'][0]) and mean['K'] == 3
    assert mean['loss'][1] == 2.0 and math.isnan(std['loss'][1])  # (one run: no spread)
    mean, std = report.mean_std([dict(loss=[float('nan')]), dict(loss=[1.0])])
    assert math.isnan(mean['loss'][0]) and math.isnan(std['loss'][0])


def test_every_model_field_off_its_default_is_in_the_label():
    # the label a group of seeds goes by (report.label, with its settings) names every field that splits a
    # condition, but the size fields (in the run's name) and the depth, told as K. A field's default is the one
    # the class the run's config names declares (beyond/'s positions, 'learned', is no type's zero)
    default = ExitTrainConfig()
    run = dict(model=asdict(default), trained_K=default.n_loops, random_depth=False,
               config=dict(model_class='beyond.exit_train.ExitTrainedGPT'))
    plain = settings_of(run)
    assert plain == settings_of(dict(run, model=asdict(LoopedGPTConfig()), config={}))  # beyond/'s fields at their defaults: unnamed
    # a results.json from before 'model' (flat keys): the fields of the class its config names are read too
    old = dict(readout='norm', loss='perloop', sandwich_norm=False, damping=True, trained_K=4, config=run['config'])
    assert settings_of(old) == 'norm readout, perloop CE, damping, K=4'
    # a class that cannot be loaded (beyond/ deleted): the paper's defaults, its own fields named off the type's
    gone = dict(run, model=dict(run['model'], sandwich_norm=True), config=dict(model_class='beyond.gone.Model'))
    assert settings_of(gone) == 'norm readout, perloop CE, sandwich_norm, positions learned, K=4'
    for f in fields(ExitTrainConfig):
        if f.name in SIZE and f.name != 'n_loops':
            continue
        value = another(f.name, getattr(default, f.name))
        moved = dict(run, model=dict(run['model'], **{f.name: value}),
                     trained_K=value if f.name == 'n_loops' else run['trained_K'])
        assert settings_of(moved) != plain, f.name
        if f.name not in ('readout', 'loss', 'n_loops'):  # (those are always written, by their value)
            assert f.name in settings_of(moved), f.name
    assert settings_of(dict(run, random_depth=True)) != plain


# -----------------------------------------------------------------------------
# eval_depth.py's figures, from three runs: two seeds of a raw per-loop condition (their spread: error bars) and
# one norm terminal run with a setting off its default (its settings in its label), whose K=1 is untrained (a
# perplexity that cuts the axis) and whose training diverged once (a gap in its curve). Each figure is checked
# twice: for what it must show, and as a description against tests/snapshots/figures.json (conftest's describe)

def a_run(name, seed, model, ppl, speed, norms, counts, lemma, val_loss):
    return dict(
        name=name, path=f'runs/{name}', model=model, trained_K=2, random_depth=False, seed=seed, split='val',
        batch_size=8, device='cpu',
        per_K=[dict(K=k, ppl=p, tok_per_s=s, norm_mean=n, norm_p99=3 * n)
               for k, p, s, n in zip((1, 2, 3, 4), ppl, speed, norms)],
        final_norm_hist=dict(loop=2, edges=list(np.logspace(0, 1, 6)), counts=counts),
        lemma=lemma and dict(loops=4, s=lemma, radial_increment=list(np.diff(lemma)), c=0.5,
                             angular_step=[0.5 / s for s in lemma[:-1]]),
        curve=dict(iter=[0, 10, 20], norm_p99=[3 * norms[1], 4 * norms[1], 5 * norms[1]], val_loss_1=[3.0, 2.9, 2.8],
                   val_loss_K=val_loss, train_iter=[0, 5, 10, 15, 20], norm_mean=[n * norms[1] for n in (1, 1.2, 1.4, 1.6, 2)]))


RAW = asdict(LoopedGPTConfig(readout='raw', loss='perloop'))


NORM = asdict(LoopedGPTConfig(readout='norm', loss='terminal', norm_penalty=0.1))


RUNS = [a_run('raw-s1', 1, RAW, [9.0, 6.0, 6.5, 7.5], [4000, 2000, 1400, 1000], [2, 4, 8, 16], [0, 3, 5, 2, 0],
              [1.0, 2.0, 4.0, 8.0], [3.0, 2.5, 2.2]),
        a_run('raw-s2', 2, RAW, [9.4, 6.2, 6.9, 8.1], [4200, 2100, 1300, 1000], [2.2, 4.4, 8.8, 17], [0, 2, 6, 2, 0],
              [1.0, 2.5, 4.5, 9.0], [3.1, 2.6, 2.3]),
        a_run('norm', 1, NORM, [400.0, 7.0, 7.2, 7.4], [3900, 1950, 1350, 980], [1, 1.5, 2, 2.5], [1, 4, 0, 0, 0],
              None, [3.0, None, 2.4])]


def groups():
    """The two groups as eval_depth groups them: each with the mean and std of its runs."""
    def group(name, runs):
        mean, std = report.mean_std(runs)
        return dict(name=name, runs=[r['name'] for r in runs], seeds=[r['seed'] for r in runs], n=len(runs), mean=mean,
                    std=std)
    return [group('raw', RUNS[:2]), group('norm', RUNS[2:])]


def drawn(plt, *figures):
    """{name: figure} of report's figure functions, drawn in the test that reads them (mutmut links a function
    to the tests that call it, and a module fixture's calls to the first test that made it)."""
    return {f.__name__: f(plt, groups(), RUNS)[0] for f in figures}


def legend_labels(fig):
    return [t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]


def test_every_figures_legend_names_each_group_with_its_settings(plt):
    figures, (raw_group, norm_group) = drawn(plt, *report.FIGURES), groups()
    raw = 'raw (raw readout, perloop CE, K=2, 2 seeds)'  # label(g, settings=True)
    norm = 'norm (norm readout, terminal CE, norm_penalty 0.1, K=2)'
    assert report.label(raw_group, settings=True) == raw and report.label(norm_group, settings=True) == norm
    assert legend_labels(figures['ppl_vs_k']) == legend_labels(figures['frontier']) == [raw, norm]
    assert legend_labels(figures['norms_vs_k']) == [f'{raw}: mean', 'raw: p99', f'{norm}: mean', 'norm: p99']
    assert legend_labels(figures['norm_hist']) == [f'{raw}, loop 2', f'{norm}, loop 2']
    assert legend_labels(figures['lemma_figure']) == [raw]  # (the norm run has no Lemma-2 sweep)
    # drift: a colour per condition, both of its seeds in it; each panel's first seed's curve carries the label
    train_norm, val_loss = figures['drift'].axes
    assert legend_labels(figures['drift']) == [raw, norm] and val_loss.get_legend() is None  # (one legend, left)
    for ax, columns in ((train_norm, ('train_iter', 'norm_mean')), (val_loss, ('iter', 'val_loss_K'))):
        solid = [l for l in ax.lines if l.get_linestyle() == '-']
        assert [l.get_label() for l in solid][::2] == [raw, norm] and solid[1].get_label().startswith('_')
        assert [l.get_color() for l in solid] == ['C0', 'C0', 'C1']
        for line, run in zip(solid, RUNS):
            assert sig(line.get_xdata()) == sig(run['curve'][columns[0]])
            assert sig(line.get_ydata()) == sig(report.num(run['curve'][columns[1]]))  # (None: a gap)


def test_the_frontier_shows_both_spreads_and_names_each_point_by_its_k(plt):
    ax, (raw_group, norm_group) = drawn(plt, report.frontier)['frontier'].axes[0], groups()
    raw, norm = ax.containers  # the two seeds' spread in throughput and in perplexity; one run: no bars
    assert (raw.has_xerr, raw.has_yerr, norm.has_xerr, norm.has_yerr) == (True, True, False, False)
    data, caps, (xbars, ybars) = raw
    mean, std = raw_group['mean']['per_K'], raw_group['std']['per_K']
    assert sig(data.get_xdata()) == sig([r['tok_per_s'] for r in mean])
    assert [sig(s[:, 0]) for s in xbars.get_segments()] == [sig([r['tok_per_s'] - e['tok_per_s'], r['tok_per_s']
                                                                 + e['tok_per_s']]) for r, e in zip(mean, std)]
    assert [sig(s[:, 1]) for s in ybars.get_segments()] == [sig([r['ppl'] - e['ppl'], r['ppl'] + e['ppl']])
                                                             for r, e in zip(mean, std)]
    points = [r for g in (raw_group, norm_group) for r in g['mean']['per_K']]  # each K=k at its (speed, perplexity)
    assert [(t.get_text(), sig(t.xy)) for t in ax.texts] == [(f"K={r['K']}", sig([r['tok_per_s'], r['ppl']])) for r in points]
    assert ax.get_xscale() == 'log' and ax.get_ylim()[1] == pytest.approx(2 * 6.1)  # (cut at 2x the best)


def test_the_drift_figure_sets_its_two_panels_side_by_side(plt):
    train_norm, val_loss = drawn(plt, report.drift)['drift'].axes
    left, right = train_norm.get_position(), val_loss.get_position()
    assert (left.y0, left.y1) == pytest.approx((right.y0, right.y1)) and left.x1 < right.x0  # one row, the norms first


def test_the_lemma_figure_sets_its_three_panels_side_by_side(plt):
    scale, radial, angular = drawn(plt, report.lemma_figure)['lemma_figure'].axes
    boxes = [ax.get_position() for ax in (scale, radial, angular)]
    assert all((b.y0, b.y1) == pytest.approx((boxes[0].y0, boxes[0].y1)) for b in boxes)  # one row
    assert boxes[0].x1 < boxes[1].x0 and boxes[1].x1 < boxes[2].x0  # s_k, then a_k, then the angular step


def test_the_perplexity_axis_is_cut_only_past_twice_the_best(plt):
    # a curve from 3 to exactly 6 (twice the best) is drawn whole, with margins and its title as it was;
    # one that goes past 6 is cut at 6, and the title says so
    for worst, cut in ((6.0, False), (6.5, True)):
        fig, ax = plt.subplots()
        ax.plot([1, 2, 3], [3.0, 4.0, worst])
        ax.set_title('ppl')
        report.clip_ppl(ax, [3.0, 4.0, worst])
        assert (ax.get_title() != 'ppl') == cut
        assert ax.get_ylim() == pytest.approx((0.97 * 3, 6.0)) if cut else ax.get_ylim()[1] > worst


def test_each_lemma_group_is_in_its_colour_in_every_panel_in_a_style_of_more_colours(plt):
    # the Lemma-2 figure colours a group C0..C9 (the 11th again C0) in all three panels; its dotted c / s_k line must
    # take the colour of its group's solid line, also where the style's colour cycle is longer than ten (tab20 here)
    import copy

    from cycler import cycler
    raw = groups()[0]
    many = [dict(copy.deepcopy(raw), name=f'raw{i}') for i in range(11)]
    with plt.rc_context({'axes.prop_cycle': cycler(color=plt.get_cmap('tab20').colors)}):  # (a 'CN' is read on use)
        fig, _ = report.lemma_figure(plt, many, RUNS)
        angular = fig.axes[2]
        solid, dotted = angular.lines[0::2], angular.lines[1::2]
        assert len(solid) == len(dotted) == 11 and {l.get_linestyle() for l in dotted} == {':'}
        assert hexes([l.get_color() for l in dotted]) == hexes([l.get_color() for l in solid])
        assert hexes([solid[10].get_color()]) == hexes(['C0'])  # (the 11th group: C0 again)
        for ax in fig.axes[:2]:  # the scale and the radial increment: each group's line in the same colour too
            assert hexes([l.get_color() for l in ax.lines]) == hexes([l.get_color() for l in solid])



def test_a_legend_below_its_axes_is_in_the_written_png(plt, tmp_path):
    # report.legend puts a figure's legend below its axes, past the bottom of an 8x6 figure's default margins:
    # all_plots must write the PNG with it in. Its entry's line here is drawn nowhere else (green), so green
    # pixels in the file are the legend's; and a margin of background all round: nothing cut at an edge
    def figure(plt, groups, runs):
        fig, ax = plt.subplots(figsize=(8, 6))
        ax.plot([1, 2, 3], [3.0, 4.0, 5.0], color='k', label='a line')
        ax.plot([], [], color='#00ff00', lw=3, label='only in the legend')
        report.legend(ax)
        return fig, 'legend.png'
    paths = report.all_plots([], [], str(tmp_path), figures=(figure,))
    assert paths == [str(tmp_path / 'legend.png')]
    img = plt.imread(paths[0])[..., :3]
    green = (img[..., 1] > 0.9) & (img[..., 0] < 0.2) & (img[..., 2] < 0.2)
    rows = np.flatnonzero(green.any(1))
    assert green.sum() > 20 and rows.min() > img.shape[0] / 2  # the legend's line, in the lower half
    for edge in (img[:3], img[-3:], img[:, :3], img[:, -3:]):
        assert (edge == 1).all()  # (white)

def test_all_plots_writes_each_png_at_110_dpi_whatever_the_figures_own(plt, tmp_path):
    # the pages' figures are 110 dpi: the resolution the PNG records (its pHYs chunk), and its size in pixels that
    # of the drawn area at that dpi (the box cut to what is drawn: no wider than the figure's 4 inches at 110)
    from PIL import Image

    def figure(plt, groups, runs):
        fig, ax = plt.subplots(figsize=(4, 3), dpi=50)
        ax.plot([1, 2], [3, 4])
        return fig, 'a.png'
    path, = report.all_plots([], [], str(tmp_path), figures=(figure,))
    with Image.open(path) as im:
        assert [round(d) for d in im.info['dpi']] == [110, 110]
        assert 0.8 * 4 * 110 < im.size[0] <= 4 * 110 + 2 and 0.8 * 3 * 110 < im.size[1] <= 3 * 110 + 2


def test_all_plots_closes_each_figure_it_writes(plt, tmp_path):
    # a study of many runs draws many figures (one a run, as a figure function may make them): each is closed once
    # written, so none holds its memory open past all_plots (and pyplot's warning at 20 open figures never comes)
    def one(plt, groups, runs):
        return plt.subplots()[0], 'one.png'

    def one_a_run(plt, groups, runs):
        return [(plt.subplots()[0], f'run{i}.png') for i in range(3)]
    plt.close('all')
    paths = report.all_plots([], [], str(tmp_path), figures=(one, one_a_run))
    assert [os.path.basename(p) for p in paths] == ['one.png', 'run0.png', 'run1.png', 'run2.png']
    assert all(os.path.isfile(p) for p in paths)
    assert plt.get_fignums() == []


def test_all_plots_closes_the_figures_it_writes_and_leaves_the_callers_open(plt, tmp_path):
    # all_plots closes each figure it writes, that one and no other: a figure function may draw without pyplot
    # (matplotlib.figure.Figure, held by no one but its caller), and the figure the caller has open, pyplot's
    # current one, stays open
    from matplotlib.figure import Figure

    def unmanaged(plt, groups, runs):
        fig = Figure()
        fig.subplots().plot([1, 2], [3, 4])
        return fig, 'unmanaged.png'
    plt.close('all')
    mine = plt.figure()
    paths = report.all_plots([], [], str(tmp_path), figures=(unmanaged,))
    assert paths == [str(tmp_path / 'unmanaged.png')] and os.path.isfile(paths[0])
    assert plt.get_fignums() == [mine.number] and plt.gcf() is mine


def test_the_mean_and_std_note_is_in_a_title_only_where_a_group_has_several_seeds(plt):
    """seeds_note: ' (mean ± std over seeds)' where any group averages more than one seed; runs of one seed each are
    drawn as they are, with no note."""
    both, one_seed = groups(), groups()[1:]
    assert [g['n'] for g in both] == [2, 1] and [g['n'] for g in one_seed] == [1]
    assert report.seeds_note(both) == ' (mean ± std over seeds)' and report.seeds_note(one_seed) == ''
    for figure, title in ((report.ppl_vs_k, 'Perplexity vs inference depth (dotted: trained K)'),
                          (report.norms_vs_k, 'Hidden-state norm after each loop')):
        titles = [figure(plt, g, runs)[0].axes[0].get_title().split('\n')[0]  # (clip_ppl's note: a line below)
                  for g, runs in ((both, RUNS), (one_seed, RUNS[2:]))]
        assert titles == [title + ' (mean ± std over seeds)', title]


@pytest.mark.parametrize('figure', report.FIGURES, ids=lambda f: f.__name__)
def test_every_figure_is_drawn_as_its_description_says(plt, figure):
    name = figure.__name__
    assert matches_snapshot('figures.json', name, describe(drawn(plt, figure)[name])), \
        f'{name} differs from tests/snapshots/figures.json (UPDATE_SNAPSHOTS=1 rewrites it after a deliberate change)'


def test_a_train_line_averages_each_loops_ce_over_the_iterations_that_read_it_and_nan_where_none_did(tmp_path):
    """LogSums and log_train: per-loop CE summed where read (NaN: unread) and averaged over the iterations that read
    that loop, ||H_k|| over the iterations that ran it; a loop no iteration read has CE NaN."""
    sums = report.LogSums(4, 'cpu')
    nan = float('nan')
    sums.add(torch.tensor(1.0), torch.tensor([nan, 2.0, 4.0]), torch.tensor([1.0, 2.0, 3.0]), 10)  # K=3, loop 1 unread
    sums.add(torch.tensor(3.0), torch.tensor([nan, nan]), torch.tensor([5.0, 6.0]), 20)            # K=2, nothing read
    sums.add(torch.tensor(2.0), torch.tensor([nan, 6.0, 8.0]), torch.tensor([3.0, 4.0, 5.0]), 30)
    report.log_train(str(tmp_path), 7, sums, seconds=2.0, lr=1e-3, tokens_per_iter=100, peak=None, device='cpu')
    rec = read_log(tmp_path)[-1]
    assert rec['loss'] == pytest.approx(2.0) and rec['iter'] == 7
    assert rec['ce'][0] is None and rec['ce'][3] is None  # NaN, written null: loop 1 never read, loop 4 never ran
    assert rec['ce'][1:3] == pytest.approx([4.0, 6.0])                    # (2 + 6) / 2 and (4 + 8) / 2, not over 3
    assert rec['h_norm'][:3] == pytest.approx([3.0, 4.0, 4.0])            # over the 3, 3 and 2 iterations that ran it
    assert rec['tok_per_s'] == pytest.approx(150.0) and rec['ms_per_iter'] == pytest.approx(2000 / 3)


def test_a_runs_settings_name_every_field_off_its_default_each_after_a_comma():
    """settings_of: 'raw readout, perloop CE, <field> <value>, K=4', a bool field by its name alone."""
    run = dict(model=dict(asdict(LoopedGPTConfig()), readout='raw', norm_penalty=0.01, interloop_norm=True), trained_K=4)
    assert report.settings_of(run) == 'raw readout, perloop CE, norm_penalty 0.01, interloop_norm, K=4'
