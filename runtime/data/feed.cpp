// Matching data to a model, and the batches made from a source's columns (see feed.h).
#include "runtime/data/feed.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "runtime/copy_bytes.h"
#include "runtime/error.h"

namespace cb {

namespace {

// The column image data sets give their class labels in (runtime/data/dataset.h Examples).
constexpr const char* kLabelColumn = "label";

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

// The column `col` of `set` against what the model takes (`what` for messages: "model input
// 'x'", "the loss's target").
void check_array(const Source& set, const ColumnInfo& col, const ModelInput& want,
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
        set.origin(), col.name, dtype_name(col.dtype), what, dtype_name(want.dtype),
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
       set.origin(), col.name, dtype_name(col.dtype), dims_text(col.dims), what,
       dtype_name(want.dtype), dims_text(want.dims), axis, numel(col.dims), numel(want.dims));
}

ColumnInfo find_array(const Source& set, const std::string& name, const std::string& what,
                      const std::string& hint) {
  const int c = set.column(name);
  if (c >= 0) return set.columns()[static_cast<size_t>(c)];
  fail("{}: no array '{}' for {} (the arrays: {}){}", set.origin(), name, what, set.describe(),
       hint);
}

// Image data: one input takes the image column, the labels go to the target (or to the model's
// own labels input).
FeedPlan plan_images(const Dataset& data, const FeedSpec& spec, const FeedOptions& o) {
  FeedPlan plan;
  plan.inputs.resize(spec.inputs.size());
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
  const Source& train = *data.train;
  ColumnFeed& f = plan.inputs[static_cast<size_t>(image)];
  f.column = train.columns()[static_cast<size_t>(train.image_column())].name;
  f.image = true;
  f.dtype = in.dtype;
  f.dims = in.dims;
  ColumnFeed labels;
  labels.column = kLabelColumn;
  labels.dtype = DType::I64;
  if (spec.labels_input >= 0 || spec.target)
    for (const Source* s : {data.train.get(), data.test.get()})
      if (s && s->column(kLabelColumn) < 0)
        fail("{} gives no class labels ({}) for the model's {}", data.description, s->describe(),
             spec.target ? "target" : "labels input");
  if (spec.labels_input >= 0) plan.inputs[static_cast<size_t>(spec.labels_input)] = labels;
  if (spec.target) {
    const ModelInput& t = *spec.target;
    const bool class_labels = t.dtype == DType::I64 && t.dims.empty();
    const bool one_hot = dtype_is_float(t.dtype) && spec.classes > 0 && t.dims.size() == 1 &&
                         t.dims[0] == spec.classes;
    if (!class_labels && !one_hot)
      fail(
          "{} gives class labels, but the loss's target is {} {}; train this model on NumPy "
          "arrays with the targets as an array (--data DIR with train.npz and val.npz)",
          data.description, dtype_name(t.dtype), dims_text(t.dims));
    plan.target = labels;
  }
  plan.text = plan.images.describe();
  return plan;
}

// Arrays: each input the column of its name, the target o.target.
FeedPlan plan_arrays(const Dataset& data, const FeedSpec& spec, const FeedOptions& o) {
  FeedPlan plan;
  plan.inputs.resize(spec.inputs.size());
  plan.tensors = true;
  std::string text;
  const Source* sets[2] = {data.train.get(), data.test.get()};
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    const ModelInput& in = spec.inputs[i];
    std::string name = in.name;
    const Source& train = *sets[0];
    if (train.column(name) < 0 && spec.inputs.size() == 1 && train.column("x") >= 0) name = "x";
    ColumnFeed& f = plan.inputs[i];
    f.column = name;
    f.dtype = in.dtype;
    f.dims = in.dims;
    for (const Source* set : sets) {
      if (!set) continue;
      const ColumnInfo c =
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
    tf.column = o.target;
    tf.dtype = t.dtype;
    tf.dims = t.dims;
    for (const Source* set : sets) {
      if (!set) continue;
      const ColumnInfo c =
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
            set->origin(), c.name, dtype_name(c.dtype));
      check_array(*set, c, t, "the loss's target");
    }
    plan.target = tf;
    text += fmt::format(", target {} {} <- {}", dtype_name(t.dtype), dims_text(t.dims), o.target);
  }
  plan.text = text;
  return plan;
}

// One column as a batch fills it.
struct Fed {
  size_t column = 0;  // in the source
  DType from = DType::F32;
  int64_t per = 0;  // values per example (an image column: the transform's C x H x W)
  ColumnFeed feed;  // what the batch holds
  int output = -1;  // the batch input it fills; -1: the target
};

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
  CB_CHECK(data.train != nullptr);
  return data.train->image_column() >= 0 ? plan_images(data, spec, o) : plan_arrays(data, spec, o);
}

