"""
Trains a looped GPT with per-loop (or terminal) cross-entropy, on one GPU, a CPU, or with DDP.

    python train.py config/raw_perloop.py                     # the paper's 44M recipe on WikiText-103
    python train.py config/raw_perloop.py config/129m.py      # the 129M shape
    python train.py config/norm_perloop.py config/cpu.py      # the blind spot on a laptop CPU, in minutes
    torchrun --standalone --nproc_per_node=8 train.py config/raw_perloop.py --batch_size=8 --gradient_accumulation_steps=8
    python train.py --help                                    # every setting, with its comment
    python -m beyond.exit_train config/raw_perloop_exit.py    # beyond the paper: exit-aware training (its model class)

Settings are the globals below. Config files and --key=value override them, in order
(configurator.py). Writes out_dir/ckpt.pt and out_dir/log.jsonl; the same numbers as the
log lines, one JSON object per line, for plots.

The helpers take what they read as arguments (bench.py and the tests call them), and
main() runs them top to bottom; nothing here reads a setting from a module global.
"""

import json
import math
import os
import sys
import time
from dataclasses import fields
from types import SimpleNamespace

import numpy as np
import torch
from torch.distributed import ReduceOp, all_reduce, barrier, broadcast, destroy_process_group, init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP

from configurator import UserError, configure, error_line
from data import gather_chunks, load_tokens
from linear_ce import PATHS as LOSS_PATHS
from model import LOSSES, READOUTS, LoopedGPT, LoopedGPTConfig, diagnostics
from report import json_safe, perplexity
from runtime import autocast, compile_errors, compile_failed, peak_flops, resolve_dtype, setup_device, use_compile

# -----------------------------------------------------------------------------
# settings. Defaults: the paper's 44M shape and recipe on WikiText-103 (GPT-2 BPE),
# normalized readout, per-loop CE. config/<condition>.py changes only what differs.
# I/O
out_dir = 'out'               # the run folder: ckpt.pt and log.jsonl
eval_interval = 500           # iterations between validation passes; a checkpoint is written at each
log_interval = 50             # iterations between train log lines (the only host-device syncs)
eval_iters = 40               # validation batches per eval: fixed windows, the same every time (at most the split's worth)
diag_tokens = 2048            # tokens (whole windows of the first validation batch) the per-loop diagnostics run on, in float64
eval_only = False             # evaluate once and exit (with init_from='resume': out_dir's checkpoint)
always_save_checkpoint = True # False: save only when the validation loss improves
init_from = 'scratch'         # 'scratch' | 'resume' (out_dir/ckpt.pt)
# data
data_dir = 'data'             # where prepare.py writes its datasets
dataset = 'wikitext-103'      # a folder in data_dir written by prepare.py
batch_size = 64               # sequences per micro-step (per GPU with DDP)
block_size = 256              # tokens per sequence
gradient_accumulation_steps = 1  # micro-steps per optimizer step, in total: with DDP, a multiple of the GPUs
# model (see LoopedGPTConfig in model.py)
n_layer = 8                   # blocks in the shared stack
n_head = 8                    # attention heads (n_embd a multiple of it)
n_embd = 512                  # d, the width of the residual stream
dropout = 0.1                 # in [0, 1): on the attention probabilities, the MLP output and the embeddings
n_loops = 4                   # K, the loops in training
readout = 'norm'              # 'norm' | 'raw' | 'final_norm'
loss = 'perloop'              # 'perloop' | 'terminal'
norm_penalty = 0.0            # lambda; 0.01 in the paper's penalty runs
interloop_norm = False        # RMSNorm between loops
init_std = 0.0                # 0: PyTorch's default init, as the paper's released code
exit_train = 0.0              # exit-aware training: fraction of tokens frozen after a random loop 1..K-1 (0 = off)
sandwich_norm = False         # the field's scale controls (docs/depth.md): RMSNorm on each sublayer's output,
inject = False                # the embedding added to every loop's input,
damping = False               # a learned contraction sigmoid(a) of the state between loops
# random depth (docs/depth.md; config/random_depth.py): K drawn per iteration, the same on every rank and after a resume
random_depth = False          # K = 1 + Poisson(lambda), lambda log-normal with mean n_loops - 1 (Huginn's draw): mean K = n_loops
depth_sigma = 0.5             # the log-normal's sigma (Huginn's 0.5): the larger, the heavier the tail of deep draws
max_loops = 16                # the cap on a drawn K, and the deepest K evaluated during training with random_depth
bptt = 0                      # truncated backprop: only the last bptt loops run with a graph and are read by the loss (0: all)
loss_path = 'fused'           # the readout loss: 'fused' (linear_ce's chunked one-pass loss) | 'plain' (K logit tensors and F.cross_entropy, fused by inductor under compile)
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
dtype = 'auto'                # 'auto' (bfloat16 on GPUs, and on CPUs with native bf16) | 'float32' | 'bfloat16' | 'float16'
compile = 'auto'              # torch.compile: 'auto' (on for CUDA, off elsewhere) | 'on' | 'off'
seed = 1337                   # seeds the init, the batches and the dropout masks (with rank and iteration)
# -----------------------------------------------------------------------------
SETTINGS = {k: v for k, v in list(globals().items()) if not k.startswith('_') and isinstance(v, (int, float, bool, str))}
CHOICES = {'readout': READOUTS, 'loss': LOSSES, 'init_from': ('scratch', 'resume'), 'lr_decay': ('constant', 'cosine'),
           'dtype': ('auto', 'float32', 'bfloat16', 'float16'), 'compile': ('auto', 'on', 'off'),
           'loss_path': LOSS_PATHS}
