#include "runtime/memory_plan.h"

#include <fmt/format.h>
#include <fmt/ostream.h>

#include <algorithm>

#include "runtime/error.h"
#include "runtime/op_catalog.h"

namespace cb {

namespace {
int64_t align_up(int64_t x) { return (x + kArenaAlign - 1) / kArenaAlign * kArenaAlign; }

bool in_arena(const Value& v) {
  return v.kind == ValueKind::Input || (v.kind == ValueKind::Activation && !v.data && !v.known);
}
}  // namespace

namespace {
constexpr int64_t kMaxBytes = int64_t{1} << 60;  // more than any machine has, far from overflow
}  // namespace

MemoryPlan plan_memory(const Graph& g, int64_t batch, const std::vector<ValueId>& external) {
  size_t nv = g.values.size();
  MemoryPlan p;
  p.batch = batch;
  p.offset.assign(nv, MemoryPlan::kNotInArena);
  p.bytes.assign(nv, 0);
  p.root.resize(nv);
  p.first.assign(nv, 0);
  p.last.assign(nv, -1);
  int end = static_cast<int>(g.nodes.size());
  std::vector<bool> ext(nv, false);
  for (ValueId e : external) ext[static_cast<size_t>(e)] = true;
  // An activation nothing makes and nothing reads (one a rewrite left behind, such as a folded
  // Transpose's result) takes no bytes: unplanned, it would sit live before the first node with
  // every other such value.
  std::vector<bool> read(nv, false);
  for (const Node& n : g.nodes)
    for (ValueId i : n.inputs)
      if (i != kNoValue) read[static_cast<size_t>(i)] = true;
  for (ValueId o : g.outputs) read[static_cast<size_t>(o)] = true;
  for (size_t v = 0; v < nv; ++v) {
    p.root[v] = static_cast<ValueId>(v);
    const Value& val = g.values[v];
    if (!in_arena(val) || ext[v]) continue;
    if (val.kind == ValueKind::Activation && val.producer < 0 && !read[v]) continue;
    CB_CHECK(val.shape_known);
    // Checked: a batch size near 2^61 must be an error, not a wrapped size and a segfault.
    auto n = static_cast<int64_t>(stored_size(val.dtype, val.bf16_storage));
    bool over = false;
    for (const Dim& d : val.shape) {
      int64_t extent = d.value;
      if (d.batch) over = over || __builtin_mul_overflow(d.value, batch, &extent);
      over = over || __builtin_mul_overflow(n, extent, &n);
    }
    over = over || n > kMaxBytes || __builtin_add_overflow(p.bytes_naive, n, &p.bytes_naive) ||
           p.bytes_naive > kMaxBytes;
    if (over)
      fail("value '{}' {} at batch size {} needs more than 2^60 bytes; use a smaller batch size",
           val.name, to_string(val.shape), batch);
    p.bytes[v] = align_up(std::max<int64_t>(1, n));
    p.first[v] = val.producer;  // -1 for graph inputs: live from the start
    p.last[v] = val.producer;
  }
  for (size_t n = 0; n < g.nodes.size(); ++n)
    for (ValueId i : g.nodes[n].inputs)
      if (i != kNoValue) p.last[static_cast<size_t>(i)] = static_cast<int>(n);
  for (ValueId o : g.outputs) p.last[static_cast<size_t>(o)] = end;  // read after the run
  // Graph inputs stay valid for the whole run, so running again without setting them again
  // (cb-run --time, evaluation loops) reads the same data.
  for (ValueId i : g.inputs) p.last[static_cast<size_t>(i)] = end;

  // Aliases and in-place reuse: the output joins its input's buffer, extending its lifetime.
  auto is_io = [&](ValueId v) {
    return std::find(g.outputs.begin(), g.outputs.end(), v) != g.outputs.end() ||
           std::find(g.inputs.begin(), g.inputs.end(), v) != g.inputs.end();
  };
  auto find_root = [&](ValueId v) {
    while (p.root[static_cast<size_t>(v)] != v) v = p.root[static_cast<size_t>(v)];
    return v;
  };
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    const Node& node = g.nodes[n];
    if (!node.def || !node.has_output(0)) continue;
    ValueId out = node.outputs[0];
    auto o = static_cast<size_t>(out);
    if (!p.bytes[o] || is_io(out)) continue;
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      ValueId in = node.inputs[i];
      if (in == kNoValue) continue;
      bool alias = node.def->alias && i == 0;
      bool inplace = (node.def->inplace_inputs >> i) & 1u;
      if (!alias && !inplace) continue;
      // The buffer the input lives in: its own, or (an alias or in-place result itself) its
      // root's, so that a view of a view is a view too. None for a bound value (no arena bytes).
      ValueId r = find_root(in);
      auto rr = static_cast<size_t>(r);
      if (!p.bytes[rr] || is_io(r)) continue;
      // The input's buffer must die here (for in-place) and match in size (for both).
      if (p.last[rr] != static_cast<int>(n) && !alias) continue;
      if (p.bytes[rr] != p.bytes[o] || g.value(in).dtype != g.value(out).dtype) continue;
      // Sizes are rounded up to kArenaAlign: a broadcast input ([3] into [1,2,3]) can match in
      // bytes, and writing the output over it would clobber elements still to be read.
      if (!alias && g.value(in).shape != g.value(out).shape) continue;
      if (alias && p.last[rr] > static_cast<int>(n)) {
        // Input still read later: an alias is still fine (same bytes, read-only view).
      }
      p.root[o] = r;
      p.last[rr] = std::max(p.last[rr], p.last[o]);
      p.bytes[o] = 0;
      (alias ? p.aliased : p.inplace) += 1;
      break;
    }
  }
  // Lifetimes of roots cover their sharers.
  for (size_t v = 0; v < nv; ++v) {
    ValueId r = find_root(static_cast<ValueId>(v));
    p.root[v] = r;
    auto rr = static_cast<size_t>(r);
    p.last[rr] = std::max(p.last[rr], p.last[v]);
  }

  // Greedy by size: place big buffers first at the lowest offset that does not overlap any
  // already placed buffer live at the same time.
  std::vector<size_t> order;
  for (size_t v = 0; v < nv; ++v)
    if (p.bytes[v]) order.push_back(v);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return p.bytes[a] > p.bytes[b]; });
  std::vector<size_t> placed;
  for (size_t v : order) {
    std::vector<std::pair<int64_t, int64_t>> busy;
    for (size_t u : placed)
      if (p.first[u] <= p.last[v] && p.first[v] <= p.last[u])
        busy.emplace_back(p.offset[u], p.offset[u] + p.bytes[u]);
    std::sort(busy.begin(), busy.end());
    int64_t at = 0;
    for (auto [b, e] : busy) {
      if (at + p.bytes[v] <= b) break;
      at = std::max(at, e);
    }
    p.offset[v] = at;
    p.bytes_peak = std::max(p.bytes_peak, at + p.bytes[v]);
    placed.push_back(v);
  }
  for (size_t v = 0; v < nv; ++v) {
    auto r = static_cast<size_t>(p.root[v]);
    if (r != v) {
      p.offset[v] = p.offset[r];
      p.first[v] = std::min(p.first[v], p.first[r]);
    }
  }
  return p;
}

