// A training session (see train_session.h).
#include "session/train_session.h"

#include <signal.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <new>
#include <sstream>

#include "autodiff/autodiff.h"
#include "importer/onnx_exporter.h"
#include "runtime/data/load_dataset.h"
#include "runtime/data/pack.h"
#include "runtime/data/pipeline.h"
#include "runtime/error.h"
#include "runtime/passes.h"
#include "runtime/replace_head.h"
#include "runtime/thread_pool.h"
#include "session/devices.h"
#include "session/recorder.h"
#include "session/run_start.h"
#include "sma/mpi_job.h"

namespace cb {

namespace {

// SIGINT/SIGTERM: the first asks the loop to stop after the current step (a checkpoint and the
// model are then written); a second SIGINT exits at once (every file on disk is written to a
// temporary name and renamed, so nothing is left half-written).
volatile sig_atomic_t g_signal = 0;
extern "C" void on_signal(int sig) {
  if (g_signal != 0 && sig == SIGINT) _exit(128 + SIGINT);
  g_signal = sig;
}
// Installs the handlers for its lifetime and restores the previous ones after.
class SignalScope {
 public:
  explicit SignalScope(bool on) : on_(on) {
    if (!on_) return;
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int_);
    sigaction(SIGTERM, &sa, &old_term_);
  }
  ~SignalScope() {
    if (!on_) return;
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
  }
  SignalScope(const SignalScope&) = delete;
  SignalScope& operator=(const SignalScope&) = delete;

