// CPU kernels of the conv / gemm / matmul / pooling / batchnorm family, launched through a CPU
// Device (tests/device_util.h; no graph): Conv (groups, depthwise, strides, asymmetric pads,
// dilations, 1-D to 3-D; f32 through its default path, f64 through im2col) against a naive loop,
// Gemm's transposes and C broadcasting, MatMul's batch broadcasting and 1-D promotion, MaxPool
// indices, AveragePool's divisors, BatchNormalization's training-mode statistics by hand; Gemm and
// MatMul in bf16 (--precision bf16) against products of rounded operands.
// (The f32 im2col path is not reachable through a Device where oneDNN is built; its template is
// the one f64 runs, and test_backend_ops.cpp compares every f32 conv with the f64 one.)
#include <doctest/doctest.h>

#include <any>
#include <cmath>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "kernels/common/scalar_math.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/conv.h"
#include "kernels/cpu/cpu_device.h"
#include "kernels/cpu/dnnl_conv_util.h"
#include "kernels/cuda/cuda_device.h"
#include "runtime/device.h"
#include "runtime/ops/params.h"
#include "runtime/thread_pool.h"
#include "tests/device_util.h"

using namespace cb;

namespace {

template <class T>
constexpr DType dtype_of() {
  return std::is_same_v<T, double> ? DType::F64 : DType::F32;
}

template <class T>
TensorView view(std::vector<T>& v, std::vector<int64_t> dims) {
  return TensorView{v.data(), dtype_of<T>(), std::move(dims)};
}

int64_t numel(const std::vector<int64_t>& d) {
  return std::accumulate(d.begin(), d.end(), int64_t{1}, std::multiplies<>());
}

template <class T>
std::vector<T> random_vec(int64_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<double> d(-1, 1);
  std::vector<T> v(static_cast<size_t>(n));
  for (T& x : v) x = static_cast<T>(d(g));
  return v;
}

void launch(OpKind op, KernelArgs& a, Device& dev, const std::any* params) {
  a.params = params;
  test::launch_host(dev, op, a);
}

// ---- Conv ---------------------------------------------------------------------------------------
struct ConvCase {
  std::vector<int64_t> in;  // spatial input dims
  std::vector<int64_t> k, s, d, pads;
  int64_t n, c, m, group;
  bool bias;
};

template <class T>
void check_conv(const ConvCase& cc, Device& dev) {
  size_t r = cc.in.size();
  ops::ConvParams p;
  p.window.kernel_shape = cc.k;
  p.window.strides = cc.s;
  p.window.dilations = cc.d;
  p.window.pads = cc.pads;
  p.group = cc.group;
  std::any params = p;
  std::vector<int64_t> xd{cc.n, cc.c}, wd{cc.m, cc.c / cc.group}, yd{cc.n, cc.m};
  for (size_t i = 0; i < r; ++i) {
    xd.push_back(cc.in[i]);
    wd.push_back(cc.k[i]);
    int64_t span = cc.d[i] * (cc.k[i] - 1) + 1;
    yd.push_back((cc.in[i] + cc.pads[i] + cc.pads[i + r] - span) / cc.s[i] + 1);
  }
  auto x = random_vec<T>(numel(xd), 1), w = random_vec<T>(numel(wd), 2), b = random_vec<T>(cc.m, 3);
  std::vector<T> y(static_cast<size_t>(numel(yd)), T(-99));
  KernelArgs a;
  a.in = {view(x, xd), view(w, wd), cc.bias ? view(b, {cc.m}) : TensorView{}};
  a.out = {view(y, yd)};
  launch(OpKind::Conv, a, dev, &params);
  // Naive reference over 3-D-padded dims.
  auto dim3 = [&](const std::vector<int64_t>& v, size_t off, int64_t def) {
    std::array<int64_t, 3> o{def, def, def};
    for (size_t i = 0; i < r; ++i) o[3 - r + i] = v[off + i];
    return o;
  };
  auto I = dim3(xd, 2, 1), O = dim3(yd, 2, 1), K = dim3(cc.k, 0, 1), S = dim3(cc.s, 0, 1),
       D = dim3(cc.d, 0, 1), P = dim3(cc.pads, 0, 0);
  int64_t cg = cc.c / cc.group, mg = cc.m / cc.group, bad = 0;
  double worst = 0;
  for (int64_t n = 0; n < cc.n; ++n)
    for (int64_t m = 0; m < cc.m; ++m)
      for (int64_t o0 = 0; o0 < O[0]; ++o0)
        for (int64_t o1 = 0; o1 < O[1]; ++o1)
          for (int64_t o2 = 0; o2 < O[2]; ++o2) {
            double acc = cc.bias ? double(b[size_t(m)]) : 0.0;
            int64_t g = m / mg;
            for (int64_t c = 0; c < cg; ++c)
              for (int64_t k0 = 0; k0 < K[0]; ++k0)
                for (int64_t k1 = 0; k1 < K[1]; ++k1)
                  for (int64_t k2 = 0; k2 < K[2]; ++k2) {
                    int64_t i0 = o0 * S[0] - P[0] + k0 * D[0], i1 = o1 * S[1] - P[1] + k1 * D[1],
                            i2 = o2 * S[2] - P[2] + k2 * D[2];
                    if (i0 < 0 || i0 >= I[0] || i1 < 0 || i1 >= I[1] || i2 < 0 || i2 >= I[2])
                      continue;
                    double xv =
                        x[size_t((((n * cc.c + g * cg + c) * I[0] + i0) * I[1] + i1) * I[2] + i2)];
                    double wv = w[size_t((((m * cg + c) * K[0] + k0) * K[1] + k1) * K[2] + k2)];
                    acc += xv * wv;
                  }
            double got = y[size_t((((n * cc.m + m) * O[0] + o0) * O[1] + o1) * O[2] + o2)];
            double err = std::abs(got - acc);
            worst = std::max(worst, err);
            bad += err > (std::is_same_v<T, double> ? 1e-10 : 1e-4) * (1 + std::abs(acc));
          }
  CAPTURE(worst);
  CHECK(bad == 0);
}

const std::vector<ConvCase> kConvCases = {
    // in, kernel, strides, dilations, pads (begins, ends), n, c, m, group, bias
    {{9, 8}, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, 3, 4, 6, 1, true},     // plain 3x3 same
    {{11, 10}, {3, 2}, {2, 3}, {1, 1}, {0, 1, 2, 1}, 2, 4, 6, 2, true},   // groups, asym pads
    {{12, 12}, {3, 3}, {1, 2}, {2, 3}, {2, 1, 1, 2}, 2, 3, 4, 1, false},  // dilations
    {{10, 9}, {3, 3}, {2, 1}, {1, 2}, {1, 1, 1, 1}, 3, 6, 12, 6, true},   // depthwise x2
    {{7, 7}, {1, 1}, {1, 1}, {1, 1}, {0, 0, 0, 0}, 2, 8, 5, 1, true},     // pointwise
    {{8, 8}, {1, 1}, {2, 2}, {1, 1}, {0, 0, 0, 0}, 2, 8, 4, 1, false},    // 1x1 stride 2
    {{17}, {4}, {2}, {2}, {3, 1}, 2, 4, 4, 2, true},                      // 1-D
    {{5, 6, 7}, {2, 3, 2}, {1, 2, 1}, {2, 1, 1}, {1, 0, 1, 0, 1, 1}, 2, 2, 3, 1, true},  // 3-D
};

}  // namespace

