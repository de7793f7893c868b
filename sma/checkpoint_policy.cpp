// When checkpoints are written and whether a checkpoint may resume this run (see checkpoint.h).
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "runtime/error.h"
#include "sma/checkpoint.h"

namespace cb {

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

CheckpointEvery CheckpointEvery::parse(const std::string& s) {
  CheckpointEvery e;
  size_t pos = 0;
  try {
    e.n = std::stod(s, &pos);
  } catch (const std::exception&) {
    pos = 0;
  }
  const std::string unit = s.substr(pos);
  if (pos == 0 || !(e.n > 0) || (unit != "" && unit != "e" && unit != "m"))
    fail("--checkpoint-every '{}': expected N (steps), Ne (epochs) or Nm (minutes), N > 0", s);
  e.unit = unit.empty() ? 's' : unit[0];
  if (e.unit == 's' && e.n != std::floor(e.n))
    fail("--checkpoint-every '{}': a number of steps is a whole number", s);
  return e;
}

void CheckpointOptions::validate() const {
  if (keep < 1) fail("--keep must be at least 1, got {}", keep);
  CheckpointEvery::parse(every.empty() ? "1e" : every);
  if (!every.empty() && dir.empty()) fail("--checkpoint-every needs --checkpoint-dir");
}

CheckpointPolicy::CheckpointPolicy(const CheckpointOptions& o, const std::string& command,
                                   CheckpointJob job)
    : o_(o),
      every_(CheckpointEvery::parse(o.every.empty() ? "1e" : o.every)),
      job_(std::move(job)) {
  o_.validate();
  if (o_.dir.empty() || job_.rank != 0) return;  // rank 0 makes, checks and locks the folder
  std::error_code ec;
  std::filesystem::create_directories(o_.dir, ec);
  if (ec) fail("--checkpoint-dir {}: cannot create it: {}", o_.dir, ec.message());
  if (access(o_.dir.c_str(), W_OK) != 0)
    fail("--checkpoint-dir {}: the folder is not writable ({})", o_.dir, std::strerror(errno));
  lock_.emplace(o_.dir, command);
}

void CheckpointPolicy::start(const LoopState& loop, int64_t batches_per_epoch,
                             CheckpointMeta meta) {
  if (batches_per_epoch <= 0 && every_.unit == 'e' && !o_.dir.empty()) {
    if (!o_.every.empty())
      fail(
          "--checkpoint-every {}: the training data is a stream of unknown length, which has no "
          "epochs; give N (steps) or Nm (minutes)",
          o_.every);
    every_ = {kUnknownLengthMinutes, 'm'};  // the default 1e: an epoch never ends
  }
  per_epoch_ = std::max<int64_t>(1, batches_per_epoch);
  meta_ = std::move(meta);
  last_time_s_ = now_s();
  if (every_.unit == 'e')
    last_epochs_ = loop.consumed / std::max<int64_t>(1, std::llround(every_.n * per_epoch_));
}

bool CheckpointPolicy::due(const LoopState& loop) {
  if (o_.dir.empty()) return false;
  bool due = false;
  if (every_.unit == 's') {
    due = loop.step % static_cast<int64_t>(every_.n) == 0;
  } else if (every_.unit == 'e') {
    const auto per = std::max<int64_t>(1, std::llround(every_.n * static_cast<double>(per_epoch_)));
    due = loop.consumed / per > last_epochs_;
    if (due) last_epochs_ = loop.consumed / per;
  } else {
    due = now_s() - last_time_s_ >= every_.n * 60;
  }
  return due;
}

std::string CheckpointPolicy::save(const Trainer& t, const LoopState& loop) {
  const std::string path = write_checkpoint(o_.dir, capture(t, loop), meta_, job_);
  if (job_.rank == 0) prune_checkpoints(o_.dir, o_.keep);
  last_time_s_ = now_s();
  return path;
}

LoadedCheckpoint load_for_resume(const std::string& path, const CheckpointMeta& now,
                                 const CheckpointJob& job) {
  LoadedCheckpoint ck = load_checkpoint(path, job);
  std::string diff;
  if (ck.meta.model_hash != now.model_hash)
    diff += fmt::format("\n  model: {} is not the model of the checkpoint (hash {} vs {})",
                        now.model_path, now.model_hash, ck.meta.model_hash);
  if (ck.meta.data != now.data)
    diff += fmt::format("\n  data: {} (checkpoint: {})", now.data, ck.meta.data);
  if (ck.meta.batch != now.batch)
    diff += fmt::format("\n  --batch-size: {} (checkpoint: {})", now.batch, ck.meta.batch);
  if (ck.meta.freeze != now.freeze)
    diff += fmt::format("\n  --freeze: {} (checkpoint: {})", fmt::join(now.freeze, " "),
                        fmt::join(ck.meta.freeze, " "));
  if (ck.meta.head != now.head)
    diff += fmt::format("\n  --num-classes and --seed: a new head \"{}\" (checkpoint: \"{}\")",
                        now.head, ck.meta.head);
  if (!diff.empty())
    fail("--resume {}: this run differs from the checkpoint's:{}\n(the checkpoint's command: {})",
         ck.path, diff, ck.meta.command);
  return ck;
}

}  // namespace cb
