"""
Exit criteria, in one registry: how sure a token is after a loop, a confidence in [0, 1]. A
decoder stops a token after the first loop where it exceeds a threshold, so thresholds mean
the same for every criterion. Everything that decides an exit (the decoder, speculative
decoding's draft stop, beyond/sample.py, eval_depth.py, the cost script) reads this file.

    python -m beyond.exits                   # the criteria, what each reads, and how to add one

A criterion reads either the readout of this loop (its logits, and 'converge' also the previous
loop's) or the states alone, H_k and the state that entered the loop, H_{k-1}: O(d) a token
against the readout's d x vocab, so a decoder that uses one reads out once, at the exit.
Learned gates (a Linear(d, 1) on the state, trained by `python -m beyond.exit_gate`) are state
criteria too, named 'gate', 'gate-raw', ...: each is the file <run folder>/<name>.pt, resolved by
`resolve`. Adding a criterion is one `@criterion(...)` entry here (tests/test_exits.py adds one).
"""

import math
import os
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn as nn
from torch.nn import functional as F

from configurator import UserError


@dataclass(frozen=True)
class Criterion:
    name: str
    readout: bool          # True: decided from this loop's logits (a readout at every loop it could stop after)
    previous: bool         # True: also reads the previous loop (its logits, or H_{k-1} for a state criterion)
    confidence: Callable   # (h, before, logits, prev) -> (...,) in [0, 1]; h, before (..., C); logits, prev (..., vocab)
    about: str             # one line: what it measures
    gate: object = None    # a learned gate's ExitGate (None for the registered criteria)

    def __call__(self, h, before, logits=None, prev=None):
        return self.confidence(h, before, logits, prev)


CRITERIA = {}  # name -> Criterion, in the order they are written


def criterion(name, readout, about, previous=False):
    """Registers the function below it as the criterion `name` (the decorator is the whole entry)."""
    def register(fn):
        CRITERIA[name] = Criterion(name, readout, previous or not readout, fn, about)
        return fn
    return register


# -------------------------------------------------------------------------------------
# from the readout

@criterion('max_prob', readout=True, about='the top probability')
def max_prob(h, before, logits, prev):
    return F.softmax(logits.float(), dim=-1).amax(-1)


@criterion('entropy', readout=True, about='1 - H(p) / ln(vocab)')
def entropy(h, before, logits, prev):
    logp = F.log_softmax(logits.float(), dim=-1)
    return 1 + (logp.exp() * logp).sum(-1) / math.log(logits.size(-1))


@criterion('converge', readout=True, previous=True, about="exp(-KL(p_k || p_k-1)): the prediction stopped changing")
def converge(h, before, logits, prev):
    # 1 when this loop's readout equals the previous loop's, as recurrent-depth decoders stop when
    # the prediction stops changing. At loop 1 (prev None) there is nothing to compare: 0.
    if prev is None:
        return torch.zeros(logits.shape[:-1], device=logits.device)
    logp, logq = F.log_softmax(logits.float(), dim=-1), F.log_softmax(prev.float(), dim=-1)
    return torch.exp(-(logp.exp() * (logp - logq)).sum(-1).clamp_min(0))


# -------------------------------------------------------------------------------------
# from the states alone. Both are scale-free, so a drifted state (||H|| ~ 1e4) reads as it would at
# any scale: they measure how much a loop changes the state relative to its size. At loop 1, before
# is the embedding H_0: the same formula at every loop, so loop 1 can exit; in practice the first
# loop turns nearly every token a long way (on the CPU demo runs, median loop-1 confidence 0.32-0.37,
# none over 0.9, against 0.85-0.98 angular medians at loop 2).

@criterion('angular', readout=False, about="1 - ||u_k - u_k-1|| / 2, u = H / ||H||: Lemma 2's angular step")
def angular(h, before, logits, prev):
    # 1 - sin(theta / 2), theta the angle between H_k and H_{k-1}: 1 when the loop did not turn the
    # state, and by Lemma 2 a state that stops turning stops changing a normalized readout's
    # prediction. (Rather than cos theta: it spreads small steps over the threshold grid, and the
    # difference of unit vectors keeps float32 precision where 1 - cos rounds to 0.)
    step = F.normalize(h.float(), dim=-1) - F.normalize(before.float(), dim=-1)
    return 1 - step.norm(dim=-1) / 2


@criterion('latent', readout=False, about="exp(-||H_k - H_k-1|| / ||H_k||): Huginn's latent difference")
def latent(h, before, logits, prev):
    # the relative change of the state, radial part included. On a drifted model both state criteria
    # read "settled" (Lemma 2: the radial increment stays about constant while ||H_k|| grows); 'latent'
    # also counts the radial growth a normalized readout cannot see, so on a model whose loops still
    # turn it is the more cautious of the two.
    h, before = h.float(), before.float()
    return torch.exp(-(h - before).norm(dim=-1) / h.norm(dim=-1).clamp_min(1e-30))


def get(c):
    """A Criterion, or the built-in one of that name (a gate needs its run: resolve)."""
    if isinstance(c, Criterion):
        return c
    if c in CRITERIA:
        return CRITERIA[c]
    raise UserError(f"unknown exit criterion {c!r}; use {names()}")


def names():
    return ', '.join(CRITERIA) + ", or a learned gate ('gate', 'gate-raw', ...: python -m beyond.exit_gate)"


# -------------------------------------------------------------------------------------
# learned gates: a criterion named 'gate' or 'gate-<anything>', saved with the run as <name>.pt

GATE = 'gate'


