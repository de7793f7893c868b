// The library ops of the CUDA backend: Conv, ConvGrad, ConvTranspose through cuDNN's graph API,
// Gemm and MatMul through cuBLASLt, F32 and F64 (the CPU backend's masks), and F32 ops marked bf16
// (--precision bf16) on bf16 operands with f32 accumulation (library_bf16.h). nvcc build only (the
// host-run build runs these ops on the fallback kernels: library_host_run.cpp); the logic around
// the library calls (geometry, shifted input for asymmetric pads, bias, dB, Gemm's C, MatMul's
// batch decomposition, the fallback kernels) is kernels/cuda/library_ops.h, instantiated here with
// CudaLib. cuBLASLt's calls are in library_lt.cu.
//
// Nothing in this file has run on a GPU yet: it is compiled (-Werror, sm_90, with
// CUDNN_WARN_DEPRECATED, so no API cuDNN 9.19 marks deprecated is used), and the logic around the
// library calls runs in the host-run build against the CPU backend (library_host_run.cpp). The
// op harness with backend "cuda" (CB_BACKEND_OPS=Conv,ConvGrad,ConvTranspose,Gemm,MatMul) is its
// first check on a GPU (it gives each launch the workspace the device asks for, as the executor
// does).
//
// cuDNN (graph/backend API, no handle in any descriptor: heuristics get the device through a
// DEVICEPROP descriptor, cudnnBackendExecute gets the learner's handle):
//   - one operation graph per (device, direction, shapes, pads, strides, dilations, groups,
//     dtype, TF32 allowed, tensor alignments): a ConvEntry in a process-wide map under a mutex;
//     its plans are built once, on first use (the workspace query or the first launch), from
//     heuristics mode A then FALLBACK, filtered by numerical notes: never DOWN_CONVERT_INPUTS or
//     REDUCED_PRECISION_REDUCTION; for F32 without GpuCtx::allow_tf32 no TENSOR_CORE (TF32)
//     engine. Two passes: the first takes only deterministic engines that are neither
//     runtime-compiled (NVRTC: seconds to minutes per plan) nor FFT/Winograd (their rounding
//     errors come near the op harness's f32 tolerance); the second, only when the first found
//     nothing, any other allowed engine (at most kMaxRtcBuilds runtime-compiled ones), but never
//     a NONDETERMINISTIC one with GpuCtx::deterministic (cb-train --deterministic). At most
//     kMaxPlanBuilds plans are finalized: the first that fits the workspace budget
//     (kConvWorkspaceBudget) and, when it needs workspace, a leaner one for a smaller workspace.
//     A build that takes kSlowBuildSeconds or more is logged on stderr with its time and the
//     total so far.
//   - the workspace function returns the preferred plan's bytes (+ the shifted-input scratch); a
//     launch runs the first kept plan that fits the workspace it was given, else the direct
//     kernels (a one-line note on stderr, once per problem and reason). With CB_CUDA_STRICT=1 in
//     the environment a declined convolution is a cb::Error instead (tools/gpu/check.sh uses it
//     so that a slow path cannot hide). An entry's mutex also serializes
//     cudnnBackendExecute on its plans (the host enqueue only), so learner threads can share them.
// cuBLASLt: library_lt.cu.
// Refused (cb::Error, as the CPU kernels and infer() refuse them): other dtypes than F32/F64
// (unsupported_dtype), convolutions outside 1 to 3 spatial dims or with window attributes that do
// not match them, channels not divisible by the groups, Gemm operands not 2-D, MatMul inner or
// batch dims that do not match.
#define CUDNN_WARN_DEPRECATED 1  // a deprecated cuDNN API used here fails the -Werror build
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/launch.h"
#include "kernels/cuda/library_cuda.h"
#include "kernels/cuda/library_ops.h"
#include "runtime/error.h"

