// The op harness (after ggml's test-backend-ops): every (op, dtype) pair a backend claims through
// Device::supports is run through Device::launch on one-node graphs built with GraphBuilder (so
// the op's own parse/infer gives the params and the output shapes; a gradient op's params come
// from a forward node emitted before it, as its vjp does), with seeded random inputs and NaN /
// 0xCD-poisoned outputs, and compared with the same op run on a 1-thread CPU device in f64 (or
// with a scalar reference). Tolerance by output dtype: f32 1e-5 relative + 1e-5 absolute (times
// the output's largest magnitude, at least 1), scaled per case for long reductions; integers,
// bools and data movement exact. Inputs must come back unmodified (the kernel contract: every
// buffer a kernel writes is an output; optimizer steps declare their in-place buffers as outputs
// that start with drawn values). A claimed pair without a case fails, unless it is an exclusion
// (with its reason) in backend_ops_cases.h.
//
// How to add an op:
//   1. give it a case function in its kernel family's file, tests/backend_ops/<family>.h (the
//      families of kernels/cuda; the Case type is in tests/backend_ops/case.h): several shapes
//      (odd sizes such as 7 or 13, broadcasting for binary ops, a zero-size tensor where the op
//      allows one, one large enough to be split over threads), realistic attributes, values kept
//      where the op is defined (Fill); a gradient op names its forward op (Fwd) for its params;
//   2. add {OpKind::X, fn} to case_table() in tests/backend_ops_cases.h;
//   3. if no f64 kernel computes it (or f64 cannot express its integer semantics), give the case
//      a RefFn (scalar reference, in tests/backend_ops/references.cpp) or set trunc_ref.
// Then `build/tests/cb-tests --source-file='*test_backend_ops.cpp'`; the summary line gives the
// pair and case counts (raise kMinPairs / kMinCases below when they grow).
//
// Backends are a list of (name, factory): cpu, cuda (a GPU, where present) and cuda-host (the
// CUDA backend's own kernels run as host loops, on every machine).
// All device calls go through tests/device_util.h (launch_on, upload_new, download_to) and
// run_on() below.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "kernels/common/scalar_math.h"
#include "kernels/cuda/cuda_device.h"
#include "runtime/device.h"
#include "runtime/error.h"
#include "runtime/graph_builder.h"
#include "runtime/passes.h"
#include "tests/backend_ops_cases.h"
#include "tests/device_util.h"

using namespace cb;
using namespace cb::test;
using namespace cb::test::bops;

namespace {

// Counts the CPU backend must reach (measured; raise them when cases are added).
constexpr int kMinPairs = 412;
constexpr int kMinCases = 3067;

// ---- backends -----------------------------------------------------------------------------------
// A factory returns nullptr and sets `why` when the backend cannot run here.
using Factory = std::function<std::unique_ptr<Device>(std::string& why)>;
struct Backend {
  const char* name;
  Factory make;
};
const Backend kBackends[] = {
    {"cpu", [](std::string&) { return make_cpu_device(2); }},
    // The CUDA backend on a GPU (skipped, with the reason, where there is none).
    {"cuda",
     [](std::string& why) -> std::unique_ptr<Device> {
       if (cuda_device_count(&why) == 0) return nullptr;
       return make_cuda_device(0);
     }},
    // The CUDA backend's own kernels run as host loops (kernels/cuda/launch.h; the cuDNN and
    // cuBLASLt ops on its fallback kernels): their indexing and dtype logic, on every machine.
    {"cuda-host", [](std::string&) { return make_cuda_host_run_device(); }},
};

constexpr DType kDTypes[] = {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I64,
                             DType::I32, DType::I8,  DType::U8,   DType::Bool};

// ---- values -------------------------------------------------------------------------------------
}  // namespace