TEST_CASE("conv: groups, depthwise, strides, pads, dilations, 1-D to 3-D, against a naive loop") {
  auto one = make_cpu_device(1), two = make_cpu_device(2);
  for (size_t i = 0; i < kConvCases.size(); ++i) {
    CAPTURE(i);
    for (Device* dev : {one.get(), two.get()}) {
      check_conv<double>(kConvCases[i], *dev);  // im2col + GEMM
      check_conv<float>(kConvCases[i], *dev);   // oneDNN where built with it
    }
  }
}

TEST_CASE("gemm: transposes, alpha, beta and C broadcasting") {
  auto two = make_cpu_device(2);
  const int64_t M = 37, N = 29, K = 23;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (std::vector<int64_t> cd :
           std::vector<std::vector<int64_t>>{{}, {N}, {M, 1}, {1}, {M, N}, {0}}) {
        bool has_c = cd != std::vector<int64_t>{0};
        CAPTURE(ta);
        CAPTURE(tb);
        CAPTURE(cd.size());
        ops::GemmParams p;
        p.alpha = 0.5f;
        p.beta = 2.0f;
        p.trans_a = ta;
        p.trans_b = tb;
        std::any params = p;
        auto A = random_vec<double>(M * K, 4), B = random_vec<double>(K * N, 5),
             C = random_vec<double>(has_c ? numel(cd) : 1, 6);
        std::vector<double> Y(size_t(M * N), -99);
        KernelArgs a;
        a.in = {view(A, ta ? std::vector<int64_t>{K, M} : std::vector<int64_t>{M, K}),
                view(B, tb ? std::vector<int64_t>{N, K} : std::vector<int64_t>{K, N}),
                has_c ? view(C, cd) : TensorView{}};
        a.out = {view(Y, {M, N})};
        launch(OpKind::Gemm, a, *two, &params);
        int bad = 0;
        for (int64_t i = 0; i < M; ++i)
          for (int64_t j = 0; j < N; ++j) {
            double acc = 0;
            for (int64_t k = 0; k < K; ++k)
              acc += A[size_t(ta ? k * M + i : i * K + k)] * B[size_t(tb ? j * K + k : k * N + j)];
            double c = 0;
            if (has_c) {
              if (cd.size() == 2)
                c = C[size_t((cd[0] == 1 ? 0 : i) * cd[1] + (cd[1] == 1 ? 0 : j))];
              else if (cd.size() == 1)
                c = C[size_t(cd[0] == 1 ? 0 : j)];
              else
                c = C[0];
            }
            bad += std::abs(Y[size_t(i * N + j)] - (0.5 * acc + 2.0 * c)) > 1e-12;
          }
        CHECK(bad == 0);
      }
  // Large enough to be split by rows over 2 threads (f32).
  ops::GemmParams p;
  p.trans_b = true;
  std::any params = p;
  const int64_t m = 256, n = 96, k = 80;
  auto A = random_vec<float>(m * k, 7), B = random_vec<float>(n * k, 8),
       C = random_vec<float>(n, 9);
  std::vector<float> Y(size_t(m * n));
  KernelArgs a;
  a.in = {view(A, {m, k}), view(B, {n, k}), view(C, {n})};
  a.out = {view(Y, {m, n})};
  launch(OpKind::Gemm, a, *two, &params);
  int bad = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = C[size_t(j)];
      for (int64_t q = 0; q < k; ++q) acc += double(A[size_t(i * k + q)]) * B[size_t(j * k + q)];
      bad += std::abs(Y[size_t(i * n + j)] - acc) > 1e-4 * (1 + std::abs(acc));
    }
  CHECK(bad == 0);
}

