// Matching data to a model (see feed.h).
#include "runtime/data/feed.h"

#include <fmt/format.h>

#include <cmath>

#include "runtime/error.h"

namespace cb {

namespace {

std::string dims_text(const std::vector<int64_t>& d) {
  std::string s = "[N";
  for (int64_t v : d) s += fmt::format(",{}", v);
  return s + "]";
}

int64_t numel(const std::vector<int64_t>& d) {
  int64_t n = 1;
  for (int64_t v : d) n *= v;
  return n;
}

std::string inputs_text(const FeedSpec& spec) {
  std::string s;
  for (const ModelInput& in : spec.inputs)
    s += fmt::format("{}'{}' {} {}", s.empty() ? "" : ", ", in.name, dtype_name(in.dtype),
                     dims_text(in.dims));
  return s;
}

// The array `col` against what the model takes (`name` for messages: "input 'x'", "the target").
void check_array(const TensorSet& set, const TensorColumn& col, const ModelInput& want,
                 const std::string& what) {
  for (int64_t d : want.dims)
    if (d <= 0)
      fail(
          "{} is {} {}: a size that is not fixed; give it with --dim NAME=N or --input-shape "
          "INPUT=AxB (or let the data give it: name the array as the input)",
          what, dtype_name(want.dtype), dims_text(want.dims));
  if (!dtype_converts(col.dtype, want.dtype))
    fail(
        "{}: array '{}' is {} but {} takes {}; {} values would lose their fractions: save the "
        "array as {} (e.g. x.astype(np.{}))",
        set.source(), col.name, dtype_name(col.dtype), what, dtype_name(want.dtype),
        dtype_name(col.dtype), dtype_name(want.dtype),
        want.dtype == DType::I64   ? "int64"
        : want.dtype == DType::I32 ? "int32"
                                   : "float32");
  if (col.dims == want.dims || numel(col.dims) == numel(want.dims)) return;
  std::string axis;
  for (size_t a = 0; a < std::max(col.dims.size(), want.dims.size()); ++a) {
    const int64_t have = a < col.dims.size() ? col.dims[a] : -1,
                  need = a < want.dims.size() ? want.dims[a] : -1;
    if (have != need) {
      axis = have < 0 ? fmt::format("it has no axis {} (the model's is {})", a + 1, need)
             : need < 0
                 ? fmt::format("its axis {} ({}) is one the model does not have", a + 1, have)
                 : fmt::format("axis {}: {} in the data, {} in the model", a + 1, have, need);
      break;
    }
  }
  fail("{}: array '{}' is {} {} but {} takes {} {} ({}); {} values per example against {}",
       set.source(), col.name, dtype_name(col.dtype), dims_text(col.dims), what,
       dtype_name(want.dtype), dims_text(want.dims), axis, numel(col.dims), numel(want.dims));
}

const TensorColumn& find_array(const TensorSet& set, const std::string& name,
                               const std::string& what, const std::string& hint) {
  if (const TensorColumn* c = set.find(name)) return *c;
  fail("{}: no array '{}' for {} (the arrays: {}){}", set.source(), name, what, set.describe(),
       hint);
}

}  // namespace

int64_t FeedPlan::example_bytes() const {
  if (!tensors) return 0;
  int64_t b = 0;
  for (const ColumnFeed& f : inputs) b += numel(f.dims) * static_cast<int64_t>(dtype_size(f.dtype));
  if (target) b += numel(target->dims) * static_cast<int64_t>(dtype_size(target->dtype));
  return b;
}

bool batches_inline(const FeedPlan& plan, int64_t batch) {
  return plan.tensors && plan.example_bytes() * batch <= (int64_t{64} << 10);
}

FeedPlan plan_feed(const Dataset& data, const FeedSpec& spec, const FeedOptions& o) {
  FeedPlan plan;
  plan.inputs.resize(spec.inputs.size());
  if (!data.tensors()) {
    // Image data: one input takes the images; the labels go to the target (or to the model's own
    // labels input).
    int image = -1;
    for (size_t i = 0; i < spec.inputs.size(); ++i) {
      if (static_cast<int>(i) == spec.labels_input) continue;
      if (image >= 0)
        fail(
            "the model has several inputs ({}) but {} gives images and labels only; train it on "
            "NumPy arrays with one array per input (--data DIR with train.npz and val.npz)",
            inputs_text(spec), data.description);
      image = static_cast<int>(i);
    }
    if (image < 0) fail("the model has no input to feed the images to ({})", inputs_text(spec));
    const ModelInput& in = spec.inputs[static_cast<size_t>(image)];
    plan.images = plan_transforms(data, in, o.transforms);
    ColumnFeed& f = plan.inputs[static_cast<size_t>(image)];
    f.from = ColumnFeed::From::Images;
    f.dtype = in.dtype;
    f.dims = in.dims;
    if (spec.labels_input >= 0) {
      ColumnFeed& l = plan.inputs[static_cast<size_t>(spec.labels_input)];
      l.from = ColumnFeed::From::Labels;
      l.dtype = DType::I64;
    }
    if (spec.target) {
      const ModelInput& t = *spec.target;
      const bool labels = t.dtype == DType::I64 && t.dims.empty();
      const bool one_hot = dtype_is_float(t.dtype) && spec.classes > 0 && t.dims.size() == 1 &&
                           t.dims[0] == spec.classes;
      if (!labels && !one_hot)
        fail(
            "{} gives class labels, but the loss's target is {} {}; train this model on NumPy "
            "arrays with the targets as an array (--data DIR with train.npz and val.npz)",
            data.description, dtype_name(t.dtype), dims_text(t.dims));
      ColumnFeed tf;
      tf.from = ColumnFeed::From::Labels;
      tf.dtype = DType::I64;
      plan.target = tf;
    }
    plan.text = plan.images.describe();
    return plan;
  }

  plan.tensors = true;
  std::string text;
  const TensorSet* sets[2] = {data.train_tensors.get(), data.test_tensors.get()};
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    const ModelInput& in = spec.inputs[i];
    std::string name = in.name;
    const TensorSet& train = *sets[0];
    if (!train.find(name) && spec.inputs.size() == 1 && train.find("x")) name = "x";
    ColumnFeed& f = plan.inputs[i];
    f.array = name;
    f.dtype = in.dtype;
    f.dims = in.dims;
    for (const TensorSet* set : sets) {
      if (!set) continue;
      const TensorColumn& c =
          find_array(*set, name, fmt::format("model input '{}'", in.name),
                     spec.inputs.size() == 1 ? "; name the array as the input, or 'x'"
                                             : "; name each array as the model input it feeds");
      check_array(*set, c, in, fmt::format("model input '{}'", in.name));
    }
    text += fmt::format("{}'{}' {} {} <- {}", text.empty() ? "" : ", ", in.name,
                        dtype_name(in.dtype), dims_text(in.dims), name);
  }
  if (spec.target) {
    const ModelInput& t = *spec.target;
    ColumnFeed tf;
    tf.array = o.target;
    tf.dtype = t.dtype;
    tf.dims = t.dims;
    for (const TensorSet* set : sets) {
      if (!set) continue;
      const TensorColumn& c =
          find_array(*set, o.target, "the target", "; name it 'y', or pass --target NAME");
      const bool class_target = t.dtype == DType::I64;
      // One-hot targets of an MSE over [N,C] from integer labels.
      const bool one_hot = dtype_is_float(t.dtype) && spec.classes > 0 && c.dims.empty() &&
                           (dtype_is_int(c.dtype) || c.dtype == DType::Bool) &&
                           t.dims.size() == 1 && t.dims[0] == spec.classes;
      if (one_hot) {
        tf.dtype = DType::I64;
        tf.dims = {};
        continue;
      }
      if (class_target && !(dtype_is_int(c.dtype) || c.dtype == DType::Bool))
        fail(
            "{}: the target array '{}' is {}, but the loss takes class indices (integers); save "
            "it as integers (y.astype(np.int64)), or choose a regression loss with --loss",
            set->source(), c.name, dtype_name(c.dtype));
      check_array(*set, c, t, "the loss's target");
    }
    plan.target = tf;
    text += fmt::format(", target {} {} <- {}", dtype_name(t.dtype), dims_text(t.dims), o.target);
  }
  plan.text = text;
  return plan;
}

