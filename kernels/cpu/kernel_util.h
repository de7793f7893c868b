// Helpers shared by the CPU kernel files: dtype dispatch (a DType -> a C++ type given to a
// templated lambda as std::type_identity<T>), parallel loops that run inline without a pool or
// below the grain, and the readers of small constant inputs (axes, pads, starts) that ops take as
// tensors. Kernel files include this; nothing outside kernels/cpu/ does.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/current_pool.h"
#include "runtime/error.h"
#include "runtime/kernel_args.h"
#include "runtime/thread_pool.h"

namespace cb::cpu {

template <class T>
using Tag = std::type_identity<T>;

// f32, f64.
template <class F>
void dispatch_float(DType t, F&& f) {
  switch (t) {
    case DType::F32:
      f(Tag<float>{});
      return;
    case DType::F64:
      f(Tag<double>{});
      return;
    default:
      throw InternalError(fmt::format("no float kernel for {}", dtype_name(t)));
  }
}

// f32, f64, i64, i32, i8, u8 (and bool where `with_bool`).
template <class F>
void dispatch_numeric(DType t, F&& f, bool with_bool = false) {
  switch (t) {
    case DType::F32:
      f(Tag<float>{});
      return;
    case DType::F64:
      f(Tag<double>{});
      return;
    case DType::I64:
      f(Tag<int64_t>{});
      return;
    case DType::I32:
      f(Tag<int32_t>{});
      return;
    case DType::I8:
      f(Tag<int8_t>{});
      return;
    case DType::U8:
      f(Tag<uint8_t>{});
      return;
    case DType::Bool:
      if (with_bool) {
        f(Tag<bool>{});
        return;
      }
      break;
    default:
      break;
  }
  throw InternalError(fmt::format("no numeric kernel for {}", dtype_name(t)));
}

// An unsigned integer type of the element's size: for kernels that only move elements.
template <class F>
void dispatch_bytes(DType t, F&& f) {
  switch (dtype_size(t)) {
    case 1:
      f(Tag<uint8_t>{});
      return;
    case 2:
      f(Tag<uint16_t>{});
      return;
    case 4:
      f(Tag<uint32_t>{});
      return;
    case 8:
      f(Tag<uint64_t>{});
      return;
    default:
      throw InternalError(fmt::format("no element size {}", dtype_size(t)));
  }
}

// Hot loops compiled three times (x86-64-v4 with AVX-512, v3 with AVX2+FMA, the portable
// default) and picked once at load time by the CPU (GCC ifunc): the build stays portable, the
// loops get the machine's vector width. Put it on a function that holds a whole loop nest (the
// clones are reached through an indirect call, so never on small helpers in a loop). The FMA
// clones contract a * b + c into one rounding: not for code that must match another kernel bit
// for bit (sma.cpp's SmaStep vs SgdStep). CMake's CB_CPU_CLONES=OFF (the tsan preset) defines
// CB_NO_CPU_CLONES: the ifunc resolvers run before ThreadSanitizer is initialised and crash it.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__) && \
    !defined(CB_NO_CPU_CLONES)
#define CB_CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define CB_CPU_CLONES
#endif

// Sums in double of x[0..n) and of (x - mu)^2, in 8 lanes combined in a fixed order: loops GCC
// vectorises (an in-order double sum is a dependency chain it cannot), with the same result for
// any thread count. For the row statistics of the normalisations.
template <class T>
inline double lane_sum(const T* x, int64_t n) {
  double s[8] = {};
  int64_t k = 0;
  for (; k + 8 <= n; k += 8)
    for (int j = 0; j < 8; ++j) s[j] += static_cast<double>(x[k + j]);
  double t = 0;
  for (; k < n; ++k) t += static_cast<double>(x[k]);
  for (int j = 0; j < 8; ++j) t += s[j];
  return t;
}
template <class T>
inline double lane_sq_dev(const T* x, int64_t n, double mu) {
  double s[8] = {};
  int64_t k = 0;
  for (; k + 8 <= n; k += 8)
    for (int j = 0; j < 8; ++j) {
      const double c = static_cast<double>(x[k + j]) - mu;
      s[j] += c * c;
    }
  double t = 0;
  for (; k < n; ++k) t += (static_cast<double>(x[k]) - mu) * (static_cast<double>(x[k]) - mu);
  for (int j = 0; j < 8; ++j) t += s[j];
  return t;
}

// Elements per task below which a loop is not worth splitting (a few microseconds of work: the
// pool's workers spin between kernels, so handing out a task costs well under a microsecond).
constexpr int64_t kGrain = 1 << 12;

// fn(begin, end) over [0, n) where one index costs about `cost` element operations, on the
// launching stream's pool (cpu::current_pool()): inline without one or below 2 * kGrain in total,
// else split over the pool in chunks of >= kGrain.
template <class F>
void parallel(int64_t n, int64_t cost, F&& fn) {
  if (n <= 0) return;
  cost = std::max<int64_t>(1, cost);
  ThreadPool* pool = current_pool();
  if (!pool || pool->size() <= 1 || n < 2 || n * cost < 2 * kGrain) {
    fn(int64_t{0}, n);
    return;
  }
  int64_t grain = std::max<int64_t>(1, kGrain / cost);
  const F* f = &fn;  // one pointer: fits std::function's small buffer, no allocation
  pool->parallel_for(
      n, [f](int64_t b, int64_t e) { (*f)(b, e); }, grain);
}

// The size in bytes of the last-level cache that core 0 shares (cache_size.cpp), for kernels that
// size their passes to stay in cache.
int64_t last_level_cache_bytes();

// Copies input 0 to output 0 unless the planner made them one buffer.
inline void copy_if_distinct(const TensorView& in, const TensorView& out) {
  if (out.data != in.data && out.bytes() > 0) std::memmove(out.data, in.data, out.bytes());
}

// Element i of a small integer input (axes, pads, starts, steps) as int64: i64 or i32 data.
inline int64_t int_at(const TensorView& v, int64_t i) {
  CB_CHECK(v.dtype == DType::I64 || v.dtype == DType::I32);
  return v.dtype == DType::I32 ? v.ptr<int32_t>()[i] : v.ptr<int64_t>()[i];
}

// A scalar input read as T (Clip bounds, Range start/delta, Pad value).
template <class T>
T read_scalar(const TensorView& v) {
  T r{};
  dispatch_numeric(
      v.dtype, [&]<class U>(Tag<U>) { r = static_cast<T>(v.ptr<U>()[0]); }, true);
  return r;
}

inline int64_t norm_axis(int64_t axis, int64_t rank) { return axis < 0 ? axis + rank : axis; }

// Element i of an f32 or f64 view as double, and back (per-channel statistics in mixed code).
inline double real_at(const TensorView& v, int64_t i) {
  return v.dtype == DType::F64 ? v.ptr<double>()[i] : v.ptr<float>()[i];
}
inline void put_real(const TensorView& v, int64_t i, double x) {
  if (v.dtype == DType::F64)
    v.ptr<double>()[i] = x;
  else
    v.ptr<float>()[i] = static_cast<float>(x);
}

}  // namespace cb::cpu
