// The public C++ API (include/crossbow/crossbow.h) over a TrainSession (session/train_session.h):
// the caller's arrays become tensor sets (sources of examples, fed by the session's one feed path)
// without a copy, batches from the caller are fetched ahead on a thread of their own
// (session/api_prefetcher.h), and every failure leaves as a crossbow::Error with the message
// cb-train prints.
#include <crossbow/crossbow.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <new>
#include <variant>

#include "runtime/data/feed.h"
#include "runtime/data/tensor_set.h"
#include "runtime/error.h"
#include "session/api_prefetcher.h"
#include "session/option_table.h"
#include "session/train_session.h"

namespace crossbow {

// ---- errors
// --------------------------------------------------------------------------------------

namespace {

// The exception being handled as a crossbow::Error; cb::Error keeps its message and gets `kind`.
[[noreturn]] void rethrow_as(Error::Kind kind) {
  try {
    throw;
  } catch (const Error&) {
    throw;
  } catch (const cb::RunError& e) {
    throw Error(Error::Kind::Run, e.what());
  } catch (const cb::Error& e) {
    throw Error(kind, e.what());
  } catch (const std::bad_alloc&) {
    throw Error(Error::Kind::Run,
                "out of memory (lower batch-size or learners, or set memory-budget)");
  } catch (const std::exception& e) {
    throw Error(Error::Kind::Run, std::string("internal error: ") + e.what());
  }
}

template <class F>
auto guarded(Error::Kind kind, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (...) {
    rethrow_as(kind);
  }
}

cb::DType to_cb(DType t) {
  switch (t) {
    case DType::F32:
      return cb::DType::F32;
    case DType::F64:
      return cb::DType::F64;
    case DType::F16:
      return cb::DType::F16;
    case DType::BF16:
      return cb::DType::BF16;
    case DType::I8:
      return cb::DType::I8;
    case DType::I32:
      return cb::DType::I32;
    case DType::I64:
      return cb::DType::I64;
    case DType::U8:
      return cb::DType::U8;
    case DType::Bool:
      return cb::DType::Bool;
  }
  throw Error(Error::Kind::Input, "unknown dtype");
}

DType from_cb(cb::DType t) {
  switch (t) {
    case cb::DType::F32:
      return DType::F32;
    case cb::DType::F64:
      return DType::F64;
    case cb::DType::F16:
      return DType::F16;
    case cb::DType::BF16:
      return DType::BF16;
    case cb::DType::I8:
      return DType::I8;
    case cb::DType::I32:
      return DType::I32;
    case cb::DType::I64:
      return DType::I64;
    case cb::DType::U8:
      return DType::U8;
    case cb::DType::Bool:
      return DType::Bool;
  }
  throw Error(Error::Kind::Run, "internal error: unknown dtype");
}

}  // namespace

std::string version() { return CB_VERSION; }
const char* dtype_name(DType t) { return cb::dtype_name(to_cb(t)).data(); }
size_t dtype_size(DType t) { return cb::dtype_size(to_cb(t)); }

// ---- arrays
// ----------------------------------------------------------------------------------------

int64_t Array::elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Array Array::zeros(DType dtype, std::vector<int64_t> shape) {
  Array a;
  a.dtype = dtype;
  a.shape = std::move(shape);
  for (int64_t d : a.shape)
    if (d < 0) throw Error(Error::Kind::Input, "Array::zeros: a negative dimension");
  auto buf = std::make_shared<std::vector<std::byte>>(a.bytes());
  a.data = buf->data();
  a.keep = buf;
  return a;
}

Array Array::view(DType dtype, std::vector<int64_t> shape, const void* data,
                  std::shared_ptr<const void> keep) {
  Array a;
  a.dtype = dtype;
  a.shape = std::move(shape);
  a.data = data;
  a.keep = std::move(keep);
  return a;
}

namespace {

// Named arrays as a tensor set (no copy; each column keeps its array's owner).
std::shared_ptr<const cb::TensorSet> to_set(const Arrays& arrays, const std::string& source) {
  std::vector<cb::TensorColumn> cols;
  for (const auto& [name, a] : arrays) {
    if (name.empty()) throw Error(Error::Kind::Input, source + ": an array without a name");
    if (a.shape.empty())
      throw Error(Error::Kind::Input,
                  fmt::format("{}: array '{}' is a scalar; arrays need a first axis of examples",
                              source, name));
    for (int64_t d : a.shape)
      if (d < 0)
        throw Error(Error::Kind::Input,
                    fmt::format("{}: array '{}' has a negative dimension", source, name));
    if (!a.data && a.elements() > 0)
      throw Error(Error::Kind::Input, fmt::format("{}: array '{}' has no data", source, name));
    cb::TensorColumn c;
    c.name = name;
    c.source = fmt::format("{}: '{}'", source, name);
    c.dtype = to_cb(a.dtype);
    c.count = a.shape[0];
    c.dims.assign(a.shape.begin() + 1, a.shape.end());
    c.data = static_cast<const std::byte*>(a.data);
    c.row_bytes = static_cast<size_t>(c.row_elems()) * cb::dtype_size(c.dtype);
    c.keep = a.keep;
    cols.push_back(std::move(c));
  }
  if (cols.empty()) throw Error(Error::Kind::Input, source + ": no arrays");
  return guarded(Error::Kind::Input,
                 [&] { return std::make_shared<const cb::TensorSet>(std::move(cols), source); });
}

cb::Dataset arrays_dataset(std::shared_ptr<const cb::TensorSet> train,
                           std::shared_ptr<const cb::TensorSet> test, const std::string& what) {
  cb::Dataset d;
  d.dir = what;
  d.format = cb::DataFormat::Npz;
  d.description = "in memory";
  d.train = std::move(train);
  d.test = std::move(test);
  return d;
}

}  // namespace

// ---- data
// ------------------------------------------------------------------------------------------

struct Data::Impl {
  struct Stream {
    std::function<Next()> start;
    int64_t batches_per_pass = 0;
  };
  std::variant<std::string, Arrays, Stream> v;
};

Data Data::path(std::string p) {
  Data d;
  d.impl_ = std::make_shared<const Impl>(Impl{std::move(p)});
  return d;
}

Data Data::arrays(Arrays a) {
  Data d;
  d.impl_ = std::make_shared<const Impl>(Impl{std::move(a)});
  return d;
}

Data Data::batches(std::function<Next()> start, int64_t batches_per_pass) {
  if (!start) throw Error(Error::Kind::Usage, "Data::batches: no function to start a pass");
  if (batches_per_pass < 0)
    throw Error(Error::Kind::Usage, "Data::batches: batches_per_pass must not be negative");
  Data d;
  d.impl_ = std::make_shared<const Impl>(Impl{Impl::Stream{std::move(start), batches_per_pass}});
  return d;
}

// ---- options
// ---------------------------------------------------------------------------------------

struct Options::Impl {
  cb::SessionOptions o;
};

Options::Options() : impl_(std::make_unique<Impl>()) {
  impl_->o.program = "crossbow";
  impl_->o.handle_signals = false;
}
Options::~Options() = default;
Options::Options(const Options& other) : impl_(std::make_unique<Impl>(*other.impl_)) {}
Options& Options::operator=(const Options& other) {
  *impl_ = *other.impl_;
  return *this;
}
Options::Options(Options&&) noexcept = default;
Options& Options::operator=(Options&&) noexcept = default;

Options& Options::set(std::string_view name, const std::string& value) {
  guarded(Error::Kind::Usage, [&] { cb::set_session_option(impl_->o, name, value); });
  return *this;
}

std::string Options::get(std::string_view name) const {
  return guarded(Error::Kind::Usage, [&] { return cb::find_session_option(name).get(impl_->o); });
}

Options& Options::label(std::string program, std::string command_line) {
  impl_->o.program = std::move(program);
  impl_->o.command_line = std::move(command_line);
  return *this;
}

std::vector<Options::Info> Options::list() {
  std::vector<Info> out;
  const cb::SessionOptions defaults;
  for (const cb::OptionSpec& s : cb::session_options()) {
    Info i;
    i.name = s.name;
    i.alias = s.alias;
    i.help = s.help;
    i.default_value = s.show_default ? s.get(defaults) : std::string();
    i.kind = static_cast<Info::Kind>(s.kind);
    i.type = s.type;
    out.push_back(std::move(i));
  }
  return out;
}

// ---- trainer
// ---------------------------------------------------------------------------------------

namespace {

// A caller's batch as a one-batch data set, fed as the session's feed path feeds any data
// (matched to the model and checked first).
void feed_arrays(const Arrays& arrays, const cb::FeedSpec& feeds, const cb::FeedOptions& fo,
                 bool train, const std::string& what, cb::Batch& out) {
  const cb::Dataset ds = arrays_dataset(to_set(arrays, what), nullptr, what);
  const cb::FeedPlan plan = cb::plan_feed(ds, feeds, fo);
  if (plan.target) cb::check_targets(ds, true, feeds, plan, train ? "training" : "test");
  cb::check_indices(ds, true, feeds, plan);
  std::vector<int64_t> idx(static_cast<size_t>(ds.train_size()));
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<int64_t>(i);
  cb::make_batches(ds, true, plan, 0)(idx, 0, out);
}

Record to_record(const nlohmann::ordered_json& j) {
  Record r;
  r.type = j.value("type", "");
  r.json = j.dump();
  for (const auto& [k, v] : j.items())
    if (v.is_number()) r.numbers[k] = v.get<double>();
  return r;
}

Scores to_scores(const cb::EvalResult& e) {
  Scores s;
  s["count"] = static_cast<double>(e.count);
  s["loss"] = e.loss;
  if (e.accuracy >= 0) s["accuracy"] = e.accuracy;
  if (e.top5) s["top5"] = *e.top5;
  if (e.mae) s["mae"] = *e.mae;
  if (e.r2) s["r2"] = *e.r2;
  return s;
}

}  // namespace

struct Trainer::Impl {
  std::unique_ptr<cb::TrainSession> session;

