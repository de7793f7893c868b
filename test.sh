#!/usr/bin/env bash
# The whole test suite: set up and build as ./setup.sh does, then run every test with CTest.
set -euo pipefail
cd "$(dirname "$0")"
./setup.sh --build-only
ctest --test-dir build --output-on-failure -j"$(nproc)" "$@"
