"""
beyond/parity.py, a task in rows (python -m beyond.parity): each row holds both bits and both targets, each
target the running XOR; the splits' lengths and the probe split; the folder rewritten whole and meta.json
saying what it holds; bad input in one line.

    python -m pytest -q tests/test_parity.py
"""

import json

from beyond import parity
from conftest import PARITY_SPLITS
from data import load_rows


# -----------------------------------------------------------------------------
# the folder

def test_parity_rewrites_its_folder_whole(tmp_path):
    parity.write(str(tmp_path), 1, PARITY_SPLITS)
    parity.write(str(tmp_path), 2, dict(PARITY_SPLITS, train=(12, [3])))
    meta = json.loads((tmp_path / 'meta.json').read_text())
    assert meta['seed'] == 2 and meta['rows']['train'] == 12 and meta['row_len']['train'] == 4
    assert load_rows(str(tmp_path), 'train').x.shape == (12, 4)
    assert sorted(p.name for p in tmp_path.iterdir() if 'meta' in p.name) == ['meta.json']  # (no .tmp left)
