"""The docs' tables are the stored results, number for number, and their commands run as written.

Every markdown table in README.md and docs/*.md that reports a measurement is checked here
against the stored file it was made from: the tables.md / costs-*.md / exit_tables.md that the
project's code printed into assets/, a results*.json where the number is not printed, or a
training log. A number shown in a doc table passes when it is the stored number rounded as
shown: within half a unit of its last shown digit. Each doc table is found by its header row,
each of its rows by its first cell; a table, row or cell that changes must change here too,
and a table with numbers that no check covers fails test_every_table_is_checked.

The table checks read only README.md, docs/ and assets/. The command checks take every command
line of the pages (code blocks, and inline `python ...` spans of the prose) and check it with the
script's own command line: configurator's settings or the argparse parser that the script's
--help reaches, run in this process (the scripts are imported, torch with them; nothing is trained,
read or downloaded): its script or module exists, its config files exist and load, and each --flag
is a setting of the script, with a value of its type. A study's `bash assets/<study>/run.sh` sets
every variable that the script's own usage line sets. Numbers in the prose are checked where PROSE
names their sentence (a `#` where each stands), as a table's cells are. No network, no data, about
two seconds.
"""
import argparse
import contextlib
import importlib.util
import io
import itertools
import json
import os
import re
import runpy
import shlex
import sys
from functools import lru_cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ASSETS = ROOT / 'assets'
DOCS = ['README.md'] + sorted(f'docs/{p.name}' for p in (ROOT / 'docs').glob('*.md'))

# ---------------------------------------------------------------------------------------------
# numbers as shown

NUM = re.compile(r'(?<![\w.])([+\-−]?)(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d+))?(?:e([+\-−]?\d+))?')


class Shown:
    """A number as a page shows it: its value and the unit of its last digit."""

    def __init__(self, m):
        sign, whole, frac, exp = m.group(1), m.group(2), m.group(3) or '', m.group(4)
        self.text = m.group(0)
        value = float(whole.replace(',', '') + ('.' + frac if frac else ''))
        e = int(exp.replace('−', '-')) if exp else 0
        self.value = (-value if sign in '-−' and sign else value) * 10.0 ** e
        self.unit = 10.0 ** (e - len(frac))

    def matches(self, v):
        return abs(self.value - v) <= 0.5 * self.unit * (1 + 1e-9)


def shown(cell):
    return [Shown(m) for m in NUM.finditer(cell)]


def nums(cell):
    """The stored numbers of a stored cell, as floats."""
    return [s.value for s in shown(cell)]


# ---------------------------------------------------------------------------------------------
# markdown tables

def clean(cell):
    return cell.strip().replace('**', '').strip()


def split_row(line):
    return [clean(c) for c in line.strip().strip('|').split('|')]


def md_tables(path):
    """[(caption, header, rows, line number)] of every table in a markdown file; the caption is
    the nearest line above the table that is not blank."""
    lines = Path(path).read_text().splitlines()
    out, i = [], 0
    while i < len(lines):
        if (lines[i].startswith('|') and i + 1 < len(lines)
                and re.fullmatch(r'\|(\s*:?-{3,}:?\s*\|)+', lines[i + 1].strip())):
            header, j, rows = tuple(split_row(lines[i])), i + 2, []
            while j < len(lines) and lines[j].startswith('|'):
                rows.append(split_row(lines[j]))
                j += 1
            k = i - 1
            while k >= 0 and not lines[k].strip():
                k -= 1
            out.append((lines[k].strip() if k >= 0 else '', header, rows, i + 1))
            i = j
        else:
            i += 1
    return out


@lru_cache(maxsize=None)
def stored_tables(rel):
    return md_tables(ASSETS / rel)


def stored_row(rel, key, caption='', header0=None):
    """The one row of a stored table (under a caption containing `caption`) whose first cells
    are `key`, as {header cell: cell}."""
    key = tuple(key)
    found = [dict(zip(h, r)) for cap, h, rows, _ in stored_tables(rel) if caption in cap
             and (header0 is None or h[0] == header0) for r in rows if tuple(r[:len(key)]) == key]
    assert len(found) == 1, f'{rel}: {len(found)} rows {key} under {caption!r}'
    return found[0]


@lru_cache(maxsize=None)
def results(rel):
    return json.loads((ASSETS / rel).read_text())


def json_group(rel, name):
    g = [g for g in results(rel)['groups'] if g['name'] == name]
    assert len(g) == 1, f'{rel}: group {name}'
    return g[0]['mean'], g[0]['std']


def json_run(rel, name):
    r = [r for r in results(rel)['runs'] if r['name'] == name]
    assert len(r) == 1, f'{rel}: run {name}'
    return r[0]


def jsonl(rel):
    return [json.loads(line) for line in (ASSETS / rel).read_text().splitlines() if line.strip()]


# expected cells: a list of numbers (the cell shows exactly these, in order), Copied(text) (the
# cell shows the numbers of a stored cell, or the first of them), Text(text) (the cell is this
# text), or None (not a stored result: the paper's numbers)

class Copied(str):
    pass


class Text(str):
    pass


def check_cell(cell, want, where):
    if want is None:
        return
    if isinstance(want, Text):
        assert cell == want, f'{where}: {cell!r}, the stored {want!r}'
        return
    got = shown(cell)
    values = nums(want) if isinstance(want, Copied) else [float(v) for v in want]
    if isinstance(want, Copied):
        assert got or not values, f'{where}: {cell!r} shows none of the stored {want!r}'
        values = values[:len(got)]
    assert len(got) == len(values), f'{where}: {cell!r} shows {len(got)} numbers, the stored ones are {values}'
    for s, v in zip(got, values):
        assert s.matches(v), f'{where}: {s.text} in {cell!r}, stored {v!r}'


# ---------------------------------------------------------------------------------------------
# the stored results, as the tables use them

def depth(rel, run, K, col):
    """A cell of eval_depth.py's depth table (its row run, K; the trained K is marked '4*') in a
    stored tables.md."""
    found = [dict(zip(h, r)) for cap, h, rows, _ in stored_tables(rel) if h[:2] == ('run', 'K')
             for r in rows if r[0] == run and r[1] in (str(K), f'{K}*')]
    assert len(found) == 1, f'{rel}: {len(found)} rows {run}, K={K}'
    return found[0][col]


def mean(cell):
    return nums(cell)[:1]


def best_k(rel, run, max_k=8):
    ppl = {K: nums(depth(rel, run, K, 'ppl'))[0] for K in range(1, max_k + 1)}
    return [min(ppl, key=ppl.get)]


def lemma_row(rel, run, k):
    return stored_row(rel, (run, str(k)), caption='Lemma 2')


DEMO = 'cpu-demo/tables.md'


def demo_run(c):
    return f'out-{c}-cpu (3 seeds)'


def four_epoch_file(c):
    return 'cpu-long/tables.md' if c in ('norm_perloop', 'raw_perloop', 'penalty_perloop',
                                         'finalnorm_perloop') else 'cpu-long-more/tables.md'


