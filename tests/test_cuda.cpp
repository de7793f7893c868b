// The CUDA backend outside the op harness (which checks every kernel: test_backend_ops.cpp):
//   - without a GPU (or without the toolkit) every tool says so, naming the reason, and exits 2;
//   - with a GPU: the Device's memory, copies, streams and events, its out-of-memory error, and
//     SMA on one GPU with 2 learners against the same run on the CPU.
// GPU parts skip with the reason printed where no GPU is found. On the GPU machine the test binary
// may run from another checkout: CB_TEST_SOURCE_DIR / CB_TEST_BINARY_DIR override the paths.
#include <doctest/doctest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cpu/cpu_device.h"
#include "kernels/cuda/cuda_device.h"
#include "runtime/collective.h"
#include "runtime/device.h"
#include "runtime/ops/params.h"
#include "session/devices.h"
#include "tests/test_util.h"

using namespace cb;
namespace fs = std::filesystem;

namespace {

std::string dir_of(const char* env, const char* built) {
  const char* v = std::getenv(env);
  return v && *v ? v : built;
}
std::string source_dir() { return dir_of("CB_TEST_SOURCE_DIR", CB_SOURCE_DIR); }
std::string binary_dir() { return dir_of("CB_TEST_BINARY_DIR", CB_BINARY_DIR); }

struct Run {
  int rc = -1;
  std::string out;
};
Run run(const std::string& cmd, const std::string& log) {
  const int rc = std::system((cmd + " > " + log + " 2>&1").c_str());
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, test::read_text(log)};
}

// The GPU count, or 0 with a MESSAGE saying why the GPU part is skipped.
int gpus_or_skip(const char* what) {
  std::string why;
  const int n = cuda_device_count(&why);
  if (n == 0) MESSAGE(fmt::format("{}: skipped: {}", what, why));
  return n;
}

}  // namespace

TEST_CASE("cuda: without a GPU, --devices cuda and --device cuda say so and fail") {
  std::string why;
  if (cuda_device_count(&why) > 0) {
    MESSAGE("a GPU is present: the no-GPU messages are not checked here");
    return;
  }
  test::TempDir tmp("cuda");
  const std::string model = source_dir() + "/models/lenet5_op17.onnx";
  const std::string expect = cuda_backend_built() ? "no GPU found" : "without the CUDA toolkit";
  struct Tool {
    std::string cmd;
    int rc;  // each tool's exit status for bad input
  };
  for (const Tool& t :
       {Tool{binary_dir() + "/cb-train " + model + " --data /nonexistent --devices cuda", 2},
        Tool{binary_dir() + "/cb-train " + model + " --data /nonexistent --devices cuda:0,1", 2},
        Tool{binary_dir() + "/cb-run " + model + " --input input=random --device cuda:0", 1},
        Tool{binary_dir() + "/cb-inspect " + model + " --memory --device cuda", 1}}) {
    CAPTURE(t.cmd);
    const Run r = run(t.cmd, tmp.path.string() + "/log");
    CAPTURE(r.out);
    CHECK(r.rc == t.rc);
    CHECK(test::contains(r.out, expect));
  }
  // A malformed spec is named with the choices, GPU or not.
  const Run r = run(binary_dir() + "/cb-train " + model + " --data /x --devices cuda:zero",
                    tmp.path.string() + "/log");
  CHECK(r.rc == 2);
  CHECK(test::contains(r.out, "cuda:I,J"));
  CHECK(test::error_of([] { cuda_devices_of("gpu"); }).find("expected cuda") != std::string::npos);
}