namespace cb::CB_GPU_NS {

namespace {

using namespace cudalib;
using lib::ConvDir;
using lib::ConvShape;
using lib::LtProblem;

constexpr size_t kConvWorkspaceBudget = size_t{256} << 20;
constexpr int kMaxPlanBuilds = 12;
constexpr int kMaxRtcBuilds = 2;  // runtime-compiled plans, second pass only
constexpr double kSlowBuildSeconds = 0.25;
constexpr int64_t kMaxEngineConfigs = 32;  // per heuristics mode

// ---- cuDNN backend descriptors ------------------------------------------------------------------
std::string dnn_status(cudnnStatus_t st) {
  std::string s = cudnnGetErrorString(st);
  char detail[1024] = {};
  cudnnGetLastErrorString(detail, sizeof detail);
  if (detail[0] != 0) s += std::string(" (") + detail + ")";
  return s;
}

#define CB_DNN_ATTR(name) name, #name

// One cuDNN backend descriptor, destroyed with its owner. Setting an attribute or finalizing
// throws cb::Error naming the descriptor, the attribute and `what` (the problem), except through
// try_finalize, whose status the caller judges.
class Desc {
 public:
  Desc() = default;
  Desc(cudnnBackendDescriptorType_t type, const char* name, const std::string& what) : name_(name) {
    const cudnnStatus_t st = cudnnBackendCreateDescriptor(type, &d_);
    if (st != CUDNN_STATUS_SUCCESS) {
      d_ = nullptr;
      fail("cuDNN: cudnnBackendCreateDescriptor({}) failed for {}: {}", name, what, dnn_status(st));
    }
  }
  ~Desc() { reset(); }
  Desc(Desc&& o) noexcept : d_(std::exchange(o.d_, nullptr)), name_(o.name_) {}
  Desc& operator=(Desc&& o) noexcept {
    if (this != &o) {
      reset();
      d_ = std::exchange(o.d_, nullptr);
      name_ = o.name_;
    }
    return *this;
  }
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;

  cudnnBackendDescriptor_t get() const { return d_; }

  void set(cudnnBackendAttributeName_t attr, const char* attr_name,
           cudnnBackendAttributeType_t type, int64_t count, const void* values,
           const std::string& what) {
    const cudnnStatus_t st = cudnnBackendSetAttribute(d_, attr, type, count, values);
    if (st != CUDNN_STATUS_SUCCESS)
      fail("cuDNN: cudnnBackendSetAttribute({}, {}) failed for {}: {}", name_, attr_name, what,
           dnn_status(st));
  }
  void set_desc(cudnnBackendAttributeName_t attr, const char* attr_name, cudnnBackendDescriptor_t v,
                const std::string& what) {
    set(attr, attr_name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &v, what);
  }
  cudnnStatus_t try_finalize() { return cudnnBackendFinalize(d_); }
  void finalize(const std::string& what) {
    const cudnnStatus_t st = cudnnBackendFinalize(d_);
    if (st != CUDNN_STATUS_SUCCESS)
      fail("cuDNN: cudnnBackendFinalize({}) failed for {}: {}", name_, what, dnn_status(st));
  }

