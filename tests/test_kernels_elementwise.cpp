// CPU kernels of the elementwise / data-movement / reduction / softmax / dropout / layernorm
// family, launched through a CPU Device (tests/device_util.h; no graph): broadcasting against a
// naive loop, tensors large enough to be split over a 4-thread device (checked against 1 thread),
// softmax rows summing to 1, dropout mask statistics and determinism, layernorm by hand.
#include <doctest/doctest.h>

#include <algorithm>
#include <any>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <optional>
#include <random>
#include <vector>

#include "kernels/common/scalar_math.h"
#include "kernels/cpu/cpu_device.h"
#include "runtime/device.h"
#include "runtime/ops/params.h"
#include "tests/device_util.h"

using namespace cb;

namespace {

template <class T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, float>)
    return DType::F32;
  else if constexpr (std::is_same_v<T, double>)
    return DType::F64;
  else if constexpr (std::is_same_v<T, int64_t>)
    return DType::I64;
  else if constexpr (std::is_same_v<T, int32_t>)
    return DType::I32;
  else
    return DType::Bool;
}

template <class T>
TensorView view(std::vector<T>& v, std::vector<int64_t> dims) {
  return TensorView{v.data(), dtype_of<T>(), std::move(dims)};
}
TensorView view(std::vector<uint8_t>& v, std::vector<int64_t> dims) {  // bool storage
  return TensorView{v.data(), DType::Bool, std::move(dims)};
}

void launch(OpKind op, KernelArgs& a, Device& dev, const std::any* params = nullptr) {
  a.params = params;
  test::launch_host(dev, op, a);
}

std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -2, float hi = 2) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

// Flat index into a tensor of `dims` broadcast to `out` (right-aligned), from out's flat index.
int64_t bcast_at(const std::vector<int64_t>& out, const std::vector<int64_t>& dims, int64_t i) {
  int64_t idx = 0, st = 1;
  for (int64_t d = static_cast<int64_t>(out.size()) - 1, j = static_cast<int64_t>(dims.size()) - 1;
       d >= 0; --d, --j) {
    int64_t c = i % out[static_cast<size_t>(d)];
    i /= out[static_cast<size_t>(d)];
    if (j < 0) continue;
    int64_t n = dims[static_cast<size_t>(j)];
    if (n != 1) idx += c * st;
    st *= n;
  }
  return idx;
}

int64_t numel(const std::vector<int64_t>& d) {
  return std::accumulate(d.begin(), d.end(), int64_t{1}, std::multiplies<>());
}

