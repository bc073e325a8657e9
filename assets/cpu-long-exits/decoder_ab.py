# Decode speed, batch 1, sampled: the decoder of a commit (its decoder.py saved as decoder_old.py in $OLD)
# against this tree, interleaved in one process, same seeds (same_text: the two give the same text).
#   mkdir -p /tmp/olddec && git show 60d016f:decoder.py > /tmp/olddec/decoder_old.py
#   OLD=/tmp/olddec python assets/cpu-long-exits/decoder_ab.py penalty_perloop   # out-penalty_perloop-cpu-long-s1
import os, sys, time, torch
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))); sys.path.insert(0, os.environ['OLD'])
import decoder, decoder_old
from model import LoopedGPT
torch.set_num_threads(1)
name = sys.argv[1] if len(sys.argv) > 1 else 'penalty_perloop'
model, _ = LoopedGPT.from_checkpoint(f'out-{name}-cpu-long-s1', 'cpu'); model.eval()
prompt = torch.randint(0, 256, (1, 16), generator=torch.Generator().manual_seed(0))
def run(mod, n=300, **kw):
    torch.manual_seed(0)
    mod.generate(model, prompt, 20, **kw)
    t = time.perf_counter(); out, used, _ = mod.generate(model, prompt, n, **kw); dt = time.perf_counter() - t
    return dt / n * 1e6, used.float().mean().item(), out
cases = dict(fixed4={}, fixed2=dict(n_loops=2), fixed1=dict(n_loops=1),
             exit1_copy=dict(exit_threshold=1e-6), exit1_proj=dict(exit_threshold=1e-6, stand_in='project'),
             exit2_copy=dict(exit_threshold=1e-6, criterion='converge'), exit2_proj=dict(exit_threshold=1e-6, criterion='converge', stand_in='project'),
             mp09_proj=dict(exit_threshold=0.9, stand_in='project'), never=dict(exit_threshold=0.999999999),
             spec=dict(draft_loops=1, draft_tokens=3))
res = {(m, k): [] for m in ('old', 'new') for k in cases}
for rep in range(3):
    for k, kw in cases.items():
        for m, mod in (('old', decoder_old), ('new', decoder)):
            res[(m, k)].append(run(mod, **kw))
print(f"{name}: us/token, best of 3 (300 tokens, sampled, batch 1, 1 thread)")
for k in cases:
    o, n = res[('old', k)], res[('new', k)]
    same = torch.equal(o[0][2], n[0][2])
    print(f"{k:12s} old {min(x[0] for x in o):7.1f}  new {min(x[0] for x in n):7.1f}  x{min(x[0] for x in o) / min(x[0] for x in n):.2f}  loops {n[0][1]:.2f}  same_text={same}")
