// ConvGrad's f32 path against its f64 path (im2col/col2im) on the same data, launched through a
// CPU Device (tests/device_util.h; no graph): the default f32 path (the single-channel loops or
// oneDNN when built with it), for the LeNet-5 and ResNet-20 conv shapes at batch 4, plus groups,
// depthwise, dilations, asymmetric pads, 1-D and 3-D. The f64 path itself is checked against
// finite differences in test_gradcheck.cpp. Agreement: max |f32 - f64| <= 1e-4 * max |f64|, per
// output (dX, dW, dB); also with dX or dW omitted (the vjp omits outputs not needed). (The f32
// im2col path is not reachable through a Device where oneDNN is built; its template is the one
// f64 runs.)
#include <doctest/doctest.h>

#include <algorithm>
#include <any>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/common/scalar_math.h"
#include "kernels/cpu/conv.h"
#include "kernels/cpu/cpu_device.h"
#include "kernels/cuda/cuda_device.h"
#include "runtime/device.h"
#include "runtime/ops/params.h"
#include "tests/device_util.h"
#include "tests/test_util.h"

using namespace cb;

namespace {

struct GradCase {
  const char* name;
  int64_t n, c, m, group;
  std::vector<int64_t> in, k, s, d, pads;  // spatial; pads: begins then ends
};

int64_t numel(const std::vector<int64_t>& d) {
  return std::accumulate(d.begin(), d.end(), int64_t{1}, std::multiplies<>());
}

// The case's window and groups as ConvParams.
ops::ConvParams conv_params(const GradCase& gc) {
  ops::ConvParams p;
  p.window.kernel_shape = gc.k;
  p.window.strides = gc.s;
  p.window.dilations = gc.d;
  p.window.pads = gc.pads;
  p.group = gc.group;
  return p;
}

// The three outputs of ConvGrad on dY, X, W given as f64, computed in T.
template <class T>
std::vector<std::vector<double>> run_grad(const GradCase& gc, const std::vector<double>& dy,
                                          const std::vector<double>& x,
                                          const std::vector<double>& w, Device& dev, int omit = -1,
                                          bool bf16 = false, bool fwd = false,
                                          bool winograd = false) {
  size_t r = gc.in.size();
  ops::ConvParams p = conv_params(gc);
  p.bf16 = bf16;
  p.winograd = winograd;
  std::any params = p;
  std::vector<int64_t> xd{gc.n, gc.c}, wd{gc.m, gc.c / gc.group}, yd{gc.n, gc.m};
  for (size_t i = 0; i < r; ++i) {
    xd.push_back(gc.in[i]);
    wd.push_back(gc.k[i]);
    yd.push_back(
        (gc.in[i] + gc.pads[i] + gc.pads[i + r] - (gc.d[i] * (gc.k[i] - 1) + 1)) / gc.s[i] + 1);
  }
  REQUIRE(static_cast<int64_t>(dy.size()) == numel(yd));
  if (fwd) {  // Conv(X, W, B) -> Y [N, M, D'...] into the first output; dy is unused
    std::vector<T> tx(x.begin(), x.end()), tw(w.begin(), w.end()),
        y(static_cast<size_t>(numel(yd)), T(-99)), tb(static_cast<size_t>(gc.m));
    for (size_t j = 0; j < tb.size(); ++j) tb[j] = T(0.25) * T(j % 7) - T(0.75);
    constexpr DType t = std::is_same_v<T, double> ? DType::F64 : DType::F32;
    KernelArgs a;
    a.params = &params;
    a.in = {{tx.data(), t, xd}, {tw.data(), t, wd}, {tb.data(), t, {gc.m}}};
    a.out = {{y.data(), t, yd}};
    test::launch_host(dev, OpKind::Conv, a);
    return {{y.begin(), y.end()}};
  }
  std::vector<T> tdy(dy.begin(), dy.end()), tx(x.begin(), x.end()), tw(w.begin(), w.end());
  std::vector<T> dx(x.size(), T(-99)), dw_buf(w.size() + 16, T(-99)),
      db(static_cast<size_t>(gc.m), T(-99));
  // dW not 64-byte aligned (a caller's buffer may not be; the kernels' Winograd path copies)
  T* dw = dw_buf.data() + (reinterpret_cast<uintptr_t>(dw_buf.data()) % 64 == 0 ? 4 : 0);
  constexpr DType t = std::is_same_v<T, double> ? DType::F64 : DType::F32;
  KernelArgs a;
  a.params = &params;
  a.in = {{tdy.data(), t, yd}, {tx.data(), t, xd}, {tw.data(), t, wd}};
  a.out = {{dx.data(), t, xd}, {dw, t, wd}, {db.data(), t, {gc.m}}};
  if (omit >= 0) a.out[static_cast<size_t>(omit)].data = nullptr;  // as the vjp omits it
  test::launch_host(dev, OpKind::ConvGrad, a);
  return {{dx.begin(), dx.end()}, {dw, dw + w.size()}, {db.begin(), db.end()}};
}

std::vector<double> random(int64_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<double> v(static_cast<size_t>(n));
  for (double& e : v) e = u(g);
  return v;
}

// Random dY, X and W of the case's sizes (seeds 1, 2, 3).
struct Operands {
  std::vector<double> dy, x, w;
};
Operands random_operands(const GradCase& gc) {
  const size_t r = gc.in.size();
  int64_t xn = gc.n * gc.c, wn = gc.m * (gc.c / gc.group), yn = gc.n * gc.m;
  for (size_t i = 0; i < r; ++i) {
    xn *= gc.in[i];
    wn *= gc.k[i];
    yn *= (gc.in[i] + gc.pads[i] + gc.pads[i + r] - (gc.d[i] * (gc.k[i] - 1) + 1)) / gc.s[i] + 1;
  }
  return {random(yn, 1), random(xn, 2), random(wn, 3)};
}

void check_case(const GradCase& gc, Device& dev) {
  std::string name = gc.name;
  CAPTURE(name);
  const auto [dy, x, w] = random_operands(gc);
  auto ref = run_grad<double>(gc, dy, x, w, dev);
  // The f32 path with all outputs, without dX (a first layer) and without dW.
  for (int omit = -1; omit < 2; ++omit) {
    CAPTURE(omit);
    auto got = run_grad<float>(gc, dy, x, w, dev, omit);
    const char* names[] = {"dX", "dW", "dB"};
    for (size_t o = 0; o < 3u; ++o) {
      if (static_cast<int>(o) == omit) continue;
      std::string output = names[o];
      CAPTURE(output);
      double scale = 0, err = 0;
      for (size_t i = 0; i < ref[o].size(); ++i) {
        scale = std::max(scale, std::abs(ref[o][i]));
        err = std::max(err, std::abs(got[o][i] - ref[o][i]));
      }
      CHECK(scale > 0);
      CHECK(err <= 1e-4 * scale);
    }
  }
}

const std::vector<int64_t> k1{1, 1}, k3{3, 3}, k5{5, 5}, s1{1, 1}, s2{2, 2}, d1{1, 1};
const std::vector<int64_t> p0{0, 0, 0, 0}, p1{1, 1, 1, 1}, p2{2, 2, 2, 2};

}  // namespace

