#!/usr/bin/env bash
# The GPU check of crossbow's CUDA backend, in one run (fits 8 minutes on one H200):
#   1. finds the binaries: build-gpu/gpu-bundle.tar.xz (tools/gpu/pack.sh, built on the dev
#      machine and carried here), unpacked to /tmp/cb-bundle; with --cpu, the local build/;
#   2. the op harness, every (op, dtype), CUDA against the CPU, and the CUDA device tests
#      (tests/test_backend_ops.cpp, tests/test_cuda.cpp);
#   3. ResNet-20 with SMA on one GPU, 2 learners, against the same run on the CPU: the loss must
#      fall on both and end close;
#   4. tools/gpu/bench.py: images/s of cb-train (auto-tuned learners) against PyTorch for
#      ResNet-20 (32x32) at batch 16/32/64 and ResNet-50 (224x224) at batch 16/32, peak memory.
# Usage (on the GPU machine, from the repository root):
#   tools/gpu/check.sh                 everything, on cuda:0
#   tools/gpu/check.sh --cpu           the CPU half on a machine without a GPU: the same steps on
#                                      the CPU with short lengths (checks the script, not speed)
# Exit status: 0 when every check passed; the table is printed either way.
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
mode=gpu
[ "${1:-}" = "--cpu" ] && mode=cpu
work=${CB_CHECK_WORK:-/tmp/cb-gpu-check}
mkdir -p "$work"
py=${PYTHON:-python3}
# The python with torch: the GPU machine's python3; Debian's at /usr/bin/python3 here.
"$py" -c "import torch" 2>/dev/null || py=/usr/bin/python3
failed=()
step() { echo; echo "== $* =="; }

step "1. binaries"
if [ "$mode" = gpu ]; then
  [ -f build-gpu/gpu-bundle.tar.xz ] ||
    { echo "check: build-gpu/gpu-bundle.tar.xz missing: run tools/gpu/pack.sh on the dev machine and carry it"; exit 1; }
  rm -rf /tmp/cb-bundle && mkdir -p /tmp/cb-bundle && tar -C /tmp/cb-bundle -xJf build-gpu/gpu-bundle.tar.xz
  bin=/tmp/cb-bundle/bin
  # The CUDA libraries the bundle leaves out: the toolkit's, then PyTorch's (cuDNN, NCCL).
  libs=""
  for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -d "$d" ] && libs="$libs:$d"
  done
  site=$("$py" -c "import site; print(' '.join(site.getsitepackages()))" 2>/dev/null || true)
  for s in $site; do
    for d in "$s"/nvidia/*/lib "$s"/torch/lib; do [ -d "$d" ] && libs="$libs:$d"; done
  done
  for d in /usr/lib/x86_64-linux-gnu /usr/lib64 /lib/x86_64-linux-gnu; do
    [ -d "$d" ] && ls "$d"/libcuda.so* >/dev/null 2>&1 && libs="$libs:$d"
  done
  export CB_CUDA_LIBS="${libs#:}"
  echo "CUDA libraries from: $CB_CUDA_LIBS"
  devices=cuda:0
  nvidia-smi -L || true
else
  bin="$root/build/check-bin"
  mkdir -p "$bin"
  for x in cb-train cb-run cb-inspect; do ln -sf "$root/build/$x" "$bin/$x"; done
  ln -sf "$root/build/tests/cb-tests" "$bin/cb-tests"
  devices=cpu
fi
"$bin/cb-train" --help >/dev/null || { echo "check: $bin/cb-train does not start"; exit 1; }
echo "binaries: $bin"

step "2. op harness (every (op, dtype), CUDA against the CPU) and the CUDA device tests"
export CB_TEST_SOURCE_DIR="$root" CB_TEST_BINARY_DIR="$bin"
if ! "$bin/cb-tests" --source-file='*test_backend_ops.cpp,*test_cuda.cpp' \
    --reporters=console 2>&1 | tee "$work/tests.log" | grep -E "backend |skipped|test cases|assertions|ERROR|FAILED" | head -60; then
  :
fi
grep -q "Status: SUCCESS" "$work/tests.log" || failed+=("op harness / CUDA tests (see $work/tests.log)")

step "3. ResNet-20 with SMA, 2 learners: $devices against the CPU"
"$py" - "$work" <<'PY' || failed+=("data/model export")
import sys; sys.path.insert(0, "tools/gpu"); import bench
w = sys.argv[1]; bench.export("resnet20", w + "/resnet20.onnx"); bench.write_cifar(w + "/cifar", 10000, 512)
PY
sma_steps=300
[ "$mode" = cpu ] && sma_steps=60
loss_of() {  # the last eval's train loss and test accuracy in a metrics file
  "$py" -c "import json,sys; r=[json.loads(l) for l in open(sys.argv[1]) if '\"eval\"' in l]; print(r[0]['loss'] if len(sys.argv)>2 else r[-1]['loss'], r[-1]['accuracy'])" "$@"
}
for d in $devices cpu; do
  [ "$d" = cpu ] && [ "$devices" = cpu ] && [ -f "$work/sma-cpu.jsonl" ] && continue
  rm -f "$work/sma-$d.jsonl"
  "$bin/cb-train" "$work/resnet20.onnx" --data "$work/cifar" --devices "$d" --learners 2 \
    --batch-size 16 --steps $sma_steps --evals-per-epoch 20 --test-limit 256 --seed 1 \
    --augment none --metrics "$work/sma-$d.jsonl" > "$work/sma-$d.log" 2>&1 ||
    { failed+=("cb-train ResNet-20 on $d (see $work/sma-$d.log)"); continue; }
  grep -E "^sma|^done" "$work/sma-$d.log"
done
if [ -f "$work/sma-$devices.jsonl" ] && [ -f "$work/sma-cpu.jsonl" ]; then
  read -r first _ < <(loss_of "$work/sma-$devices.jsonl" first)
  read -r last acc < <(loss_of "$work/sma-$devices.jsonl")
  read -r cpu_last cpu_acc < <(loss_of "$work/sma-cpu.jsonl")
  echo "loss on $devices: $first -> $last (accuracy $acc); on the CPU: -> $cpu_last (accuracy $cpu_acc)"
  "$py" -c "import sys; f,l,c=map(float,sys.argv[1:]); sys.exit(0 if l < 0.8*f and abs(l-c) <= 0.25*max(c,0.1) else 1)" \
    "$first" "$last" "$cpu_last" || failed+=("ResNet-20 SMA: the loss did not fall as on the CPU")
fi

step "4. images/s: cb-train against PyTorch"
if [ "$mode" = gpu ]; then
  "$py" tools/gpu/bench.py --cb-bin "$bin" --work "$work" --device cuda || failed+=("bench")
else
  # PyTorch's fair CPU configuration (BUILD-NOTES.md): one OpenBLAS thread, no page-fault churn.
  OPENBLAS_NUM_THREADS=1 MALLOC_MMAP_THRESHOLD_=1000000000 MALLOC_TRIM_THRESHOLD_=1000000000000 \
  "$py" tools/gpu/bench.py --cb-bin "$bin" --work "$work" --device cpu \
    --configs resnet20:16,resnet50:16 --steps resnet20:120,resnet50:3 --torch-steps 3 \
    --extra "--learners 1" || failed+=("bench")
fi

echo
if ((${#failed[@]})); then
  echo "check: FAILED: ${failed[*]}"
  exit 1
fi
echo "check: all passed"