TEST_CASE("matmul: batch broadcasting and 1-D promotion") {
  auto two = make_cpu_device(2);
  struct Case {
    std::vector<int64_t> a, b, y;
  };
  const std::vector<Case> cases = {
      {{2, 1, 3, 4}, {5, 4, 2}, {2, 5, 3, 2}},  // both broadcast
      {{4}, {2, 4, 3}, {2, 3}},                 // 1-D left
      {{2, 3, 4}, {4}, {2, 3}},                 // 1-D right
      {{4}, {4}, {}},                           // dot
      {{6, 3, 4}, {4, 5}, {6, 3, 5}},           // shared right matrix: folded into rows
      {{3, 4}, {6, 4, 5}, {6, 3, 5}},           // shared left matrix
      {{64, 48}, {48, 40}, {64, 40}},           // one product split over 2 threads
  };
  for (const Case& c : cases) {
    CAPTURE(c.a.size());
    CAPTURE(c.b.size());
    auto A = random_vec<double>(numel(c.a), 10), B = random_vec<double>(numel(c.b), 11);
    std::vector<double> Y(size_t(numel(c.y)), -99);
    KernelArgs k;
    k.in = {view(A, c.a), view(B, c.b)};
    k.out = {view(Y, c.y)};
    launch(OpKind::MatMul, k, *two, nullptr);
    // Reference: promote, broadcast over 4 batch dims.
    std::vector<int64_t> ad = c.a, bd = c.b;
    if (ad.size() == 1) ad.insert(ad.begin(), 1);
    if (bd.size() == 1) bd.push_back(1);
    while (ad.size() < 6) ad.insert(ad.begin(), 1);
    while (bd.size() < 6) bd.insert(bd.begin(), 1);
    int64_t M = ad[4], K = ad[5], N = bd[5];
    std::vector<int64_t> ob(4);
    for (size_t i = 0; i < 4; ++i) ob[i] = std::max(ad[i], bd[i]);
    int bad = 0;
    int64_t o = 0;
    for (int64_t b0 = 0; b0 < ob[0]; ++b0)
      for (int64_t b1 = 0; b1 < ob[1]; ++b1)
        for (int64_t b2 = 0; b2 < ob[2]; ++b2)
          for (int64_t b3 = 0; b3 < ob[3]; ++b3) {
            auto off = [&](const std::vector<int64_t>& d) {
              int64_t idx[4] = {b0, b1, b2, b3}, f = 0;
              for (size_t i = 0; i < 4; ++i) f = f * d[i] + (d[i] == 1 ? 0 : idx[i]);
              return f * d[4] * d[5];
            };
            int64_t oa = off(ad), obb = off(bd);
            for (int64_t i = 0; i < M; ++i)
              for (int64_t j = 0; j < N; ++j, ++o) {
                double acc = 0;
                for (int64_t q = 0; q < K; ++q)
                  acc += A[size_t(oa + i * K + q)] * B[size_t(obb + q * N + j)];
                bad += std::abs(Y[size_t(o)] - acc) > 1e-12;
              }
          }
    CHECK(o == numel(c.y));
    CHECK(bad == 0);
  }
}

TEST_CASE("maxpool: values and indices (row- and column-major) with pads, strides, dilations") {
  auto two = make_cpu_device(2);
  // X [2,3,7,6], kernel 3x2, strides 2x1, dilations 1x2, pads 1,0 / 1,1, ceil_mode.
  const int64_t N = 2, C = 3, H = 7, W = 6;
  for (int64_t order : {0, 1}) {
    ops::PoolParams p;
    p.window.kernel_shape = {3, 2};
    p.window.strides = {2, 1};
    p.window.dilations = {1, 2};
    p.window.pads = {1, 0, 1, 1};
    p.window.ceil_mode = true;
    p.storage_order = order;
    std::any params = p;
    const int64_t OH = 4, OW = 5;  // ceil((7+2-3)/2)+1 = 4; (6+1-3)/1+1 = 5
    auto x = random_vec<float>(N * C * H * W, 12);
    std::vector<float> y(size_t(N * C * OH * OW));
    std::vector<int64_t> ind(y.size(), -1);
    KernelArgs a;
    a.in = {view(x, {N, C, H, W})};
    a.out = {view(y, {N, C, OH, OW}), TensorView{ind.data(), DType::I64, {N, C, OH, OW}}};
    launch(OpKind::MaxPool, a, *two, &params);
    int bad = 0;
    for (int64_t pc = 0; pc < N * C; ++pc)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          float best = -1e30f;
          int64_t bh = -1, bw = -1;
          for (int64_t kh = 0; kh < 3; ++kh)
            for (int64_t kw = 0; kw < 2; ++kw) {
              int64_t ih = oh * 2 - 1 + kh, iw = ow - 0 + kw * 2;
              if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
              float v = x[size_t((pc * H + ih) * W + iw)];
              if (v > best) best = v, bh = ih, bw = iw;
            }
          size_t o = size_t((pc * OH + oh) * OW + ow);
          int64_t want = pc * H * W + (order == 0 ? bh * W + bw : bh + bw * H);
          bad += y[o] != best || ind[o] != want;
        }
    CAPTURE(order);
    CHECK(bad == 0);
  }
}

TEST_CASE("averagepool: count_include_pad and ceil_mode divisors") {
  auto one = make_cpu_device(1);
  // X [1,1,3,3] = 1..9, kernel 2x2, stride 2, pads 1 each side -> out 2x2 (floor).
  std::vector<float> x{1, 2, 3, 4, 5, 6, 7, 8, 9};
  for (bool include : {false, true}) {
    ops::PoolParams p;
    p.window.kernel_shape = {2, 2};
    p.window.strides = {2, 2};
    p.window.dilations = {1, 1};
    p.window.pads = {1, 1, 1, 1};
    p.count_include_pad = include;
    std::any params = p;
    std::vector<float> y(4);
    KernelArgs a;
    a.in = {view(x, {1, 1, 3, 3})};
    a.out = {view(y, {1, 1, 2, 2})};
    launch(OpKind::AveragePool, a, *one, &params);
    // Windows: {1}, {2,3}, {4,7}, {5,6,8,9}
    std::vector<float> want = include ? std::vector<float>{1 / 4.f, 5 / 4.f, 11 / 4.f, 28 / 4.f}
                                      : std::vector<float>{1, 2.5f, 5.5f, 7};
    for (size_t i = 0; i < 4; ++i) CHECK(y[i] == doctest::Approx(want[i]));
  }
  // ceil_mode overhang is not counted as padding: X [1,1,1,5], kernel 1x2, stride 2, no pads,
  // ceil -> 3 windows, the last holding x[4] alone.
  ops::PoolParams p;
  p.window.kernel_shape = {1, 2};
  p.window.strides = {1, 2};
  p.window.dilations = {1, 1};
  p.window.pads = {0, 0, 0, 0};
  p.window.ceil_mode = true;
  p.count_include_pad = true;
  std::any params = p;
  std::vector<float> x5{1, 2, 3, 4, 10}, y3(3);
  KernelArgs a;
  a.in = {view(x5, {1, 1, 1, 5})};
  a.out = {view(y3, {1, 1, 1, 3})};
  launch(OpKind::AveragePool, a, *one, &params);
  CHECK(y3[2] == doctest::Approx(10));
}

