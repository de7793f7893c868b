// Elementwise kernels of the CUDA backend: the functors of kernels/common/scalar_math.h (the
// CPU backend's own math) applied over numpy broadcasting, one thread per output element.
// As the CPU driver (kernels/cpu/elementwise_driver.h) does, the host collapses the output's dims
// into as few runs as every operand's strides allow (same shapes -> one run, a scalar operand ->
// stride 0), so the common cases cost no division per element. An output may be the buffer of an
// operand of its shape (in-place): each thread reads its element before writing it.
// Also here: Cast (every dtype pair, f16/bf16 through f32 as the CPU does), Where (elements moved
// as bytes of their size), the variadic Max/Min/Mean/Sum (one launch folds up to kMaxVar inputs)
// and the gradients of the activations.
#include <cmath>
#include <limits>
#include <type_traits>

#include "kernels/common/scalar_math.h"
#include "kernels/cuda/launch.h"
#include "runtime/error.h"
#include "runtime/ops/params.h"

namespace cb::CB_GPU_NS {

namespace {

// ---- broadcast layout ---------------------------------------------------------------------------
constexpr int kRank = static_cast<int>(kMaxRank);

// The output's dims collapsed into runs (outermost first) with each operand's element stride per
// run (0: broadcast). rank >= 1; every run has size > 1 unless the output is a single element.
template <int N>
struct Bcast {
  int rank = 1;
  int64_t d[kRank] = {};
  int64_t st[N][kRank] = {};

