#!/usr/bin/env bash
# The GPU check of crossbow's CUDA backend, in one run that ends within 8 minutes on one H200 and
# cannot pass without having run on the GPU:
#   1. probe: unpacks build-gpu/gpu-bundle.tar.xz (tools/gpu/pack.sh, built on the dev machine
#      and carried here) to /tmp/cb-bundle; finds the NVIDIA driver (libcuda.so.1) in the caller's
#      LD_LIBRARY_PATH, `ldconfig -p` and the usual mount points, and hands those folders, the
#      toolkit's and PyTorch's (cuDNN, NCCL, cuBLASLt) to the bundle's loader (CB_CUDA_LIBS: the
#      loader's --library-path replaces LD_LIBRARY_PATH); prints the GPU and the driver, CUDA
#      runtime, cuDNN, cuBLASLt and NCCL versions (the line cuda:0 prints at creation), and stops
#      with one line when no GPU is seen;
#   2. tests: the op harness, every (op, dtype), CUDA against the CPU, the CUDA device tests and
#      the convolution and product kernel tests with their bf16 cases (tests/test_backend_ops.cpp,
#      tests/test_cuda.cpp, tests/test_kernels_conv*.cpp); passes only when the harness's summary
#      says the `cuda` backend ran N > 0 (op, dtype) pairs with 0 failures;
#   3. sma: ResNet-20 with SMA on one GPU, 2 learners, CB_CUDA_STRICT=1 (a convolution cuDNN
#      declines is an error), against the same run on the CPU: the loss must fall and end close;
#      on a GPU the same run with --precision bf16 must end close to the CPU's too;
#   4. bench: tools/gpu/bench.py's short profile, cb-train against PyTorch (images/s, peak memory).
# Every step runs under `timeout` with its own limit, cut to what is left of the whole run's
# budget; its full output goes to a file, which is then grepped. The table at the end (also when
# a step fails, runs out of time or the run is interrupted) says what each step did. On exit the
# table and a tarball of the logs and metrics (not the data sets) are copied to $OUT when set.
# Usage (on the GPU machine, from the repository root):
#   tools/gpu/check.sh          everything, on cuda:0
#   tools/gpu/check.sh --cpu    the same steps on the CPU with short lengths, with the local build/
#                               (checks the script, not the GPU: the `cuda-host` backend stands in)
# Exit status: 0 when every step passed, 1 otherwise.
# For tests of this script (tests/gpu_check_test.py) and for reruns; unset on a real run:
#   CB_CHECK_WORK         work folder (default /tmp/cb-gpu-check)
#   CB_CHECK_BIN          use these binaries instead of the bundle's
#   CB_CHECK_STEPS        the steps to run (default "probe tests sma bench")
#   CB_CHECK_BUDGET_S     the whole run's budget in seconds (default 450)
#   CB_CHECK_LIMITS       per-step limits, e.g. "tests=200,bench=120" (seconds)
#   CB_CHECK_DRIVER_DIRS  folders searched for libcuda.so.1 besides LD_LIBRARY_PATH and ldconfig
#   CB_CHECK_LDCONFIG     the command that lists the loader's cache (default "ldconfig -p")
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
mode=gpu
[ "${1:-}" = "--cpu" ] && mode=cpu
start=$(date +%s)
budget=${CB_CHECK_BUDGET_S:-450}
work=${CB_CHECK_WORK:-/tmp/cb-gpu-check}
logs="$work/logs"
rm -rf "$logs" && mkdir -p "$logs"
steps=" ${CB_CHECK_STEPS:-probe tests sma bench} "
py=${PYTHON:-python3}
# The python with torch: the GPU machine's python3; Debian's at /usr/bin/python3 here.
"$py" -c "import torch" 2>/dev/null || py=/usr/bin/python3

