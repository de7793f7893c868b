// Scalar math written once, for every backend: each elementwise op is a functor whose
// operator() is CB_HOST_DEVICE, so the CPU broadcast driver (kernels/cpu/elementwise_driver.h) and
// the CUDA one (kernels/cuda/elementwise.cu) instantiate the same code. Conventions: a functor
// computes in its argument type T (float math through the f/double overloads below, never std::
// calls that CUDA lacks); integer division by zero yields 0 instead of trapping; comparisons
// return bool.
// Also here: f16/bf16 <-> f32 conversion and the counter-based RNG of Dropout (one hash per
// element index, so a mask depends only on the seed, not on how the work was split).
#pragma once

#include <math.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#ifdef __CUDACC__
#define CB_HOST_DEVICE __host__ __device__
#else
#define CB_HOST_DEVICE
#endif

namespace cb::math {

// ---- float/double overloads of libm (one name per function; ints go through double) ----
CB_HOST_DEVICE inline float m_sqrt(float x) { return sqrtf(x); }
CB_HOST_DEVICE inline double m_sqrt(double x) { return sqrt(x); }
CB_HOST_DEVICE inline float m_exp(float x) { return expf(x); }
CB_HOST_DEVICE inline double m_exp(double x) { return exp(x); }
CB_HOST_DEVICE inline float m_log(float x) { return logf(x); }
CB_HOST_DEVICE inline double m_log(double x) { return log(x); }
CB_HOST_DEVICE inline float m_tanh(float x) { return tanhf(x); }
CB_HOST_DEVICE inline double m_tanh(double x) { return tanh(x); }
CB_HOST_DEVICE inline float m_erf(float x) { return erff(x); }
CB_HOST_DEVICE inline double m_erf(double x) { return erf(x); }
CB_HOST_DEVICE inline float m_ceil(float x) { return ceilf(x); }
CB_HOST_DEVICE inline double m_ceil(double x) { return ceil(x); }
CB_HOST_DEVICE inline float m_floor(float x) { return floorf(x); }
CB_HOST_DEVICE inline double m_floor(double x) { return floor(x); }
CB_HOST_DEVICE inline float m_pow(float x, float y) { return powf(x, y); }
CB_HOST_DEVICE inline double m_pow(double x, double y) { return pow(x, y); }

template <class T>
constexpr bool kIsFloat = std::is_floating_point_v<T>;

template <class T>
CB_HOST_DEVICE bool is_nan(T x) {
  if constexpr (kIsFloat<T>)
    return x != x;
  else
    return false;
}

// ---- unary ----
struct AbsOp {
  template <class T>
  CB_HOST_DEVICE T operator()(T x) const {
    if constexpr (std::is_unsigned_v<T>)
      return x;
    else
      return x < T(0) ? T(-x) : x;
  }
};
struct NegOp {
  template <class T>
  CB_HOST_DEVICE T operator()(T x) const {
    return T(-x);
  }
};
struct ReluOp {
  template <class T>
  CB_HOST_DEVICE T operator()(T x) const {
    return x > T(0) ? x : T(0);
  }
};
struct LeakyReluOp {
  float alpha;
  template <class T>
  CB_HOST_DEVICE T operator()(T x) const {
    return x >= T(0) ? x : T(alpha) * x;
  }
};
struct SigmoidOp {  // split by sign so that exp never overflows
  template <class T>
  CB_HOST_DEVICE T operator()(T x) const {
    if (x >= T(0)) return T(1) / (T(1) + m_exp(-x));
    T e = m_exp(x);
    return e / (T(1) + e);
  }
};
struct TanhOp {
  template <class T>
  CB_HOST_DEVICE T operator()(T x) const {
    return m_tanh(x);
  }
};
struct SqrtOp {
  template <class T>
  CB_HOST_DEVICE T operator()(T x) const {
    return m_sqrt(x);
  }
};
struct ExpOp {
  template <class T>
  CB_HOST_DEVICE T operator()(T x) const {
    return m_exp(x);
  }
};
struct LogOp {
  template <class T>
  CB_HOST_DEVICE T operator()(T x) const {
    return m_log(x);
  }
};
struct ErfOp {
  template <class T>
  CB_HOST_DEVICE T operator()(T x) const {
    return m_erf(x);
  }
};
struct CeilOp {
  template <class T>
  CB_HOST_DEVICE T operator()(T x) const {
    return m_ceil(x);
  }
};
struct FloorOp {
  template <class T>
  CB_HOST_DEVICE T operator()(T x) const {
    return m_floor(x);
  }
};
struct ReciprocalOp {
  template <class T>
  CB_HOST_DEVICE T operator()(T x) const {
    return T(1) / x;
  }
};
template <class T>
struct ClipOp {  // bounds already in T (the driver resolves absent bounds to the type's range)
  T lo, hi;
  CB_HOST_DEVICE T operator()(T x) const { return x < lo ? lo : (x > hi ? hi : x); }
};
// BatchNormalization's fused activation (BatchNormalizationParams::relu / clip): y() as ReluOp or
// ClipOp computes it; its gradient counts dY at the output z where z > lo && !(z >= hi): lo 0 and
// hi NaN for Relu (z > 0, ReluGrad's rule), the bounds for Clip (lo < z < hi, hardtanh's rule).
struct BnActivation {
  bool clip;
  float lo, hi;
  template <class P>
  static BnActivation of(const P& p) {
    return p.clip ? BnActivation{true, p.clip_min, p.clip_max}
                  : BnActivation{false, 0.0f, __builtin_nanf("")};
  }
  template <class T>
  CB_HOST_DEVICE T y(T v) const {
    return clip ? (v < T(lo) ? T(lo) : (v > T(hi) ? T(hi) : v)) : (v > T(0) ? v : T(0));
  }
  template <class T>
  CB_HOST_DEVICE bool counts(T z) const {
    return z > T(lo) && !(z >= T(hi));
  }
};
// HardSigmoid: max(0, min(1, alpha x + beta)); HardSwish: x * HardSigmoid(x) with alpha 1/6,
// beta 1/2 (ONNX, PyTorch's hardswish). NaN propagates.
struct HardSigmoidOp {
  float alpha, beta;
  template <class T>
  CB_HOST_DEVICE T operator()(T x) const {
    T v = T(alpha) * x + T(beta);
    return v < T(0) ? T(0) : (v > T(1) ? T(1) : v);
  }
};
struct HardSwishOp {
  template <class T>
  CB_HOST_DEVICE T operator()(T x) const {
    T v = x / T(6) + T(0.5);
    return v < T(0) ? T(0) : (v > T(1) ? x : T(x * v));
  }
};
// Gelu (runtime/ops/gelu.cpp): x Phi(x), Phi(x) = (1 + erf(x / sqrt 2)) / 2; with `tanh`
// PyTorch's approximate="tanh": x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
inline constexpr double kGeluTanhK = 0.7978845608028654;  // sqrt(2/pi)
inline constexpr double kGeluTanhC = 0.044715;
inline constexpr double kInvSqrt2 = 0.7071067811865476;
inline constexpr double kInvSqrt2Pi = 0.3989422804014327;  // 1/sqrt(2 pi): phi(0)
struct GeluOp {
  bool tanh = false;
  template <class T>
  CB_HOST_DEVICE T operator()(T x) const {
    if (tanh) {
      T u = T(kGeluTanhK) * (x + T(kGeluTanhC) * x * x * x);
      return T(0.5) * x * (T(1) + m_tanh(u));
    }
    return T(0.5) * x * (T(1) + m_erf(x * T(kInvSqrt2)));
  }
};
// Logical not of a bool.
struct NotOp {
  CB_HOST_DEVICE bool operator()(bool x) const { return !x; }
};
struct IdentityOp {
  template <class T>
  CB_HOST_DEVICE T operator()(T x) const {
    return x;
  }
};

// ---- binary ----
struct AddOp {
  template <class T>
  CB_HOST_DEVICE T operator()(T a, T b) const {
    return T(a + b);
  }
};
struct SubOp {
  template <class T>
  CB_HOST_DEVICE T operator()(T a, T b) const {
    return T(a - b);
  }
};
struct MulOp {
  template <class T>
  CB_HOST_DEVICE T operator()(T a, T b) const {
    return T(a * b);
  }
};
// Integer division truncates (ONNX, C); x / 0 is 0 for integers, and x / -1 is the negation that
// wraps (INT_MIN / -1 = INT_MIN, as numpy), never the hardware trap of that one quotient.
struct DivOp {
  template <class T>
  CB_HOST_DEVICE T operator()(T a, T b) const {
    if constexpr (kIsFloat<T>) {
      return a / b;
    } else if constexpr (std::is_signed_v<T>) {
      if (b == T(-1)) return T(-static_cast<std::make_unsigned_t<T>>(a));
      return b == T(0) ? T(0) : T(a / b);
    } else {
      return b == T(0) ? T(0) : T(a / b);
    }
  }
};
// Max and Min propagate NaN (numpy's maximum/minimum, PyTorch's maximum/minimum).
struct MaxOp {
  template <class T>
  CB_HOST_DEVICE T operator()(T a, T b) const {
    if (is_nan(a)) return a;
    return b > a || is_nan(b) ? b : a;
  }
};
struct MinOp {
  template <class T>
  CB_HOST_DEVICE T operator()(T a, T b) const {
    if (is_nan(a)) return a;
    return b < a || is_nan(b) ? b : a;
  }
};
struct GreaterOp {
  template <class T>
  CB_HOST_DEVICE bool operator()(T a, T b) const {
    return a > b;
  }
};
struct GreaterOrEqualOp {
  template <class T>
  CB_HOST_DEVICE bool operator()(T a, T b) const {
    return a >= b;
  }
};
struct LessOp {
  template <class T>
  CB_HOST_DEVICE bool operator()(T a, T b) const {
    return a < b;
  }
};
struct LessOrEqualOp {
  template <class T>
  CB_HOST_DEVICE bool operator()(T a, T b) const {
    return a <= b;
  }
};
struct AndOp {
  CB_HOST_DEVICE bool operator()(bool a, bool b) const { return a && b; }
};
struct OrOp {
  CB_HOST_DEVICE bool operator()(bool a, bool b) const { return a || b; }
};
struct XorOp {
  CB_HOST_DEVICE bool operator()(bool a, bool b) const { return a != b; }
};
struct EqualOp {
  template <class T>
  CB_HOST_DEVICE bool operator()(T a, T b) const {
    return a == b;
  }
};
// Pow(X: T, Y: U) -> T. Integer ** non-negative integer is exact (by squaring); a negative
// integer exponent gives 1/x^|y| truncated; everything else goes through floating point.
struct PowOp {
  template <class T, class U>
  CB_HOST_DEVICE T operator()(T x, U y) const {
    if constexpr (!kIsFloat<T> && !kIsFloat<U>) {
      if (y < U(0)) return x == T(1) ? T(1) : (x == T(-1) ? T((y & 1) ? -1 : 1) : T(0));
      T r = 1;
      T b = x;
      for (U e = y; e > U(0); e >>= 1) {
        if (e & 1) r = T(r * b);
        b = T(b * b);
      }
      return r;
    } else if constexpr (std::is_same_v<T, float> && !std::is_same_v<U, double>) {
      return m_pow(x, static_cast<float>(y));
    } else {
      return static_cast<T>(m_pow(static_cast<double>(x), static_cast<double>(y)));
    }
  }
};

// ---- ternary ----
struct WhereOp {
  template <class T>
  CB_HOST_DEVICE T operator()(bool c, T x, T y) const {
    return c ? x : y;
  }
};

// ---- gradients: (dy, saved forward value) -> dx ----
struct ReluGradOp {  // saved: Y
  template <class T>
  CB_HOST_DEVICE T operator()(T dy, T y) const {
    return y > T(0) ? dy : T(0);
  }
};
struct LeakyReluGradOp {  // saved: X
  float alpha;
  template <class T>
  CB_HOST_DEVICE T operator()(T dy, T x) const {
    return x > T(0) ? dy : T(T(alpha) * dy);
  }
};
struct HardSigmoidGradOp {  // saved: X; alpha dy strictly inside the linear part
  float alpha, beta;
  template <class T>
  CB_HOST_DEVICE T operator()(T dy, T x) const {
    T v = T(alpha) * x + T(beta);
    return v > T(0) && v < T(1) ? T(T(alpha) * dy) : T(0);
  }
};
// d Gelu / dx: Phi(x) + x phi(x), phi(x) = exp(-x^2/2) / sqrt(2 pi); the tanh form's
// 1/2 (1 + t) + x/2 (1 - t^2) sqrt(2/pi) (1 + 3 0.044715 x^2), t = tanh(u). Saved: X.
struct GeluGradOp {
  bool tanh = false;
  template <class T>
  CB_HOST_DEVICE T operator()(T dy, T x) const {
    if (tanh) {
      T x2 = x * x;
      T t = m_tanh(T(kGeluTanhK) * (x + T(kGeluTanhC) * x2 * x));
      T du = T(kGeluTanhK) * (T(1) + T(3 * kGeluTanhC) * x2);
      return dy * (T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * du);
    }
    T cdf = T(0.5) * (T(1) + m_erf(x * T(kInvSqrt2)));
    return dy * (cdf + x * T(kInvSqrt2Pi) * m_exp(T(-0.5) * x * x));
  }
};
struct HardSwishGradOp {  // saved: X; PyTorch's hardswish_backward: 0 below -3, 1 above 3
  template <class T>
  CB_HOST_DEVICE T operator()(T dy, T x) const {
    if (x < T(-3)) return T(0);
    if (x <= T(3)) return T(dy * (x / T(3) + T(0.5)));
    return dy;
  }
};
template <class T>
struct ClipGradOp {  // saved: X; the gradient passes at the bounds (PyTorch's clamp backward)
  T lo, hi;
  CB_HOST_DEVICE T operator()(T dy, T x) const { return (x >= lo && x <= hi) ? dy : T(0); }
};
template <class T>
struct DropoutGradOp {  // saved: the mask (bool, or T before opset 10); scale = 1 / (1 - ratio)
  T scale;
  template <class M>
  CB_HOST_DEVICE T operator()(T dy, M m) const {
    return m ? T(dy * scale) : T(0);
  }
};

// ---- 16-bit floats ----
CB_HOST_DEVICE inline uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
CB_HOST_DEVICE inline float f32_from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
CB_HOST_DEVICE inline float bf16_to_f32(uint16_t h) { return f32_from_bits(uint32_t(h) << 16); }
// Round to nearest even; NaN stays a (quiet) NaN.
CB_HOST_DEVICE inline uint16_t f32_to_bf16(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1);
  return uint16_t(u >> 16);
}
CB_HOST_DEVICE inline float f16_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  if (exp == 0x1f) return f32_from_bits(sign | 0x7f800000u | (man << 13));  // inf, nan
  if (exp == 0) {  // zero or subnormal: man * 2^-24
    float v = float(man) * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  return f32_from_bits(sign | ((exp + 112) << 23) | (man << 13));
}
// Round to nearest even, overflow to inf, subnormals kept.
CB_HOST_DEVICE inline uint16_t f32_to_f16(float f) {
  uint32_t u = f32_bits(f);
  uint16_t sign = uint16_t((u >> 16) & 0x8000);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return uint16_t(sign | 0x7e00);   // nan
  if (a >= 0x477ff000u) return uint16_t(sign | 0x7c00);  // rounds to >= 65520: inf
  if (a < 0x38800000u) {                                 // below 2^-14: subnormal half (or zero)
    float v = f32_from_bits(a) * 16777216.0f;            // in units of 2^-24, exact up to rounding
    return uint16_t(sign | uint16_t(rintf(v)));
  }
  uint32_t r = a + 0xfffu + ((a >> 13) & 1);  // round mantissa to 10 bits, nearest even
  return uint16_t(sign | ((r - 0x38000000u) >> 13));
}

