// What a fit says before its first step: cb-train's start-up lines (loss, data, inputs, train, sma,
// layout, precision, average, memory) and the run's config record, both from what the session
// has decided (session/train_session.cpp); nothing here decides anything.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/data/feed.h"
#include "session/options.h"
#include "session/recorder.h"
#include "sma/train_loop.h"

namespace cb {

// What the start of a fit is, as the session settled it.
struct RunStart {
  const SessionOptions* options = nullptr;
  const Trainer* trainer = nullptr;
  const Dataset* data = nullptr;
  const BatchStream* stream = nullptr;  // the caller's batches, or null (then `plan` is set)
  const FeedPlan* plan = nullptr;
  TrainerOptions trainer_options;
  RunOptions run;  // as the loop gets them (warm-up, auto-tune and progress interval settled)
  std::string loss_text;  // the loss line's text
  int workers = 0;        // the data pipeline's threads
  int64_t batches_per_epoch = 0;
  bool rule_warmup = false;  // the warm-up is the reset rules' (over warmup_epochs epochs)
  int64_t warmup_epochs = 0;
};

// The run's data in a few words, for the config record and the checkpoints: "DIR (FORMAT): N
// training, M test images", or the caller's batches.
std::string run_data_text(const Dataset& data, const BatchStream* stream);

// Prints the start-up lines and records the config (rec.record), in that order.
void announce_run(const RunStart& s, RunRecorder& rec);

}  // namespace cb
