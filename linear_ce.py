"""
Cross-entropy of a linear head without ever holding the full logits: the fused linear
cross-entropy of Liger Kernel and Cut Cross-Entropy, in plain PyTorch (no Triton).

    python -c "import torch; from linear_ce import linear_cross_entropy as f; print(f(torch.randn(8, 4), torch.randn(10, 4), torch.arange(8))[0])"

The tokens are taken in chunks. For each chunk the forward pass computes the logits, and
in one pass over them the softmax, which gives both the loss and its gradient:
CE = logsumexp - target logit, with logsumexp = max + log(sum exp(z - max)) and the sum
read off the softmax itself (its largest entry is exp(0) / sum); dCE/dlogits = softmax -
onehot(target), formed in place. Then the gradients with respect to the inputs and the head
weight are made at once and the chunk's logits are dropped. Backward only scales the saved
gradients. So memory is O(chunk x vocab) instead of O(tokens x vocab), and nothing is
recomputed: the plain path (logits, then F.cross_entropy) with the logits recomputed in
backward to save memory runs the vocabulary-sized matmul four times per loop; this runs it
three times.

model.readout_loss takes this path ('fused') or the plain one beside it ('plain': the logits
materialised and F.cross_entropy, which inductor fuses itself under torch.compile), as the
model's `loss_path` attribute says (train.py sets it from its loss_path setting).
"""

import torch
from torch.nn import functional as F

PATHS = ('fused', 'plain')

# float32 logits per chunk. On a CPU the chunk's buffers are reused from chunk to chunk and
# 256 MiB (1,335 rows of GPT-2's 50,257 symbols) measured as fast as any size (assets/speed);
# on a GPU chunks are larger (fewer grad_w read-modify-writes, fewer kernels unrolled under
# compile) and a multiple of 128 rows.
CHUNK_BYTES = {'cpu': 256 * 2**20, 'cuda': 2**30}
MIN_CHUNK = 256  # rows; fewer makes the head matmul slow on a CPU