 private:
  bool on_;
  struct sigaction old_int_ {
  }, old_term_{};
};

// A folder a file will be written into: it must exist and be writable, checked before training.
void check_writable_folder(const std::string& file, const char* flag) {
  std::filesystem::path dir = std::filesystem::path(file).parent_path();
  if (dir.empty()) dir = ".";
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    fail("{} {}: the folder {} does not exist; create it first", flag, file, dir.string());
  if (access(dir.c_str(), W_OK) != 0)
    fail("{} {}: the folder {} is not writable ({})", flag, file, dir.string(),
         std::strerror(errno));
}

// The model, imported with concrete sizes: symbolic H and W of an image input from --image-size,
// else from the data when its images all have one size (IDX, CIFAR); a model exported with a
// fixed batch is re-batched.
ImportResult import_for(const SessionOptions& o, const Dataset& data) {
  ImportOptions iopts = o.import;
  const auto hw = o.image_size;
  if (data.tensors()) {
    // NumPy data: a symbolic size of an input is the size of the array of its name (or of `x`).
    std::shared_ptr<const Source> set = data.train;
    iopts.size_of = [set](const std::string& name, size_t axis, size_t) -> std::optional<int64_t> {
      int c = set->column(name);
      if (c < 0) c = set->column("x");
      if (c < 0) return std::nullopt;
      const std::vector<int64_t> dims = set->columns()[static_cast<size_t>(c)].dims;
      if (axis == 0 || axis > dims.size()) return std::nullopt;
      return dims[axis - 1];
    };
    iopts.sizes_hint = fmt::format(
        "by naming the array of {} as the input, with --dim NAME=N or --input-shape INPUT=AxBxC",
        o.data);
  } else {
    const ExampleDims ddims = image_dims(*data.train);
    iopts.size_of = [hw, ddims](const std::string&, size_t axis,
                                size_t rank) -> std::optional<int64_t> {
      if (rank != 4 || axis < 2) return std::nullopt;
      if (hw) return axis == 2 ? hw->first : hw->second;
      if (ddims.fixed()) return axis == 2 ? ddims.rows : ddims.cols;
      return std::nullopt;
    };
    iopts.sizes_hint = fmt::format(
        "with --image-size HxW (the images of {} have no one size to take it from), --dim "
        "NAME=N or --input-shape INPUT=AxBxC",
        o.data);
  }
  ImportResult r = import_model(o.model, iopts);
  const bool has_batch = std::any_of(r.graph.inputs.begin(), r.graph.inputs.end(), [&](ValueId v) {
    const Shape& s = r.graph.value(v).shape;
    return !s.empty() && s[0].batch;
  });
  if (!has_batch) {  // exported with a fixed batch: make it N where the graph allows
    iopts.rebatch = true;
    r = import_model(o.model, iopts);
    fmt::print(
        "batch    the model was exported with a fixed batch of {}; re-batched to --batch-size {} "
        "(its graph carries the batch through)\n",
        r.rebatched_from, o.trainer.batch);
  }
  if (hw)
    for (ValueId v : r.graph.inputs) {
      const Value& in = r.graph.value(v);
      if (in.shape.size() == 4 &&
          (in.shape[2] != Dim::of(hw->first) || in.shape[3] != Dim::of(hw->second)))
        fail(
            "--image-size {}x{}: the model's input '{}' is fixed at {}; drop --image-size or give "
            "its size",
            hw->first, hw->second, in.name, to_string(in.shape));
    }
  return r;
}

// The data's classes against the model's: more is an error suggesting a new head, fewer a warning
// (the other outputs are never a target). Checked before the trainer is built.
void check_classes(const Graph& g, const LossSpec& spec, const Dataset& data, bool new_head,
                   const std::string& program) {
  if (spec.kind == LossKind::ModelOutput || data.tensors()) return;  // arrays: check_targets
  const auto v =
      spec.output.empty() ? std::optional<ValueId>(g.outputs.at(0)) : g.find_value(spec.output);
  if (!v || g.value(*v).shape.size() != 2 || !g.value(*v).shape[1].is_static()) return;
  const int64_t model = g.value(*v).shape[1].value;
  const int64_t have = !data.classes.empty()
                           ? static_cast<int64_t>(data.classes.size())
                           : std::max(label_max(*data.train), label_max(*data.test)) + 1;
  const std::string what =
      new_head ? fmt::format("--num-classes {}", model)
               : fmt::format("the model's output '{}' has {}", g.value(*v).name, model);
  if (have > model)
    fail("{} has {} classes but {}; to fine-tune {} on this data, {} --num-classes {}", data.dir,
         have, what, new_head ? "the model" : "it",
         new_head ? "give" : fmt::format("replace its classifier by a new {}-way one with", have),
         have);
  if (have >= 1 && have < model)
    fmt::print(stderr,
               "{}: warning: {} has {} classes but {} (the other {} are never a target); for a "
               "{}-way classifier {} --num-classes {}\n",
               program, data.dir, have, what, model - have, have, new_head ? "give" : "add", have);
}

// The loss cb-train trains with. --loss auto on NumPy data follows the target array: integers are
// classes (cross-entropy over the output's class axis), floats are values (mse); a model's own
// scalar loss output is taken whatever the data. *why says which.
LossSpec pick_loss(const Graph& g, const SessionOptions& o, const Dataset& data, std::string* why) {
  *why = o.loss == "auto" ? " (auto-detected)" : "";
  if (o.loss != "auto" || !data.tensors())
    return choose_loss(g, o.loss, o.output_name, o.loss_settings());
  const int yc = data.train->column(o.run.target);
  const std::optional<ColumnInfo> y =
      yc >= 0 ? std::optional<ColumnInfo>(data.train->columns()[static_cast<size_t>(yc)])
              : std::nullopt;
  try {
    LossSpec s = choose_loss(g, "auto", o.output_name, o.loss_settings());
    if (s.kind == LossKind::ModelOutput || !y) return s;
  } catch (const Error&) {
    if (!y)
      fail(
          "{}: no array '{}' for the target (the arrays: {}); name it 'y', or pass --target NAME "
          "(--loss auto then trains integers as classes, floats as values)",
          data.train->origin(), o.run.target, data.train->describe());
  }
  const bool classes = dtype_is_int(y->dtype) || y->dtype == DType::Bool;
  *why = fmt::format(" (auto: the target array '{}' is {}: {})", y->name, dtype_name(y->dtype),
                     classes ? "class indices" : "values");
  return choose_loss(g, classes ? "cross-entropy" : "mse", o.output_name, o.loss_settings());
}

}  // namespace

