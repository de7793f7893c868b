// cb-train --deterministic (CudaOptions::deterministic): the three CUDA gradients that by default
// scatter with atomic adds, whose order (and so the float sums) changes from run to run, gather
// instead in the CPU kernels' order: GatherGrad with many indices over narrow columns, PadGrad
// (reflect, edge) and ResizeGrad. Checked on the host-run build of the CUDA kernels, which runs a
// kernel's threads one after another: once in index order and once in reverse
// (CudaOptions::host_run_reverse), two different orders of the same threads. With the option set
// both equal the CPU bit for bit; without it the reversed order changes the scattered sums (so
// the check can see an order-dependent kernel). On a GPU, where there is one: two runs with the
// option are bit-identical, and close to the CPU (nvcc contracts a * b + c, so the last bit may
// differ from the CPU's). cb-train documents the flag.
#include <doctest/doctest.h>
#include <sys/wait.h>

#include <any>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_device.h"
#include "kernels/cuda/cuda_device.h"
#include "runtime/device.h"
#include "runtime/error.h"
#include "runtime/ops/params.h"
#include "tests/test_util.h"

using namespace cb;

namespace {

// One gradient launch: its params, the dY input (random, seeded) and the dX dims.
struct GradCase {
  std::string name;
  OpKind op;
  std::any params;
  std::vector<int64_t> dy, dx;
  std::vector<int64_t> indices = {};  // GatherGrad's (i64)
  bool overlaps = true;  // dX elements sum several dY elements (the scatter's order shows)
};

std::vector<unsigned char> random_bytes(DType t, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<unsigned char> b(static_cast<size_t>(n) * dtype_size(t));
  for (int64_t i = 0; i < n; ++i) {
    if (t == DType::F64) {
      const double v = u(rng);
      std::memcpy(b.data() + i * 8, &v, 8);
    } else {
      const auto v = static_cast<float>(u(rng));
      std::memcpy(b.data() + i * 4, &v, 4);
    }
  }
  return b;
}

int64_t numel(const std::vector<int64_t>& d) {
  int64_t n = 1;
  for (int64_t x : d) n *= x;
  return n;
}

// dX of `c` on `dev` (dtype t), as bytes.
std::vector<unsigned char> grad_on(Device& dev, const GradCase& c, DType t) {
  const std::vector<unsigned char> dy = random_bytes(t, numel(c.dy), 7);
  std::vector<DeviceBuffer> keep;
  KernelArgs a;
  a.params = &c.params;
  keep.emplace_back(dev, dy.size());
  dev.upload(keep.back().get(), dy.data(), dy.size());
  a.in.push_back({keep.back().get(), t, c.dy});
  if (!c.indices.empty()) {
    const size_t bytes = c.indices.size() * sizeof(int64_t);
    keep.emplace_back(dev, bytes);
    dev.upload(keep.back().get(), c.indices.data(), bytes);
    a.in.push_back({keep.back().get(), DType::I64, {static_cast<int64_t>(c.indices.size())}});
  }
  std::vector<unsigned char> dx(static_cast<size_t>(numel(c.dx)) * dtype_size(t), 0xCD);
  keep.emplace_back(dev, dx.size());
  dev.upload(keep.back().get(), dx.data(), dx.size());  // poisoned: every element must be written
  a.out.push_back({keep.back().get(), t, c.dx});
  if (const size_t ws = dev.workspace_bytes(c.op, a)) {
    keep.emplace_back(dev, ws);
    a.workspace = keep.back().get();
    a.workspace_bytes = ws;
  }
  dev.launch(c.op, a);
  dev.synchronize();
  dev.download(dx.data(), a.out[0].data, dx.size());
  dev.synchronize();
  return dx;
}

std::vector<GradCase> cases() {
  std::vector<GradCase> v;
  // GatherGrad: 300 indices into 7 rows of 5-wide columns (the scatter path by default).
  {
    GradCase c{"GatherGrad, 300 indices, 7 rows",
               OpKind::GatherGrad,
               ops::GatherParams{1},
               {3, 300, 5},
               {3, 7, 5}};
    std::mt19937 rng(3);
    std::uniform_int_distribution<int64_t> k(-7, 6);
    for (int i = 0; i < 300; ++i) c.indices.push_back(k(rng));
    v.push_back(c);
  }
  // PadGrad: reflect and edge with pads wider than the dims (many copies of an element).
  auto pad = [&](const char* name, ops::PadParams::Mode mode, std::vector<int64_t> dx,
                 std::vector<int64_t> pads) {
    ops::PadParams p;
    p.mode = mode;
    p.pads = PadList(pads.begin(), pads.end());
    std::vector<int64_t> dy = dx;
    for (size_t d = 0; d < dx.size(); ++d) dy[d] += pads[d] + pads[d + dx.size()];
    v.push_back({name, OpKind::PadGrad, p, dy, dx});
  };
  pad("PadGrad reflect", ops::PadParams::Mode::Reflect, {2, 3, 4, 5}, {0, 1, 7, 9, 1, 0, 6, 11});
  pad("PadGrad edge", ops::PadParams::Mode::Edge, {2, 3, 4, 5}, {1, 0, 9, 8, 0, 2, 10, 7});
  // ResizeGrad: up and down, nearest, linear and cubic.
  using RP = ops::ResizeParams;
  auto resize = [&](const char* name, RP::Mode mode, RP::Coord coord, std::vector<int64_t> dx,
                    std::vector<int64_t> dy, bool exclude = false, bool overlaps = true) {
    RP p;
    p.mode = mode;
    p.coord = coord;
    p.exclude_outside = exclude;
    for (size_t d = 0; d < dx.size(); ++d)
      p.scales.push_back(static_cast<double>(dy[d]) / static_cast<double>(dx[d]));
    v.push_back({name, OpKind::ResizeGrad, p, dy, dx, {}, overlaps});
  };
  resize("ResizeGrad linear up", RP::Mode::Linear, RP::Coord::HalfPixel, {1, 2, 5, 6},
         {1, 2, 12, 15});
  resize("ResizeGrad cubic up", RP::Mode::Cubic, RP::Coord::HalfPixel, {2, 1, 4, 7},
         {2, 1, 10, 16});
  resize("ResizeGrad cubic exclude_outside", RP::Mode::Cubic, RP::Coord::AlignCorners, {1, 3, 6, 5},
         {1, 3, 13, 11}, true);
  resize("ResizeGrad nearest up", RP::Mode::Nearest, RP::Coord::Asymmetric, {2, 3, 5}, {2, 9, 17});
  resize("ResizeGrad linear down", RP::Mode::Linear, RP::Coord::AlignCorners, {1, 1, 9, 10},
         {1, 1, 4, 4}, false, false);  // a dX element gets one dY element at most
  return v;
}

std::string first_difference(const std::vector<unsigned char>& got,
                             const std::vector<unsigned char>& want) {
  if (got.size() != want.size()) return "sizes differ";
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != want[i]) return fmt::format("byte {} differs", i);
  return "";
}

}  // namespace