TEST_CASE("ConvGrad f32 agrees with f64: LeNet-5 and ResNet-20 shapes, batch 4") {
  auto dev = make_cpu_device(2);
  const GradCase cases[] = {
      {"lenet5 c1 1x28x28 -> 6 k5 p2", 4, 1, 6, 1, {28, 28}, k5, s1, d1, p2},
      {"lenet5 c2 6x14x14 -> 16 k5", 4, 6, 16, 1, {14, 14}, k5, s1, d1, p0},
      {"resnet20 3x32x32 -> 16 k3", 4, 3, 16, 1, {32, 32}, k3, s1, d1, p1},
      {"resnet20 16x32x32 -> 16 k3", 4, 16, 16, 1, {32, 32}, k3, s1, d1, p1},
      {"resnet20 16x32x32 -> 32 k3 s2", 4, 16, 32, 1, {32, 32}, k3, s2, d1, p1},
      {"resnet20 16x32x32 -> 32 k1 s2", 4, 16, 32, 1, {32, 32}, k1, s2, d1, p0},
      {"resnet20 32x16x16 -> 32 k3", 4, 32, 32, 1, {16, 16}, k3, s1, d1, p1},
      {"resnet20 32x16x16 -> 64 k3 s2", 4, 32, 64, 1, {16, 16}, k3, s2, d1, p1},
      {"resnet20 32x16x16 -> 64 k1 s2", 4, 32, 64, 1, {16, 16}, k1, s2, d1, p0},
      {"resnet20 64x8x8 -> 64 k3", 4, 64, 64, 1, {8, 8}, k3, s1, d1, p1},
  };
  for (const GradCase& gc : cases) check_case(gc, *dev);
}

