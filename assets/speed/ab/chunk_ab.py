# the readout loss's chunk on a CPU: train.py's step at the 44M shape (bf16, batch 1x2x256: 2,048 rows of
# GPT-2's 50,257 logits a step), CHUNK_BYTES 256 MiB (1,335 rows: two chunks) against 512 MiB (one), in turn
import sys, time, torch
sys.path.insert(0, '/work/main')
import train, linear_ce
from model import LoopedGPT, LoopedGPTConfig
torch.set_flush_denormal(True); torch.manual_seed(0)
m = LoopedGPT(LoopedGPTConfig(vocab_size=50257))
opt = train.make_optimizer(m, learning_rate=3e-4, betas=(0.9, 0.95), weight_decay=0.01)
xs = torch.randint(0, 50257, (1, 2, 256)); ys = torch.randint(0, 50257, (1, 2, 256))
ctx = torch.autocast('cpu', dtype=torch.bfloat16); sc = torch.amp.GradScaler('cpu', enabled=False)
sizes = {'256 MiB': 256 * 2**20, '512 MiB': 512 * 2**20}
times = {k: [] for k in sizes}
for it in range(int(sys.argv[1])):
    for k, b in sizes.items():
        linear_ce.CHUNK_BYTES['cpu'] = b
        t0 = time.perf_counter(); train.train_step(m, opt, sc, xs, ys, ctx=ctx, grad_clip=1.0)[0].item()
        if it: times[k].append(time.perf_counter() - t0)
for k, ts in times.items(): print(f"RESULT chunk {k}: median {1e3 * sorted(ts)[len(ts) // 2]:.0f} ms/step {[round(1e3 * t) for t in ts]}")