// ---- Dropout RNG: uniform [0, 1) from (seed, element index) ----
CB_HOST_DEVICE inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
CB_HOST_DEVICE inline float uniform01(uint64_t seed, uint64_t i) {
  return float(splitmix64(seed ^ splitmix64(i)) >> 40) * (1.0f / 16777216.0f);
}

// ---- Cast's element conversion, for every backend ----
// f16/bf16 as storage types that travel through f32; float -> integer saturates (NaN -> 0);
// -> bool is v != 0; between integers it wraps.
struct F16Bits {
  uint16_t bits;
};
struct BF16Bits {
  uint16_t bits;
};
CB_HOST_DEVICE inline float cast_load(F16Bits s) { return f16_to_f32(s.bits); }
CB_HOST_DEVICE inline float cast_load(BF16Bits s) { return bf16_to_f32(s.bits); }
template <class S>
CB_HOST_DEVICE S cast_load(S s) {
  return s;
}
template <class D, class V>
CB_HOST_DEVICE D cast_store(V v) {
  if constexpr (std::is_same_v<D, F16Bits>) {
    return D{f32_to_f16(static_cast<float>(v))};
  } else if constexpr (std::is_same_v<D, BF16Bits>) {
    return D{f32_to_bf16(static_cast<float>(v))};
  } else if constexpr (std::is_same_v<D, bool>) {
    return v != V(0);
  } else if constexpr (std::is_integral_v<D> && std::is_floating_point_v<V>) {
    if (v != v) return D(0);
    if (v <= static_cast<V>(std::numeric_limits<D>::lowest()))
      return std::numeric_limits<D>::lowest();
    if (v >= static_cast<V>(std::numeric_limits<D>::max())) return std::numeric_limits<D>::max();
    return static_cast<D>(v);
  } else {
    return static_cast<D>(v);
  }
}

}  // namespace cb::math