TEST_CASE("ConvGrad f32 agrees with f64: groups, depthwise, dilations, pads, 1-D, 3-D") {
  auto dev = make_cpu_device(2);
  const GradCase cases[] = {
      {"grouped dilated asymmetric pads", 3, 8, 12, 4, {11, 9}, k3, {2, 1}, {2, 1}, {1, 0, 2, 1}},
      {"depthwise stride 2", 4, 16, 16, 16, {15, 15}, k3, s2, d1, p1},
      {"depthwise multiplier 2", 2, 8, 16, 8, {10, 10}, k3, s1, d1, p1},
      {"pointwise", 5, 24, 8, 1, {7, 7}, k1, s1, d1, p0},
      {"1-D", 3, 4, 6, 1, {20}, {5}, {2}, {1}, {2, 1}},
      {"3-D", 2, 3, 4, 1, {6, 7, 5}, {3, 3, 3}, {1, 2, 1}, {1, 1, 1}, {1, 1, 0, 1, 0, 1}},
  };
  for (const GradCase& gc : cases) check_case(gc, *dev);
}

namespace {
// x rounded to the nearest bf16 (ties to even), as oneDNN's f32 -> bf16 reorder rounds.
double to_bf16(double x) {
  const auto f = static_cast<float>(x);
  uint32_t u = 0;
  std::memcpy(&u, &f, 4);
  u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000u;
  float r = 0;
  std::memcpy(&r, &u, 4);
  return r;
}
std::vector<double> to_bf16(std::vector<double> v) {
  for (double& e : v) e = to_bf16(e);
  return v;
}
double max_err(const std::vector<double>& a, const std::vector<double>& b) {
  double e = 0;
  for (size_t i = 0; i < a.size(); ++i) e = std::max(e, std::abs(a[i] - b[i]));
  return e;
}
double max_abs(const std::vector<double>& a) {
  double m = 0;
  for (double v : a) m = std::max(m, std::abs(v));
  return m;
}
// For case gc's random operands, each run the tests below compare: the forward Conv (omit -2),
// ConvGrad with all outputs (-1) and without one (0: dX, 1: dW); `f(dy, x, w, omit, fwd, outs)`
// with outs the indices of the run's outputs (Y; or dX, dW, dB, the omitted one left out).
template <class F>
void each_run(const GradCase& gc, F&& f) {
  std::string name = gc.name;
  CAPTURE(name);
  const auto [dy, x, w] = random_operands(gc);
  for (int omit : {-2, -1, 0, 1}) {
    const bool fwd = omit == -2;
    CAPTURE(omit);
    std::vector<size_t> outs;
    for (size_t o = 0; o < (fwd ? 1u : 3u); ++o)
      if (static_cast<int>(o) != omit) outs.push_back(o);
    f(dy, x, w, omit, fwd, outs);
  }
}
}  // namespace

// ConvParams::bf16 (--precision bf16): Conv's Y and ConvGrad's dX and dW are the products of the
// bf16-rounded operands summed in f32 or better; they match an f64 computation on rounded inputs
// and differ from the f32 path by the rounding (so the bf16 path really ran). dB is not a product:
// as in f32. Devices:
//   - the CPU, where oneDNN has bf16 kernels for these cores; without them the f32 path runs, equal
//     to it bit for bit;
//   - the CUDA backend on the host (cuda-host): its bf16 fallback (the rounded operands on the
//     direct kernels, f32 results), and with the host's stand-in for cuDNN's bf16 convolutions
//     (CudaOptions::host_run_bf16_library) the GPU's path around cuDNN: results rounded to bf16
//     once (tolerance 2^-8 of the largest), asymmetric pads through the shifted input and back;
//   - the GPU where there is one (cuDNN: results rounded to bf16).
TEST_CASE("Conv and ConvGrad in bf16: bf16-rounded operands, f32 accumulation") {
  const bool bf16_cores = cpu::dnnl_bf16_available();
  if (!bf16_cores) MESSAGE("no bf16 kernels on these cores: checking the CPU's f32 fallback");
  struct Bf16Device {
    std::string name;
    std::unique_ptr<Device> dev;
    bool rounds;  // the bf16 path runs here
    double tol;   // of |got - rounded reference|, times the largest magnitude
  };
  std::vector<Bf16Device> devices;
  devices.push_back({"cpu", make_cpu_device(2), bf16_cores, 1e-4});
  devices.push_back({"cuda-host", make_cuda_host_run_device(), true, 1e-5});
  CudaOptions lib;
  lib.host_run_bf16_library = true;
  devices.push_back({"cuda-host with a bf16 library", make_cuda_host_run_device(lib), true, 4e-3});
  std::string why;
  if (cuda_device_count(&why) > 0) devices.push_back({"cuda", make_cuda_device(0), true, 4e-3});
  const GradCase cases[] = {
      {"resnet20 16x32x32 -> 32 k3 s2", 4, 16, 32, 1, {32, 32}, k3, s2, d1, p1},
      {"resnet50 64x14x14 -> 256 k1", 4, 64, 256, 1, {14, 14}, k1, s1, d1, p0},
      {"grouped dilated asymmetric pads", 3, 8, 12, 4, {11, 9}, k3, {2, 1}, {2, 1}, {1, 0, 2, 1}},
      {"begin pads larger than the end's", 2, 6, 5, 1, {9, 8}, k3, s1, d1, {2, 1, 0, 1}},
      {"depthwise stride 2", 4, 16, 16, 16, {15, 15}, k3, s2, d1, p1},
  };
  for (auto& [dev_name, dev, rounds, tol] : devices) {
    CAPTURE(dev_name);
    for (const GradCase& gc : cases)
      each_run(gc, [&, &dev = dev, rounds = rounds, tol = tol](const auto& dy, const auto& x,
                                                               const auto& w, int omit, bool fwd,
                                                               const std::vector<size_t>& outs) {
        auto rounded =
            run_grad<double>(gc, to_bf16(dy), to_bf16(x), to_bf16(w), *dev, omit, false, fwd);
        auto f32 = run_grad<float>(gc, dy, x, w, *dev, omit, false, fwd);
        auto got = run_grad<float>(gc, dy, x, w, *dev, omit, true, fwd);
        for (size_t o : outs) {  // Y; or dX, dW, dB
          CAPTURE(o);
          const double scale = max_abs(rounded[o]);
          CHECK(scale > 0);
          if (!fwd && o == 2) {  // dB: a sum of the f32 dY, as without bf16
            CHECK(max_err(got[o], f32[o]) <= 1e-6 * max_abs(f32[o]));
          } else if (rounds) {
            CHECK(max_err(got[o], rounded[o]) <= tol * scale);
            CHECK(max_err(got[o], f32[o]) > 1e-4 * scale);  // the rounding shows
          } else {
            CHECK(got[o] == f32[o]);
          }
        }
      });
  }
}