  cb::FeedOptions feed_options() const {
    const cb::SessionOptions& o = session->options();
    return {o.run.target, o.run.transforms};
  }
  int64_t eval_batch() const {
    const cb::SessionOptions& o = session->options();
    return o.trainer.eval_batch > 0 ? o.trainer.eval_batch : o.trainer.batch;
  }

  // A data set for `d`: a path's, or arrays as its training (and with `test`, test) split.
  cb::Dataset dataset(const Data& d, bool test_too, const std::string& what) {
    const Data::Impl& i = *d.impl();
    if (const auto* p = std::get_if<std::string>(&i.v)) return session->open(*p);
    const auto& a = std::get<Arrays>(i.v);
    auto set = to_set(a, what);
    return arrays_dataset(set, test_too ? set : nullptr, what);
  }

  // The trained model over one pass of the caller's batches (in pieces of the evaluation batch).
  cb::EvalResult evaluate_batches(const Data& d) {
    std::vector<cb::Batch> pieces;
    for_each_piece(d, eval_batch(), true, [&](const cb::Batch& b) { pieces.push_back(b); });
    size_t at = 0;
    return session->evaluate([&](cb::Batch& b) {
      if (at == pieces.size()) return false;
      b = std::move(pieces[at++]);
      return true;
    });
  }

