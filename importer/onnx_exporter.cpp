#include "importer/onnx_exporter.h"

#include <onnx/onnx_pb.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "importer/tensor_proto.h"
#include "runtime/error.h"
#include "runtime/shape.h"

namespace cb {

namespace fs = std::filesystem;

namespace {

// Sets `p`'s contents to `bytes` as raw_data, dropping every other way of holding data.
void set_raw(onnx::TensorProto& p, const void* bytes, size_t n) {
  p.clear_float_data();
  p.clear_int32_data();
  p.clear_string_data();
  p.clear_int64_data();
  p.clear_double_data();
  p.clear_uint64_data();
  p.clear_external_data();
  p.clear_data_location();
  p.set_raw_data(bytes, n);
}

// Every value name a graph's nodes read, subgraphs (If/Loop/Scan bodies) included: a body may read
// a value of the graph around it.
void collect_reads(const onnx::GraphProto& g, std::set<std::string>& reads) {
  for (const onnx::NodeProto& n : g.node()) {
    for (const std::string& in : n.input())
      if (!in.empty()) reads.insert(in);
    for (const onnx::AttributeProto& a : n.attribute()) {
      if (a.has_g()) collect_reads(a.g(), reads);
      for (const onnx::GraphProto& sub : a.graphs()) collect_reads(sub, reads);
    }
  }
}

bool default_domain(const onnx::NodeProto& n) {
  return n.domain().empty() || n.domain() == "ai.onnx";
}

std::string node_label(const onnx::NodeProto& n, int index) {
  return n.name().empty() ? fmt::format("#{} ({})", index, n.op_type())
                          : fmt::format("'{}' ({})", n.name(), n.op_type());
}

// The edits of a pass (ExportEdits) on the file's graph: values' new contents and dims, then
// the graph outputs' new sizes, and no value_info downstream of a changed value. The trained
// tensors are written over these afterwards, with the dims these gave.
void apply_edits(onnx::GraphProto& g, const ExportEdits& edits, const std::string& what) {
  if (edits.values.empty() && edits.output_last_dim.empty()) return;
  auto fill = [](onnx::TensorProto& p, const Tensor& t) {
    p.set_data_type(dtype_to_onnx(t.dtype));
    p.clear_dims();
    for (int64_t d : t.dims) p.add_dims(d);
    set_raw(p, t.bytes.data(), t.bytes.size());
  };
  std::set<std::string> done;
  for (onnx::TensorProto& init : *g.mutable_initializer()) {
    auto it = edits.values.find(init.name());
    if (it == edits.values.end()) continue;
    fill(init, it->second);
    done.insert(init.name());
  }
  for (int i = 0; i < g.node_size(); ++i) {
    onnx::NodeProto& node = *g.mutable_node(i);
    for (int k = 0; k < node.output_size(); ++k) {
      auto it = edits.values.find(node.output(k));
      if (it == edits.values.end() || done.count(it->first)) continue;
      if (node.output_size() != 1)
        fail(
            "{}: the value '{}' a pass changed is output {} of node {}, which has other outputs; "
            "it cannot become a constant",
            what, it->first, k, node_label(node, i));
      // A Constant node (a stored weight, or shape arithmetic folded at import) holds it now.
      const std::string out = node.output(0), name = node.name();
      node.Clear();
      node.set_op_type("Constant");
      node.set_name(name);
      node.add_output(out);
      onnx::AttributeProto* a = node.add_attribute();
      a->set_name("value");
      a->set_type(onnx::AttributeProto::TENSOR);
      fill(*a->mutable_t(), it->second);
      done.insert(out);
      break;
    }
  }
  for (const auto& [name, t] : edits.values)
    if (!done.count(name))
      fail("{}: the model has no initializer or node output '{}' for the changed value", what,
           name);
  // Values downstream of the changed ones: their declared shapes may be stale.
  std::set<std::string> down(done.begin(), done.end());
  for (const onnx::NodeProto& n : g.node()) {
    bool reached = false;
    for (const std::string& in : n.input()) reached = reached || down.count(in);
    if (reached)
      for (const std::string& o : n.output()) down.insert(o);
  }
  auto* infos = g.mutable_value_info();
  for (int i = infos->size() - 1; i >= 0; --i)
    if (down.count(infos->Get(i).name())) infos->DeleteSubrange(i, 1);
  for (onnx::ValueInfoProto& o : *g.mutable_output()) {
    auto it = edits.output_last_dim.find(o.name());
    if (it == edits.output_last_dim.end()) continue;
    if (!o.type().tensor_type().has_shape() || o.type().tensor_type().shape().dim_size() == 0)
      continue;  // no shape declared: nothing to change
    auto* shape = o.mutable_type()->mutable_tensor_type()->mutable_shape();
    shape->mutable_dim(shape->dim_size() - 1)->set_dim_value(it->second);
  }
}

}  // namespace

void to_inference_form(onnx::ModelProto& m, const std::string& what) {
  int64_t opset = 0;
  for (const auto& o : m.opset_import())
    if (o.domain().empty() || o.domain() == "ai.onnx") opset = o.version();
  onnx::GraphProto& g = *m.mutable_graph();

  std::set<std::string> node_reads;
  collect_reads(g, node_reads);
  std::set<std::string> graph_outputs;
  for (const auto& o : g.output()) graph_outputs.insert(o.name());

  // Outputs that exist only in training: removed from the node, and from the graph's outputs.
  std::set<std::string> dropped;
  auto drop_outputs_from = [&](onnx::NodeProto& n, int index, int keep, const char* what_they_are) {
    for (int i = keep; i < n.output_size(); ++i) {
      const std::string& o = n.output(i);
      if (o.empty()) continue;
      if (node_reads.count(o))
        fail(
            "{}: node {} has a training-only output '{}' ({}) that another node reads, so the "
            "model has no inference form; write the training form (cb-train --output-training, "
            "cb-export --training)",
            what, node_label(n, index), o, what_they_are);
      dropped.insert(o);
    }
    while (n.output_size() > keep) n.mutable_output()->RemoveLast();
  };
  for (int i = 0; i < g.node_size(); ++i) {
    onnx::NodeProto& n = *g.mutable_node(i);
    if (!default_domain(n)) continue;
    if (n.op_type() == "BatchNormalization") {
      auto* attrs = n.mutable_attribute();
      for (int a = attrs->size() - 1; a >= 0; --a)
        if (attrs->Get(a).name() == "training_mode") attrs->DeleteSubrange(a, 1);
      drop_outputs_from(n, i, 1, "running or saved batch statistics");
    } else if (n.op_type() == "Dropout") {
      const bool mask_read = n.output_size() > 1 && node_reads.count(n.output(1));
      if (mask_read) {
        // The mask feeds the model: keep the Dropout, in inference mode (training_mode absent:
        // the output is the input and the mask all true).
        if (opset >= 12)
          while (n.input_size() > 2) n.mutable_input()->RemoveLast();
        continue;
      }
      drop_outputs_from(n, i, 1, "the dropout mask");
      const std::string in = n.input_size() > 0 ? n.input(0) : std::string();
      n.set_op_type("Identity");
      n.clear_attribute();
      n.clear_input();
      n.add_input(in);
    }
  }
  // Graph outputs that were removed.
  auto* outs = g.mutable_output();
  for (int i = outs->size() - 1; i >= 0; --i)
    if (dropped.count(outs->Get(i).name())) outs->DeleteSubrange(i, 1);

  // Nodes whose every output is now unread (the Constants that fed Dropout's ratio and
  // training_mode, say), until none is left. ONNX ops have no side effects.
  for (bool changed = true; changed;) {
    changed = false;
    std::set<std::string> reads;
    collect_reads(g, reads);
    for (const auto& o : g.output()) reads.insert(o.name());
    auto* nodes = g.mutable_node();
    for (int i = nodes->size() - 1; i >= 0; --i) {
      const onnx::NodeProto& n = nodes->Get(i);
      bool used = false;
      for (const std::string& o : n.output()) used = used || (!o.empty() && reads.count(o));
      if (!used) {
        nodes->DeleteSubrange(i, 1);
        changed = true;
      }
    }
  }
  // Initializers and value_info of values nothing reads any more (graph inputs stay: they are the
  // model's interface).
  std::set<std::string> reads, inputs, produced;
  collect_reads(g, reads);
  for (const auto& o : g.output()) reads.insert(o.name());
  for (const auto& in : g.input()) inputs.insert(in.name());
  auto* inits = g.mutable_initializer();
  for (int i = inits->size() - 1; i >= 0; --i) {
    const std::string& name = inits->Get(i).name();
    if (!reads.count(name) && !inputs.count(name)) inits->DeleteSubrange(i, 1);
  }
  for (const auto& t : g.initializer()) produced.insert(t.name());
  for (const auto& n : g.node())
    for (const std::string& o : n.output()) produced.insert(o);
  auto* infos = g.mutable_value_info();
  for (int i = infos->size() - 1; i >= 0; --i)
    if (!produced.count(infos->Get(i).name()) && !inputs.count(infos->Get(i).name()))
      infos->DeleteSubrange(i, 1);
}

void export_trained(const std::string& original_model_path, const std::string& out_path,
                    const std::map<std::string, Tensor>& trained, ExportForm form,
                    const ExportEdits& edits) {
  std::ifstream f(original_model_path, std::ios::binary);
  if (!f) fail("{}: cannot open the original model to export from", original_model_path);
  std::stringstream ss;
  ss << f.rdbuf();
  onnx::ModelProto m;
  if (!m.ParseFromString(ss.str()))
    fail("{}: not a readable ONNX model (was it changed since training started?)",
         original_model_path);
  fs::path src(original_model_path);
  std::string dir = src.has_parent_path() ? src.parent_path().string() : ".";

  std::set<std::string> done;
  onnx::GraphProto* g = m.mutable_graph();
  apply_edits(*g, edits, original_model_path);
  for (onnx::TensorProto& init : *g->mutable_initializer()) {
    auto it = trained.find(init.name());
    if (it == trained.end()) {
      if (init.data_location() == onnx::TensorProto::EXTERNAL) {
        TensorPtr t = tensor_from_proto(
            init, fmt::format("initializer '{}' in {}", init.name(), original_model_path), dir);
        set_raw(init, t->bytes.data(), t->bytes.size());
      }
      continue;
    }
    const Tensor& t = it->second;
    auto dt = dtype_from_onnx(init.data_type());
    std::vector<int64_t> dims(init.dims().begin(), init.dims().end());
    if (!dt || *dt != t.dtype)
      fail("{}: initializer '{}' is {} in the model but the trained tensor is {}",
           original_model_path, init.name(), onnx_dtype_name(init.data_type()),
           dtype_name(t.dtype));
    if (dims != t.dims)
      fail("{}: initializer '{}' has shape {} in the model but the trained tensor has {}",
           original_model_path, init.name(), to_string(shape_of(dims)),
           to_string(shape_of(t.dims)));
    if (t.bytes.size() != static_cast<size_t>(t.numel()) * dtype_size(t.dtype))
      throw InternalError(fmt::format("trained tensor '{}' has {} bytes for {} elements",
                                      init.name(), t.bytes.size(), t.numel()));
    set_raw(init, t.bytes.data(), t.bytes.size());
    done.insert(init.name());
  }
  // Weights the file stores as Constant nodes (paddle2onnx, tf2onnx): their `value` attribute.
  for (onnx::NodeProto& node : *g->mutable_node()) {
    if (node.op_type() != "Constant" || !(node.domain().empty() || node.domain() == "ai.onnx") ||
        node.output_size() != 1)
      continue;
    auto it = trained.find(node.output(0));
    if (it == trained.end() || done.count(node.output(0))) continue;
    onnx::TensorProto* value = nullptr;
    for (onnx::AttributeProto& a : *node.mutable_attribute())
      if (a.name() == "value" && a.type() == onnx::AttributeProto::TENSOR) value = a.mutable_t();
    if (!value)
      fail(
          "{}: Constant node '{}' holds '{}' in a form other than a 'value' tensor; it cannot "
          "take the trained tensor",
          original_model_path, node.name(), node.output(0));
    const Tensor& t = it->second;
    auto dt = dtype_from_onnx(value->data_type());
    std::vector<int64_t> dims(value->dims().begin(), value->dims().end());
    if (!dt || *dt != t.dtype || dims != t.dims)
      fail("{}: Constant node '{}' is {}{} in the model but the trained tensor is {}{}",
           original_model_path, node.name(), onnx_dtype_name(value->data_type()),
           to_string(shape_of(dims)), dtype_name(t.dtype), to_string(shape_of(t.dims)));
    set_raw(*value, t.bytes.data(), t.bytes.size());
    done.insert(node.output(0));
  }
  for (const auto& [name, t] : trained)
    if (!done.count(name))
      fail("{}: the model has no initializer or Constant node '{}' to hold the trained tensor",
           original_model_path, name);

  if (form == ExportForm::Inference) to_inference_form(m, original_model_path);

  std::string tmp = out_path + ".tmp";
  {
    std::ofstream o(tmp, std::ios::binary | std::ios::trunc);
    if (!o || !m.SerializeToOstream(&o) || !o.flush()) {
      o.close();
      std::remove(tmp.c_str());
      fail("{}: cannot write the model (is the folder writable, is the disk full?)", tmp);
    }
  }
  if (std::rename(tmp.c_str(), out_path.c_str()) != 0) {
    std::remove(tmp.c_str());
    fail("{}: cannot rename {} into place", out_path, tmp);
  }
}

}  // namespace cb