void check_plan(const Graph& g, const MemoryPlan& p) {
  for (size_t a = 0; a < p.bytes.size(); ++a) {
    if (!p.bytes[a]) continue;
    CB_CHECK(p.offset[a] >= 0 && p.offset[a] + p.bytes[a] <= p.bytes_peak);
    for (size_t b = a + 1; b < p.bytes.size(); ++b) {
      if (!p.bytes[b]) continue;
      bool live_together = p.first[a] <= p.last[b] && p.first[b] <= p.last[a];
      bool overlap =
          p.offset[a] < p.offset[b] + p.bytes[b] && p.offset[b] < p.offset[a] + p.bytes[a];
      if (live_together && overlap)
        throw InternalError(fmt::format("memory plan: '{}' and '{}' are live together and overlap",
                                        g.values[a].name, g.values[b].name));
    }
  }
}

void print_plan(std::ostream& os, const Graph& g, const MemoryPlan& p) {
  auto mib = [](int64_t b) { return static_cast<double>(b) / (1024.0 * 1024.0); };
  int64_t params = param_stats(g).bytes;
  int buffers = 0;
  for (int64_t b : p.bytes) buffers += b > 0;
  fmt::print(os, "memory plan at batch {}\n", p.batch);
  fmt::print(os, "  bytes_peak     {:>14}  ({:.2f} MiB, the activation arena of one replica)\n",
             p.bytes_peak, mib(p.bytes_peak));
  fmt::print(os, "  bytes_naive    {:>14}  ({:.2f} MiB, one buffer per value, no reuse)\n",
             p.bytes_naive, mib(p.bytes_naive));
  fmt::print(os, "  reuse ratio    {:>14.2f}x\n", p.reuse_ratio());
  fmt::print(os, "  buffers        {:>14}  ({} in place, {} aliases)\n", buffers, p.inplace,
             p.aliased);
  fmt::print(os,
             "  parameters     {:>14}  ({:.2f} MiB, shared by the plan, one copy per replica)\n",
             params, mib(params));
  fmt::print(os, "  per replica    {:>14}  ({:.2f} MiB: arena + parameters)\n",
             p.bytes_peak + params, mib(p.bytes_peak + params));
}

}  // namespace cb