// Runs a binary f32 op on the two shapes and compares with a naive broadcast loop.
template <class F>
void check_binary(OpKind op, std::vector<int64_t> da, std::vector<int64_t> db,
                  std::vector<int64_t> dout, F ref, Device& dev) {
  CAPTURE(numel(dout));
  auto a = random_floats(static_cast<size_t>(numel(da)), 1);
  auto b = random_floats(static_cast<size_t>(numel(db)), 2, 0.5f, 2.0f);
  std::vector<float> out(static_cast<size_t>(numel(dout)), -99.0f);
  KernelArgs k;
  k.in = {view(a, da), view(b, db)};
  k.out = {view(out, dout)};
  launch(op, k, dev);
  int bad = 0;
  for (int64_t i = 0; i < numel(dout); ++i) {
    float want = ref(a[static_cast<size_t>(bcast_at(dout, da, i))],
                     b[static_cast<size_t>(bcast_at(dout, db, i))]);
    bad += std::abs(out[static_cast<size_t>(i)] - want) > 1e-6f * (1 + std::abs(want));
  }
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("elementwise: numpy broadcasting against a naive loop") {
  auto one = make_cpu_device(1), four = make_cpu_device(4);
  auto add = [](float x, float y) { return x + y; };
  auto sub = [](float x, float y) { return x - y; };
  auto div = [](float x, float y) { return x / y; };
  for (Device* dp : {one.get(), four.get()}) {
    Device& p = *dp;
    // [N,C,H,W] + [C,1,1], large enough to be split over 4 threads
    check_binary(OpKind::Add, {4, 8, 64, 64}, {8, 1, 1}, {4, 8, 64, 64}, add, p);
    check_binary(OpKind::Sub, {8, 1, 1}, {4, 8, 64, 64}, {4, 8, 64, 64}, sub, p);
    // scalars: rank 0 and [1], on either side
    check_binary(
        OpKind::Mul, {2, 3, 4}, {}, {2, 3, 4}, [](float x, float y) { return x * y; }, p);
    check_binary(OpKind::Div, {}, {70000}, {70000}, div, p);
    check_binary(OpKind::Sub, {1}, {5, 7}, {5, 7}, sub, p);
    // 1-D against the last dim, and two-sided broadcasting [3,1] op [4] -> [3,4]
    check_binary(OpKind::Add, {2, 3, 4}, {4}, {2, 3, 4}, add, p);
    check_binary(OpKind::Div, {300, 1}, {257}, {300, 257}, div, p);
    check_binary(OpKind::Add, {5, 1, 6, 1}, {1, 7, 1, 9}, {5, 7, 6, 9}, add, p);
    // same shapes
    check_binary(OpKind::Add, {100000}, {100000}, {100000}, add, p);
  }
}

TEST_CASE("elementwise: ints, Equal, Where, Pow, Clip") {
  auto dev = make_cpu_device(1);
  std::vector<int64_t> a{7, -7, 9, 0}, b{2}, out(4);
  KernelArgs k;
  k.in = {view(a, {4}), view(b, {1})};
  k.out = {view(out, {4})};
  launch(OpKind::Div, k, *dev);
  CHECK(out == std::vector<int64_t>{3, -3, 4, 0});  // truncation
  launch(OpKind::Pow, k, *dev);
  CHECK(out == std::vector<int64_t>{49, 49, 81, 0});
  // The one quotient that traps in hardware: INT_MIN / -1 wraps to INT_MIN (numpy's answer).
  for (int bits : {32, 64}) {
    CAPTURE(bits);
    auto check_min = [&](auto lo) {
      using T = decltype(lo);
      std::vector<T> n{lo, T(7), T(-7), T(0)}, d{T(-1)}, q(4);
      KernelArgs kd;
      kd.in = {view(n, {4}), view(d, {1})};
      kd.out = {view(q, {4})};
      launch(OpKind::Div, kd, *dev);
      CHECK(q == std::vector<T>{lo, T(-7), T(7), T(0)});
    };
    if (bits == 32)
      check_min(std::numeric_limits<int32_t>::min());
    else
      check_min(std::numeric_limits<int64_t>::min());
  }

  std::vector<uint8_t> eq(4);
  std::vector<int64_t> c{7, 0, 9, 1};
  KernelArgs e;
  e.in = {view(a, {4}), view(c, {4})};
  e.out = {view(eq, {4})};
  launch(OpKind::Equal, e, *dev);
  CHECK(eq == std::vector<uint8_t>{1, 0, 1, 0});

  // Where(cond [2,1], x [3], y scalar) -> [2,3]
  std::vector<uint8_t> cond{1, 0};
  std::vector<float> x{1, 2, 3}, y{-1}, w(6);
  KernelArgs wh;
  wh.in = {view(cond, {2, 1}), view(x, {3}), view(y, {})};
  wh.out = {view(w, {2, 3})};
  launch(OpKind::Where, wh, *dev);
  CHECK(w == std::vector<float>{1, 2, 3, -1, -1, -1});

  // Clip with bounds from the params (attribute form) and from an input (max only)
  std::vector<float> v{-3, -0.5f, 0.5f, 3}, r(4), hi{1};
  std::any cp = ops::ClipParams{-1, 2};
  KernelArgs cl;
  cl.in = {view(v, {4})};
  cl.out = {view(r, {4})};
  launch(OpKind::Clip, cl, *dev, &cp);
  CHECK(r == std::vector<float>{-1, -0.5f, 0.5f, 2});
  std::any none = ops::ClipParams{};
  cl.in = {view(v, {4}), TensorView{}, view(hi, {})};
  launch(OpKind::Clip, cl, *dev, &none);
  CHECK(r == std::vector<float>{-3, -0.5f, 0.5f, 1});
}

TEST_CASE("softmax: rows sum to 1 (coerce-to-2D and single-axis semantics)") {
  auto four = make_cpu_device(4);
  const std::vector<int64_t> dims{6, 5, 70, 3};  // inner 210 > one tile of 64 columns
  auto x = random_floats(static_cast<size_t>(numel(dims)), 3, -30, 30);
  std::vector<float> y(x.size()), ylog(x.size());
  for (bool coerce : {false, true}) {
    for (int64_t axis : {0, 1, 3}) {
      CAPTURE(coerce);
      CAPTURE(axis);
      std::any p = ops::SoftmaxParams{axis, coerce};
      KernelArgs k;
      k.in = {view(x, dims)};
      k.out = {view(y, dims)};
      launch(OpKind::Softmax, k, *four, &p);
      k.out = {view(ylog, dims)};
      launch(OpKind::LogSoftmax, k, *four, &p);
      int64_t outer = numel({dims.begin(), dims.begin() + axis}), n = dims[size_t(axis)], inner = 1;
      if (coerce)
        n = numel({dims.begin() + axis, dims.end()});
      else
        inner = numel({dims.begin() + axis + 1, dims.end()});
      int bad = 0;
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t j = 0; j < inner; ++j) {
          double s = 0, sl = 0;
          for (int64_t i = 0; i < n; ++i) {
            size_t at = static_cast<size_t>((o * n + i) * inner + j);
            s += y[at];
            sl += std::exp(double(ylog[at]));
            bad += !(y[at] >= 0 && y[at] <= 1);
            if (y[at] > 1e-30f)  // log(softmax) == logsoftmax where softmax is representable
              bad += std::abs(std::log(y[at]) - ylog[at]) > 1e-3f * (1 + std::abs(ylog[at]));
          }
          bad += std::abs(s - 1) > 1e-5 || std::abs(sl - 1) > 1e-4;
        }
      CHECK(bad == 0);
    }
  }
  // f64, a huge logit does not overflow
  std::vector<double> xd{1000, 0, -1000, 5}, yd(4);
  std::any p = ops::SoftmaxParams{1, false};
  KernelArgs k;
  k.in = {view(xd, {2, 2})};
  k.out = {view(yd, {2, 2})};
  launch(OpKind::Softmax, k, *make_cpu_device(1), &p);
  CHECK(yd[0] == doctest::Approx(1.0));
  CHECK(yd[1] == doctest::Approx(0.0));
  CHECK(yd[2] + yd[3] == doctest::Approx(1.0));
  CHECK(yd[3] == doctest::Approx(1.0));
}

