#!/usr/bin/env bash
# Replaces the saved corpus tests/fuzz_corpus/<target>/ with a minimal one: libFuzzer's -merge=1,
# into a fresh folder, of the files up to 16 KB of what tools/fuzz/run.sh grew in
# build-fuzz/corpus/<target>/ and of the current saved corpus; then, for the importer, of the
# zoo's graphs with their weights as inputs (weights_as_inputs.py; up to 45 KB) for what they add.
# Bigger files stay out: a zoo model with its weights adds megabytes and little else, and the
# fuzzer's mutants of the big graphs are near-copies. Kept for coverage edges only
# (-use_counters=0: hit-count features about double the size for the same edges). The saved
# corpus seeds run.sh and is what the fuzz smoke test (tests/test_fuzz_smoke.cpp) mutates in
# every test run; keep it to a few hundred KB in all.
#   tools/fuzz/save_corpus.sh [TARGET...]     (default: every target; build-fuzz/ must be built)
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ $# -gt 0 ]; then targets=("$@"); else targets=(importer image data checkpoint npy); fi
B=build-fuzz
for t in "${targets[@]}"; do
  src=$(mktemp -d)
  out=$(mktemp -d)
  merge() { $B/cb-fuzz-"$t" -merge=1 -use_counters=0 -timeout=20 -rss_limit_mb=4096 "$out" "$@" 2>&1 |
    grep 'MERGE-OUTER: .* new files'; }
  find $B/corpus/"$t" tests/fuzz_corpus/"$t" -type f -size -17k -exec cp -n {} "$src"/ \; 2>/dev/null || true
  merge "$src"
  if [ "$t" = importer ]; then
    rm -rf "$src"/*
    /usr/bin/python3 tools/fuzz/weights_as_inputs.py "$src" models/*.onnx
    merge "$src"
  fi
  rm -rf tests/fuzz_corpus/"$t"
  mkdir -p tests/fuzz_corpus
  mv "$out" tests/fuzz_corpus/"$t"
  chmod 755 tests/fuzz_corpus/"$t"
  rm -rf "$src"
  echo "tests/fuzz_corpus/$t: $(ls tests/fuzz_corpus/"$t" | wc -l) files, $(du -sh --apparent-size tests/fuzz_corpus/"$t" | cut -f1)"
done
