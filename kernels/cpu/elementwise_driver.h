// The CPU elementwise driver, shared by the forward kernels (elementwise.cpp) and the gradient
// ones (elementwise_grad.cpp): out = op(in...) with numpy broadcasting for functors from
// kernels/common/scalar_math.h. It collapses the output's dims into as few runs as the operands'
// strides allow (same shapes -> one run, [N,C,H,W]+[C,1,1] -> [N*C, H*W]), then walks contiguous
// inner runs with each operand's inner stride 1 or 0 fixed at compile time (so the same-shape and
// scalar fast paths are plain vectorisable loops). Large outputs are split over the thread pool by
// flat output index. No allocation per call. Output may be the buffer of an operand of its shape
// (in-place): element i is read before it is written.
#pragma once

#include <algorithm>
#include <array>
#include <tuple>
#include <utility>

#include "kernels/cpu/kernel_util.h"

namespace cb::cpu::ew {

inline constexpr int kMaxRank = 16;

// Output dims collapsed into runs, with each operand's element stride per run (0: broadcast).
template <size_t N>
struct Layout {
  int rank = 1;
  int64_t numel = 1;
  int64_t dims[kMaxRank];
  int64_t strides[N][kMaxRank];
};

template <size_t N>
Layout<N> make_layout(const TensorView& out, const std::array<const TensorView*, N>& in) {
  Layout<N> l;
  int r = static_cast<int>(out.rank());
  if (r > kMaxRank) fail("elementwise ops support rank <= {}, got {}", kMaxRank, r);
  // Operand strides aligned to the output's dims from the right; dims of size 1 are dropped.
  int64_t dims[kMaxRank], st[N][kMaxRank];
  int n = 0;
  int64_t acc[N];
  for (size_t j = 0; j < N; ++j) acc[j] = 1;
  for (int d = r - 1; d >= 0; --d) {
    int64_t od = out.dims[static_cast<size_t>(d)];
    int64_t s[N];
    for (size_t j = 0; j < N; ++j) {
      int k = d - (r - static_cast<int>(in[j]->rank()));
      int64_t id = k >= 0 ? in[j]->dims[static_cast<size_t>(k)] : 1;
      s[j] = (id == 1 && od != 1) ? 0 : acc[j];
      acc[j] *= id;
    }
    if (od == 1) continue;
    dims[n] = od;
    for (size_t j = 0; j < N; ++j) st[j][n] = s[j];
    ++n;
  }
  // dims[] is innermost first here; merge run i+1 (outer) into run i when strides allow.
  int m = 0;
  for (int i = 0; i < n; ++i) {
    bool merge = m > 0;
    for (size_t j = 0; merge && j < N; ++j) merge = st[j][i] == st[j][m - 1] * dims[m - 1];
    if (merge) {
      dims[m - 1] *= dims[i];
      continue;
    }
    dims[m] = dims[i];
    for (size_t j = 0; j < N; ++j) st[j][m] = st[j][i];
    ++m;
  }
  if (m == 0) {  // a single element
    dims[0] = 1;
    for (size_t j = 0; j < N; ++j) st[j][0] = 0;
    m = 1;
  }
  l.rank = m;
  l.numel = out.numel();
  for (int i = 0; i < m; ++i) {  // store outermost first
    l.dims[i] = dims[m - 1 - i];
    for (size_t j = 0; j < N; ++j) l.strides[j][i] = st[j][m - 1 - i];
  }
  return l;
}

// One contiguous run: operand J advances with k when bit J of Mask is set, else stays (stride 0).
template <unsigned Mask, class Op, class Out, class... In, size_t... J>
inline void run(Op op, Out* o, int64_t n, std::index_sequence<J...>, const In*... p) {
  for (int64_t k = 0; k < n; ++k) o[k] = static_cast<Out>(op(p[((Mask >> J) & 1u) ? k : 0]...));
}

// Picks the run<Mask> whose strides match `mask` (one instantiation per 0/1 stride pattern).
template <class Op, class Out, class... In, unsigned... M>
void run_masked(std::integer_sequence<unsigned, M...>, unsigned mask, Op op, Out* o, int64_t n,
                const In*... p) {
  ((mask == M ? (run<M>(op, o, n, std::index_sequence_for<In...>{}, p...), true) : false) || ...);
}

// The run at output position i0 of the inner dim: operand J starts at in_J + off_J + i0 * st_J.
template <class Op, class Out, class... In, size_t... J>
void run_at(std::index_sequence<J...>, unsigned mask, Op op, Out* o, int64_t n,
            const std::tuple<const In*...>& in, const int64_t* off, const int64_t* st, int64_t i0) {
  run_masked(std::make_integer_sequence<unsigned, (1u << sizeof...(In))>{}, mask, op, o, n,
             (std::get<J>(in) + off[J] + i0 * st[J])...);
}

// Output elements [begin, end): walks the collapsed dims with an odometer.
template <class Op, class Out, class... In>
void apply_range(const Layout<sizeof...(In)>& l, int64_t begin, int64_t end, Op op, Out* out,
                 std::tuple<const In*...> in) {
  constexpr size_t N = sizeof...(In);
  const int r = l.rank;
  int64_t idx[kMaxRank], off[N] = {};
  int64_t rem = begin;
  for (int d = r - 1; d >= 0; --d) {
    idx[d] = rem % l.dims[d];
    rem /= l.dims[d];
  }
  unsigned mask = 0;
  int64_t inner_st[N];
  for (size_t j = 0; j < N; ++j) {
    for (int d = 0; d < r - 1; ++d) off[j] += idx[d] * l.strides[j][d];
    inner_st[j] = l.strides[j][r - 1];
    if (inner_st[j] != 0) mask |= 1u << j;
  }
  const int64_t inner = l.dims[r - 1];
  for (int64_t pos = begin; pos < end;) {
    int64_t i0 = idx[r - 1], n = std::min(inner - i0, end - pos);
    run_at(std::index_sequence_for<In...>{}, mask, op, out + pos, n, in, off, inner_st, i0);
    pos += n;
    idx[r - 1] = 0;
    for (int d = r - 2; d >= 0; --d) {
      for (size_t j = 0; j < N; ++j) off[j] += l.strides[j][d];
      if (++idx[d] < l.dims[d]) break;
      for (size_t j = 0; j < N; ++j) off[j] -= idx[d] * l.strides[j][d];
      idx[d] = 0;
    }
  }
}

template <class... In, size_t... J>
std::tuple<const In*...> pointers(const std::array<const TensorView*, sizeof...(In)>& in,
                                  std::index_sequence<J...>) {
  return std::tuple<const In*...>(static_cast<const In*>(in[J]->data)...);
}

// out = op(in...) with numpy broadcasting; In are the operands' element types.
template <class Out, class... In, class Op>
void apply(const KernelArgs& a, Op op, const TensorView& out,
           const std::array<const TensorView*, sizeof...(In)>& in) {
  if (out.numel() == 0) return;
  Layout<sizeof...(In)> l = make_layout(out, in);
  std::tuple<const In*...> ptrs = pointers<In...>(in, std::index_sequence_for<In...>{});
  Out* o = out.ptr<Out>();
  parallel(l.numel, 1, [&](int64_t b, int64_t e) { apply_range(l, b, e, op, o, ptrs); });
}

}  // namespace cb::cpu::ew