namespace cb::test::bops {

Tensor make_tensor(DType t, std::vector<int64_t> dims) {
  Tensor r;
  r.dtype = t;
  r.dims = std::move(dims);
  r.bytes.resize(static_cast<size_t>(r.numel()) * dtype_size(t));
  return r;
}

// Stores x (already inside the dtype's range) as element i.
void put(Tensor& t, int64_t i, double x) {
  switch (t.dtype) {
    case DType::F32:
      t.data<float>()[i] = static_cast<float>(x);
      return;
    case DType::F64:
      t.data<double>()[i] = x;
      return;
    case DType::F16:
      t.data<uint16_t>()[i] = math::f32_to_f16(static_cast<float>(x));
      return;
    case DType::BF16:
      t.data<uint16_t>()[i] = math::f32_to_bf16(static_cast<float>(x));
      return;
    case DType::I64:
      t.data<int64_t>()[i] = std::llround(x);
      return;
    case DType::I32:
      t.data<int32_t>()[i] = static_cast<int32_t>(std::llround(x));
      return;
    case DType::I8:
      t.data<int8_t>()[i] = static_cast<int8_t>(std::llround(x));
      return;
    case DType::U8:
      t.data<uint8_t>()[i] = static_cast<uint8_t>(std::llround(x));
      return;
    case DType::Bool:
      t.data<uint8_t>()[i] = x != 0;
      return;
  }
}

}  // namespace cb::test::bops

namespace {

// The concrete distribution of a per-dtype fill.
Fill resolve(const Fill& f, DType t) {
  const bool fl = dtype_is_float(t);
  switch (f.kind) {
    case Fill::Default:
      if (fl) return uniform(-2, 2);
      if (t == DType::I8) return ints(-100, 100);
      if (t == DType::U8) return ints(0, 255);
      if (t == DType::Bool) return ints(0, 1);
      return ints(-1000, 1000);
    case Fill::Positive:
      return fl ? uniform(0.05, 4) : ints(1, 9);
    case Fill::Nonzero:
      if (fl) return uniform(-2, 2, 0.5);
      return t == DType::U8 ? ints(1, 20) : uniform(-9.4, 9.4, 1);
    case Fill::Small:
      if (t == DType::I8) return ints(-11, 11);
      if (t == DType::U8) return ints(0, 15);
      return resolve({}, t);
    default:
      return f;
  }
}

Tensor generate(const In& in, DType t, const std::vector<int64_t>& dims, uint64_t seed) {
  Tensor r = make_tensor(t, dims);
  Fill f = resolve(in.fill, t);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(f.lo, f.hi);
  std::uniform_int_distribution<int64_t> k(static_cast<int64_t>(f.lo), static_cast<int64_t>(f.hi));
  for (int64_t i = 0; i < r.numel(); ++i) {
    double v = 0;
    switch (f.kind) {
      case Fill::Uniform:
        v = u(rng);
        if (f.gap > 0 && std::abs(v) < f.gap) v = v < 0 ? v - f.gap : v + f.gap;
        break;
      case Fill::Ints:
        v = static_cast<double>(k(rng));
        break;
      case Fill::List:
        v = f.values.at(static_cast<size_t>(i) % f.values.size());
        break;
      default:  // Poison
        v = std::nan("");
        break;
    }
    put(r, i, v);
  }
  return r;
}

Tensor to_f64(const Tensor& t) {
  Tensor r = make_tensor(DType::F64, t.dims);
  for (int64_t i = 0; i < t.numel(); ++i) r.data<double>()[i] = t.real_at(i);
  return r;
}

// An output buffer before the launch: NaN with a payload for floats, 0xCD bytes otherwise.
Tensor poison(DType t, const std::vector<int64_t>& dims) {
  Tensor r = make_tensor(t, dims);
  if (!r.bytes.empty()) std::memset(r.bytes.data(), 0xCD, r.bytes.size());  // empty: no pointer
  for (int64_t i = 0; i < r.numel(); ++i) {
    if (t == DType::F32) r.data<uint32_t>()[i] = 0x7fcdcdcdu;
    if (t == DType::F64) r.data<uint64_t>()[i] = 0x7ffdcdcdcdcdcdcdull;
    if (t == DType::F16) r.data<uint16_t>()[i] = 0x7ecd;
    if (t == DType::BF16) r.data<uint16_t>()[i] = 0x7fcd;
  }
  return r;
}

std::string dims_str(const std::vector<int64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? "," : "") + std::to_string(d[i]);
  return s + "]";
}