def four_epoch_row(c):
    rel, run = four_epoch_file(c), f'out-{c}-cpu-long (3 seeds)'
    return [Copied(depth(rel, run, K, 'ppl')) for K in (1, 2, 3, 4, 8)], rel, run


def quickstart_and_demo_evals(c):
    """The last eval (iteration 300) of the quick start's run and of the CPU demo's 3 seeds."""
    logs = [f'quickstart/logs/{c}-cpu.jsonl'] + [f'cpu-demo/logs/{c}-cpu-s{s}.jsonl' for s in (1, 2, 3)]
    evals = [[r for r in jsonl(p) if r['kind'] == 'eval'][-1] for p in logs]
    assert all(e['iter'] == 300 for e in evals)
    return evals


def span(values):
    return [min(values), max(values)]


M44 = 'cpu-44m/tables.md'


def m44(c, col, K=4):
    return depth(M44, f'out-{c}-cpu44m-s1', K, col)


def m44_loss(c, K):
    part = {'norm_perloop': 'a', 'raw_perloop': 'a', 'penalty_perloop': 'b1', 'interloop_perloop': 'b2'}[c]
    per_K = json_run(f'cpu-44m/results-{part}.json', f'out-{c}-cpu44m-s1')['per_K']
    return [r['loss'] for r in per_K if r['K'] == K][0]


def costs(name, table, key, col):
    """A cell of a stored costs-*.md (depth_costs.py's output): the table whose header starts
    with `table`, its row `key`."""
    return stored_row(name, (key,), header0=table)[col]


def cost_nums(name, table, keys, col):
    return [nums(costs(name, table, k, col))[0] for k in keys]


SPEC = 'cpu-long-speculative/results.json'


def spec_run(c):
    return json_run(SPEC, f'out-{c}-cpu-long-s1')


def spec_best(c, mode):
    b = max((x for x in spec_run(c)['speculative_bench'] if x['mode'] == mode), key=lambda x: x['speedup'])
    return b


def spec_cell(c, mode):
    b = spec_best(c, mode)
    return [b['j'], b['g'], b['draft_stop'], b['tok_per_s'], b['fixed_tok_per_s'], b['speedup']]


@lru_cache(maxsize=None)
def fixed_k_before_after():
    """fixed_k_before_after.txt: {condition: {decoder: best tok/s}}."""
    out, cur = {}, None
    for line in (ASSETS / 'cpu-long-speculative/fixed_k_before_after.txt').read_text().splitlines():
        m = re.match(r'== (\w+)', line)
        if m:
            cur = out.setdefault(m.group(1), {})
        m = re.match(r'(\S+)\s.*best (\d+) tok/s', line)
        if m and cur is not None:
            cur[m.group(1)] = float(m.group(2))
    return out


EXITS, SWEEP = 'cpu-long-exits/tables.md', 'cpu-long-exit-sweep/tables.md'


def exit_row(rel, run, crit, thr):
    """A row of an early-exit table: criterion, threshold, then mean loops and ppl teacher-forced,
    causal with copied stand-ins, causal with projected ones (positional: its 'ppl's share a name)."""
    found = [r for cap, h, rows, _ in stored_tables(rel) if cap.startswith(f'early exit, {run} ')
             for r in rows if r[:2] == [crit, thr]]
    assert len(found) == 1, f'{rel}: {run} {crit} {thr}'
    return found[0]


def calib_row(rel, run, stand_in, crit, target):
    row = [dict(zip(h, r)) for cap, h, rows, _ in stored_tables(rel) if cap.startswith(f'calibrated halting, {run}:')
           for r in rows if r[0] == stand_in and r[1] == crit and r[2].startswith(target)]
    assert len(row) == 1, f'{rel}: {run} {stand_in} {crit} {target}'
    return row[0]


def calib_cell(rel, run, stand_in, crit, target, loops_std):
    """'criterion, stand-in: mean loops [± std], ppl, speed-up ± std' of a calibrated pick."""
    r = calib_row(rel, run, stand_in, crit, target)
    loops = nums(r['mean loops'])
    return (loops if loops_std else loops[:1]) + mean(r['ppl (exit)']) + nums(r['speed-up'])


def full_depth_ppl(rel, run):
    return nums(depth(rel, run, 4, 'ppl'))


def exits_cells(rel, run):
    """full depth, max_prob > 0.9 teacher-forced / copy / project, converge > 0.5 project:
    'ppl (mean loops)'."""
    mp, cv = exit_row(rel, run, 'max_prob', '0.9'), exit_row(rel, run, 'converge', '0.5')
    return [full_depth_ppl(rel, run)] + [mean(mp[i + 1]) + mean(mp[i]) for i in (2, 4, 6)] + [mean(cv[7]) + mean(cv[6])]


def full_depth_cost(run, base):
    """Full depth of an exit-aware run over its normally trained twin's, in %."""
    return [100 * (nums(depth(*run, 4, 'ppl'))[0] / nums(depth(*base, 4, 'ppl'))[0] - 1)]


# ---------------------------------------------------------------------------------------------
# the checks: (page, header) -> {row label: [expected cell, ...]} for the cells after the label

CHECKS = {}


def check(page, *header):
    def register(fn):
        CHECKS[(page, tuple(header))] = fn
        return fn
    return register


@check('README.md', 'condition', 'K=1', 'K=2', 'K=4 (trained)', 'K=8', 'mean ‖H_4‖', 'radial gradient fraction')
def readme_intro():
    rows = {}
    for c, label in (('norm_perloop', 'norm_perloop: RMSNorm readout, per-loop CE'),
                     ('raw_perloop', 'raw_perloop: raw readout, per-loop CE')):
        r = demo_run(c)
        rows[label] = [Copied(depth(DEMO, r, K, 'ppl')) for K in (1, 2, 4, 8)] + [
            Copied(depth(DEMO, r, 4, 'mean ‖H_K‖')), Copied(depth(DEMO, r, 4, 'radial frac'))]
    return rows


@check('README.md', 'run', 'val loss K=1', 'val loss K=4', 'mean ‖H_4‖', 'radial fraction, loop 4')
def readme_quickstart_seeds():
    rows = {}
    for c in ('norm_perloop', 'raw_perloop'):
        ev = quickstart_and_demo_evals(c)
        rows[c] = [span([e['val_loss'][0] for e in ev]), span([e['val_loss'][3] for e in ev]),
                   span([e['norm_mean'][3] for e in ev]), span([e['radial'][3] for e in ev])]
    return rows


CONDITIONS = ('norm_perloop', 'norm_terminal', 'raw_perloop', 'raw_terminal', 'finalnorm_perloop',
              'penalty_perloop', 'penalty_terminal', 'interloop_perloop')