// The f32 rows' exp clamps scores far below the row's max away from libmvec's slow lanes and
// restores them after (kernels/cpu/vector_math.h): every element, -inf and subnormal results
// included, is e^(x - max) / sum to f32 accuracy, in place (MaskedSoftmax) or not.
TEST_CASE("softmax: f32 rows with scores far below the max (masked, underflowing)") {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> row{3,    2,    -1,   -60,     -76.9f, -77,  -77.1f, -85,  -90,    -95,
                         -100, -104, -106, -106.5f, -107,   -108, -200,   -inf, -1e30f, 0.5f};
  const int64_t rows = 3, n = 3 * static_cast<int64_t>(row.size());  // past a 64-element chunk
  std::vector<float> x;
  for (int64_t i = 0; i < rows * 3; ++i) x.insert(x.end(), row.begin(), row.end());
  double sum = 0;
  for (float v : row) sum += 3 * std::exp(double(v) - 3);
  auto check = [&](const std::vector<float>& y) {
    int bad = 0;
    for (size_t i = 0; i < y.size(); ++i) {
      const double want = std::exp(double(x[i]) - 3) / sum;
      // Subnormal results keep fewer bits: within one unit of the smallest subnormal.
      bad += std::abs(y[i] - want) > 1e-5 * want + 1.5e-45;
      bad += (static_cast<float>(want) == 0) != (y[i] == 0);
    }
    return bad;
  };
  std::any p = ops::SoftmaxParams{1, false};
  std::vector<float> y(x.size());
  KernelArgs k;
  k.in = {view(x, {rows, n})};
  k.out = {view(y, {rows, n})};
  launch(OpKind::Softmax, k, *make_cpu_device(2), &p);
  CHECK(check(y) == 0);
  CHECK(y[8] > 0);
  CHECK(y[8] < std::numeric_limits<float>::min());  // e^-93 / sum: subnormal, not flushed
  std::any mp = ops::MaskedSoftmaxParams{};
  std::vector<float> in_place = x;
  k.in = {view(in_place, {rows, n})};
  k.out = {view(in_place, {rows, n})};
  launch(OpKind::MaskedSoftmax, k, *make_cpu_device(2), &mp);
  CHECK(check(in_place) == 0);
}