std::string failure_message(const std::string& who) {
  try {
    throw;
  } catch (const Error& e) {
    return fmt::format("{}: error: {}", who, e.what());
  } catch (const std::bad_alloc&) {
    return fmt::format(
        "{}: error: out of memory (lower --batch-size or --learners, or set --memory-budget)", who);
  } catch (const std::exception& e) {
    return fmt::format("{}: internal error: {}", who, e.what());
  }
}

TrainSession::TrainSession(SessionOptions o) : o_(std::move(o)), who_(o_.program) {
  if (o_.threads == 0) o_.threads = ThreadPool::hardware_threads();
  o_.validate();
  if (!launched_by_mpi()) return;
  // Under mpirun: every process drives its devices, rank 0 prints and writes.
  try {
    mpi_ = std::make_unique<MpiJob>(o_.collective_timeout);
    who_ = fmt::format("{} (rank {} of {})", o_.program, mpi_->rank(), mpi_->size());
    char host[256] = "?";
    gethostname(host, sizeof host - 1);
    fmt::print(stderr, "{}: pid {} on {}\n", who_, getpid(), host);
    if (mpi_->rank() != 0) {  // the others keep only stderr
      o_.output.clear();
      o_.metrics.clear();
      o_.report.clear();
      o_.tensorboard.clear();
      if (!std::freopen("/dev/null", "w", stdout)) fail("cannot silence stdout on this rank");
    }
  } catch (...) {
    if (mpi_) mpi_->abort(failure_message(who_), 2);  // the peers must not wait
    throw;
  }
}

TrainSession::~TrainSession() = default;

void TrainSession::set_options(SessionOptions o) {
  if (o.threads == 0) o.threads = ThreadPool::hardware_threads();
  o.validate();
  if (mpi_ && mpi_->rank() != 0) {  // the others keep writing nothing
    o.output.clear();
    o.metrics.clear();
    o.report.clear();
    o.tensorboard.clear();
  }
  if (o.checkpoint.resume != o_.checkpoint.resume) resumed_ = false;  // a new run to resume
  o_ = std::move(o);
}

Trainer& TrainSession::trainer() {
  if (!trainer_) fail("the model has not been built yet: train (fit) first");
  return *trainer_;
}

void TrainSession::abort_job() {
  if (mpi_) mpi_->abort(failure_message(who_), 1);
}

int TrainSession::run() {
  return ending_job_on_failure([&] { return run_here(); });
}

int TrainSession::run_here() {
  if (o_.data.empty()) fail("--data is required");
  FitHooks hooks;
  const Dataset data = open(o_.data);
  const FitResult r = fit(data, hooks);
  return r.signal ? 128 + r.signal : 0;
}

Dataset TrainSession::open(const std::string& path) {
  return ending_job_on_failure([&] { return open_here(path); });
}

void TrainSession::build(const Dataset& data) {
  ending_job_on_failure([&] { return build_here(data); });
}