// ---- building a case ----------------------------------------------------------------------------
struct OutSpec {
  DType dtype = DType::F32;
  std::vector<int64_t> dims;
  bool present = false;
  std::optional<Tensor> start;  // an in-place output's starting values (else it is poisoned)
};

// A case for one dtype: host inputs (forward node's and the case node's), the graph, the outputs.
struct Prepared {
  std::vector<Tensor> fwd_in, in;
  std::vector<bool> present;  // per input of the case node
  Graph g;                    // empty for optimizer steps (no graph)
  std::vector<OutSpec> out;
};

bool converts(const In& in, DType t) { return in.ref_f64.value_or(!in.dtype && t != DType::Bool); }

std::vector<int64_t> static_dims(const Value& v) {
  std::vector<int64_t> d;
  for (const Dim& x : v.shape) {
    CB_CHECK(x.is_static());
    d.push_back(x.value);
  }
  return d;
}

// Ops without infer() (the optimizer and SMA steps today) cannot be emitted: their cases give
// params and outputs explicitly and are launched without a graph. Once an op has infer(), its
// cases go through GraphBuilder (with `params` through emit_with when it has no parse()).
bool graphed(OpKind op) { return op_def(op).infer != nullptr; }

// Emits the forward node (if any) and the case's node from the prepared tensors.
void emit(OpKind op, const Case& c, Prepared& p) {
  p.g = Graph{};
  p.g.opset = kEmitOpset;
  p.g.ir_version = 8;
  GraphBuilder gb(p.g, "case");
  std::any fwd_params;
  if (c.fwd) {
    std::vector<ValueId> ids;
    for (size_t k = 0; k < c.fwd->in.size(); ++k)
      ids.push_back(c.fwd->in[k].absent ? kNoValue : gb.constant(p.fwd_in[k]));
    gb.emit(c.fwd->op, ids, c.fwd->attrs, c.fwd->outputs);
    fwd_params = p.g.nodes.back().params;
  }
  std::vector<ValueId> ids;
  for (size_t k = 0; k < c.in.size(); ++k)
    ids.push_back(p.present[k] ? gb.constant(p.in[k]) : kNoValue);
  std::string name(op_def(op).name);
  std::vector<ValueId> outs = c.fwd ? gb.emit_with(name, ids, fwd_params, c.outputs)
                              : c.params.has_value() ? gb.emit_with(name, ids, c.params, c.outputs)
                                                     : gb.emit(name, ids, c.attrs, c.outputs);
  for (size_t o : c.omit) gb.omit(outs.at(o));
  // Marks f32 nodes only: the f64 reference's copy stays exact.
  if (c.bf16) set_compute_precision(p.g, Precision::BF16);
  if (c.winograd) {  // the f32 case's Conv and ConvGrad are ones the pass takes (not the f64 copy)
    CAPTURE(c.name);
    const bool f32 = p.g.value(p.g.nodes.back().inputs.at(0)).dtype == DType::F32;
    CHECK(choose_conv_algorithms(p.g) == (f32 ? static_cast<int64_t>(p.g.nodes.size()) : 0));
  }
  p.out.clear();
  for (ValueId v : p.g.nodes.back().outputs) {
    OutSpec s;
    s.present = v != kNoValue;
    if (s.present) {
      s.dtype = p.g.value(v).dtype;
      s.dims = static_dims(p.g.value(v));
    }
    p.out.push_back(s);
  }
}