void check_targets(const Dataset& data, bool train, const FeedSpec& spec, const FeedPlan& plan,
                   const std::string& what) {
  if (!data.tensors()) {
    const Examples& set = train ? *data.train : *data.test;
    const int64_t top = set.label_max();
    if (spec.classes > 0 && top >= spec.classes)
      fail(
          "the {} labels go up to {} but the model's output has {} classes; this model does not "
          "fit this data set",
          what, top, spec.classes);
    for (int64_t i = 0; i < set.size(); ++i)
      if (set.label(i) < 0)
        fail("the {} data has a negative label {} ({})", what, set.label(i), set.name(i));
    return;
  }
  if (!plan.target) return;
  const TensorSet& set = train ? *data.train_tensors : *data.test_tensors;
  const TensorColumn& c = *set.find(plan.target->array);
  const size_t col = static_cast<size_t>(&c - set.columns().data());
  const int64_t per = c.row_elems();
  const size_t es = dtype_size(c.dtype);
  const bool classes = plan.target->dtype == DType::I64;
  for (int64_t i = 0; i < set.size(); ++i) {
    const std::byte* row = set.row(col, i);
    for (int64_t k = 0; k < per; ++k) {
      const std::byte* p = row + static_cast<size_t>(k) * es;
      if (classes) {
        const int64_t v = load_int(c.dtype, p);
        if (spec.ignore_index && v == *spec.ignore_index) continue;
        if (v < 0 || (spec.classes > 0 && v >= spec.classes))
          fail(
              "{}: target '{}' of example {} (element {}) is class {}, outside the model's {} "
              "classes [0, {}){}; --num-classes N gives a classifier a new N-way head",
              set.source(), c.name, i, k, v, spec.classes, spec.classes,
              spec.ignore_index ? fmt::format(" (and not the ignore index {})", *spec.ignore_index)
                                : std::string());
      } else {
        const double v = load_real(c.dtype, p);
        if (!std::isfinite(v))
          fail("{}: target '{}' of example {} (element {}) is {}; targets must be finite numbers",
               set.source(), c.name, i, k, v);
      }
    }
  }
  (void)what;
}