Dataset TrainSession::open_here(const std::string& path) {
  Dataset data = load_dataset(path, o_.data_options);
  if (o_.cache.empty()) return data;
  if (data.format != DataFormat::Folder)
    fail("--cache packs an image folder; {} is {}", path, data.description);
  build(data);
  const FeedPlan plan = plan_feed(data, feeds_, {o_.run.target, o_.run.transforms});
  std::error_code ec;
  // Under mpirun rank 0 makes the pack while the others wait for it (on a folder every rank sees).
  const bool packs = !mpi_ || mpi_->rank() == 0;
  if (packs && !std::filesystem::exists(o_.cache, ec)) {
    PackOptions po;
    po.size = plan.images.eval_resize();
    po.val_split = o_.data_options.val_split;
    po.workers = o_.run.workers > 0 ? o_.run.workers : ThreadPool::hardware_threads();
    fmt::print("cache    packing {} into {} (shorter side {}) ...\n", path, o_.cache, po.size);
    std::fflush(stdout);
    PackSummary ps = write_pack(path, o_.cache, po);
    fmt::print("cache    {} training + {} test images, {}\n", ps.train, ps.test, mib(ps.bytes));
  }
  if (mpi_) {
    // Unwatched: packing may take hours; a rank 0 that fails ends the job (abort), one that dies
    // is ended by mpirun.
    mpi_->wait_for_rank0();
    if (!std::filesystem::exists(o_.cache, ec))
      fail(
          "--cache {}: rank 0 made the pack, but this rank does not see it: put it on a folder "
          "every rank shares, or make it on each machine first with cb-pack",
          o_.cache);
  }
  Dataset packed = load_pack_dataset(o_.cache, path);
  packed.skipped = data.skipped;  // the folder's listing skips stay reported
  return packed;
}

void TrainSession::build_here(const Dataset& data) {
  if (trainer_) return;
  const SessionOptions& o = o_;
  ImportResult r = import_for(o, data);
  if (o.num_classes) {
    std::string out = o.output_name;  // else the output the loss picks, else the first one
    if (out.empty()) {
      try {
        out = choose_loss(r.graph, o.loss, "").output;
      } catch (const Error&) {  // none fits yet (a [N,1] score, say): the new head makes it fit
      }
    }
    const HeadReplacement h = replace_head(r.graph, out, o.num_classes, o.run.seed);
    head_record_ = fmt::format("{} {} {}", o.num_classes, o.run.seed, out);
    fmt::print("head     {}\n", h.describe());
    edits_.values = h.values;
    edits_.output_last_dim[h.output] = h.classes;
  }
  if (!o.freeze.empty()) {
    const int64_t n = freeze_parameters(r.graph, o.freeze);
    fmt::print("freeze   {} parameter tensor{} kept fixed\n", n, n == 1 ? "" : "s");
  }
  spec_ = pick_loss(r.graph, o, data, &loss_why_);
  check_classes(r.graph, spec_, data, o.num_classes != 0, o.program);
  loss_text_ = describe_loss(r.graph, spec_);
  feeds_ = feed_spec(r.graph, spec_);
  TrainerOptions topts = o.trainer;

  // The devices and their collective: CPU core groups (within this process's affinity: an MPI
  // launcher binds each rank) and an in-process group, GPUs and NCCL; under mpirun the job's
  // collective over every device of every process.
  std::vector<int> cores;
  const std::vector<int>& allowed = ThreadPool::allowed_cores();
  for (int c = 0; c < o.threads; ++c)
    cores.push_back(allowed[static_cast<size_t>(c) % allowed.size()]);
  CudaOptions cuda_opts;
  cuda_opts.tf32 = o.tf32;
  cuda_opts.deterministic = o.deterministic;
  devs_ = make_devices(o.devices, cores, cuda_opts);
  model_hash_ = file_hash(o.model);  // checkpoints and the ranks' agreement
  if (mpi_) {
    // Every rank must run the same job: refused before the first step, naming each difference.
    mpi_->require_same({{"crossbow version", CB_VERSION},
                        {"model (hash)", model_hash_},
                        {"devices per process", std::to_string(devs_.size())},
                        {"--batch-size", std::to_string(topts.batch)},
                        {"--learners", o.auto_learners ? "auto" : std::to_string(topts.learners)},
                        {"training examples", std::to_string(data.train_size())},
                        {"test examples", std::to_string(data.test_size())},
                        {"--seed", std::to_string(o.run.seed)},
                        {"--steps/--epochs", fmt::format("{}/{}", o.run.steps, o.run.epochs)}});
    colls_ = make_collectives(o.devices, devs_, *mpi_);
    fmt::print(
        "ranks    {} processes (mpirun) x {} device{}; sums: {}, timeout {:.0f} s\n", mpi_->size(),
        devs_.size(), devs_.size() == 1 ? "" : "s",
        is_cuda_spec(o.devices)
            ? std::string("NCCL across every GPU of the job")
            : std::string("each process's devices in turn, chained from rank 0 to the last, which "
                          "broadcasts the total (the order of one process with every device)"),
        o.collective_timeout);
  } else {
    colls_ = make_collectives(o.devices, devs_);
  }
  Placement where;
  for (size_t d = 0; d < devs_.size(); ++d) {
    where.devices.push_back(devs_[d].get());
    where.collectives.push_back(colls_[d].get());
  }
  trainer_ = std::make_unique<Trainer>(r.graph, spec_, topts, where);
  const Value& out =
      trainer_->model().training_graph().graph.value(trainer_->model().training_graph().output);
  const int64_t const_weights = param_stats(r.graph).constant_node_tensors;
  fmt::print(
      "model    {}: {} parameters{}, output '{}' {}\n", o.model, trainer_->model().param_count(),
      const_weights ? fmt::format(" ({} tensors the file stores as Constant nodes)", const_weights)
                    : "",
      out.name, to_string(out.shape));
  std::fflush(stdout);
}

