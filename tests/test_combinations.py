"""
Settings together and one at a time. Every pair of model additions the config allows trains a step
and feeds each loop the input its documented rule gives, computed here by hand from the state before
it and the embedding (a rule that is right alone can be wrong beside another: damping that also damps
the injected embedding passes every single-addition test). And the run identity setting by setting:
eval_depth.py groups runs that differ only in seed, and splits runs that differ in any other setting
that makes a condition, each model field included, read from the config so a new field is covered.

    python -m pytest -q tests/test_combinations.py
"""

import itertools
import math
from dataclasses import asdict, fields

import pytest
import torch

import eval_depth
import train
from beyond.additions import POSITIONS, FieldGPT
from beyond.exit_train import ExitTrainConfig, ExitTrainedGPT
from model import LOSSES, READOUTS, SIZE, LoopedGPT, LoopedGPTConfig
from report import settings_of

V, T, K = 16, 8, 3

# one entry per model addition, the paper's and beyond/'s (bptt: FieldGPT.forward's, train.py's truncated backprop),
# each off its default
ADDITIONS = dict(sandwich_norm=dict(sandwich_norm=True), inject=dict(inject=True), damping=dict(damping=True),
                 window=dict(window=2), positions=dict(positions='none'), interloop_norm=dict(interloop_norm=True),
                 norm_penalty=dict(norm_penalty=0.01), raw=dict(readout='raw'), final_norm=dict(readout='final_norm'),
                 alpha=dict(readout='alpha'), terminal=dict(loss='terminal'), exit_train=dict(exit_train=0.5),
                 bptt=dict(bptt=1))
REFUSED = {('terminal', 'exit_train'), ('exit_train', 'bptt')}  # the pairs the config (or train.py) refuses
PAIRS = [(a, b) for a, b in itertools.combinations(ADDITIONS, 2)
         if ADDITIONS[a].keys() != ADDITIONS[b].keys()]  # (one readout at a time)


def test_every_model_field_is_an_addition_here():
    # a new field of the configs (its size fields and its init aside) joins ADDITIONS, and so every pair
    covered = {k for kw in ADDITIONS.values() for k in kw}
    assert {f.name for f in fields(ExitTrainConfig)} - set(SIZE) - {'init_std'} <= covered
    assert not {'sandwich_norm', 'inject', 'damping', 'window', 'positions', 'exit_train'} & {
        f.name for f in fields(LoopedGPTConfig)}  # the paper's config holds none of beyond/'s


def build(kw):
    """A tiny model with the additions kw (bptt: returned apart), its between-loop gain and damping
    logit moved off their init so a rule that forgets one reads another number."""
    kw = dict(kw)
    bptt = kw.pop('bptt', 0)
    cls = ExitTrainedGPT if kw.get('exit_train') else FieldGPT
    torch.manual_seed(0)
    model = cls(cls.config_class(**dict(dict(vocab_size=V, block_size=T, n_layer=1, n_head=2, n_embd=16, n_loops=K,
                                              dropout=0.0, init_std=0.1), **kw)))
    with torch.no_grad():
        if model.interloop_norm is not None:
            model.interloop_norm.weight.uniform_(0.5, 1.5, generator=torch.Generator().manual_seed(1))
        if model.config.damping:
            model.damping_logit.fill_(0.3)  # sigmoid 0.57
    return model, bptt


def loop_input_by_hand(model, h, e):
    """What loop k >= 2 starts from, by model.loop_input's documented rule: the carried state H_{k-1},
    RMS-normalized (times the gain) with the inter-loop norm, then times sigmoid(a) with damping, then
    plus the embedding H_0, neither normalized nor damped, with injection."""
    cfg = model.config
    if cfg.interloop_norm:
        h = h / torch.sqrt(h.pow(2).mean(-1, keepdim=True) + torch.finfo(h.dtype).eps) * model.interloop_norm.weight
    if cfg.damping:
        h = h / (1 + math.exp(-model.damping_logit.item()))
    if cfg.inject:
        h = h + e
    return h