// Where a thread's share of dY, X and dX outgrows its share of the last-level cache, oneDNN's
// ConvGrad runs backward-data and backward-weights in rounds of a few samples (the second then
// finds dY in cache), each later round's dW added to the first's: with a cache of 64 KiB every
// round is one sample (odd batches: chunks of unequal rounds), and dX, dW agree with f64 as in
// one pass, in f32 and bf16, with and without dX.
TEST_CASE("ConvGrad in rounds of samples agrees with f64") {
  auto dev = make_cpu_device(2);
  const GradCase cases[] = {
      {"pointwise 16x14x14 -> 48, batch 7", 7, 16, 48, 1, {14, 14}, k1, s1, d1, p0},
      {"3x3 24x12x10 -> 32 s2, batch 5", 5, 24, 32, 1, {12, 10}, k3, s2, d1, p1},
  };
  struct Reset {
    ~Reset() { cpu::set_last_level_cache_bytes(0); }
  } reset;
  for (const GradCase& gc : cases) {
    std::string name = gc.name;
    CAPTURE(name);
    const auto [dy, x, w] = random_operands(gc);
    const auto ref = run_grad<double>(gc, dy, x, w, *dev);
    const auto ref16 = run_grad<double>(gc, to_bf16(dy), to_bf16(x), to_bf16(w), *dev);
    for (bool bf16 : {false, true})
      for (int omit : {-1, 0}) {
        CAPTURE(bf16);
        CAPTURE(omit);
        cpu::set_last_level_cache_bytes(64 << 10);
        const auto got = run_grad<float>(gc, dy, x, w, *dev, omit, bf16);
        cpu::set_last_level_cache_bytes(0);
        const auto whole = run_grad<float>(gc, dy, x, w, *dev, omit, bf16);
        const bool rounds = bf16 && cpu::dnnl_bf16_available();
        for (size_t o : {size_t{0}, size_t{1}}) {
          if (static_cast<int>(o) == omit) continue;
          CAPTURE(o);
          const auto& r = rounds ? ref16[o] : ref[o];
          const double scale = max_abs(r);
          CHECK(scale > 0);
          CHECK(max_err(got[o], r) <= (rounds ? 1e-4 : 1e-5) * scale);
          CHECK(max_err(got[o], whole[o]) <= 1e-5 * scale);
        }
      }
  }
}