// Draws the inputs of `c` for dtype t and builds its graph.
Prepared prepare(OpKind op, const Case& c, DType t, uint64_t seed) {
  Prepared p;
  if (c.fwd)
    for (size_t k = 0; k < c.fwd->in.size(); ++k) {
      const In& in = c.fwd->in[k];
      p.fwd_in.push_back(generate(in, in.dtype.value_or(t), in.dims, seed * 7919 + 101 + k));
    }
  std::vector<std::vector<int64_t>> fwd_out;
  if (c.fwd) {  // the forward's output shapes, for inputs shaped like them
    Graph g;
    g.opset = kEmitOpset;
    g.ir_version = 8;
    GraphBuilder gb(g, "fwd");
    std::vector<ValueId> ids;
    for (size_t k = 0; k < c.fwd->in.size(); ++k)
      ids.push_back(c.fwd->in[k].absent ? kNoValue : gb.constant(p.fwd_in[k]));
    for (ValueId v : gb.emit(c.fwd->op, ids, c.fwd->attrs, c.fwd->outputs))
      fwd_out.push_back(static_dims(g.value(v)));
  }
  for (size_t k = 0; k < c.in.size(); ++k) {
    const In& in = c.in[k];
    p.present.push_back(!in.absent);
    if (in.absent) {
      p.in.emplace_back();
      continue;
    }
    if (in.fwd_in_shape >= 0) {
      const auto& d = p.fwd_in.at(static_cast<size_t>(in.fwd_in_shape)).dims;
      Tensor s = make_tensor(DType::I64, {static_cast<int64_t>(d.size())});
      for (size_t i = 0; i < d.size(); ++i) s.data<int64_t>()[i] = d[i];
      p.in.push_back(s);
      continue;
    }
    const auto& dims = in.fwd_out >= 0 ? fwd_out.at(static_cast<size_t>(in.fwd_out)) : in.dims;
    p.in.push_back(generate(in, in.dtype.value_or(t), dims, seed * 7919 + k));
  }
  if (!graphed(op)) {  // no graph: outputs as the case declares them
    for (size_t k = 0; k < c.outs.size(); ++k) {
      const In& o = c.outs[k];
      OutSpec s{o.dtype.value_or(t), o.dims, !o.absent, {}};
      if (o.start) s.start = generate(o, s.dtype, o.dims, seed * 7919 + 503 + k);
      p.out.push_back(s);
    }
  } else {
    emit(op, c, p);
  }
  return p;
}

// The reference's copy: inputs (and the forward's) converted to f64 where the case says so.
Prepared to_reference(OpKind op, const Case& c, DType t, const Prepared& p) {
  Prepared r;
  r.present = p.present;
  for (size_t k = 0; k < p.fwd_in.size(); ++k)
    r.fwd_in.push_back(converts(c.fwd->in[k], t) ? to_f64(p.fwd_in[k]) : p.fwd_in[k]);
  for (size_t k = 0; k < p.in.size(); ++k)
    r.in.push_back(p.present[k] && converts(c.in[k], t) ? to_f64(p.in[k]) : p.in[k]);
  if (!graphed(op)) {
    for (size_t k = 0; k < c.outs.size(); ++k) {
      const In& o = c.outs[k];
      const bool f64 = converts(o, t);
      OutSpec s{f64 ? DType::F64 : o.dtype.value_or(t), o.dims, !o.absent, {}};
      if (p.out[k].start) s.start = f64 ? to_f64(*p.out[k].start) : *p.out[k].start;
      r.out.push_back(s);
    }
  } else {
    emit(op, c, r);
  }
  return r;
}

// ---- running ------------------------------------------------------------------------------------
struct Outcome {
  std::vector<Tensor> out;  // outputs after the launch (absent: empty)
  std::vector<Tensor> in;   // inputs after the launch
  DType dispatched = DType::F32;
};

// Runs op on `dev`: inputs uploaded, outputs poisoned, one launch, everything downloaded.
Outcome run_on(Device& dev, OpKind op, const std::any* params, const Prepared& p, uint64_t seed) {
  std::vector<DeviceBuffer> bufs;
  KernelArgs a;
  a.params = params;
  a.seed = seed;
  for (size_t k = 0; k < p.in.size(); ++k) {
    if (!p.present[k]) {
      a.in.emplace_back();
      continue;
    }
    bufs.push_back(upload_new(dev, p.in[k].bytes.data(), p.in[k].bytes.size()));
    a.in.push_back({bufs.back().get(), p.in[k].dtype, p.in[k].dims});
  }
  for (const OutSpec& s : p.out) {
    if (!s.present) {
      a.out.emplace_back();
      continue;
    }
    Tensor z = s.start ? *s.start : poison(s.dtype, s.dims);
    bufs.push_back(upload_new(dev, z.bytes.data(), z.bytes.size()));
    a.out.push_back({bufs.back().get(), s.dtype, s.dims});
  }
  Outcome r;
  r.dispatched = kernel_dtype(a);
  launch_on(dev, op, a);
  auto fetch = [&](const std::vector<TensorView>& views, std::vector<Tensor>& to) {
    for (const TensorView& v : views) {
      to.emplace_back();
      if (!v.present()) continue;
      to.back() = make_tensor(v.dtype, v.dims);
      download_to(dev, to.back().bytes.data(), v.data, v.bytes());
    }
  };
  fetch(a.out, r.out);
  fetch(a.in, r.in);
  return r;
}

