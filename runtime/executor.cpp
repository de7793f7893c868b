#include "runtime/executor.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>

#include "runtime/error.h"

namespace cb {

namespace {
// CB_PROFILE=1 in the environment: every launch is timed (the stream synchronised after each
// node, so on CUDA the times are the kernels' own but the run is slower) and the totals per op,
// over all executors and streams of the process, are printed to stderr at exit, largest first.
// CB_PROFILE=shapes: totals per op and input shapes instead ("h": an input stored as bf16).
class OpProfile {
 public:
  static OpProfile* get() {
    static OpProfile* p = std::getenv("CB_PROFILE") ? new OpProfile : nullptr;
    return p;
  }
  static bool by_shapes() {
    static const bool s = get() && std::string_view(std::getenv("CB_PROFILE")) == "shapes";
    return s;
  }
  // The key a launch is totalled under: the op, and with by_shapes() its inputs' shapes.
  static std::string key(std::string_view op, const KernelArgs& args) {
    std::string k(op);
    if (!by_shapes()) return k;
    for (const TensorView& t : args.in) {
      k += ' ';
      for (size_t d = 0; d < t.dims.size(); ++d) k += (d ? "x" : "") + std::to_string(t.dims[d]);
      if (t.dims.empty()) k += "()";
      if (t.bf16_storage) k += 'h';
    }
    return k;
  }
  void add(std::string_view op, double seconds) {
    std::lock_guard<std::mutex> lock(mu_);
    auto& [t, n] = totals_[std::string(op)];
    t += seconds;
    ++n;
  }

 private:
  OpProfile() {
    std::atexit([] { get()->print(); });
  }
  void print() {
    std::lock_guard<std::mutex> lock(mu_);
    double all = 0;
    std::vector<std::pair<double, std::string>> rows;
    for (const auto& [op, tn] : totals_) {
      all += tn.first;
      rows.emplace_back(tn.first, op);
    }
    std::sort(rows.rbegin(), rows.rend());
    std::fprintf(stderr, "CB_PROFILE: %.3f s in kernels\n%-28s %10s %7s %10s\n", all, "op",
                 "seconds", "share", "launches");
    for (const auto& [t, op] : rows) {
      const auto launches = static_cast<long long>(totals_[op].second);
      if (by_shapes())  // the key is long: last
        std::fprintf(stderr, "%10.3f %6.1f%% %10lld  %s\n", t, 100 * t / all, launches, op.c_str());
      else
        std::fprintf(stderr, "%-28s %10.3f %6.1f%% %10lld\n", op.c_str(), t, 100 * t / all,
                     launches);
    }
  }
  std::mutex mu_;
  std::map<std::string, std::pair<double, int64_t>> totals_;
};

// The dtype a kernel is selected by (as kernel_dtype() in runtime/kernel_args.h).
DType node_kernel_dtype(const Graph& g, const Node& n) {
  for (ValueId i : n.inputs)
    if (i != kNoValue) return g.value(i).dtype;
  return g.value(n.outputs.at(0)).dtype;
}

// Integer contents known in terms of N, written out for this batch size.
Tensor materialize_known(const Value& v, int64_t batch) {
  Tensor t;
  t.dtype = v.dtype;
  t.dims = resolve(v.shape, batch);
  t.bytes.resize(static_cast<size_t>(t.numel()) * dtype_size(v.dtype));
  for (size_t i = 0; i < v.known->size(); ++i) {
    int64_t x = (*v.known)[i].resolve(batch);
    switch (v.dtype) {
      case DType::I64:
        t.data<int64_t>()[i] = x;
        break;
      case DType::I32:
        t.data<int32_t>()[i] = static_cast<int32_t>(x);
        break;
      default:
        throw InternalError("symbolic constant of type " + std::string(dtype_name(v.dtype)));
    }
  }
  return t;
}
}  // namespace

std::vector<std::string> missing_kernels(const Graph& g, const Device& dev) {
  std::vector<std::string> gaps;
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    const Node& node = g.nodes[n];
    if (!node.def) {
      gaps.push_back(
          fmt::format("{}: op not in the catalog", g.node_label(static_cast<NodeId>(n))));
      continue;
    }
    DType t = node_kernel_dtype(g, node);
    if (!dev.supports(node.def->kind, t))
      gaps.push_back(fmt::format("{}: no {} kernel for {} on {}",
                                 g.node_label(static_cast<NodeId>(n)), node.op_type, dtype_name(t),
                                 dev.caps().name));
  }
  return gaps;
}

namespace {
std::vector<ValueId> keys(const std::unordered_map<ValueId, void*>& m) {
  std::vector<ValueId> k;
  for (const auto& [v, p] : m) k.push_back(v);
  return k;
}
}  // namespace

