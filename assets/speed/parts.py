"""
The parts of a training step beyond its matmuls, timed alone on this machine (roofline.md): attention
in float32 and bf16 with and without dropout on its probabilities (the paper's layer drops them, which
takes the CPU off SDPA's fused kernel), the dropout masks' generators, and the passes the readout loss
makes over a chunk of vocabulary-sized logits (casts, reductions in bf16 and float32, the softmax).

    python assets/speed/parts.py                              # the 44M shape's sizes (B 2, 8 heads, T 256; 1,335 x 50,257 logits)
    python assets/speed/parts.py --B 1 --T 16 --rows 8 --V 256 --reps 1      # tiny, as CI runs it

Each line: the median of --reps timed calls after one untimed, in ms; one thread unless OMP_NUM_THREADS
says otherwise.
"""

import argparse
import time

import torch
from torch.nn import functional as F


def median_ms(f, reps):
    f()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return 1e3 * sorted(times)[len(times) // 2]


def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--B', type=int, default=2)
    p.add_argument('--H', type=int, default=8)
    p.add_argument('--T', type=int, default=256)
    p.add_argument('--hs', type=int, default=64)
    p.add_argument('--rows', type=int, default=1335, help="a loss chunk's rows (linear_ce's 256 MiB of float32 at 50,257)")
    p.add_argument('--V', type=int, default=50257)
    p.add_argument('--reps', type=int, default=7)
    a = p.parse_args()
    torch.set_flush_denormal(True)  # as runtime.setup_device does on a CPU
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s); attention (B, nh, T, hs) = "
          f"({a.B}, {a.H}, {a.T}, {a.hs}); logits ({a.rows}, {a.V})")
    print('| part | ms |')
    print('|---|---|')

    def row(name, f):
        print(f"| {name} | {median_ms(f, a.reps):.2f} |", flush=True)

    # --- attention, forward and backward, as the model's attention (model.CausalSelfAttention) calls SDPA (causal)
    q, k, v = (torch.randn(a.B, a.H, a.T, a.hs, requires_grad=True) for _ in range(3))
    for p_drop in (0.0, 0.1):
        for dtype in (torch.float32, torch.bfloat16):
            def attn():
                y = F.scaled_dot_product_attention(*(t.to(dtype) for t in (q, k, v)), is_causal=True, dropout_p=p_drop)
                y.float().sum().backward()
            row(f"attention fwd+bwd, {str(dtype)[6:]}, dropout {p_drop}", attn)

    # --- a dropout mask the size of the attention probabilities, three ways
    probs = torch.empty(a.B, a.H, a.T, a.T)
    row('mask: bernoulli_ (F.dropout\'s)', lambda: torch.empty_like(probs).bernoulli_(0.9))
    row('mask: rand bf16 >= p', lambda: torch.rand(probs.shape, dtype=torch.bfloat16) >= 0.1)
    row('mask: random uint8 >= 26', lambda: torch.empty(probs.shape, dtype=torch.uint8).random_() >= 26)

    # --- the readout loss's passes over one chunk of logits (linear_ce._softmax_grad_eager's)
    z = (3 * torch.randn(a.rows, a.V)).bfloat16()
    buf = z.float()
    row('logits: bf16 -> float32 copy', lambda: buf.copy_(z))
    row('logits: float32 -> bf16 copy', lambda: z.copy_(buf))
    row('logits: amax, float32', lambda: buf.amax(-1))
    row('logits: amax, bf16', lambda: z.amax(-1))
    row('logits: max with argmax, bf16', lambda: z.max(-1))
    row('logits: softmax in place, float32', lambda: torch.ops.aten._softmax.out(buf, -1, False, out=buf))
    row('logits: softmax in place, bf16', lambda: torch.ops.aten._softmax.out(z, -1, False, out=z))
    row('logits: a new float32 copy (fresh memory)', lambda: z.float())


if __name__ == '__main__':
    main()
