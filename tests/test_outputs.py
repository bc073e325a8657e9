"""
What the scripts show beside their numbers, each drawn or printed here from a small input made by hand
(nothing trained, no subprocess): the figures of eval_depth.py (report.py's, from a results dict of three runs
in two groups) and of beyond/tasks.py (accuracy.png, from rows of two designs, and of 25 for its line styles;
its legend's place and its size in pixels as saved), train.py's train line with its
MFU (report.log_train), sample.py's summary line, and the command line of the argparse scripts (prepare.py,
eval_depth.py, beyond/parity.py, beyond/tasks.py) and of configurator's --help (and an unknown setting's pointer to it).

Each figure is checked twice: for what it must show (each group's legend entry names its settings, the
frontier's error bars run in x and in y, the task bands are the seeds' spread clipped to 0-100 %), and, as a
description (per axes: titles, labels, scales, limits, legend and its place, each line's label, colour, style
and data, error bars, bands, annotations), against tests/snapshots/figures.json; each parser's options (flags,
defaults, help, choices, types) against tests/snapshots/argparse.json. After a deliberate change to a figure or
an option, rewrite the snapshots and read their diff:

    UPDATE_SNAPSHOTS=1 python -m pytest -q -n0 tests/test_outputs.py

    python -m pytest -q tests/test_outputs.py
"""

import argparse
import json
import math
import os
import pathlib
from dataclasses import asdict

import numpy as np
import pytest
import torch

import configurator
import eval_depth
import prepare
import report
import sample
from beyond import parity, tasks
from data import ByteTokenizer
from model import LoopedGPT, LoopedGPTConfig

SNAPSHOTS = pathlib.Path(__file__).parent / 'snapshots'


def matches_snapshot(file, key, got):
    """got (made JSON: tuples as lists) is the snapshot's entry key; UPDATE_SNAPSHOTS=1 writes it instead."""
    got, path = json.loads(json.dumps(got)), SNAPSHOTS / file
    stored = json.loads(path.read_text()) if path.exists() else {}
    if os.environ.get('UPDATE_SNAPSHOTS') == '1':
        stored[key] = got
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps(dict(sorted(stored.items())), indent=1, ensure_ascii=False) + '\n')
    assert key in stored, f'no snapshot of {key} in {path}: UPDATE_SNAPSHOTS=1 writes it'
    return got == stored[key]


# -----------------------------------------------------------------------------
# a figure as a reader sees it: a dict of what is drawn

def sig(values):
    """Numbers to 5 significant digits, a flat list; NaN (a gap in a line) as None."""
    a = np.ma.filled(np.ma.asarray(values, dtype=float), np.nan).ravel()
    return [float(f'{v:.5g}') if math.isfinite(v) else None for v in a]


def hexes(colors):
    from matplotlib.colors import to_hex
    return [to_hex(c, keep_alpha=True) for c in colors]


def describe_legend(ax):
    leg = ax.get_legend()
    if leg is None:
        return None
    anchor = ax.transAxes.inverted().transform(leg.get_bbox_to_anchor().p0)  # (in the axes' own coordinates)
    return dict(labels=[t.get_text() for t in leg.get_texts()], loc=leg._loc, anchor=sig(anchor), ncols=leg._ncols,
                frameon=leg.get_frame_on(), fontsize=leg._fontsize)


def describe_axes(ax):
    from matplotlib.container import ErrorbarContainer
    return dict(
        title=ax.get_title(), xlabel=ax.get_xlabel(), ylabel=ax.get_ylabel(), xscale=ax.get_xscale(),
        yscale=ax.get_yscale(), xlim=sig(ax.get_xlim()), ylim=sig(ax.get_ylim()), legend=describe_legend(ax),
        lines=[dict(label=l.get_label(), color=hexes([l.get_color()])[0], ls=l.get_linestyle(), lw=l.get_linewidth(),
                    marker=str(l.get_marker()), ms=l.get_markersize(), x=sig(l.get_xdata()), y=sig(l.get_ydata()))
               for l in ax.lines],  # (an error bar's data line and its caps among them)
        errorbars=[dict(label=c.get_label(), xerr=c.has_xerr, yerr=c.has_yerr)
                   for c in ax.containers if isinstance(c, ErrorbarContainer)],
        collections=[dict(kind=type(c).__name__, alpha=c.get_alpha(), face=hexes(c.get_facecolor()),
                          edge=hexes(c.get_edgecolor()), paths=[sig(p.vertices) for p in c.get_paths()])
                     for c in ax.collections],  # (error bars' segments, bands)
        texts=[dict(text=t.get_text(), xy=sig(t.xy), offset=sig(t.xyann), coords=t.anncoords, fontsize=t.get_fontsize())
               for t in ax.texts],
        patches=[dict(label=p.get_label(), values=sig(p.get_data().values), edges=sig(p.get_data().edges))
                 for p in ax.patches])


