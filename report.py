"""
Numbers as the scripts report them: perplexity, JSON without NaN, atomic JSON files, mean ± std.

    python -c "from report import mean_std; print(mean_std([2.51, 2.53, 2.49]))"
"""

import json
import math
import os


def perplexity(loss):
    """exp(loss), or inf where that overflows (an untrained readout can have CE in the hundreds);
    NaN stays NaN."""
    return math.exp(loss) if loss < 700 else float('nan') if math.isnan(loss) else float('inf')


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


def mean_std(trees):
    """Elementwise mean and sample standard deviation (n-1) over runs of the same shape: nested
    dicts and lists whose numeric leaves are averaged. Returns (mean, std) trees; std is NaN
    for a single run. Any other leaf is kept where every run agrees; a number missing (None)
    in some runs is NaN; leaves that differ otherwise (a name, a path) are None."""
    first = trees[0]
    if isinstance(first, dict):
        pairs = {k: mean_std([t[k] for t in trees]) for k in first if all(k in t for t in trees)}
        return {k: m for k, (m, _) in pairs.items()}, {k: s for k, (_, s) in pairs.items()}
    if isinstance(first, (list, tuple)) and all(isinstance(t, (list, tuple)) and len(t) == len(first) for t in trees):
        pairs = [mean_std([t[i] for t in trees]) for i in range(len(first))]
        return [m for m, _ in pairs], [s for _, s in pairs]
    if all(isinstance(t, (int, float)) and not isinstance(t, bool) for t in trees):
        n = len(trees)
        if all(t == first for t in trees):  # (keeps an int an int: K, a token count)
            return first, (0.0 if n > 1 else float('nan'))
        mean = sum(trees) / n
        std = math.sqrt(sum((t - mean) ** 2 for t in trees) / (n - 1)) if n > 1 else float('nan')
        return mean, std
    if all(t == first for t in trees):
        return first, None
    if all(t is None or isinstance(t, (int, float)) for t in trees):  # a number missing in some run
        return float('nan'), float('nan')
    return None, None


def pm(mean, std, spec='.3f'):
    """'mean ± std', or just the mean when there is no spread to show (one run). None (NaN read
    back from JSON) is '-'."""
    if mean is None or not math.isfinite(mean):
        return '-'
    spread = std is not None and math.isfinite(std)
    return format(mean, spec) + (f" ± {format(std, spec.lstrip('+'))}" if spread else '')