// One GPU has nothing to reduce across devices: it gets the in-process collective, never NCCL
// (NCCL would need a CUDA device here and would fail on this CPU one).
TEST_CASE("cuda: one device of --devices cuda gets the in-process collective, not NCCL") {
  std::vector<std::unique_ptr<Device>> devs;
  devs.push_back(make_cpu_device(1));
  std::vector<std::unique_ptr<Collective>> c = make_collectives("cuda:0", devs);
  REQUIRE(c.size() == 1);
  CHECK(c[0]->size() == 1);
  float x[3] = {1, 2, 3};
  c[0]->allreduce_sum(*devs[0], kSyncStream, x, 3);  // one rank: nothing to add
  CHECK(x[2] == 3.f);
  // Two devices of a CUDA spec go to NCCL, which refuses devices that are not GPUs (or, in a
  // build without the toolkit, says it is absent).
  devs.push_back(make_cpu_device(1));
  CHECK(test::contains(test::error_of([&] { make_collectives("cuda:0,1", devs); }),
                       cuda_backend_built() ? "is not a CUDA device" : "NCCL"));
}

// Under mpirun the GPUs of every process join one NCCL communicator, bootstrapped from an id one
// process makes (nccl_unique_id) and hands to all (over MPI). Here the processes are one: this
// process's GPUs take ranks 0..N-1 of such a communicator, set up by ncclCommInitRank as each
// process does, and sum with one driver thread per GPU as the trainer does.
TEST_CASE("cuda: a job-wide NCCL communicator from a broadcast id sums every GPU (GPU)") {
  const int n = gpus_or_skip("NCCL job communicator test");
  if (n == 0) {
    // Without a GPU the set-up is refused by NCCL or the build, with a message, not a crash.
    std::vector<std::unique_ptr<Device>> devs;
    devs.push_back(make_cpu_device(1));
    CHECK(!test::error_of([&] {
             make_nccl_collectives({devs[0].get()}, NcclJob{std::string(3, 'x'), 0, 1},
                                   make_shared_memory_collectives(1));
           }).empty());
    return;
  }
  std::vector<std::unique_ptr<Device>> devs;
  std::vector<Device*> raw;
  for (int g = 0; g < n; ++g) {
    devs.push_back(make_cuda_device(g));
    raw.push_back(devs.back().get());
  }
  const NcclJob job{nccl_unique_id(), 0, n};
  std::vector<std::unique_ptr<Collective>> c =
      make_nccl_collectives(raw, job, make_shared_memory_collectives(n));
  REQUIRE(static_cast<int>(c.size()) == n);
  const int64_t len = 1000;
  std::vector<std::unique_ptr<DeviceBuffer>> bufs;
  for (int g = 0; g < n; ++g) {
    bufs.push_back(std::make_unique<DeviceBuffer>(*devs[g], len * sizeof(float)));
    std::vector<float> h(len);
    for (int64_t i = 0; i < len; ++i) h[i] = static_cast<float>((g + 1) * i % 97);
    devs[g]->upload(bufs[g]->get(), h.data(), len * sizeof(float));
    devs[g]->synchronize();
  }
  std::vector<std::thread> th;
  std::vector<std::string> errors(n);
  std::vector<std::vector<double>> agreed(n);
  for (int g = 0; g < n; ++g)
    th.emplace_back([&, g] {
      errors[g] = test::error_of([&] {
        CHECK(c[g]->rank() == g);
        c[g]->allreduce_sum(*devs[g], kSyncStream, static_cast<float*>(bufs[g]->get()), len);
        devs[g]->synchronize(kSyncStream);
        agreed[g] = {static_cast<double>(g)};
        c[g]->agree(agreed[g], ReduceOp::Max);
      });
    });
  for (auto& t : th) t.join();
  for (int g = 0; g < n; ++g) {
    CAPTURE(g);
    CHECK(errors[g].empty());
    std::vector<float> h(len);
    devs[g]->download(h.data(), bufs[g]->get(), len * sizeof(float));
    for (int64_t i = 0; i < len; i += 37) {
      float want = 0;
      for (int q = 0; q < n; ++q) want += static_cast<float>((q + 1) * i % 97);
      CHECK(h[i] == want);
    }
    CHECK(agreed[g][0] == n - 1);
  }
}

