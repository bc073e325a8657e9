"""
Trains a looped GPT with per-loop (or terminal) cross-entropy, on one GPU, a CPU, or with DDP.

    python train.py config/raw_perloop.py                     # the paper's 44M recipe on WikiText-103
    python train.py config/raw_perloop.py config/129m.py      # the 129M shape
    python train.py config/norm_perloop.py config/cpu.py      # the blind spot on a laptop CPU, in minutes
    torchrun --standalone --nproc_per_node=8 train.py config/raw_perloop.py --batch_size=8 --gradient_accumulation_steps=8
    python train.py --help                                    # every setting, with its comment
    python train.py config/sandwich_perloop.py config/cpu.py  # beyond the paper: a config naming beyond/'s model

Settings are the globals below and every field of the model's config (LoopedGPTConfig in model.py, where each
is documented; a config naming another model_class, a subclass in beyond/, adds that class's fields). Config files
and --key=value override them, in order (configurator.py). Writes out_dir/ckpt.pt and out_dir/log.jsonl (the log
lines' numbers, one JSON object per line, for plots). The helpers take what they read as arguments (beyond/bench.py
and the tests call them), and main() runs them top to bottom; nothing here reads a setting from a module global.
"""

import bisect
import inspect
import math
import os
import sys
import time
from dataclasses import asdict, fields, is_dataclass
from types import SimpleNamespace

import numpy as np
import torch
from torch.distributed import ReduceOp, all_reduce, barrier, broadcast, destroy_process_group
from torch.nn.parallel import DistributedDataParallel as DDP

from configurator import UserError, check_ranges, configure, error_line
from data import Rows, eval_batches, load_splits, train_batches
from depth import deepest, step_depth
from linear_ce import PATHS as LOSS_PATHS
from model import LoopedGPT, diagnostics, named_class
from report import LogSums, eval_line, log, log_train, perplexity, start_log
from runtime import autocast, compile_errors, compile_failed, exit_process, peak_flops, resolve_dtype, start_process, use_compile