void check_targets(const Dataset& data, bool train, const FeedSpec& spec, const FeedPlan& plan,
                   const std::string& what) {
  const Source& set = train ? *data.train : *data.test;
  ColumnValue v;
  std::string why;
  if (set.image_column() >= 0) {
    const int col = set.column(kLabelColumn);
    if (col < 0) return;
    std::vector<int64_t> labels(static_cast<size_t>(set.size()));
    int64_t top = -1;
    for (int64_t i = 0; i < set.size(); ++i) {
      if (!set.read(i, static_cast<size_t>(col), {}, v, why))
        fail("the {} data: the label of {} cannot be read ({})", what, set.name(i), why);
      labels[static_cast<size_t>(i)] = load_int(DType::I64, v.data);
      top = std::max(top, labels[static_cast<size_t>(i)]);
    }
    if (spec.classes > 0 && top >= spec.classes)
      fail(
          "the {} labels go up to {} but the model's output has {} classes; this model does not "
          "fit this data set",
          what, top, spec.classes);
    for (int64_t i = 0; i < set.size(); ++i)
      if (labels[static_cast<size_t>(i)] < 0)
        fail("the {} data has a negative label {} ({})", what, labels[static_cast<size_t>(i)],
             set.name(i));
    return;
  }
  if (!plan.target) return;
  const int col = set.column(plan.target->column);
  CB_CHECK(col >= 0);
  const ColumnInfo c = set.columns()[static_cast<size_t>(col)];
  const int64_t per = c.elems();
  const size_t es = dtype_size(c.dtype);
  const bool classes = plan.target->dtype == DType::I64;
  for (int64_t i = 0; i < set.size(); ++i) {
    if (!set.read(i, static_cast<size_t>(col), {}, v, why))
      fail("{}: target '{}' of example {} cannot be read ({})", set.origin(), c.name, i, why);
    for (int64_t k = 0; k < per; ++k) {
      const std::byte* p = v.data + static_cast<size_t>(k) * es;
      if (classes) {
        const int64_t x = load_int(c.dtype, p);
        if (spec.ignore_index && x == *spec.ignore_index) continue;
        if (x < 0 || (spec.classes > 0 && x >= spec.classes))
          fail(
              "{}: target '{}' of example {} (element {}) is class {}, outside the model's {} "
              "classes [0, {}){}; --num-classes N gives a classifier a new N-way head",
              set.origin(), c.name, i, k, x, spec.classes, spec.classes,
              spec.ignore_index ? fmt::format(" (and not the ignore index {})", *spec.ignore_index)
                                : std::string());
      } else {
        const double x = load_real(c.dtype, p);
        if (!std::isfinite(x))
          fail("{}: target '{}' of example {} (element {}) is {}; targets must be finite numbers",
               set.origin(), c.name, i, k, x);
      }
    }
  }
}

void check_indices(const Dataset& data, bool train, const FeedSpec& spec, const FeedPlan& plan) {
  if (!plan.tensors) return;
  const Source& set = train ? *data.train : *data.test;
  ColumnValue v;
  std::string why;
  for (size_t j = 0; j < spec.inputs.size(); ++j) {
    const ModelInput& in = spec.inputs[j];
    const int64_t rows = in.index_rows;
    if (rows <= 0) continue;
    const int col = set.column(plan.inputs[j].column);
    CB_CHECK(col >= 0);
    const ColumnInfo c = set.columns()[static_cast<size_t>(col)];
    if (!dtype_is_int(c.dtype)) continue;  // floats are refused for integer inputs by plan_feed
    const int64_t per = c.elems();
    const size_t es = dtype_size(c.dtype);
    for (int64_t i = 0; i < set.size(); ++i) {
      if (!set.read(i, static_cast<size_t>(col), {}, v, why))
        fail("{}: array '{}' of example {} cannot be read ({})", set.origin(), c.name, i, why);
      for (int64_t k = 0; k < per; ++k) {
        const int64_t x = load_int(c.dtype, v.data + static_cast<size_t>(k) * es);
        if (x >= -rows && x < rows) continue;
        fail(
            "{}: array '{}' of example {} (element {}) holds {}, but model input '{}' indexes the "
            "{} rows of {} (ids in [0, {}); negative ones count from the end, as ONNX's Gather "
            "does); the data's ids do not fit this model: encode them with the model's "
            "vocabulary, or export the model with a table of as many rows as the data's ids need",
            set.origin(), c.name, i, k, x, in.name, rows, in.index_node, rows);
      }
    }
  }
}