# ---- the table ----------------------------------------------------------------------------------
declare -A limit=([probe]=45 [tests]=180 [sma]=120 [bench]=120)
limits_env=${CB_CHECK_LIMITS:-}
for kv in ${limits_env//,/ }; do limit[${kv%%=*}]=${kv#*=}; done
rows=()    # "step|status|seconds|note"
failed=()  # one line per failure
done_table=0
row() { rows+=("$1|$2|$3|$4"); }
fail() { failed+=("$1: $2"); }
table() {
  ((done_table)) && return
  done_table=1
  {
    echo
    echo "| step | result | seconds | note |"
    echo "|---|---|---|---|"
    for r in "${rows[@]}"; do
      IFS='|' read -r s st sec note <<<"$r"
      echo "| $s | $st | $sec | $note |"
    done
    echo
    if ((${#failed[@]})); then
      for f in "${failed[@]}"; do echo "check: FAILED: $f"; done
    else
      echo "check: all passed ($mode)"
    fi
  } | tee "$logs/summary.txt"
}
on_exit() {
  local rc=$?
  table
  if [ -n "${OUT:-}" ] && [ -d "${OUT:-}" ]; then
    cp "$logs/summary.txt" "$OUT/summary.txt" 2>/dev/null
    # Logs and metrics only (the data sets and models stay): one file, under $OUT's size limits.
    tar -C "$work" -czf "$OUT/check-logs.tar.gz" logs 2>/dev/null
  fi
  exit $rc
}
interrupted() {
  fail "run" "interrupted by a signal after $(($(date +%s) - start)) s"
  exit 1
}
trap on_exit EXIT
trap interrupted INT TERM

# The time a step may take: its own limit, cut to what is left of the budget (0: none left).
limit_of() {
  local left=$((budget - ($(date +%s) - start)))
  local l=${limit[$1]}
  if ((left < 5)); then l=0; elif ((left < l)); then l=$left; fi
  echo "$l"
}
# run_step NAME LOG CMD...: CMD under `timeout`, its output to LOG; sets step_rc (124: time limit,
# 999: not started).
run_step() {
  local name=$1 log=$2
  shift 2
  local l
  l=$(limit_of "$name")
  if ((l == 0)); then
    step_rc=999 step_s=0 step_limit=0
    echo "(not started: the run's budget of $budget s is spent)" >"$log"
    return
  fi
  step_limit=$l
  local t0=$(date +%s)
  timeout -k 5 "$l" "$@" >"$log" 2>&1
  step_rc=$?
  step_s=$(($(date +%s) - t0))
  # Killed after the grace period: still the time limit (a KILL before it is a crash).
  if ((step_rc == 137 && step_s >= step_limit)); then step_rc=124; fi
}
# The verdict of a step from step_rc; true when it ran to completion.
judge() {
  local name=$1 log=$2
  case $step_rc in
    0) return 0 ;;
    124)
      fail "$name" "past its time limit of $step_limit s (the log so far: $log)"
      row "$name" "time limit" "$step_s" "stopped after $step_limit s"
      ;;
    999)
      fail "$name" "not started: the run's budget of $budget s is spent"
      row "$name" "not run" 0 "no time left"
      ;;
    *) return 0 ;;
  esac
  return 1
}
selected() { [[ $steps == *" $1 "* ]]; }
section() { echo; echo "== $* =="; }

# ---- 1. probe -----------------------------------------------------------------------------------
section "1. probe: binaries, driver, versions"
# Folders holding the NVIDIA driver's libcuda.so.1: the caller's LD_LIBRARY_PATH, the loader's
# cache, the usual mount points (containers mount the host's driver under /usr/local/nvidia).
driver_dirs() {
  local d
  local IFS=:
  for d in ${LD_LIBRARY_PATH:-}; do [ -n "$d" ] && echo "$d"; done
  unset IFS
  ${CB_CHECK_LDCONFIG:-ldconfig -p} 2>/dev/null | awk '/libcuda\.so\.1/ {print $NF}' |
    while read -r f; do dirname "$f"; done
  for d in ${CB_CHECK_DRIVER_DIRS:-/usr/local/nvidia/lib64 /usr/local/nvidia/lib \
    /usr/lib/x86_64-linux-gnu /usr/lib64 /lib/x86_64-linux-gnu /usr/lib/wsl/lib \
    /run/nvidia/driver/usr/lib/x86_64-linux-gnu}; do echo "$d"; done
}
add_dir() {  # appends a folder to $libs once
  [ -d "$1" ] || return
  case ":$libs:" in *":$1:"*) ;; *) libs="${libs:+$libs:}$1" ;; esac
}
libs=""
for d in $(driver_dirs); do ls "$d"/libcuda.so.1 >/dev/null 2>&1 && add_dir "$d"; done
driver_at=$libs
# The toolkit's libraries (cuBLASLt), then PyTorch's (cuDNN, NCCL, NVRTC), then the rest of the
# caller's LD_LIBRARY_PATH.
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib; do
  add_dir "$d"