@check('README.md', 'condition', 'ppl K=1', 'ppl K=4 (trained)', 'mean ‖H_4‖', 'Δ loss, clamp at K=4')
def readme_demo():
    return {c: [Copied(depth(DEMO, demo_run(c), 1, 'ppl')), Copied(depth(DEMO, demo_run(c), 4, 'ppl')),
                Copied(depth(DEMO, demo_run(c), 4, 'mean ‖H_K‖')),
                Copied(depth(DEMO, demo_run(c), 4, 'Δ loss clamp'))] for c in CONDITIONS}


@check('docs/cpu-demo.md', 'condition', 'ppl K=1', 'ppl K=4 (trained)', 'ppl K=8', 'best K', 'mean ‖H_4‖',
       'radial frac', '1 − cos at loop 4', 'Δ loss, clamp at K=4')
def demo_depth():
    rows = {}
    for c in CONDITIONS:
        r = demo_run(c)
        rows[c] = [Copied(depth(DEMO, r, K, 'ppl')) for K in (1, 4, 8)] + [best_k(DEMO, r)] + [
            Copied(depth(DEMO, r, 4, col)) for col in ('mean ‖H_K‖', 'radial frac', '1-cos', 'Δ loss clamp')]
    return rows


@check('docs/cpu-demo.md', 'condition', 'ppl K=1', 'ppl K=2', 'ppl K=4 (trained)', 'ppl K=8', 'best K', 'mean ‖H_4‖',
       'radial frac', 'Δ loss, clamp at K=4')
def heldout_depth():
    rel = 'heldout/tables.md'
    rows = {}
    for c in ('norm_perloop', 'raw_perloop', 'penalty_perloop', 'interloop_perloop'):
        r = demo_run(c)
        rows[c] = [Copied(depth(rel, r, K, 'ppl')) for K in (1, 2, 4, 8)] + [best_k(rel, r)] + [
            Copied(depth(rel, r, 4, col)) for col in ('mean ‖H_K‖', 'radial frac', 'Δ loss clamp')]
    return rows


@check('docs/cpu-demo.md', 'condition (3 seeds)', 's_4', 's_29', 'a_4', 'a_29', 'step, loop 4', 'step, loop 29',
       's × step, loop 4', 'loop 29')
def demo_lemma():
    # loop 29 is past tables.md's loops 1, 2, 4, 8, 16: results.json's group means hold every loop
    rows = {}
    for c in ('norm_perloop', 'norm_terminal', 'raw_perloop', 'interloop_perloop'):
        lem = json_group('cpu-demo/results.json', f'out-{c}-cpu')[0]['lemma']
        rows[c] = [[lem[key][k - 1]] for key in ('s', 'radial_increment', 'angular_step', 's_times_angular')
                   for k in (4, 29)]
    return rows


@check('README.md', 'condition', 'K=1', 'K=2', 'K=3', 'K=4 (trained)', 'K=8')
def readme_four_epochs():
    return {c: four_epoch_row(c)[0] for c in ('norm_perloop', 'raw_perloop', 'penalty_perloop', 'penalty_terminal')}


@check('docs/four-epochs.md', 'condition (3 seeds)', 'K=1', 'K=2', 'K=3', 'K=4 (trained)', 'K=8', 'best K',
       'mean ‖H_4‖', '1 − cos, loop 4', 's_4', 'step, loop 4')
def four_epochs():
    rows = {}
    for c in ('norm_perloop', 'raw_perloop', 'penalty_perloop', 'finalnorm_perloop', 'norm_terminal',
              'raw_terminal', 'penalty_terminal', 'interloop_perloop'):
        ppl, rel, run = four_epoch_row(c)
        lem = lemma_row(rel, run, 4)
        rows[c] = ppl + [best_k(rel, run), mean(depth(rel, run, 4, 'mean ‖H_K‖')), Copied(depth(rel, run, 4, '1-cos')),
                         Copied(lem['s_k']), Copied(lem['‖u_k+1 − u_k‖'])]
    return rows


@check('README.md', 'condition', '‖H_4‖ mean / p99 / max', 'radial fraction', '1 − cos, loop 4', "paper's final ‖H_4‖")
def readme_44m():
    return {c: readme_44m_row(c) + [None]   # the paper's numbers
            for c in ('norm_perloop', 'raw_perloop', 'penalty_perloop')}


def readme_44m_row(c):
    return [[nums(m44(c, col))[0] for col in ('mean ‖H_K‖', 'p99 ‖H_K‖', 'max ‖H_K‖')],
            Copied(m44(c, 'radial frac')), Copied(m44(c, '1-cos'))]


@check('docs/paper-shape.md', 'condition', '‖H_4‖ mean / p99 / max', 'radial fraction', '1 − cos, loop 4',
       'Δ loss, clamp', 'val CE K=1 → K=4', "the paper's final ‖H_4‖")
def paper_shape_drift():
    rows = {}
    for c in ('norm_perloop', 'raw_perloop', 'penalty_perloop', 'interloop_perloop'):
        rows[c] = readme_44m_row(c) + [Copied(m44(c, 'Δ loss clamp')), [m44_loss(c, 1), m44_loss(c, 4)],
                                       Text('–') if c == 'interloop_perloop' else None]   # the paper's
    return rows


F32, BF16 = 'cpu-44m/costs-norm_perloop-float32.md', 'cpu-44m/costs-norm_perloop-bfloat16.md'


@check('docs/paper-shape.md', 'part (norm_perloop, ms)', 'float32', 'bf16')
def paper_shape_costs():
    def part(*keys):
        return [cost_nums(f, 'part', keys, 'ms') for f in (F32, BF16)]
    return {
        'one loop (8 layers, one token)': part('one loop (the 8-layer stack, one token)'),
        'one readout (512 x 50,257)': part('one readout (512 x 50257)'),
        'exit decision from a readout: max_prob / entropy / converge':
            part('exit decision: max_prob', 'exit decision: entropy', 'exit decision: converge'),
        'exit decision from the state: angular': part('exit decision: angular (no readout)'),
        'sampling (softmax and a draw over 50,257)': part('sampling from the readout'),
        'verify pass, loops 2–4 over 4 tokens, per token': part('verify pass, loops 2..4 over 4 tokens, per token'),
        'fixed K = 1 / 2 / 3 / 4, tok/s': [cost_nums(f, 'fixed K', '1234', 'tok/s (sampled, cached)')
                                          for f in (F32, BF16)],
    }


@check('docs/paper-shape.md', 'exit after loop e', 'float32: readout every loop', 'decided from the state',
       'bf16: readout every loop', 'from the state')
def paper_shape_exits():
    rows = {}
    for e in '123':
        rows[e] = []
        for f in (F32, BF16):   # its columns: e, ms with a readout, speed-up, ms from the state, speed-up
            cells = stored_cells(f, 'exit after loop e', e)
            rows[e] += [mean(cells[2]), mean(cells[4])]
    return rows


def stored_cells(rel, header0, key):
    found = [r for cap, h, rows, _ in stored_tables(rel) if h[0] == header0 for r in rows if r[0] == key]
    assert len(found) == 1
    return found[0]