MakeBatch make_batches(std::shared_ptr<const Source> source, const FeedPlan& plan, bool augment,
                       uint64_t seed, std::shared_ptr<SkipLog> skipped) {
  CB_CHECK(source && skipped);
  const std::vector<ColumnInfo> cols = source->columns();
  const TransformSpec spec = plan.images;
  std::vector<Fed> fed;
  auto add = [&](const ColumnFeed& f, int output) {
    const int c = source->column(f.column);
    if (c < 0)
      fail("{}: no column '{}' to feed (the columns: {})", source->origin(), f.column,
           source->describe());
    Fed x;
    x.column = static_cast<size_t>(c);
    x.from = cols[x.column].dtype;
    x.per = f.image ? int64_t{spec.channels} * spec.rows * spec.cols : cols[x.column].elems();
    x.feed = f;
    x.output = output;
    fed.push_back(std::move(x));
  };
  for (size_t i = 0; i < plan.inputs.size(); ++i) add(plan.inputs[i], static_cast<int>(i));
  if (plan.target) add(*plan.target, -1);
  const size_t inputs = plan.inputs.size();
  const bool has_target = plan.target.has_value();
  // Image columns: decoded to the transform's channels, at least as large as it needs; pixels
  // held in memory at the output's size are taken as they are when nothing is augmented.
  ReadOptions image_read;
  image_read.decode.channels = spec.channels;
  image_read.decode.min_side = augment ? std::max(spec.rows, spec.cols) : spec.eval_resize();
  for (const Fed& f : fed)
    if (f.feed.image)
      image_read.stored = !augment && cols[f.column].dims ==
                                          std::vector<int64_t>{spec.channels, spec.rows, spec.cols};
  return [source, fed, spec, augment, seed, skipped, inputs, has_target, image_read](
             const std::vector<int64_t>& idx, int64_t epoch, Batch& b) {
    const auto n = static_cast<int64_t>(idx.size());
    b.inputs.resize(inputs);
    if (!has_target) b.target = Tensor{};
    std::vector<uint8_t*> out(fed.size());
    std::vector<size_t> row(fed.size());
    for (size_t j = 0; j < fed.size(); ++j) {
      const Fed& f = fed[j];
      Tensor& t = f.output >= 0 ? b.inputs[static_cast<size_t>(f.output)] : b.target;
      if (f.feed.image) {
        t.dtype = spec.dtype;
        t.dims = {n, spec.channels, spec.rows, spec.cols};
      } else {
        t.dtype = f.feed.dtype;
        t.dims.assign(1, n);
        t.dims.insert(t.dims.end(), f.feed.dims.begin(), f.feed.dims.end());
      }
      row[j] = static_cast<size_t>(f.per) * dtype_size(t.dtype);
      t.bytes.resize(static_cast<size_t>(n) * row[j]);
      out[j] = reinterpret_cast<uint8_t*>(t.bytes.data());
    }
    const ReadOptions plain;
    std::vector<ColumnValue> vals(fed.size());
    std::string why;
    const int64_t count = source->size();
    for (int64_t k = 0; k < n; ++k) {
      int64_t i = idx[static_cast<size_t>(k)];
      // An example that cannot be read is replaced by the next loadable one.
      for (int64_t tries = 0;;) {
        bool ok = true;
        for (size_t j = 0; j < fed.size() && ok; ++j)
          ok = source->read(i, fed[j].column, fed[j].feed.image ? image_read : plain, vals[j], why);
        if (ok) break;
        skipped->add(source->name(i), why);
        if (++tries >= count)
          fail("none of the {} examples could be loaded ({}: {})", count, source->name(i), why);
        i = (i + 1) % count;
      }
      for (size_t j = 0; j < fed.size(); ++j) {
        const Fed& f = fed[j];
        void* dst = out[j] + static_cast<size_t>(k) * row[j];
        const ColumnValue& v = vals[j];
        if (!f.feed.image) {
          convert_elements(f.from, v.data, f.feed.dtype, dst, f.per);
        } else if (v.data == nullptr) {
          std::mt19937_64 rng(example_seed(seed, epoch, i));
          transform_example(v.image, spec, augment, rng, dst);
        } else if (spec.dtype == DType::U8) {  // stored pixels at the output's size
          copy_bytes(dst, v.data, static_cast<size_t>(f.per));
        } else {
          const auto* p = reinterpret_cast<const uint8_t*>(v.data);
          auto* o = static_cast<float*>(dst);
          const int64_t plane = static_cast<int64_t>(spec.rows) * spec.cols;
          for (int64_t c = 0; c < spec.channels; ++c) {
            const float m = spec.mean[static_cast<size_t>(c)],
                        sd = spec.std[static_cast<size_t>(c)];
            for (int64_t q = 0; q < plane; ++q)
              o[c * plane + q] = (static_cast<float>(p[c * plane + q]) / 255.0f - m) / sd;
          }
        }
      }
    }
  };
}

MakeBatch make_batches(const Dataset& data, bool train, const FeedPlan& plan, uint64_t seed) {
  return make_batches(train ? data.train : data.test, plan, train && plan.images.augment, seed,
                      data.skipped);
}

MakeBatch image_batches(std::shared_ptr<const Source> examples, const TransformSpec& spec,
                        bool augment, uint64_t seed, std::shared_ptr<SkipLog> skipped) {
  CB_CHECK(examples && examples->image_column() >= 0);
  FeedPlan plan;
  plan.images = spec;
  ColumnFeed images;
  images.column = examples->columns()[static_cast<size_t>(examples->image_column())].name;
  images.image = true;
  images.dtype = spec.dtype;
  images.dims = {spec.channels, spec.rows, spec.cols};
  plan.inputs.push_back(images);
  if (examples->column(kLabelColumn) >= 0) {
    ColumnFeed labels;
    labels.column = kLabelColumn;
    labels.dtype = DType::I64;
    plan.target = labels;
  }
  return make_batches(std::move(examples), plan, augment, seed, std::move(skipped));
}

}  // namespace cb
