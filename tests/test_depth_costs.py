"""
beyond/depth_costs.py, the cost of each part of a decoded token (one loop, one readout, the exit decisions, the
draw) on a tiny run (conftest's shared_runs): the parts add up to its fixed-K token and to its exits' tokens.

    python -m pytest -q tests/test_depth_costs.py
"""

import re

import pytest
import torch

from beyond import depth_costs, exits


def test_depth_costs_parts_add_up_to_its_fixed_k_token_and_its_exits(shared_runs, capsys):
    run = shared_runs.folder() / 'out-raw_perloop-cpu-long-s1'
    capsys.readouterr()  # the shared runs' training, where this test is the first to need them
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        depth_costs.main([str(run), '--prompt', '16', '--reps', '2',
                          '--new_tokens', '4', '--accept_tokens', '128'])
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out
    K = 2  # conftest.TINY's n_loops
    assert out.startswith('# out-raw_perloop-cpu-long-s1: d=32, 1 layers, K=2, vocab 256, float32')
    ms = dict(re.findall(r'^\| ([^|]+?) \| ([\d.]+) \|$', out, re.M))
    for name, c in exits.CRITERIA.items():
        assert f"exit decision: {name}{'' if c.readout else ' (no readout)'}" in ms, name
    loop, readout, draw = (float(ms[k]) for k in ('one loop (the 1-layer stack, one token)', 'one readout (32 x 256)',
                                                  'sampling from the readout'))
    assert [k for k in ms if k.startswith('verify pass')] == ['verify pass, loops 2..2 over 4 tokens, per token']
    assert re.findall(r'^\| (\d) \| [\d,.]+ \|$', out, re.M) == ['1', '2']  # fixed K = 1..K, tok/s
    token = float(re.search(r'= ([\d.]+) ms \(', out).group(1))
    # each number is printed to 3 decimals, so each is off by up to half a unit: a sum of printed parts
    # is off from the printed total by up to that times how many printed values enter it (K loops count K)
    rounding = lambda n: n * 0.5e-3 + 1e-9  # noqa: E731
    assert token == pytest.approx(K * loop + readout + draw, abs=rounding(K + 3))
    # an exit after loop 1 with a readout (and a max_prob decision) every loop, and decided from the state
    row = re.search(r'^\| 1 \| ([\d.]+) ms \| ([\d.]+)x \| ([\d.]+) ms \| ([\d.]+)x \|', out, re.M).groups()
    assert float(row[0]) == pytest.approx(loop + readout + float(ms['exit decision: max_prob']) + draw, abs=rounding(5))
    angular = float(ms['exit decision: angular (no readout)'])
    assert float(row[2]) == pytest.approx(loop + angular + readout + draw, abs=rounding(5))
    assert float(row[1]) == pytest.approx(token / float(row[0]), rel=0.02)
    agree, accept = re.search(r'^\| 1 \| ([\d.]+) \| ([\d.]+) \|', out.split('Speculative decoding')[1], re.M).groups()
    assert 0 <= float(agree) <= 1 and 0 <= float(accept) <= 1
    # the summary the pages quote, recomputed from the printed parts and the printed fixed-K tok/s
    ratio, tok_s, measured, beyond, parts = re.search(
        r'^Read from the lines above: one readout is ([\d.]+) of one loop; a fixed-K token measured 1000 / ([\d,.]+) = '
        r'([\d.]+) ms, (-?[\d.]+) ms beyond its parts \(([\d.]+) ms\)\.$', out, re.M).groups()
    assert float(ratio) == pytest.approx(readout / loop, abs=0.0005 + 0.5e-3 * readout / loop ** 2 + 0.5e-3 / loop)
    assert tok_s == re.findall(rf'^\| {K} \| ([\d,.]+) \|$', out, re.M)[-1] and float(parts) == token
    assert float(measured) == pytest.approx(1000 / float(tok_s.replace(',', '')), abs=0.0005)
    assert float(beyond) == pytest.approx(float(measured) - token, abs=0.001)


def test_from_table_prints_a_stored_output_with_its_summary_made_anew(tmp_path, capsys):
    """--from_table: the stored lines as they are, the summary computed from them (0.754 = 7.135 / 9.460; 1000 / 16.9 =
    59.172 ms, 59.172 - 45.876 = 13.296), and a file that already has one gets it once."""
    stored = ('# run\n\n| part | ms |\n|---|---|\n| one loop (the 8-layer stack, one token) | 9.460 |\n'
              '| one readout (512 x 50257) | 7.135 |\n\nA fixed-K token, from the parts: 4 x 9.460 + 7.135 + 0.902 = '
              '45.876 ms (21.8 tok/s; measured 16.9).\n')
    (tmp_path / 'costs.md').write_text(stored)
    depth_costs.main(['--from_table', str(tmp_path / 'costs.md')])
    out = capsys.readouterr().out
    assert out == stored + ('\nRead from the lines above: one readout is 0.754 of one loop; a fixed-K token measured '
                            '1000 / 16.9 = 59.172 ms, 13.296 ms beyond its parts (45.876 ms).\n')
    (tmp_path / 'costs.md').write_text(out)
    depth_costs.main(['--from_table', str(tmp_path / 'costs.md')])
    assert capsys.readouterr().out == out
