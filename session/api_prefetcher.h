// The public API's prefetcher (session/api.cpp): the caller's training batches (Data::batches),
// converted to the model's feed and fetched ahead on a thread of their own, one pass at a time,
// while the learners train on the batches before them.
#pragma once

#include <crossbow/crossbow.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

#include "runtime/data/batch.h"

namespace crossbow {

// The caller's batches, converted and fetched ahead on a thread of their own. One pass at a time:
// the thread starts a pass when the loop asks (a one-shot source is never started twice unasked).
class Prefetcher {
 public:
  // `first` is the pass already started (with its first batch in hand), or empty.
  // `convert` makes a batch of the model's feed from the caller's arrays (an empty batch: one
  // to drop); `depth` batches at most are kept ahead (at least 2).
  Prefetcher(std::function<Data::Next()> start, Data::Next first, Arrays first_batch,
             std::function<void(const Arrays&, cb::Batch&)> convert, size_t depth);
  ~Prefetcher();
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  // Asks the thread for the next pass.
  void start_pass();

  // The next batch of the current pass; false at its end. Rethrows the source's failure.
  bool next(cb::Batch& b);

  int64_t dropped() const { return dropped_; }

 private:
  struct Item {
    cb::Batch batch;
    bool end = false;
    std::exception_ptr error;
  };
  // Queues `it` (waiting for room); false when the prefetcher is closing.
  bool push(Item it);
  // The thread: starts a pass when one is asked for, converts and queues its batches, then an
  // end item (or the source's failure).
  void work();

  std::function<Data::Next()> start_;
  Data::Next first_;
  Arrays first_batch_;
  std::function<void(const Arrays&, cb::Batch&)> convert_;
  size_t depth_;
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<Item> q_;
  int64_t passes_asked_ = 0;
  bool quit_ = false;
  std::atomic<int64_t> dropped_{0};
  std::thread thread_;
};

}  // namespace crossbow