@check('docs/paper-shape.md', 'run, dtype', 'j', 'sample accept a', 'ideal', 'with the measured costs')
def paper_shape_speculative():
    rows = {}
    for label, f in (('norm_perloop, float32', F32), ('norm_perloop, bf16', BF16),
                     ('raw_perloop, float32', 'cpu-44m/costs-raw_perloop-float32.md')):
        cells = [stored_cells(f, 'j', j) for j in '123']
        hdr = [h for cap, h, rows, _ in stored_tables(f) if h[0] == 'j'][0]
        col = {name: hdr.index(name) for name in ('sample accept', 'ideal speed-up', 'with the measured costs')}
        rows[label] = [[1, 2, 3]] + [[nums(c[col[name]])[0] for c in cells]
                                     for name in ('sample accept', 'ideal speed-up', 'with the measured costs')]
    return rows


@check('docs/speculative.md', 'condition (seed 1)', 'greedy agree, j=1/2/3', 'sample accept, j=1/2/3',
       'best greedy (j, g, stop): tok/s / fixed K', 'best sampled', 'tokens per pass, greedy')
def speculative_table():
    rows = {}
    for c in ('norm_perloop', 'raw_perloop', 'penalty_perloop', 'finalnorm_perloop'):
        s = spec_run(c)['speculative']
        rows[c] = [s['greedy_agree'], s['sample_accept'], spec_cell(c, 'greedy'), spec_cell(c, 'sample'),
                   [spec_best(c, 'greedy')['tokens_per_pass']]]
    return rows


@check('docs/speculative.md', 'condition', 'older decoder', 'static KV cache', 'static cache, compiled step',
       'older, no cache', 'no cache')
def speculative_fixed_k():
    t = fixed_k_before_after()
    return {f'{c}_perloop': [[t[c][k]] for k in ('old', 'new', 'new-compiled', 'old-nocache', 'new-nocache')]
            for c in ('raw', 'penalty')}


@check('docs/early-exit.md', 'condition', 'full depth', 'max_prob > 0.9: teacher-forced', 'causal, copy',
       'causal, project', 'converge > 0.5, project', 'calibrated +1%', '+5%')
def early_exit_table():
    raw, pen = (EXITS, 'out-raw_perloop-cpu-long (3 seeds)'), (EXITS, 'out-penalty_perloop-cpu-long (3 seeds)')
    raw50, pen50 = (EXITS, 'out-raw_perloop_exit-cpu-long (3 seeds)'), (EXITS, 'out-penalty_perloop_exit-cpu-long (3 seeds)')
    raw25, pen25 = (SWEEP, 'out-raw_perloop_exit25-cpu-long (3 seeds)'), (SWEEP, 'out-penalty_perloop_exit25-cpu-long (3 seeds)')
    best_raw_1 = max(nums(calib_row(*raw, s, c, '+1%')['speed-up'])[0]
                     for s in ('copy', 'project') for c in ('max_prob', 'entropy', 'converge'))
    return {
        'raw_perloop': exits_cells(*raw) + [[4, best_raw_1], calib_cell(*raw, 'copy', 'converge', '+5%', False)],
        'raw, `exit_train=0.5`': exits_cells(*raw50) + [full_depth_cost(raw50, raw), []],
        'raw, `exit_train=0.25`': exits_cells(*raw25) + [full_depth_cost(raw25, raw),
                                                         calib_cell(*raw25, 'project', 'converge', '+5%', True)],
        'penalty_perloop': exits_cells(*pen) + [calib_cell(*pen, 'copy', 'converge', '+1%', False),
                                                calib_cell(*pen, 'project', 'max_prob', '+5%', True)],
        'penalty, `exit_train=0.5`': exits_cells(*pen50) + [full_depth_cost(pen50, pen),
                                                            calib_cell(*pen50, 'project', 'max_prob', '+5%', True)],
        'penalty, `exit_train=0.25`': exits_cells(*pen25) + [calib_cell(*pen25, 'copy', 'converge', '+1%', True),
                                                             calib_cell(*pen25, 'project', 'max_prob', '+5%', True)],
    }


def exit_tables_rows(header0_cols):
    found = [(h, rows) for cap, h, rows, _ in stored_tables('cpu-long-criteria/exit_tables.md') if len(h) == header0_cols]
    assert len(found) == 1
    return {r[0]: [Copied(c) for c in r[1:]] for r in found[0][1]}


@check('docs/early-exit.md', 'criterion', 'raw_perloop +1%', '+5%', 'penalty_perloop +1%', '+5%', 'norm_perloop +1%', '+5%')
def early_exit_teacher_forced():
    return exit_tables_rows(7)


@check('docs/early-exit.md', 'criterion', 'raw_perloop +1%', 'raw_perloop +5%', 'penalty_perloop +1%', 'penalty_perloop +5%')
def early_exit_decoded():
    return exit_tables_rows(5)


@check('docs/speed.md', 'shape', 'ours, fp32 eager', 'ours as shipped (bf16)', 'released code, fp32 eager',
       'ours fp32 / released', 'as shipped / released')
def speed_anchor():
    # beyond.bench --anchor's table in the logs of assets/speed/run.sh: median ms/step, then the speed-ups
    def row(log):
        cell = lambda step, i: Copied(stored_cells(f'speed/logs/{log}', 'step', step)[i])
        ours, shipped = 'ours, float32, eager', 'ours as configured (bfloat16, eager)'
        return [cell(ours, 1), cell(shipped, 1), cell('released code, float32, eager', 1), cell(ours, 3), cell(shipped, 3)]
    return {'44M (2 x 256)': row('bench-44m.log'), 'CPU demo (16 x 128)': row('bench-demo.log')}


@check('docs/speed.md', 'step', 'ms/step', 'achieved TFLOP/s', 'of the measured matmul peak')
def speed_roofline():
    # beyond.bench's per-loop row in each log of assets/speed/run.sh: ms/step, TFLOP/s, share of the peak
    def row(log):
        cells = stored_cells(f'speed/logs/{log}', 'loss', 'perloop')
        return [Copied(cells[2]), Copied(cells[3]), Copied(cells[4])]
    return {'44M, bf16, eager': row('profile-44m-bf16.log'), '44M, float32, eager': row('profile-44m-float32.log'),
            '44M, bf16, compiled': row('bench-44m-compiled.log'), 'demo, bf16, eager': row('profile-demo.log')}


@check('docs/speed.md', 'CPU emulated, dtype', 'matmul peak, TFLOP/s', 'per-loop step, ms', 'of the peak', 'log')
def speed_without_bf16():
    # run.sh's beyond.bench under oneDNN (and MKL, ATen) held below native bf16: the peak, then the per-loop row
    def row(log):
        text = (ASSETS / 'speed/logs' / log).read_text()
        peak = re.search(r'matmul peak measured here \(\w+\): ([\d.]+) TFLOP/s', text).group(1)
        cells = stored_cells(f'speed/logs/{log}', 'loss', 'perloop')
        return [Copied(peak), Copied(cells[2]), Copied(cells[4]), Text(f'`logs/{log}`')]
    return {'AVX-512 without BF16, float32': row('bench-44m-nobf16-float32.log'),
            'AVX-512 without BF16, bfloat16': row('bench-44m-nobf16-bfloat16.log'),
            'AVX2, float32': row('bench-44m-avx2-float32.log')}