 private:
  void reset() {
    if (d_) cudnnBackendDestroyDescriptor(d_);
    d_ = nullptr;
  }
  cudnnBackendDescriptor_t d_ = nullptr;
  const char* name_ = "";
};

#define CB_DNN_DESC(type) type, #type

// The device-properties descriptor of `device` (heuristics read the GPU from it), or null where
// this cuDNN cannot make one (the heuristics then use the current device). Kept for the process.
cudnnBackendDescriptor_t device_prop(int device, std::string* why) {
  static std::mutex mu;
  static auto* props = new std::map<int, std::unique_ptr<Desc>>;  // never destroyed (exit order)
  std::lock_guard<std::mutex> lock(mu);
  auto it = props->find(device);
  if (it != props->end()) return it->second ? it->second->get() : nullptr;
  std::unique_ptr<Desc> d;
  try {
    const std::string what = "device " + std::to_string(device);
    d = std::make_unique<Desc>(CB_DNN_DESC(CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR), what);
    const int32_t id = device;
    d->set(CB_DNN_ATTR(CUDNN_ATTR_DEVICEPROP_DEVICE_ID), CUDNN_TYPE_INT32, 1, &id, what);
    d->finalize(what);
  } catch (const Error& e) {
    if (why) *why += std::string(" [no device properties: ") + e.what() + "]";
    d.reset();
  }
  cudnnBackendDescriptor_t r = d ? d->get() : nullptr;
  (*props)[device] = std::move(d);
  return r;
}

// ---- convolution plans --------------------------------------------------------------------------
using ConvKey = std::array<int64_t, 40>;

struct ConvPlan {
  Desc plan;
  int64_t ws = 0;
};

struct ConvEntry {
  std::mutex mu;  // held while the plans are built and around every execution of them
  bool built = false;
  std::string what;                           // the problem, for messages
  std::vector<ConvPlan> plans;                // preferred first; later ones need less workspace
  std::string why_none;                       // when there is no plan: what the attempts said
  bool noted_none = false, noted_ws = false;  // its decline was logged (once per reason)
};

// CB_CUDA_STRICT=1: a convolution cuDNN declines is an error, not a slower path.
bool strict_mode() {
  static const bool on = [] {
    const char* v = std::getenv("CB_CUDA_STRICT");
    return v && std::string(v) == "1";
  }();
  return on;
}

// A convolution leaves cuDNN: an error in strict mode, else one line per problem and reason.
void declined(bool& noted, const std::string& msg) {
  if (strict_mode())
    fail(
        "{} (CB_CUDA_STRICT=1 makes a declined convolution an error; unset it to run the "
        "direct kernels)",
        msg);
  if (!noted)
    std::fprintf(stderr, "crossbow: %s; the direct convolution kernels run it (slower)\n",
                 msg.c_str());
  noted = true;
}

int64_t nsd_of(const ConvShape& g) { return g.nsp < 2 ? 2 : g.nsp; }

ConvKey conv_key(const GpuCtx& c, ConvDir dir, const ConvShape& g, DType t,
                 const std::array<int64_t, 3>& align) {
  ConvKey k{};
  size_t i = 0;
  k[i++] = c.device;
  k[i++] = static_cast<int64_t>(t);
  k[i++] = static_cast<int64_t>(dir);
  k[i++] = c.allow_tf32 ? 1 : 0;
  k[i++] = c.deterministic ? 1 : 0;
  k[i++] = nsd_of(g);
  k[i++] = g.n;
  k[i++] = g.c;
  k[i++] = g.m;
  k[i++] = g.groups;
  for (int j = 0; j < 3; ++j) {
    k[i++] = g.in[j];
    k[i++] = g.out[j];
    k[i++] = g.k[j];
    k[i++] = g.s[j];
    k[i++] = g.d[j];
    k[i++] = g.p[j];  // == g.pe[j]: symmetric
  }
  for (int64_t a : align) k[i++] = a;
  return k;
}

// The operation graph of one convolution: X (uid 1), W (uid 2), Y (uid 3) and the operation.
struct ConvGraph {
  Desc x, w, y, conv, op, graph;
};

// Builds the graph; false (with `why`) when cuDNN refuses to finalize a part of it.
bool make_conv_graph(ConvGraph& G, ConvDir dir, const ConvShape& g, DType t,
                     const std::array<int64_t, 3>& align, const std::string& what,
                     std::string* why) {
  // BF16: bf16 tensors, f32 compute (library_bf16.h).
  const cudnnDataType_t dt = t == DType::F64    ? CUDNN_DATA_DOUBLE
                             : t == DType::BF16 ? CUDNN_DATA_BFLOAT16
                                                : CUDNN_DATA_FLOAT;
  const cudnnDataType_t ct = t == DType::F64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  const int64_t nsd = nsd_of(g);
  auto tensor = [&](Desc& d, int64_t uid, int64_t d0, int64_t d1, const int64_t* sp, int64_t al) {
    std::vector<int64_t> dims{d0, d1};
    for (int64_t j = 3 - nsd; j < 3; ++j) dims.push_back(sp[j]);
    std::vector<int64_t> strides(dims.size());
    int64_t st = 1;
    for (size_t j = dims.size(); j-- > 0;) {
      strides[j] = st;
      st *= dims[j];
    }
    const auto n = static_cast<int64_t>(dims.size());
    d = Desc(CB_DNN_DESC(CUDNN_BACKEND_TENSOR_DESCRIPTOR), what);
    d.set(CB_DNN_ATTR(CUDNN_ATTR_TENSOR_DATA_TYPE), CUDNN_TYPE_DATA_TYPE, 1, &dt, what);
    d.set(CB_DNN_ATTR(CUDNN_ATTR_TENSOR_DIMENSIONS), CUDNN_TYPE_INT64, n, dims.data(), what);
    d.set(CB_DNN_ATTR(CUDNN_ATTR_TENSOR_STRIDES), CUDNN_TYPE_INT64, n, strides.data(), what);
    d.set(CB_DNN_ATTR(CUDNN_ATTR_TENSOR_UNIQUE_ID), CUDNN_TYPE_INT64, 1, &uid, what);
    d.set(CB_DNN_ATTR(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT), CUDNN_TYPE_INT64, 1, &al, what);
    const cudnnStatus_t st2 = d.try_finalize();
    if (st2 != CUDNN_STATUS_SUCCESS) {
      *why += " [tensor " + std::to_string(uid) + ": " + dnn_status(st2) + "]";
      return false;
    }
    return true;
  };
  if (!tensor(G.x, 1, g.n, g.c, g.in, align[0]) || !tensor(G.w, 2, g.m, g.cg, g.k, align[1]) ||
      !tensor(G.y, 3, g.n, g.m, g.out, align[2]))
    return false;

  std::vector<int64_t> pads, strides, dilations;
  for (int64_t j = 3 - nsd; j < 3; ++j) {
    pads.push_back(g.p[j]);
    strides.push_back(g.s[j]);
    dilations.push_back(g.d[j]);
  }
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  G.conv = Desc(CB_DNN_DESC(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR), what);
  G.conv.set(CB_DNN_ATTR(CUDNN_ATTR_CONVOLUTION_COMP_TYPE), CUDNN_TYPE_DATA_TYPE, 1, &ct, what);
  G.conv.set(CB_DNN_ATTR(CUDNN_ATTR_CONVOLUTION_CONV_MODE), CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode,
             what);
  G.conv.set(CB_DNN_ATTR(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS), CUDNN_TYPE_INT64, 1, &nsd, what);
  G.conv.set(CB_DNN_ATTR(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS), CUDNN_TYPE_INT64, nsd, pads.data(),
             what);
  G.conv.set(CB_DNN_ATTR(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS), CUDNN_TYPE_INT64, nsd, pads.data(),
             what);
  G.conv.set(CB_DNN_ATTR(CUDNN_ATTR_CONVOLUTION_DILATIONS), CUDNN_TYPE_INT64, nsd, dilations.data(),
             what);
  G.conv.set(CB_DNN_ATTR(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES), CUDNN_TYPE_INT64, nsd,
             strides.data(), what);
  cudnnStatus_t st = G.conv.try_finalize();
  if (st != CUDNN_STATUS_SUCCESS) {
    *why += " [convolution descriptor: " + dnn_status(st) + "]";
    return false;
  }

  // alpha 1, beta 0 (outputs are assigned), of the compute type.
  const float fa = 1, fb = 0;
  const double da = 1, db = 0;
  const cudnnBackendAttributeType_t ab = t == DType::F64 ? CUDNN_TYPE_DOUBLE : CUDNN_TYPE_FLOAT;
  const void* alpha = t == DType::F64 ? static_cast<const void*>(&da) : &fa;
  const void* beta = t == DType::F64 ? static_cast<const void*>(&db) : &fb;
  switch (dir) {
    case ConvDir::Fwd:
      G.op = Desc(CB_DNN_DESC(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR), what);
      G.op.set_desc(CB_DNN_ATTR(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X), G.x.get(), what);
      G.op.set_desc(CB_DNN_ATTR(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W), G.w.get(), what);
      G.op.set_desc(CB_DNN_ATTR(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y), G.y.get(), what);
      G.op.set_desc(CB_DNN_ATTR(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC), G.conv.get(),
                    what);
      G.op.set(CB_DNN_ATTR(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA), ab, 1, alpha, what);
      G.op.set(CB_DNN_ATTR(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA), ab, 1, beta, what);
      break;
    case ConvDir::BwdData:
      G.op = Desc(CB_DNN_DESC(CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR), what);
      G.op.set_desc(CB_DNN_ATTR(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX), G.x.get(), what);
      G.op.set_desc(CB_DNN_ATTR(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W), G.w.get(), what);
      G.op.set_desc(CB_DNN_ATTR(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY), G.y.get(), what);
      G.op.set_desc(CB_DNN_ATTR(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC), G.conv.get(),
                    what);
      G.op.set(CB_DNN_ATTR(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA), ab, 1, alpha, what);
      G.op.set(CB_DNN_ATTR(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA), ab, 1, beta, what);
      break;
    case ConvDir::BwdFilter:
      G.op =
          Desc(CB_DNN_DESC(CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR), what);
      G.op.set_desc(CB_DNN_ATTR(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X), G.x.get(), what);
      G.op.set_desc(CB_DNN_ATTR(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW), G.w.get(), what);
      G.op.set_desc(CB_DNN_ATTR(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY), G.y.get(), what);
      G.op.set_desc(CB_DNN_ATTR(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC),
                    G.conv.get(), what);
      G.op.set(CB_DNN_ATTR(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA), ab, 1, alpha, what);
      G.op.set(CB_DNN_ATTR(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA), ab, 1, beta, what);
      break;
  }
  st = G.op.try_finalize();
  if (st != CUDNN_STATUS_SUCCESS) {
    *why += std::string(" [operation: ") + dnn_status(st) + "]";
    return false;
  }
  G.graph = Desc(CB_DNN_DESC(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR), what);
  cudnnBackendDescriptor_t op = G.op.get();
  G.graph.set(CB_DNN_ATTR(CUDNN_ATTR_OPERATIONGRAPH_OPS), CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op,
              what);
  st = G.graph.try_finalize();
  if (st != CUDNN_STATUS_SUCCESS) {
    *why += std::string(" [operation graph: ") + dnn_status(st) + "]";
    return false;
  }
  return true;
}

// The engine configurations heuristics `mode` proposes for `graph`, best first.
std::vector<Desc> engine_configs(const ConvGraph& G, cudnnBackendHeurMode_t mode,
                                 cudnnBackendDescriptor_t prop, const std::string& what,
                                 std::string* why) {
  const char* mode_name = mode == CUDNN_HEUR_MODE_A ? "heuristics mode A" : "heuristics fallback";
  Desc h(CB_DNN_DESC(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR), what);
  h.set_desc(CB_DNN_ATTR(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH), G.graph.get(), what);
  h.set(CB_DNN_ATTR(CUDNN_ATTR_ENGINEHEUR_MODE), CUDNN_TYPE_HEUR_MODE, 1, &mode, what);
  if (prop) h.set_desc(CB_DNN_ATTR(CUDNN_ATTR_ENGINEHEUR_DEVICEPROP), prop, what);
  cudnnStatus_t st = h.try_finalize();
  if (st != CUDNN_STATUS_SUCCESS) {
    *why += std::string(" [") + mode_name + ": " + dnn_status(st) + "]";
    return {};
  }
  int64_t count = 0;
  st = cudnnBackendGetAttribute(h.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr);
  if (st != CUDNN_STATUS_SUCCESS) {
    *why += std::string(" [") + mode_name + " result count: " + dnn_status(st) + "]";
    return {};
  }
  count = std::min(count, kMaxEngineConfigs);
  if (count <= 0) {
    *why += std::string(" [") + mode_name + ": no engine]";
    return {};
  }
  std::vector<Desc> cfgs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < count; ++i) {
    cfgs.emplace_back(CB_DNN_DESC(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR), what);
    raw.push_back(cfgs.back().get());
  }
  int64_t got = 0;
  st = cudnnBackendGetAttribute(h.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, raw.data());
  if (st != CUDNN_STATUS_SUCCESS) {
    *why += std::string(" [") + mode_name + " results: " + dnn_status(st) + "]";
    return {};
  }
  if (got < count) cfgs.erase(cfgs.begin() + std::max<int64_t>(got, 0), cfgs.end());
  return cfgs;
}

// Whether the engine of `cfg` may run this problem. Nondeterministic, FFT and Winograd engines
// only in the second pass (`relaxed`), nondeterministic ones never when `deterministic`; `*rtc`
// says whether it is compiled at run time (the first pass skips those).
bool engine_allowed(cudnnBackendDescriptor_t cfg, DType t, bool allow_tf32, bool deterministic,
                    bool relaxed, const std::string& what, bool* rtc) {
  Desc engine(CB_DNN_DESC(CUDNN_BACKEND_ENGINE_DESCRIPTOR), what);
  cudnnBackendDescriptor_t e = engine.get();
  int64_t n = 0;
  if (cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                               &n, &e) != CUDNN_STATUS_SUCCESS)
    return false;
  *rtc = false;
  cudnnBackendBehaviorNote_t behavior[CUDNN_BEHAVIOR_NOTE_TYPE_COUNT];
  n = 0;
  if (cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                               CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, &n,
                               behavior) == CUDNN_STATUS_SUCCESS) {
    n = std::min<int64_t>(n, CUDNN_BEHAVIOR_NOTE_TYPE_COUNT);
    for (int64_t i = 0; i < n; ++i)
      if (behavior[i] == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION) *rtc = true;
  }
  if (*rtc && !relaxed) return false;
  cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  n = 0;
  if (cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                               CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n, notes) != CUDNN_STATUS_SUCCESS)
    return false;
  n = std::min<int64_t>(n, CUDNN_NUMERICAL_NOTE_TYPE_COUNT);
  for (int64_t i = 0; i < n; ++i) {
    switch (notes[i]) {
      case CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS:
      case CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION:
        return false;
      case CUDNN_NUMERICAL_NOTE_TENSOR_CORE:  // TF32 for f32 data; f64 tensor cores are exact
        if (t == DType::F32 && !allow_tf32) return false;
        break;
      case CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC:
        if (deterministic || !relaxed) return false;
        break;
      case CUDNN_NUMERICAL_NOTE_FFT:
      case CUDNN_NUMERICAL_NOTE_WINOGRAD:
      case CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_4x4:
      case CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_6x6:
      case CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_13x13:
        if (!relaxed) return false;
        break;
      default:
        break;
    }
  }
  return true;
}