// ---- pooling windows far larger than the input ----------------------------------------------
// A hostile-input probe: kernel 2^40 per axis with SAME padding looped over the padding without
// end. Every window then covers the whole input, so the results are the clipped window's by hand:
// MaxPool the plane's maximum (its gradient all on the first maximum), AveragePool the plane's
// mean (count_include_pad=0) or its sum over the window's size product (count_include_pad=1:
// every window lies inside the padded input). Run on the CPU and on the CUDA kernels' host build.
namespace {

struct HugePool {
  std::vector<int64_t> x;              // [N,C,D...]
  std::vector<int64_t> k, s, pads, y;  // window, strides, pads (begins, ends), Y's dims
  double window;                       // count_include_pad=1's divisor
};

std::vector<HugePool> huge_pools() {
  constexpr int64_t K = int64_t{1} << 40, S = int64_t{1} << 62;
  const int64_t b = (K - 1) / 2, e = K - 1 - b;  // SAME_UPPER with stride 1
  const double k = std::ldexp(1.0, 40);
  return {
      {{1, 2, 8, 8}, {K, K}, {1, 1}, {b, b, e, e}, {1, 2, 8, 8}, k * k},
      {{2, 1, 11}, {K}, {1}, {b, e}, {2, 1, 11}, k},
      {{1, 1, 2, 3, 4}, {K, K, K}, {1, 1, 1}, {b, b, b, e, e, e}, {1, 1, 2, 3, 4}, k * k * k},
      // two windows per row, 2^38 apart, each covering the row: the rows far wider than the input
      // that MaxPool's row loop would walk column by column
      {{1, 2, 3, 8},
       {K, K},
       {1, int64_t{1} << 38},
       {b, int64_t{1} << 39, e, (int64_t{1} << 39) + (int64_t{1} << 38)},
       {1, 2, 3, 2},
       k * k},
      // one window per plane at stride 2^62: rows and columns -1..1 of an 8x8 input, so x[0..1]
      {{1, 2, 2, 2}, {3, 3}, {S, S}, {1, 1, 1, 1}, {1, 2, 1, 1}, 9},
  };
}

std::vector<std::pair<const char*, std::unique_ptr<Device>>> pool_devices() {
  std::vector<std::pair<const char*, std::unique_ptr<Device>>> d;
  d.emplace_back("cpu", make_cpu_device(2));
  d.emplace_back("cuda-host", make_cuda_host_run_device());
  return d;
}

ops::PoolParams huge_params(const HugePool& h, bool include_pad) {
  ops::PoolParams p;
  p.window.kernel_shape = h.k;
  p.window.strides = h.s;
  p.window.dilations.assign(h.k.size(), 1);
  p.window.pads = h.pads;
  p.count_include_pad = include_pad;
  return p;
}

}  // namespace

TEST_CASE("pooling: windows far larger than the input are clipped to it, forward and backward") {
  for (auto& [name, dev] : pool_devices())
    for (const HugePool& h : huge_pools()) {
      CAPTURE(name);
      CAPTURE(h.x.size());
      const int64_t planes = h.x[0] * h.x[1], vol = numel(h.x) / planes;
      const int64_t ovol = numel(h.y) / planes;
      auto x = random_vec<float>(numel(h.x), 21), dy = random_vec<float>(numel(h.y), 22);
      // The plane's maximum, its first position, its sum, and dy's sum per plane.
      std::vector<float> best(planes);
      std::vector<int64_t> at(planes);
      std::vector<double> sum(planes), dsum(planes);
      for (int64_t pc = 0; pc < planes; ++pc) {
        at[pc] = pc * vol;
        for (int64_t q = pc * vol; q < (pc + 1) * vol; ++q) {
          if (x[q] > x[at[pc]]) at[pc] = q;
          sum[pc] += x[q];
        }
        best[pc] = x[at[pc]];
        for (int64_t o = pc * ovol; o < (pc + 1) * ovol; ++o) dsum[pc] += dy[o];
      }
      for (bool include : {false, true}) {
        std::any params = huge_params(h, include);
        const double div = include ? h.window : static_cast<double>(vol);
        {  // MaxPool with row-major indices, then without indices
          std::vector<float> y(numel(h.y));
          std::vector<int64_t> ind(y.size(), -1);
          KernelArgs a;
          a.in = {view(x, h.x)};
          a.out = {view(y, h.y), TensorView{ind.data(), DType::I64, h.y}};
          launch(OpKind::MaxPool, a, *dev, &params);
          for (size_t o = 0; o < y.size(); ++o) {
            CHECK(y[o] == best[o / ovol]);
            CHECK(ind[o] == at[o / ovol]);
          }
          std::fill(y.begin(), y.end(), 0.f);
          a.out.resize(1);
          launch(OpKind::MaxPool, a, *dev, &params);
          for (size_t o = 0; o < y.size(); ++o) CHECK(y[o] == best[o / ovol]);
        }
        {  // AveragePool
          std::vector<float> y(numel(h.y));
          KernelArgs a;
          a.in = {view(x, h.x)};
          a.out = {view(y, h.y)};
          launch(OpKind::AveragePool, a, *dev, &params);
          for (size_t o = 0; o < y.size(); ++o)
            CHECK(y[o] == doctest::Approx(sum[o / ovol] / div).epsilon(1e-5));
        }
        {  // MaxPoolGrad: every window's dy lands on the plane's first maximum
          std::vector<float> dx(numel(h.x), -1.f);
          KernelArgs a;
          a.in = {view(dy, h.y), view(x, h.x)};
          a.out = {view(dx, h.x)};
          launch(OpKind::MaxPoolGrad, a, *dev, &params);
          for (int64_t q = 0; q < numel(h.x); ++q)
            CHECK(dx[q] == doctest::Approx(q == at[q / vol] ? dsum[q / vol] : 0.0).epsilon(1e-5));
        }
        {  // AveragePoolGrad: every input position is in every window
          std::vector<float> dx(numel(h.x), -1.f);
          std::vector<int64_t> shape = h.x;
          KernelArgs a;
          a.in = {view(dy, h.y),
                  TensorView{shape.data(), DType::I64, {static_cast<int64_t>(shape.size())}}};
          a.out = {view(dx, h.x)};
          launch(OpKind::AveragePoolGrad, a, *dev, &params);
          for (int64_t q = 0; q < numel(h.x); ++q)
            CHECK(dx[q] == doctest::Approx(dsum[q / vol] / div).epsilon(1e-5));
        }
      }
    }
}