  // A pass of the caller's batches, each split into pieces of at most `rows` examples, fed to
  // `f` (evaluation and prediction; the target only where the data hold it).
  void for_each_piece(const Data& d, int64_t rows, bool with_target,
                      const std::function<void(const cb::Batch&)>& f) {
    const Data::Impl& i = *d.impl();
    cb::FeedSpec feeds = session->feeds();
    if (!with_target) feeds.target.reset();
    auto pieces = [&](const Arrays& arrays, const std::string& what) {
      const cb::Dataset ds = arrays_dataset(to_set(arrays, what), nullptr, what);
      const cb::FeedPlan plan = cb::plan_feed(ds, feeds, feed_options());
      if (plan.target) cb::check_targets(ds, true, feeds, plan, "test");
      cb::check_indices(ds, true, feeds, plan);
      const int64_t n = ds.train_size();
      const cb::MakeBatch make = cb::make_batches(ds, true, plan, 0);
      cb::Batch b;
      for (int64_t at = 0; at < n; at += rows) {
        std::vector<int64_t> idx;
        for (int64_t k = at; k < std::min(n, at + rows); ++k) idx.push_back(k);
        make(idx, 0, b);
        f(b);
      }
    };
    if (const auto* a = std::get_if<Arrays>(&i.v)) return pieces(*a, "arrays");
    const auto* s = std::get_if<Data::Impl::Stream>(&i.v);
    if (!s) throw Error(Error::Kind::Usage, "a data path here: give arrays or batches");
    Data::Next next = s->start();
    if (!next) throw Error(Error::Kind::Input, "the batch source started no pass");
    Arrays batch;
    for (int64_t k = 0; next(batch); ++k) {
      pieces(batch, fmt::format("batch {}", k));
      batch.clear();
    }
  }
};

Trainer::Trainer(const std::string& model, const Options& options)
    : impl_(std::make_unique<Impl>()) {
  cb::SessionOptions o = options.impl().o;
  o.model = model;
  if (o.command_line.empty()) o.command_line = o.program + " " + model;
  guarded(Error::Kind::Usage,
          [&] { impl_->session = std::make_unique<cb::TrainSession>(std::move(o)); });
}

Trainer::~Trainer() = default;
Trainer::Trainer(Trainer&&) noexcept = default;
Trainer& Trainer::operator=(Trainer&&) noexcept = default;

History Trainer::fit(const Data& train, const Data& validation, const FitCallbacks& callbacks) {
  if (train.empty()) throw Error(Error::Kind::Usage, "fit: no training data");
  cb::TrainSession& s = *impl_->session;
  try {
    cb::FitHooks hooks;
    cb::BatchStream stream;
    std::unique_ptr<Prefetcher> fetch;
    cb::Dataset data;
    const Data::Impl& ti = *train.impl();
    if (const auto* st = std::get_if<Data::Impl::Stream>(&ti.v)) {
      // The first batch on this thread: it gives the model its sizes and loss on a first fit.
      Data::Next first = st->start();
      if (!first) throw Error(Error::Kind::Input, "the batch source started no pass");
      Arrays first_batch;
      if (!first(first_batch)) throw Error(Error::Kind::Input, "the batch source yielded no batch");
      data = arrays_dataset(to_set(first_batch, "batch 0"), nullptr, "batches");
      s.build(data);
      data.train = nullptr;  // the batches come from the stream
      const cb::FeedSpec feeds = s.feeds();
      const cb::FeedOptions fo = impl_->feed_options();
      const int64_t batch = s.options().trainer.batch;
      auto convert = [feeds, fo, batch](const Arrays& a, cb::Batch& out) {
        int64_t rows = -1;
        for (const auto& [name, arr] : a)
          if (!arr.shape.empty()) rows = rows < 0 ? arr.shape[0] : rows;
        if (rows >= 0 && rows < batch) {  // a short last batch: dropped, as drop_last does
          out = cb::Batch{};
          return;
        }
        if (rows > batch)
          throw Error(
              Error::Kind::Input,
              fmt::format("a training batch of {} examples: expected batch-size {}", rows, batch));
        feed_arrays(a, feeds, fo, true, "batch", out);
      };
      const size_t depth = 2 * static_cast<size_t>(s.trainer().total_learners()) + 2;
      fetch = std::make_unique<Prefetcher>(st->start, std::move(first), std::move(first_batch),
                                           convert, depth);
      stream.start = [&] { fetch->start_pass(); };
      stream.next = [&](cb::Batch& b) { return fetch->next(b); };
      stream.batches_per_pass = st->batches_per_pass;
      hooks.sources.train = &stream;
    } else {
      data = impl_->dataset(train, false, "arrays");
      if (std::holds_alternative<Arrays>(ti.v)) data.dir = "arrays";
    }
    // Validation other than the training path's test split.
    cb::Dataset val;
    if (!validation.empty()) {
      const Data::Impl& vi = *validation.impl();
      if (std::holds_alternative<Data::Impl::Stream>(vi.v)) {
        hooks.sources.evaluate = [&] { return impl_->evaluate_batches(validation); };
      } else if (std::holds_alternative<Arrays>(vi.v) && std::holds_alternative<Arrays>(ti.v)) {
        // Arrays both: one data set with a test split, as a .npz folder is.
        data.test = to_set(std::get<Arrays>(vi.v), "validation");
      } else {
        val = impl_->dataset(validation, true, "validation");
        if (std::holds_alternative<Arrays>(vi.v)) val.train = val.test;
        hooks.sources.evaluate = [&] { return s.evaluate(val); };
      }
    }
    if (callbacks.on_eval)
      hooks.on_eval = [&](const nlohmann::ordered_json& j) {
        return callbacks.on_eval(to_record(j));
      };
    hooks.should_stop = callbacks.should_stop;
    s.set_handle_signals(callbacks.handle_signals);
    cb::FitResult r = s.fit(data, hooks);
    if (fetch && fetch->dropped() > 0)
      fmt::print("batches  {} short batch{} (fewer than batch-size examples) dropped\n",
                 fetch->dropped(), fetch->dropped() == 1 ? "" : "es");
    History h;
    for (const auto& j : r.records) h.records.push_back(to_record(j));
    h.stopped = r.stopped;
    h.signal = r.signal;
    return h;
  } catch (...) {
    rethrow_as(Error::Kind::Input);
  }
}

Scores Trainer::evaluate(const Data& data) {
  if (data.empty()) throw Error(Error::Kind::Usage, "evaluate: no data");
  cb::TrainSession& s = *impl_->session;
  return guarded(Error::Kind::Input, [&] {
    const Data::Impl& i = *data.impl();
    if (!s.built()) {
      if (std::holds_alternative<Data::Impl::Stream>(i.v))
        throw Error(Error::Kind::Usage, "evaluate before fit: give arrays or a path");
      s.build(impl_->dataset(data, true, "arrays"));
    }
    if (std::holds_alternative<Data::Impl::Stream>(i.v))
      return to_scores(impl_->evaluate_batches(data));
    cb::Dataset d = impl_->dataset(data, true, "arrays");
    return to_scores(s.evaluate(d));
  });
}

Arrays Trainer::predict(const Data& inputs) {
  if (inputs.empty()) throw Error(Error::Kind::Usage, "predict: no inputs");
  cb::TrainSession& s = *impl_->session;
  return guarded(Error::Kind::Input, [&] {
    const Data::Impl& i = *inputs.impl();
    if (std::holds_alternative<std::string>(i.v))
      throw Error(Error::Kind::Usage, "predict takes arrays or batches, not a data path");
    if (!s.built()) {
      if (!std::holds_alternative<Arrays>(i.v))
        throw Error(Error::Kind::Usage, "predict before fit: give arrays");
      s.build(impl_->dataset(inputs, false, "arrays"));
    }
    const cb::Graph& g = s.trainer().model().eval_graph();
    std::vector<std::vector<cb::Tensor>> parts;
    impl_->for_each_piece(inputs, impl_->eval_batch(), false,
                          [&](const cb::Batch& b) { parts.push_back(s.predict(b)); });
    Arrays out;
    if (parts.empty()) return out;
    for (size_t k = 0; k < parts[0].size(); ++k) {
      const std::string name = g.value(g.outputs[k]).name;
      const cb::Tensor& t0 = parts[0][k];
      // Outputs with a batch axis are joined along it; others (no such axis) come from one batch.
      int64_t rows = 0;
      bool batched = !t0.dims.empty();
      for (const auto& p : parts) {
        const cb::Tensor& t = p[k];
        if (t.dims.empty() || t.dims.size() != t0.dims.size() ||
            !std::equal(t.dims.begin() + 1, t.dims.end(), t0.dims.begin() + 1))
          batched = false;
        else
          rows += t.dims[0];
      }
      if (!batched && parts.size() > 1)
        throw Error(Error::Kind::Input,
                    fmt::format("output '{}' [{}] has no batch axis to join the batches' results "
                                "along; predict on at most eval-batch-size examples at a time",
                                name, fmt::join(t0.dims, ",")));
      std::vector<int64_t> shape = t0.dims;
      if (batched) shape[0] = rows;
      Array a = Array::zeros(from_cb(t0.dtype), shape);
      auto* dst = static_cast<std::byte*>(const_cast<void*>(a.data));
      for (const auto& p : parts) {
        std::memcpy(dst, p[k].bytes.data(), p[k].bytes.size());
        dst += p[k].bytes.size();
      }
      out.emplace_back(name, std::move(a));
    }
    return out;
  });
}

void Trainer::save(const std::string& path, bool training_form) {
  guarded(Error::Kind::Input, [&] {
    impl_->session->save(path,
                         training_form ? cb::ExportForm::Training : cb::ExportForm::Inference);
  });
}

std::string Trainer::save_checkpoint() {
  return guarded(Error::Kind::Input, [&] { return impl_->session->save_checkpoint(); });
}

void Trainer::set(std::string_view name, const std::string& value) {
  static const char* const kRunOptions[] = {"epochs",
                                            "steps",
                                            "lr",
                                            "lr-schedule",
                                            "lr-step-size",
                                            "lr-gamma",
                                            "lr-milestones",
                                            "warmup-steps",
                                            "seed",
                                            "no-shuffle",
                                            "eval-every",
                                            "evals-per-epoch",
                                            "test-limit",
                                            "target-accuracy",
                                            "output",
                                            "output-training",
                                            "metrics",
                                            "report",
                                            "tensorboard",
                                            "checkpoint-dir",
                                            "checkpoint-every",
                                            "keep",
                                            "resume",
                                            "workers",
                                            "augment",
                                            "no-flip",
                                            "mean",
                                            "std"};
  guarded(Error::Kind::Usage, [&] {
    cb::TrainSession& s = *impl_->session;
    const cb::OptionSpec& spec = cb::find_session_option(name);
    if (s.built() && std::find(std::begin(kRunOptions), std::end(kRunOptions), spec.name) ==
                         std::end(kRunOptions))
      cb::fail(
          "--{} cannot change once the learners are made (after the first call that saw data); "
          "make a new Trainer",
          spec.name);
    cb::SessionOptions o = s.options();
    spec.set(o, value);
    s.set_options(o);
  });
}

std::string Trainer::get(std::string_view name) const {
  return guarded(Error::Kind::Usage,
                 [&] { return cb::find_session_option(name).get(impl_->session->options()); });
}

int Trainer::learners() const {
  return impl_->session->built() ? impl_->session->trainer().total_learners() : 0;
}

int64_t Trainer::steps() const {
  return impl_->session->built() ? impl_->session->trainer().steps_done() : 0;
}

}  // namespace crossbow