// ConvParams::winograd (choose_conv_algorithms, runtime/passes.h): oneDNN's Winograd F(4x4, 3x3)
// kernels on 3x3 stride-1 convs (ResNet-20's and ResNet-18's, the smallest of which the pass
// leaves direct; no pads too), forward and backward, every output, with dW in a buffer that is
// not 64-byte aligned (the weight-gradient kernel's stores need alignment: the kernel writes an
// aligned copy). Within
// 2e-5 of the largest f64 output (measured 1e-6 to 8e-6, against 1e-7 to 1e-6 for the direct
// kernels), and different from the direct kernels' results (so Winograd really ran) where oneDNN
// has it on these cores; elsewhere the direct kernels run, bit for bit.
TEST_CASE("Conv and ConvGrad by Winograd's algorithm agree with f64") {
  auto dev = make_cpu_device(2);
  const bool winograd_cores = cpu::dnnl_winograd_available();
  if (!winograd_cores) MESSAGE("no Winograd kernels on these cores: checking the direct fallback");
  const GradCase cases[] = {
      {"resnet20 16x32x32 -> 16 k3", 4, 16, 16, 1, {32, 32}, k3, s1, d1, p1},
      {"resnet20 32x16x16 -> 32 k3", 4, 32, 32, 1, {16, 16}, k3, s1, d1, p1},
      {"resnet18 64x28x28 -> 64 k3, batch 3", 3, 64, 64, 1, {28, 28}, k3, s1, d1, p1},
      {"32x17x18 -> 48 k3, no pads", 2, 32, 48, 1, {17, 18}, k3, s1, d1, p0},
  };
  for (const GradCase& gc : cases)
    each_run(gc, [&](const auto& dy, const auto& x, const auto& w, int omit, bool fwd,
                     const std::vector<size_t>& outs) {
      auto ref = run_grad<double>(gc, dy, x, w, *dev, omit, false, fwd);
      auto direct = run_grad<float>(gc, dy, x, w, *dev, omit, false, fwd);
      auto got = run_grad<float>(gc, dy, x, w, *dev, omit, false, fwd, true);
      for (size_t o : outs) {  // Y; or dX, dW, dB
        CAPTURE(o);
        const double scale = max_abs(ref[o]);
        CHECK(scale > 0);
        CHECK(max_err(got[o], ref[o]) <= 2e-5 * scale);
        if (winograd_cores && !(!fwd && o == 2))  // dB is a sum of dY either way
          CHECK(max_err(got[o], direct[o]) > 0);
        else
          CHECK(got[o] == direct[o]);
      }
    });
}

namespace {
// [N, C, S] (plain, f64) as the blocked layout in f32, and back (tests/test_util.h).
std::vector<float> blocked_f32(const std::vector<double>& v, int64_t n, int64_t c) {
  return test::to_blocked(std::vector<float>(v.begin(), v.end()), n, c,
                          static_cast<int64_t>(v.size()) / (n * c));
}
// v [N, C, S] (already bf16 values) as blocked bf16 bits [N, C/16, S, 16]: the trainer's
// activations under --precision bf16.
std::vector<uint16_t> bf16_blocked(const std::vector<double>& v, int64_t n, int64_t c) {
  const std::vector<float> b = blocked_f32(v, n, c);
  std::vector<uint16_t> r(b.size());
  for (size_t i = 0; i < b.size(); ++i) r[i] = math::f32_to_bf16(b[i]);
  return r;
}
std::vector<double> plain_of(const std::vector<float>& b, int64_t n, int64_t c) {
  const std::vector<float> v =
      test::from_blocked(b, n, c, static_cast<int64_t>(b.size()) / (n * c));
  return {v.begin(), v.end()};
}
}  // namespace

