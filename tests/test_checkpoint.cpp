// Checkpoints (sma/checkpoint.h) and cb-train's --checkpoint-dir / --resume / signals: a run
// stopped, written to disk, read back and continued is bit-identical to one never stopped (1 and
// 3 learners); a truncated or bit-flipped checkpoint is refused and the previous one used;
// SIGTERM leaves a loadable checkpoint and model and --resume finishes the run; a resume with
// other settings is refused naming them; output folders are checked before training.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <thread>

#include "importer/onnx_importer.h"
#include "runtime/data/dataset.h"
#include "runtime/data/load_dataset.h"
#include "sma/checkpoint.h"
#include "sma/train_loop.h"
#include "tests/test_util.h"
#include "tests/trainer_util.h"

using namespace cb;
namespace fs = std::filesystem;
using test::contains;
using test::error_of;
using test::read_text;
using test::TempDir;

namespace {

const char* const kFashion = "/usr/share/datasets/fashion-mnist";
constexpr std::string_view kFashionHow =
    "Fashion-MNIST, Debian's dataset-fashion-mnist (./setup.sh installs it)";

Dataset small_fashion() {
  Dataset d = load_dataset(kFashion);
  d.train = std::make_shared<ImageSet>(test::mem(d.train).head(256));
  d.test = std::make_shared<ImageSet>(test::mem(d.test).head(64));
  return d;
}

std::vector<uint8_t> bytes_of(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}
void write_bytes(const std::string& p, const std::vector<uint8_t>& b) {
  std::ofstream(p, std::ios::binary)
      .write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

}  // namespace

TEST_CASE("checkpoint: stopped, written, read back and continued = never stopped (1, 3 learners)") {
  if (!test::need(fs::path(kFashion) / "train-images-idx3-ubyte.gz", kFashionHow)) return;
  const Dataset data = small_fashion();
  ImportResult r = import_model(CB_SOURCE_DIR "/models/lenet5_op17.onnx");
  // The slowmo rule stopped in the middle of its sync period (every 4 steps): the outer momentum
  // (z - z_prev) and the learners' local steps continue.
  // AdamW's moments and per-learner step counts under SMA come back as SGD's velocity does.
  struct Config {
    int learners;
    SmaRule rule;
    OptimizerKind opt = OptimizerKind::Sgd;
  };
  for (const Config c :
       {Config{1, SmaRule::Paper}, Config{3, SmaRule::Paper}, Config{3, SmaRule::SlowMo},
        Config{3, SmaRule::Paper, OptimizerKind::AdamW}}) {
    const int learners = c.learners;
    CAPTURE(learners);
    CAPTURE(sma_rule_name(c.rule));
    CAPTURE(optimizer_name(c.opt));
    TempDir d(fmt::format("k{}{}{}", learners, sma_rule_name(c.rule), optimizer_name(c.opt)));
    test::CpuSetup s;
    s.opts.batch = 8;
    s.opts.learners = learners;
    s.opts.sma_rule = c.rule;
    s.opts.optimizer = c.opt;
    if (c.rule == SmaRule::SlowMo) s.opts.sync_every = 4;
    s.cores = {0, 1};
    RunOptions ro;
    ro.steps = 24;
    ro.seed = 4;
    ro.schedule.kind = LrScheduleKind::Cosine;
    ro.schedule.lr = 0.05;
    ro.eval_every = 10;
    const LossSpec loss = detect_loss(r.graph);
    test::CpuTrainer whole(r.graph, loss, s);
    LoopState lw;
    train(whole, data, ro, {}, &lw);

    test::CpuTrainer a(r.graph, loss, s);
    LoopState la;
    Callbacks stop;
    stop.after_step = [](const LoopState& st) { return st.step == 9; };  // as a signal would
    RunSummary sa = train(a, data, ro, stop, &la);
    CHECK(sa.stopped);
    CHECK(la.step == 9);
    CheckpointMeta meta{"hash", "data", 8, "cb-train ...", "", ""};
    const std::string path = write_checkpoint(d.path.string(), capture(a, la), meta);
    CHECK(fs::path(path).filename() == "ckpt-0000000009");
    LoadedCheckpoint ck = load_checkpoint(d.path.string());
    CHECK(ck.path == path);
    CHECK(ck.refused.empty());
    CHECK(ck.meta.batch == 8);
    CHECK(ck.meta.command == "cb-train ...");

    test::CpuTrainer b(r.graph, loss, s);
    LoopState lb = restore(b, ck.state);
    RunSummary sb = train(b, data, ro, {}, &lb);
    CHECK(!sb.stopped);
    CHECK(lb.step == 24);
    CHECK(lb.consumed == lw.consumed);
    CHECK(b.central() == whole.central());
    for (int l = 0; l < whole.local_learners(); ++l) {
      CHECK(b.replica(l) == whole.replica(l));
      CHECK(b.velocity(l) == whole.velocity(l));
    }
    const ModelState mw = whole.state(), mb = b.state();
    for (size_t l = 0; l < mw.learners.size(); ++l) {
      CHECK(mb.learners[l].opt2 == mw.learners[l].opt2);
      CHECK(mb.learners[l].steps == mw.learners[l].steps);
    }
  }
}

TEST_CASE("checkpoint: empty tensors (no BatchNorm state, no second moment) round-trip") {
  // A model without BatchNorm has an empty learner state: its tensor is read back into an empty
  // vector, whose data() may be null (a copy of zero bytes there must not reach memcpy).
  TempDir d("empty");
  TrainState s;
  s.model.learners_per_device = 1;
  s.model.steps = 3;
  s.model.z = {1.0f, -2.0f, 0.5f};
  s.model.z_prev = {0.25f, 0.0f, -1.0f};
  LearnerState l;
  l.params = {1.5f, -2.5f, 3.0f};
  l.opt1 = {0.0f, 0.125f, -0.5f};
  l.steps = 3;  // opt2 and state empty
  s.model.learners.push_back(l);
  s.loop.started = true;
  s.loop.step = 3;
  s.loop.consumed = 3;
  write_checkpoint(d.path.string(), s, CheckpointMeta{"hash", "data", 4, "cmd", "", ""});
  const LoadedCheckpoint ck = load_checkpoint(d.path.string());
  REQUIRE(ck.state.model.learners.size() == 1);
  const LearnerState& b = ck.state.model.learners[0];
  CHECK(b.state.empty());
  CHECK(b.opt2.empty());
  CHECK(b.params == l.params);
  CHECK(b.opt1 == l.opt1);
  CHECK(b.steps == 3);
  CHECK(ck.state.model.z == s.model.z);
  CHECK(ck.state.model.z_prev == s.model.z_prev);
  CHECK(ck.state.loop.step == 3);
}

TEST_CASE("checkpoint: the model a state holds equals the trainer's (z or the mean, averaged BN)") {
  // ResNet-20 has BatchNorm statistics, averaged over the learners; with alpha 0 the parameters
  // are the learners' average too. model_tensors() (what cb-export writes) must equal
  // Trainer::trained_tensors() (what cb-train --output writes) bit for bit, also after a trip
  // through a checkpoint on disk.
  ImportResult r = import_model(CB_SOURCE_DIR "/models/resnet20_op17.onnx");
  const LossSpec loss = detect_loss(r.graph);
  struct Setup {
    int devices, learners;
    std::optional<double> alpha;
  };
  for (const Setup& st : {Setup{1, 3, {}}, Setup{2, 2, {}}, Setup{1, 2, 0.0}, Setup{1, 1, {}}}) {
    CAPTURE(st.devices);
    CAPTURE(st.learners);
    test::CpuSetup s;
    s.opts.batch = 2;
    s.opts.learners = st.learners;
    s.opts.alpha = st.alpha;
    s.devices = st.devices;
    s.cores = st.devices == 1 ? std::vector<int>{0} : std::vector<int>{0, 1};
    test::CpuTrainer t(r.graph, loss, s);
    std::mt19937 rng(3);
    for (int step = 0; step < 2; ++step) {
      std::vector<Batch> bs(static_cast<size_t>(t.local_learners()));
      for (Batch& b : bs) {
        b.inputs.resize(1);
        b.inputs[0].dtype = DType::F32;
        b.inputs[0].dims = {2, 3, 32, 32};
        b.inputs[0].bytes.resize(2 * 3 * 32 * 32 * sizeof(float));
        for (int64_t i = 0; i < b.inputs[0].numel(); ++i)
          b.inputs[0].data<float>()[i] = std::uniform_real_distribution<float>(-1, 1)(rng);
        b.target.dtype = DType::I64;
        b.target.dims = {2};
        b.target.bytes.resize(2 * sizeof(int64_t));
        for (int i = 0; i < 2; ++i) b.target.data<int64_t>()[i] = static_cast<int64_t>(rng() % 10);
      }
      t.step(bs, 0.05);
    }
    const ModelState ms = t.state();
    CHECK(ms.model_is_mean == (st.learners * st.devices == 1 || st.alpha == 0.0));
    const std::map<std::string, Tensor> want = t.trained_tensors();
    auto same = [&](const std::map<std::string, Tensor>& got) {
      REQUIRE(got.size() == want.size());
      for (const auto& [name, tensor] : want) {
        CAPTURE(name);
        REQUIRE(got.count(name));
        CHECK(got.at(name).dims == tensor.dims);
        CHECK(got.at(name).bytes == tensor.bytes);
      }
    };
    same(model_tensors(t.model(), ms));
    TempDir d("tensors");
    LoopState lp;
    lp.started = true;
    lp.step = 2;
    CheckpointMeta meta{"hash", "data", 2, "cb-train ...", "/x/model.onnx", loss_record(loss)};
    write_checkpoint(d.path.string(), TrainState{ms, lp}, meta);
    LoadedCheckpoint ck = load_checkpoint(d.path.string());
    CHECK(ck.meta.model_path == "/x/model.onnx");
    CHECK(parse_loss_record(ck.meta.loss, "x").kind == loss.kind);
    CHECK(parse_loss_record(ck.meta.loss, "x").output == loss.output);
    same(model_tensors(t.model(), ck.state.model));
  }
}

TEST_CASE("checkpoint: truncated or bit-flipped checkpoints are refused, the previous one used") {
  if (!test::need(fs::path(kFashion) / "train-images-idx3-ubyte.gz", kFashionHow)) return;
  const Dataset data = small_fashion();
  ImportResult r = import_model(CB_SOURCE_DIR "/models/lenet5_op17.onnx");
  TempDir d("corrupt");
  test::CpuSetup s;
  s.opts.batch = 8;
  s.opts.learners = 2;
  s.cores = {0, 1};
  test::CpuTrainer t(r.graph, detect_loss(r.graph), s);
  RunOptions ro;
  ro.steps = 6;
  ro.eval_every = 100;
  const std::string dir = d.path.string();
  const CheckpointMeta meta{"h", "d", 8, "c", "", ""};
  Callbacks cb;
  cb.after_step = [&](const LoopState& st) {
    if (st.step == 2 || st.step == 4) write_checkpoint(dir, capture(t, st), meta);
    return false;
  };
  LoopState loop;
  train(t, data, ro, cb, &loop);
  REQUIRE(list_checkpoints(dir).size() == 2);
  const std::string newest = list_checkpoints(dir).back();
  CHECK(load_checkpoint(dir).path == newest);
  for (const char* file : {"tensors.bin", "MANIFEST"}) {
    const std::string f = newest + "/" + file;
    const std::vector<uint8_t> good = bytes_of(f);
    REQUIRE(good.size() > 64);
    std::vector<size_t> offsets = {0, 1, good.size() / 3, good.size() / 2, good.size() - 1};
    for (size_t cut : offsets) {
      CAPTURE(file);
      CAPTURE(cut);
      write_bytes(f, std::vector<uint8_t>(good.begin(), good.begin() + static_cast<long>(cut)));
      LoadedCheckpoint ck = load_checkpoint(dir);
      CHECK(ck.state.loop.step == 2);  // the previous one
      REQUIRE(ck.refused.size() == 1);
      CHECK(contains(ck.refused[0], newest));
      const std::string e = error_of([&] { load_checkpoint(newest); });
      CHECK((contains(e, "corrupt") || contains(e, "truncated") || contains(e, "incomplete")));
    }
    for (size_t at : {size_t{3}, good.size() / 2, good.size() - 10}) {
      CAPTURE(file);
      CAPTURE(at);
      std::vector<uint8_t> flipped = good;
      flipped[at] ^= 0x10;
      write_bytes(f, flipped);
      CHECK(load_checkpoint(dir).state.loop.step == 2);
    }
    write_bytes(f, good);
    CHECK(load_checkpoint(dir).state.loop.step == 4);
  }
  // A .tmp left by a crash is not a checkpoint.
  fs::create_directories(dir + "/ckpt-0000000009.tmp");
  CHECK(load_checkpoint(dir).state.loop.step == 4);
  prune_checkpoints(dir, 1);
  CHECK(list_checkpoints(dir).size() == 1);
  CHECK(!fs::exists(dir + "/ckpt-0000000009.tmp"));  // and the pruning removes it
  // A checkpoint of a step that is there already (a run resumed at its end writes its last one
  // again) takes its place in one exchange: no moment without it, no .tmp left.
  LoadedCheckpoint again = load_checkpoint(dir);
  REQUIRE(!again.state.model.z.empty());
  again.state.model.z[0] += 1;
  CHECK(write_checkpoint(dir, again.state, again.meta) == again.path);
  CHECK(load_checkpoint(dir).state.model.z == again.state.model.z);
  CHECK(list_checkpoints(dir).size() == 1);
  for (const auto& e : fs::directory_iterator(dir)) CHECK(e.path().extension() != ".tmp");
  CHECK(contains(error_of([&] { load_checkpoint(dir + "/nothing"); }), "no such checkpoint"));
}

TEST_CASE("cb-train: SIGTERM leaves a checkpoint and the model; --resume finishes the run") {
  if (!test::need(fs::path(kFashion) / "train-images-idx3-ubyte.gz", kFashionHow)) return;
  TempDir d("sigterm");
  const std::string model = CB_SOURCE_DIR "/models/lenet5_op17.onnx";
  const std::string common = fmt::format(
      "{} --data {} --learners 3 --steps 2000 --test-limit 200 --output {} --checkpoint-dir {} ",
      model, kFashion, d / "out.onnx", d / "ck");
  const std::string log = d / "run.log";
  const pid_t pid = test::start_cb_train(common + "--checkpoint-every 20", log);
  // Wait for the first checkpoint, then stop it.
  for (int i = 0; i < 600 && !contains(read_text(log), "saved "); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  kill(pid, SIGTERM);
  const int rc = test::exit_status(pid);
  const std::string out = read_text(log);
  INFO(out);
  CHECK(rc == 128 + SIGTERM);
  CHECK(contains(out, "stopped by SIGTERM after step"));
  CHECK(contains(out, "--resume"));
  LoadedCheckpoint ck = load_checkpoint(d / "ck");
  const int64_t stopped = ck.state.loop.step;
  CHECK(stopped >= 20);
  CHECK(stopped < 2000);
  CHECK(contains(ck.meta.command, "--checkpoint-every 20"));
  CHECK(import_model(d / "out.onnx").graph.nodes.size() > 0);

  // cb-export writes the model of the checkpoint: the very file --output wrote at the stop.
  auto run = [&](const std::string& args, const std::string& log) {
    const int rc =
        std::system(fmt::format("{}/cb-export {} > {} 2>&1", CB_BINARY_DIR, args, log).c_str());
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  };
  CHECK(run(fmt::format("{} --out {}", d / "ck", d / "exp.onnx"), d / "exp.log") == 0);
  CHECK(contains(read_text(d / "exp.log"), "inference form"));
  CHECK(bytes_of(d / "exp.onnx") == bytes_of(d / "out.onnx"));
  CHECK(run(fmt::format("{} --out {} --training", ck.path, d / "exp_t.onnx"), d / "t.log") == 0);
  CHECK(import_model(d / "exp_t.onnx").graph.nodes.size() > 0);
  // Another model is refused, naming the hashes; a missing checkpoint is named; usage is 2.
  CHECK(run(fmt::format("{} --out {} --model {}/models/mlp_op17.onnx", d / "ck", d / "x.onnx",
                        CB_SOURCE_DIR),
            d / "bad.log") == 1);
  CHECK(contains(read_text(d / "bad.log"), "is not the model the checkpoint was trained from"));
  CHECK(!fs::exists(d / "x.onnx"));
  CHECK(run(fmt::format("{} --out {}", d / "nothing", d / "x.onnx"), d / "bad.log") == 1);
  CHECK(contains(read_text(d / "bad.log"), d / "nothing"));
  CHECK(run(d / "ck", d / "bad.log") == 2);  // --out is required

  // Other settings are refused, naming them; the same ones finish the run.
  std::string e;
  const int bad = test::exit_status(
      test::start_cb_train(common + "--batch-size 8 --resume " + d / "ck", d / "bad.log"));
  e = read_text(d / "bad.log");
  CHECK(bad == 1);
  CHECK(contains(e, "--batch-size: 8 (checkpoint: 16)"));
  const int ok =
      test::exit_status(test::start_cb_train(common + "--resume " + d / "ck", d / "resume.log"));
  e = read_text(d / "resume.log");
  INFO(e);
  CHECK(ok == 0);
  CHECK(contains(e, fmt::format("resume   {}", ck.path)));
  CHECK(contains(e, "done     2000 steps"));
}

TEST_CASE("cb-train: output and checkpoint folders are checked before anything is trained") {
  TempDir d("folders");
  const std::string model = CB_SOURCE_DIR "/models/lenet5_op17.onnx";
  auto run = [&](const std::string& args) {
    const int rc = test::exit_status(test::start_cb_train(
        fmt::format("{} --data {} --steps 1 {}", model, kFashion, args), d / "log"));
    return std::pair{rc, read_text(d / "log")};
  };
  auto [rc, out] = run("--output " + d / "missing/out.onnx");
  CHECK(rc == 1);
  CHECK(contains(out, "does not exist"));
  CHECK(!contains(out, "data "));  // refused before the data was read
  fs::create_directories(d / "ro");
  fs::permissions(d / "ro", fs::perms::owner_read | fs::perms::owner_exec);
  if (access((d / "ro").c_str(), W_OK) != 0) {  // root may write anyway
    std::tie(rc, out) = run("--output " + d / "ro/out.onnx");
    CHECK(rc == 1);
    CHECK(contains(out, "not writable"));
  }
  // Usage errors: exit 2, before the data is read.
  std::tie(rc, out) = run("--checkpoint-every 5x --checkpoint-dir " + d / "ck");
  CHECK(rc == 2);
  CHECK(contains(out, "--checkpoint-every '5x'"));
  std::tie(rc, out) = run("--checkpoint-every 5");
  CHECK(rc == 2);
  CHECK(contains(out, "--checkpoint-every needs --checkpoint-dir"));
  for (const char* bad :
       {"--optimizer adam", "--learners two", "--momentum 1", "--loss hinge", "--devices gpu",
        "--augment flip", "--data-format zip", "--target-accuracy 2", "--memory-budget 12X"}) {
    CAPTURE(bad);
    std::tie(rc, out) = run(bad);
    CHECK(rc == 2);
    CHECK(!contains(out, "data "));
    CHECK(contains(out, "cb-train: error: "));
  }
}

TEST_CASE("cb-train: a full disk is a clear error, and the last good checkpoint stays loadable") {
  if (!test::need(fs::path(kFashion) / "train-images-idx3-ubyte.gz", kFashionHow)) return;
  TempDir d("full");
  const std::string disk = d / "disk";
  fs::create_directories(disk);
  // 2 MiB: one LeNet-5 checkpoint of one learner (about 1 MiB) fits, a second does not.
  if (std::system(fmt::format("mount -t tmpfs -o size=2m tmpfs {} 2>/dev/null", disk).c_str()) !=
      0) {
    MESSAGE("skipped: cannot mount a small tmpfs here (needs root)");
    return;
  }
  const std::string model = CB_SOURCE_DIR "/models/lenet5_op17.onnx";
  const int rc = test::exit_status(test::start_cb_train(
      fmt::format("{} --data {} --learners 1 --steps 400 --eval-every 50 --test-limit 100 "
                  "--checkpoint-dir {}/ck --checkpoint-every 50 --keep 5 --metrics {}/m.jsonl",
                  model, kFashion, disk, disk),
      d / "log"));
  const std::string out = read_text(d / "log");
  INFO(out);
  CHECK(rc == 1);
  CHECK(contains(out, "No space left on device"));
  // The newest checkpoint written before the disk filled up is intact; the failed one is gone.
  LoadedCheckpoint ck = load_checkpoint(disk + "/ck");
  CHECK(ck.refused.empty());
  CHECK(ck.state.loop.step >= 50);
  CHECK(contains(out, fmt::format("saved    {} (step {})", ck.path, ck.state.loop.step)));
  CHECK(contains(
      out, fmt::format("ckpt-{:010d}.tmp/tensors.bin: write failed", ck.state.loop.step + 50)));
  CHECK(list_checkpoints(disk + "/ck").size() == static_cast<size_t>(ck.state.loop.step / 50));
  for (const auto& e : fs::directory_iterator(disk + "/ck")) CHECK(e.path().extension() != ".tmp");
  CHECK(std::system(fmt::format("umount {}", disk).c_str()) == 0);
}