def is_gate(name):
    """Whether a name is a learned gate's: 'gate', or 'gate-' and a name of its own."""
    return name == GATE or (name.startswith(GATE + '-') and len(name) > len(GATE) + 1)


def check_name(name, setting='exit criterion'):
    """A name the registry can resolve (a gate's file need not exist yet); UserError otherwise, naming
    the setting it came from (beyond/sample.py's exit_criterion, python -m beyond.eval_decode's --criteria)."""
    if name not in CRITERIA and not (is_gate(name) and name.replace('-', '_').isidentifier()):
        raise UserError(f"{setting}: unknown exit criterion {name!r}; use {names()}")
    return name


class ExitGate(nn.Module):
    """Linear(d, 1) on a state after a loop; called on H_k (..., C), it returns the exit
    probability (...,) in [0, 1], float32. 'norm' reads the RMS-normalized state, the direction a
    norm readout sees (Ouro's gate); 'raw' the state itself over one constant, `scale` (the mean
    RMS of the training states, only to condition the regression: the gate still sees how large
    each state is), the paper's released gate and CALM's."""

    def __init__(self, n_embd, reads='norm', scale=1.0):
        super().__init__()
        self.reads = reads
        self.linear = nn.Linear(n_embd, 1)
        self.register_buffer('scale', torch.tensor(float(scale)))
        nn.init.zeros_(self.linear.weight)

    def features(self, h):
        h = h.float()
        if self.reads == 'norm':  # the direction only: what a norm readout sees
            return F.rms_norm(h, (h.size(-1),))
        return h / self.scale

    def logit(self, h):
        # float32 whatever autocast is on: an O(d) product, and the gate's threshold should not
        # move with the precision the loops run in
        with torch.autocast(h.device.type, enabled=False):
            return F.linear(self.features(h), self.linear.weight, self.linear.bias).squeeze(-1)

    def forward(self, h):
        return torch.sigmoid(self.logit(h))


def gate_criterion(name, gate):
    """A trained ExitGate as a criterion: its exit probability from the state H_k alone."""
    return Criterion(name, readout=False, previous=False, confidence=lambda h, before, logits, prev: gate(h),
                     about=f"a learned gate reading the {gate.reads} state", gate=gate)


def fingerprint(model):
    """A number that names the checkpoint a gate was trained on (the LM head's weight sum)."""
    return model.lm_head.weight.detach().double().sum().item()


def gate_path(folder, name):
    return os.path.join(folder, f'{name}.pt')


def save_gate(path, gate, model, settings):
    """<name>.pt: the weights and what the gate was trained with, written to a temporary file and
    renamed, so a reader never finds half a gate."""
    torch.save(dict(weight=gate.linear.weight.detach().cpu(), bias=gate.linear.bias.detach().cpu(),
                    scale=float(gate.scale), reads=gate.reads, fingerprint=fingerprint(model), **settings),
               path + '.tmp')
    os.replace(path + '.tmp', path)


def train_command(folder, name):
    return f"python -m beyond.exit_gate --out_dir={folder}" + (f" --name={name}" if name != GATE else '')


def load_gate(folder, name, model):
    """The gate <folder>/<name>.pt of a run, checked against its model; UserError (naming the command
    that trains one) if there is none or it belongs to another checkpoint."""
    path = gate_path(folder, name)
    if not os.path.isfile(path):
        raise UserError(f"the exit criterion {name!r} needs a trained gate at {path}, and there is none: "
                        f"train one with `{train_command(folder, name)}`")
    try:
        saved = torch.load(path, map_location='cpu', weights_only=True)
        gate = ExitGate(saved['weight'].size(1), saved['reads'], saved['scale'])
        gate.linear.weight.data.copy_(saved['weight'])
        gate.linear.bias.data.copy_(saved['bias'])
    except Exception as e:
        raise UserError(f"{path} is not a gate written by beyond/exit_gate.py ({type(e).__name__})")
    if gate.linear.in_features != model.config.n_embd or \
            not math.isclose(saved['fingerprint'], fingerprint(model), rel_tol=1e-6, abs_tol=1e-6):
        raise UserError(f"{path} was trained on another checkpoint than {folder}'s: train it again with "
                        f"`{train_command(folder, name)}`")
    return gate.to(model.lm_head.weight.device).eval()


def resolve(name, folder=None, model=None):
    """The Criterion a name means: a registered one, or the learned gate <folder>/<name>.pt of this
    run's model. The one place a name is turned into a criterion."""
    check_name(name)
    if name in CRITERIA:
        return CRITERIA[name]
    return gate_criterion(name, load_gate(folder, name, model))


def run_criteria(folder, model, names=None):
    """The criteria a run is scored with, name -> Criterion: those named, or with names None every
    registered one and the run's default gate, gate.pt, where it has one."""
    if names is None:
        names = list(CRITERIA) + ([GATE] if os.path.isfile(gate_path(folder, GATE)) else [])
    return {n: resolve(n, folder, model) for n in names}


if __name__ == '__main__':
    print('| criterion | reads | about |\n|---|---|---|')
    for c in CRITERIA.values():
        reads = ('the readout' + (', and the previous loop\'s' if c.previous else '')) if c.readout else 'H_k, H_k-1'
        print(f"| {c.name} | {reads} | {c.about} |")
    print("| gate, gate-<name> | H_k | a learned gate: <run folder>/<name>.pt, from `python -m beyond.exit_gate` |")
    print("\nTo add one, write a function (h, before, logits, prev) -> confidence in [0, 1] in beyond/exits.py,\n"
          "under @criterion('name', readout=..., about='...'): python -m beyond.sample, eval_depth.py and the decoder take it by name.")
