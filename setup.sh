#!/usr/bin/env bash
# One command from a fresh Debian 12 machine: installs what is missing, builds crossbow, exports
# the model zoo, and runs the main job: one epoch of LeNet-5 on Fashion-MNIST with cb-train.
#   ./setup.sh               install + build + main job
#   ./setup.sh --build-only  install + build (+ zoo), no main job  (used by ./test.sh)
set -euo pipefail
cd "$(dirname "$0")"

PACKAGES=(
  cmake ninja-build g++ pkg-config
  libprotobuf-dev protobuf-compiler libonnx-dev libonnx-testdata
  libfmt-dev doctest-dev libcli11-dev nlohmann-json3-dev zlib1g-dev libopenblas-dev libdnnl-dev
  libturbojpeg0-dev libpng-dev  # JPEG (libjpeg-turbo) and PNG images
  ocl-icd-opencl-dev  # libdnnl-dev's CMake config needs OpenCL (only a Recommends of libdnnl-dev)
  python3-torch python3-torchvision python3-onnx python3-pil dataset-fashion-mnist
  libopenmpi-dev openmpi-bin  # cb-train under mpirun (several processes, several machines)
  chromium fonts-dejavu-core  # headless, for the tests of the HTML report and graph view
  pybind11-dev python3-pybind11 python3-dev  # the Python module (build/python)
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get install -y --no-install-recommends "${missing[@]}" ||
    { $SUDO apt-get update && $SUDO apt-get install -y --no-install-recommends "${missing[@]}"; }
fi

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"

# The big zoo models (> 2 MB) are not committed; export them (skipped when up to date).
if /usr/bin/python3 -c "import torch, torchvision, onnx" 2>/dev/null; then
  /usr/bin/python3 models/export_zoo.py --big
  /usr/bin/python3 models/training_fixtures.py >/dev/null  # golden training tests (~2 s)
  /usr/bin/python3 models/transformers.py >/dev/null  # GPT, BERT, ViT + AdamW golden fixtures (~10 s)
else
  echo "setup: python3-torch/torchvision missing: big zoo models not exported (tests skip them)"
fi

# A CIFAR-10-shaped data set (Fashion-MNIST padded to 3x32x32) for tests and ResNet runs; once.
if [ ! -d build/data/fmnist-cifar ]; then
  if /usr/bin/python3 -c "import numpy" 2>/dev/null && [ -d /usr/share/datasets/fashion-mnist ]; then
    mkdir -p build/data
    /usr/bin/python3 models/make_cifar_shaped.py --out build/data/fmnist-cifar --train 10000 --test 2000
  else
    echo "setup: numpy or Fashion-MNIST missing: build/data/fmnist-cifar not made (tests skip it)"
  fi
fi

[ "${1:-}" = "--build-only" ] && exit 0

echo
echo "== main job: cb-train LeNet-5 on Fashion-MNIST, one epoch =="
build/cb-train models/lenet5_op17.onnx --data /usr/share/datasets/fashion-mnist --epochs 1 \
  --output build/lenet5-trained.onnx