// ---- comparing ----------------------------------------------------------------------------------
struct Tol {
  double rtol = 0, atol = 0;
};
Tol tolerance(DType t, double scale) {
  double base = t == DType::F64    ? 1e-12
                : t == DType::F32  ? 1e-5
                : t == DType::F16  ? 1e-3
                : t == DType::BF16 ? 8e-3
                                   : 0;
  return {base * scale, base * scale};
}

// The value an integer output holds when it computes `v` exactly (wrapping as the dtype does).
int64_t wrap(double v, DType t) {
  auto i = static_cast<int64_t>(v);
  switch (t) {
    case DType::I32:
      return static_cast<int32_t>(i);
    case DType::I8:
      return static_cast<int8_t>(i);
    case DType::U8:
      return static_cast<uint8_t>(i);
    default:
      return i;
  }
}

bool is_poison(const Tensor& t, int64_t i) {
  size_t es = dtype_size(t.dtype);
  const auto* b = reinterpret_cast<const uint8_t*>(t.bytes.data()) + static_cast<size_t>(i) * es;
  for (size_t k = 0; k < es; ++k)
    if (b[k] != 0xCD) return false;
  return true;
}

// Mismatches of `got` against `want` (empty string: none), naming the first few.
std::string compare(const Tensor& got, const Tensor& want, double scale, bool trunc) {
  if (got.dims != want.dims) return "dims " + dims_str(got.dims) + " vs " + dims_str(want.dims);
  const DType t = got.dtype;
  const int64_t n = got.numel();
  double big = 1;
  for (int64_t i = 0; i < n; ++i)
    if (std::isfinite(want.real_at(i))) big = std::max(big, std::abs(want.real_at(i)));
  const Tol tol = tolerance(t, scale);
  int64_t bad = 0, poisoned = 0;
  double worst = 0;
  std::string first;
  for (int64_t i = 0; i < n; ++i) {
    double w = want.real_at(i), g = 0;
    bool ok = true, pois = false;
    if (t == DType::Bool) {
      uint8_t byte = got.data<uint8_t>()[i];
      pois = byte > 1;
      ok = !pois && (byte != 0) == (w != 0);
      g = byte;
    } else if (dtype_is_int(t)) {
      if (trunc) w = std::trunc(w);
      int64_t e = wrap(w, t);
      g = static_cast<double>(got.int_at(i));
      ok = got.int_at(i) == e;
      pois = !ok && is_poison(got, i);
      w = static_cast<double>(e);
    } else {
      g = got.real_at(i);
      if (std::isnan(g) || std::isnan(w)) {
        ok = std::isnan(g) && std::isnan(w);
        pois = std::isnan(g) && !std::isnan(w);
      } else if (std::isinf(g) || std::isinf(w)) {
        ok = g == w;
      } else {
        double err = std::abs(g - w);
        ok = err <= tol.atol * big + tol.rtol * std::abs(w);
        worst = std::max(worst, err / (tol.atol * big + tol.rtol * std::abs(w) + 1e-300));
      }
    }
    if (ok) continue;
    ++bad;
    poisoned += pois;
    if (bad <= 3) first += fmt::format(" [{}] got {} want {}{};", i, g, w, pois ? " (poison)" : "");
  }
  if (!bad) return "";
  return fmt::format(
      "{} of {} elements differ ({} still poisoned; worst in-range error {:.2g} x "
      "the tolerance):{}",
      bad, n, poisoned, worst, first);
}

// The dtype a launch of `p` dispatches on (kernel_dtype's rule).
DType dispatch_dtype(const Prepared& p) {
  for (size_t k = 0; k < p.in.size(); ++k)
    if (p.present[k]) return p.in[k].dtype;
  return p.out.at(0).dtype;
}

