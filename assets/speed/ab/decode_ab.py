# issue 28's decoding-speed target: fixed-K cached greedy decoding, batch 1, CPU, at the starting commit
# (4c65a9b) and at HEAD, on the same random-init weights; python decode_ab.py ROOT SHAPE eager|compiled N
import hashlib, sys, time, torch
sys.path.insert(0, sys.argv[1])
from model import LoopedGPT, LoopedGPTConfig
try:
    from beyond import decoder
except ImportError:
    import decoder
shape = dict(demo=dict(vocab_size=256, n_layer=2, n_head=4, n_embd=128, block_size=128, dropout=0.0),
             m44=dict(vocab_size=50257, dropout=0.0))[sys.argv[2]]
torch.set_flush_denormal(True)
torch.manual_seed(0)
model = LoopedGPT(LoopedGPTConfig(**shape)).eval()
idx = torch.randint(0, shape['vocab_size'], (1, 16), generator=torch.Generator().manual_seed(1))
stepper = decoder.Stepper(model, compile=sys.argv[3] == 'compiled')
N = int(sys.argv[4])
with torch.no_grad():
    torch.manual_seed(2); decoder.generate(model, idx, N, top_k=1, stepper=stepper)  # warm-up (and compile)
    torch.manual_seed(2); t0 = time.perf_counter()
    out = decoder.generate(model, idx, N, top_k=1, stepper=stepper)[0]
    dt = time.perf_counter() - t0
print(f"RESULT {sys.argv[2]} {sys.argv[3]} {N / dt:.2f} tok/s tokens {hashlib.sha1(out.numpy().tobytes()).hexdigest()[:12]}")