@check('docs/speed.md', 'run', 'val loss K=1', 'K=2', 'K=3', 'K=4', 'mean ‖H_4‖', 'radial fraction, loop 4')
def speed_dtypes():
    found = [rows for cap, h, rows, _ in stored_tables('speed/old-speed.md') if h[:2] == ('run', 'val loss K=1')]
    assert len(found) == 1
    return {r[0]: [Copied(c) for c in r[1:]] for r in found[0]}


@check('docs/depth.md', 'design', 'depth', 'K=1', 'K=2', 'K=4', 'K=8', 'K=16', 'best K≤trained', 'K=8 vs best',
       'K=16 vs best', 'mean ‖H_K‖', 'p99 ‖H_K‖', 'mean ‖H_16‖', 'radial frac', '1 − cos', 'clamp Δloss, K=16',
       'exit +1%: loops', 'learned', 'the scale is')
def depth_designs():
    # docs/depth.md's table is beyond/depth_table.py's, as run.sh stored it in assets/depth/designs.md
    found = [rows for cap, h, rows, _ in stored_tables('depth/designs.md') if h[0] == 'design']
    assert len(found) == 1
    return {r[0]: [Copied(c) if shown(c) else Text(c) for c in r[1:]] for r in found[0]}


# tables with numbers that hold no stored result
def task_designs(intervention='none'):
    """{(design, length, K): its group} of assets/tasks/results.json's designs (mean and std over seeds)."""
    return {(g['design'].split('out-parity-', 1)[1], g['length'], g['K']): g
            for g in results('tasks/results.json')['designs'] if g['intervention'] == intervention}


TASK_DESIGNS = ('norm-il', 'raw-il', 'alpha-il', 'norm', 'raw', 'alpha', 'norm-pen', 'norm-damp', 'norm-il-noinj',
                'norm-il-fixed')


@check('docs/tasks.md', 'design', 'K=8', '12', '16', '24', '32', '48', '96', '128', '256', '512')
def tasks_exact_match():
    """Whole-string exact match (%) by K, mean ± std over seeds (no intervention)."""
    g = task_designs()
    return {f'{d}, {n} bits': [[100 * g[d, n, K]['exact'], 100 * g[d, n, K]['exact_std']]
                               for K in (8, 12, 16, 24, 32, 48, 96, 128, 256, 512)]
            for n in (8, 16, 32) for d in TASK_DESIGNS}


@check('docs/tasks.md', 'design, 32 bits', 'K=12', '32', '128', '512')
def tasks_h_norm():
    """Mean ‖H_K‖ on 32-bit strings by K, mean over seeds (no intervention)."""
    g = task_designs()
    return {d: [[g[d, 32, K]['h_norm']] for K in (12, 32, 128, 512)] for d in TASK_DESIGNS}


@check('docs/tasks.md', 'design, 8 bits, intervention', 'K=8', '12', '32', '128', '512')
def tasks_interventions():
    """Exact match (%) on 8-bit strings under each intervention, mean ± std over seeds."""
    out = {}
    for iv in ('none', 'clamp', 'cap'):   # (the direction-only readout: the same argmax, so the same numbers)
        g = task_designs(iv)
        for d in ('norm-il', 'norm', 'raw'):
            out[f'{d}, {iv}'] = [[100 * g[d, 8, K]['exact'], 100 * g[d, 8, K]['exact_std']] for K in (8, 12, 32, 128, 512)]
    return out


UNCHECKED = {
    ('README.md', ('file', 'what it holds')): 'the files, no results',
    ('docs/depth.md', ('condition', 'what it does', 'from')): 'the scale controls, no results',
}


# ---------------------------------------------------------------------------------------------
# the quick start's quoted output: assets/quickstart's logs of the README's quick-start commands

QUICKSTART = ASSETS / 'quickstart' / 'logs'


def quickstart_quotes():
    """The README's quick start: its indented output lines (not commands), as (log file, line)."""
    text = (ROOT / 'README.md').read_text()
    section = text.split('\n## Quick start\n', 1)[1].split('\n## ', 1)[0]
    out = []
    for line in section.splitlines():
        if not line.startswith('    ') or line.strip().startswith(('python ', '#')):
            continue
        line = line.strip()
        m = re.fullmatch(r'(\w+):\s+(eval \d+: .*)', line)   # "norm_perloop: eval 300: ..." from that run's log
        out.append((f'{m.group(1)}-cpu.log', m.group(2)) if m else ('eval_depth.log', line))
    return out


def test_quickstart_quote_is_the_stored_log():
    quotes = quickstart_quotes()
    assert len(quotes) >= 4
    for name, line in quotes:
        pattern = re.compile('.*'.join(re.escape(part.strip()) for part in line.split('...')))   # '...': elided
        log = (QUICKSTART / name).read_text().splitlines()
        assert any(pattern.fullmatch(l.strip()) for l in log), f'README quick start: {line!r} is not in {name}'


def test_quickstart_sample_line_is_the_stored_log():
    """The quick start's `tokens=100 ... mean_loops=4.000`: sample.py's timing line (stderr)."""
    section = (ROOT / 'README.md').read_text().split('\n## Quick start\n', 1)[1].split('\n## ', 1)[0]
    quoted = [q for q in re.findall(r'`([^`]*)`', section.replace('\n', ' ')) if q.startswith('tokens=')]
    assert quoted
    log = (QUICKSTART / 'sample.stderr.log').read_text().splitlines()
    for q in quoted:
        pattern = re.compile('.*'.join(re.escape(part.strip()) for part in q.split('...')))
        assert any(pattern.fullmatch(l) for l in log), f'README quick start: `{q}` is not in sample.stderr.log'


# ---------------------------------------------------------------------------------------------

def doc_tables():
    return [(page, header, rows, line) for page in DOCS for _, header, rows, line in md_tables(ROOT / page)]


def test_every_table_is_checked():
    missing = [f'{page}:{line} {" | ".join(header)}' for page, header, rows, line in doc_tables()
               if any(re.search(r'\d', c) for r in rows for c in r[1:])
               and (page, header) not in CHECKS and (page, header) not in UNCHECKED]
    assert not missing, 'tables with numbers that no check covers (add one to tests/test_docs.py):\n' + '\n'.join(missing)


@pytest.mark.parametrize('key', sorted(CHECKS), ids=lambda k: f'{k[0]}:{k[1][0]}|{k[1][1]}')
def test_table_matches_stored_results(key):
    page, header = key
    tables = [(rows, line) for p, h, rows, line in doc_tables() if (p, h) == key]
    assert len(tables) == 1, f'{page}: {len(tables)} tables with the header {" | ".join(header)}'
    rows, line = tables[0]
    want = CHECKS[key]()
    labels = [r[0] for r in rows]
    assert sorted(labels) == sorted(want), f'{page}:{line}: rows {labels}, checked {list(want)}'
    for r in rows:
        cells = want[r[0]]
        assert len(r) == len(cells) + 1, f'{page}:{line} row {r[0]}: {len(r) - 1} cells, {len(cells)} checked'
        for col, cell, w in zip(header[1:], r[1:], cells):
            check_cell(cell, w, f'{page}:{line} {r[0]!r}, {col!r}')