// Depthwise 3x3 convolutions on blocked values (MobileNet's) take their own kernel for dX and dW
// (conv_depthwise.cpp): against f64, with either output omitted, the same bits on one thread as
// on two, and not taken where it does not apply.
TEST_CASE("ConvGrad of blocked depthwise 3x3 convolutions agrees with f64") {
  auto one = make_cpu_device(1), two = make_cpu_device(2);
  const GradCase cases[] = {
      {"stride 1, 9x11", 3, 32, 32, 32, {9, 11}, k3, s1, d1, p1},
      {"stride 2, 10x7", 2, 48, 48, 48, {10, 7}, k3, s2, d1, p1},
      {"stride 2, 5x6", 2, 16, 16, 16, {5, 6}, k3, s2, d1, p1},
      {"stride 1, 1x1", 2, 16, 16, 16, {1, 1}, k3, s1, d1, p1},
      {"stride 1, 2x1", 1, 16, 16, 16, {2, 1}, k3, s1, d1, p1},
  };
  for (const GradCase& gc : cases) {
    std::string name = gc.name;
    CAPTURE(name);
    const auto [dy, x, w] = random_operands(gc);
    const auto ref = run_grad<double>(gc, dy, x, w, *two);
    const ops::ConvParams p = conv_params(gc);
    std::any params = p;
    const int64_t oh = (gc.in[0] - 1) / gc.s[0] + 1, ow = (gc.in[1] - 1) / gc.s[1] + 1;
    const std::vector<int64_t> xd{gc.n, gc.c, gc.in[0], gc.in[1]}, yd{gc.n, gc.c, oh, ow};
    std::vector<float> bdy = blocked_f32(dy, gc.n, gc.c), bx = blocked_f32(x, gc.n, gc.c);
    std::vector<float> fw(w.begin(), w.end());
    std::vector<float> first_dx, first_dw;
    for (int omit = -1; omit < 2; ++omit)
      for (Device* dev : {one.get(), two.get()}) {
        CAPTURE(omit);
        std::vector<float> dx(bx.size(), -99), dw(fw.size(), -99);
        KernelArgs a;
        a.params = &params;
        a.in = {{bdy.data(), DType::F32, yd, true},
                {bx.data(), DType::F32, xd, true},
                {fw.data(), DType::F32, {gc.c, 1, 3, 3}}};
        a.out = {{omit == 0 ? nullptr : dx.data(), DType::F32, xd, true},
                 {omit == 1 ? nullptr : dw.data(), DType::F32, {gc.c, 1, 3, 3}}};
        CHECK(cpu::conv_grad_depthwise(a));  // inline (no pool): the kernel applies
        std::vector<float> dx2(bx.size(), -99), dw2(fw.size(), -99);
        a.out[0].data = omit == 0 ? nullptr : dx2.data();
        a.out[1].data = omit == 1 ? nullptr : dw2.data();
        test::launch_host(*dev, OpKind::ConvGrad, a);  // through ConvGrad on the device's pool
        if (omit != 0) CHECK(dx2 == dx);
        if (omit != 1) CHECK(dw2 == dw);
        if (omit == -1 && dev == one.get()) first_dx = dx, first_dw = dw;
        if (omit == -1 && dev == two.get()) {
          CHECK(dx == first_dx);
          CHECK(dw == first_dw);
        }
        const std::vector<double> got[2] = {plain_of(dx, gc.n, gc.c), {dw.begin(), dw.end()}};
        for (int o = 0; o < 2; ++o) {
          if (o == omit) continue;
          double scale = 0, err = 0;
          for (size_t i = 0; i < ref[static_cast<size_t>(o)].size(); ++i) {
            scale = std::max(scale, std::abs(ref[static_cast<size_t>(o)][i]));
            err = std::max(err, std::abs(got[o][i] - ref[static_cast<size_t>(o)][i]));
          }
          CHECK(scale > 0);
          CHECK(err <= 1e-5 * scale);
        }
      }
    // Not taken: bf16 storage, plain values, bf16 arithmetic.
    std::vector<float> dx(bx.size()), dw(fw.size());
    KernelArgs a;
    a.params = &params;
    a.in = {{bdy.data(), DType::F32, yd, true, true},
            {bx.data(), DType::F32, xd, true, true},
            {fw.data(), DType::F32, {gc.c, 1, 3, 3}}};
    a.out = {{dx.data(), DType::F32, xd, true, true}, {dw.data(), DType::F32, {gc.c, 1, 3, 3}}};
    CHECK_FALSE(cpu::conv_grad_depthwise(a));
    for (auto* v : {&a.in[0], &a.in[1], &a.out[0]}) v->bf16_storage = false, v->blocked = false;
    CHECK_FALSE(cpu::conv_grad_depthwise(a));
    for (auto* v : {&a.in[0], &a.in[1], &a.out[0]}) v->blocked = true;
    std::any other = p;
    std::any_cast<ops::ConvParams&>(other).bf16 = true;
    a.params = &other;
    CHECK_FALSE(cpu::conv_grad_depthwise(a));
  }
}