TEST_CASE("cuda: device memory, copies, streams, events and the out-of-memory error (GPU)") {
  if (gpus_or_skip("cuda device test") == 0) return;
  auto dev = make_cuda_device(0);
  const DeviceCaps c = dev->caps();
  CHECK(c.name == "cuda:0");
  CHECK_FALSE(c.host_memory);
  CHECK(c.memory_total > 0);
  // Zero-filled memory; a large upload (over the staging chunk) and download round-trip.
  const size_t n = (size_t{20} << 20) / sizeof(float) + 7;
  DeviceBuffer b(*dev, n * sizeof(float));
  std::vector<float> host(n, 1.f);
  dev->download(host.data(), b.get(), n * sizeof(float));
  CHECK(host[0] == 0.f);
  CHECK(host[n - 1] == 0.f);
  for (size_t i = 0; i < n; ++i) host[i] = static_cast<float>(i % 1000) * 0.5f;
  const Stream s = dev->create_stream(0, 2);
  dev->upload(b.get(), host.data(), n * sizeof(float), s);
  // A kernel on the learner stream, ordered before the sync stream by an event.
  ops::SmaRowSumParams p{2.f};
  DeviceBuffer out(*dev, n * sizeof(float));
  KernelArgs a;
  std::any params = p;
  a.params = &params;
  a.in = {flat_f32(b.get(), static_cast<int64_t>(n))};
  a.out = {flat_f32(out.get(), static_cast<int64_t>(n))};
  REQUIRE(dev->supports(OpKind::SmaRowSum, DType::F32));
  dev->launch(OpKind::SmaRowSum, a, s);
  const Event e = dev->record_event(s);
  dev->wait_event(kSyncStream, e);
  std::vector<float> back(n);
  dev->download(back.data(), out.get(), n * sizeof(float));
  for (size_t i : {size_t{0}, size_t{1}, n / 2, n - 1}) CHECK(back[i] == 2.f * host[i]);
  dev->synchronize(s);
  dev->destroy_stream(s);
  // More than the GPU has: a cb::Error naming the device and the bytes.
  const std::string err = test::error_of([&] { DeviceBuffer huge(*dev, size_t{1} << 50); });
  CHECK(test::contains(err, "out of memory on cuda:0"));
}

TEST_CASE("cuda: SMA on one GPU with 2 learners trains LeNet-5 as the CPU does (GPU)") {
  if (gpus_or_skip("cuda training test") == 0) return;
  const std::string data = "/usr/share/datasets/fashion-mnist";
  if (!test::need(fs::path(data) / "train-images-idx3-ubyte.gz",
                  "Fashion-MNIST (./setup.sh installs dataset-fashion-mnist)"))
    return;
  test::TempDir tmp("cuda");
  auto train = [&](const std::string& devices) {
    const Run r =
        run(fmt::format("{}/cb-train {}/models/lenet5_op17.onnx --data {} --devices {} "
                        "--learners 2 --steps 300 --batch-size 16 --test-limit 2000 "
                        "--seed 1 --metrics {}/{}.jsonl",
                        binary_dir(), source_dir(), data, devices, tmp.path.string(), devices),
            tmp.path.string() + "/log");
    CAPTURE(r.out);
    REQUIRE(r.rc == 0);
    // The last evaluation's accuracy.
    const std::string m = test::read_text(fmt::format("{}/{}.jsonl", tmp.path.string(), devices));
    const size_t at = m.rfind("\"accuracy\":");
    REQUIRE(at != std::string::npos);
    return std::stod(m.substr(at + 11));
  };
  const double cpu = train("cpu"), gpu = train("cuda:0");
  MESSAGE(
      fmt::format("LeNet-5, 2 learners, 300 steps: accuracy {:.3f} on the CPU, {:.3f} on "
                  "cuda:0",
                  cpu, gpu));
  CHECK(gpu > 0.6);
  CHECK(std::abs(gpu - cpu) < 0.05);
}
