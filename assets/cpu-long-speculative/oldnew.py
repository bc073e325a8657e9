# Fixed-K decode tok/s, batch 1, sampling: the decoder before this change (commit bf763cc, checked out
# at $OLD) against this tree, interleaved in one process. From the repo root:
#   git worktree add /tmp/old bf763cc && OLD=/tmp/old python assets/cpu-long-speculative/oldnew.py out-raw_perloop-cpu-long-s1 2
import importlib.util, os, sys, time, torch
torch.set_num_threads(int(sys.argv[2]) if len(sys.argv) > 2 else 1); torch.set_flush_denormal(True)
ck = sys.argv[1]
OLD, NEW = os.environ['OLD'], os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
def load(path, name):
    sys.path.insert(0, path)
    for mod in ('linear_ce', 'model'):
        sys.modules.pop(mod, None)
    spec = importlib.util.spec_from_file_location(name, f'{path}/model.py'); m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
    sys.path.pop(0); return m
old = load(OLD, 'old_model')
sys.path.insert(0, NEW); sys.modules.pop('model', None); sys.modules.pop('linear_ce', None)
import model as new; import decoder
mo, _ = old.LoopedGPT.from_checkpoint(ck); mo.eval()
mn, _ = new.LoopedGPT.from_checkpoint(ck); mn.eval()
x = torch.randint(0, 256, (1, 64), generator=torch.Generator().manual_seed(0))
N = 256
def run(name):
    torch.manual_seed(0)
    t = time.perf_counter()
    if name == 'old': mo.generate(x, N)
    elif name == 'old-nocache': mo.generate(x, N, kv_cache=False)
    elif name == 'new': decoder.generate(mn, x, N)
    elif name == 'new-compiled': decoder.generate(mn, x, N, compile=True)
    elif name == 'new-nocache': decoder.generate(mn, x, N, kv_cache=False)
    return N / (time.perf_counter() - t)
names = ['old', 'new', 'new-compiled', 'old-nocache', 'new-nocache']
for n in names: run(n)  # warm-up (compiles)
res = {n: [] for n in names}
for r in range(3):
    for n in names: res[n].append(run(n))
for n in names: print(f"{n:14s} " + ' '.join(f'{v:7.0f}' for v in res[n]) + f"  best {max(res[n]):.0f} tok/s")