# -----------------------------------------------------------------------------
# settings. Defaults: the paper's 44M shape and recipe on WikiText-103 (GPT-2 BPE),
# normalized readout, per-loop CE. config/<condition>.py changes only what differs.
# I/O
out_dir = 'out'               # the run folder: ckpt.pt and log.jsonl
eval_interval = 500           # iterations between validation passes; a checkpoint is written at each
log_interval = 50             # iterations between train log lines (the only host-device syncs)
eval_iters = 40               # validation batches per eval, the same windows each time (at most the split's)
diag_tokens = 2048            # tokens (whole windows of the first val batch) for the diagnostics, in float64
eval_only = False             # evaluate once and exit (with init_from='resume': out_dir's checkpoint)
always_save_checkpoint = True # False: save only when the validation loss improves
init_from = 'scratch'         # 'scratch' | 'resume' (out_dir/ckpt.pt)
# data
data_dir = 'data'             # where prepare.py writes its datasets
dataset = 'wikitext-103'      # a folder in data_dir written by prepare.py
batch_size = 64               # sequences per micro-step (per GPU with DDP), each block_size tokens
gradient_accumulation_steps = 1  # micro-steps per optimizer step, in all: with DDP, a multiple of the GPUs
# the model: every field of LoopedGPTConfig (model.py), listed below, but vocab_size (the data's)
model_class = 'model.LoopedGPT'  # the model, 'module.Class': a subclass in beyond/ adds its fields
loss_path = 'fused'           # the readout loss: 'fused' (linear_ce's chunked one pass) | 'plain'
# optimizer: AdamW with weight decay on every parameter, as the paper's released code
learning_rate = 3e-4          # AdamW's peak learning rate
epochs = 4.0                  # training length in passes over the train tokens (when max_iters = 0)
max_iters = 0                 # optimizer steps; 0: derived from epochs and the size of the train split
weight_decay = 0.01           # AdamW's decoupled weight decay
beta1 = 0.9                   # AdamW's first-moment decay, in [0, 1)
beta2 = 0.999                 # AdamW's second-moment decay, in [0, 1)
grad_clip = 1.0               # max gradient norm; 0 = off
# learning rate schedule: linear warmup, then constant (the paper) or cosine to min_lr
warmup_iters = 0              # iterations of linear warm-up (0 = none)
lr_decay = 'constant'         # 'constant' | 'cosine'
min_lr = 3e-5                 # the end of the cosine
# system
device = 'auto'               # 'auto' (cuda, then mps, then cpu) | 'cpu' | 'cuda' | 'cuda:1' | 'mps'
dtype = 'auto'                # 'auto' (bf16 where native: runtime.py) | 'float32' | 'bfloat16' | 'float16'
compile = 'auto'              # torch.compile: 'auto' (on for CUDA, off elsewhere) | 'on' | 'off'
seed = 1337                   # seeds the init, the batches and the dropout masks (with rank and iteration)
# beyond the paper, off by default: random depth (docs/depth.md); checkpoints, inits (docs/tasks.md)
random_depth = False          # K drawn per step: 1 + Poisson(lambda), lambda log-normal of mean n_loops - 1
depth_sigma = 0.5             # the log-normal's sigma (Huginn's 0.5): the larger, the heavier the deep tail
max_loops = 16                # the cap on a drawn K, and the deepest K evaluated in training (random_depth)
bptt = 0                      # truncated backprop: only the last bptt loops run with a graph (0: all)
depth_draw = 'poisson'        # 'poisson' (Huginn's, above) | 'progressive' (DeepThinking's progressive loss)
select = ''                   # the checkpoint rule's score: '' val loss at the trained K | 'module.function'
keep_checkpoints = False      # also keep every evaluation's checkpoint, as ckpt-<iter>.pt
inits = 1                     # initializations trained one after another in the run, each from a fresh start
stop_score = -1.0             # end the run (inits: no next one) once the kept score is <= this; < 0: never
# -----------------------------------------------------------------------------
OWN = {k: v for k, v in list(globals().items()) if not k.startswith('_') and isinstance(v, (int, float, bool, str))}
# what each setting may be (the model's fields: what LoopedGPTConfig itself accepts); configurator.check_ranges reads it
RANGES = dict(eval_interval='>= 1', log_interval='>= 1', eval_iters='>= 1', diag_tokens='>= 1', batch_size='>= 1',
              gradient_accumulation_steps='>= 1', max_loops='>= 1', depth_sigma='>= 0', bptt='>= 0',
              inits='>= 1', learning_rate='> 0', epochs='> 0', max_iters='>= 0', weight_decay='>= 0', beta1='[0, 1)',
              beta2='[0, 1)', grad_clip='>= 0', warmup_iters='>= 0', min_lr='>= 0', seed='>= 0',
              init_from=('scratch', 'resume'), depth_draw=('poisson', 'progressive'), lr_decay=('constant', 'cosine'),
              dtype=('auto', 'float32', 'bfloat16', 'float16'), compile=('auto', 'on', 'off'), loss_path=LOSS_PATHS)


def model_fields(model_class=LoopedGPT):
    """The fields of model_class's config and their defaults, but vocab_size (the data's meta.json)."""
    return {f.name: f.default for f in fields(model_class.config_class) if f.name != 'vocab_size'}


SETTINGS = {**OWN, **model_fields()}  # every setting of train.py with LoopedGPT, and its default


def class_name(cls):
    """'module.Class', as a config names a model class and the checkpoint records it (a class of a script run as
    python -m beyond.x: that module's name)."""
    spec = getattr(sys.modules.get(cls.__module__), '__spec__', None)
    return f"{spec.name if cls.__module__ == '__main__' and spec else cls.__module__}.{cls.__qualname__}"


def model_class_of(config, default=LoopedGPT):
    """The class the settings' model_class names (default: the class a script was given, by its own name)."""
    if config['model_class'] == class_name(default):
        return default
    try:
        return named_class(config['model_class'])
    except ValueError as e:
        raise UserError(str(e))


def selector(name):
    """The function the select setting names ('' : None, the validation loss decides): function(model, settings) ->
    {name: value}, run at each evaluation in float32 and logged; the checkpoint rule keeps its first value lowest."""
    try:
        return named_class(name, 'select') if name else None
    except ValueError as e:
        raise UserError(str(e))


# -----------------------------------------------------------------------------
# helpers (importable: nothing runs at import)

def get_lr(it, *, learning_rate, min_lr, warmup_iters, max_iters, lr_decay):
    """The learning rate of iteration `it`: a linear warm-up to learning_rate over warmup_iters,
    then constant (the paper) or a cosine from learning_rate down to min_lr at max_iters."""
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    if lr_decay == 'constant':
        return learning_rate
    progress = min(1.0, (it - warmup_iters) / max(1, max_iters - warmup_iters))
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (learning_rate - min_lr)


