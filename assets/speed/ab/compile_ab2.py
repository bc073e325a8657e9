# the training step at the 44M shape compiled three ways, in one process, one step of each in turn after
# each has compiled: the whole model, the whole model with its loop a nested compile region, the loop alone
import sys, time, torch
sys.path.insert(0, '/work/main')
import train
from model import LoopedGPT, LoopedGPTConfig
torch.set_flush_denormal(True)
xs, ys = (torch.randint(0, 50257, (1, 2, 256), generator=torch.Generator().manual_seed(s)) for s in (1, 2))
ctx = torch.autocast('cpu', dtype=torch.bfloat16); sc = torch.amp.GradScaler('cpu', enabled=False)
class Nested(LoopedGPT):
    loop = torch.compiler.nested_compile_region(LoopedGPT.loop)


steps = {}
for how in ('whole', 'nested', 'loop'):
    torch.manual_seed(0)
    m = (Nested if how == 'nested' else LoopedGPT)(LoopedGPTConfig(vocab_size=50257))
    opt = train.make_optimizer(m, learning_rate=3e-4, betas=(0.9, 0.95), weight_decay=0.01)
    sm = train.wrap_for_training(m, False, True, 'cpu') if how == 'loop' else torch.compile(m)
    t0 = time.perf_counter(); train.train_step(sm, opt, sc, xs, ys, ctx=ctx, grad_clip=1.0)[0].item()
    print(f"{how}: first step {time.perf_counter() - t0:.1f} s (warm caches after the first)", flush=True)
    steps[how] = (sm, opt)
times = {k: [] for k in steps}
for it in range(int(sys.argv[1])):
    for how, (sm, opt) in steps.items():
        t0 = time.perf_counter(); train.train_step(sm, opt, sc, xs, ys, ctx=ctx, grad_clip=1.0)[0].item()
        times[how].append(time.perf_counter() - t0)
for how, ts in times.items():
    print(f"RESULT {how}: median {1e3 * sorted(ts)[len(ts) // 2]:.0f} ms/step {[round(1e3 * t) for t in ts]}")