// Heuristics, filters, plans: fills e.plans (may stay empty, with e.why_none).
void build_conv_plans(ConvEntry& e, const GpuCtx& c, ConvDir dir, const ConvShape& g, DType t,
                      const std::array<int64_t, 3>& align) {
  const std::string& what = e.what;
  ConvGraph G;
  if (!make_conv_graph(G, dir, g, t, align, what, &e.why_none)) return;
  cudnnBackendDescriptor_t prop = device_prop(c.device, &e.why_none);
  std::vector<Desc> cfgs = engine_configs(G, CUDNN_HEUR_MODE_A, prop, what, &e.why_none);
  for (Desc& d : engine_configs(G, CUDNN_HEUR_MODE_FALLBACK, prop, what, &e.why_none))
    cfgs.push_back(std::move(d));
  int builds = 0, rtc_builds = 0;
  for (int pass = 0; pass < 2 && e.plans.empty(); ++pass) {
    for (const Desc& cfg : cfgs) {
      if (builds >= kMaxPlanBuilds) break;
      bool rtc = false;
      if (!engine_allowed(cfg.get(), t, c.allow_tf32, c.deterministic, pass == 1, what, &rtc))
        continue;
      if (rtc && rtc_builds >= kMaxRtcBuilds) continue;
      // The config's workspace, where cuDNN tells it before a plan is built.
      int64_t cfg_ws = -1, n = 0;
      if (cudnnBackendGetAttribute(cfg.get(), CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE, CUDNN_TYPE_INT64,
                                   1, &n, &cfg_ws) != CUDNN_STATUS_SUCCESS)
        cfg_ws = -1;
      if (cfg_ws > static_cast<int64_t>(kConvWorkspaceBudget)) continue;
      // With a plan in hand, only a leaner one is of use.
      if (!e.plans.empty() && cfg_ws >= 0 && cfg_ws >= e.plans.back().ws) continue;
      ++builds;
      rtc_builds += rtc ? 1 : 0;
      ConvPlan p;
      p.plan = Desc(CB_DNN_DESC(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR), what);
      p.plan.set_desc(CB_DNN_ATTR(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG), cfg.get(), what);
      const cudnnStatus_t st = p.plan.try_finalize();
      if (st != CUDNN_STATUS_SUCCESS) {
        if (e.why_none.size() < 2000) e.why_none += " [plan: " + dnn_status(st) + "]";
        continue;
      }
      if (cudnnBackendGetAttribute(p.plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                   CUDNN_TYPE_INT64, 1, &n, &p.ws) != CUDNN_STATUS_SUCCESS ||
          p.ws < 0 || p.ws > static_cast<int64_t>(kConvWorkspaceBudget))
        continue;
      if (!e.plans.empty() && p.ws >= e.plans.back().ws) continue;
      e.plans.push_back(std::move(p));
      if (e.plans.back().ws == 0) break;  // nothing leaner to look for
    }
  }
}