def seed_step(seed, it, rank):
    """Seeds torch's RNG (dropout) from (seed, rank, iteration), as the batches are: a resumed run, on every rank,
    draws the masks the uninterrupted run would have drawn, with no RNG state to save or gather."""
    torch.manual_seed(int(np.random.SeedSequence([seed, rank, it, 1]).generate_state(1)[0]))


@torch.no_grad()
def evaluate(model, val_batches, ctx, n_loops=None, diag_tokens=2048, select=None, settings=None):
    """Validation CE at every K from 1 to n_loops (default: the trained K; one pass: the model run with K loops is
    its readout at loop K), and the per-loop diagnostics on the first diag_tokens tokens of the first batch (whole
    windows, at least one: float64 is slow on many GPUs), under ctx (the precision context). select: a task's score
    (the select setting's function), run on the model in float32 with the settings; its values under 'select'."""
    model.eval()
    xs, ys = val_batches
    K = n_loops or model.config.n_loops
    total, scored = torch.zeros(K, device=xs.device), 0
    for x, y in zip(xs, ys):
        with ctx:  # (the CE of a target -1, where nothing is scored, is 0: the sum counts only the scored)
            total += model.depth_losses(model.hidden_states(x, K)[1:], y).sum(dim=1)
        scored = scored + (y >= 0).sum()
    val_loss = (total / scored).tolist()
    rows = max(1, diag_tokens // xs.size(-1))
    with ctx:
        diag = diagnostics(model, xs[0, :rows], ys[0, :rows], K)
    scores = dict(select=select(model, settings)) if select else {}
    model.train()
    return dict(val_loss=val_loss, val_ppl=[perplexity(v) for v in val_loss], **diag, **scores)


def make_optimizer(model, *, learning_rate, betas, weight_decay):
    """AdamW, with weight decay on every parameter as the paper's released code; fused on CUDA
    and on the CPU, where it was faster than foreach with the same losses (assets/speed/speed.md)."""
    device_type = next(model.parameters()).device.type
    return torch.optim.AdamW(model.parameters(), lr=learning_rate, betas=betas, weight_decay=weight_decay,
                             fused=device_type in ('cuda', 'cpu'))


def clip(model, optimizer, grad_clip, folded=True):
    """Gradient clipping to a total norm of grad_clip, as clip_grad_norm_: every gradient times
    min(1, grad_clip / (norm + 1e-6)). folded, with fused AdamW: the factor goes to the optimizer
    as its grad_scale, which the fused kernel divides each gradient by as it reads it, so the step
    makes no pass of its own over every gradient (the GradScaler's hook; float16 keeps clip_grad_norm_)."""
    if not (folded and optimizer.defaults.get('fused')):
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        return
    norm = torch.nn.utils.get_total_norm([p.grad for p in model.parameters() if p.grad is not None])
    optimizer.grad_scale = ((norm + 1e-6) / grad_clip).clamp(min=1.0)  # (a tensor: no sync; for the next step only)


def train_step(model, optimizer, scaler, xs, ys, *, ctx, grad_clip, ddp=False, n_loops=None, bptt=0):
    """One optimizer step on the micro-batches xs, ys (n_micro, B, T): forward under ctx (the precision context)
    with n_loops loops (None: the trained K) and truncated backprop through the last bptt (0: all; a model whose
    forward takes bptt: beyond/additions.py's), backward through the scaler (a no-op unless float16), clip
    (grad_clip 0: off), AdamW. Returns device tensors, not read here (no sync): the loss, and the per-loop CE and
    mean ||H_k|| of the forward passes (model.stats), averaged over the micro-steps (beyond/bench.py times this)."""
    n_micro = len(xs)
    raw = model.module if ddp else model  # (whose forward leaves the stats; a compiled model passes them through)
    loss_sum, ce, h_norm = 0.0, 0.0, 0.0
    for micro in range(n_micro):
        if ddp:  # all-reduce the gradients only at the last micro-step (passed through torch.compile's wrapper to DDP)
            model.require_backward_grad_sync = (micro == n_micro - 1)
        with ctx:
            truncated = dict(bptt=bptt) if bptt else {}
            _, loss = model(xs[micro], ys[micro], n_loops=n_loops, **truncated)
            loss = loss / n_micro
        scaler.scale(loss).backward()
        loss_sum = loss_sum + loss.detach()
        ce = ce + raw.stats['ce'] / n_micro
        h_norm = h_norm + raw.stats['h_norm'] / n_micro
    if grad_clip > 0:
        scaler.unscale_(optimizer)
        clip(model, optimizer, grad_clip, folded=not scaler.is_enabled())
    scaler.step(optimizer)
    optimizer.__dict__.pop('grad_scale', None)  # (clip's factor served this step; as the GradScaler removes its own)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    return loss_sum, ce, h_norm


def save_checkpoint(out_dir, raw_model, optimizer, iter_num, best_val_loss, config, name='ckpt.pt'):
    """out_dir/name (ckpt.pt), written whole or not at all. The batches and the dropout masks are a
    function of (seed, rank, iteration), so iter_num is all the position there is to save."""
    ckpt = {'model_class': class_name(type(raw_model)),  # the class LoopedGPT.from_checkpoint rebuilds
            'model_args': asdict(raw_model.config), 'model': raw_model.state_dict(),  # (uncompiled: no _orig_mod.)
            'optimizer': optimizer.state_dict(), 'iter_num': iter_num, 'best_val_loss': best_val_loss, 'config': config}
    path = os.path.join(out_dir, name)
    torch.save(ckpt, path + '.tmp')
    os.replace(path + '.tmp', path)  # never a half-written ckpt.pt


# -----------------------------------------------------------------------------
# the settings, checked

def check_settings(config, model_class=LoopedGPT):
    """Every check on the settings, in one place: a value that makes no sense is one error line."""
    check_ranges(config, RANGES)
    selector(config['select'])  # (a name that cannot be loaded: one line, before any data is read)
    if config['random_depth'] and config['max_loops'] < config['n_loops']:
        raise UserError(f"random_depth draws K with mean n_loops ({config['n_loops']}): max_loops, its cap, must be "
                        f"at least that; got {config['max_loops']}")
    try:  # what the model itself refuses (e.g. n_embd not a multiple of n_head)
        model_class.config_class(**{k: config[k] for k in model_fields(model_class)})
    except ValueError as e:
        raise UserError(str(e))
    progressive = config['random_depth'] and config['depth_draw'] == 'progressive'
    if (config['bptt'] or progressive) and 'bptt' not in inspect.signature(model_class.forward).parameters:
        what = 'the progressive draw' if progressive else f"bptt={config['bptt']}"
        raise UserError(f"{what} trains with truncated backprop, which {config['model_class']} does not (it runs every "
                        "loop with a graph): beyond.additions.FieldGPT does (config/random_depth.py names it)")


def setup(argv, settings=None, scripts=(__file__,), model_class=LoopedGPT):
    """The settings: the defaults above and model_class's fields (and those of the class a config names instead),
    then config files and --key=value, checked. Returns a dict, as given (saved in the checkpoint: device and dtype
    stay 'auto' there). beyond/bench.py passes its own settings added to these, and its own file first."""
    settings = {**(settings or {**OWN, **model_fields(model_class)}), 'model_class': class_name(model_class)}
    configs = [c for c in reversed(model_class.config_class.__mro__) if is_dataclass(c)]  # (for --help)
    config = configure(settings, argv, [*scripts, *configs])
    check_settings(config, model_class_of(config, model_class))
    return config


# -----------------------------------------------------------------------------
# the parts of a run, in the order main() takes them

def build_model(c, meta, device, cls=None):
    """A new model of class cls (default: the class the settings name, model_class), or with init_from='resume'
    out_dir's checkpoint, which must match these settings and this data. Returns (the model, the checkpoint or None)."""
    cls = cls or model_class_of(vars(c))
    model_args = {**{k: getattr(c, k) for k in model_fields(cls)}, 'vocab_size': meta['vocab_size']}
    config = cls.config_class(**model_args)
    if c.init_from == 'scratch':
        return cls(config).to(device), None
    path = os.path.join(c.out_dir, 'ckpt.pt')
    try:
        model, ckpt = cls.from_checkpoint(path, device)
    except (FileNotFoundError, ValueError) as e:
        raise UserError(f"init_from='resume': {e}")
    if class_name(type(model)) != class_name(cls):
        raise UserError(f"{path} holds a {class_name(type(model))}, not the {class_name(cls)} asked for (model_class)")
    if ckpt['model_args']['vocab_size'] != meta['vocab_size']:
        raise UserError(f"{path} has vocab {ckpt['model_args']['vocab_size']} but data/{c.dataset} has "
                         f"vocab {meta['vocab_size']} ({meta['tokenizer']}): resume with the data it was trained on")
    differ = [f"{k}={ckpt['model_args'].get(k)!r} (asked: {v!r})" for k, v in model_args.items()
              if ckpt['model_args'].get(k) != v]
    if differ:
        raise UserError(f"{path} does not match this config: {', '.join(differ)}")
    return model, ckpt


def wrap_for_training(raw_model, ddp, compile_it, device, random_depth=False):
    """The module train_step runs: DDP around the model first, then torch.compile around that, so that dynamo's
    DDPOptimizer splits the compiled graph at DDP's gradient buckets and each bucket's all-reduce overlaps the rest
    of the backward (compiled first and wrapped after, the backward is one graph and every all-reduce waits for its
    end). raw_model itself stays unwrapped and uncompiled, for saving and evaluating. random_depth: K changes each
    step, so the one loop is compiled (model.loop: the same graphs at every K, one for each way a loop runs, with or
    without a graph), not the whole model, which would compile again for each K; at a fixed K the whole model, slower
    to compile and faster per step than its loop alone (assets/speed/roofline.md)."""
    model = raw_model
    if ddp:
        model = DDP(model, device_ids=[int(os.environ['LOCAL_RANK'])] if device.startswith('cuda') else None,
                    find_unused_parameters=raw_model.may_skip_parameters(random_depth))
    if compile_it and random_depth:
        raw_model.loop = torch.compile(raw_model.loop)  # (an attribute of this object: nothing in the checkpoint)
    elif compile_it:
        model = torch.compile(model)
    return model


def eval_and_save(c, raw_model, optimizer, val_batches, *, ctx, iter_num, best_val_loss, can_save, select=None):
    """Rank 0's eval: logs it and saves a checkpoint when it is finite (and better, unless always_save_checkpoint).
    Returns (whether the val loss is finite, the best score). The score that decides is the val loss at the trained
    K (with random depth: the mean K's), or the first value of select's (the select setting's function), if any."""
    ev = evaluate(raw_model, val_batches, ctx, deepest(c), c.diag_tokens, select, vars(c))
    log(c.out_dir, dict(kind='eval', iter=iter_num, **ev), eval_line(iter_num, ev))
    finite = all(math.isfinite(v) for v in ev['val_loss'])
    val_loss = next(iter(ev['select'].values())) if select else ev['val_loss'][raw_model.config.n_loops - 1]
    if finite and can_save and (val_loss < best_val_loss or c.always_save_checkpoint):
        best_val_loss = min(best_val_loss, val_loss)
        save_checkpoint(c.out_dir, raw_model, optimizer, iter_num, best_val_loss, vars(c))
        print(f"saved {c.out_dir}/ckpt.pt")
    if finite and can_save and c.keep_checkpoints:
        save_checkpoint(c.out_dir, raw_model, optimizer, iter_num, best_val_loss, vars(c), f'ckpt-{iter_num}.pt')
    return finite, best_val_loss


def init_starts(max_iters, inits):
    """The iteration each of the run's inits initializations starts at, and max_iters: [0, .., max_iters], the
    iterations cut as evenly as whole steps allow."""
    if inits > max_iters:
        raise UserError(f"inits={inits} initializations need at least as many iterations; the run has {max_iters}")
    return [j * max_iters // inits for j in range(inits)] + [max_iters]


def fresh_start(raw_model, optimizer, seed, init):
    """inits > 1: raw_model at a new initialization, seeded by (seed, init) alike on every rank, and the
    optimizer's moments cleared: the run's next training starts as a run of its own would."""
    torch.manual_seed(int(np.random.SeedSequence([seed, init, 2]).generate_state(1)[0]))
    raw_model.load_state_dict(type(raw_model)(raw_model.config).state_dict())
    optimizer.state.clear()


def non_finite_message(iter_num, out_dir, learning_rate):
    return (f"the loss became non-finite by iteration {iter_num}: stopping. {out_dir}/ckpt.pt (if any) "
            f"is the last good checkpoint and was not touched; try a lower learning_rate (now {learning_rate})")


# -----------------------------------------------------------------------------

def main(argv, model_class=LoopedGPT, scripts=(__file__,)):
    """A training run from the command line argv. model_class: the default of the model_class setting (a
    subclass: python -m beyond.exit_train's entry point; a config can name another)."""
    c = SimpleNamespace(**setup(argv, scripts=scripts, model_class=model_class))  # the settings: c.batch_size, ...
    model_class = model_class_of(vars(c), model_class)
    select = selector(c.select)  # the checkpoint rule's score (None: the val loss)
    ddp, rank, world_size, device, n_micro = start_process(c.device, c.gradient_accumulation_steps)
    master = rank == 0
    dtype = resolve_dtype(c.dtype, device, training=True)
    ctx = autocast(device, dtype)  # the precision every forward pass runs in
    torch.manual_seed(c.seed + rank)

    train_data, val_data, meta = load_splits(c.data_dir, c.dataset, c.block_size)
    # a task in rows (data.Rows: beyond/parity.py) is read a whole row at a time: its sequences are the rows
    seq_len, n_train = (train_data.x.shape[1], train_data.x.size) if isinstance(train_data, Rows) else (c.block_size, len(train_data))
    tokens_per_iter = n_micro * world_size * c.batch_size * seq_len
    # max_iters 0: "epochs" of random windows, epochs * train tokens / tokens per step, as the paper's recipe
    max_iters = c.max_iters or math.ceil(c.epochs * n_train / tokens_per_iter)
    starts = init_starts(max_iters, c.inits)  # where each initialization begins (inits > 1: config/parity.py)

    raw_model, ckpt = build_model(c, meta, device, model_class)  # raw_model: kept for saving and for evaluating at other K
    longest = max(val_data.x.shape[1], seq_len) if isinstance(train_data, Rows) else seq_len
    if longest > getattr(raw_model, 'max_length', c.block_size):  # (before any training; beyond/'s NoPE reads any length)
        raise UserError(f"{c.dataset}'s rows are up to {longest} tokens, more than block_size {c.block_size} (the "
                        "positions learned): raise block_size, or positions='none' (beyond.additions.FieldGPT)")
    raw_model.loss_path = c.loss_path  # how model.readout_loss computes the CE (linear_ce.linear_cross_entropy or not)
    optimizer = make_optimizer(raw_model, learning_rate=c.learning_rate, betas=(c.beta1, c.beta2),
                               weight_decay=c.weight_decay)
    iter_num, best_val_loss = 0, float('inf')
    if ckpt is not None:
        optimizer.load_state_dict(ckpt['optimizer'])
        iter_num, best_val_loss = ckpt['iter_num'], ckpt['best_val_loss']
    ckpt = None  # free memory
    start_iter = iter_num  # nothing new to save until the first step from here
    scaler = torch.amp.GradScaler(torch.device(device).type, enabled=(dtype == 'float16'))
    compiled = use_compile(c.compile, device)
    if master:
        print(f"number of parameters: {raw_model.get_num_params() / 1e6:.2f}M (counted once; the stack runs {c.n_loops}x)")
        print(f"device {device}, {dtype}, {tokens_per_iter:,} tokens per iteration, {max_iters:,} iterations")
    model = wrap_for_training(raw_model, ddp, compiled, device, c.random_depth)

    peak = peak_flops(device, dtype)
    peak = peak * world_size if peak else None
    val_batches = eval_batches(val_data, eval_iters=c.eval_iters, batch_size=c.batch_size,
                               block_size=c.block_size, device=device)
    if master:
        start_log(c, iter_num)

    # the training loop: per-loop numbers stay on the device, read (and `finite` checked) once per log line
    sums = LogSums(deepest(c), device)  # what the next train line averages
    finite = torch.ones((), dtype=torch.bool, device=device)
    t0 = time.time()
    while True:
        if iter_num % c.eval_interval == 0 or iter_num in starts or c.eval_only:  # (each initialization's end too)
            t_eval = time.time()
            failed = master and not finite.item()
            if master and not failed:
                try:  # (with random depth the first evaluation runs the compiled loop first)
                    ok, best_val_loss = eval_and_save(c, raw_model, optimizer, val_batches, ctx=ctx, iter_num=iter_num,
                                                      best_val_loss=best_val_loss, select=select,
                                                      can_save=not c.eval_only and iter_num > start_iter)
                except compile_errors() as e:
                    raise compile_failed(e, 'the training step')
                failed = not ok
            reached = master and best_val_loss <= c.stop_score  # (failed: raised below)
            if ddp:  # rank 0's verdict, to every rank: none is left waiting in an all-reduce
                verdict = torch.tensor([float(failed), float(reached)], device=device)
                broadcast(verdict, src=0)
                failed, reached = (bool(v) for v in verdict.tolist())
            if failed:
                raise UserError(non_finite_message(iter_num, c.out_dir, c.learning_rate))
            if reached and master:
                print(f"iteration {iter_num}: the kept score {best_val_loss:.4g} is <= stop_score {c.stop_score}: "
                      "the run ends here")
            if c.eval_only or reached:
                break
            t0 += time.time() - t_eval  # the eval is not training time
            if device.startswith('cuda'):
                torch.cuda.reset_peak_memory_stats(device)  # the logged peak is the training step's
        if iter_num >= max_iters:
            break

        init = bisect.bisect_right(starts, iter_num) - 1  # this iteration's initialization
        if iter_num == starts[init] > 0:  # (evaluated above: the last one's end)
            fresh_start(raw_model, optimizer, c.seed, init)
            if master:
                print(f"initialization {init + 1} of {c.inits}: a fresh start at iteration {iter_num}")
        lr = get_lr(iter_num - starts[init], learning_rate=c.learning_rate, min_lr=c.min_lr, warmup_iters=c.warmup_iters,
                    max_iters=starts[init + 1] - starts[init], lr_decay=c.lr_decay)
        for group in optimizer.param_groups:
            group['lr'] = lr
        xs, ys = train_batches(train_data, iter_num, rank, seed=c.seed, n_micro=n_micro, batch_size=c.batch_size,
                               block_size=c.block_size, device=device)
        seed_step(c.seed, iter_num, rank)
        K, bptt = step_depth(c, iter_num)  # (None, c.bptt): the trained K; with random_depth, K drawn (depth.py)
        try:
            loss, ce, h_norm = train_step(model, optimizer, scaler, xs, ys, ctx=ctx, grad_clip=c.grad_clip, ddp=ddp,
                                          n_loops=K, bptt=bptt)
        except compile_errors() as e:
            raise compile_failed(e, 'the training step')
        sums.add(loss, ce, h_norm, flops=raw_model.flops_per_token(K, T=seq_len, backward_loops=bptt) * tokens_per_iter)
        finite &= torch.isfinite(loss)
        iter_num += 1
        if compiled and iter_num == start_iter + 1:  # the first step compiles: a line of its own, not the log's speed
            loss.item()
            if master:
                print(f"compiled the training step: the first step took {time.time() - t0:.1f} s", flush=True)
            sums, t0 = LogSums(deepest(c), device), time.time()

        if iter_num % c.log_interval == 0 and sums.iters:
            if ddp:  # a NaN on any rank stops every rank at the same line
                flag = finite.float()
                all_reduce(flag, op=ReduceOp.MIN)
                finite = flag.bool()
            if not finite.item():  # the one sync per log line
                raise UserError(non_finite_message(iter_num, c.out_dir, c.learning_rate))
            if master:
                log_train(c.out_dir, iter_num, sums, seconds=time.time() - t0, lr=lr, tokens_per_iter=tokens_per_iter,
                          peak=peak, device=device)
            sums, t0 = LogSums(deepest(c), device), time.time()

    if ddp:
        barrier()  # rank 0 may still be evaluating or saving; no rank leaves before it is done
        destroy_process_group()
        exit_process(0)  # here, while the DDP model is still alive: freeing it can hang (runtime.exit_process)


def cli(model_class=LoopedGPT, script='train.py'):
    """main() on sys.argv, a UserError as one line, and the process's exit (beyond/ runs it with its own class)."""
    status = 0
    try:
        running = os.path.abspath(sys.argv[0])  # (python -m beyond.x: its own file, for --help's usage line)
        main(sys.argv[1:], model_class, scripts=tuple(dict.fromkeys([running, os.path.abspath(__file__)])))
    except UserError as e:
        print(error_line(script, e), file=sys.stderr)
        status = 1
    exit_process(status)


if __name__ == '__main__':
    cli()
