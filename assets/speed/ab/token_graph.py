# (measured before beyond/decoder.py had static_token: Stepper.loops then ran K calls of the loop graph)
# issue 30: one compiled graph for a whole fixed-K token against the Stepper's K calls of its one compiled
# loop, on the CPU inductor (no CUDA graphs here), batch 1, the same cache and weights; python token_graph.py SHAPE N
import sys, time, torch
sys.path.insert(0, '/work/main')
from model import LoopedGPT, LoopedGPTConfig
from beyond import decoder
shape = dict(demo=dict(vocab_size=256, n_layer=2, n_head=4, n_embd=128, block_size=128, dropout=0.0),
             m44=dict(vocab_size=50257, dropout=0.0))[sys.argv[1]]
torch.set_flush_denormal(True); torch.manual_seed(0)
model = LoopedGPT(LoopedGPTConfig(**shape)).eval()   # norm_perloop: loop_input is H itself from loop 2 on
K, N = model.config.n_loops, int(sys.argv[2])
st = decoder.Stepper(model, compile=True)
w = st.weights()

def whole_token(layers, nh, x, pos, kv, fused):
    for k in range(K):
        x = decoder.static_loop(layers, nh, x, pos, kv[k], fused)
    return x
whole = torch.compile(whole_token, fullgraph=True, dynamic=False)

def run(per_token):
    cache = st.cache(1, K)
    x0 = model.embed(torch.zeros(1, 1, dtype=torch.long))
    outs = []
    for t in range(N):
        st.pos.fill_(t)
        outs.append(per_token(x0, cache, t))
    return torch.cat(outs)

loops = lambda x, cache, t: st.loops(x, t, cache, 0, K)
one = lambda x, cache, t: whole(w.layers, st.nh, x, st.pos, cache.kv, w.fused)
with torch.no_grad():
    a, b = run(loops), run(one)   # warm-up and compile
    print('same states:', torch.equal(a, b), (a - b).abs().max().item())
    times = {'K loop calls': [], 'one token graph': []}
    for rep in range(5):
        for name, f in (('K loop calls', loops), ('one token graph', one)):
            t0 = time.perf_counter(); run(f); times[name].append((time.perf_counter() - t0) / N)
for name, ts in times.items():
    print(f"RESULT {sys.argv[1]} {name}: median {1e3 * sorted(ts)[2]:.3f} ms a token")
