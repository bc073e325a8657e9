"""
Numbers as the scripts report them: perplexity, JSON without NaN, atomic JSON files, mean ± std.

    python -c "from report import mean_std; print(mean_std([2.51, 2.53, 2.49]))"
"""

import json
import math
import os


def perplexity(loss):
    """exp(loss), or inf where that overflows (an untrained readout can have CE in the hundreds)."""
    return math.exp(loss) if loss < 700 else float('inf')


def json_safe(v):
    """JSON has no NaN or inf: they are written as null (e.g. the CE of a loop a terminal loss
    never reads, or a radial fraction with no defined gradient)."""
    if isinstance(v, dict):
        return {k: json_safe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [json_safe(x) for x in v]
    return None if isinstance(v, float) and not math.isfinite(v) else v


def write_json(path, obj):
    """Writes obj (NaN and inf as null) to a temporary file and renames it: never a half-written file."""
    with open(path + '.tmp', 'w') as f:
        json.dump(json_safe(obj), f, indent=1)
    os.replace(path + '.tmp', path)