// ---- one case -----------------------------------------------------------------------------------
struct Devices {
  Device& dut;  // the device under test
  Device& ref;  // the CPU reference (f64 kernels)
};

// Runs case `c` for dtype t; returns "" when it agrees with the reference, else what differed.
std::string check_case(Devices d, OpKind op, const Case& c, DType t, uint64_t seed) {
  Prepared p = prepare(op, c, t, seed);
  const std::any* params = graphed(op) ? &p.g.nodes.back().params : &c.params;
  Outcome got = run_on(d.dut, op, params, p, c.seed);
  if (got.dispatched != t)
    return fmt::format("the case dispatches on {}, not {}", dtype_name(got.dispatched),
                       dtype_name(t));
  // The expected outputs.
  std::vector<Tensor> want_out;
  if (c.ref) {
    std::vector<Tensor> ref_in;
    for (size_t k = 0; k < p.in.size(); ++k)
      ref_in.push_back(p.present[k] ? to_f64(p.in[k]) : Tensor{});
    for (const OutSpec& s : p.out)
      want_out.push_back(!s.present ? Tensor{}
                         : s.start  ? to_f64(*s.start)
                                    : make_tensor(DType::F64, s.dims));
    c.ref(*params, ref_in, want_out);
  } else {
    Prepared r = to_reference(op, c, t, p);
    const std::any* rparams = graphed(op) ? &r.g.nodes.back().params : &c.params;
    const DType rt = dispatch_dtype(r);
    if (!d.ref.supports(op, rt))
      return fmt::format("no reference: the CPU has no {} kernel; give the case a RefFn",
                         dtype_name(rt));
    Outcome ro = run_on(d.ref, op, rparams, r, c.seed);
    want_out = std::move(ro.out);
  }
  std::string err;
  for (size_t o = 0; o < p.out.size(); ++o) {
    if (!p.out[o].present) continue;
    std::string e = compare(got.out[o], want_out[o], c.tol, c.trunc_ref);
    if (!e.empty()) err += fmt::format(" output {} {}: {}", o, dtype_name(p.out[o].dtype), e);
  }
  for (size_t k = 0; k < p.in.size(); ++k) {
    if (!p.present[k]) continue;
    if (got.in[k].bytes != p.in[k].bytes)
      err += fmt::format(" input {} was modified by the kernel (inputs are read only);", k);
  }
  return err;
}

std::string describe(OpKind op, DType t, const Case& c) {
  std::string s = fmt::format("{} {} '{}' inputs", op_def(op).name, dtype_name(t), c.name);
  for (const In& in : c.in)
    s += in.absent              ? " -"
         : in.fwd_out >= 0      ? " dY"
         : in.fwd_in_shape >= 0 ? " shape"
                                : " " + dims_str(in.dims);
  return s;
}

struct Tally {
  int pairs = 0, cases = 0, excluded = 0, failures = 0;
};

// CB_BACKEND_OPS=Add,Relu (environment) checks only those ops: for working on a few kernels. The
// floors below are then not checked.
bool op_selected(OpKind op) {
  const char* env = std::getenv("CB_BACKEND_OPS");
  if (!env || !*env) return true;
  const std::string list = std::string(",") + env + ",";
  return list.find("," + std::string(op_def(op).name) + ",") != std::string::npos;
}
bool all_ops_selected() {
  const char* env = std::getenv("CB_BACKEND_OPS");
  return !env || !*env;
}