done
site=$("$py" -c "import site; print(' '.join(site.getsitepackages()))" 2>/dev/null || true)
for s in $site; do
  for d in "$s"/nvidia/*/lib "$s"/torch/lib; do add_dir "$d"; done
done
IFS=: read -r -a caller_dirs <<<"${LD_LIBRARY_PATH:-}"
for d in "${caller_dirs[@]}"; do [ -n "$d" ] && add_dir "$d"; done
export CB_CUDA_LIBS="$libs"

if [ -n "${CB_CHECK_BIN:-}" ]; then
  bin=$CB_CHECK_BIN
elif [ "$mode" = gpu ]; then
  bundle=${CB_CHECK_BUNDLE:-build-gpu/gpu-bundle.tar.xz}
  if [ ! -f "$bundle" ]; then
    fail "probe" "$bundle missing: run tools/gpu/pack.sh on the dev machine and carry build-gpu"
    row probe failed 0 "no bundle"
    exit 1
  fi
  rm -rf /tmp/cb-bundle && mkdir -p /tmp/cb-bundle
  if ! timeout 90 tar -C /tmp/cb-bundle -xJf "$bundle"; then
    fail "probe" "unpacking $bundle failed or took over 90 s"
    row probe failed 0 "bundle not unpacked"
    exit 1
  fi
  bin=/tmp/cb-bundle/bin
else
  bin="$root/build/check-bin"
  mkdir -p "$bin"
  for x in cb-train cb-run cb-inspect; do ln -sf "$root/build/$x" "$bin/$x"; done
  ln -sf "$root/build/tests/cb-tests" "$bin/cb-tests"
fi
export CB_TEST_SOURCE_DIR="$root" CB_TEST_BINARY_DIR="$bin"
echo "binaries: $bin"
echo "driver (libcuda.so.1) in: ${driver_at:-none of: $(driver_dirs | sort -u | tr '\n' ' ')}"
echo "library path after the bundle's: ${CB_CUDA_LIBS:-(none)}"
devices=cpu
if selected probe; then
  if [ "$mode" = gpu ]; then
    timeout 20 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader \
      >"$logs/nvidia-smi.log" 2>&1 && cat "$logs/nvidia-smi.log" ||
      echo "nvidia-smi: not available or failed (see $logs/nvidia-smi.log)"
    # Making cuda:0 prints the versions line; the device test skips, saying why, without a GPU.
    run_step probe "$logs/probe.log" "$bin/cb-tests" --test-case='cuda: device memory*' \
      --reporters=console
    if judge probe "$logs/probe.log"; then
      versions=$(grep -m1 -o "cuda:0: .*" "$logs/probe.log")
      if [ -n "$versions" ]; then
        echo "$versions"
        devices=cuda:0
        if ((step_rc == 0)); then
          row probe passed "$step_s" "${versions%%,*}"
        else
          fail probe "the device test failed (exit $step_rc): see $logs/probe.log"
          row probe failed "$step_s" "${versions%%,*}"
        fi
      else
        why=$(grep -m1 -o "skipped: .*" "$logs/probe.log" || true)
        why=${why#skipped: }
        [ -z "$why" ] && why="no device line (exit $step_rc; see $logs/probe.log): $(tail -n 3 "$logs/probe.log" | tr '\n' ' ')"
        fail probe "no GPU seen: $why"
        row probe failed "$step_s" "no GPU seen"
        echo "check: no GPU seen: $why"
        exit 1
      fi
    else
      exit 1
    fi
  else
    "$bin/cb-train" --help >/dev/null 2>&1 || { fail probe "$bin/cb-train does not start"; exit 1; }
    row probe passed 0 "cpu mode: binaries start"
  fi
else
  row probe "not selected" 0 ""
  [ "$mode" = gpu ] && devices=cuda:0
fi

# ---- 2. tests -----------------------------------------------------------------------------------
section "2. op harness (every (op, dtype), CUDA against the CPU) and the CUDA device tests"
# The backend whose summary must show work: the GPU's, or on --cpu the host-run CUDA kernels.
want=cuda
[ "$mode" = cpu ] && want=cuda-host
if selected tests; then
  tlog="$logs/tests.log"
  # With the kernel tests of the convolutions and products: their bf16 cases (--precision bf16)
  # run on the GPU where there is one.
  run_step tests "$tlog" "$bin/cb-tests" \
    --source-file='*test_backend_ops.cpp,*test_cuda.cpp,*test_kernels_conv.cpp,*test_kernels_conv_grad.cpp' \
    --reporters=console
  grep -E "backend [a-z-]+: ([0-9]+ \(op, dtype\) pairs|skipped)|skipped: |test cases:|assertions:" \
    "$tlog"
  summary=$(grep -m1 -E "backend $want: [0-9]+ \(op, dtype\) pairs" "$tlog" || true)
  declines=$(grep -c "direct convolution kernels run it" "$tlog")
  naive=$(grep -c "a naive kernel runs it" "$tlog")
  errors=$(grep -c -E "ERROR|FAILED|threw" "$tlog")
  if ((errors)); then
    echo "-- the first failures ($errors lines; all in $tlog):"
    grep -m 40 -E "ERROR|FAILED|threw" "$tlog"
  fi
  if judge tests "$tlog"; then
    pairs=$(sed -E 's/.*backend [a-z-]+: ([0-9]+) \(op, dtype\) pairs.*/\1/' <<<"$summary")
    fails=$(sed -nE 's/.*, ([0-9]+) failures\).*/\1/p' <<<"$summary")
    note="backend $want: ${pairs:-0} pairs, ${fails:-?} failures; cuDNN declines $declines, naive GEMMs $naive"
    if [ -z "$summary" ]; then
      why=$(grep -m1 -o "backend $want: skipped: .*" "$tlog" || true)
      fail tests "the $want backend ran 0 (op, dtype) pairs: ${why:-no summary line for it in $tlog}"
      row tests failed "$step_s" "backend $want: 0 pairs"
    elif ((pairs == 0)) || [ "${fails:-x}" != 0 ]; then
      fail tests "backend $want: $pairs (op, dtype) pairs with ${fails:-?} failures (see $tlog)"
      row tests failed "$step_s" "$note"
    elif ((step_rc != 0)) || ! grep -q "Status: SUCCESS" "$tlog"; then
      fail tests "the tests failed (exit $step_rc; see $tlog)"
      row tests failed "$step_s" "$note"
    elif [ "$mode" = gpu ] && grep -q "cuda device test: skipped" "$tlog"; then
      fail tests "the CUDA device test skipped: $(grep -m1 -o 'cuda device test: skipped.*' "$tlog")"
      row tests failed "$step_s" "$note"
    else
      row tests passed "$step_s" "$note"
    fi
  fi
