# (measured with model.BF16_MATH_ATTENTION, a switch this session tried and took out: bf16 attention where dropout is on)
# the attention rule in train.py's step at the 44M shape (bf16 autocast, dropout 0.1): float32 attention
# against autocast's bf16 where dropout is on, one step of each in turn
import sys, time, torch
sys.path.insert(0, '/work/main')
import train, model as M
from model import LoopedGPT, LoopedGPTConfig
torch.set_flush_denormal(True); torch.manual_seed(0)
m = LoopedGPT(LoopedGPTConfig(vocab_size=50257))
opt = train.make_optimizer(m, learning_rate=3e-4, betas=(0.9, 0.95), weight_decay=0.01)
xs = torch.randint(0, 50257, (1, 2, 256)); ys = torch.randint(0, 50257, (1, 2, 256))
ctx = torch.autocast('cpu', dtype=torch.bfloat16); sc = torch.amp.GradScaler('cpu', enabled=False)
times = {False: [], True: []}
for it in range(int(sys.argv[1])):
    for v in (False, True):
        M.BF16_MATH_ATTENTION = v
        t0 = time.perf_counter(); train.train_step(m, opt, sc, xs, ys, ctx=ctx, grad_clip=1.0)[0].item()
        if it: times[v].append(time.perf_counter() - t0)
for v, ts in times.items():
    print(f"RESULT attention {'bf16 (math path)' if v else 'float32'}: median {1e3 * sorted(ts)[len(ts) // 2]:.0f} ms/step {[round(1e3 * t) for t in ts]}")