// A causal mask fills each row's end: MaskedSoftmax skips it where it comes out 0 and its
// gradient sums the rest only. Both give the bits of the whole row computed as the unfused ops
// do (Softmax and SoftmaxGrad rows, then the Mul's and the Where's gradients), for fills far
// below the scores (skipped) and near them (not), rows not a multiple of the skipped chunks,
// Where-true and Where-false masks, the gradient in f32 and stored as bf16.
TEST_CASE("masked softmax: a causal mask's filled row ends skipped, bit for bit") {
  const float inf = std::numeric_limits<float>::infinity();
  const int64_t heads = 3, t = 200;  // rows of 200: chunks of 64 and an 8-lane tail
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  std::vector<float> x(heads * t * t), dy(x.size());
  for (float& v : x) v = nd(rng);
  for (float& v : dy) v = nd(rng);
  const float scale = 0.125f;
  auto dev = make_cpu_device(2);
  for (const float fill : {-inf, -1e9f, std::numeric_limits<float>::lowest(), -3.0f}) {
    for (const bool where_true : {true, false}) {
      CAPTURE(fill);
      CAPTURE(where_true);
      // Causal: row i keeps columns <= i (the mask true where filled for Where-true).
      std::vector<uint8_t> mask(t * t);
      for (int64_t i = 0; i < t; ++i)
        for (int64_t j = 0; j < t; ++j) mask[i * t + j] = (j > i) == where_true;
      auto filled = [&](int64_t col_row) { return (mask[col_row] != 0) == where_true; };
      ops::MaskedSoftmaxParams mp;
      mp.scale = scale;
      mp.mask = where_true ? ops::MaskedSoftmaxParams::Mask::FillWhereTrue
                           : ops::MaskedSoftmaxParams::Mask::FillWhereFalse;
      mp.fill = fill;
      std::any pm = mp;
      // Fused.
      // NaN first: an element a kernel leaves unwritten shows.
      std::vector<float> y(x.size(), std::nanf("")), dx(x.size(), std::nanf(""));
      std::vector<uint16_t> dx16(x.size(), 0x7fc0);
      KernelArgs k;
      k.in = {view(x, {heads, t, t}), view(mask, {t, t})};
      k.in[1].dtype = DType::Bool;
      k.out = {view(y, {heads, t, t})};
      launch(OpKind::MaskedSoftmax, k, *dev, &pm);
      KernelArgs g;
      g.in = {view(dy, {heads, t, t}), view(y, {heads, t, t}), k.in[1]};
      g.out = {view(dx, {heads, t, t})};
      launch(OpKind::MaskedSoftmaxGrad, g, *dev, &pm);
      g.out = {view(dx16, {heads, t, t})};
      g.out[0].dtype = DType::F32;
      g.out[0].bf16_storage = true;
      launch(OpKind::MaskedSoftmaxGrad, g, *dev, &pm);
      // Unfused: the logits as Mul and Where write them, Softmax; SoftmaxGrad, * scale, and 0
      // where filled.
      std::vector<float> z(x.size()), y_ref(x.size()), dz(x.size());
      for (size_t i = 0; i < x.size(); ++i)
        z[i] = filled(static_cast<int64_t>(i) % (t * t)) ? fill : x[i] * scale;
      std::any ps = ops::SoftmaxParams{2, false};
      KernelArgs s;
      s.in = {view(z, {heads, t, t})};
      s.out = {view(y_ref, {heads, t, t})};
      launch(OpKind::Softmax, s, *dev, &ps);
      s.in = {view(dy, {heads, t, t}), view(y_ref, {heads, t, t})};
      s.out = {view(dz, {heads, t, t})};
      launch(OpKind::SoftmaxGrad, s, *dev, &ps);
      int64_t bad_y = 0, bad_dx = 0, bad_dx16 = 0, zeros = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        const float want = filled(static_cast<int64_t>(i) % (t * t)) ? 0.0f : dz[i] * scale;
        bad_y += std::memcmp(&y[i], &y_ref[i], 4) != 0;
        bad_dx += std::memcmp(&dx[i], &want, 4) != 0;
        bad_dx16 += dx16[i] != math::f32_to_bf16(want);
        zeros += y[i] == 0.0f;
      }
      CHECK(bad_y == 0);
      CHECK(bad_dx == 0);
      CHECK(bad_dx16 == 0);
      // The filled ends are zeros where the fill is far below the scores, not near them.
      if (fill < -1e8f)
        CHECK(zeros == heads * t * (t - 1) / 2);
      else
        CHECK(zeros == 0);
    }
  }
}

TEST_CASE("dropout: mask statistics, scaling, determinism for a fixed seed") {
  auto four = make_cpu_device(4), one = make_cpu_device(1);
  const int64_t n = 200000;
  std::vector<float> x(n, 2.0f), y(n), y2(n);
  std::vector<uint8_t> mask(n), mask2(n);
  ops::DropoutParams dp;
  dp.ratio = 0.3f;
  dp.training = true;
  std::any p = dp;
  auto run = [&](std::vector<float>& out, std::vector<uint8_t>& m, uint64_t seed, Device& pl) {
    KernelArgs k;
    k.in = {view(x, {n})};
    k.out = {view(out, {n}), view(m, {n})};
    k.seed = seed;
    launch(OpKind::Dropout, k, pl, &p);
  };
  run(y, mask, 42, *four);
  int64_t kept = 0, bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    kept += mask[i];
    bad += mask[i] ? std::abs(y[i] - 2.0f / 0.7f) > 1e-6f : y[i] != 0.0f;
  }
  CHECK(bad == 0);
  CHECK(double(kept) / n == doctest::Approx(0.7).epsilon(0.01));
  run(y2, mask2, 42, *one);  // same seed, other thread count: the same mask
  CHECK(mask == mask2);
  CHECK(y == y2);
  run(y2, mask2, 43, *four);
  CHECK(mask != mask2);
  // neighbouring elements are not correlated: P(both kept) ~ 0.49
  int64_t both = 0;
  for (int64_t i = 0; i + 1 < n; i += 2) both += mask[i] && mask[i + 1];
  CHECK(double(both) / (n / 2) == doctest::Approx(0.49).epsilon(0.03));

  // inference: a copy and an all-true mask
  std::any inf = ops::DropoutParams{};
  KernelArgs k;
  k.in = {view(x, {n})};
  k.out = {view(y, {n}), view(mask, {n})};
  launch(OpKind::Dropout, k, *one, &inf);
  CHECK(y == x);
  CHECK(std::count(mask.begin(), mask.end(), 1) == n);
}