else
  row tests "not selected" 0 ""
fi

# ---- 3. sma -------------------------------------------------------------------------------------
section "3. ResNet-20 with SMA, 2 learners: $devices against the CPU"
if selected sma; then
  sma_steps=300
  [ "$mode" = cpu ] && sma_steps=60
  loss_of() {  # the first or last eval's train loss and test accuracy in a metrics file
    "$py" -c "import json,sys; r=[json.loads(l) for l in open(sys.argv[1]) if '\"eval\"' in l]; print(r[0]['loss'] if len(sys.argv)>2 else r[-1]['loss'], r[-1]['accuracy'])" "$@"
  }
  sma() {  # the data, the model, then each device's run, inside one time limit
    "$py" - "$work" <<'PY' || { echo "sma: exporting ResNet-20 / writing the data failed"; return 3; }
import sys; sys.path.insert(0, "tools/gpu"); import bench
w = sys.argv[1]; bench.export("resnet20", w + "/resnet20.onnx"); bench.write_cifar(w + "/cifar", 10000, 512)
PY
    local d
    for d in $devices cpu; do
      [ "$d" = cpu ] && [ "$devices" = cpu ] && [ -f "$logs/sma-cpu.jsonl" ] && continue
      rm -f "$logs/sma-$d.jsonl"
      echo "sma: cb-train on $d"
      CB_CUDA_STRICT=1 "$bin/cb-train" "$work/resnet20.onnx" --data "$work/cifar" --devices "$d" \
        --learners 2 --batch-size 16 --steps $sma_steps --evals-per-epoch 20 --test-limit 256 \
        --seed 1 --augment none --metrics "$logs/sma-$d.jsonl" >"$logs/sma-$d.log" 2>&1 ||
        { echo "sma: cb-train on $d failed: $(grep -m1 -iE 'error|crossbow:' "$logs/sma-$d.log")"; return 2; }
      grep -E "^sma|^done" "$logs/sma-$d.log"
    done
    [ "$devices" = cpu ] && return 0
    # The same run in bf16 (cuDNN's bf16 convolutions, cuBLASLt's bf16 GEMMs).
    rm -f "$logs/sma-bf16.jsonl"
    echo "sma: cb-train on $devices --precision bf16"
    CB_CUDA_STRICT=1 "$bin/cb-train" "$work/resnet20.onnx" --data "$work/cifar" --devices "$devices" \
      --learners 2 --batch-size 16 --steps $sma_steps --evals-per-epoch 20 --test-limit 256 \
      --seed 1 --augment none --precision bf16 --metrics "$logs/sma-bf16.jsonl" \
      >"$logs/sma-bf16.log" 2>&1 ||
      { echo "sma: cb-train on $devices --precision bf16 failed: $(grep -m1 -iE 'error|crossbow:' "$logs/sma-bf16.log")"; return 2; }
    grep -E "^sma|^done" "$logs/sma-bf16.log"
  }
  export -f sma
  export work logs devices bin py sma_steps
  run_step sma "$logs/sma.log" bash -c sma
  cat "$logs/sma.log"
  if judge sma "$logs/sma.log"; then
    if ((step_rc != 0)); then
      fail sma "$(grep -m1 '^sma: .*failed' "$logs/sma.log" || echo "exit $step_rc") (see $logs)"
      row sma failed "$step_s" "see sma-*.log"
    else
      read -r first _ < <(loss_of "$logs/sma-$devices.jsonl" first)
      read -r last acc < <(loss_of "$logs/sma-$devices.jsonl")
      read -r cpu_last cpu_acc < <(loss_of "$logs/sma-cpu.jsonl")
      note="loss on $devices $first -> $last (accuracy $acc); CPU -> $cpu_last (accuracy $cpu_acc)"
      bf16_last=$last
      if [ -f "$logs/sma-bf16.jsonl" ]; then
        read -r bf16_last bf16_acc < <(loss_of "$logs/sma-bf16.jsonl")
        note="$note; bf16 on $devices -> $bf16_last (accuracy $bf16_acc)"
      fi
      echo "$note"
      if "$py" -c "import sys; f,l,c,b=map(float,sys.argv[1:]); sys.exit(0 if l < 0.8*f and abs(l-c) <= 0.25*max(c,0.1) and abs(b-c) <= 0.25*max(c,0.1) else 1)" \
        "$first" "$last" "$cpu_last" "$bf16_last"; then
        row sma passed "$step_s" "$note"
      else
        fail sma "the loss did not fall as on the CPU: $note"
        row sma failed "$step_s" "$note"
      fi
    fi
  fi