Executor::Executor(const Graph& g, Device& dev, int64_t batch,
                   const std::unordered_map<ValueId, void*>& bound, Stream stream, ArenaLoan loan)
    : g_(g),
      dev_(dev),
      batch_(batch),
      plan_(plan_memory(g, batch, keys(bound))),
      stream_id_(stream) {
  if (batch <= 0) fail("batch size must be positive, got {}", batch);
  auto gaps = missing_kernels(g, dev);
  if (!gaps.empty()) {
    std::string list;
    for (const auto& s : gaps) list += "\n  " + s;
    fail("{} node{} cannot run on {}:{}", gaps.size(), gaps.size() == 1 ? "" : "s", dev.caps().name,
         list);
  }
  const auto arena_bytes = static_cast<size_t>(std::max<int64_t>(plan_.bytes_peak, 64));
  if (loan.data && loan.bytes >= arena_bytes) {
    arena_loan_ = loan;
  } else {
    arena_ = DeviceBuffer(dev, arena_bytes);
    arena_loan_ = {arena_.get(), arena_.size()};
  }
  auto* base = static_cast<std::byte*>(arena_loan_.data);
  views_.resize(g.values.size());
  const bool blocked_ok = dev.caps().blocked_layouts;
  for (size_t v = 0; v < g.values.size(); ++v) {
    const Value& val = g.values[v];
    TensorView& tv = views_[v];
    tv.dtype = val.dtype;
    tv.dims = resolve(val.shape, batch);
    tv.blocked = val.blocked;
    tv.bf16_storage = val.bf16_storage;
    if ((val.blocked || val.bf16_storage) && !blocked_ok)
      throw InternalError(fmt::format("value '{}' is {}, which {} cannot run", val.name,
                                      val.blocked ? "in the blocked layout" : "stored as bf16",
                                      dev.caps().name));
    if (auto b = bound.find(static_cast<ValueId>(v)); b != bound.end()) {
      tv.data = b->second;
      continue;
    }
    if (plan_.offset[v] != MemoryPlan::kNotInArena) {
      tv.data = base + plan_.offset[v];
      continue;
    }
    const Tensor* src = val.data.get();
    Tensor sym;
    if (!src && val.known) {
      sym = materialize_known(val, batch);
      src = &sym;
    }
    if (!src) continue;  // unused
    constants_.emplace_back(dev, std::max<size_t>(src->bytes.size(), 1));
    dev.upload(constants_.back().get(), src->bytes.data(), src->bytes.size(), stream);
    tv.data = constants_.back().get();
  }
  args_.resize(g.nodes.size());
  skip_.resize(g.nodes.size());
  size_t workspace = 0;  // one buffer: nodes run one after another on the stream
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    const Node& node = g.nodes[n];
    KernelArgs& a = args_[n];
    a.params = &node.params;
    for (ValueId i : node.inputs)
      a.in.push_back(i == kNoValue ? TensorView{} : views_[static_cast<size_t>(i)]);
    for (ValueId o : node.outputs)
      a.out.push_back(o == kNoValue ? TensorView{} : views_[static_cast<size_t>(o)]);
    skip_[n] = node.def->alias && a.in[0].data == a.out[0].data;
    workspace = std::max(workspace, dev.workspace_bytes(node.def->kind, a));
  }
  if (workspace > 0) {
    workspace_ = DeviceBuffer(dev, workspace);
    for (KernelArgs& a : args_) {
      a.workspace = workspace_.get();
      a.workspace_bytes = workspace;
    }
  }
}

std::vector<int64_t> Executor::input_dims(size_t i) const {
  return views_[static_cast<size_t>(g_.inputs.at(i))].dims;
}

void Executor::set_input(size_t i, const Tensor& t) {
  const Value& v = g_.value(g_.inputs.at(i));
  const TensorView& tv = views_[static_cast<size_t>(g_.inputs[i])];
  if (t.dtype != v.dtype)
    fail("input '{}' must be {}, got {}", v.name, dtype_name(v.dtype), dtype_name(t.dtype));
  if (t.dims != tv.dims)
    fail("input '{}' must have shape {} at batch {} (model: {}), got {}", v.name,
         to_string(shape_of(tv.dims)), batch_, to_string(v.shape), to_string(shape_of(t.dims)));
  dev_.upload(tv.data, t.bytes.data(), t.bytes.size(), stream_id_);
}

void Executor::run() {
  ++step_;
  OpProfile* const prof = OpProfile::get();
  for (size_t n = 0; n < args_.size(); ++n) {
    if (skip_[n]) continue;
    args_[n].seed = ((step_ << 20) ^ n) ^ stream_;
    // A kernel that meets a bad input value (a Gather index out of range) raises it on the spot
    // on the CPU: the message gains the node. (The CUDA backend raises it at the synchronisation
    // that ends the run, naming the op only: kernels/cuda/device_error.h.)
    try {
      if (prof) {
        auto t0 = std::chrono::steady_clock::now();
        dev_.launch(g_.nodes[n].def->kind, args_[n], stream_id_);
        dev_.synchronize(stream_id_);
        prof->add(OpProfile::key(g_.nodes[n].def->name, args_[n]),
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        continue;
      }
      dev_.launch(g_.nodes[n].def->kind, args_[n], stream_id_);
    } catch (const RunError& e) {
      throw RunError(fmt::format("{} {}", g_.node_label(static_cast<NodeId>(n)), e.what()));
    } catch (const Error& e) {
      throw Error(fmt::format("{} {}", g_.node_label(static_cast<NodeId>(n)), e.what()));
    }
  }
  dev_.synchronize(stream_id_);
}

Tensor Executor::output(size_t i) const {
  const TensorView& tv = views_[static_cast<size_t>(g_.outputs.at(i))];
  Tensor t;
  t.dtype = tv.dtype;
  t.dims = tv.dims;
  t.bytes.resize(tv.bytes());
  dev_.download(t.bytes.data(), tv.data, t.bytes.size(), stream_id_);
  return t;
}

}  // namespace cb