std::vector<RunRecorder::RankNumbers> TrainSession::rank_numbers(const RunSummary& s) {
  std::vector<RunRecorder::RankNumbers> out;
  if (!mpi_) return out;
  const Trainer& t = *trainer_;
  char host[256] = "?";
  gethostname(host, sizeof host - 1);
  const double mine = static_cast<double>(s.images) * t.local_learners() / t.total_learners();
  const std::vector<std::string> all = mpi_->all_gather(
      fmt::format("{} {} {} {:a} {:a}", host, s.examples_made, s.test_examples_made,
                  t.timing().phase_a_s > 0 ? mine / t.timing().phase_a_s : 0.0, s.data_wait_s));
  for (size_t r = 0; r < all.size(); ++r) {
    RunRecorder::RankNumbers n;
    n.rank = static_cast<int>(r);
    std::istringstream in(all[r]);
    std::string ips, wait;
    in >> n.host >> n.examples_made >> n.test_examples_made >> ips >> wait;
    n.compute_per_s = std::strtod(ips.c_str(), nullptr);
    n.data_wait_s = std::strtod(wait.c_str(), nullptr);
    out.push_back(n);
  }
  return out;
}

CheckpointJob TrainSession::checkpoint_job() const {
  CheckpointJob job;
  if (!mpi_) return job;
  job.rank = mpi_->rank();
  job.ranks = mpi_->size();
  job.all_gather = [m = mpi_.get()](const std::string& text) { return m->all_gather(text); };
  return job;
}

CheckpointMeta TrainSession::checkpoint_meta(const Dataset& data) const {
  CheckpointMeta meta;
  meta.model_hash = model_hash_;
  meta.data = data_text_;
  meta.batch = o_.trainer.batch;
  meta.command = o_.command_line;
  meta.model_path = std::filesystem::absolute(o_.model).string();
  meta.loss = loss_record(spec_);
  meta.head = head_record_;
  meta.freeze = o_.freeze;
  (void)data;
  return meta;
}

FitResult TrainSession::fit(const Dataset& data, const FitHooks& hooks) {
  return ending_job_on_failure([&] { return fit_here(data, hooks); });
}

