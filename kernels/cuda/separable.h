// The deterministic adjoint of a separable map on the CUDA backend, for the gradients whose
// default kernels scatter with atomic adds (PadGrad, ResizeGrad) when GpuCtx::deterministic is
// set. It is the CPU's computation (kernels/cpu/separable.h), in the CPU's order:
//   - on the host, the forward taps of every axis (for each dY index, the dX indices it reads and
//     their weights) are transposed into one tap list per dX index, in ascending dY index (the
//     CPU's transpose_taps), and uploaded into the kernel's workspace (adjoint_tables);
//   - a thread per dX element then gathers: for every combination of the leading axes' taps
//     (axis 0 outermost) the last axis's taps summed in double, times the leading weights, added
//     to the element in T, from zero (apply_adjoint; the operations of apply_separable).
// No atomics, so results do not change from run to run; equal to the CPU bit for bit where the
// compiler does not contract a * b + c into one rounding (the host-run build; nvcc contracts by
// default, so a GPU's results may differ from the CPU's in the last bit).
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cuda/launch.h"

namespace cb::CB_GPU_NS {

// The adjoint tables of every axis, as device pointers into the workspace: the taps of dX index
// s along axis d are src[d][t] (dY indices) and w[d][t] for t in [first[d][s], first[d][s + 1]).
struct AdjointTables {
  const int64_t* first[kMaxRank] = {};
  const int64_t* src[kMaxRank] = {};
  const double* w[kMaxRank] = {};
};

// The tables in one byte buffer (per axis: first [dx_d + 1], src [taps], w [taps], all 8-byte
// words) and where each starts. taps_of(d, o, idx, w) gives the forward taps of dY index o along
// axis d (at most kMaxTaps) and returns their count.
struct AdjointBytes {
  std::vector<unsigned char> bytes;
  size_t first[kMaxRank] = {}, src[kMaxRank] = {}, w[kMaxRank] = {};
};

template <int kMaxTaps, class TapsOf>
void adjoint_tables(const std::vector<int64_t>& dx, const std::vector<int64_t>& dy, TapsOf taps_of,
                    AdjointBytes& out) {
  const size_t r = dx.size();
  CB_CHECK(r == dy.size() && r <= kMaxRank);
  std::vector<int64_t> fwd_first, fwd_src, first, src;
  std::vector<double> fwd_w, w;
  out.bytes.clear();
  auto append = [&](const void* p, size_t n) {
    const size_t at = out.bytes.size();
    out.bytes.resize(at + n);
    if (n) std::memcpy(out.bytes.data() + at, p, n);
    return at;
  };
  for (size_t d = 0; d < r; ++d) {
    // Forward taps of dY indices [0, dy[d]).
    fwd_first.assign(1, 0);
    fwd_src.clear();
    fwd_w.clear();
    int64_t idx[kMaxTaps];
    double wt[kMaxTaps];
    for (int64_t o = 0; o < dy[d]; ++o) {
      const int k = taps_of(static_cast<int>(d), o, idx, wt);
      for (int t = 0; t < k; ++t) {
        CB_CHECK(idx[t] >= 0 && idx[t] < dx[d]);
        fwd_src.push_back(idx[t]);
        fwd_w.push_back(wt[t]);
      }
      fwd_first.push_back(static_cast<int64_t>(fwd_src.size()));
    }
    // Transposed: per dX index, its dY indices in ascending order (a counting sort).
    first.assign(static_cast<size_t>(dx[d]) + 1, 0);
    for (int64_t s : fwd_src) ++first[static_cast<size_t>(s) + 1];
    for (size_t i = 0; i + 1 < first.size(); ++i) first[i + 1] += first[i];
    src.resize(fwd_src.size());
    w.resize(fwd_src.size());
    std::vector<int64_t> cursor(first.begin(), first.end() - 1);
    for (int64_t o = 0; o < dy[d]; ++o)
      for (int64_t t = fwd_first[static_cast<size_t>(o)]; t < fwd_first[static_cast<size_t>(o) + 1];
           ++t) {
        const int64_t at = cursor[static_cast<size_t>(fwd_src[static_cast<size_t>(t)])]++;
        src[static_cast<size_t>(at)] = o;
        w[static_cast<size_t>(at)] = fwd_w[static_cast<size_t>(t)];
      }
    out.first[d] = append(first.data(), first.size() * sizeof(int64_t));
    out.src[d] = append(src.data(), src.size() * sizeof(int64_t));
    out.w[d] = append(w.data(), w.size() * sizeof(double));
  }
}

// Uploads the tables into `ws` (the kernel's workspace, at least b.bytes.size() bytes) on the
// kernel's stream and returns their device pointers.
inline AdjointTables upload_tables(const GpuCtx& c, const AdjointBytes& b, void* ws, size_t rank) {
  copy_from_host(c, ws, b.bytes.data(), b.bytes.size());
  const auto* base = static_cast<const unsigned char*>(ws);
  AdjointTables t;
  for (size_t d = 0; d < rank; ++d) {
    t.first[d] = reinterpret_cast<const int64_t*>(base + b.first[d]);
    t.src[d] = reinterpret_cast<const int64_t*>(base + b.src[d]);
    t.w[d] = reinterpret_cast<const double*>(base + b.w[d]);
  }
  return t;
}

// dX = the adjoint map of dY (dims dxd, dyd; rank >= 1), through the uploaded tables.
template <class T>
void apply_adjoint(const GpuCtx& c, const AdjointTables tb, const T* dy, const Dims dyd, T* dx,
                   const Dims dxd) {
  const int r = dxd.rank;
  CB_CHECK(r >= 1 && dyd.rank == r);
  const Dims st = contiguous_strides(dyd);
  const int64_t inner = dxd.d[r - 1];
  parallel_for(c, dxd.numel(), [=] CB_HOST_DEVICE(int64_t i) {
    const int64_t jl = i % inner;
    int64_t rem = i / inner;
    int64_t j[kMaxRank] = {}, k[kMaxRank] = {};
    for (int d = r - 2; d >= 0; --d) {
      j[d] = rem % dxd.d[d];
      rem /= dxd.d[d];
    }
    for (int d = 0; d < r - 1; ++d) {
      k[d] = tb.first[d][j[d]];
      if (k[d] == tb.first[d][j[d] + 1]) {  // no dY element reaches this row
        dx[i] = T(0);
        return;
      }
    }
    const int64_t t0 = tb.first[r - 1][jl], t1 = tb.first[r - 1][jl + 1];
    T out = T(0);
    for (;;) {  // every combination of the leading axes' taps
      double coef = 1;
      int64_t base = 0;
      for (int d = 0; d < r - 1; ++d) {
        coef *= tb.w[d][k[d]];
        base += tb.src[d][k[d]] * st.d[d];
      }
      double acc = 0;
      for (int64_t t = t0; t < t1; ++t)
        acc += tb.w[r - 1][t] * static_cast<double>(dy[base + tb.src[r - 1][t]]);
      out += static_cast<T>(coef * acc);
      int d = r - 2;
      for (; d >= 0; --d) {
        if (++k[d] < tb.first[d][j[d] + 1]) break;
        k[d] = tb.first[d][j[d]];
      }
      if (d < 0) break;
    }
    dx[i] = out;
  });
}

}  // namespace cb::CB_GPU_NS