def describe(fig):
    return dict(size=sig(fig.get_size_inches()), suptitle=fig.get_suptitle(), axes=[describe_axes(ax) for ax in fig.axes])


@pytest.fixture
def plt():
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    yield plt
    plt.close('all')


# -----------------------------------------------------------------------------
# eval_depth.py's figures (report.py), from three runs: two seeds of a raw per-loop condition (their spread:
# error bars) and one norm terminal run with a setting off its default (its settings in its label), whose K=1
# is untrained (a perplexity that cuts the axis) and whose training diverged once (a gap in its curve)

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


def test_a_group_of_one_run_with_a_nan_value_has_a_nan_mean_and_spread():
    # a diverged run's NaN (its val loss, in memory as eval_depth scores it): alone in its group, mean and std
    # are NaN, as a NaN among several runs makes them; nothing raises
    mean, std = report.mean_std([dict(loss=[float('nan'), 2.0], K=3)])
    assert math.isnan(mean['loss'][0]) and math.isnan(std['loss'][0]) and mean['K'] == 3
    assert mean['loss'][1] == 2.0 and math.isnan(std['loss'][1])  # (one run: no spread)
    mean, std = report.mean_std([dict(loss=[float('nan')]), dict(loss=[1.0])])
    assert math.isnan(mean['loss'][0]) and math.isnan(std['loss'][0])


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


def test_each_lemma_groups_dotted_fit_is_in_its_groups_colour_in_a_style_of_more_colours(plt):
    # the Lemma-2 figure colours a group C0..C9 (the 11th again C0); its dotted c / s_k line must take the
    # colour of its group's solid line, also where the style's colour cycle is longer than ten (tab20 here)
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


@pytest.mark.parametrize('figure', report.FIGURES, ids=lambda f: f.__name__)
def test_every_figure_is_drawn_as_its_description_says(plt, figure):
    name = figure.__name__
    assert matches_snapshot('figures.json', name, describe(drawn(plt, figure)[name])), \
        f'{name} differs from tests/snapshots/figures.json (UPDATE_SNAPSHOTS=1 rewrites it after a deliberate change)'


# -----------------------------------------------------------------------------
# beyond/tasks.py's accuracy.png: design 'a' of three seeds (spreads that reach below 0 and above 100 %, and
# none), design 'b' of one, over three lengths; a clamp intervention's rows are not in the figure

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
# train.py's train line. (tests/test_recomputed.py checks MFU on a trained run, through a module fixture:
# mutmut credits the fixture's calls of log_train to the first test that made it, whose assertions do not
# read MFU, so here log_train is called by the test that checks it, with a peak given.)

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


# -----------------------------------------------------------------------------
# the command lines: each argparse script's options, as its parser declares them

class Parser(BaseException):
    def __init__(self, parser):
        self.parser = parser


def parser_of(main, monkeypatch):
    """The parser main builds, stopped at its parse_args (nothing run)."""
    def seen(parser, *args, **kwargs):
        raise Parser(parser)
    monkeypatch.setattr(argparse.ArgumentParser, 'parse_args', seen)
    monkeypatch.setattr(os, 'cpu_count', lambda: 4)  # (prepare's --num_threads default: the machine's cores)
    with pytest.raises(Parser) as e:
        main(['--help'])
    return e.value.parser


SCRIPTS = {'prepare.py': prepare.main, 'eval_depth.py': eval_depth.main, 'beyond/parity.py': parity.main,
           'beyond/tasks.py': tasks.main}
NO_HELP = set()  # (options that may say nothing in --help: none)


@pytest.mark.parametrize('script', SCRIPTS)
def test_every_option_of_an_argparse_script_is_documented_in_its_help(script, monkeypatch):
    p = parser_of(SCRIPTS[script], monkeypatch)
    monkeypatch.setenv('COLUMNS', '100')
    shown = ' '.join(p.format_help().split())  # (rendered: a stray % in a help string would fail here)
    options = [a for a in p._actions if not isinstance(a, argparse._HelpAction)]
    described = {(a.option_strings or [a.dest])[0]: dict(default=a.default, help=a.help, choices=a.choices,
                                                         required=a.required, type=getattr(a.type, '__name__', None),
                                                         nargs=a.nargs, action=type(a).__name__) for a in options}
    for flag, option in described.items():
        assert option['help'] or option['choices'] or (script, flag) in NO_HELP, f'{script} {flag} has no help'
        if option['help']:
            assert ' '.join(option['help'].split()) in shown, flag
    assert p.description and ' '.join(p.description.split()) in shown
    assert matches_snapshot('argparse.json', script, dict(description=p.description, options=described)), \
        f'{script} options differ from tests/snapshots/argparse.json (UPDATE_SNAPSHOTS=1 rewrites it after a deliberate change)'