MakeBatch make_batches(const Dataset& data, bool train, const FeedPlan& plan, uint64_t seed) {
  if (data.tensors()) {
    std::shared_ptr<const TensorSet> set = train ? data.train_tensors : data.test_tensors;
    return [set, plan](const std::vector<int64_t>& idx, int64_t, Batch& b) {
      fill_tensor_batch(*set, plan, idx, b);
    };
  }
  MakeBatch images = image_batches(train ? data.train : data.test, plan.images,
                                   train && plan.images.augment, seed, data.skipped);
  size_t image = 0;
  int labels = -1;
  for (size_t i = 0; i < plan.inputs.size(); ++i) {
    if (plan.inputs[i].from == ColumnFeed::From::Images) image = i;
    if (plan.inputs[i].from == ColumnFeed::From::Labels) labels = static_cast<int>(i);
  }
  const size_t count = plan.inputs.size();
  if (count == 1 && labels < 0) return images;  // images to the input, labels to the target
  return [images, image, labels, count](const std::vector<int64_t>& idx, int64_t epoch, Batch& b) {
    images(idx, epoch, b);
    Tensor img = std::move(b.inputs[0]);
    b.inputs.resize(count);
    b.inputs[image] = std::move(img);
    if (labels >= 0) {
      b.inputs[static_cast<size_t>(labels)] = std::move(b.target);
      b.target = Tensor{};
    }
  };
}

void fill_tensor_batch(const TensorSet& set, const FeedPlan& plan, const std::vector<int64_t>& idx,
                       Batch& out) {
  const auto n = static_cast<int64_t>(idx.size());
  auto fill = [&](const ColumnFeed& f, Tensor& t) {
    const TensorColumn* c = set.find(f.array);
    CB_CHECK(c != nullptr);
    const size_t col = static_cast<size_t>(c - set.columns().data());
    const int64_t per = c->row_elems();
    t.dtype = f.dtype;
    t.dims.assign(1, n);
    t.dims.insert(t.dims.end(), f.dims.begin(), f.dims.end());
    const size_t row = static_cast<size_t>(per) * dtype_size(f.dtype);
    t.bytes.resize(static_cast<size_t>(n) * row);
    for (int64_t k = 0; k < n; ++k)
      convert_elements(c->dtype, set.row(col, idx[static_cast<size_t>(k)]), f.dtype,
                       t.bytes.data() + static_cast<size_t>(k) * row, per);
  };
  out.inputs.resize(plan.inputs.size());
  for (size_t i = 0; i < plan.inputs.size(); ++i) fill(plan.inputs[i], out.inputs[i]);
  if (plan.target)
    fill(*plan.target, out.target);
  else
    out.target = Tensor{};
}

}  // namespace cb