@pytest.mark.parametrize('a,b', PAIRS, ids=[f'{a}+{b}' for a, b in PAIRS])
def test_each_pair_of_additions_trains_a_step_and_feeds_each_loop_its_input_by_hand(a, b, monkeypatch):
    kw = {**ADDITIONS[a], **ADDITIONS[b]}
    settings = dict(train.SETTINGS, **{k: v for k, v in kw.items() if k != 'bptt'}, bptt=kw.get('bptt', 0),
                    model_class='beyond.exit_train.ExitTrainedGPT' if 'exit_train' in kw else 'beyond.additions.FieldGPT')
    cls = train.model_class_of(settings)
    settings = {**train.model_fields(cls), **settings}
    if (a, b) in REFUSED:  # refused in one line, by the config or by train.py (its forward has no truncated backprop)
        with pytest.raises(train.UserError, match='exit_train|truncated backprop'):
            train.check_settings(settings, cls)
        return
    train.check_settings(settings, cls)
    model, bptt = build(kw)
    g = torch.Generator().manual_seed(2)
    x, y = torch.randint(0, V, (2, T), generator=g), torch.randint(0, V, (2, T), generator=g)
    # what each loop's block is handed, and every state the training forward carries, where the loop makes it:
    # the paper's loop (truncated backprop runs its first loops without a graph), or exit-aware training's
    # masked states, where a frozen token's state is its exit state, not the block's output
    inputs, states = [], []
    model.transformer.h[0].register_forward_pre_hook(lambda m, args: inputs.append(args[0].detach().clone()))
    owner = ExitTrainedGPT if isinstance(model, ExitTrainedGPT) else LoopedGPT
    real = owner.loop_states

    def spy(*args, **kwargs):
        for h in real(*args, **kwargs):
            states.append(h.detach().clone())
            yield h
    monkeypatch.setattr(owner, 'loop_states', spy)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model.train()
    _, loss = model(x, y, bptt=bptt) if bptt else model(x, y)
    assert len(inputs) == K and len(states) == K + 1
    with torch.no_grad():  # the embedding by hand: token rows, plus position rows where positions are learned
        e = model.transformer.wte.weight[x] + (model.transformer.wpe.weight[:T] if model.config.positions == 'learned'
                                               else 0)
        assert torch.allclose(states[0], e) and torch.allclose(inputs[0], e)  # loop 1 reads the embedding as it is
        for k in range(2, K + 1):
            assert torch.allclose(inputs[k - 1], loop_input_by_hand(model, states[k - 1], e), atol=1e-6), k
    # one optimizer step: a finite loss and finite gradients, and the parameters move
    assert torch.isfinite(loss)
    loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    before = [p.detach().clone() for p in model.parameters()]
    optimizer.step()
    assert any(not torch.equal(p, q) for p, q in zip(model.parameters(), before))
    assert all(torch.isfinite(p).all() for p in model.parameters())
    _, loss = model(x, y, bptt=bptt) if bptt else model(x, y)
    assert torch.isfinite(loss)


# -----------------------------------------------------------------------------
# the run identity: eval_depth.py's conditions, setting by setting

def every_setting():
    """A run's saved config at the defaults: train.py's settings and every field of the models' configs."""
    return {**train.SETTINGS, **asdict(ExitTrainConfig())}


CHOICES = {**{k: v for k, v in train.RANGES.items() if isinstance(v, tuple)},
           'readout': READOUTS, 'loss': LOSSES, 'positions': POSITIONS}


def another(name, value):
    """Another value of a setting: its next option, the other bool, or a number one more."""
    if name in CHOICES:
        return next(c for c in CHOICES[name] if c != value)
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    return value + '-other'


def grouped(*configs):
    """Whether eval_depth.py reports these runs' configs as one condition."""
    runs = [dict(name=f'run-s{i}', path=f'run-s{i}', seed=c['seed'], per_K=[dict(K=1, ppl=10.0 + i)])
            for i, c in enumerate(configs)]
    groups, _ = eval_depth.group_runs(runs, list(configs))
    return len(groups) == 1


def test_runs_differing_only_in_seed_group_and_in_any_setting_that_makes_a_condition_split():
    base = every_setting()
    assert grouped(base, dict(base, seed=base['seed'] + 1), dict(base, seed=base['seed'] + 2))
    model_fields = {f.name for f in fields(ExitTrainConfig)}
    assert not set(eval_depth.IDENTITY) & model_fields  # every model field makes a condition
    assert set(eval_depth.IDENTITY) <= set(base)  # (and no name there is stale)
    wrong = []
    for name, value in base.items():
        apart = not grouped(base, dict(base, **{name: another(name, value)}))
        if apart != (name not in eval_depth.IDENTITY):
            wrong.append(name)
    assert not wrong, f"{wrong}: grouped where they should split, or split where they should group"


def test_every_model_field_off_its_default_is_in_the_label():
    # the label a group of seeds goes by (report.label, with its settings) names every field that splits a
    # condition, but the size fields (in the run's name) and the depth, told as K
    default = ExitTrainConfig()
    run = dict(model=asdict(default), trained_K=default.n_loops, random_depth=False)
    plain = settings_of(run)
    assert plain == settings_of(dict(run, model=asdict(LoopedGPTConfig())))  # beyond/'s fields at their defaults: unnamed
    for f in fields(ExitTrainConfig):
        if f.name in SIZE and f.name != 'n_loops':
            continue
        value = another(f.name, getattr(default, f.name))
        moved = dict(run, model=dict(run['model'], **{f.name: value}),
                     trained_K=value if f.name == 'n_loops' else run['trained_K'])
        assert settings_of(moved) != plain, f.name
        if f.name not in ('readout', 'loss', 'n_loops'):  # (those are always written, by their value)
            assert f.name in settings_of(moved), f.name
    assert settings_of(dict(run, random_depth=True)) != plain
