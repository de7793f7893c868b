#!/usr/bin/env python3
"""tools/gpu/check.sh on this machine, with stand-in binaries (no GPU needed).

check.sh's GPU path runs once, on a lent GPU, and must not pass vacuously nor lose what a failure
says. Its steps are pointed at small shell scripts (CB_CHECK_BIN) that act as cb-tests does in
each situation, and its driver search at temporary folders (CB_CHECK_DRIVER_DIRS,
CB_CHECK_LDCONFIG, LD_LIBRARY_PATH). Each case checks the exit status and the one line that
says what happened:
  - a libcuda.so.1 found in a mount point, in LD_LIBRARY_PATH or through `ldconfig -p` reaches
    the binaries (CB_CUDA_LIBS), and the versions line is printed;
  - no GPU: the check stops at the probe with one line giving the reason;
  - the cuda backend skipped (0 pairs) while doctest says SUCCESS: the check fails;
  - a failing harness: the check fails with the failure count and the failures are printed;
  - a step past its time limit is stopped and reported, and the table is still printed;
  - $OUT receives the table and the logs.
"""
import os
import stat
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
CHECK = os.path.join(ROOT, "tools", "gpu", "check.sh")

VERSIONS = ("crossbow: cuda:0: Fake GPU (sm_90, 132 SMs, 139.8 GiB), driver 13.0, CUDA runtime "
            "13.0, cuDNN 9.19.0, cuBLASLt 13.1.0, NCCL 2.28.3, memory pool (cudaMallocAsync)")

# A stand-in for cb-tests: FAKE_MODE says how it behaves; it echoes CB_CUDA_LIBS as it got it.
FAKE_TESTS = r"""#!/usr/bin/env bash
echo "fake cb-tests: CB_CUDA_LIBS=$CB_CUDA_LIBS"
case "$*" in
  *"--test-case=cuda: device memory"*)
    if [ "$FAKE_MODE" = nogpu ]; then
      echo "MESSAGE: cuda device test: skipped: no GPU found: the NVIDIA driver reports no CUDA device"
      echo "[doctest] Status: SUCCESS!"; exit 0
    fi
    echo "@VERSIONS@" >&2
    echo "[doctest] Status: SUCCESS!"; exit 0 ;;
esac
case "$FAKE_MODE" in
  pass)
    echo "MESSAGE: backend cpu: 412 (op, dtype) pairs, 2972 cases checked (3 pairs excluded, 0 failures)"
    echo "MESSAGE: backend cuda: 410 (op, dtype) pairs, 2950 cases checked (5 pairs excluded, 0 failures)"
    echo "[doctest] Status: SUCCESS!"; exit 0 ;;
  skipped)
    echo "MESSAGE: backend cpu: 412 (op, dtype) pairs, 2972 cases checked (3 pairs excluded, 0 failures)"
    echo "MESSAGE: backend cuda: skipped: no GPU found: the NVIDIA driver reports no CUDA device"
    echo "[doctest] Status: SUCCESS!"; exit 0 ;;
  fail)
    for i in $(seq 1 200); do echo "ERROR: backend cuda: Conv f32 case $i: max error 1e-2"; done
    echo "MESSAGE: backend cuda: 410 (op, dtype) pairs, 2950 cases checked (5 pairs excluded, 200 failures)"
    echo "[doctest] Status: FAILURE!"; exit 1 ;;
  hang)
    echo "MESSAGE: backend cpu: 412 (op, dtype) pairs, 2972 cases checked (3 pairs excluded, 0 failures)"
    sleep 60; exit 0 ;;
esac
""".replace("@VERSIONS@", VERSIONS)


def make_bin(tmp):
    b = os.path.join(tmp, "bin")
    os.makedirs(b)
    for name, text in (("cb-tests", FAKE_TESTS), ("cb-train", "#!/bin/sh\nexit 0\n")):
        p = os.path.join(b, name)
        with open(p, "w") as f:
            f.write(text)
        os.chmod(p, os.stat(p).st_mode | stat.S_IEXEC)
    return b


def fake_driver(tmp, name):
    d = os.path.join(tmp, name)
    os.makedirs(d)
    open(os.path.join(d, "libcuda.so.1"), "w").close()
    return d