// Plan building so far (all problems), for the slow-build lines.
std::atomic<int64_t> g_build_us{0}, g_build_problems{0};

// The built entry of a problem (its mutex not held on return).
std::shared_ptr<ConvEntry> conv_entry(const GpuCtx& c, ConvDir dir, const ConvShape& g, DType t,
                                      const std::array<int64_t, 3>& align) {
  static std::mutex mu;
  static auto* cache = new std::map<ConvKey, std::shared_ptr<ConvEntry>>;  // never destroyed
  std::shared_ptr<ConvEntry> e;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto& slot = (*cache)[conv_key(c, dir, g, t, align)];
    if (!slot) slot = std::make_shared<ConvEntry>();
    e = slot;
  }
  std::lock_guard<std::mutex> lock(e->mu);
  if (!e->built) {
    e->what = std::string("convolution ") + lib::dir_name(dir) + " " + dtype_str(t) + " " +
              lib::describe(g) + " on cuda:" + std::to_string(c.device);
    e->plans.clear();
    e->why_none.clear();
    const auto t0 = std::chrono::steady_clock::now();
    build_conv_plans(*e, c, dir, g, t, align);
    e->built = true;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const int64_t total = g_build_us += static_cast<int64_t>(s * 1e6);
    const int64_t problems = ++g_build_problems;
    if (s >= kSlowBuildSeconds)
      std::fprintf(stderr,
                   "crossbow: cuDNN plans for %s: %zu kept, built in %.2f s (all convolutions so "
                   "far: %.1f s over %lld problems)\n",
                   e->what.c_str(), e->plans.size(), s, static_cast<double>(total) * 1e-6,
                   static_cast<long long>(problems));
  }
  return e;
}