TEST_CASE("layernorm: against a hand computation, with Mean and InvStdDev") {
  auto dev = make_cpu_device(1);
  // X [2,3], axis -1: row 0 = {1,2,3} (mean 2, var 2/3), row 1 = {-1,-1,-1} (var 0)
  std::vector<float> x{1, 2, 3, -1, -1, -1}, scale{1, 2, 0.5f}, bias{0, 1, -1}, y(6), mean(2),
      inv(2);
  std::any p = ops::LayerNormalizationParams{-1, 1e-5f};
  KernelArgs k;
  k.in = {view(x, {2, 3}), view(scale, {3}), view(bias, {3})};
  k.out = {view(y, {2, 3}), view(mean, {2, 1}), view(inv, {2, 1})};
  launch(OpKind::LayerNormalization, k, *dev, &p);
  double i0 = 1.0 / std::sqrt(2.0 / 3.0 + 1e-5), i1 = 1.0 / std::sqrt(1e-5);
  CHECK(mean[0] == doctest::Approx(2.0));
  CHECK(mean[1] == doctest::Approx(-1.0));
  CHECK(inv[0] == doctest::Approx(i0));
  CHECK(inv[1] == doctest::Approx(i1).epsilon(1e-4));
  CHECK(y[0] == doctest::Approx(-1 * i0 * 1 + 0));
  CHECK(y[1] == doctest::Approx(0 * i0 * 2 + 1));
  CHECK(y[2] == doctest::Approx(1 * i0 * 0.5 - 1));
  CHECK(y[3] == doctest::Approx(0.0));
  CHECK(y[4] == doctest::Approx(1.0));
  CHECK(y[5] == doctest::Approx(-1.0));

  // axis 1 of [2,2,2] with Scale [2,1] broadcast over the last dim, no bias, f64
  std::vector<double> xd{0, 1, 2, 3, 4, 4, 4, 4}, sd{1, 3}, yd(8);
  std::any p1 = ops::LayerNormalizationParams{1, 0.0f};
  KernelArgs k1;
  k1.in = {view(xd, {2, 2, 2}), view(sd, {2, 1})};
  k1.out = {view(yd, {2, 2, 2})};
  launch(OpKind::LayerNormalization, k1, *dev, &p1);
  double s = std::sqrt(1.25);  // row 0: mean 1.5, var 1.25
  CHECK(yd[0] == doctest::Approx(-1.5 / s));
  CHECK(yd[1] == doctest::Approx(-0.5 / s));
  CHECK(yd[2] == doctest::Approx(3 * 0.5 / s));
  CHECK(yd[3] == doctest::Approx(3 * 1.5 / s));
}

TEST_CASE("reduce: ReduceSum/ReduceMean over any axes, split over 4 threads") {
  auto four = make_cpu_device(4);
  const std::vector<int64_t> dims{16, 9, 40, 30};
  auto x = random_floats(static_cast<size_t>(numel(dims)), 5);
  for (std::vector<int64_t> axes :
       std::vector<std::vector<int64_t>>{{1}, {3}, {0, 2}, {1, -1}, {}}) {
    CAPTURE(axes.size());
    std::vector<int64_t> od = dims;
    bool red[4] = {axes.empty(), axes.empty(), axes.empty(), axes.empty()};
    for (int64_t a : axes) red[a < 0 ? a + 4 : a] = true;
    for (int d = 0; d < 4; ++d)
      if (red[d]) od[size_t(d)] = 1;
    std::vector<double> want(static_cast<size_t>(numel(od)), 0.0);
    for (int64_t i = 0; i < numel(dims); ++i) {
      int64_t rem = i, o = 0, st = 1;
      for (int d = 3; d >= 0; --d) {
        int64_t c = rem % dims[size_t(d)];
        rem /= dims[size_t(d)];
        if (!red[d]) o += c * st;
        st *= od[size_t(d)];
      }
      want[size_t(o)] += x[size_t(i)];
    }
    ops::ReduceParams rp;
    rp.axes = axes;
    rp.keepdims = true;
    rp.axes_input_since = 18;
    std::any p = rp;
    std::vector<float> sum(want.size()), mean(want.size());
    KernelArgs k;
    k.in = {view(x, dims)};
    k.out = {view(sum, od)};
    launch(OpKind::ReduceSum, k, *four, &p);
    k.out = {view(mean, od)};
    launch(OpKind::ReduceMean, k, *four, &p);
    double count = double(numel(dims)) / double(want.size());
    int bad = 0;
    for (size_t i = 0; i < want.size(); ++i)
      bad += std::abs(sum[i] - want[i]) > 1e-3 * (1 + std::abs(want[i])) ||
             std::abs(mean[i] - want[i] / count) > 1e-4 * (1 + std::abs(want[i] / count));
    CHECK(bad == 0);
  }
}