TEST_CASE("deterministic: the scattering CUDA gradients equal the CPU's bit for bit") {
  auto cpu = make_cpu_device(2);
  CudaOptions det, det_rev, rev;
  det.deterministic = det_rev.deterministic = true;
  det_rev.host_run_reverse = rev.host_run_reverse = true;
  auto host = make_cuda_host_run_device(det);
  auto host_rev = make_cuda_host_run_device(det_rev);
  auto plain = make_cuda_host_run_device();
  auto plain_rev = make_cuda_host_run_device(rev);
  for (const GradCase& c : cases()) {
    for (DType t : {DType::F32, DType::F64}) {
      CAPTURE(c.name);
      CAPTURE(dtype_name(t));
      const std::vector<unsigned char> want = grad_on(*cpu, c, t);
      CHECK(first_difference(grad_on(*host, c, t), want) == "");
      CHECK(first_difference(grad_on(*host_rev, c, t), want) == "");
      // Without the option the scatter's order shows: the check is not vacuous.
      if (t == DType::F32 && c.overlaps)
        CHECK(first_difference(grad_on(*plain, c, t), grad_on(*plain_rev, c, t)) != "");
    }
  }
}

TEST_CASE("deterministic: two runs on a GPU are bit-identical (GPU)") {
  std::string why;
  if (cuda_device_count(&why) == 0) {
    MESSAGE("skipped: " << why);
    return;
  }
  auto cpu = make_cpu_device(2);
  CudaOptions det;
  det.deterministic = true;
  auto gpu = make_cuda_device(0, det);
  for (const GradCase& c : cases()) {
    CAPTURE(c.name);
    const std::vector<unsigned char> a = grad_on(*gpu, c, DType::F32),
                                     b = grad_on(*gpu, c, DType::F32);
    CHECK(first_difference(a, b) == "");
    const std::vector<unsigned char> want = grad_on(*cpu, c, DType::F32);
    REQUIRE(a.size() == want.size());
    for (size_t i = 0; i < a.size() / 4; ++i) {
      float x = 0, y = 0;
      std::memcpy(&x, a.data() + i * 4, 4);
      std::memcpy(&y, want.data() + i * 4, 4);
      CHECK(std::abs(x - y) <= 1e-5f * (1 + std::abs(y)));
    }
  }
}

TEST_CASE("deterministic: cb-train documents --deterministic") {
  test::TempDir tmp("det");
  const std::string log = tmp / "help.txt";
  const int rc =
      std::system(fmt::format("{}/cb-train --help > {} 2>&1", CB_BINARY_DIR, log).c_str());
  CHECK(WIFEXITED(rc));
  CHECK(WEXITSTATUS(rc) == 0);
  const std::string text = test::read_text(log);
  CHECK(test::contains(text, "--deterministic"));
  CHECK(test::contains(text, "CPU kernels are always deterministic"));
}
