#!/bin/sh
# The long soak of cb-train's checkpoints, for manual runs (CI runs the short one: test_soak).
# tests/test_soak.cpp with CB_SOAK_LONG=1: 100 SIGTERM/--resume cycles and 200 SIGKILLs in
# checkpoint writes, on 3 learners of LeNet-5 and Fashion-MNIST (the short one: 10 and 20, on
# the tabular regressor). Takes about 10 minutes on 2 cores.
#   tools/soak.sh [BUILD [DOCTEST-FLAGS...]]   BUILD: the build folder (default build), with
#                                               cb-tests, cb-train and cb-export built
# Environment: CB_SOAK_SEED=N repeats a run's moments (each run prints its seed);
# CB_SOAK_TERM_CYCLES, CB_SOAK_KILLS change the counts (CB_SOAK_KILLS=0 for only the SIGTERMs).
set -eu
build=${1:-build}
[ $# -gt 0 ] && shift
exec env CB_SOAK_LONG=1 "$build/tests/cb-tests" --source-file='*test_soak.cpp' \
  --duration=true "$@"