TEST_CASE("data movement: transpose and expand split over 4 threads match a naive loop") {
  auto four = make_cpu_device(4);
  const std::vector<int64_t> dims{8, 16, 32, 20};
  auto x = random_floats(static_cast<size_t>(numel(dims)), 7);
  std::vector<float> a(x.size()), b(x.size());
  std::any p = ops::TransposeParams{{2, 0, 3, 1}};
  std::vector<int64_t> od{32, 8, 20, 16};
  KernelArgs k;
  k.in = {view(x, dims)};
  k.out = {view(a, od)};
  launch(OpKind::Transpose, k, *four, &p);
  int bad = 0;
  for (int64_t i0 = 0; i0 < 8; ++i0)
    for (int64_t i1 = 0; i1 < 16; ++i1)
      for (int64_t i2 = 0; i2 < 32; ++i2)
        for (int64_t i3 = 0; i3 < 20; ++i3)
          bad += a[size_t(((i2 * 8 + i0) * 20 + i3) * 16 + i1)] !=
                 x[size_t(((i0 * 16 + i1) * 32 + i2) * 20 + i3)];
  CHECK(bad == 0);
  // Expand [16,1,20] -> [8,16,32,20]
  std::vector<float> e(x.begin(), x.begin() + 16 * 20);
  std::vector<int64_t> shape{8, 16, 32, 20};
  KernelArgs ek;
  ek.in = {view(e, {16, 1, 20}), view(shape, {4})};
  ek.out = {view(b, dims)};
  launch(OpKind::Expand, ek, *four);
  bad = 0;
  for (int64_t i = 0; i < numel(dims); ++i)
    bad += b[size_t(i)] != e[size_t(bcast_at(dims, {16, 1, 20}, i))];
  CHECK(bad == 0);
}

TEST_CASE("HardSigmoid, HardSwish, Max with NaN by hand") {
  auto dev = make_cpu_device(1);
  std::vector<float> x{-4, -1, 0, 1, 4}, y(5);
  KernelArgs k;
  k.in = {view(x, {5})};
  k.out = {view(y, {5})};
  std::any def = ops::HardSigmoidParams{};
  launch(OpKind::HardSigmoid, k, *dev, &def);
  const std::vector<double> want{0, 0.3, 0.5, 0.7, 1};
  for (size_t i = 0; i < 5; ++i) CHECK(y[i] == doctest::Approx(want[i]));
  std::any p = ops::HardSigmoidParams{0.5f, 0.25f};
  launch(OpKind::HardSigmoid, k, *dev, &p);
  CHECK(y == std::vector<float>{0, 0, 0.25f, 0.75f, 1});
  launch(OpKind::HardSwish, k, *dev);
  CHECK(y[0] == 0);
  CHECK(y[1] == doctest::Approx(-1.0 / 3));
  CHECK(y[2] == 0);
  CHECK(y[3] == doctest::Approx(2.0 / 3));
  CHECK(y[4] == 4);
  // Max/Min propagate NaN from either side (numpy's maximum, PyTorch's maximum).
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> a{1, nan, 2}, b{nan, 0, 5}, m(3);
  KernelArgs mk;
  mk.in = {view(a, {3}), view(b, {3})};
  mk.out = {view(m, {3})};
  for (OpKind op : {OpKind::Max, OpKind::Min}) {
    launch(op, mk, *dev);
    CHECK(std::isnan(m[0]));
    CHECK(std::isnan(m[1]));
    CHECK(m[2] == (op == OpKind::Max ? 5 : 2));
  }
}

