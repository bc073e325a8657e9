"""
The layout's one rule: the top level (the paper) never imports beyond/; beyond/ builds on the top.

    python -m pytest -q tests/test_layout.py
"""

import ast
import glob
import os

from conftest import HERE

def imports_beyond(path):
    """Whether a Python file imports beyond or anything in it, at any depth of its code."""
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name.split('.')[0] == 'beyond' for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or '').split('.')[0] == 'beyond':
            return True
    return False


def test_imports_beyond_sees_every_form_of_import(tmp_path):
    for source, expected in (('import beyond.exits\n', True), ('from beyond import exits\n', True),
                             ('def f():\n    from beyond.decoder import generate\n', True),
                             ('import beyondness\nfrom model import LoopedGPT\n', False)):
        (tmp_path / 'x.py').write_text(source)
        assert imports_beyond(tmp_path / 'x.py') is expected, source


def test_no_top_level_module_imports_beyond():
    top = sorted(os.path.basename(p) for p in glob.glob(os.path.join(HERE, '*.py')))
    assert 'train.py' in top and 'model.py' in top
    importing = sorted(name for name in top if imports_beyond(os.path.join(HERE, name)))
    assert not importing, f"top-level files importing beyond/: {importing} (beyond/ builds on the top, never the other way)"