else
  row sma "not selected" 0 ""
fi

# ---- 4. bench -----------------------------------------------------------------------------------
section "4. images/s: cb-train against PyTorch"
if selected bench; then
  blim=$(limit_of bench)
  blim=$((blim > 20 ? blim - 10 : 1))  # bench.py stops its own runs first, then prints its table
  if [ "$mode" = gpu ]; then
    run_step bench "$logs/bench.log" env PYTHONUNBUFFERED=1 "$py" tools/gpu/bench.py \
      --cb-bin "$bin" --work "$work" --logs "$logs" --device cuda --time-limit $blim
  else
    # PyTorch's fair CPU configuration (BUILD-NOTES.md): one OpenBLAS thread, no page-fault churn.
    run_step bench "$logs/bench.log" env PYTHONUNBUFFERED=1 OPENBLAS_NUM_THREADS=1 \
      MALLOC_MMAP_THRESHOLD_=1000000000 MALLOC_TRIM_THRESHOLD_=1000000000000 \
      "$py" tools/gpu/bench.py --cb-bin "$bin" --work "$work" --logs "$logs" --device cpu \
      --configs resnet20:16 --steps resnet20:60 --torch-steps 3 --learners 1 \
      --time-limit $blim
  fi
  grep -E "^\||^TF32|^\(|^  |^bench:" "$logs/bench.log"
  if judge bench "$logs/bench.log"; then
    if ((step_rc != 0)); then
      fail bench "exit $step_rc: $(grep -m1 -E '^bench:|Error|error' "$logs/bench.log")"
      row bench failed "$step_s" "see bench.log"
    else
      row bench passed "$step_s" "$(grep -c '^| resnet' "$logs/bench.log") configurations measured"
    fi
  fi
else
  row bench "not selected" 0 ""
fi

((${#failed[@]} == 0))
