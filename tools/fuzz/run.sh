#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan + UBSan; CMake preset "fuzz", build-fuzz/) and runs
# each for SECONDS (default 60) on its corpus in build-fuzz/corpus/<target>/. A target's corpus
# is made the first time from files made here (zoo models, images PIL writes, real checkpoints,
# NumPy files, ...) and every time gains the saved corpus tests/fuzz_corpus/<target>/ and the
# saved finds tests/fuzz_regressions/<target>/. Crashes, leaks, timeouts and OOMs land in
# build-fuzz/crashes/<target>/ (the script then exits non-zero); each target's whole log in
# build-fuzz/logs/<target>.log. tools/fuzz/save_corpus.sh minimises a grown corpus back into
# tests/fuzz_corpus/.
#   tools/fuzz/run.sh [SECONDS] [TARGET...]     (targets: importer image data checkpoint npy)
set -euo pipefail
cd "$(dirname "$0")/../.."
secs="${1:-60}"
[ $# -gt 0 ] && shift
if [ $# -gt 0 ]; then targets=("$@"); else targets=(importer image data checkpoint npy); fi
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz --target "${targets[@]/#/cb-fuzz-}" cb-train cb-pack
B=build-fuzz
seed() {  # seed TARGET FILES...
  local d=$B/corpus/$1
  shift
  mkdir -p "$d"
  for f in "$@"; do [ -f "$f" ] && cp -n "$f" "$d/$(basename "$f")" 2>/dev/null || true; done
}
fresh() { [ ! -d $B/corpus/"$1" ]; }  # fresh TARGET: its corpus is still to be made
if fresh importer; then
  seed importer models/*_op13.onnx models/lenet5_op17.onnx models/mlp_op17.onnx tests/malformed/*.onnx
  # The zoo's graphs with their weights as graph inputs: every op at a few KB.
  /usr/bin/python3 tools/fuzz/weights_as_inputs.py $B/corpus/importer models/*.onnx || true
fi
if fresh image || fresh data; then
  # Images: Fashion-MNIST examples as PNG and JPEG, grey and RGB, from the test helpers' encoders.
  mkdir -p $B/corpus/image
  /usr/bin/python3 - "$B/corpus/image" <<'PY' || true
import sys
from PIL import Image
import numpy as np
d = sys.argv[1]
rng = np.random.default_rng(0)
for i, (w, h) in enumerate([(8, 8), (28, 28), (40, 30)]):
    a = (rng.random((h, w, 3)) * 255).astype(np.uint8)
    Image.fromarray(a).save(f"{d}/rgb{i}.jpg", quality=80)
    Image.fromarray(a).save(f"{d}/rgb{i}.png")
    Image.fromarray(a[:, :, 0]).save(f"{d}/grey{i}.jpg")
    Image.fromarray(a[:, :, 0]).save(f"{d}/grey{i}.png")
    Image.fromarray(np.dstack([a, a[:, :, :1]])).save(f"{d}/rgba{i}.png")
    Image.fromarray(a).convert("P").save(f"{d}/pal{i}.png")
    Image.fromarray(a).convert("CMYK").save(f"{d}/cmyk{i}.jpg")
    Image.fromarray(a).save(f"{d}/prog{i}.jpg", progressive=True)
PY
fi
if fresh data; then
  # Data: the first byte picks the kind (fuzz_data.cpp); the pack holds images of the above.
  mkdir -p $B/corpus/data
  printf '\x00\x00\x00\x08\x03\x00\x00\x00\x02\x00\x00\x00\x02\x00\x00\x00\x02\x01\x02\x03\x04\x05\x06\x07\x08' > $B/corpus/data/idx_images
  printf '\x01\x00\x00\x08\x01\x00\x00\x00\x04\x00\x01\x02\x03' > $B/corpus/data/idx_labels
  { printf '\x02'; head -c $((2 * 3073)) /dev/urandom; } > $B/corpus/data/cifar
  pk=$(mktemp -d)
  mkdir -p "$pk/a" "$pk/b"
  cp $B/corpus/image/rgb0.png "$pk/a/"; cp $B/corpus/image/grey1.png "$pk/a/"
  cp $B/corpus/image/rgb2.jpg "$pk/b/"; cp $B/corpus/image/pal0.png "$pk/b/"
  $B/cb-pack "$pk" --out "$pk.cbpack" --size 16 --val-split 0.5 >/dev/null 2>&1 &&
    { printf '\x03'; cat "$pk.cbpack"; } > $B/corpus/data/pack
  rm -rf "$pk" "$pk.cbpack"
fi
if fresh checkpoint; then
  # Checkpoints from real runs (SMA with the auto-tuner's lines; AdamW with a new head, a frozen
  # pattern and loss settings), each tensor cut to its first 4 floats with its offset and CRC
  # redone, as MANIFEST body (without its final lines) NUL tensors.bin 0x01 (fuzz_checkpoint.cpp).
  mkdir -p $B/corpus/checkpoint
  ck=$(mktemp -d)
  train() { $B/cb-train models/mlp_op17.onnx --data /usr/share/datasets/fashion-mnist \
    --test-limit 16 --checkpoint-dir "$ck/$1" "${@:2}" >/dev/null 2>&1 || true; }
  train sma --steps 4 --checkpoint-every 2 --learners auto --tuner-window 1 --tuner-windows 1 \
    --tuner-warmup 0
  train adamw --steps 2 --learners 1 --optimizer adamw --label-smoothing 0.1 --freeze '*bias*' \
    --num-classes 10
  /usr/bin/python3 - "$ck" $B/corpus/checkpoint <<'PY' || true
import glob, os, sys, zlib
for c in glob.glob(f"{sys.argv[1]}/*/ckpt-*"):
    bin_in = open(f"{c}/tensors.bin", "rb").read()
    body, bin_out = [], b""
    for line in open(f"{c}/MANIFEST").read().splitlines():
        f = line.split(" ")
        if f[0] in ("tensors_bin", "end"):
            continue
        if f[0] == "tensor":
            off, n = int(f[2]), min(int(f[3]), 4)
            t = bin_in[off:off + 4 * n]
            line = f"tensor {f[1]} {len(bin_out)} {n} {zlib.crc32(t):08x}"
            bin_out += t
        body.append(line)
    name = c.split("/")[-2] + "-" + os.path.basename(c)
    with open(f"{sys.argv[2]}/{name}", "wb") as o:
        o.write(("\n".join(body) + "\n").encode() + b"\0" + bin_out + b"\1")
PY
  rm -rf "$ck"
fi
if fresh npy; then
  # NumPy: small .npy and .npz files of each dtype, order and container NumPy writes.
  mkdir -p $B/corpus/npy
  /usr/bin/python3 - "$B/corpus/npy" <<'PY' || true
import sys
import numpy as np
d = sys.argv[1]
a = np.arange(12).reshape(3, 4)
arrs = {"f4": a.astype("<f4"), "f8be": a.astype(">f8"), "f2": a.astype("<f2"),
        "i2": a.astype("<i2"), "u8": a.astype("<u8"), "b": a % 2 == 0, "u1": a.astype("u1"),
        "fort": np.asfortranarray(a.astype("<i4")), "s": np.float32(3), "e": np.zeros((0, 3))}
for k, v in arrs.items():
    np.save(f"{d}/{k}.npy", v)
np.savez(f"{d}/stored.npz", x=arrs["f4"], y=arrs["i2"], ab=arrs["fort"])
np.savez_compressed(f"{d}/deflated.npz", x=arrs["f8be"], y=arrs["b"], e=arrs["e"])
with open(f"{d}/v2.npy", "wb") as f:
    np.lib.format.write_array(f, arrs["f4"], version=(2, 0))
import zipfile  # zip64 records everywhere (sizes, offsets, end record)
zipfile.ZIP64_LIMIT = zipfile.ZIP_FILECOUNT_LIMIT = 0
np.savez(f"{d}/zip64.npz", x=arrs["u1"], y=arrs["s"])
np.savez_compressed(f"{d}/zip64c.npz", x=arrs["f2"], y=arrs["e"])
PY
fi
# The saved corpus (tests/fuzz_corpus/<target>/, minimised) and the saved finds, every time: a
# new corpus starts from them and an old one gains what was added since.
for t in "${targets[@]}"; do seed "$t" tests/fuzz_corpus/"$t"/* tests/fuzz_regressions/"$t"/*; done
status=0
for t in "${targets[@]}"; do
  mkdir -p $B/crashes/$t $B/logs
  echo "== cb-fuzz-$t for ${secs}s ($(ls $B/corpus/$t | wc -l) corpus files)"
  # Shown: the first and last coverage lines, the final stats and any report.
  if ! $B/cb-fuzz-$t $B/corpus/$t -max_total_time="$secs" -timeout=20 -rss_limit_mb=4096 \
      -artifact_prefix=$B/crashes/$t/ -print_final_stats=1 >$B/logs/$t.log 2>&1; then
    status=1
  fi
  grep -E '^#[0-9]+[[:space:]]+(INITED|DONE)|^stat::|^SUMMARY|^==[0-9]+==ERROR|runtime error|^artifact_prefix' \
    $B/logs/$t.log || true
  [ -n "$(ls -A $B/crashes/$t)" ] && status=1
done
exit $status