TEST_CASE("reduce: empty reductions, noop_with_empty_axes, NaN and large LogSumExp") {
  auto dev = make_cpu_device(1);
  auto run = [&](OpKind op, std::vector<float> x, std::vector<int64_t> dims,
                 std::optional<DimList> axes, bool noop = false) {
    ops::ReduceParams rp;
    rp.axes = axes;
    rp.keepdims = true;
    rp.noop_with_empty_axes = noop;
    rp.axes_input_since = 18;
    std::any p = rp;
    std::vector<int64_t> od = dims;
    if (!noop)
      for (int64_t a :
           axes ? std::vector<int64_t>(axes->begin(), axes->end()) : std::vector<int64_t>{0, 1})
        od[size_t(a)] = 1;
    std::vector<float> y(static_cast<size_t>(numel(od)));
    KernelArgs k;
    k.in = {view(x, dims)};
    k.out = {view(y, od)};
    launch(op, k, *dev, &p);
    return y;
  };
  const float inf = std::numeric_limits<float>::infinity();
  const DimList ax1{1};
  CHECK(run(OpKind::ReduceMax, {}, {2, 0}, ax1) == std::vector<float>{-inf, -inf});
  CHECK(run(OpKind::ReduceMin, {}, {2, 0}, ax1) == std::vector<float>{inf, inf});
  CHECK(run(OpKind::ReduceProd, {}, {2, 0}, ax1) == std::vector<float>{1, 1});
  CHECK(run(OpKind::ReduceSumSquare, {}, {2, 0}, ax1) == std::vector<float>{0, 0});
  CHECK(run(OpKind::ReduceLogSumExp, {}, {2, 0}, ax1) == std::vector<float>{-inf, -inf});
  // noop: each element reduced alone (the ONNX reference's np.square for ReduceSumSquare).
  const std::vector<float> x{-2, 3, 0.5f, 1};
  CHECK(run(OpKind::ReduceSumSquare, x, {2, 2}, std::nullopt, true) ==
        std::vector<float>{4, 9, 0.25f, 1});
  CHECK(run(OpKind::ReduceL1, x, {2, 2}, std::nullopt, true) == std::vector<float>{2, 3, 0.5f, 1});
  CHECK(run(OpKind::ReduceMax, x, {2, 2}, std::nullopt, true) == x);
  CHECK(run(OpKind::ReduceLogSumExp, x, {2, 2}, std::nullopt, true) == x);
  // all axes, and per row
  CHECK(run(OpKind::ReduceProd, x, {2, 2}, std::nullopt) == std::vector<float>{-3});
  CHECK(run(OpKind::ReduceMin, x, {2, 2}, ax1) == std::vector<float>{-2, 0.5f});
  CHECK(run(OpKind::ReduceL2, {3, 4, 0, 0}, {2, 2}, ax1) == std::vector<float>{5, 0});
  auto nan = run(OpKind::ReduceMax, {1, std::numeric_limits<float>::quiet_NaN(), 3, 2}, {2, 2},
                 DimList{0});
  CHECK(nan[0] == 3);  // [[1, NaN], [3, 2]] over axis 0
  CHECK(std::isnan(nan[1]));
  auto lse = run(OpKind::ReduceLogSumExp, {1000, 1000, -inf, 5}, {2, 2}, ax1);
  CHECK(lse[0] == doctest::Approx(1000 + std::log(2.0)));
  CHECK(lse[1] == 5);
  // integers: the type's lowest/highest for an empty max/min
  std::vector<int32_t> none, mx(2);
  ops::ReduceParams rp;
  rp.axes = ax1;
  rp.axes_input_since = 18;
  std::any p = rp;
  KernelArgs k;
  k.in = {view(none, {2, 0})};
  k.out = {view(mx, {2, 1})};
  launch(OpKind::ReduceMax, k, *dev, &p);
  CHECK(mx == std::vector<int32_t>{std::numeric_limits<int32_t>::lowest(),
                                   std::numeric_limits<int32_t>::lowest()});
}

TEST_CASE("Tile: repeats along every dim, against a naive loop") {
  auto four = make_cpu_device(4);
  const std::vector<int64_t> in_dims{3, 1, 5}, out_dims{6, 4, 1000};
  auto x = random_floats(15, 9);
  std::vector<float> y(static_cast<size_t>(numel(out_dims)));
  std::vector<int64_t> reps{2, 4, 200};
  KernelArgs k;
  k.in = {view(x, in_dims), view(reps, {3})};
  k.out = {view(y, out_dims)};
  launch(OpKind::Tile, k, *four);
  int bad = 0;
  for (int64_t i = 0; i < 6; ++i)
    for (int64_t j = 0; j < 4; ++j)
      for (int64_t l = 0; l < 1000; ++l)
        bad += y[size_t((i * 4 + j) * 1000 + l)] != x[size_t((i % 3) * 5 + l % 5)];
  CHECK(bad == 0);
}

