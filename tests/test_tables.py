"""
Every study's tables.md is what its stored results render to today: re-rendered here from the
results files (python -m beyond.eval_decode --from_results, without the figures), so a rerun that
was not re-rendered, or a change to a table's code, fails until tables.md is written again.

    python -m pytest -q tests/test_tables.py
"""

import glob
import os

import pytest

import eval_depth
from beyond import eval_decode
from beyond.eval_decode import DecodingStudies
from conftest import HERE

ASSETS = os.path.join(HERE, 'assets')


def sources(folder):
    """The results a study's tables.md renders: its results.json, or the parts it merged."""
    one = os.path.join(folder, 'results.json')
    parts = sorted(glob.glob(os.path.join(folder, 'results-*.json')))
    return ','.join(parts) if parts else one


STUDIES = sorted(os.path.relpath(os.path.dirname(p), ASSETS) for p in glob.glob(os.path.join(ASSETS, '**', 'tables.md'),
                                                                               recursive=True)
                 if glob.glob(os.path.join(os.path.dirname(p), 'results*.json')))  # (cpu-long/calibrated too)


def rendered(folder):
    runs, groups, _ = eval_depth.from_results(sources(folder), [])
    return eval_depth.render(groups, runs, [DecodingStudies()])


def test_every_study_with_results_is_here():
    assert {'cpu-demo', 'cpu-long', 'cpu-long/calibrated', 'cpu-44m', 'cpu-long-more', 'depth', 'cpu-long-exits'} <= set(STUDIES)


@pytest.mark.parametrize('study', STUDIES)
def test_tables_md_is_its_results_rendered(study):
    folder = os.path.join(ASSETS, study)
    with open(os.path.join(folder, 'tables.md')) as f:
        stored = f.read()
    assert rendered(folder) == stored, (
        f"assets/{study}/tables.md is not what its results render to: write it again with "
        f"python -m beyond.eval_decode --from_results {os.path.relpath(sources(folder), HERE)} --out /tmp/x "
        f"> assets/{study}/tables.md")


def test_the_command_named_prints_tables_md_to_its_last_byte(tmp_path, monkeypatch, capsys):
    # the command the failure above names, redirected into tables.md, writes the file stored: no line
    # more at its end (the figures it also draws are not read here)
    folder = os.path.join(ASSETS, 'cpu-long-speculative')
    monkeypatch.setattr(eval_depth, 'all_plots', lambda *args, **kwargs: [])
    eval_decode.main(['--from_results', sources(folder), '--out', str(tmp_path)])
    with open(os.path.join(folder, 'tables.md')) as f:
        assert capsys.readouterr().out == f.read()


def test_a_changed_number_fails(tmp_path):
    # the comparison sees one digit: a results.json whose first ppl moved renders another table
    import json
    folder = os.path.join(ASSETS, 'cpu-long-speculative')
    results = json.load(open(os.path.join(folder, 'results.json')))
    results['groups'][0]['mean']['per_K'][0]['ppl'] *= 1.001
    (tmp_path / 'results.json').write_text(json.dumps(results))
    assert rendered(str(tmp_path)) != rendered(folder)