def chunk_rows(n_rows, vocab_size, device_type='cpu'):
    """Rows per chunk: CHUNK_BYTES of float32 logits for the device, at least MIN_CHUNK rows
    (all rows when few); on a GPU, a multiple of 128 rows."""
    rows = max(MIN_CHUNK, CHUNK_BYTES.get(device_type, CHUNK_BYTES['cpu']) // (4 * vocab_size))
    if device_type != 'cpu':
        rows = rows // 128 * 128
    return min(n_rows, rows)


def _dtypes(x, weight):
    """(dtype of the logits' matmul, dtype of the gradient's two matmuls). Under autocast the
    matmuls run in its dtype, as F.linear would; the gradient's in the same, except under
    float16: dCE/dlogits is made here in the forward pass, before any loss scale multiplies
    it, so in float16 its small probabilities (below ~6e-8) would flush to zero and the
    GradScaler could never bring them back; there the gradient's matmuls run in float32."""
    device_type = x.device.type
    if torch.is_autocast_enabled(device_type):
        mm = torch.get_autocast_dtype(device_type)
    else:
        mm = torch.promote_types(x.dtype, weight.dtype)
    return mm, (torch.float32 if mm == torch.float16 else mm)


def _chunk_ce(x, weight, targets):
    """Per-row CE of one chunk, float32 at least (rows whose target is -1 are ignored: CE 0)."""
    logits = F.linear(x, weight)
    logp = torch.log_softmax(logits, dim=-1, dtype=torch.promote_types(logits.dtype, torch.float32))
    ce = -logp.gather(1, targets.clamp(min=0)[:, None]).squeeze(1)
    return torch.where(targets >= 0, ce, 0.0)


def _softmax_grad_eager(z, t, buf):
    """CE per row and dCE/dz = softmax(z) - onehot(t) from the logits z (n, V), both in float32 or
    z's dtype if wider (float64: the diagnostics), with no buffer beyond z and buf (that dtype, z's
    shape, or None when z is in it: then z is overwritten). Returns (ce, g), g buf or z itself.
    Through the softmax kernel, not exp: on the CPU, exp of the very negative logits that the
    default init gives (a saturated softmax) ran 10x slower than the softmax kernel, which has
    its own exp (assets/speed/speed.md)."""
    tc = t.clamp(min=0)[:, None]
    z_t = z.gather(1, tc).squeeze(1).to(torch.promote_types(z.dtype, torch.float32))
    if buf is None:
        g = z
    else:
        g = buf[:z.size(0)]
        g.copy_(z)
    m = g.amax(-1)
    torch.ops.aten._softmax.out(g, -1, False, out=g)  # in place, row by row
    # the row's largest probability is exp(0) / sum, so log(sum) = -log(max p): one cheap read
    ce = (m - z_t) - g.amax(-1).log()
    g.scatter_add_(1, tc, torch.full(tc.shape, -1.0, dtype=g.dtype, device=g.device))
    return ce, g


def _softmax_grad_compiled(z, t):
    """The same as _softmax_grad_eager in the form inductor fuses: one reduction over the
    row and one pointwise kernel that writes g (the onehot is an iota compare, not a scatter)."""
    zf = z.to(torch.promote_types(z.dtype, torch.float32))
    m = zf.amax(-1, keepdim=True)
    e = torch.exp(zf - m)
    s = e.sum(-1, keepdim=True)
    tc = t.clamp(min=0)[:, None]
    ce = (m + s.log() - zf.gather(1, tc)).squeeze(1)
    onehot = torch.arange(z.size(1), device=z.device)[None, :] == tc
    return ce, e / s - onehot.to(zf.dtype)


class LinearCrossEntropy(torch.autograd.Function):
    """sum over valid rows of CE(x_i @ weight.T, targets_i), and each row's CE (detached)."""

    @staticmethod
    def forward(ctx, x, weight, targets, chunk):
        need_x, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        ctx.w_dtype = weight.dtype
        mm_dtype, grad_dtype = _dtypes(x, weight)
        compiling = torch.compiler.is_compiling()
        N, V = x.size(0), weight.size(0)
        ce = torch.empty(N, dtype=torch.promote_types(x.dtype, torch.float32), device=x.device)
        grad_x = torch.empty_like(x) if need_x else None
        w_wide = torch.promote_types(weight.dtype, torch.float32)
        grad_w = None  # (V, C) in w_wide: the first chunk's product, the others added to it
        with torch.autocast(x.device.type, enabled=False):  # the dtypes are chosen here, explicitly
            w_mm = weight.to(mm_dtype)  # cast once, not per chunk
            w_g = w_mm if grad_dtype == mm_dtype else weight.to(grad_dtype)
            # eager: one (chunk, V) buffer for g, float32 (or the logits' dtype if wider), when the
            # logits are in another dtype, reused
            g_dtype = torch.promote_types(mm_dtype, torch.float32)
            buf = None if compiling or mm_dtype == g_dtype else \
                torch.empty(min(chunk, N), V, dtype=g_dtype, device=x.device)
            for i in range(0, N, chunk):
                xc, tc = x[i:i + chunk], targets[i:i + chunk]
                logits = F.linear(xc.to(mm_dtype), w_mm)  # (n, V)
                if compiling:
                    ce[i:i + chunk], g = _softmax_grad_compiled(logits, tc)
                else:
                    ce[i:i + chunk], g = _softmax_grad_eager(logits, tc, buf)
                # dCE/dlogits formed in float32 (in bf16, p - 1 for a token predicted with p = 0.99
                # is 20% off, and 0 above p = 0.998), then cast to the gradient matmuls' dtype, into
                # the logits' own storage where the dtypes match. Ignored rows are zeroed in the
                # (n, C) operands below, not in this (n, V) one.
                if grad_dtype != g.dtype:
                    g = logits.copy_(g) if (not compiling and logits.dtype == grad_dtype) else g.to(grad_dtype)
                valid = (tc >= 0)[:, None]
                if need_x:
                    grad_x[i:i + chunk] = (g @ w_g) * valid                   # (n, C)
                if need_w:
                    xv = (xc * valid).to(grad_dtype)
                    if grad_w is None:
                        grad_w = (g.t() @ xv).to(w_wide)                     # (V, C)
                    elif grad_w.dtype == grad_dtype:
                        grad_w.addmm_(g.t(), xv)                             # in place
                    else:
                        grad_w.add_(g.t() @ xv)                              # summed in float32
            ce = torch.where(targets >= 0, ce, 0.0)
        ctx.save_for_backward(grad_x, grad_w)
        ctx.used = False
        ctx.mark_non_differentiable(ce)
        return ce.sum(), ce

    @staticmethod
    def backward(ctx, grad_loss, grad_ce):
        # the saved gradients are scaled in place: no second (V, C) buffer, the largest tensor of the
        # step besides the weight itself; so they serve one backward (retain_graph would reuse scaled ones)
        if ctx.used:
            raise RuntimeError("LinearCrossEntropy's backward ran twice (retain_graph): it scales its saved "
                               "gradients in place, so it serves one backward")
        ctx.used = True
        grad_x, grad_w = ctx.saved_tensors
        # (grad_loss kept in its dtype, float32 at least: a bf16 grad_x is rounded once, after the product;
        # a grad_loss rounded to bf16 first, 1/3 -> 0.334, made every gradient 0.2% too large)
        return (grad_x.mul_(grad_loss) if grad_x is not None else None,
                grad_w.mul_(grad_loss).to(ctx.w_dtype) if grad_w is not None else None, None, None)


def linear_cross_entropy(x, weight, targets, chunk=None):
    """x: (N, C) inputs of the head, weight: (V, C), targets: (N,) int64 (-1 = ignore).
    Returns (sum of the rows' CE, a differentiable scalar; each row's CE (N,), detached).
    Without gradients (eval) the same chunks are computed and no gradient is made."""
    chunk = chunk or chunk_rows(x.size(0), weight.size(0), x.device.type)
    if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad):
        return LinearCrossEntropy.apply(x, weight, targets, chunk)
    ce = torch.cat([_chunk_ce(x[i:i + chunk], weight, targets[i:i + chunk]) for i in range(0, x.size(0), chunk)])
    return ce.sum(), ce
