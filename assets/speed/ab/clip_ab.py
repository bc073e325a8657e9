# clipping folded into fused AdamW against clip_grad_norm_, in train.py's step at the 44M shape (bf16), in turn
import sys, time, torch
sys.path.insert(0, '/work/main')
import train
from model import LoopedGPT, LoopedGPTConfig
torch.set_flush_denormal(True); torch.manual_seed(0)
m = LoopedGPT(LoopedGPTConfig(vocab_size=50257))
opt = train.make_optimizer(m, learning_rate=3e-4, betas=(0.9, 0.95), weight_decay=0.01)
xs = torch.randint(0, 50257, (1, 2, 256)); ys = torch.randint(0, 50257, (1, 2, 256))
ctx = torch.autocast('cpu', dtype=torch.bfloat16); sc = torch.amp.GradScaler('cpu', enabled=False)
real = train.clip
times = {True: [], False: []}
for it in range(int(sys.argv[1])):
    for folded in (True, False):
        train.clip = lambda model, optimizer, grad_clip, folded=True, f=folded: real(model, optimizer, grad_clip, folded=f)
        if not folded and hasattr(opt, 'grad_scale'):
            del opt.grad_scale
        t0 = time.perf_counter(); train.train_step(m, opt, sc, xs, ys, ctx=ctx, grad_clip=1.0)[0].item()
        if it: times[folded].append(time.perf_counter() - t0)
for f, ts in times.items():
    print(f"RESULT clip {'folded into AdamW' if f else 'clip_grad_norm_'}: median {1e3 * sorted(ts)[len(ts) // 2]:.0f} ms/step {[round(1e3 * t) for t in ts]}")
