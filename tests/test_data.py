"""
data.py, what the scripts read: the tokenizers, the prepared splits and the rows of a task, the batches train.py
draws and the windows the evaluation scores, the runs and their data loaded back, and the one-line errors that
name the command that makes the data.

    python -m pytest -q tests/test_data.py
"""

import pytest
import torch

import train
from configurator import UserError
from conftest import HERE


# -----------------------------------------------------------------------------
# missing data: one line naming the command that makes it

def test_a_tasks_missing_data_names_the_module_that_makes_it(tmp_path):
    # config/parity.py's dataset is written by python -m beyond.parity, not by prepare.py
    try:
        with pytest.raises(UserError, match=r'make it with `python -m beyond.parity`'):
            train.main([f'{HERE}/config/parity.py', f'--data_dir={tmp_path}', f'--out_dir={tmp_path / "out"}'])
    finally:
        torch.set_flush_denormal(False)
    assert not (tmp_path / 'out').exists()
    # a name that no module of beyond/ writes is text for prepare.py, as before
    with pytest.raises(UserError, match=r'python prepare.py --text_dir .* --out_dir data/my-text'):
        train.load_splits(str(tmp_path), 'my-text', 16)