FitResult TrainSession::fit_here(const Dataset& data, const FitHooks& hooks) {
  const SessionOptions& o = o_;
  if (!o.output.empty()) check_writable_folder(o.output, "--output");
  if (!o.report.empty()) check_writable_folder(o.report, "--report");
  const ExportForm form = o.output_training ? ExportForm::Training : ExportForm::Inference;
  BatchStream* stream = hooks.sources.train;
  // Locks the checkpoint folder for the whole fit: before the data is read and before --resume
  // reads the folder, so that a second run on it is refused at once.
  CheckpointPolicy checkpoints(o.checkpoint, o.command_line, checkpoint_job());
  build(data);
  Trainer& trainer = *trainer_;
  TrainerOptions topts = o.trainer;
  RunOptions ropts = o.run;
  if (!stream && topts.batch > data.train_size())
    fail("--batch-size {} is larger than the {} training examples", topts.batch, data.train_size());
  // The data against the model's inputs and target, before anything runs.
  const FeedOptions fopts{ropts.target, ropts.transforms};
  std::optional<FeedPlan> plan;
  if (!stream) {
    plan = plan_feed(data, feeds_, fopts);
    check_targets(data, true, feeds_, *plan, "training");
    check_indices(data, true, feeds_, *plan);
  }
  if (data.test_size() > 0) {
    const FeedPlan test_plan = plan_feed(data, feeds_, fopts);
    check_targets(data, false, feeds_, test_plan, "test");
    check_indices(data, false, feeds_, test_plan);
  }
  RunRecorder rec(o.metrics, o.report, o.tensorboard);
  if (data.tensors() || stream) rec.set_unit("examples");
  data_text_ = run_data_text(data, stream);
  // GPUs: the learners' threads only enqueue work, so half the cores decode data.
  const int workers = ropts.workers > 0 ? ropts.workers
                      : is_cuda_spec(o.devices)
                          ? default_workers(std::max(1, ThreadPool::hardware_threads() / 2))
                          : default_workers(o.threads);
  const int64_t spe = stream ? stream->batches_per_pass : data.train_size() / topts.batch;
  // The reset rules make the learners' mean a large-batch SGD, which takes the large-batch
  // recipe's warm-up (docs/sma.md: "Many learners"): over the first epochs unless --warmup-steps is
  // given.
  const bool rule_warmup = ropts.schedule.warmup_steps == 0 && spe > 0 &&
                           trainer.total_learners() > 1 && resets_learners(trainer.rule());
  const int64_t warmup_epochs = reset_rule_warmup_epochs(trainer.total_learners());
  if (rule_warmup) ropts.schedule.warmup_steps = warmup_epochs * spe;
  const double lr = ropts.schedule.lr;
  ropts.auto_tune = o.auto_learners;
  ropts.progress_interval_s = rec.progress_interval_s();
  RunStart start;
  start.options = &o;
  start.trainer = &trainer;
  start.data = &data;
  start.stream = stream;
  start.plan = plan ? &*plan : nullptr;
  start.trainer_options = topts;
  start.run = ropts;
  start.loss_text = loss_text_ + loss_why_;
  start.workers = workers;
  start.batches_per_epoch = spe;
  start.rule_warmup = rule_warmup;
  start.warmup_epochs = warmup_epochs;
  announce_run(start, rec);

  Callbacks cbs;
  rec.attach(cbs, trainer, lr, o.program);
  bool wrote = false;      // --output holds a model of this run
  bool hook_stop = false;  // a hook asked to stop
  cbs.on_eval = [&, report = cbs.on_eval](const EvalReport& p) {
    report(p);
    if (!o.output.empty()) {
      save(o.output, form);
      wrote = true;
    }
    std::fflush(stdout);
    if (hooks.on_eval && hooks.on_eval(rec.records().back())) {
      hook_stop = true;
      trainer.request_stop();
    }
  };
  // Checkpoints, resume and signals.
  const CheckpointMeta meta = checkpoint_meta(data);
  // A later fit of the session numbers its steps on from the earlier fits' (its schedule and data
  // position start afresh): the steps it logs and the checkpoints it writes continue theirs.
  ropts.first_step = loop_.step;
  LoopState loop;
  loop.step = ropts.first_step;
  if (!o.checkpoint.resume.empty() && !resumed_) {
    CheckpointJob job = checkpoint_job();
    job.devices = trainer.devices();  // this layout's learners, whatever the checkpoint's was
    LoadedCheckpoint ck = load_for_resume(o.checkpoint.resume, meta, job);
    if (!mpi_ || mpi_->rank() == 0)
      for (const std::string& why : ck.refused)
        fmt::print(stderr, "{}: warning: checkpoint refused (the previous one is used): {}\n",
                   o.program, why);
    const LoadedCheckpoint::Layout& was = ck.saved;
    const int ranks = mpi_ ? mpi_->size() : 1;
    if (!o.auto_learners && was.learners != int64_t{o.trainer.learners} * trainer.ranks())
      fail(
          "--resume {}: the checkpoint holds {} learners in all ({} process{} x {} device{} x {}); "
          "this run has {} ({} process{} x {} device{} x --learners {}): resume with the same "
          "number of learners in all (the learners are the state)",
          ck.path, was.learners, was.processes, was.processes == 1 ? "" : "es", was.devices,
          was.devices == 1 ? "" : "s", was.learners / (was.processes * was.devices),
          int64_t{o.trainer.learners} * trainer.ranks(), ranks, ranks == 1 ? "" : "es",
          trainer.devices(), trainer.devices() == 1 ? "" : "s", o.trainer.learners);
    loop = restore(trainer, ck.state);
    ropts.first_step = 0;  // the resumed run's own numbering
    const bool moved = was.processes != ranks || was.devices != trainer.devices();
    fmt::print("resume   {}: step {}{}, {} learner{}/device{}\n", ck.path, loop.step,
               spe > 0 ? fmt::format(", epoch {:.2f}",
                                     static_cast<double>(loop.consumed) / static_cast<double>(spe))
                       : std::string(),
               trainer.learners_per_device(), trainer.learners_per_device() == 1 ? "" : "s",
               moved ? fmt::format(" (saved by {} process{} x {} device{}: the same {} learners "
                                   "on this layout)",
                                   was.processes, was.processes == 1 ? "" : "es", was.devices,
                                   was.devices == 1 ? "" : "s", was.learners)
                     : std::string());
  }
  resumed_ = true;
  checkpoints.start(loop, spe, meta);
  auto checkpoint = [&](const LoopState& st) {
    const std::string path = checkpoints.save(trainer, st);
    rec.clear_progress();
    fmt::print("saved    {} (step {}{})\n", path, st.step,
               mpi_ ? fmt::format(", a part from each of {} ranks", mpi_->size()) : std::string());
    std::fflush(stdout);
  };
  cbs.after_step = [&](const LoopState& st) {
    if (hook_stop) return true;
    if (hooks.should_stop && hooks.should_stop()) {
      hook_stop = true;
      return true;
    }
    if (mpi_) {  // every rank stops after the same step when any of them was signalled
      if (g_signal != 0) trainer.request_stop();
      if (trainer.stop_agreed()) {
        if (g_signal == 0) g_signal = SIGTERM;  // another rank's signal
        return true;
      }
    } else if (g_signal != 0) {
      return true;
    }
    if (mpi_ && checkpoints.by_clock()) {
      // Each rank's clock differs: rank 0's decides, carried by the next step's agreement.
      if (trainer.checkpoint_agreed())
        checkpoint(st);
      else if (mpi_->rank() == 0 && checkpoints.due(st))
        trainer.request_checkpoint();
    } else if (checkpoints.due(st)) {
      checkpoint(st);
    }
    return false;
  };
  g_signal = 0;
  const SignalScope signals(o.handle_signals);

  FitResult res;
  RunSummary& s = res.summary;
  try {
    rec.start_clock();
    s = train(trainer, data, ropts, cbs, &loop, &hooks.sources);
  } catch (const Error&) {
    rec.clear_progress();
    loop_ = loop;
    if (wrote)
      fmt::print(stderr, "{}: {} holds the last good model (the last evaluation)\n", o.program,
                 o.output);
    throw;
  }
  loop_ = loop;
  rec.clear_progress();
  if (checkpoints.enabled()) checkpoint(loop);
  if (s.stopped) {
    res.stopped = true;
    res.signal = hook_stop ? 0 : g_signal;
    if (!o.output.empty()) {
      save(o.output, form);
      fmt::print("wrote    {} (the model at step {})\n", o.output, loop.step);
    }
    if (res.signal)
      fmt::print(stderr, "{}: stopped by {} after step {}{}\n", o.program,
                 res.signal == SIGINT ? "SIGINT" : "SIGTERM", loop.step,
                 o.checkpoint.dir.empty()
                     ? std::string(" (no --checkpoint-dir: the run cannot be resumed)")
                     : fmt::format("; continue with --resume {}", o.checkpoint.dir));
    else
      fmt::print("stopped  after step {}, as the caller asked\n", loop.step);
    res.records = rec.records();
    return res;
  }
  if (mpi_) {
    // The central model must be the same bits on every rank: checked, not assumed.
    const std::vector<float> z = trainer.central(0);
    const std::string h =
        mpi_->require_identical(z.data(), z.size() * sizeof(float), "the central model");
    fmt::print(stderr, "{}: z fnv1a {}\n", who_, h);
    fmt::print("ranks    z identical on all {} ranks (fnv1a {})\n", mpi_->size(), h);
  }
  rec.summary(s, trainer, ropts, data.skipped->count(), rank_numbers(s));
  // A run resumed at its end (a checkpoint of its last step: the run was stopped or killed after
  // writing it) trains nothing and evaluates without on_eval: the output is written here.
  if (!o.output.empty() && !wrote) save(o.output, form);
  if (!o.output.empty())
    fmt::print("wrote    {} ({} form)\n", o.output, o.output_training ? "training" : "inference");
  res.records = rec.records();
  return res;
}

