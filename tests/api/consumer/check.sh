#!/usr/bin/env bash
# check.sh BUILD_DIR [CMAKE]: installs the build into BUILD_DIR/api-install, copies this folder
# outside the source tree, builds it against the installed package (find_package(crossbow)) and
# runs it: LeNet-5 trained from in-memory Fashion-MNIST arrays for one epoch must reach cb-train's
# accuracy with the same options (within half a point, and >= 0.84).
set -euo pipefail
build=$(cd "$1" && pwd)
cmake=${2:-cmake}
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../../.." && pwd)
data=/usr/share/datasets/fashion-mnist
if [ ! -d "$data" ]; then
  [ -n "${CI:-}" ] && { echo "api_package: missing $data"; exit 1; }
  echo "api_package: skipped: $data is missing"
  exit 0
fi
prefix=$build/api-install
work=$build/api-consumer
rm -rf "$prefix" "$work"
mkdir -p "$work"
"$cmake" --install "$build" --prefix "$prefix" >/dev/null
cp "$here/CMakeLists.txt" "$here/main.cpp" "$work/"
"$cmake" -S "$work" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
"$cmake" --build "$work/build"
# The program must not reach into the source tree or the build tree's headers.
if grep -q -- "-I$src\|-isystem $src" "$work/build/compile_commands.json" 2>/dev/null; then
  echo "api_package: the consumer was compiled against the source tree"
  exit 1
fi
api=$("$work/build/train_lenet" "$src/models/lenet5_op17.onnx" "$data" | tee "$work/api.log" |
  awk '/^accuracy/ {print $2}')
"$prefix/bin/cb-train" "$src/models/lenet5_op17.onnx" --data "$data" --epochs 1 --learners 2 \
  --threads 1 --seed 0 --metrics "$work/cli.jsonl" >"$work/cli.log"
cli=$(/usr/bin/python3 -c "import json,sys; print([json.loads(l) for l in open(sys.argv[1])][-1]['test_accuracy'])" "$work/cli.jsonl")
echo "api_package: accuracy from the installed API $api, cb-train $cli"
/usr/bin/python3 -c "import sys; a, c = map(float, sys.argv[1:]); sys.exit(0 if a >= 0.84 and abs(a - c) <= 0.005 else 1)" "$api" "$cli" ||
  { echo "api_package: FAILED (needs >= 0.84 and within 0.005 of cb-train)"; exit 1; }
