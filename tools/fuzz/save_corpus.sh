#!/usr/bin/env bash
# Replaces the saved corpus tests/fuzz_corpus/<target>/ with a minimal one: libFuzzer's -merge=1
# of what tools/fuzz/run.sh grew in build-fuzz/corpus/<target>/ together with the current saved
# corpus, into a fresh folder; files up to 40 KB only (a zoo model with its weights adds
# megabytes and little else; its graph with the weights as inputs, weights_as_inputs.py, is in),
# kept for their coverage edges only (-use_counters=0: hit-count features about double the size
# for the same edges). The saved corpus seeds run.sh and is what the fuzz smoke test
# (tests/test_fuzz_smoke.cpp) mutates in every test run; keep it to a few hundred KB in all.
#   tools/fuzz/save_corpus.sh [TARGET...]     (default: every target; build-fuzz/ must be built)
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ $# -gt 0 ]; then targets=("$@"); else targets=(importer image data checkpoint npy); fi
B=build-fuzz
for t in "${targets[@]}"; do
  src=$(mktemp -d)
  out=$(mktemp -d)
  find $B/corpus/"$t" tests/fuzz_corpus/"$t" -type f -size -41k -exec cp -n {} "$src"/ \; 2>/dev/null || true
  $B/cb-fuzz-"$t" -merge=1 -use_counters=0 -timeout=20 -rss_limit_mb=4096 "$out" "$src" 2>&1 | grep 'MERGE-OUTER: .* new files'
  rm -rf tests/fuzz_corpus/"$t"
  mkdir -p tests/fuzz_corpus
  mv "$out" tests/fuzz_corpus/"$t"
  chmod 755 tests/fuzz_corpus/"$t"
  rm -rf "$src"
  echo "tests/fuzz_corpus/$t: $(ls tests/fuzz_corpus/"$t" | wc -l) files, $(du -sh --apparent-size tests/fuzz_corpus/"$t" | cut -f1)"
done