def test_a_changed_digit_fails():
    """The rule catches a one-digit change: 12.84 shown for 12.838 passes, 12.85 does not."""
    assert shown('12.84 ± 0.20')[0].matches(12.838) and not shown('12.85')[0].matches(12.838)
    assert shown('1,172')[0].matches(1171.6) and not shown('1,173')[0].matches(1171.6)
    assert shown('1.3e-17')[0].matches(1.27e-17) and not shown('1.4e-17')[0].matches(1.27e-17)
    assert [s.value for s in shown('−0.32 / +7.72 / 3,911 / 2.6e+03')] == [-0.32, 7.72, 3911, 2600]


@pytest.mark.parametrize('key', sorted(CHECKS), ids=lambda k: f'{k[0]}:{k[1][0]}|{k[1][1]}')
def test_every_number_is_pinned(key):
    """In every checked cell, changing any one number's last digit makes its check fail."""
    rows = [rows for p, h, rows, _ in doc_tables() if (p, h) == key][0]
    want, pinned = CHECKS[key](), 0
    for r in rows:
        for cell, w in zip(r[1:], want[r[0]]):
            if w is None or isinstance(w, Text):
                continue
            for m in NUM.finditer(cell):
                e = m.group(0).find('e')
                for i in {m.end() - 1, m.start() + e - 1} if e > 0 else {m.end() - 1}:   # the last digits
                    changed = cell[:i] + str((int(cell[i]) + 5) % 10) + cell[i + 1:]
                    with pytest.raises(AssertionError):
                        check_cell(changed, w, 'changed')
                    pinned += 1
    assert pinned


# ---------------------------------------------------------------------------------------------
# every command line a reader copies: its script, its config files and every --flag, checked by
# the script's own command line (its configure() or argparse parser, found by running it with
# --help in this process: no subprocess, no data, no work)

COMMAND = re.compile(r'(?:[A-Z_][A-Z0-9_]*=\S*\s+)*(?:python|torchrun|bash)\s')


def shell_lines(page):
    """(line number, text) of every shell line on a page: a code block's lines (fenced, or indented
    four spaces), each with its `\\` continuations, and each inline `code` span of the prose that
    starts as a command does."""
    lines = (ROOT / page).read_text().splitlines()
    out, prose, fence, i = [], [], False, 0
    while i < len(lines):
        line, start = lines[i], i + 1
        if line.strip().startswith('```'):
            fence = not fence
        elif fence or line.startswith('    '):
            text = line.strip()
            while text.endswith('\\') and i + 1 < len(lines):
                i += 1
                text = text[:-1] + ' ' + lines[i].strip()
            out.append((start, text, True))
        else:
            prose.append((start, line))
        i += 1
    para = []
    for n, line in prose + [(None, '')]:   # inline spans may wrap: a paragraph's lines joined
        if line.strip():
            para.append((n, line))
            continue
        text = ' '.join(l for _, l in para)
        for m in re.finditer(r'`([^`]+)`', text):
            if COMMAND.match(m.group(1)) and '<' not in m.group(1):   # (python -m beyond.<name>: a pattern)
                out.append((para[0][0], m.group(1), False))
        para = []
    return sorted(out)


def shell_words(text):
    """A shell line's simple commands as word lists (comments dropped, split at ; && || |)."""
    lex = shlex.shlex(text, posix=True, punctuation_chars=';&|')
    lex.whitespace_split, lex.commenters = True, '#'
    cmds, cur = [], []
    for w in lex:
        if set(w) <= set(';&|'):
            cmds.append(cur)
            cur = []
        elif not cur and w in ('do', 'then', 'done', 'fi'):
            continue
        else:
            cur.append(w)
    return [c for c in cmds + [cur] if c]


def page_commands(page):
    """(line, words, env, shell variables) of every command a page gives: words without the
    NAME=value prefix (env) and with `[...]` (optional) unbracketed; the variables are what the
    block's `for VAR in ...` loops and assignments set before the command."""
    out, shell_vars = [], {}
    for n, text, block in shell_lines(page):
        for words in shell_words(text):
            if words[0] == 'for' and len(words) > 3 and words[2] == 'in':
                shell_vars[words[1]] = words[3:]
                continue
            env = {}
            while words and re.fullmatch(r'[A-Za-z_]\w*=.*', words[0]):
                k, v = words.pop(0).split('=', 1)
                env[k] = v
            if not words:
                shell_vars.update({k: [v] for k, v in env.items()})
                continue
            if words[0] in ('python', 'torchrun', 'bash'):
                out.append((n, [w.strip('[]') if w.startswith('[') or w.endswith(']') else w for w in words],
                            env, dict(shell_vars)))
    return out


def expansions(word, shell_vars):
    """Every value of a word with the page's shell variables put in ($c, ${c}); a variable the page
    does not set is left as it is."""
    names = [n for n in dict.fromkeys(re.findall(r'\$\{?(\w+)\}?', word)) if n in shell_vars]
    out = []
    for values in itertools.product(*(shell_vars[n] for n in names)):
        w = word
        for name, value in zip(names, values):
            w = re.sub(r'\$\{' + name + r'\}|\$' + name + r'\b', value, w)
        out.append(w)
    return out


class Captured(BaseException):
    """What a script's --help reached first: configurator's settings, or its argparse parser."""

    def __init__(self, settings=None, parser=None):
        self.settings, self.parser = settings, parser


@lru_cache(maxsize=None)
def command_line(script, module):
    """The command line a script takes, as its own code declares it: ('settings', {name: default})
    for configurator's scripts, ('argparse', parser) for the others; its --help run in this process
    stops at the first of the two."""
    import configurator   # (imported here: the table checks above need no script)
    saved = (sys.argv, configurator.help_text, argparse.ArgumentParser.parse_args, os.getcwd(), list(sys.path))

    def settings_seen(settings, scripts):
        raise Captured(settings=dict(settings))

    def parser_seen(parser, *args, **kwargs):
        raise Captured(parser=parser)

    configurator.help_text, argparse.ArgumentParser.parse_args = settings_seen, parser_seen
    sys.argv, sys.path[:0] = [str(ROOT / script), '--help'], [str(ROOT)]
    os.chdir(ROOT)
    imported = sys.modules.pop(module, None) if module else None   # (runpy runs a fresh copy as __main__)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            if module:
                runpy.run_module(module, run_name='__main__', alter_sys=True)
            else:
                runpy.run_path(str(ROOT / script), run_name='__main__')
    except Captured as c:
        return ('settings', c.settings) if c.settings is not None else ('argparse', c.parser)
    finally:
        sys.argv, configurator.help_text, argparse.ArgumentParser.parse_args, cwd, sys.path[:] = saved
        os.chdir(cwd)
        if imported is not None:
            sys.modules[module] = imported
    raise AssertionError(f'{script} --help reached neither configurator nor argparse')