EvalResult TrainSession::evaluate(const Dataset& data) {
  Trainer& t = trainer();
  if (data.test_size() == 0) fail("nothing to evaluate: the data has no examples");
  const FeedPlan plan = plan_feed(data, feeds_, {o_.run.target, o_.run.transforms});
  check_targets(data, false, feeds_, plan, "test");
  check_indices(data, false, feeds_, plan);
  PipelineOptions po;
  po.batch = o_.trainer.eval_batch > 0 ? o_.trainer.eval_batch : o_.trainer.batch;
  po.train = false;
  po.workers = o_.run.workers > 0 ? o_.run.workers : 0;
  if (!batches_inline(plan, po.batch) && po.workers == 0) po.workers = default_workers(o_.threads);
  BatchPipeline ev(data.test_size(), make_batches(data, false, plan, o_.run.seed), po);
  return t.evaluate([&](Batch& b) { return ev.next(b); });
}

EvalResult TrainSession::evaluate(const NextBatch& next) { return trainer().evaluate(next); }

std::vector<Tensor> TrainSession::predict(const Batch& batch) {
  return trainer().eval_outputs(batch);
}

void TrainSession::save(const std::string& path, ExportForm form) {
  export_trained(o_.model, path, trainer().trained_tensors(), form, edits_);
}

std::string TrainSession::save_checkpoint() {
  if (o_.checkpoint.dir.empty()) fail("no --checkpoint-dir to write the checkpoint into");
  Trainer& t = trainer();
  CheckpointPolicy checkpoints(o_.checkpoint, o_.command_line, checkpoint_job());
  const CheckpointMeta meta = checkpoint_meta(Dataset{});
  checkpoints.start(loop_, 0, meta);
  return checkpoints.save(t, loop_);
}

}  // namespace cb