// Pointwise convolutions (1x1, no padding: ResNet's bottlenecks and strided shortcuts) on blocked
// bf16 values under ConvParams::bf16 take their own kernel for dW (conv_pointwise.cpp), on cores
// with AVX-512 BF16: against f64 on the same bf16 operands (the products exact, sums in f32), dX
// from oneDNN alongside, the same bits on one thread as on two, an odd number of positions (the
// last paired with 0), samples summed in groups (56x56), strides 2 (output rows of odd length:
// pairs across rows), and not taken where it does not apply (f32 storage, plain values, no bf16
// arithmetic, a stride, padding).
TEST_CASE("ConvGrad's weight gradient of blocked bf16 pointwise convolutions agrees with f64") {
  auto one = make_cpu_device(1), two = make_cpu_device(2);
  const bool bf16_cores = __builtin_cpu_supports("avx512bf16") != 0;
  if (!bf16_cores) MESSAGE("no AVX-512 BF16 on these cores: checking that the kernel is not taken");
  const GradCase cases[] = {
      {"64 -> 256, 9x7 (odd)", 3, 64, 256, 1, {9, 7}, k1, s1, d1, p0},
      {"48 -> 32, 4x6", 2, 48, 32, 1, {4, 6}, k1, s1, d1, p0},
      {"16 -> 16, 1x1", 5, 16, 16, 1, {1, 1}, k1, s1, d1, p0},
      {"16 -> 32, 56x56 (samples in groups of 2)", 3, 16, 32, 1, {56, 56}, k1, s1, d1, p0},
      {"64 -> 32, 9x8 stride 2", 2, 64, 32, 1, {9, 8}, k1, s2, d1, p0},
      {"32 -> 48, 14x14 stride 2 (7x7: pairs across rows)", 3, 32, 48, 1, {14, 14}, k1, s2, d1, p0},
  };
  for (const GradCase& gc : cases) {
    std::string name = gc.name;
    CAPTURE(name);
    const auto [dy0, x0, w0] = random_operands(gc);
    const std::vector<double> dy = to_bf16(dy0), x = to_bf16(x0), w = to_bf16(w0);
    const auto ref = run_grad<double>(gc, dy, x, w, *two);
    ops::ConvParams p = conv_params(gc);
    p.bf16 = true;
    std::any params = p;
    const std::vector<int64_t> xd{gc.n, gc.c, gc.in[0], gc.in[1]},
        yd{gc.n, gc.m, (gc.in[0] - 1) / gc.s[0] + 1, (gc.in[1] - 1) / gc.s[1] + 1},
        wd{gc.m, gc.c, 1, 1};
    std::vector<uint16_t> bdy = bf16_blocked(dy, gc.n, gc.m), bx = bf16_blocked(x, gc.n, gc.c);
    std::vector<float> fw(w.begin(), w.end());
    auto args = [&](void* dx, void* dw) {
      KernelArgs a;
      a.params = &params;
      a.in = {{bdy.data(), DType::F32, yd, true, true},
              {bx.data(), DType::F32, xd, true, true},
              {fw.data(), DType::F32, wd}};
      a.out = {{dx, DType::F32, xd, true, true}, {dw, DType::F32, wd}};
      return a;
    };
    std::vector<float> dw(fw.size(), -99);
    CHECK(cpu::conv_grad_pointwise_weights(args(nullptr, dw.data())) == bf16_cores);
    if (!bf16_cores) continue;
    double scale = max_abs(ref[1]), err = 0;
    for (size_t i = 0; i < dw.size(); ++i) err = std::max(err, std::abs(dw[i] - ref[1][i]));
    CHECK(scale > 0);
    CHECK(err <= 1e-5 * scale);                   // f32 sums of up to 6272 products
    for (Device* dev : {one.get(), two.get()}) {  // through ConvGrad: dX by oneDNN alongside
      std::vector<uint16_t> dx(bx.size(), 0xFFFF);
      std::vector<float> dw2(fw.size(), -99);
      KernelArgs a = args(dx.data(), dw2.data());
      test::launch_host(*dev, OpKind::ConvGrad, a);
      CHECK(dw2 == dw);
      std::vector<double> dxd(dx.size());
      for (size_t i = 0; i < dx.size(); ++i) dxd[i] = math::bf16_to_f32(dx[i]);
      std::vector<float> dxf(dxd.begin(), dxd.end());
      const std::vector<double> got = plain_of(dxf, gc.n, gc.c);
      CHECK(max_err(got, ref[0]) <= 4e-3 * max_abs(ref[0]));  // dX stored as bf16
    }
    // Not taken: f32 storage, plain values, f32 arithmetic, a stride the dims disagree with,
    // padding.
    KernelArgs a = args(nullptr, dw.data());
    a.in[1].bf16_storage = false;
    CHECK_FALSE(cpu::conv_grad_pointwise_weights(a));
    a = args(nullptr, dw.data());
    a.in[0].blocked = a.in[1].blocked = false;
    CHECK_FALSE(cpu::conv_grad_pointwise_weights(a));
    for (int change = 0; change < 3; ++change) {
      ops::ConvParams q = p;
      if (change == 0) q.bf16 = false;
      if (change == 1) {
        q.window.strides = {gc.s[0] + 1, gc.s[1] + 1};
        if ((gc.in[0] - 1) / q.window.strides[0] + 1 == yd[2] &&
            (gc.in[1] - 1) / q.window.strides[1] + 1 == yd[3])
          continue;  // 1x1: any stride gives the same output
      }
      if (change == 2) q.window.pads = p1;
      std::any other = q;
      a = args(nullptr, dw.data());
      a.params = &other;
      CHECK_FALSE(cpu::conv_grad_pointwise_weights(a));
    }
  }
}

