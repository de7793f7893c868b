// Bad input values on the CUDA backend: a Gather / GatherGrad index or a SoftmaxCrossEntropyLoss
// label out of range is a cb::Error on the CPU, raised by the kernel. The CUDA kernels cannot
// throw: they write zeros where they met the bad value and set the stream's error flag
// (kernels/cuda/device_error.h), which the device raises at its next synchronize() or download()
// with the CPU's message. Checked on the host-run build of the CUDA kernels (cuda-host, every
// machine) and on a GPU where there is one: the message equals the CPU's, the outputs hold
// defined values, the flag is cleared once raised, and valid inputs (negative indices that wrap,
// ignore_index labels) still agree with the CPU.
#include <doctest/doctest.h>

#include <any>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_device.h"
#include "kernels/cuda/cuda_device.h"
#include "runtime/device.h"
#include "runtime/error.h"
#include "runtime/ops/params.h"

using namespace cb;

namespace {

// A host tensor: dtype, dims and bytes.
struct HostTensor {
  DType dtype = DType::F32;
  std::vector<int64_t> dims;
  std::vector<unsigned char> bytes;

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    return n;
  }
  double at(int64_t i) const {
    if (dtype == DType::F64) return reinterpret_cast<const double*>(bytes.data())[i];
    return reinterpret_cast<const float*>(bytes.data())[i];
  }
};