def run(tmp, mode, drivers=(), ld_path="", ldconfig="true", limits="", budget=120):
    out = os.path.join(tmp, "out")
    os.makedirs(out, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CB_")}
    env.update(FAKE_MODE=mode, CB_CHECK_BIN=make_bin(tmp) if not os.path.isdir(
        os.path.join(tmp, "bin")) else os.path.join(tmp, "bin"),
        CB_CHECK_WORK=os.path.join(tmp, "work"), CB_CHECK_STEPS="probe tests",
        CB_CHECK_DRIVER_DIRS=" ".join(drivers) or os.path.join(tmp, "none"),
        CB_CHECK_LDCONFIG=ldconfig, CB_CHECK_LIMITS=limits, CB_CHECK_BUDGET_S=str(budget),
        LD_LIBRARY_PATH=ld_path, OUT=out)
    t0 = time.monotonic()
    p = subprocess.run(["bash", CHECK], env=env, capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout + p.stderr, time.monotonic() - t0, out


failures = []


def expect(what, cond, out):
    if not cond:
        failures.append(what)
        print(f"FAIL: {what}\n---- output ----\n{out[-4000:]}\n----------------")
    else:
        print(f"ok: {what}")


def case(fn):
    with tempfile.TemporaryDirectory(prefix="cb-gpu-check-") as tmp:
        fn(tmp)


def driver_in_mount_point(tmp):
    d = fake_driver(tmp, "nvidia-lib64")
    rc, out, _, o = run(tmp, "pass", drivers=[d])
    expect("a driver in a mount point: exit 0", rc == 0, out)
    expect("the driver folder is named", f"driver (libcuda.so.1) in: {d}" in out, out)
    probe = open(os.path.join(tmp, "work", "logs", "probe.log")).read()
    expect("the driver folder reaches the binaries, first",
           f"fake cb-tests: CB_CUDA_LIBS={d}:" in probe, out + probe)
    expect("the versions line is printed", "cuda:0: Fake GPU" in out and "cuDNN 9.19.0" in out,
           out)
    expect("the table says the cuda backend ran",
           "backend cuda: 410 pairs, 0 failures" in out and "check: all passed" in out, out)
    expect("$OUT holds the table and the logs", os.path.exists(os.path.join(o, "summary.txt"))
           and os.path.exists(os.path.join(o, "check-logs.tar.gz")), out)


def driver_in_ld_library_path_and_ldconfig(tmp):
    a = fake_driver(tmp, "from-ld-path")
    c = fake_driver(tmp, "from-ldconfig")
    listing = os.path.join(tmp, "ldconfig.txt")
    with open(listing, "w") as f:
        f.write("3 libs found in cache `/etc/ld.so.cache'\n"
                f"\tlibcuda.so.1 (libc6,x86-64) => {c}/libcuda.so.1\n"
                "\tlibc.so.6 (libc6,x86-64) => /lib/x86_64-linux-gnu/libc.so.6\n")
    rc, out, _, _ = run(tmp, "pass", ld_path=a, ldconfig=f"cat {listing}")
    expect("LD_LIBRARY_PATH and ldconfig: exit 0", rc == 0, out)
    probe = open(os.path.join(tmp, "work", "logs", "probe.log")).read()
    line = [l for l in probe.splitlines() if l.startswith("fake cb-tests: CB_CUDA_LIBS=")]
    libs = line[0].split("=", 1)[1].split(":") if line else []
    expect("both driver folders reach the binaries, drivers first",
           libs[:2] == [a, c], out)


def no_gpu(tmp):
    rc, out, _, _ = run(tmp, "nogpu")
    expect("no GPU: exit 1", rc == 1, out)
    expect("no GPU: one clear line with the reason",
           "check: no GPU seen: no GPU found: the NVIDIA driver reports no CUDA device" in out, out)
    expect("no GPU: the tests step did not run", "backend cuda: 410" not in out, out)
    expect("no GPU: no driver found is said", "driver (libcuda.so.1) in: none of:" in out, out)


def skipped_backend(tmp):
    rc, out, _, _ = run(tmp, "skipped", drivers=[fake_driver(tmp, "drv")])
    expect("a skipped cuda backend fails although doctest says SUCCESS", rc == 1, out)
    expect("a skipped cuda backend: the message says 0 pairs and why",
           "check: FAILED: tests: the cuda backend ran 0 (op, dtype) pairs: backend cuda: "
           "skipped: no GPU found" in out, out)


def failing_step(tmp):
    rc, out, _, _ = run(tmp, "fail", drivers=[fake_driver(tmp, "drv")])
    expect("a failing harness: exit 1", rc == 1, out)
    expect("a failing harness: the failure count",
           "check: FAILED: tests: backend cuda: 410 (op, dtype) pairs with 200 failures" in out,
           out)
    expect("a failing harness: the first failures are printed, the log holds all",
           "Conv f32 case 1:" in out and "Conv f32 case 40:" in out and
           "Conv f32 case 41:" not in out, out)
    log = os.path.join(tmp, "work", "logs", "tests.log")
    expect("a failing harness: the whole log is kept",
           os.path.exists(log) and open(log).read().count("ERROR:") == 200, out)


def step_past_its_limit(tmp):
    rc, out, secs, o = run(tmp, "hang", drivers=[fake_driver(tmp, "drv")], limits="tests=3")
    expect("a hanging step: exit 1", rc == 1, out)
    expect("a hanging step: stopped at its limit, not after the command's own 60 s", secs < 30, out)
    expect("a hanging step: reported with its limit",
           "check: FAILED: tests: past its time limit of 3 s" in out, out)
    expect("a hanging step: the table is printed, with what the step printed so far",
           "| tests | time limit |" in out and "backend cpu: 412" in out, out)
    expect("a hanging step: $OUT still gets the table",
           "time limit" in open(os.path.join(o, "summary.txt")).read(), out)


def budget_spent(tmp):
    rc, out, _, _ = run(tmp, "pass", drivers=[fake_driver(tmp, "drv")], budget=3)
    expect("a spent budget: the steps left are not started and the check fails",
           rc == 1 and "not started: the run's budget of 3 s is spent" in out, out)


for fn in (driver_in_mount_point, driver_in_ld_library_path_and_ldconfig, no_gpu, skipped_backend,
           failing_step, step_past_its_limit, budget_spent):
    case(fn)
if failures:
    print(f"{len(failures)} failed: {failures}")
    sys.exit(1)
print("all passed")