constexpr int64_t kDnnAlignCap = 16;

// ---- the library, for library_ops.h ------------------------------------------------------------
struct CudaLib {
  static size_t conv_workspace(const GpuCtx& c, ConvDir dir, const ConvShape& g, DType t,
                               const void* x, const void* w, const void* y) {
    const std::array<int64_t, 3> align{ptr_align(x, kDnnAlignCap), ptr_align(w, kDnnAlignCap),
                                       ptr_align(y, kDnnAlignCap)};
    const std::shared_ptr<ConvEntry> e = conv_entry(c, dir, g, t, align);
    std::lock_guard<std::mutex> lock(e->mu);
    return e->plans.empty() ? 0 : ws_request(static_cast<size_t>(e->plans.front().ws));
  }

  static bool conv(const GpuCtx& c, ConvDir dir, const ConvShape& g, DType t, void* x, void* w,
                   void* y, void* ws, size_t ws_bytes) {
    const std::array<int64_t, 3> align{ptr_align(x, kDnnAlignCap), ptr_align(w, kDnnAlignCap),
                                       ptr_align(y, kDnnAlignCap)};
    const std::shared_ptr<ConvEntry> e = conv_entry(c, dir, g, t, align);
    size_t left = 0;
    void* wsa = align_ws(ws, ws_bytes, &left);
    std::lock_guard<std::mutex> lock(e->mu);
    if (e->plans.empty()) {
      declined(e->noted_none, "cuDNN has no usable engine for " + e->what + ":" + e->why_none);
      return false;
    }
    for (const ConvPlan& p : e->plans) {
      if (static_cast<size_t>(p.ws) > left) continue;
      Desc vp(CB_DNN_DESC(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR), e->what);
      void* ptrs[3] = {x, w, y};
      const int64_t uids[3] = {1, 2, 3};
      void* wp = p.ws > 0 ? wsa : nullptr;
      vp.set(CB_DNN_ATTR(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS), CUDNN_TYPE_VOID_PTR, 3, ptrs,
             e->what);
      vp.set(CB_DNN_ATTR(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS), CUDNN_TYPE_INT64, 3, uids, e->what);
      vp.set(CB_DNN_ATTR(CUDNN_ATTR_VARIANT_PACK_WORKSPACE), CUDNN_TYPE_VOID_PTR, 1, &wp, e->what);
      vp.finalize(e->what);
      const cudnnStatus_t st =
          cudnnBackendExecute(static_cast<cudnnHandle_t>(c.dnn), p.plan.get(), vp.get());
      if (st != CUDNN_STATUS_SUCCESS)
        fail("cuDNN: cudnnBackendExecute failed for {}: {}", e->what, dnn_status(st));
      return true;
    }
    declined(e->noted_ws, "the workspace (" + std::to_string(left) +
                              " bytes) is too small for every cuDNN plan of " + e->what +
                              " (the leanest needs " + std::to_string(e->plans.back().ws) + ")");
    return false;
  }

