// The batch pipeline: worker threads that make the batches of a seeded order (decoding,
// transforming and batching the examples through the feed, runtime/data/feed.h) ahead of the
// learners.
//
// Pipeline (BatchPipeline): the batches of the global batch sequence (BatchOrder: batch b of the
// run is batch b % batches_per_epoch of epoch b / batches_per_epoch), made by `workers` threads
// into a bounded ring of `depth` ready batches, handed out in order by next(). The training loop
// gives the K learners of a step the next K batches (learner j takes every K-th), so each learner
// has its own share of every epoch and all learners together see each example once. The time the
// caller waits in next() is the learners' wait for data. An example that cannot be loaded is
// recorded in the data set's SkipLog and replaced by the next loadable one in the set (the same
// replacement on every run); an evaluation pass (sequential, the last batch partial) likewise.
#pragma once

#include <atomic>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/data/batch.h"
#include "runtime/data/dataset.h"
#include "runtime/data/feed.h"

namespace cb {

// The default number of pipeline workers: the cores the learners leave free, at least 1.
int default_workers(int learner_threads);

struct PipelineOptions {
  int64_t batch = 1;
  bool train = true;    // true: the endless training sequence (BatchOrder, drop_last); false:
                        // one sequential pass over every example (the last batch partial)
  bool shuffle = true;  // train
  uint64_t seed = 0;    // order (and, for image examples, augmentation)
  int64_t start = 0;    // train: the batch the sequence starts at (a resumed run's position)
  int64_t limit = 0;    // evaluation: > 0 passes over the first `limit` examples only
  int workers = 1;      // threads; 0: each batch is made in next(), on the caller's thread (for
                        // batches cheaper to copy than to hand between threads)
  int depth = 0;        // ready batches kept ahead; 0: 2 x workers + 2
  // train: only some of the sequence's batches are made (one process's learners under MPI):
  // batch start + i belongs to learner i % period; with period > 0 only learners
  // [first, first + take) are made and handed out, in sequence order. The others are drawn from
  // the order (so the kept ones are the same batches) but never read or decoded.
  // Evaluation (take 1): only batches first, first + period, ... of the pass (one process's
  // share).
  int64_t period = 0, first = 0, take = 0;
};

class BatchPipeline {
 public:
  // Batches of `count` examples made by `make`.
  BatchPipeline(int64_t count, MakeBatch make, const PipelineOptions& o);
  // Image examples (image_batches, augmenting when o.train and spec.augment).
  BatchPipeline(std::shared_ptr<const Source> examples, const TransformSpec& spec,
                const PipelineOptions& o, std::shared_ptr<SkipLog> skipped);
  ~BatchPipeline();
  BatchPipeline(const BatchPipeline&) = delete;
  BatchPipeline& operator=(const BatchPipeline&) = delete;

  int64_t batches_per_epoch() const { return order_ ? order_->batches_per_epoch() : 0; }
  // The next batch; false when an evaluation pass is over. Rethrows a worker's failure (a
  // corrupt pack, no loadable example).
  bool next(Batch& out);
  // Image examples: the images ([n, C, H, W] of spec.dtype) and labels (i64 [n]).
  bool next(Tensor& images, Tensor& labels);
  double wait_seconds() const { return wait_s_; }  // the caller's time blocked in next()
  // Examples made so far (read and decoded, for image examples) by the workers or next().
  int64_t examples_made() const { return made_.load(); }

 private:
  struct Slot {
    int64_t seq = -1;  // which batch of the sequence it holds
    bool ready = false;
    Batch batch;
    std::exception_ptr error;
  };
  void work();
  // The example indices of batch `seq` of the sequence (the training order's next batch, or the
  // evaluation pass's batch seq) into idx; returns the epoch it belongs to.
  int64_t draw(int64_t seq, std::vector<int64_t>& idx);

  int64_t count_;
  MakeBatch make_;
  PipelineOptions o_;
  std::unique_ptr<BatchOrder> order_;  // train only
  int64_t end_ = -1;                   // evaluation: number of batches; train: none (-1)
  int64_t eval_count_ = 0;             // evaluation: examples in the pass
  std::vector<Slot> slots_;
  std::mutex m_;
  std::condition_variable ready_cv_, free_cv_;
  int64_t claim_ = 0, head_ = 0;  // next sequence number to claim / to hand out
  bool stop_ = false;
  double wait_s_ = 0;
  int64_t drawn_ = 0;  // train: batches drawn from the order since `start` (kept or not)
  std::vector<int64_t> skip_idx_;
  std::atomic<int64_t> made_{0};
  std::vector<std::thread> threads_;
  std::vector<int64_t> inline_idx_;  // workers 0: the batch's indices
};

}  // namespace cb