def unset_var(word):
    """A positional word with a variable the page does not set: a config file, the first file it can
    be (config/$c.py: config/alpha_perloop.py); anything else as it is."""
    if '$' in word and word.endswith('.py'):
        found = sorted(ROOT.glob(re.sub(r'\$\{?\w+\}?', '*', word)))
        return str(found[0].relative_to(ROOT)) if found else word
    return word


def bash_needs(script):
    """The variables a study's run.sh must be given: those its own usage line (in its header) sets."""
    for line in (ROOT / script).read_text().splitlines():
        m = re.match(r'#\s+((?:[A-Z_][A-Z0-9_]*=\S+\s+)*)bash ' + re.escape(script) + r'\s*$', line)
        if m:
            return {w.split('=', 1)[0] for w in m.group(1).split()}
    return set()


def check_command(words, env, shell_vars):
    """The problems of one command line, as strings (none: it runs as written)."""
    if words[0] == 'bash':
        script = words[1]
        if not (ROOT / script).is_file():
            return [f'{script} does not exist']
        source = (ROOT / script).read_text() + (ASSETS / 'study.sh').read_text()
        problems = [f'{script} needs {v}=' for v in sorted(bash_needs(script) - set(env))]
        return problems + [f'{script} reads no {v}' for v in env if not re.search(r'\$\{?' + v + r'\b', source)]
    if words[0] == 'torchrun':
        first = next(i for i, w in enumerate(words) if i and not w.startswith('--'))   # torchrun's own flags first
        words = ['python'] + words[first:]
    if words[1] == '-m':
        module, args = words[2], words[3:]
        script = module.replace('.', '/') + '.py'
        if not (ROOT / script).is_file():
            return [] if importlib.util.find_spec(module) else [f'no module {module}']   # (pytest)
    else:
        module, script, args = None, words[1], words[2:]
        if not (ROOT / script).is_file():
            return [f'{script} does not exist']
    problems = []
    for w in args:   # the repo's files a command names
        for part in re.split(r'[,=]', w):
            if re.match(r'(config|assets)/', part) and not re.search(r'[*{}]|\.\.\.', part):
                if not any(list(ROOT.glob(re.sub(r'\$\{?\w+\}?', '*', p))) if '$' in p else (ROOT / p).exists()
                           for p in expansions(part, shell_vars)):
                    problems.append(f'{part} does not exist')
    kind, spec = command_line(script, module)
    variants = [list(v) for v in itertools.product(*(expansions(w, shell_vars) for w in args))]
    for argv in variants[:64]:
        argv = [re.sub(r'\$\{?\w+\}?', '1', w) if w.startswith('--') else unset_var(w) for w in argv]
        err = io.StringIO()
        try:
            if kind == 'settings':
                import configurator
                cwd = os.getcwd()
                os.chdir(ROOT)
                try:
                    configurator.configure(spec, argv, [str(ROOT / script)])
                finally:
                    os.chdir(cwd)
            else:
                with contextlib.redirect_stderr(err):
                    spec.parse_args(argv)
        except SystemExit:
            problems.append(err.getvalue().strip().splitlines()[-1])
            break
        except Exception as e:   # configurator's UserError
            problems.append(str(e))
            break
    return problems


def doc_commands():
    return [(f'{page}:{n}', words, env, shell_vars) for page in DOCS
            for n, words, env, shell_vars in page_commands(page)]


def test_commands_are_found():
    """The extraction sees the pages' commands, inline, continued and inside loops alike."""
    found = {(where.split(':')[0], ' '.join(words[:3])) for where, words, _, _ in doc_commands()}
    assert ('README.md', 'python train.py config/norm_perloop.py') in found
    assert ('README.md', 'python -m beyond.bench') in found                 # inline, in the prose
    assert ('docs/depth.md', 'bash assets/depth/run.sh') in found           # with its WT103=
    assert ('docs/early-exit.md', 'python -m beyond.exit_train') in found     # inside a for loop, continued
    assert len(found) >= 40


def test_command_check_catches_what_breaks():
    """A flag the script lacks, a flag without its value, a missing config file, a bash study
    without the variable its usage line sets: each is a problem."""
    assert any('unknown setting' in p for p in check_command(['python', 'train.py', '--no_such=1'], {}, {}))
    assert any('no value' in p for p in check_command(['python', '-m', 'beyond.bench', '--anchor'], {}, {}))
    assert check_command(['python', 'train.py', 'config/no_such.py'], {}, {})
    assert check_command(['python', 'eval_depth.py', 'RUN', '--no_such', '1'], {}, {})
    assert check_command(['python', 'eval_depth.py', 'RUN', '--max_loops', 'many'], {}, {})
    assert check_command(['bash', 'assets/depth/run.sh'], {}, {}) == ['assets/depth/run.sh needs WT103=']
    assert not check_command(['python', 'train.py', 'config/$c.py', '--seed=$s'], {}, {'c': ['raw_perloop'], 's': ['1']})


@pytest.mark.parametrize('page', DOCS)
def test_every_command_runs_as_written(page):
    """Every command line of the page names a script or module that exists, config files that exist,
    and only settings (with their values) that the script takes."""
    broken = [f'{where}: {" ".join(words)}\n    {p}' for where, words, env, shell_vars in doc_commands()
              if where.startswith(page + ':') for p in check_command(words, env, shell_vars)]
    assert not broken, 'commands that do not run as written:\n' + '\n'.join(broken)


# ---------------------------------------------------------------------------------------------
# numbers in the prose: each sentence below, with `#` where a stored number stands, is found once
# on its page (its lines joined) and its numbers are checked as a table's cells are

PROSE = {}


def prose(page, sentence):
    def register(fn):
        PROSE[(page, sentence)] = fn
        return fn
    return register


DEPTH = 'depth/results.json'


def depth_ppl(name):
    """{K: ppl} of a run or a group (the mean over its seeds) of the depth study."""
    return {r['K']: r['ppl'] for r in json_group(DEPTH, name)[0]['per_K']}


def past_best(name, trained=4):
    """The best K up to the trained K and its ppl, then K=8 and K=16 over it, in %."""
    p = depth_ppl(name)
    k = min((k for k in p if k <= trained), key=p.get)
    return [k, p[k], 100 * (p[8] / p[k] - 1), 100 * (p[16] / p[k] - 1)]