// Where a convolution's weights outweigh its activations (ResNet's 256- and 512-channel 3x3
// convolutions), oneDNN's backward-weights runs split by output channels, each thread writing its
// rows of dW over every sample, not split by samples into partials (conv_grad_dnnl.cpp): on
// blocked bf16 values (dY's channels read in place from the whole tensor) and plain f32, stride 1
// and 2, against f64 on the same operands; the same bits as one thread (the sample split gave
// each thread's partial its own rounding).
TEST_CASE("ConvGrad's weight gradient by output channels on two threads agrees with f64") {
  auto one = make_cpu_device(1), two = make_cpu_device(2);
  const GradCase cases[] = {
      {"64 -> 64 3x3, 6x6", 4, 64, 64, 1, {6, 6}, k3, s1, d1, p1},
      {"32 -> 96 3x3 stride 2, 7x7", 3, 32, 96, 1, {7, 7}, k3, s2, d1, p1},
  };
  for (const GradCase& gc : cases)
    for (bool bf16 : {false, true}) {
      std::string name = gc.name;
      CAPTURE(name);
      CAPTURE(bf16);
      const auto [dy0, x0, w0] = random_operands(gc);
      const std::vector<double> dy = bf16 ? to_bf16(dy0) : dy0, x = bf16 ? to_bf16(x0) : x0,
                                w = bf16 ? to_bf16(w0) : w0;
      const auto ref = run_grad<double>(gc, dy, x, w, *two);
      ops::ConvParams p = conv_params(gc);
      p.bf16 = bf16;
      std::any params = p;
      auto out = [&](int i) {
        return (gc.in[i] + gc.pads[i] + gc.pads[i + 2] - gc.k[i]) / gc.s[i] + 1;
      };
      const std::vector<int64_t> xd{gc.n, gc.c, gc.in[0], gc.in[1]}, yd{gc.n, gc.m, out(0), out(1)},
          wd{gc.m, gc.c, gc.k[0], gc.k[1]};
      // bf16: blocked bf16 values (the trainer's); f32: plain.
      std::vector<uint16_t> bdy, bx;
      if (bf16) bdy = bf16_blocked(dy, gc.n, gc.m), bx = bf16_blocked(x, gc.n, gc.c);
      std::vector<float> fdy(dy.begin(), dy.end()), fx(x.begin(), x.end()), fw(w.begin(), w.end());
      std::vector<std::vector<float>> dws;
      for (Device* dev : {one.get(), two.get()}) {
        std::vector<uint16_t> dx16(bx.size());
        std::vector<float> dxf(fx.size()), dw(fw.size(), -99);
        KernelArgs a;
        a.params = &params;
        if (bf16) {
          a.in = {{bdy.data(), DType::F32, yd, true, true},
                  {bx.data(), DType::F32, xd, true, true},
                  {fw.data(), DType::F32, wd}};
          a.out = {{dx16.data(), DType::F32, xd, true, true}, {dw.data(), DType::F32, wd}};
        } else {
          a.in = {{fdy.data(), DType::F32, yd},
                  {fx.data(), DType::F32, xd},
                  {fw.data(), DType::F32, wd}};
          a.out = {{dxf.data(), DType::F32, xd}, {dw.data(), DType::F32, wd}};
        }
        test::launch_host(*dev, OpKind::ConvGrad, a);
        const std::vector<double> dwd(dw.begin(), dw.end());
        // f32 sums of up to 196 products (bf16: of rounded operands; without bf16 cores, f32).
        CHECK(max_err(dwd, ref[1]) <= 1e-5 * max_abs(ref[1]));
        std::vector<double> dxd;
        if (bf16) {
          std::vector<float> f(dx16.size());
          for (size_t i = 0; i < f.size(); ++i) f[i] = math::bf16_to_f32(dx16[i]);
          dxd = plain_of(f, gc.n, gc.c);
        } else {
          dxd.assign(dxf.begin(), dxf.end());
        }
        CHECK(max_err(dxd, ref[0]) <= (bf16 ? 4e-3 : 1e-5) * max_abs(ref[0]));
        dws.push_back(dw);
      }
      CHECK(dws[0] == dws[1]);  // each row summed over every sample as one thread sums it
    }
}
