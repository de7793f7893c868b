// Separable linear maps between two tensors of one rank, for the resampling ops and their
// adjoints (Resize, ResizeGrad, PadGrad):
//   dst[j_0, ..., j_{r-1}] = sum over taps (s_d, w_d) of j_d on every axis d of
//                            (prod_d w_d) * src[s_0, ..., s_{r-1}]
// Each axis has its own tap table (AxisTaps: for every destination index, its source indices
// and weights). A forward map's transpose (transpose_taps) is its adjoint: the gradient gathers
// what the forward scattered, so every destination element sums its own contributions in a
// fixed order (no atomics, no per-thread copies; results do not depend on the thread count).
// Tables live in thread_local vectors that keep their capacity: no allocation in steady state.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/cpu/kernel_util.h"
#include "runtime/error.h"

namespace cb::cpu {

struct AxisTaps {
  std::vector<int64_t> first;  // taps of destination j: [first[j], first[j + 1])
  std::vector<int64_t> src;
  std::vector<double> w;

  void reset() {
    first.assign(1, 0);
    src.clear();
    w.clear();
  }
  void add(int64_t s, double weight) {
    src.push_back(s);
    w.push_back(weight);
  }
  void next() { first.push_back(static_cast<int64_t>(src.size())); }  // closes one destination
  int64_t size() const { return static_cast<int64_t>(first.size()) - 1; }
};

// The adjoint of `f` (destinations of f are the sources of `out`, whose n_src destinations are
// f's sources); each list in ascending order of f's destination.
inline void transpose_taps(const AxisTaps& f, int64_t n_src, AxisTaps& out) {
  out.first.assign(static_cast<size_t>(n_src) + 1, 0);
  for (int64_t s : f.src) ++out.first[static_cast<size_t>(s) + 1];
  for (int64_t i = 0; i < n_src; ++i) out.first[i + 1] += out.first[i];
  out.src.resize(f.src.size());
  out.w.resize(f.src.size());
  thread_local std::vector<int64_t> cursor;
  cursor.assign(out.first.begin(), out.first.end() - 1);
  for (int64_t j = 0; j < f.size(); ++j)
    for (int64_t t = f.first[j]; t < f.first[j + 1]; ++t) {
      const int64_t at = cursor[static_cast<size_t>(f.src[t])]++;
      out.src[at] = j;
      out.w[at] = f.w[t];
    }
}

// dst = the map of src, with taps[d] the table of axis d (taps[d].size() == dst.dims[d]).
template <class T>
void apply_separable(const AxisTaps* taps, const TensorView& src, const TensorView& dst) {
  constexpr int kMax = 16;
  const int r = static_cast<int>(dst.rank());
  CB_CHECK(r <= kMax && src.rank() == r);
  const T* x = src.ptr<const T>();
  T* y = dst.ptr<T>();
  if (dst.numel() == 0) return;
  if (r == 0) {
    y[0] = x[0];
    return;
  }
  int64_t st[kMax], acc = 1;
  for (int d = r - 1; d >= 0; --d) {
    CB_CHECK(taps[d].size() == dst.dims[static_cast<size_t>(d)]);
    st[d] = acc;
    acc *= src.dims[static_cast<size_t>(d)];
  }
  const AxisTaps& last = taps[r - 1];
  const int64_t inner = dst.dims.back(), rows = dst.numel() / inner;
  const int64_t cost = inner * std::max<int64_t>(1, static_cast<int64_t>(last.src.size()) /
                                                        std::max<int64_t>(1, inner));
  parallel(rows, cost, [&](int64_t b, int64_t e) {
    int64_t j[kMax], k[kMax];
    for (int64_t row = b; row < e; ++row) {
      T* out = y + row * inner;
      std::fill(out, out + inner, T(0));
      int64_t rem = row;
      for (int d = r - 2; d >= 0; --d) {
        j[d] = rem % dst.dims[static_cast<size_t>(d)];
        rem /= dst.dims[static_cast<size_t>(d)];
      }
      bool empty = false;
      for (int d = 0; d < r - 1; ++d) {
        k[d] = taps[d].first[j[d]];
        empty |= k[d] == taps[d].first[j[d] + 1];
      }
      if (empty) continue;  // no source reaches this row
      for (;;) {            // every combination of the leading axes' taps
        double coef = 1;
        int64_t base = 0;
        for (int d = 0; d < r - 1; ++d) {
          coef *= taps[d].w[k[d]];
          base += taps[d].src[k[d]] * st[d];
        }
        const T* in = x + base;
        for (int64_t jl = 0; jl < inner; ++jl) {
          double acc = 0;
          for (int64_t t = last.first[jl]; t < last.first[jl + 1]; ++t)
            acc += last.w[t] * static_cast<double>(in[last.src[t]]);
          out[jl] += static_cast<T>(coef * acc);
        }
        int d = r - 2;
        for (; d >= 0; --d) {
          if (++k[d] < taps[d].first[j[d] + 1]) break;
          k[d] = taps[d].first[j[d]];
        }
        if (d < 0) break;
      }
    }
  });
}

}  // namespace cb::cpu