// LayerNormalizationGrad sums dscale and dB over rows in fixed blocks, then the blocks in order:
// the same bits on 1, 2 and 4 threads, and the sums equal a double loop over the rows (rows
// past whole blocks, and a partial last block).
TEST_CASE("layernorm grad: the column sums do not depend on the thread count") {
  const int64_t rows = 203, m = 40;
  std::vector<float> x = random_floats(rows * m, 3), dy = random_floats(rows * m, 4);
  std::vector<float> sc = random_floats(m, 5, 0.5f, 1.5f);
  std::any pm = ops::LayerNormalizationParams{};
  auto run = [&](int threads) {
    std::vector<float> out(rows * m + 2 * m);
    KernelArgs g;
    g.in = {view(dy, {rows, m}), view(x, {rows, m}), view(sc, {m})};
    std::vector<float> dx(rows * m), ds(m), db(m);
    g.out = {view(dx, {rows, m}), view(ds, {m}), view(db, {m})};
    launch(OpKind::LayerNormalizationGrad, g, *make_cpu_device(threads), &pm);
    std::copy(dx.begin(), dx.end(), out.begin());
    std::copy(ds.begin(), ds.end(), out.begin() + rows * m);
    std::copy(db.begin(), db.end(), out.begin() + rows * m + m);
    return out;
  };
  const std::vector<float> one = run(1);
  CHECK(run(2) == one);
  CHECK(run(4) == one);
  int bad = 0;
  for (int64_t k = 0; k < m; ++k) {
    double want_ds = 0, want_db = 0;
    for (int64_t r = 0; r < rows; ++r) {
      double mu = 0, var = 0;
      for (int64_t j = 0; j < m; ++j) mu += x[r * m + j];
      mu /= m;
      for (int64_t j = 0; j < m; ++j) var += (x[r * m + j] - mu) * (x[r * m + j] - mu);
      const double iv = 1 / std::sqrt(var / m + 1e-5);
      want_db += dy[r * m + k];
      want_ds += dy[r * m + k] * (x[r * m + k] - mu) * iv;
    }
    bad += std::abs(one[rows * m + k] - want_ds) > 1e-5 * (1 + std::abs(want_ds));
    bad += std::abs(one[rows * m + m + k] - want_db) > 1e-5 * (1 + std::abs(want_db));
  }
  CHECK(bad == 0);
}

// A bias's gradient (ReduceSumTo [rows, cols] -> [cols]): the columns split over the threads in
// runs as long as the split allows, each column folded in row order, so every thread count gives
// the bits of one sequential f32 fold per column.
TEST_CASE("reduce sum to: a bias gradient's column runs keep each column's row order") {
  for (const int64_t cols : {130, 517, 2048, 3000}) {
    CAPTURE(cols);
    const int64_t rows = 97;
    std::vector<float> x = random_floats(rows * cols, 11);
    std::vector<float> want(cols, 0.0f);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) want[c] = want[c] + x[r * cols + c];
    std::vector<int64_t> shape{cols};
    for (int threads : {1, 2, 3, 4}) {
      CAPTURE(threads);
      std::vector<float> y(cols, -1.0f);
      KernelArgs k;
      k.in = {view(x, {rows, cols}), view(shape, {1})};
      k.out = {view(y, {cols})};
      launch(OpKind::ReduceSumTo, k, *make_cpu_device(threads));
      CHECK(y == want);
    }
  }
}

// Gelu and GeluGrad (f32, and Gelu stored as bf16) give the same bits on any number of threads:
// every element goes through the same vector erff / expf / tanhf wherever the pool's split puts
// it (a scalar remainder would differ in the last bit for some inputs). Sizes of no round split.
TEST_CASE("gelu and its gradient: the same bits on 1, 2 and 3 threads") {
  for (const bool tanh : {false, true})
    for (const int64_t n : {int64_t{70001}, int64_t{131075}}) {
      CAPTURE(tanh);
      CAPTURE(n);
      std::vector<float> x = random_floats(static_cast<size_t>(n), 8, -5, 5),
                         dy = random_floats(static_cast<size_t>(n), 9);
      std::any p = ops::GeluParams{tanh};
      std::vector<std::vector<float>> ys, dxs;
      std::vector<std::vector<uint16_t>> y16s;
      for (int threads : {1, 2, 3}) {
        auto dev = make_cpu_device(threads);
        std::vector<float> y(static_cast<size_t>(n)), dx(static_cast<size_t>(n));
        std::vector<uint16_t> y16(static_cast<size_t>(n));
        KernelArgs f;
        f.in = {view(x, {n})};
        f.out = {view(y, {n})};
        launch(OpKind::Gelu, f, *dev, &p);
        f.out = {TensorView{y16.data(), DType::F32, {n}, false, true}};
        launch(OpKind::Gelu, f, *dev, &p);
        KernelArgs g;
        g.in = {view(dy, {n}), view(x, {n})};
        g.out = {view(dx, {n})};
        launch(OpKind::GeluGrad, g, *dev, &p);
        ys.push_back(y);
        dxs.push_back(dx);
        y16s.push_back(y16);
      }
      for (size_t k = 1; k < ys.size(); ++k) {
        CAPTURE(k);
        CHECK(std::memcmp(ys[k].data(), ys[0].data(), ys[0].size() * 4) == 0);
        CHECK(std::memcmp(dxs[k].data(), dxs[0].data(), dxs[0].size() * 4) == 0);
        CHECK(y16s[k] == y16s[0]);
      }
      int64_t rounded = 0;  // the bf16 Y is the f32 Y rounded
      for (size_t i = 0; i < ys[0].size(); ++i)
        rounded += y16s[0][i] == math::f32_to_bf16(ys[0][i]);
      CHECK(rounded == n);
    }
}