// Every pair `dev` claims: its cases checked, or its exclusion noted, or a failure. With `only`
// non-empty, the pairs of those ops only.
Tally check_backend(Devices d, const char* name, std::vector<OpKind> only = {}) {
  Tally tally;
  for (size_t k = 0; k < static_cast<size_t>(OpKind::Count); ++k) {
    const auto op = static_cast<OpKind>(k);
    if (!op_selected(op)) continue;
    if (!only.empty() && std::find(only.begin(), only.end(), op) == only.end()) continue;
    CaseFn fn = nullptr;
    for (const OpCases& oc : case_table())
      if (oc.op == op) fn = oc.cases;
    for (DType t : kDTypes) {
      if (!d.dut.supports(op, t)) continue;
      bool excluded = false;
      for (const Exclusion& e : exclusions())
        for (DType x : e.dtypes) excluded |= e.op == op && x == t;
      if (excluded) {
        ++tally.excluded;
        continue;
      }
      std::vector<Case> cases = fn ? fn(op, t) : std::vector<Case>{};
      if (cases.empty()) {
        {
          ++tally.failures;
          FAIL_CHECK(
              fmt::format("backend {} claims ({}, {}) but the harness has no case for it: "
                          "add one in tests/backend_ops/ (or an exclusion with its "
                          "reason)",
                          name, op_def(op).name, dtype_name(t)));
        }
        continue;
      }
      ++tally.pairs;
      for (size_t i = 0; i < cases.size(); ++i) {
        std::string what = describe(op, t, cases[i]), err;
        try {
          err = check_case(d, op, cases[i], t, 1000 * k + i);
        } catch (const std::exception& e) {
          err = std::string(" threw: ") + e.what();
        }
        ++tally.cases;
        if (!err.empty()) {
          ++tally.failures;
          FAIL_CHECK(fmt::format("backend {}: {}:{}", name, what, err));
        }
      }
    }
  }
  return tally;
}

}  // namespace

TEST_CASE("backend ops: every (op, dtype) a backend claims agrees with the f64 CPU reference") {
  auto ref = make_cpu_device(1);
  for (const Backend& b : kBackends) {
    std::string name = b.name;
    CAPTURE(name);
    std::string why;
    std::unique_ptr<Device> dev = b.make(why);
    if (!dev) {
      MESSAGE(fmt::format("backend {}: skipped: {}", b.name, why));
      continue;
    }
    Tally t = check_backend({*dev, *ref}, b.name);
    MESSAGE(
        fmt::format("backend {}: {} (op, dtype) pairs, {} cases checked ({} pairs excluded, "
                    "{} failures)",
                    b.name, t.pairs, t.cases, t.excluded, t.failures));
    // Never vacuous: the CPU backend has all of these, and the CUDA backend all the CPU's.
    if ((std::string(b.name) == "cpu" || std::string(b.name) == "cuda-host") &&
        all_ops_selected()) {
      CHECK(t.pairs >= kMinPairs);
      CHECK(t.cases >= kMinCases);
    }
  }
}

// The deterministic paths of the CUDA kernels (CudaOptions::deterministic, cb-train
// --deterministic) on every case of the ops that have one, in both thread orders of the host-run
// build.
TEST_CASE("backend ops: the CUDA backend's deterministic paths agree with the f64 CPU reference") {
  auto ref = make_cpu_device(1);
  for (bool reverse : {false, true}) {
    CAPTURE(reverse);
    CudaOptions o;
    o.deterministic = true;
    o.host_run_reverse = reverse;
    auto dev = make_cuda_host_run_device(o);
    const Tally t = check_backend({*dev, *ref}, "cuda-host --deterministic",
                                  {OpKind::GatherGrad, OpKind::PadGrad, OpKind::ResizeGrad});
    if (all_ops_selected()) CHECK(t.cases > 0);
  }
}

// ---- the harness's own check: a device that skips or spoils its work is caught ------------------
namespace {
// Forwards to a CPU device; `mode` 1: launches nothing (the poison must survive), 2: spoils the
// first element of output 0 after the launch. (A Device subclass: adapt it with the interface.)
class FaultyDevice final : public Device {
 public:
  explicit FaultyDevice(int mode) : inner_(make_cpu_device(1)), mode_(mode) {}
  DeviceCaps caps() const override { return inner_->caps(); }
  void* allocate(size_t bytes) override { return inner_->allocate(bytes); }
  void release(void* p) noexcept override { inner_->release(p); }
  void upload(void* d, const void* s, size_t n, Stream st) override { inner_->upload(d, s, n, st); }
  void download(void* d, const void* s, size_t n, Stream st) override {
    inner_->download(d, s, n, st);
  }
  Stream create_stream(int slot, int slots) override { return inner_->create_stream(slot, slots); }
  void destroy_stream(Stream s) override { inner_->destroy_stream(s); }
  void synchronize(Stream s) override { inner_->synchronize(s); }
  Event record_event(Stream s) override { return inner_->record_event(s); }
  void wait_event(Stream s, Event e) override { inner_->wait_event(s, e); }
  bool supports(OpKind op, DType t) const override { return inner_->supports(op, t); }
  size_t workspace_bytes(OpKind op, const KernelArgs& a) const override {
    return inner_->workspace_bytes(op, a);
  }
  void launch(OpKind op, KernelArgs& args, Stream s) override {
    if (mode_ == 1) return;
    inner_->launch(op, args, s);
    const TensorView& y = args.out.at(0);
    if (y.numel() == 0) return;
    if (y.dtype == DType::F32) y.ptr<float>()[0] += 1e-2f * (1 + std::abs(y.ptr<float>()[0]));
    if (y.dtype == DType::I64) y.ptr<int64_t>()[0] += 1;
    if (y.dtype == DType::Bool) y.ptr<uint8_t>()[0] ^= 1;
  }

