# issue 30's compile target: the training step at the 44M shape (batch 1x2x256, bf16 autocast, dropout 0.1,
# fused loss) compiled by the CPU inductor, argv[3]: the whole model (torch.compile(model)) or its loop (train.py)
#, cold (a fresh inductor cache): the first step's time and the next steps'
import sys, time, torch
sys.path.insert(0, sys.argv[1])
import train
from model import LoopedGPT, LoopedGPTConfig
from torch._dynamo.utils import counters
torch.set_flush_denormal(True)
torch.manual_seed(0)
model = LoopedGPT(LoopedGPTConfig(vocab_size=50257))
opt = train.make_optimizer(model, learning_rate=3e-4, betas=(0.9, 0.95), weight_decay=0.01)
if sys.argv[3] == 'nested':  # the whole model, its loop a nested compile region (traced once, reused K times)
    import model as M
    M.LoopedGPT.loop = torch.compiler.nested_compile_region(M.LoopedGPT.loop)
step_model = train.wrap_for_training(model, False, True, 'cpu') if sys.argv[3] == 'loop' else torch.compile(model)
xs, ys = (torch.randint(0, 50257, (1, 2, 256), generator=torch.Generator().manual_seed(s)) for s in (1, 2))
ctx = torch.autocast('cpu', dtype=torch.bfloat16)
sc = torch.amp.GradScaler('cpu', enabled=False)
t0 = time.perf_counter()
train.train_step(step_model, opt, sc, xs, ys, ctx=ctx, grad_clip=1.0)[0].item()
first = time.perf_counter() - t0
ts = []
for _ in range(int(sys.argv[2])):
    t0 = time.perf_counter(); train.train_step(step_model, opt, sc, xs, ys, ctx=ctx, grad_clip=1.0)[0].item(); ts.append(time.perf_counter() - t0)
print(f"RESULT first step {first:.1f} s, then median {1e3 * sorted(ts)[len(ts) // 2]:.0f} ms/step {[round(1e3 * t) for t in ts]}, "
      f"graphs {counters['stats']['unique_graphs']}")