TEST_CASE("batchnorm: training-mode statistics and running updates by hand") {
  auto two = make_cpu_device(2);
  const int64_t N = 3, C = 2, S = 4;  // X [3,2,2,2]
  auto x = random_vec<double>(N * C * S, 13);
  std::vector<double> scale{1.5, -0.5}, bias{0.25, 1.0}, rmean{0.1, -0.2}, rvar{0.9, 1.1};
  ops::BatchNormalizationParams p;
  p.epsilon = 1e-3f;
  p.momentum = 0.8f;
  p.training = true;
  p.unbiased_running_var = true;  // the trainer's (PyTorch's) running variance
  std::any params = p;
  std::vector<double> y(x.size()), om(2), ov(2), sm(2), sv(2), ov_onnx(2);
  KernelArgs a;
  a.in = {view(x, {N, C, 2, 2}), view(scale, {C}), view(bias, {C}), view(rmean, {C}),
          view(rvar, {C})};
  a.out = {view(y, {N, C, 2, 2}), view(om, {C}), view(ov, {C}), view(sm, {C}), view(sv, {C})};
  launch(OpKind::BatchNormalization, a, *two, &params);
  // The ONNX spec's: the biased batch variance.
  ops::BatchNormalizationParams po = p;
  po.unbiased_running_var = false;
  std::any params_onnx = po;
  std::vector<double> y2(x.size()), om2(2);
  KernelArgs a2 = a;
  a2.out = {view(y2, {N, C, 2, 2}), view(om2, {C}), view(ov_onnx, {C})};
  launch(OpKind::BatchNormalization, a2, *two, &params_onnx);
  const double mom = double(0.8f), eps = double(1e-3f);
  for (int64_t c = 0; c < C; ++c) {
    double sum = 0, sq = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t s = 0; s < S; ++s) sum += x[size_t((n * C + c) * S + s)];
    double mean = sum / (N * S);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t s = 0; s < S; ++s) sq += std::pow(x[size_t((n * C + c) * S + s)] - mean, 2);
    double var = sq / (N * S), var_unbiased = sq / (N * S - 1);
    CHECK(om[size_t(c)] ==
          doctest::Approx(rmean[size_t(c)] * mom + mean * (1 - mom)).epsilon(1e-12));
    CHECK(ov[size_t(c)] ==
          doctest::Approx(rvar[size_t(c)] * mom + var_unbiased * (1 - mom)).epsilon(1e-12));
    CHECK(ov_onnx[size_t(c)] ==
          doctest::Approx(rvar[size_t(c)] * mom + var * (1 - mom)).epsilon(1e-12));
    CHECK(sm[size_t(c)] == doctest::Approx(mean).epsilon(1e-12));
    CHECK(sv[size_t(c)] == doctest::Approx(var).epsilon(1e-12));
    for (int64_t n = 0; n < N; ++n)
      for (int64_t s = 0; s < S; ++s) {
        size_t i = size_t((n * C + c) * S + s);
        double want = scale[size_t(c)] * (x[i] - mean) / std::sqrt(var + eps) + bias[size_t(c)];
        CHECK(y[i] == doctest::Approx(want).epsilon(1e-12));
      }
  }
  // Inference mode normalises with the running statistics (f32).
  p.training = false;
  params = p;
  std::vector<float> xf{1, 2, 3, 4}, sf{2}, bf{1}, mf{2}, vf{4}, yf(4);
  KernelArgs b;
  b.in = {view(xf, {4, 1}), view(sf, {1}), view(bf, {1}), view(mf, {1}), view(vf, {1})};
  b.out = {view(yf, {4, 1})};
  launch(OpKind::BatchNormalization, b, *two, &params);
  for (size_t i = 0; i < 4; ++i)
    CHECK(yf[i] == doctest::Approx(2 * (xf[i] - 2) / std::sqrt(4 + 1e-3) + 1).epsilon(1e-6));
}