  // off[j]: operand j's element offset for flat output index i.
  CB_HOST_DEVICE void offsets(int64_t i, int64_t (&off)[N]) const {
    if (rank == 1) {  // same shapes, or a scalar operand: no division
      for (int j = 0; j < N; ++j) off[j] = i * st[j][0];
      return;
    }
    for (int j = 0; j < N; ++j) off[j] = 0;
    for (int k = rank - 1; k >= 0; --k) {
      const int64_t n = d[k];
      const int64_t c = i % n;
      i /= n;
      for (int j = 0; j < N; ++j) off[j] += c * st[j][k];
    }
  }
};

// The layout of `out` read from operands of dims `in[j]` (right-aligned, numpy broadcasting).
// Call only for a non-empty output.
template <int N>
Bcast<N> make_bcast(const std::vector<int64_t>& out, const std::vector<int64_t>* const* in) {
  const int r = static_cast<int>(out.size());
  if (r > kRank) fail("elementwise ops support rank <= {}, got {}", kRank, r);
  int64_t dims[kRank], st[N][kRank], acc[N];
  for (int j = 0; j < N; ++j) {
    acc[j] = 1;
    if (in[j]->size() > out.size())
      fail("elementwise: an operand of rank {} for an output of rank {}", in[j]->size(), r);
  }
  int n = 0;  // innermost first here; dims of size 1 dropped
  for (int d = r - 1; d >= 0; --d) {
    const int64_t od = out[static_cast<size_t>(d)];
    int64_t s[N];
    for (int j = 0; j < N; ++j) {
      const int k = d - (r - static_cast<int>(in[j]->size()));
      const int64_t id = k >= 0 ? (*in[j])[static_cast<size_t>(k)] : 1;
      s[j] = (id == 1 && od != 1) ? 0 : acc[j];
      acc[j] *= id;
    }
    if (od == 1) continue;
    dims[n] = od;
    for (int j = 0; j < N; ++j) st[j][n] = s[j];
    ++n;
  }
  int m = 0;  // merge run i (outer) into run m - 1 when every operand's strides allow
  for (int i = 0; i < n; ++i) {
    bool merge = m > 0;
    for (int j = 0; merge && j < N; ++j) merge = st[j][i] == st[j][m - 1] * dims[m - 1];
    if (merge) {
      dims[m - 1] *= dims[i];
      continue;
    }
    dims[m] = dims[i];
    for (int j = 0; j < N; ++j) st[j][m] = st[j][i];
    ++m;
  }
  Bcast<N> b;
  if (m == 0) {  // a single element
    b.rank = 1;
    b.d[0] = 1;
    return b;
  }
  b.rank = m;
  for (int i = 0; i < m; ++i) {  // outermost first
    b.d[i] = dims[m - 1 - i];
    for (int j = 0; j < N; ++j) b.st[j][i] = st[j][m - 1 - i];
  }
  return b;
}

// ---- drivers ------------------------------------------------------------------------------------
// y[i] = op(x[i]) (the output has the input's shape).
template <class R, class T, class Op>
void unary(const KernelArgs& a, const GpuCtx& c, Op op) {
  const T* x = a.in[0].ptr<const T>();
  R* y = a.out[0].ptr<R>();
  parallel_for(c, a.out[0].numel(),
               [=] CB_HOST_DEVICE(int64_t i) { y[i] = static_cast<R>(op(x[i])); });
}

// y = op(in0, in1) with both inputs broadcast to the output's shape.
template <class R, class T, class U, class Op>
void binary(const KernelArgs& a, const GpuCtx& c, Op op) {
  const int64_t n = a.out[0].numel();
  if (n == 0) return;
  const std::vector<int64_t>* dims[2] = {&a.in[0].dims, &a.in[1].dims};
  const Bcast<2> b = make_bcast<2>(a.out[0].dims, dims);
  const T* x = a.in[0].ptr<const T>();
  const U* z = a.in[1].ptr<const U>();
  R* y = a.out[0].ptr<R>();
  parallel_for(c, n, [=] CB_HOST_DEVICE(int64_t i) {
    int64_t off[2];
    b.offsets(i, off);
    y[i] = static_cast<R>(op(x[off[0]], z[off[1]]));
  });
}

// y = op(in0, in1, in2) with the three inputs broadcast to the output's shape.
template <class R, class T, class U, class V, class Op>
void ternary(const KernelArgs& a, const GpuCtx& c, Op op) {
  const int64_t n = a.out[0].numel();
  if (n == 0) return;
  const std::vector<int64_t>* dims[3] = {&a.in[0].dims, &a.in[1].dims, &a.in[2].dims};
  const Bcast<3> b = make_bcast<3>(a.out[0].dims, dims);
  const T* p = a.in[0].ptr<const T>();
  const U* q = a.in[1].ptr<const U>();
  const V* s = a.in[2].ptr<const V>();
  R* y = a.out[0].ptr<R>();
  parallel_for(c, n, [=] CB_HOST_DEVICE(int64_t i) {
    int64_t off[3];
    b.offsets(i, off);
    y[i] = static_cast<R>(op(p[off[0]], q[off[1]], s[off[2]]));
  });
}

// ---- unary / binary ops of one numeric type -----------------------------------------------------
template <class T, class Op>
void unary_same(const KernelArgs& a, const GpuCtx& c, Op op) {
  unary<T, T>(a, c, op);
}
template <class T, class Op>
void binary_same(const KernelArgs& a, const GpuCtx& c, Op op) {
  binary<T, T, T>(a, c, op);
}
template <class T, class Op>
void compare_to_bool(const KernelArgs& a, const GpuCtx& c, Op op) {
  binary<bool, T, T>(a, c, op);
}

#define CB_EW_UNARY(Name, Dispatch, OpExpr)                  \
  void Name(const KernelArgs& a, const GpuCtx& c) {          \
    Dispatch(a.in[0].dtype, #Name, unary_same, a, c, OpExpr) \
  }
#define CB_EW_BINARY(Name, Dispatch, Fn, OpExpr)     \
  void Name(const KernelArgs& a, const GpuCtx& c) {  \
    Dispatch(a.in[0].dtype, #Name, Fn, a, c, OpExpr) \
  }

CB_EW_UNARY(Abs, CB_GPU_DISPATCH_NUMERIC, math::AbsOp{})
CB_EW_UNARY(Neg, CB_GPU_DISPATCH_NUMERIC, math::NegOp{})
CB_EW_UNARY(Relu, CB_GPU_DISPATCH_NUMERIC, math::ReluOp{})
CB_EW_UNARY(Sqrt, CB_GPU_DISPATCH_FLOAT, math::SqrtOp{})
CB_EW_UNARY(Exp, CB_GPU_DISPATCH_FLOAT, math::ExpOp{})
CB_EW_UNARY(Log, CB_GPU_DISPATCH_FLOAT, math::LogOp{})
CB_EW_UNARY(Sigmoid, CB_GPU_DISPATCH_FLOAT, math::SigmoidOp{})
CB_EW_UNARY(Tanh, CB_GPU_DISPATCH_FLOAT, math::TanhOp{})
CB_EW_UNARY(Erf, CB_GPU_DISPATCH_FLOAT, math::ErfOp{})
CB_EW_UNARY(Ceil, CB_GPU_DISPATCH_FLOAT, math::CeilOp{})
CB_EW_UNARY(Floor, CB_GPU_DISPATCH_FLOAT, math::FloorOp{})
CB_EW_UNARY(Reciprocal, CB_GPU_DISPATCH_FLOAT, math::ReciprocalOp{})
CB_EW_UNARY(LeakyRelu, CB_GPU_DISPATCH_FLOAT, math::LeakyReluOp{a.p<ops::LeakyReluParams>().alpha})
CB_EW_UNARY(HardSigmoid, CB_GPU_DISPATCH_FLOAT,
            (math::HardSigmoidOp{a.p<ops::HardSigmoidParams>().alpha,
                                 a.p<ops::HardSigmoidParams>().beta}))
CB_EW_UNARY(HardSwish, CB_GPU_DISPATCH_FLOAT, math::HardSwishOp{})
CB_EW_UNARY(Gelu, CB_GPU_DISPATCH_FLOAT, math::GeluOp{a.p<ops::GeluParams>().tanh})

CB_EW_BINARY(Add, CB_GPU_DISPATCH_NUMERIC, binary_same, math::AddOp{})
CB_EW_BINARY(Sub, CB_GPU_DISPATCH_NUMERIC, binary_same, math::SubOp{})
CB_EW_BINARY(Mul, CB_GPU_DISPATCH_NUMERIC, binary_same, math::MulOp{})
CB_EW_BINARY(Div, CB_GPU_DISPATCH_NUMERIC, binary_same, math::DivOp{})
CB_EW_BINARY(Greater, CB_GPU_DISPATCH_NUMERIC, compare_to_bool, math::GreaterOp{})
CB_EW_BINARY(GreaterOrEqual, CB_GPU_DISPATCH_NUMERIC, compare_to_bool, math::GreaterOrEqualOp{})
CB_EW_BINARY(Less, CB_GPU_DISPATCH_NUMERIC, compare_to_bool, math::LessOp{})
CB_EW_BINARY(LessOrEqual, CB_GPU_DISPATCH_NUMERIC, compare_to_bool, math::LessOrEqualOp{})

// Gradients (dY, saved) -> dX, all of one shape.
CB_EW_BINARY(ReluGrad, CB_GPU_DISPATCH_FLOAT, binary_same, math::ReluGradOp{})
CB_EW_BINARY(LeakyReluGrad, CB_GPU_DISPATCH_FLOAT, binary_same,
             math::LeakyReluGradOp{a.p<ops::LeakyReluParams>().alpha})
CB_EW_BINARY(HardSigmoidGrad, CB_GPU_DISPATCH_FLOAT, binary_same,
             (math::HardSigmoidGradOp{a.p<ops::HardSigmoidParams>().alpha,
                                      a.p<ops::HardSigmoidParams>().beta}))
CB_EW_BINARY(HardSwishGrad, CB_GPU_DISPATCH_FLOAT, binary_same, math::HardSwishGradOp{})
CB_EW_BINARY(GeluGrad, CB_GPU_DISPATCH_FLOAT, binary_same,
             math::GeluGradOp{a.p<ops::GeluParams>().tanh})

#undef CB_EW_UNARY
#undef CB_EW_BINARY

// ---- bool ops -----------------------------------------------------------------------------------
void require_bool(const KernelArgs& a, const char* op, size_t n_in) {
  for (size_t i = 0; i < n_in; ++i)
    if (a.in[i].dtype != DType::Bool) unsupported_dtype(op, a.in[i].dtype);
}
void And(const KernelArgs& a, const GpuCtx& c) {
  require_bool(a, "And", 2);
  binary<bool, bool, bool>(a, c, math::AndOp{});
}
void Or(const KernelArgs& a, const GpuCtx& c) {
  require_bool(a, "Or", 2);
  binary<bool, bool, bool>(a, c, math::OrOp{});
}
void Xor(const KernelArgs& a, const GpuCtx& c) {
  require_bool(a, "Xor", 2);
  binary<bool, bool, bool>(a, c, math::XorOp{});
}
void Not(const KernelArgs& a, const GpuCtx& c) {
  require_bool(a, "Not", 1);
  unary<bool, bool>(a, c, math::NotOp{});
}

// Equal: numeric inputs of one type, or bool.
void Equal(const KernelArgs& a, const GpuCtx& c) {
  if (a.in[0].dtype == DType::Bool) return binary<bool, bool, bool>(a, c, math::EqualOp{});
  CB_GPU_DISPATCH_NUMERIC(a.in[0].dtype, "Equal", compare_to_bool, a, c, math::EqualOp{})
}

// ---- Pow(X: T, Y: U) -> T -----------------------------------------------------------------------
// An unsigned (u8) exponent goes to math::PowOp as int32_t: the same values and results, without
// the `y < 0` test nvcc rejects as pointless for an unsigned type (-Werror).
struct PowSignedExp {
  template <class T, class U>
  CB_HOST_DEVICE T operator()(T x, U y) const {
    using W = std::conditional_t<std::is_unsigned_v<U>, int32_t, U>;
    return math::PowOp{}(x, static_cast<W>(y));
  }
};
template <class T>
struct PowOf {
  template <class U>
  static void run(const KernelArgs& a, const GpuCtx& c) {
    binary<T, T, U>(a, c, PowSignedExp{});
  }
};
template <class T>
void pow_x(const KernelArgs& a, const GpuCtx& c) {
  CB_GPU_DISPATCH_NUMERIC(a.in[1].dtype, "Pow", PowOf<T>::template run, a, c)
}
void Pow(const KernelArgs& a, const GpuCtx& c) {
  CB_GPU_DISPATCH_NUMERIC(a.in[0].dtype, "Pow", pow_x, a, c)
}

// ---- Where(cond: bool, X, Y): elements moved as unsigned integers of their size -----------------
void Where(const KernelArgs& a, const GpuCtx& c) {
  if (a.in[0].dtype != DType::Bool) unsupported_dtype("Where", a.in[0].dtype);
  switch (dtype_size(a.in[1].dtype)) {
    case 1:
      return ternary<uint8_t, bool, uint8_t, uint8_t>(a, c, math::WhereOp{});
    case 2:
      return ternary<uint16_t, bool, uint16_t, uint16_t>(a, c, math::WhereOp{});
    case 4:
      return ternary<uint32_t, bool, uint32_t, uint32_t>(a, c, math::WhereOp{});
    case 8:
      return ternary<uint64_t, bool, uint64_t, uint64_t>(a, c, math::WhereOp{});
    default:
      unsupported_dtype("Where", a.in[1].dtype);
  }
}

// ---- Clip and ClipGrad: bounds from scalar inputs (read on the device) or attributes ----------
// A bound: the first element of a scalar input of dtype `t` when `p` is set, else `v`.
template <class T>
struct Bound {
  const void* p = nullptr;
  DType t = DType::F32;
  T v{};

  CB_HOST_DEVICE T get() const {
    if (!p) return v;
    switch (t) {
      case DType::F32:
        return static_cast<T>(*static_cast<const float*>(p));
      case DType::F64:
        return static_cast<T>(*static_cast<const double*>(p));
      case DType::I64:
        return static_cast<T>(*static_cast<const int64_t*>(p));
      case DType::I32:
        return static_cast<T>(*static_cast<const int32_t*>(p));
      case DType::I8:
        return static_cast<T>(*static_cast<const int8_t*>(p));
      case DType::U8:
        return static_cast<T>(*static_cast<const uint8_t*>(p));
      case DType::Bool:
        return static_cast<T>(*static_cast<const bool*>(p));
      default:
        return v;
    }
  }
};

// Input i as a bound when present (numeric or bool, as the CPU's read_scalar), else `dflt`.
template <class T>
Bound<T> bound_of(const KernelArgs& a, size_t i, T dflt, const char* op) {
  Bound<T> b;
  b.v = dflt;
  if (a.in.size() > i && a.in[i].present()) {
    const DType t = a.in[i].dtype;
    if (!(type_bit(t) & (kNumeric | type_bit(DType::Bool)))) unsupported_dtype(op, t);
    b.p = a.in[i].data;
    b.t = t;
  }
  return b;
}

// Clip(X, min?, max?): an absent bound (or an infinite attribute) is the type's range.
template <class T>
void clip(const KernelArgs& a, const GpuCtx& c) {
  const auto& prm = a.p<ops::ClipParams>();
  using L = std::numeric_limits<T>;
  const T none_lo = L::has_infinity ? -L::infinity() : L::lowest();
  const T none_hi = L::has_infinity ? L::infinity() : L::max();
  const Bound<T> lo =
      bound_of<T>(a, 1, std::isinf(prm.min) ? none_lo : static_cast<T>(prm.min), "Clip");
  const Bound<T> hi =
      bound_of<T>(a, 2, std::isinf(prm.max) ? none_hi : static_cast<T>(prm.max), "Clip");
  const T* x = a.in[0].ptr<const T>();
  T* y = a.out[0].ptr<T>();
  parallel_for(c, a.out[0].numel(), [=] CB_HOST_DEVICE(int64_t i) {
    y[i] = math::ClipOp<T>{lo.get(), hi.get()}(x[i]);
  });
}
void Clip(const KernelArgs& a, const GpuCtx& c) {
  CB_GPU_DISPATCH_NUMERIC(a.in[0].dtype, "Clip", clip, a, c)
}

// ClipGrad(dY, X, min?, max?): dY where min <= X <= max; absent bounds: the attributes (+-inf).
template <class T>
void clip_grad(const KernelArgs& a, const GpuCtx& c) {
  const auto& prm = a.p<ops::ClipParams>();
  const Bound<T> lo = bound_of<T>(a, 2, static_cast<T>(prm.min), "ClipGrad");
  const Bound<T> hi = bound_of<T>(a, 3, static_cast<T>(prm.max), "ClipGrad");
  const T* dy = a.in[0].ptr<const T>();
  const T* x = a.in[1].ptr<const T>();
  T* dx = a.out[0].ptr<T>();
  parallel_for(c, a.out[0].numel(), [=] CB_HOST_DEVICE(int64_t i) {
    dx[i] = math::ClipGradOp<T>{lo.get(), hi.get()}(dy[i], x[i]);
  });
}
void ClipGrad(const KernelArgs& a, const GpuCtx& c) {
  CB_GPU_DISPATCH_FLOAT(a.in[0].dtype, "ClipGrad", clip_grad, a, c)
}

// ---- Cast: any dtype -> params.to (the element conversion is the CPU's: math::cast_load /
// cast_store in kernels/common/scalar_math.h) -------------------------------------------------
using H16 = math::F16Bits;
using B16 = math::BF16Bits;
using math::cast_load;
using math::cast_store;

// fn<T>(...) for every dtype, f16/bf16 as H16/B16 and bool as bool.
#define CB_EW_DISPATCH_ALL(t, op, fn, ...)            \
  switch (t) {                                        \
    case ::cb::DType::F16:                            \
      fn<H16>(__VA_ARGS__);                           \
      break;                                          \
    case ::cb::DType::BF16:                           \
      fn<B16>(__VA_ARGS__);                           \
      break;                                          \
    case ::cb::DType::Bool:                           \
      fn<bool>(__VA_ARGS__);                          \
      break;                                          \
    default:                                          \
      CB_GPU_DISPATCH_NUMERIC(t, op, fn, __VA_ARGS__) \
  }

template <class S>
struct CastFrom {
  template <class D>
  static void run(const KernelArgs& a, const GpuCtx& c) {
    const S* s = a.in[0].ptr<const S>();
    D* d = a.out[0].ptr<D>();
    parallel_for(c, a.out[0].numel(),
                 [=] CB_HOST_DEVICE(int64_t i) { d[i] = cast_store<D>(cast_load(s[i])); });
  }
};
template <class S>
void cast_from(const KernelArgs& a, const GpuCtx& c) {
  CB_EW_DISPATCH_ALL(a.out[0].dtype, "Cast", CastFrom<S>::template run, a, c)
}
void Cast(const KernelArgs& a, const GpuCtx& c) {
  const TensorView &in = a.in[0], &out = a.out[0];
  if (in.dtype == out.dtype) return copy_device(c, out.data, in.data, out.bytes());
  CB_EW_DISPATCH_ALL(in.dtype, "Cast", cast_from, a, c)
}
#undef CB_EW_DISPATCH_ALL

// ---- Max, Min, Mean, Sum over 1..N broadcast inputs ---------------------------------------------
// out = op(...op(op(in0, in1), in2)..., in_{n-1}) in that order (the CPU's fold, so rounding
// agrees), then / n for Mean. One launch folds up to kMaxVar operands; more inputs continue from
// the output in further launches (the output is then operand 0: its own shape).
constexpr int kMaxVar = 8;

template <class T>
struct VarArgs {
  const T* p[kMaxVar] = {};
  int n = 0;
  bool divide = false;  // Mean's last launch
  T count{};
};

template <class T, class Op>
void fold(const KernelArgs& a, const GpuCtx& c, Op op, bool mean) {
  const TensorView& out = a.out[0];
  const int64_t numel = out.numel();
  if (numel == 0) return;
  T* y = out.ptr<T>();
  const size_t total = a.in.size();
  if (total == 0) fail("variadic elementwise op without inputs");
  size_t next = 0;  // the first input not folded yet
  while (next < total) {
    VarArgs<T> v;
    const std::vector<int64_t>* dims[kMaxVar];
    if (next > 0) {  // continue from the partial result
      v.p[v.n] = y;
      dims[v.n++] = &out.dims;
    }
    while (next < total && v.n < kMaxVar) {
      v.p[v.n] = a.in[next].ptr<const T>();
      dims[v.n++] = &a.in[next++].dims;
    }
    for (int j = v.n; j < kMaxVar; ++j) dims[j] = &out.dims;  // unused slots
    v.divide = mean && next == total && total > 1;
    v.count = static_cast<T>(total);
    const Bcast<kMaxVar> b = make_bcast<kMaxVar>(out.dims, dims);
    parallel_for(c, numel, [=] CB_HOST_DEVICE(int64_t i) {
      int64_t off[kMaxVar];
      b.offsets(i, off);
      T acc = v.p[0][off[0]];
      for (int j = 1; j < kMaxVar; ++j)  // a constant trip count: unrolled, off[] in registers
        if (j < v.n) acc = op(acc, v.p[j][off[j]]);
      if (v.divide) acc = math::DivOp{}(acc, v.count);
      y[i] = acc;
    });
  }
}

template <class T>
void max_n(const KernelArgs& a, const GpuCtx& c) {
  fold<T>(a, c, math::MaxOp{}, false);
}
template <class T>
void min_n(const KernelArgs& a, const GpuCtx& c) {
  fold<T>(a, c, math::MinOp{}, false);
}
template <class T>
void sum_n(const KernelArgs& a, const GpuCtx& c) {
  fold<T>(a, c, math::AddOp{}, false);
}
template <class T>
void mean_n(const KernelArgs& a, const GpuCtx& c) {
  fold<T>(a, c, math::AddOp{}, true);
}
void Max(const KernelArgs& a, const GpuCtx& c) {
  CB_GPU_DISPATCH_NUMERIC(a.in[0].dtype, "Max", max_n, a, c)
}
void Min(const KernelArgs& a, const GpuCtx& c) {
  CB_GPU_DISPATCH_NUMERIC(a.in[0].dtype, "Min", min_n, a, c)
}
void Sum(const KernelArgs& a, const GpuCtx& c) {
  CB_GPU_DISPATCH_NUMERIC(a.in[0].dtype, "Sum", sum_n, a, c)
}
void Mean(const KernelArgs& a, const GpuCtx& c) {
  CB_GPU_DISPATCH_FLOAT(a.in[0].dtype, "Mean", mean_n, a, c)
}

// ---- the table (the CPU registry's dtype masks) -------------------------------------------------
constexpr uint32_t kBool = type_bit(DType::Bool);

constexpr GpuKernel kKernels[] = {
    {OpKind::Abs, &Abs, kNumeric},
    {OpKind::Add, &Add, kNumeric},
    {OpKind::And, &And, kBool},
    {OpKind::Cast, &Cast, kAll},
    {OpKind::Ceil, &Ceil, kFloat},
    {OpKind::Clip, &Clip, kNumeric},
    {OpKind::Div, &Div, kNumeric},
    {OpKind::Equal, &Equal, kNumeric | kBool},
    {OpKind::Erf, &Erf, kFloat},
    {OpKind::Exp, &Exp, kFloat},
    {OpKind::Floor, &Floor, kFloat},
    {OpKind::Greater, &Greater, kNumeric},
    {OpKind::GreaterOrEqual, &GreaterOrEqual, kNumeric},
    {OpKind::HardSigmoid, &HardSigmoid, kFloat},
    {OpKind::HardSwish, &HardSwish, kFloat},
    {OpKind::Gelu, &Gelu, kFloat},
    {OpKind::LeakyRelu, &LeakyRelu, kFloat},
    {OpKind::Less, &Less, kNumeric},
    {OpKind::LessOrEqual, &LessOrEqual, kNumeric},
    {OpKind::Log, &Log, kFloat},
    {OpKind::Max, &Max, kNumeric},
    {OpKind::Mean, &Mean, kFloat},
    {OpKind::Min, &Min, kNumeric},
    {OpKind::Mul, &Mul, kNumeric},
    {OpKind::Neg, &Neg, kNumeric},
    {OpKind::Not, &Not, kBool},
    {OpKind::Or, &Or, kBool},
    {OpKind::Pow, &Pow, kNumeric},
    {OpKind::Reciprocal, &Reciprocal, kFloat},
    {OpKind::Relu, &Relu, kNumeric},
    {OpKind::Sigmoid, &Sigmoid, kFloat},
    {OpKind::Sqrt, &Sqrt, kFloat},
    {OpKind::Sub, &Sub, kNumeric},
    {OpKind::Sum, &Sum, kNumeric},
    {OpKind::Tanh, &Tanh, kFloat},
    {OpKind::Where, &Where, kBool},
    {OpKind::Xor, &Xor, kBool},
    {OpKind::ClipGrad, &ClipGrad, kFloat},
    {OpKind::HardSigmoidGrad, &HardSigmoidGrad, kFloat},
    {OpKind::HardSwishGrad, &HardSwishGrad, kFloat},
    {OpKind::GeluGrad, &GeluGrad, kFloat},
    {OpKind::LeakyReluGrad, &LeakyReluGrad, kFloat},
    {OpKind::ReluGrad, &ReluGrad, kFloat},
};
}  // namespace

std::span<const GpuKernel> elementwise_kernels() { return kKernels; }

}  // namespace cb::CB_GPU_NS
