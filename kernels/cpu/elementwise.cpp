// Elementwise kernels: one numpy-broadcast driver for unary, binary and ternary functors from
// kernels/common/scalar_math.h. The driver collapses the output's dims into as few runs as the
// operands' strides allow (same shapes -> one run, [N,C,H,W]+[C,1,1] -> [N*C, H*W]), then walks
// contiguous inner runs with each operand's inner stride 1 or 0 fixed at compile time (so the
// same-shape and scalar fast paths are plain vectorisable loops). Large outputs are split over
// the thread pool by flat output index. No allocation per call.
#include <array>
#include <cmath>
#include <limits>
#include <tuple>
#include <utility>

#include "kernels/common/scalar_math.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/kernel_util.h"
#include "runtime/ops/params.h"

namespace cb::cpu {

namespace {
constexpr int kMaxRank = 16;

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
  parallel(a, l.numel, 1, [&](int64_t b, int64_t e) { apply_range(l, b, e, op, o, ptrs); });
}

template <class Op>
void unary_float(const KernelArgs& a, Op op) {
  dispatch_float(a.in[0].dtype, [&]<class T>(Tag<T>) { apply<T, T>(a, op, a.out[0], {&a.in[0]}); });
}
template <class Op>
void unary_numeric(const KernelArgs& a, Op op) {
  dispatch_numeric(a.in[0].dtype,
                   [&]<class T>(Tag<T>) { apply<T, T>(a, op, a.out[0], {&a.in[0]}); });
}
template <class Op>
void binary_numeric(const KernelArgs& a, Op op) {
  dispatch_numeric(a.in[0].dtype, [&]<class T>(Tag<T>) {
    apply<T, T, T>(a, op, a.out[0], {&a.in[0], &a.in[1]});
  });
}
}  // namespace

// ---- unary: [d...] -> [d...] ----
void Abs(const KernelArgs& a) { unary_numeric(a, math::AbsOp{}); }
void Neg(const KernelArgs& a) { unary_numeric(a, math::NegOp{}); }
void Relu(const KernelArgs& a) { unary_numeric(a, math::ReluOp{}); }
void Sqrt(const KernelArgs& a) { unary_float(a, math::SqrtOp{}); }
void Exp(const KernelArgs& a) { unary_float(a, math::ExpOp{}); }
void Log(const KernelArgs& a) { unary_float(a, math::LogOp{}); }
void Sigmoid(const KernelArgs& a) { unary_float(a, math::SigmoidOp{}); }
void Tanh(const KernelArgs& a) { unary_float(a, math::TanhOp{}); }
void Erf(const KernelArgs& a) { unary_float(a, math::ErfOp{}); }
void Ceil(const KernelArgs& a) { unary_float(a, math::CeilOp{}); }
void Floor(const KernelArgs& a) { unary_float(a, math::FloorOp{}); }
void Reciprocal(const KernelArgs& a) { unary_float(a, math::ReciprocalOp{}); }
void LeakyRelu(const KernelArgs& a) {
  unary_float(a, math::LeakyReluOp{a.p<ops::LeakyReluParams>().alpha});
}

// Clip(X, min?, max?): bounds from the scalar inputs (opset >= 11) or the params (attributes);
// an absent bound is the type's range.
void Clip(const KernelArgs& a) {
  const auto& p = a.p<ops::ClipParams>();
  dispatch_numeric(a.in[0].dtype, [&]<class T>(Tag<T>) {
    auto bound = [&](size_t i, float attr, T none) {
      if (a.in.size() > i && a.in[i].present()) return read_scalar<T>(a.in[i]);
      if (std::isinf(attr)) return none;
      return static_cast<T>(attr);
    };
    using L = std::numeric_limits<T>;
    T lo = bound(1, p.min, L::has_infinity ? -L::infinity() : L::lowest());
    T hi = bound(2, p.max, L::has_infinity ? L::infinity() : L::max());
    apply<T, T>(a, math::ClipOp<T>{lo, hi}, a.out[0], {&a.in[0]});
  });
}

// ---- binary with broadcasting: [a...] op [b...] -> broadcast([a...], [b...]) ----
void Add(const KernelArgs& a) { binary_numeric(a, math::AddOp{}); }
void Sub(const KernelArgs& a) { binary_numeric(a, math::SubOp{}); }
void Mul(const KernelArgs& a) { binary_numeric(a, math::MulOp{}); }
void Div(const KernelArgs& a) { binary_numeric(a, math::DivOp{}); }

void Equal(const KernelArgs& a) {
  dispatch_numeric(
      a.in[0].dtype,
      [&]<class T>(Tag<T>) {
        apply<bool, T, T>(a, math::EqualOp{}, a.out[0], {&a.in[0], &a.in[1]});
      },
      true);
}

// Pow(X: T, Y: U) -> T; the exponent may have another numeric type (opset >= 12).
void Pow(const KernelArgs& a) {
  dispatch_numeric(a.in[0].dtype, [&]<class T>(Tag<T>) {
    dispatch_numeric(a.in[1].dtype, [&]<class U>(Tag<U>) {
      apply<T, T, U>(a, math::PowOp{}, a.out[0], {&a.in[0], &a.in[1]});
    });
  });
}

// Where(cond: bool, X, Y) -> broadcast of all three; X/Y moved as bytes of their size.
void Where(const KernelArgs& a) {
  dispatch_bytes(a.in[1].dtype, [&]<class T>(Tag<T>) {
    apply<T, bool, T, T>(a, math::WhereOp{}, a.out[0], {&a.in[0], &a.in[1], &a.in[2]});
  });
}

}  // namespace cb::cpu