// GemmParams::bf16 / MatMulParams (--precision bf16): a product large enough for the bf16 path
// is the exact product of the bf16-rounded operands summed in f32 (or better): it matches an f64
// computation on rounded inputs to f32 accuracy and differs from the unrounded one by the
// rounding (so the bf16 path really ran). On the CPU where oneDNN has no bf16 kernels for these
// cores the f32 path runs (within f32 accuracy of the unrounded product). The CUDA backend rounds
// always: on the host (cuda-host) its naive kernel runs on the rounded operands; on a GPU,
// cuBLASLt with bf16 operands and f32 results.
TEST_CASE("gemm and matmul in bf16: bf16-rounded operands, f32 accumulation") {
  std::vector<std::pair<std::unique_ptr<Device>, bool>> devices;  // (device, rounds)
  devices.emplace_back(make_cpu_device(2), cpu::dnnl_bf16_available());
  devices.emplace_back(make_cuda_host_run_device(), true);
  std::string why;
  if (cuda_device_count(&why) > 0) devices.emplace_back(make_cuda_device(0), true);
  for (auto& [two, bf16_cores] : devices) {
    CAPTURE(two->caps().name);
    auto round16 = [](std::vector<float> v) {
      for (float& x : v) x = math::bf16_to_f32(math::f32_to_bf16(x));
      return v;
    };
    // Y[i][j] = sum_q op(A)[i][q] op(B)[q][j] (+ C[j]), in f64, for A, B stored as given.
    auto reference = [](const std::vector<float>& A, const std::vector<float>& B,
                        const std::vector<float>* C, bool ta, bool tb, int64_t M, int64_t N,
                        int64_t K) {
      std::vector<double> y(size_t(M * N));
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
          double acc = C ? (*C)[size_t(j)] : 0.0;
          for (int64_t q = 0; q < K; ++q)
            acc += double(A[size_t(ta ? q * M + i : i * K + q)]) *
                   B[size_t(tb ? j * K + q : q * N + j)];
          y[size_t(i * N + j)] = acc;
        }
      return y;
    };
    auto check = [&](const std::vector<float>& got, const std::vector<double>& rounded,
                     const std::vector<double>& exact) {
      double scale = 0, e_r = 0, e_x = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        scale = std::max(scale, std::abs(rounded[i]));
        e_r = std::max(e_r, std::abs(got[i] - rounded[i]));
        e_x = std::max(e_x, std::abs(got[i] - exact[i]));
      }
      CHECK(scale > 0);
      if (bf16_cores) {
        CHECK(e_r <= 1e-5 * scale);
        CHECK(e_x > 1e-4 * scale);  // the rounding shows
      } else {
        CHECK(e_x <= 1e-5 * scale);
      }
    };
    // 737,280 multiply-adds, split over the two threads by rows of C (taller than wide) and by
    // columns (wider): each operand rounded once into buffers both threads read. A long K read
    // transposed (a weight's gradient) goes in K slices accumulated into C (gemm.cpp).
    struct Mnk {
      int64_t m, n, k;
    };
    for (const auto [M, N, K] : {Mnk{192, 80, 48}, Mnk{48, 192, 80}, Mnk{64, 40, 1100}})
      for (bool ta : {false, true})
        for (bool tb : {false, true})
          for (bool with_c : {false, true}) {
            CAPTURE(M);
            CAPTURE(ta);
            CAPTURE(tb);
            CAPTURE(with_c);
            ops::GemmParams p;
            p.trans_a = ta;
            p.trans_b = tb;
            p.beta = with_c ? 1.0f : 0.0f;
            p.bf16 = true;
            std::any params = p;
            auto A = random_vec<float>(M * K, 7), B = random_vec<float>(K * N, 8),
                 C = random_vec<float>(N, 9);
            std::vector<float> Y(size_t(M * N), -99);
            KernelArgs a;
            a.in = {view(A, ta ? std::vector<int64_t>{K, M} : std::vector<int64_t>{M, K}),
                    view(B, tb ? std::vector<int64_t>{N, K} : std::vector<int64_t>{K, N})};
            if (with_c) a.in.push_back(view(C, {N}));
            a.out = {view(Y, {M, N})};
            launch(OpKind::Gemm, a, *two, &params);
            check(Y, reference(round16(A), round16(B), with_c ? &C : nullptr, ta, tb, M, N, K),
                  reference(A, B, with_c ? &C : nullptr, ta, tb, M, N, K));
          }
    // MatMul: a shared right matrix (the batch folded into rows) and one product per batch index.
    for (const bool shared : {true, false}) {
      CAPTURE(shared);
      const int64_t batch = 3, m = 64, k = 72, n = 64;
      std::any params = ops::MatMulParams{true};
      auto A = random_vec<float>(batch * m * k, 10),
           B = random_vec<float>((shared ? 1 : batch) * k * n, 11);
      std::vector<float> Y(size_t(batch * m * n), -99);
      KernelArgs a;
      a.in = {view(A, {batch, m, k}), shared ? view(B, {k, n}) : view(B, {batch, k, n})};
      a.out = {view(Y, {batch, m, n})};
      launch(OpKind::MatMul, a, *two, &params);
      const std::vector<float> Ar = round16(A), Br = round16(B);
      std::vector<double> rounded, exact;
      for (int64_t b = 0; b < batch; ++b) {
        auto slice = [&](const std::vector<float>& v, int64_t len, int64_t i) {
          return std::vector<float>(v.begin() + i * len, v.begin() + (i + 1) * len);
        };
        const int64_t bb = shared ? 0 : b;
        auto r =
            reference(slice(Ar, m * k, b), slice(Br, k * n, bb), nullptr, false, false, m, n, k);
        auto x = reference(slice(A, m * k, b), slice(B, k * n, bb), nullptr, false, false, m, n, k);
        rounded.insert(rounded.end(), r.begin(), r.end());
        exact.insert(exact.end(), x.begin(), x.end());
      }
      check(Y, rounded, exact);
    }
  }
}

// MatMulParams::trans_a / trans_b (fold_matmul_transposes): operands stored [..., K, M] and
// [..., N, K] multiply as their transposes, against a naive loop, batched, with a shared right
// matrix and as one product (f64: exact sums; f32: oneDNN's sgemm).
TEST_CASE("matmul: operands stored transposed") {
  auto two = make_cpu_device(2);
  struct Shape {
    std::vector<int64_t> a, b;  // logical [.., M, K], [.., K, N]
  };
  const Shape shapes[] = {{{3, 5, 7}, {3, 7, 4}},
                          {{2, 3, 5, 7}, {7, 4}},
                          {{33, 17}, {17, 40}},
                          {{4, 70, 9}, {4, 9, 66}}};
  for (const Shape& s : shapes)
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        CAPTURE(s.a.size());
        CAPTURE(ta);
        CAPTURE(tb);
        const size_t ra = s.a.size(), rb = s.b.size();
        const int64_t M = s.a[ra - 2], K = s.a[ra - 1], N = s.b[rb - 1];
        const int64_t batch = numel(s.a) / (M * K), bbatch = numel(s.b) / (K * N);
        auto A = random_vec<double>(numel(s.a), 21), B = random_vec<double>(numel(s.b), 22);
        std::vector<int64_t> ad = s.a, bd = s.b;  // stored dims
        if (ta) std::swap(ad[ra - 1], ad[ra - 2]);
        if (tb) std::swap(bd[rb - 1], bd[rb - 2]);
        std::vector<int64_t> yd(s.a.begin(), s.a.end() - 1);
        yd.push_back(N);
        for (const bool f64 : {true, false}) {
          CAPTURE(f64);
          std::any params = ops::MatMulParams{false, ta, tb};
          std::vector<double> Y(size_t(batch * M * N), -99);
          std::vector<float> Af(A.begin(), A.end()), Bf(B.begin(), B.end()), Yf(Y.size(), -99.0f);
          KernelArgs k;
          if (f64) {
            k.in = {view(A, ad), view(B, bd)};
            k.out = {view(Y, yd)};
          } else {
            k.in = {view(Af, ad), view(Bf, bd)};
            k.out = {view(Yf, yd)};
          }
          launch(OpKind::MatMul, k, *two, &params);
          int bad = 0;
          for (int64_t b = 0; b < batch; ++b) {
            const int64_t ob = bbatch == 1 ? 0 : b;
            for (int64_t i = 0; i < M; ++i)
              for (int64_t j = 0; j < N; ++j) {
                double acc = 0;
                for (int64_t q = 0; q < K; ++q)
                  acc += A[size_t(b * M * K + (ta ? q * M + i : i * K + q))] *
                         B[size_t(ob * K * N + (tb ? j * K + q : q * N + j))];
                const double got =
                    f64 ? Y[size_t((b * M + i) * N + j)] : Yf[size_t((b * M + i) * N + j)];
                bad += std::abs(got - acc) > (f64 ? 1e-12 : 1e-4 * (1 + std::abs(acc)));
              }
          }
          CHECK(bad == 0);
        }
      }
}