template <class T>
HostTensor tensor(DType t, std::vector<int64_t> dims, const std::vector<T>& v) {
  HostTensor h{t, std::move(dims), {}};
  REQUIRE(static_cast<int64_t>(v.size()) == h.numel());
  h.bytes.resize(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(h.bytes.data(), v.data(), h.bytes.size());
  return h;
}
HostTensor f32(std::vector<int64_t> dims, const std::vector<float>& v) {
  return tensor(DType::F32, std::move(dims), v);
}
HostTensor i64(std::vector<int64_t> dims, const std::vector<int64_t>& v) {
  return tensor(DType::I64, std::move(dims), v);
}
HostTensor i32(std::vector<int64_t> dims, const std::vector<int32_t>& v) {
  return tensor(DType::I32, std::move(dims), v);
}
// Values 0.25 * (i % 13) - 1.5: exact in f32, a few of each.
HostTensor ramp(std::vector<int64_t> dims) {
  HostTensor h{DType::F32, std::move(dims), {}};
  std::vector<float> v(static_cast<size_t>(h.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.25f * static_cast<float>(i % 13) - 1.5f;
  return f32(h.dims, v);
}

struct Outcome {
  std::string error;             // the cb::Error raised ("" none)
  std::vector<HostTensor> outs;  // the outputs after it (NaN where never written)
};

// One launch of `op` on `dev`: inputs uploaded, f32 outputs of `out_dims` filled with NaN, the
// workspace the device asks for, then synchronize() (where a GPU raises) and the outputs read
// back (which must not raise again: the flag is cleared once raised).
Outcome run(Device& dev, OpKind op, const std::any& params, const std::vector<HostTensor>& in,
            const std::vector<std::vector<int64_t>>& out_dims) {
  std::vector<DeviceBuffer> keep;
  KernelArgs a;
  a.params = &params;
  for (const HostTensor& t : in) {
    keep.emplace_back(dev, std::max<size_t>(t.bytes.size(), 1));
    if (!t.bytes.empty()) dev.upload(keep.back().get(), t.bytes.data(), t.bytes.size());
    a.in.push_back({keep.back().get(), t.dtype, t.dims});
  }
  Outcome r;
  for (const auto& d : out_dims) {
    HostTensor t{DType::F32, d, {}};
    std::vector<float> nan(static_cast<size_t>(t.numel()), std::nanf(""));
    t = f32(d, nan);
    keep.emplace_back(dev, std::max<size_t>(t.bytes.size(), 1));
    if (!t.bytes.empty()) dev.upload(keep.back().get(), t.bytes.data(), t.bytes.size());
    a.out.push_back({keep.back().get(), t.dtype, t.dims});
    r.outs.push_back(t);
  }
  if (const size_t ws = dev.workspace_bytes(op, a)) {
    keep.emplace_back(dev, ws);
    a.workspace = keep.back().get();
    a.workspace_bytes = ws;
  }
  dev.synchronize();
  try {
    dev.launch(op, a);  // the CPU raises here
    dev.synchronize();  // a GPU (and the host-run device) here
  } catch (const Error& e) {
    r.error = e.what();
  }
  for (size_t i = 0; i < r.outs.size(); ++i)
    if (!r.outs[i].bytes.empty())
      dev.download(r.outs[i].bytes.data(), a.out[i].data, r.outs[i].bytes.size());
  dev.synchronize();
  return r;
}

// The devices under test: the host-run CUDA kernels, and the GPU where there is one.
std::vector<std::unique_ptr<Device>> cuda_devices(const CudaOptions& o = {}) {
  std::vector<std::unique_ptr<Device>> v;
  v.push_back(make_cuda_host_run_device(o));
  std::string why;
  static bool noted = false;
  if (cuda_device_count(&why) > 0)
    v.push_back(make_cuda_device(0, o));
  else if (!noted)
    MESSAGE("the GPU part is skipped: " << why);
  noted = true;
  return v;
}

std::any gather(int64_t axis) { return ops::GatherParams{axis}; }

std::any sce(ops::SoftmaxCrossEntropyLossParams::Reduction red) {
  ops::SoftmaxCrossEntropyLossParams p;
  p.reduction = red;
  p.ignore_index = -100;
  return p;
}

void check_close(const HostTensor& got, const HostTensor& want, double tol = 1e-6) {
  REQUIRE(got.dims == want.dims);
  for (int64_t i = 0; i < got.numel(); ++i) {
    CAPTURE(i);
    CHECK(std::abs(got.at(i) - want.at(i)) <= tol * (1 + std::abs(want.at(i))));
  }
}

}  // namespace

TEST_CASE("device errors: an out-of-range Gather index raises the CPU's error on CUDA") {
  auto cpu = make_cpu_device(1);
  const HostTensor data = ramp({5, 3});
  const std::vector<HostTensor> bad = {data, i64({4}, {0, 7, -1, 2})};
  const Outcome want = run(*cpu, OpKind::Gather, gather(0), bad, {{4, 3}});
  CHECK(want.error == "Gather: index 7 is out of range for axis 0 of size 5");
  // Valid indices, negative ones wrapping: the same values everywhere.
  const std::vector<HostTensor> good = {data, i64({4}, {0, 4, -1, -5})};
  const Outcome ref = run(*cpu, OpKind::Gather, gather(0), good, {{4, 3}});
  REQUIRE(ref.error.empty());
  for (auto& dev : cuda_devices()) {
    CAPTURE(dev->caps().name);
    const Outcome got = run(*dev, OpKind::Gather, gather(0), bad, {{4, 3}});
    CHECK(got.error == want.error);
    // Rows of valid indices are gathered, the bad index's row is zeros.
    for (int64_t j = 0; j < 3; ++j) {
      CHECK(got.outs[0].at(0 * 3 + j) == data.at(0 * 3 + j));
      CHECK(got.outs[0].at(1 * 3 + j) == 0.0);
      CHECK(got.outs[0].at(2 * 3 + j) == data.at(4 * 3 + j));
      CHECK(got.outs[0].at(3 * 3 + j) == data.at(2 * 3 + j));
    }
    // Raised once: the next launch on the same device starts clean.
    const Outcome next = run(*dev, OpKind::Gather, gather(0), good, {{4, 3}});
    CHECK(next.error.empty());
    CHECK(next.outs[0].bytes == ref.outs[0].bytes);
  }
}

TEST_CASE("device errors: a Gather index below -size raises the CPU's error on CUDA") {
  auto cpu = make_cpu_device(1);
  const HostTensor data = ramp({2, 5});
  const std::vector<HostTensor> bad = {data, i32({3}, {1, -6, -5})};
  const Outcome want = run(*cpu, OpKind::Gather, gather(1), bad, {{2, 3}});
  CHECK(want.error == "Gather: index -6 is out of range for axis 1 of size 5");
  for (auto& dev : cuda_devices()) {
    CAPTURE(dev->caps().name);
    const Outcome got = run(*dev, OpKind::Gather, gather(1), bad, {{2, 3}});
    CHECK(got.error == want.error);
    for (int64_t o = 0; o < 2; ++o) {
      CHECK(got.outs[0].at(o * 3 + 0) == data.at(o * 5 + 1));
      CHECK(got.outs[0].at(o * 3 + 1) == 0.0);
      CHECK(got.outs[0].at(o * 3 + 2) == data.at(o * 5 + 0));  // -5 wraps to 0
    }
  }
}

TEST_CASE("device errors: an out-of-range GatherGrad index raises the CPU's error on CUDA") {
  auto cpu = make_cpu_device(1);
  // Few indices (each dX element loops over them) and many (scattered, or gathered per column
  // with --deterministic): every path reports the bad index and adds the others.
  for (int64_t ni : {3, 40}) {
    CAPTURE(ni);
    std::vector<int64_t> idx(static_cast<size_t>(ni));
    for (int64_t k = 0; k < ni; ++k)
      idx[static_cast<size_t>(k)] = (k * 3) % 4 - (k % 3 == 0 ? 4 : 0);
    idx[1] = 9;
    std::vector<int64_t> ok = idx;
    ok[1] = 3;
    const HostTensor dy = ramp({2, ni, 3});
    const Outcome want =
        run(*cpu, OpKind::GatherGrad, gather(1), {dy, i64({ni}, idx)}, {{2, 4, 3}});
    CHECK(want.error == "GatherGrad: index 9 is out of range for axis 1 of size 4");
    // What the kernels add: the valid indices' contributions (dY with the bad index's part zero).
    HostTensor dy0 = dy;
    for (int64_t o = 0; o < 2; ++o)
      for (int64_t j = 0; j < 3; ++j)
        reinterpret_cast<float*>(dy0.bytes.data())[(o * ni + 1) * 3 + j] = 0;
    const Outcome ref = run(*cpu, OpKind::GatherGrad, gather(1), {dy0, i64({ni}, ok)}, {{2, 4, 3}});
    REQUIRE(ref.error.empty());
    for (bool det : {false, true}) {
      CudaOptions o;
      o.deterministic = det;
      for (auto& dev : cuda_devices(o)) {
        CAPTURE(dev->caps().name);
        CAPTURE(det);
        const Outcome got =
            run(*dev, OpKind::GatherGrad, gather(1), {dy, i64({ni}, idx)}, {{2, 4, 3}});
        CHECK(got.error == want.error);
        check_close(got.outs[0], ref.outs[0]);
      }
    }
  }
}

TEST_CASE("device errors: an out-of-range label raises the CPU's error in the CUDA loss") {
  using Red = ops::SoftmaxCrossEntropyLossParams::Reduction;
  auto cpu = make_cpu_device(1);
  const HostTensor scores = ramp({4, 3});
  for (Red red : {Red::Mean, Red::Sum, Red::None}) {
    CAPTURE(static_cast<int>(red));
    const std::vector<int64_t> loss_dims =
        red == Red::None ? std::vector<int64_t>{4} : std::vector<int64_t>{};
    const HostTensor dloss = red == Red::None ? f32({4}, {1, -0.5f, 2, 0.25f}) : f32({}, {1.5f});
    for (int64_t bad_label : {5, -1}) {
      CAPTURE(bad_label);
      const HostTensor bad = i64({4}, {0, bad_label, -100, 1});
      const Outcome want =
          run(*cpu, OpKind::SoftmaxCrossEntropyLoss, sce(red), {scores, bad}, {loss_dims});
      CHECK(want.error == fmt::format("SoftmaxCrossEntropyLoss: label {} (label element 1) is out "
                                      "of range for 3 classes: labels must be in [0, 3); check the "
                                      "dataset's labels against the model's number of outputs",
                                      bad_label));
      const Outcome want_grad =
          run(*cpu, OpKind::SoftmaxCrossEntropyLossGrad, sce(red), {dloss, scores, bad}, {{4, 3}});
      CHECK(want_grad.error == want.error);
      for (auto& dev : cuda_devices()) {
        CAPTURE(dev->caps().name);
        const Outcome got =
            run(*dev, OpKind::SoftmaxCrossEntropyLoss, sce(red), {scores, bad}, {loss_dims});
        CHECK(got.error == want.error);
        for (int64_t i = 0; i < got.outs[0].numel(); ++i) CHECK(std::isfinite(got.outs[0].at(i)));
        if (red == Red::None) CHECK(got.outs[0].at(1) == 0.0);
        const Outcome grad = run(*dev, OpKind::SoftmaxCrossEntropyLossGrad, sce(red),
                                 {dloss, scores, bad}, {{4, 3}});
        CHECK(grad.error == want.error);
        for (int64_t i = 0; i < 12; ++i) CHECK(std::isfinite(grad.outs[0].at(i)));
        for (int64_t k = 0; k < 3; ++k) CHECK(grad.outs[0].at(1 * 3 + k) == 0.0);
      }
    }
    // Valid labels and an ignored one: the CPU's values.
    const HostTensor good = i64({4}, {0, 2, -100, 1});
    const Outcome ref =
        run(*cpu, OpKind::SoftmaxCrossEntropyLoss, sce(red), {scores, good}, {loss_dims});
    const Outcome ref_grad =
        run(*cpu, OpKind::SoftmaxCrossEntropyLossGrad, sce(red), {dloss, scores, good}, {{4, 3}});
    REQUIRE(ref.error.empty());
    REQUIRE(ref_grad.error.empty());
    for (auto& dev : cuda_devices()) {
      CAPTURE(dev->caps().name);
      const Outcome got =
          run(*dev, OpKind::SoftmaxCrossEntropyLoss, sce(red), {scores, good}, {loss_dims});
      CHECK(got.error.empty());
      check_close(got.outs[0], ref.outs[0]);
      const Outcome grad =
          run(*dev, OpKind::SoftmaxCrossEntropyLossGrad, sce(red), {dloss, scores, good}, {{4, 3}});
      CHECK(grad.error.empty());
      check_close(grad.outs[0], ref_grad.outs[0]);
    }
  }
}