def test_configurators_help_lists_a_setting_no_source_block_names_after_a_blank_line(tmp_path):
    script = tmp_path / 'toy.py'
    script.write_text('"""\nA toy script.\n\n    python toy.py\n"""\n\n# ---\nsteps = 3  # iterations\n# ---\n')
    assert configurator.help_text({'steps': 3, 'extra': 'x'}, [str(script)]).splitlines() == [
        'usage: python toy.py [config.py ...] [--key=value ...]', '', 'A toy script.', '',
        'Settings, with their defaults; config files and --key=value override them, in order:',
        '  --steps=3  iterations', '', "  --extra='x'"]


def test_configurators_help_passes_over_a_block_line_that_sets_no_one_setting(tmp_path):
    # in a settings block only `name = value` and `name: type = value` are settings; a declaration without
    # a value, a tuple or a chain of assignments, an attribute's assignment are passed over, not a crash
    script = tmp_path / 'toy.py'
    script.write_text('"""\nA toy script.\n"""\n\n# ---\nsteps = 3  # iterations\nwidth: int  # declared only\n'
                      'lo, hi = 0, 1  # a pair\na = b = 2  # a chain\nsteps.real = 4  # an attribute\n'
                      'rate: float = 0.5  # the rate\n# ---\n')
    assert configurator.help_text({'steps': 3, 'rate': 0.5}, [str(script)]).splitlines() == [
        'usage: python toy.py [config.py ...] [--key=value ...]', '', 'A toy script.', '',
        'Settings, with their defaults; config files and --key=value override them, in order:',
        '  --steps=3   iterations', '  --rate=0.5  the rate']


def test_configurators_help_continues_a_comment_on_the_row_of_the_setting_above_it(tmp_path):
    # a comment line indented past the settings, under one, goes on with that setting's comment: the third
    # setting's here, not another's
    script = tmp_path / 'toy.py'
    script.write_text('"""\nA toy script.\n"""\n\n# ---\na = 1  # first\nb = 2  # second\nc = 3  # third,\n'
                      '       # going on\n# ---\n')
    assert configurator.help_text({'a': 1, 'b': 2, 'c': 3}, [str(script)]).splitlines() == [
        'usage: python toy.py [config.py ...] [--key=value ...]', '', 'A toy script.', '',
        'Settings, with their defaults; config files and --key=value override them, in order:',
        '  --a=1  first', '  --b=2  second', '  --c=3  third, going on']


def test_an_unknown_setting_names_the_scripts_help_from_a_config_file_as_from_the_command_line(tmp_path):
    script = tmp_path / 'toy.py'
    script.write_text('"""\nA toy script.\n"""\n\n# ---\nsteps = 3  # iterations\n# ---\n')
    (tmp_path / 'typo.py').write_text('stepz = 4\n')
    for argv in ([str(tmp_path / 'typo.py')], ['--stepz=4'], ['--stepz', '4']):
        with pytest.raises(configurator.UserError) as e:
            configurator.configure({'steps': 3}, argv, [str(script)])
        assert "unknown setting 'stepz'" in str(e.value) and "did you mean 'steps'?" in str(e.value)
        assert '`python toy.py --help` lists the settings' in str(e.value), argv


# -----------------------------------------------------------------------------
# sample.py's summary line

def test_samples_summary_line_gives_the_tokens_a_second(monkeypatch, capsys):
    # 2 samples of 5 tokens in 2.5 s (the clock stood in): 4.0 tokens a second
    torch.manual_seed(0)
    model = LoopedGPT(LoopedGPTConfig(block_size=8, vocab_size=256, n_layer=1, n_head=1, n_embd=8, n_loops=2,
                                      dropout=0.0)).eval()
    monkeypatch.setattr(sample, 'load', lambda config, device: (model, ByteTokenizer()))
    clock = iter([100.0, 102.5])
    monkeypatch.setattr(sample, 'time', type('Clock', (), dict(perf_counter=staticmethod(lambda: next(clock)))))
    try:
        sample.main(['--device=cpu', '--start=ab', '--num_samples=2', '--max_new_tokens=5'])
    finally:
        torch.set_flush_denormal(False)  # (setup_device turns flushing on, process-wide)
    assert capsys.readouterr().err.splitlines()[-1] == 'tokens=10 seconds=2.500 tok_per_s=4.0 n_loops=2'