def draws(name):
    """A random-depth run's draws of K (depth.draw_depth over its iterations): their number, mean K, then the
    share of K <= 2, K = 1, K >= 4, 8, 16, in %."""
    import numpy as np
    import depth
    run = json_run(DEPTH, name)
    d, iters = run['depth']['draw'], jsonl(f'depth/logs/{name[4:]}.jsonl')[-1]['iter']
    k = np.array([depth.draw_depth(run['seed'], it, mean=d['n_loops'], cap=d['max_loops'], sigma=d['depth_sigma'])
                  for it in range(iters)])
    return [iters, k.mean()] + [100 * x for x in ((k <= 2).mean(), (k == 1).mean(), (k >= 4).mean(), (k >= 8).mean(),
                                           (k >= 16).mean())]


@prose('docs/depth.md', 'finalnorm_perloop (per-loop CE through the final norm) is best at K=# (#; # at K=4), # at K=8 '
                        'and # at K=16.')
def finalnorm_best():
    p = depth_ppl('out-finalnorm_perloop-cpu-long-s1')
    k = min((k for k in p if k <= 4), key=p.get)
    return [k, p[k], p[4], p[8], p[16]]


@prose('docs/depth.md', "A run's # draws (seed #) have a mean K of #; #% of them are K ≤ # (#% K=#), #% reach loop #, "
                        "#% loop # and #% loop #")
def draws_sigma_1():
    iters, mean, le2, k1, k4, k8, k16 = draws('out-raw_perloop-rd-cpu-long-s1')
    return [iters, 1, mean, le2, 2, k1, 1, k4, 4, k8, 8, k16, 16]


@prose('docs/depth.md', "the run's # draws have a mean K of # against #, #% of them reach loop # against #%, "
                        "and #% are K=# against #%")
def draws_sigma_15():
    heavy, base = draws('out-raw_perloop-rd1.5-cpu-long-s1'), draws('out-raw_perloop-rd-cpu-long-s1')
    return [heavy[0], heavy[1], base[1], heavy[6], 16, base[6], heavy[3], 1, base[3]]


@prose('docs/depth.md', '+#% at K=# and +#% at K=#, the flattest per-loop design over # seeds (terminal CE is flatter: '
                        'norm_terminal with random depth, +#% and +#%;')
def damped_flattest():
    damped, terminal = past_best('out-damped_perloop-rd-cpu-long'), past_best('out-norm_terminal-rd-cpu-long')
    per_loop_groups = [g['name'] for g in results(DEPTH)['groups'] if 'perloop' in g['name'] and len(g['runs']) == 3]
    assert all(past_best(g)[2] >= damped[2] for g in per_loop_groups) and terminal[2] < damped[2]
    return [damped[2], 8, damped[3], 16, 3, terminal[2], terminal[3]]


@prose('docs/depth.md', "At fixed depth it is the best of the field's controls after alpha_perloop (best # at K=#; "
                        "penalty_terminal's # and penalty_perloop's # are better)")
def sandwich_place():
    fixed = {c: past_best(f'out-{c}-cpu-long-s1') for c in ('sandwich_perloop', 'alpha_perloop', 'inject_perloop',
                                                             'damped_perloop', 'contractive_perloop',
                                                             'penalty_terminal', 'penalty_perloop')}
    order = sorted(fixed, key=lambda c: fixed[c][1])
    assert order[:4] == ['alpha_perloop', 'penalty_terminal', 'penalty_perloop', 'sandwich_perloop']
    return [fixed['sandwich_perloop'][1], fixed['sandwich_perloop'][0], fixed['penalty_terminal'][1],
            fixed['penalty_perloop'][1]]


MORE = 'cpu-long-more/tables.md'


def more(c, K, col='ppl'):
    return nums(depth(MORE, f'out-{c}-cpu-long (3 seeds)', K, col))[0]


@prose('docs/four-epochs.md', 'useless at K=# (# and more) but not at K=# for the normalized readout (norm_terminal #, '
                              '#% above its # at K=4; raw #, penalty #)')
def terminal_before_k():
    k1 = min(more(c, 1) for c in ('norm_terminal', 'raw_terminal', 'penalty_terminal'))
    nt3, nt4 = more('norm_terminal', 3), more('norm_terminal', 4)
    return [1, k1, 3, nt3, 100 * (nt3 / nt4 - 1), nt4, more('raw_terminal', 3), more('penalty_terminal', 3)]


@prose('docs/four-epochs.md', "The inter-loop norm is not frozen (1 − cos # at loop #, #x norm_perloop's)")
def interloop_turns():
    inter = more('interloop_perloop', 4, '1-cos')
    norm = nums(depth('cpu-long/tables.md', 'out-norm_perloop-cpu-long (3 seeds)', 4, '1-cos'))[0]
    return [inter, 4, inter / norm]


CRITERIA_RAW = ('cpu-long-criteria/tables.md', 'out-raw_perloop-cpu-long (3 seeds)')


def projected_exit(crit):
    """Decoded with projected stand-ins at 0.9: mean loops and the ppl over full depth's, in %."""
    row = exit_row(*CRITERIA_RAW, crit, '0.9')
    return mean(row[6])[0], 100 * (mean(row[7])[0] / full_depth_ppl(*CRITERIA_RAW)[0] - 1)


@prose('docs/early-exit.md', "The readout's criteria lose most: at #, decoded with projections on raw_perloop, "
                             "`max_prob` and `entropy` run # and # loops and lose #% and #%. The gates run # and # "
                             "loops and still lose #% and #%, more than `angular` (# loops, #%)")
def gates_lose_less():
    (mp, mp_loss), (en, en_loss), (g, g_loss), (gr, gr_loss), (an, an_loss) = (
        projected_exit(c) for c in ('max_prob', 'entropy', 'gate', 'gate-raw', 'angular'))
    return [0.9, mp, en, mp_loss, en_loss, g, gr, g_loss, gr_loss, an, an_loss]


def prose_text(page):
    return ' '.join((ROOT / page).read_text().split())


def prose_numbers(page, sentence):
    """The numbers the page shows where the sentence has `#`, joined as one cell."""
    pattern = r'\s*'.join(r'([+\-−]?[\d,]*\d(?:\.\d+)?(?:e[+\-−]?\d+)?)'.join(re.escape(p) for p in word.split('#'))
                          for word in sentence.split())
    found = re.findall(pattern, prose_text(page))
    assert len(found) == 1, f'{page}: {len(found)} sentences like {sentence!r}'
    return ' | '.join(found[0] if isinstance(found[0], tuple) else [found[0]])


@pytest.mark.parametrize('key', sorted(PROSE), ids=lambda k: f'{k[0]}:{k[1][:40]}')
def test_prose_number_is_the_stored_result(key):
    check_cell(prose_numbers(*key), PROSE[key](), f'{key[0]}: {key[1]!r}')


def test_prose_numbers_are_pinned():
    """Changing the last digit of any number in a checked sentence fails its check."""
    for key, fn in PROSE.items():
        cell, want = prose_numbers(*key), fn()
        for m in NUM.finditer(cell):
            e = m.group(0).find('e')
            i = m.start() + e - 1 if e > 0 else m.end() - 1
            with pytest.raises(AssertionError):
                check_cell(cell[:i] + str((int(cell[i]) + 5) % 10) + cell[i + 1:], want, 'changed')