namespace {
// Flat index in a row-major tensor of dims `stored` of the element at logical index `idx` of
// Transpose(stored, perm) (perm empty: the identity).
int64_t permuted_index(const std::vector<int64_t>& stored, const std::vector<int64_t>& perm,
                       const std::vector<int64_t>& idx) {
  std::vector<int64_t> at(stored.size());
  for (size_t i = 0; i < idx.size(); ++i) at[perm.empty() ? i : size_t(perm[i])] = idx[i];
  int64_t flat = 0;
  for (size_t i = 0; i < stored.size(); ++i) flat = flat * stored[i] + at[i];
  return flat;
}
std::vector<int64_t> permuted_dims(const std::vector<int64_t>& stored,
                                   const std::vector<int64_t>& perm) {
  std::vector<int64_t> d(stored.size());
  for (size_t i = 0; i < d.size(); ++i) d[i] = stored[perm.empty() ? i : size_t(perm[i])];
  return d;
}
}  // namespace

// MatMulParams::a_perm / b_perm / y_perm (fold_matmul_transposes on the CPU): operands read as
// Transpose(input, perm) (then swapped where trans_a / trans_b) and the result written as
// Transpose(A B, y_perm), through strides, against a naive loop over the logical tensors: the
// heads' [N,T,H,d] <-> [N,H,T,d], K^T, a result whose rows are not contiguous (Y^T = B^T A^T), a
// broadcast right matrix, one product, and the bf16 path.
TEST_CASE("matmul: operands and result read and written through permutations") {
  auto two = make_cpu_device(2);
  struct Case {
    std::vector<int64_t> a, b, a_perm, b_perm, y_perm;  // a, b: stored dims
    bool ta, tb;
  };
  const Case cases[] = {
      // Q [N,T,H,d] read as [N,H,T,d], K^T as [N,H,d,T]; the result joined back to [N,T,H,T'].
      {{2, 5, 3, 4}, {2, 6, 3, 4}, {0, 2, 1, 3}, {0, 2, 3, 1}, {0, 2, 1, 3}, false, false},
      // The same with K read swapped instead, and the result stored [N,T',H,T] (Y^T rows).
      {{2, 5, 3, 4}, {2, 6, 3, 4}, {0, 2, 1, 3}, {0, 2, 1, 3}, {0, 3, 1, 2}, false, true},
      // A permuted and transposed; B a broadcast matrix; result plain.
      {{2, 4, 3, 5}, {4, 6}, {0, 2, 1, 3}, {}, {}, true, false},
      // One product: a rank-2 result stored transposed; B through a permutation.
      {{7, 9}, {11, 9}, {}, {1, 0}, {1, 0}, false, false},
      // Large enough for the bf16 path per product: [N,T,H,d] with T 96, d 64.
      {{2, 96, 2, 64}, {2, 96, 2, 64}, {0, 2, 1, 3}, {0, 2, 3, 1}, {0, 2, 1, 3}, false, false},
  };
  for (const Case& c : cases) {
    std::vector<int64_t> la = permuted_dims(c.a, c.a_perm), lb = permuted_dims(c.b, c.b_perm);
    if (c.ta) std::swap(la[la.size() - 1], la[la.size() - 2]);
    if (c.tb) std::swap(lb[lb.size() - 1], lb[lb.size() - 2]);
    const size_t ra = la.size(), rb = lb.size();
    const int64_t M = la[ra - 2], K = la[ra - 1], N = lb[rb - 1];
    REQUIRE(lb[rb - 2] == K);
    std::vector<int64_t> ly(la.begin(), la.end() - 2);  // A's batch dims (B's broadcast or equal)
    ly.push_back(M);
    ly.push_back(N);
    std::vector<int64_t> yd = ly;  // stored result: stored dim j is logical dim y_perm[j]
    for (size_t j = 0; j < c.y_perm.size(); ++j) yd[j] = ly[size_t(c.y_perm[j])];
    const int64_t batch = numel(ly) / (M * N);
    auto A = random_vec<double>(numel(c.a), 31), B = random_vec<double>(numel(c.b), 32);
    for (int mode = 0; mode < 3; ++mode) {  // f64, f32, bf16
      CAPTURE(mode);
      CAPTURE(M);
      if (mode == 2 && !cpu::dnnl_bf16_available()) continue;
      ops::MatMulParams p{mode == 2, c.ta, c.tb};
      p.a_perm.assign(c.a_perm.begin(), c.a_perm.end());
      p.b_perm.assign(c.b_perm.begin(), c.b_perm.end());
      p.y_perm.assign(c.y_perm.begin(), c.y_perm.end());
      std::any params = p;
      // bf16 multiplies the operands rounded (products too small for it stay f32): the
      // reference does too.
      const bool rounds = mode == 2 && M * N * K >= ops::kBf16MinMacs;
      auto value = [&](const std::vector<double>& v, int64_t i) {
        return rounds ? double(math::bf16_to_f32(math::f32_to_bf16(float(v[size_t(i)]))))
                      : v[size_t(i)];
      };
      std::vector<double> Y(size_t(numel(yd)), -99);
      std::vector<float> Af(A.begin(), A.end()), Bf(B.begin(), B.end()), Yf(Y.size(), -99.0f);
      KernelArgs k;
      if (mode == 0) {
        k.in = {view(A, c.a), view(B, c.b)};
        k.out = {view(Y, yd)};
      } else {
        k.in = {view(Af, c.a), view(Bf, c.b)};
        k.out = {view(Yf, yd)};
      }
      launch(OpKind::MatMul, k, *two, &params);
      int bad = 0;
      std::vector<int64_t> ia(ra), ib(rb), iy(ly.size());
      for (int64_t bi = 0; bi < batch; ++bi) {
        int64_t rem = bi;  // batch index -> A's batch dims (B's: the same, or none)
        for (size_t d = ra - 2; d-- > 0;) {
          ia[d] = rem % la[d];
          rem /= la[d];
        }
        for (size_t d = 0; d + 2 < rb; ++d) ib[d] = ia[d + (ra - rb)];
        for (int64_t i = 0; i < M; ++i)
          for (int64_t j = 0; j < N; ++j) {
            double acc = 0;
            for (int64_t q = 0; q < K; ++q) {
              ia[ra - 2] = c.ta ? q : i, ia[ra - 1] = c.ta ? i : q;
              ib[rb - 2] = c.tb ? j : q, ib[rb - 1] = c.tb ? q : j;
              // Undo the swap: the stored operand's permuted index has (K, M) when trans_a.
              acc += value(A, permuted_index(c.a, c.a_perm, ia)) *
                     value(B, permuted_index(c.b, c.b_perm, ib));
            }
            std::copy(ia.begin(), ia.end() - 2, iy.begin());
            iy[iy.size() - 2] = i, iy[iy.size() - 1] = j;
            std::vector<int64_t> sy(iy.size());  // stored index of logical y[iy]
            for (size_t d = 0; d < iy.size(); ++d)
              sy[d] = c.y_perm.empty() ? iy[d] : iy[size_t(c.y_perm[d])];
            int64_t flat = 0;
            for (size_t d = 0; d < yd.size(); ++d) flat = flat * yd[d] + sy[d];
            const double got = mode == 0 ? Y[size_t(flat)] : Yf[size_t(flat)];
            bad += std::abs(got - acc) > (mode == 0 ? 1e-12 : 1e-4 * (1 + std::abs(acc)));
          }
      }
      CHECK(bad == 0);
    }
  }
}