MODEL_ARGS = [f.name for f in fields(LoopedGPTConfig)]  # vocab_size comes from the data's meta.json


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


def draw_depth(seed, it, *, mean, cap, sigma):
    """K for iteration `it` of random-depth training: 1 + Poisson(lambda) with lambda log-normal of mean
    mean - 1 (Huginn's draw, Geiping et al. 2025: a Poisson's mean drawn per step gives a heavy tail of
    deep draws, which train the loops past the mean), capped at cap. Drawn from (seed, it) alone, so
    every rank runs the same K (DDP needs one graph shape) and a resumed run draws what it would have."""
    rng = np.random.default_rng([seed, it, 2])
    lam = (mean - 1) * math.exp(sigma * rng.standard_normal() - sigma ** 2 / 2)  # E[lam] = mean - 1
    return int(min(cap, 1 + rng.poisson(lam)))


def seed_step(seed, it, rank):
    """Seeds torch's RNG (dropout) from (seed, rank, iteration), as the batches are: a resumed
    run, on every rank, draws the masks the uninterrupted run would have drawn, with no RNG
    state to save or gather."""
    torch.manual_seed(int(np.random.SeedSequence([seed, rank, it, 1]).generate_state(1)[0]))


def train_batches(data, it, rank, *, seed, n_micro, batch_size, block_size, device):
    """The micro-batches of iteration `it` on this rank: random windows, drawn from an RNG
    seeded by (seed, rank, it). The data stream is a function of the iteration, so a resumed
    run sees exactly the batches the uninterrupted run would have. One vectorised gather
    from the memmap: (n_micro, B, T+1)."""
    rng = np.random.default_rng([seed, rank, it])
    starts = rng.integers(0, len(data) - block_size - 1, size=(n_micro, batch_size))
    return windows(data, starts, block_size, device)


