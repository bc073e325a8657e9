"""
Cross-entropy of a linear head without ever holding the full logits: the fused linear
cross-entropy of Liger Kernel and Cut Cross-Entropy, in plain PyTorch (no Triton).

    python -c "import torch; from linear_ce import linear_cross_entropy as f; print(f(torch.randn(8, 4), torch.randn(10, 4), torch.arange(8))[0])"

The tokens are taken in chunks. For each chunk the forward pass computes the logits, the
loss, and at once the loss's gradients with respect to the inputs and the head weight;
then the chunk's logits are dropped. Backward only scales the saved gradients. So memory
is O(chunk x vocab) instead of O(tokens x vocab), and nothing is recomputed: the plain
path (logits, then F.cross_entropy) with the logits recomputed in backward to save memory
runs the vocabulary-sized matmul four times per loop; this runs it three times.

model.py reads every loop out through this one function (LoopedGPT.readout_loss).
"""

import torch
from torch.nn import functional as F

CHUNK_BYTES = 256 * 2**20  # float32 logits per chunk: 256 MiB (1,335 tokens of GPT-2's 50,257 symbols)
MIN_CHUNK = 256           # rows; fewer makes the head matmul slow on a CPU


def chunk_rows(n_rows, vocab_size):
    """Rows per chunk: CHUNK_BYTES of float32 logits, at least MIN_CHUNK rows (all rows when few)."""
    return min(n_rows, max(MIN_CHUNK, CHUNK_BYTES // (4 * vocab_size)))


def _chunk_ce(x, weight, targets):
    """Per-row CE of one chunk, float32 at least (rows whose target is -1 are ignored: CE 0),
    and the chunk's logits (n, V) in the matmul's dtype."""
    logits = F.linear(x, weight)  # (n, V), in the autocast dtype if one is on
    # log_softmax and softmax, not logsumexp and exp: on the CPU, exp of the very negative
    # logits that the default init gives runs 10x slower than the softmax kernels
    logp = torch.log_softmax(logits, dim=-1, dtype=torch.promote_types(logits.dtype, torch.float32))
    ce = -logp.gather(1, targets.clamp(min=0)[:, None]).squeeze(1)
    return torch.where(targets >= 0, ce, 0.0), logits


class LinearCrossEntropy(torch.autograd.Function):
    """sum over valid rows of CE(x_i @ weight.T, targets_i), and each row's CE (detached)."""

    @staticmethod
    def forward(ctx, x, weight, targets, chunk):
        need_x, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        ctx.w_dtype = weight.dtype
        ce = torch.empty(x.size(0), dtype=torch.promote_types(x.dtype, torch.float32), device=x.device)
        grad_x = torch.empty_like(x) if need_x else None
        grad_w = torch.zeros(weight.shape, dtype=torch.promote_types(weight.dtype, torch.float32),
                             device=weight.device) if need_w else None
        for i in range(0, x.size(0), chunk):
            xc, tc = x[i:i + chunk], targets[i:i + chunk]
            ce[i:i + chunk], logits = _chunk_ce(xc, weight, tc)
            # dCE/dlogits = softmax - onehot(target), formed in float32 (in bf16, p - 1 for a token
            # predicted with p = 0.99 is 20% off, and 0 above p = 0.998), then cast to the matmul's
            # dtype. Ignored rows are zeroed in the (n, C) operands below, not in this (n, V) one.
            g = torch.softmax(logits, dim=-1, dtype=torch.promote_types(logits.dtype, torch.float32))
            rows = torch.arange(g.size(0), device=g.device)
            g.index_put_((rows, tc.clamp(min=0)), torch.full_like(rows, -1, dtype=g.dtype), accumulate=True)
            g = g.to(logits.dtype)
            valid = (tc >= 0)[:, None]
            if need_x:
                grad_x[i:i + chunk] = (g @ weight.to(g.dtype)) * valid     # (n, C)
            if need_w:
                grad_w.add_(g.t() @ (xc * valid).to(g.dtype))           # (V, C), summed in float32 at least
        ctx.save_for_backward(grad_x, grad_w)
        ctx.mark_non_differentiable(ce)
        return ce.sum(), ce

    @staticmethod
    def backward(ctx, grad_loss, grad_ce):
        grad_x, grad_w = ctx.saved_tensors
        return (grad_x * grad_loss.to(grad_x.dtype) if grad_x is not None else None,
                (grad_w * grad_loss).to(ctx.w_dtype) if grad_w is not None else None, None, None)


def linear_cross_entropy(x, weight, targets, chunk=None):
    """x: (N, C) inputs of the head, weight: (V, C), targets: (N,) int64 (-1 = ignore).
    Returns (sum of the rows' CE, a differentiable scalar; each row's CE (N,), detached).
    Without gradients (eval) the same chunks are computed and no gradient is made."""
    chunk = chunk or chunk_rows(x.size(0), weight.size(0))
    if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad):
        return LinearCrossEntropy.apply(x, weight, targets, chunk)
    ce = torch.cat([_chunk_ce(x[i:i + chunk], weight, targets[i:i + chunk])[0] for i in range(0, x.size(0), chunk)])
    return ce.sum(), ce