  static size_t gemm_workspace(const GpuCtx& c, const LtProblem& p, DType t, const void* A,
                               const void* B, const void* D) {
    return lt_gemm_workspace(c, p, t, A, B, D);
  }

  static bool gemm(const GpuCtx& c, const LtProblem& p, DType t, double alpha, double beta,
                   const void* A, const void* B, void* D, void* ws, size_t ws_bytes) {
    return lt_gemm(c, p, t, alpha, beta, A, B, D, ws, ws_bytes);
  }
};

using LibOps = lib::Ops<CudaLib>;

constexpr GpuKernel kKernels[] = {
    {OpKind::Conv, &LibOps::Conv, kFloat, &LibOps::ConvWs},
    {OpKind::ConvGrad, &LibOps::ConvGrad, kFloat, &LibOps::ConvGradWs},
    {OpKind::ConvTranspose, &LibOps::ConvTranspose, kFloat, &LibOps::ConvTransposeWs},
    {OpKind::Gemm, &LibOps::Gemm, kFloat, &LibOps::GemmWs},
    {OpKind::MatMul, &LibOps::MatMul, kFloat, &LibOps::MatMulWs},
};

}  // namespace

std::span<const GpuKernel> library_kernels() { return kKernels; }

}  // namespace cb::CB_GPU_NS
