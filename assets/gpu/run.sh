#!/usr/bin/env bash
# The first GPU job, one command of at most 8 minutes on one H100 (a lent GPU gives about 10):
#
#   bash assets/gpu/run.sh OUT_DIR          # on the GPU: every output in OUT_DIR (four files)
#   bash assets/gpu/run.sh --cpu OUT_DIR    # the same script at gpu_check's tiny CPU shape, compile off (tests/test_gpu_check.py)
#
# It runs, in this order (the most needed first, so a job cut short still has them):
#   1. python -m beyond.gpu_check: train-44m-fused (the 44M fused training row), decode-eager, decode-graphs
#      (without its speculative row) and correctness (the bf16 decoder against model.forward and float32),
#      after its preflight, with --fail_on_skip: a graphs row that inductor ran without CUDA graphs fails.
#      Estimate: EST_CHECK below, gpu_check's own estimate() for these steps (its docstring has the
#      arithmetic: 5 s a process, 25 s the preflight, 126 s the training row (a 120 s compile and 23 steps
#      of 24.1 TFLOP at 40% of 989 TFLOP/s), 9 s eager decoding (480 tokens at 8 ms), 49 s decode-graphs
#      (a 40 s compile and 480 tokens), 127 s correctness (three 40 s compiles, 4 x 64 tokens)).
#   2. python -m pytest of the CUDA-only tests (tests/test_decoder.py -k on_cuda: the bf16 decoder is the
#      forward, and one case per decoding setting, CUDA graphs against eager), in one process (-n 0: a few
#      tests, one GPU). Estimate: EST_CUDA_TESTS
#      below: 10 s for pytest's start and collection (torch's import), then nine compiles of the tiny test
#      model (per setting one in bf16 and one in float32; the speculative one's bf16 case two: its draft's
#      loop and the K-loop token), 6 blocks a token (3 loops x 2 layers): 4 s fixed + 1.25 s a block
#      (gpu_check's 40 s for 32 blocks) = 11.5 s each, 9 x 11.5 = 104 s; the decoding itself is ~100
#      tokens a case at a few ms each, under 2 s all told. 10 + 104 = ~114 s.
#   So 5 s (this script) + 341 + 114 = 460 s, ~7.7 min. Each step's measured seconds go beside its estimate
#   in OUT_DIR/run.log; gpu_check's report puts each of its own steps' beside theirs.
#
# Outputs (OUT_DIR): gpu_check.log and <device>-only.md (gpu_check's), cuda-tests.log, run.log.
set -uo pipefail
cd "$(dirname "$0")/../.."
EST_CHECK=341        # s, gpu_check's estimate for the steps below (tests/test_gpu_check.py checks it is estimate()'s)
EST_CUDA_TESTS=114   # s, the CUDA tests (the arithmetic above)
cpu=()
if [ "${1:-}" = --cpu ]; then
  cpu=(--cpu --compile=off --steps=1 --warmup=0)  # (a cold inductor compile takes 10-40 s on a small CPU)
  shift
fi
OUT=${1:?usage: bash assets/gpu/run.sh [--cpu] OUT_DIR}
mkdir -p "$OUT"
: > "$OUT/run.log"
status=0

step() {  # step NAME ESTIMATE_S LOG COMMAND...: runs it, its output to LOG and the screen; its seconds to run.log
  local name=$1 est=$2 log=$3 t0 rc
  shift 3
  echo "=== $name (estimated ${est} s on one H100)"
  t0=$(date +%s.%N)
  "$@" 2>&1 | tee ${log:+"$log"}
  rc=${PIPESTATUS[0]}
  awk -v n="$name" -v e="$est" -v t0="$t0" -v t1="$(date +%s.%N)" -v rc="$rc" \
    'BEGIN { printf "%s: estimated %s s, took %.1f s, exit %s\n", n, e, t1 - t0, rc }' | tee -a "$OUT/run.log"
  [ "$rc" = 0 ] || status=1
}

step gpu_check "$EST_CHECK" '' python -m beyond.gpu_check --only=train-44m-fused,decode-eager,decode-graphs,correctness \
  --speculative=False --fail_on_skip --out="$OUT" "${cpu[@]}"
step cuda-tests "$EST_CUDA_TESTS" "$OUT/cuda-tests.log" python -m pytest -q -p no:cacheprovider -n 0 tests/test_decoder.py -k on_cuda
echo "estimated $((EST_CHECK + EST_CUDA_TESTS + 5)) s on one H100; outputs in $OUT: $(ls "$OUT" | tr '\n' ' ')"
exit $status