 private:
  std::unique_ptr<Device> inner_;
  int mode_;
};
}  // namespace

TEST_CASE("backend ops: the harness catches a kernel that skips or spoils its outputs") {
  auto ref = make_cpu_device(1);
  struct Probe {
    OpKind op;
    DType t;
  };
  for (int mode : {1, 2}) {
    CAPTURE(mode);
    FaultyDevice bad(mode);
    for (Probe pr : {Probe{OpKind::Add, DType::F32}, Probe{OpKind::Conv, DType::F32},
                     Probe{OpKind::Gather, DType::I64}, Probe{OpKind::Equal, DType::I64}}) {
      CAPTURE(op_def(pr.op).name);
      CaseFn fn = nullptr;
      for (const OpCases& oc : case_table())
        if (oc.op == pr.op) fn = oc.cases;
      REQUIRE(static_cast<bool>(fn));
      int caught = 0, nonempty = 0;
      for (const Case& c : fn(pr.op, pr.t)) {
        if (c.bf16) continue;  // bf16 products: a tolerance as wide as the 1% spoiling
        Prepared p = prepare(pr.op, c, pr.t, 1);
        int64_t n = 1;
        for (int64_t x : p.out[0].dims) n *= x;
        if (n == 0) continue;
        ++nonempty;
        caught += !check_case({bad, *ref}, pr.op, c, pr.t, 1).empty();
      }
      CHECK(nonempty > 0);
      CHECK(caught == nonempty);
    }
  }
}

// ---- the CUDA backend covers the CPU backend ----------------------------------------------------
TEST_CASE("backend ops: the CUDA backend has a kernel for every (op, dtype) the CPU backend runs") {
  auto cpu = make_cpu_device(1);
  auto host = make_cuda_host_run_device();
  std::vector<std::string> missing_host, missing_cuda;
  int pairs = 0;
  // Ops only graphs made for the CPU hold: fuse_attention_heads runs where MatMul reads its
  // operands through permutations (the CPU); a CUDA trainer's graphs keep the MatMul and
  // MaskedSoftmax nodes such a node joins, and the CUDA kernels for those.
  const std::vector<OpKind> cpu_only = {OpKind::AttentionHeads};
  for (const OpDef* def : all_ops())
    for (DType t : kDTypes) {
      if (!cpu->supports(def->kind, t)) continue;
      if (std::find(cpu_only.begin(), cpu_only.end(), def->kind) != cpu_only.end()) continue;
      ++pairs;
      const std::string pair = fmt::format("({}, {})", def->name, dtype_name(t));
      if (!host->supports(def->kind, t)) missing_host.push_back(pair);
      if (cuda_backend_built() && !cuda_kernel_exists(def->kind, t)) missing_cuda.push_back(pair);
    }
  auto join = [](const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v) s += " " + x;
    return s;
  };
  CHECK(pairs >= kMinPairs);
  CHECK_MESSAGE(missing_host.empty(), ("no host-run CUDA kernel for" + join(missing_host)));
  if (cuda_backend_built())
    CHECK_MESSAGE(missing_cuda.empty(), ("no CUDA kernel for" + join(missing_cuda)));
  else
    MESSAGE("the CUDA backend is not built here (no toolkit): its table is not checked");
}