def eval_batches(data, *, eval_iters, batch_size, block_size, device):
    """eval_iters fixed batches of windows spread evenly over the split, and no more batches than
    the split holds windows for (WikiText-103's validation split is 2.7x short of 40 x 64 x 256)."""
    n_batches = max(1, min(eval_iters, (len(data) - 1) // block_size // batch_size))
    starts = np.linspace(0, len(data) - block_size - 1, n_batches * batch_size).astype(np.int64)
    return windows(data, starts.reshape(n_batches, batch_size), block_size, device)


def windows(data, starts, block_size, device):
    chunk = gather_chunks(data, starts, block_size)  # (..., T+1), contiguous
    if device.startswith('cuda'):  # pinned, so the copy is asynchronous (a view would be copied pageable)
        chunk = chunk.pin_memory().to(device, non_blocking=True)
    else:
        chunk = chunk.to(device)
    return chunk[..., :-1], chunk[..., 1:]  # inputs and targets, sliced on the device


@torch.no_grad()
def evaluate(model, val_batches, ctx, n_loops=None, diag_tokens=2048):
    """Validation CE at every K from 1 to n_loops (default: the trained K; one pass: the model run
    with K loops is its readout at loop K), and the per-loop diagnostics on the first diag_tokens
    tokens of the first batch (whole windows, at least one: float64 is slow on many GPUs). ctx:
    the precision context (autocast or nullcontext) the forward passes run in."""
    model.eval()
    xs, ys = val_batches
    K = n_loops or model.config.n_loops
    total = torch.zeros(K, device=xs.device)
    for x, y in zip(xs, ys):
        with ctx:
            total += model.depth_losses(model.hidden_states(x, K)[1:], y).mean(dim=1)
    val_loss = (total / len(xs)).tolist()
    rows = max(1, diag_tokens // xs.size(-1))
    with ctx:
        diag = diagnostics(model, xs[0, :rows], ys[0, :rows], K)
    model.train()
    return dict(val_loss=val_loss, val_ppl=[perplexity(v) for v in val_loss], **diag)


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
    """One optimizer step on the micro-batches xs, ys (n_micro, B, T): forward under ctx (the
    precision context) with n_loops loops (None: the trained K) and truncated backprop through
    the last bptt (0: all), backward through the scaler (a no-op unless float16), clip (grad_clip
    0: off), AdamW. Returns device tensors, not read here (no sync): the loss, and the per-loop
    CE and mean ||H_k||, each averaged over the micro-steps. bench.py times this."""
    n_micro = len(xs)
    loss_sum, ce, h_norm = 0.0, 0.0, 0.0
    for micro in range(n_micro):
        if ddp:  # all-reduce the gradients only at the last micro-step (passed through torch.compile's wrapper to DDP)
            model.require_backward_grad_sync = (micro == n_micro - 1)
        with ctx:
            _, loss, stats = model(xs[micro], ys[micro], n_loops=n_loops, stats=True, bptt=bptt)
            loss = loss / n_micro
        scaler.scale(loss).backward()
        loss_sum = loss_sum + loss.detach()
        ce = ce + stats['ce'] / n_micro
        h_norm = h_norm + stats['h_norm'] / n_micro
    if grad_clip > 0:
        scaler.unscale_(optimizer)
        clip(model, optimizer, grad_clip, folded=not scaler.is_enabled())
    scaler.step(optimizer)
    optimizer.__dict__.pop('grad_scale', None)  # (clip's factor served this step; as the GradScaler removes its own)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    return loss_sum, ce, h_norm


def save_checkpoint(out_dir, raw_model, optimizer, iter_num, best_val_loss, config):
    """out_dir/ckpt.pt, written whole or not at all. The batches and the dropout masks are a
    function of (seed, rank, iteration), so iter_num is all the position there is to save."""
    ckpt = {
        'model_args': {k: getattr(raw_model.config, k) for k in MODEL_ARGS},
        'model': raw_model.state_dict(),      # the uncompiled model: no _orig_mod. prefixes
        'optimizer': optimizer.state_dict(),
        'iter_num': iter_num,
        'best_val_loss': best_val_loss,
        'config': config,
    }
    path = os.path.join(out_dir, 'ckpt.pt')
    torch.save(ckpt, path + '.tmp')
    os.replace(path + '.tmp', path)  # never a half-written ckpt.pt


def log(out_dir, record, line):
    print(line, flush=True)
    with open(os.path.join(out_dir, 'log.jsonl'), 'a') as f:
        f.write(json.dumps(json_safe(record)) + '\n')


def trim_log(out_dir, iter_num):
    """On resume: keep the log up to the checkpoint (train lines through iter_num, evals before
    it), so that no iteration appears twice once the run continues."""
    path = os.path.join(out_dir, 'log.jsonl')
    if not os.path.exists(path):
        return
    with open(path) as f:
        keep = [line for line in f if (r := json.loads(line))['iter'] < iter_num
                or (r['iter'] == iter_num and r['kind'] == 'train')]
    with open(path + '.tmp', 'w') as f:
        f.writelines(keep)
    os.replace(path + '.tmp', path)


def start_log(c, iter_num):
    """out_dir made; its log.jsonl trimmed to the checkpoint on resume, removed for a new run,
    and left as it is for eval_only (which appends its one line)."""
    os.makedirs(c.out_dir, exist_ok=True)
    path = os.path.join(c.out_dir, 'log.jsonl')
    if c.eval_only:
        return
    if c.init_from == 'resume':
        trim_log(c.out_dir, iter_num)
    elif os.path.exists(path):
        os.remove(path)


def fmt(values, spec='.3f'):
    return ' '.join('-' if not math.isfinite(v) else format(v, spec) for v in values)


# -----------------------------------------------------------------------------
# the settings, checked

# the range of every numeric setting: (lowest, highest, whether the lowest is allowed)
AT_LEAST_1 = ('batch_size', 'block_size', 'gradient_accumulation_steps', 'eval_interval', 'log_interval',
              'eval_iters', 'n_layer', 'n_head', 'n_embd', 'n_loops', 'max_loops', 'diag_tokens')
AT_LEAST_0 = ('max_iters', 'warmup_iters', 'weight_decay', 'grad_clip', 'norm_penalty', 'init_std', 'min_lr', 'seed',
              'depth_sigma', 'bptt')
ABOVE_0 = ('learning_rate', 'epochs')
BELOW_1 = ('dropout', 'beta1', 'beta2', 'exit_train')  # in [0, 1)


def check_settings(config):
    """Every check on the settings, in one place: a value that makes no sense is one error line."""
    for key, options in CHOICES.items():
        if config[key] not in options:
            raise UserError(f"setting '{key}' must be one of {', '.join(options)}; got {config[key]!r}")
    for key in AT_LEAST_1:
        if config[key] < 1:
            raise UserError(f"setting '{key}' must be at least 1; got {config[key]!r}")
    for key in AT_LEAST_0:
        if config[key] < 0:
            why = ' (a negative lambda would reward large norms)' if key == 'norm_penalty' else ''
            raise UserError(f"setting '{key}' must be >= 0{why}; got {config[key]!r}")
    for key in ABOVE_0:
        if not config[key] > 0:
            raise UserError(f"setting '{key}' must be > 0; got {config[key]!r}")
    for key in BELOW_1:
        if not 0 <= config[key] < 1:
            raise UserError(f"setting '{key}' must lie in [0, 1); got {config[key]!r}")
    if config['random_depth'] and config['max_loops'] < config['n_loops']:
        raise UserError(f"random_depth draws K with mean n_loops ({config['n_loops']}): max_loops, its cap, must be "
                        f"at least that; got {config['max_loops']}")
    if config['bptt'] and config['exit_train'] > 0:
        raise UserError("exit_train runs every loop with a graph: set bptt=0 with it")
    try:  # what the model itself refuses (e.g. n_embd not a multiple of n_head)
        LoopedGPTConfig(**{k: config[k] for k in MODEL_ARGS if k != 'vocab_size'})
    except ValueError as e:
        raise UserError(str(e))


def setup(argv, settings=SETTINGS, scripts=(__file__,)):
    """The settings: the defaults above, then config files and --key=value, checked. Returns
    a dict, as given (saved in the checkpoint: device and dtype stay 'auto' there).
    bench.py passes its own settings added to these, and its own file first."""
    config = configure(settings, argv, scripts)
    check_settings(config)
    return config


# -----------------------------------------------------------------------------
# the parts of a run, in the order main() takes them

def under_torchrun():
    return int(os.environ.get('RANK', -1)) != -1


def start_process(c):
    """This process's part in the run: (ddp, rank, world_size, device, n_micro), n_micro its
    micro-steps per optimizer step. Under torchrun one process per GPU (NCCL), or per CPU
    process (gloo: how the tests run two ranks); on one device none of the DDP part runs."""
    try:
        device = setup_device(c.device)
    except ValueError as e:
        raise UserError(str(e))
    if not under_torchrun():
        return False, 0, 1, device, c.gradient_accumulation_steps
    rank, world_size = int(os.environ['RANK']), int(os.environ['WORLD_SIZE'])
    if c.gradient_accumulation_steps % world_size:
        raise UserError(f"gradient_accumulation_steps ({c.gradient_accumulation_steps}) must be a "
                         f"multiple of the number of GPUs ({world_size})")
    cuda = device.startswith('cuda')
    if cuda:
        device = f"cuda:{int(os.environ['LOCAL_RANK'])}"
        torch.cuda.set_device(device)
    # device_id binds the NCCL communicator to this rank's GPU up front (no lazy init, no guessing)
    init_process_group(backend='nccl' if cuda else 'gloo', device_id=torch.device(device) if cuda else None)
    return True, rank, world_size, device, c.gradient_accumulation_steps // world_size


def load_data(c):
    """(train tokens, val tokens, meta) of c.dataset, each split long enough for a window."""
    try:
        train_data, meta = load_tokens(os.path.join(c.data_dir, c.dataset), 'train')
        val_data, _ = load_tokens(os.path.join(c.data_dir, c.dataset), 'val')
    except FileNotFoundError as e:
        raise UserError(str(e))
    for name, data in (('train', train_data), ('val', val_data)):
        if len(data) <= c.block_size + 1:
            raise UserError(f"the {name} split of {c.dataset} has {len(data)} tokens, too few for block_size {c.block_size}")
    return train_data, val_data, meta


def build_model(c, meta, device, cls=LoopedGPT):
    """A new model of class cls (LoopedGPT, or a subclass that main() was given), or with
    init_from='resume' out_dir's checkpoint, which must match these settings and this data.
    Returns (the model, the checkpoint or None)."""
    model_args = {k: meta['vocab_size'] if k == 'vocab_size' else getattr(c, k) for k in MODEL_ARGS}
    config = LoopedGPTConfig(**model_args)
    if config.exit_train > 0 and not getattr(cls, 'trains_exits', False):
        raise UserError(f"exit_train={config.exit_train} needs the exit-aware model, which is beyond the paper: "
                        f"run python -m beyond.exit_train with the same arguments")
    if c.init_from == 'scratch':
        return cls(config).to(device), None
    path = os.path.join(c.out_dir, 'ckpt.pt')
    try:
        model, ckpt = cls.from_checkpoint(path, device)
    except (FileNotFoundError, ValueError) as e:
        raise UserError(f"init_from='resume': {e}")
    if ckpt['model_args']['vocab_size'] != meta['vocab_size']:
        raise UserError(f"{path} has vocab {ckpt['model_args']['vocab_size']} but data/{c.dataset} has "
                         f"vocab {meta['vocab_size']} ({meta['tokenizer']}): resume with the data it was trained on")
    differ = [f"{k}={ckpt['model_args'][k]!r} (asked: {v!r})" for k, v in model_args.items()
              if ckpt['model_args'][k] != v]
    if differ:
        raise UserError(f"{path} does not match this config: {', '.join(differ)}")
    return model, ckpt


def wrap_for_training(raw_model, ddp, compile_it, device, random_depth=False):
    """The module train_step runs: DDP around the model first, then torch.compile around
    that, so that dynamo's DDPOptimizer splits the compiled graph at DDP's gradient buckets
    and each bucket's all-reduce overlaps the rest of the backward (compiled first and
    wrapped after, the backward is one graph and every all-reduce waits for its end).
    raw_model itself stays unwrapped and uncompiled, for saving and evaluating.
    random_depth: K changes from step to step, and a compiled model would be compiled again for
    each K; the one loop is compiled instead (model.loop: the same graphs at every loop and K, one
    for each way a loop runs, with or without a graph, as truncated backprop runs them). At a fixed K
    the whole model: at the 44M shape on a CPU its loop alone compiled in 0.35x the time and stepped
    9% slower, as a nested compile region 0.61x and 5% (assets/speed/roofline.md)."""
    model, cfg = raw_model, raw_model.config
    if ddp:
        # parameters a step may not use: between-loop ones at K=1 (one loop has no 'between'), and with
        # random depth the position embedding when truncated backprop leaves loop 1 without a graph
        unused = random_depth or ((cfg.interloop_norm or cfg.damping) and cfg.n_loops == 1)
        model = DDP(model, device_ids=[int(os.environ['LOCAL_RANK'])] if device.startswith('cuda') else None,
                    find_unused_parameters=unused)
    if compile_it and random_depth:
        raw_model.loop = torch.compile(raw_model.loop)  # (an attribute of this object: nothing in the checkpoint)
    elif compile_it:
        model = torch.compile(model)
    return model


def eval_and_save(c, raw_model, optimizer, val_batches, *, ctx, iter_num, best_val_loss, can_save, config):
    """Rank 0's eval: logs it and saves a checkpoint when it is finite (and better, unless
    always_save_checkpoint). Returns (whether the val loss is finite, the best val loss).
    The val loss that decides is the trained K's (with random depth: the mean K's)."""
    K = c.max_loops if c.random_depth else raw_model.config.n_loops
    ev = evaluate(raw_model, val_batches, ctx, K, c.diag_tokens)
    log(c.out_dir, dict(kind='eval', iter=iter_num, **ev),
        f"eval {iter_num}: val loss K=1..{K} {fmt(ev['val_loss'], '.4f')} | "
        f"ppl {fmt(ev['val_ppl'], '.4g')} | |H_k| mean {fmt(ev['norm_mean'], '.1f')} "
        f"p99 {fmt(ev['norm_p99'], '.1f')} | radial {fmt(ev['radial'], '.1e')} | "
        f"angular {fmt(ev['angular'], '.2e')}")
    finite = all(math.isfinite(v) for v in ev['val_loss'])
    val_loss = ev['val_loss'][raw_model.config.n_loops - 1]
    if finite and can_save and (val_loss < best_val_loss or c.always_save_checkpoint):
        best_val_loss = min(best_val_loss, val_loss)
        save_checkpoint(c.out_dir, raw_model, optimizer, iter_num, best_val_loss, config)
        print(f"saved {c.out_dir}/ckpt.pt")
    return finite, best_val_loss


def accumulate(acc, step):
    """Adds one train_step's (loss, per-loop CE, per-loop |H_k|) to acc, device tensors (no sync):
    the loss summed, and per loop (up to len(acc[1])) the sum of the CE read there and how many
    iterations read it, the sum of |H_k| and how many ran loop k (with random depth K varies)."""
    loss, ce, h_norm = step
    K = len(ce)
    acc[0].add_(loss)
    acc[1][:K] += ce.nan_to_num()
    acc[2][:K] += ~ce.isnan()
    acc[3][:K] += h_norm
    acc[4][:K] += 1


def log_train(out_dir, iter_num, acc, *, n_iters, seconds, lr, tokens_per_iter, flops, peak, device):
    """The train line of the last n_iters iterations from acc (accumulate's), read here (the one
    sync per log line); a loop no iteration read has CE NaN ('-'). flops: the iterations' matmul
    FLOPs; peak: the device's FLOP/s for MFU, summed over the ranks (None: no MFU)."""
    loss, ce, h_norm = acc[0] / n_iters, acc[1] / acc[2], acc[3] / acc[4]
    ce, h_norm, loss = ce.tolist(), h_norm.tolist(), loss.item()
    tok_s = tokens_per_iter * n_iters / seconds
    mfu = flops / seconds / peak if peak else None
    mem = torch.cuda.max_memory_allocated(device) / 2**30 if device.startswith('cuda') else None
    ms = 1000 * seconds / n_iters
    log(out_dir, dict(kind='train', iter=iter_num, loss=loss, ce=ce, h_norm=h_norm, lr=lr,
                      ms_per_iter=ms, tok_per_s=tok_s, mfu=mfu, peak_mem_gib=mem),
        f"iter {iter_num}: loss {loss:.4f} | ce {fmt(ce)} | |H_k| {fmt(h_norm, '.1f')} | "
        f"lr {lr:.1e} | {ms:.1f} ms/iter | {tok_s:,.0f} tok/s"
        + (f" | mfu {100 * mfu:.1f}%" if mfu else "") + (f" | {mem:.1f} GiB" if mem else ""))


def non_finite_message(iter_num, out_dir, learning_rate):
    return (f"the loss became non-finite by iteration {iter_num}: stopping. {out_dir}/ckpt.pt (if any) "
            f"is the last good checkpoint and was not touched; try a lower learning_rate (now {learning_rate})")


# -----------------------------------------------------------------------------

def main(argv, model_class=LoopedGPT):
    """A training run from the command line argv. model_class: the model trained, LoopedGPT or a
    subclass (beyond/exit_train.py passes its own): the one seam through which beyond/ trains."""
    config = setup(argv)
    c = SimpleNamespace(**config)  # the settings, read as c.batch_size from here on
    ddp, rank, world_size, device, n_micro = start_process(c)
    master = rank == 0
    dtype = resolve_dtype(c.dtype, device, training=True)
    ctx = autocast(device, dtype)  # the precision every forward pass runs in
    torch.manual_seed(c.seed + rank)

    train_data, val_data, meta = load_data(c)
    tokens_per_iter = n_micro * world_size * c.batch_size * c.block_size
    # max_iters 0: "epochs" of random windows, epochs * train tokens / tokens per step, as the paper's recipe
    max_iters = c.max_iters or math.ceil(c.epochs * len(train_data) / tokens_per_iter)

    raw_model, ckpt = build_model(c, meta, device, model_class)  # raw_model: kept for saving and for evaluating at other K
    raw_model.loss_path = c.loss_path  # how model.readout_loss computes the CE (linear_ce.readout_ce)
    optimizer = make_optimizer(raw_model, learning_rate=c.learning_rate, betas=(c.beta1, c.beta2),
                               weight_decay=c.weight_decay)
    iter_num, best_val_loss = 0, float('inf')
    if ckpt is not None:
        optimizer.load_state_dict(ckpt['optimizer'])
        iter_num, best_val_loss = ckpt['iter_num'], ckpt['best_val_loss']
    ckpt = None  # free memory
    start_iter = iter_num  # nothing new to save until the first step from here
    scaler = torch.amp.GradScaler(torch.device(device).type, enabled=(dtype == 'float16'))
    if master:
        print(f"number of parameters: {raw_model.get_num_params() / 1e6:.2f}M (counted once; the stack runs {c.n_loops}x)")
        print(f"device {device}, {dtype}, {tokens_per_iter:,} tokens per iteration, {max_iters:,} iterations")
        if use_compile(c.compile, device):
            print("compiling the model... (takes a minute)")
    model = wrap_for_training(raw_model, ddp, use_compile(c.compile, device), device, c.random_depth)

    peak = peak_flops(device, dtype)
    peak = peak * world_size if peak else None
    val_batches = eval_batches(val_data, eval_iters=c.eval_iters, batch_size=c.batch_size,
                               block_size=c.block_size, device=device)
    if master:
        start_log(c, iter_num)

    # -------------------------------------------------------------------------
    # the training loop. Per-loop numbers stay on the device as tensors and are read once
    # per log line; `finite` is checked there too, so a NaN costs no sync per step.
    cap = c.max_loops if c.random_depth else c.n_loops  # the deepest K a step can run
    acc = (torch.zeros((), device=device), *(torch.zeros(cap, device=device) for _ in range(4)))
    finite = torch.ones((), dtype=torch.bool, device=device)
    acc_iters, acc_flops, t0 = 0, 0, time.time()
    while True:
        if iter_num % c.eval_interval == 0 or iter_num == max_iters or c.eval_only:
            t_eval = time.time()
            failed = master and not finite.item()
            if master and not failed:
                try:  # (with random depth the first evaluation runs the compiled loop first)
                    ok, best_val_loss = eval_and_save(c, raw_model, optimizer, val_batches, ctx=ctx, iter_num=iter_num,
                                                      best_val_loss=best_val_loss, config=config,
                                                      can_save=not c.eval_only and iter_num > start_iter)
                except compile_errors() as e:
                    raise compile_failed(e, 'the training step')
                failed = not ok
            if ddp:  # rank 0's verdict, to every rank: none is left waiting in an all-reduce
                verdict = torch.tensor([float(failed)], device=device)
                broadcast(verdict, src=0)
                failed = bool(verdict.item())
            if failed:
                raise UserError(non_finite_message(iter_num, c.out_dir, c.learning_rate))
            if c.eval_only:
                break
            t0 += time.time() - t_eval  # the eval is not training time
            if device.startswith('cuda'):
                torch.cuda.reset_peak_memory_stats(device)  # the logged peak is the training step's
        if iter_num >= max_iters:
            break

        lr = get_lr(iter_num, learning_rate=c.learning_rate, min_lr=c.min_lr, warmup_iters=c.warmup_iters,
                    max_iters=max_iters, lr_decay=c.lr_decay)
        for group in optimizer.param_groups:
            group['lr'] = lr
        xs, ys = train_batches(train_data, iter_num, rank, seed=c.seed, n_micro=n_micro, batch_size=c.batch_size,
                               block_size=c.block_size, device=device)
        seed_step(c.seed, iter_num, rank)
        K = draw_depth(c.seed, iter_num, mean=c.n_loops, cap=c.max_loops, sigma=c.depth_sigma) if c.random_depth else None
        try:
            step = train_step(model, optimizer, scaler, xs, ys, ctx=ctx, grad_clip=c.grad_clip, ddp=ddp,
                              n_loops=K, bptt=c.bptt)
        except compile_errors() as e:
            raise compile_failed(e, 'the training step')
        accumulate(acc, step)
        finite &= torch.isfinite(step[0])
        iter_num += 1
        acc_iters += 1
        acc_flops += raw_model.flops_per_token(K, bptt=c.bptt) * tokens_per_iter

        if iter_num % c.log_interval == 0:
            if ddp:  # a NaN on any rank stops every rank at the same line
                flag = finite.float()
                all_reduce(flag, op=ReduceOp.MIN)
                finite = flag.bool()
            if not finite.item():  # the one sync per log line
                raise UserError(non_finite_message(iter_num, c.out_dir, c.learning_rate))
            if master:
                log_train(c.out_dir, iter_num, acc, n_iters=acc_iters, seconds=time.time() - t0, lr=lr,
                          tokens_per_iter=tokens_per_iter, flops=acc_flops, peak=peak, device=device)
            for a in acc:
                a.zero_()
            acc_iters, acc_flops, t0 = 0, 0, time.time()

    if ddp:
        barrier()  # rank 0 may still be evaluating or saving; no rank leaves before it is done
        destroy_process_group()


def cli(model_class=LoopedGPT, script='train.py'):
    """main() on sys.argv, a UserError as one line, and the process's exit (beyond/exit_train.py runs this too)."""
    status = 0
    try:
        main(sys.argv[1:], model_class)
    except UserError as e:
        print(error_line(script, e), file=sys.stderr)
        status = 1
    if under_torchrun():
        # Under torchrun a rank leaves without Python's teardown. PyTorch keeps a DDP model's process
        # group alive past destroy_process_group, and when one of gloo's worker threads frees its last
        # tensor after the interpreter has begun to shut down, the rank aborts ("terminate called
        # without an active exception", pytorch/pytorch#179291; 9 of 260 two-rank runs here).
        # Every file is written and closed by now.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    sys.exit(status)


if __name__ == '__main__':
    cli()