#ifdef CB_HAVE_DNNL
// dnnl_conv::weights_to_bf16 (one bf16 copy of a conv's weights for every thread's primitive)
// writes the bytes oneDNN's own reorder writes, for the layouts its bf16 convolutions ask for
// (forward and backward-data, plain and grouped, 1x1 and 3x3) and for layouts named outright, on
// one thread and on a pool; it refuses what it does not place (a padded 3-channel stem, f32).
TEST_CASE("conv weights rounded to bf16 once into a primitive's layout, as oneDNN's reorder") {
  using dnnl::memory;
  const cpu::OmpTeamOfOne omp_guard;  // oneDNN's reorders on this thread alone, as the kernels run
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream strm(eng);
  ThreadPool pool(2);
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.f, 1.f);
  auto check = [&](const memory::desc& plain, const memory::desc& want, const char* what) {
    CAPTURE(what);
    const size_t n = plain.get_size() / sizeof(float);
    std::vector<float> w(n);
    for (auto& v : w) v = normal(rng);
    w[0] = 1.f + 1.f / 256;  // a tie: rounds to even (1.0)
    w[1] = std::nanf("");
    std::vector<uint16_t> ref(want.get_size() / 2), ours(ref.size(), 0xdead), two(ref.size());
    memory src(plain, eng, w.data()), dst(want, eng, ref.data());
    dnnl::reorder(src, dst).execute(strm, src, dst);
    strm.wait();
    REQUIRE(cpu::dnnl_conv::weights_to_bf16(w.data(), want, ours.data()));
    {
      const cpu::ScopedPool on_two(&pool);  // split over two threads
      REQUIRE(cpu::dnnl_conv::weights_to_bf16(w.data(), want, two.data()));
    }
    CHECK(ours == ref);
    CHECK(two == ref);
  };
  using tag = memory::format_tag;
  using dt = memory::data_type;
  int cases = 0;
  // The layouts oneDNN's bf16 convolutions choose for their weights (where it has bf16 kernels).
  for (auto [m, c, k, g] : {std::tuple{64, 64, 3, 1},
                            {256, 128, 1, 1},
                            {32, 48, 3, 1},
                            {64, 64, 3, 2},
                            {128, 64, 1, 4}}) {
    const memory::dims xd{4, c, 14, 14}, yd{4, m, 14, 14};
    memory::dims wd{m, c / g, k, k};
    if (g > 1) wd = {g, m / g, c / g, k, k};
    const memory::desc plain(wd, dt::f32, g > 1 ? tag::goihw : tag::oihw);
    const memory::dims st{1, 1}, dil{0, 0}, pad{k / 2, k / 2};
    auto any = [](const memory::dims& d) { return memory::desc(d, dt::bf16, tag::any); };
    try {
      const auto algo = dnnl::algorithm::convolution_direct;
      dnnl::convolution_forward::primitive_desc fwd(
          {dnnl::prop_kind::forward_training, algo, any(xd), any(wd), any(yd), st, dil, pad, pad},
          eng);
      dnnl::convolution_backward_data::primitive_desc bwd(
          {algo, any(xd), any(wd), any(yd), st, dil, pad, pad}, eng, fwd);
      if (std::string(fwd.impl_info_str()).rfind("ref", 0) == 0) continue;  // no bf16 cores
      check(plain, fwd.weights_desc(), fwd.impl_info_str());
      check(plain, bwd.weights_desc(), bwd.impl_info_str());
      cases += 2;
    } catch (const dnnl::error&) {
    }
  }
  // Layouts named outright (they need no bf16 cores to be written).
  const memory::desc oihw({32, 64, 3, 3}, dt::f32, tag::oihw);
  for (tag t : {tag::OIhw8i16o2i, tag::IOhw8o16i2o, tag::OIhw16i16o, tag::ohwi, tag::iohw}) {
    check(oihw, memory::desc({32, 64, 3, 3}, dt::bf16, t), "named");
    ++cases;
  }
  CHECK(cases >= 5);
  // Refused: a layout padded past the channels (a 3-channel stem's), and f32.
  std::vector<float> w(64 * 3 * 49, 1.f);
  std::vector<uint16_t> out(64 * 16 * 49, 0);
  CHECK_FALSE(cpu::dnnl_conv::weights_to_bf16(
      w.data(), memory::desc({64, 3, 7, 7}, dt::bf16, tag::OIhw8i16o2i), out.data()));
  CHECK_FALSE(cpu::dnnl_conv::weights_to_bf16(
      w.data(), memory::desc({64, 3, 7, 7}, dt::f32, tag::oihw), out.data()));
}
#endif
