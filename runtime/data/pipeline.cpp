// The batch pipeline (see pipeline.h).
#include "runtime/data/pipeline.h"

#include <algorithm>
#include <chrono>

#include "runtime/error.h"

namespace cb {

int default_workers(int learner_threads) {
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, hw - learner_threads);
}

BatchPipeline::BatchPipeline(std::shared_ptr<const Source> examples, const TransformSpec& spec,
                             const PipelineOptions& o, std::shared_ptr<SkipLog> skipped)
    : BatchPipeline(
          examples ? examples->size() : 0,
          image_batches(examples, spec, o.train && spec.augment, o.seed, std::move(skipped)), o) {}

BatchPipeline::BatchPipeline(int64_t count, MakeBatch make, const PipelineOptions& o)
    : count_(count), make_(std::move(make)), o_(o) {
  CB_CHECK(make_ && o.workers >= 0 && o.batch >= 1);
  if (o.train) {
    order_ = std::make_unique<BatchOrder>(count_, o.batch, o.shuffle, o.seed);
    order_->seek(o.start);
    CB_CHECK(o.period == 0 || (o.take >= 1 && o.first >= 0 && o.first + o.take <= o.period));
  } else {
    eval_count_ = o.limit > 0 ? std::min(o.limit, count_) : count_;
    end_ = (eval_count_ + o.batch - 1) / o.batch;
    if (o.period > 0) {  // batches first, first + period, ... of the pass
      CB_CHECK(o.take == 1 && o.first >= 0 && o.first < o.period);
      end_ = end_ > o.first ? (end_ - o.first + o.period - 1) / o.period : 0;
    }
  }
  if (o.workers == 0) return;  // made in next(), on the caller's thread
  const int depth = o.depth > 0 ? o.depth : 2 * o.workers + 2;
  slots_.resize(static_cast<size_t>(depth));
  threads_.reserve(static_cast<size_t>(o.workers));
  try {
    for (int w = 0; w < o.workers; ++w) threads_.emplace_back([this] { work(); });
  } catch (...) {
    {
      std::lock_guard lock(m_);
      stop_ = true;
    }
    free_cv_.notify_all();
    for (std::thread& t : threads_) t.join();
    fail("cannot start the data pipeline's {} worker threads (the system refused a thread)",
         o.workers);
  }
}

BatchPipeline::~BatchPipeline() {
  {
    std::lock_guard lock(m_);
    stop_ = true;
  }
  free_cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void BatchPipeline::work() {
  std::vector<int64_t> idx;
  for (;;) {
    int64_t seq = 0, epoch = 0;
    {
      std::unique_lock lock(m_);
      free_cv_.wait(lock, [&] {
        return stop_ || ((end_ < 0 || claim_ < end_) &&
                         claim_ < head_ + static_cast<int64_t>(slots_.size()));
      });
      if (stop_) return;
      seq = claim_++;
      // The sequence's indices are drawn in claim order, so the order is the same with any
      // number of workers.
      epoch = draw(seq, idx);
    }
    Slot& s = slots_[static_cast<size_t>(seq % static_cast<int64_t>(slots_.size()))];
    try {
      s.error = nullptr;
      make_(idx, epoch, s.batch);
      made_ += static_cast<int64_t>(idx.size());
    } catch (...) {
      s.error = std::current_exception();
    }
    {
      std::lock_guard lock(m_);
      s.seq = seq;
      s.ready = true;
    }
    ready_cv_.notify_all();
  }
}

int64_t BatchPipeline::draw(int64_t seq, std::vector<int64_t>& idx) {
  if (order_) {
    if (o_.period > 0) {  // the batches of other learners before this one: drawn, not made
      const int64_t at = seq / o_.take * o_.period + o_.first + seq % o_.take;
      skip_idx_.resize(static_cast<size_t>(o_.batch));
      for (; drawn_ < at; ++drawn_) order_->next(skip_idx_.data());
    }
    ++drawn_;
    const int64_t epoch = order_->epoch();
    idx.resize(static_cast<size_t>(o_.batch));
    order_->next(idx.data());
    return epoch;
  }
  const int64_t at = o_.period > 0 ? seq * o_.period + o_.first : seq;
  const int64_t begin = at * o_.batch, n = std::min(o_.batch, eval_count_ - begin);
  idx.resize(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) idx[static_cast<size_t>(k)] = begin + k;
  return 0;
}

bool BatchPipeline::next(Tensor& images, Tensor& labels) {
  Batch b;
  if (!next(b)) return false;
  CB_CHECK(b.inputs.size() == 1);
  images = std::move(b.inputs[0]);
  labels = std::move(b.target);
  return true;
}

bool BatchPipeline::next(Batch& out) {
  if (o_.workers == 0) {
    if (end_ >= 0 && head_ >= end_) return false;
    const auto t0 = std::chrono::steady_clock::now();
    const int64_t epoch = draw(head_++, inline_idx_);
    make_(inline_idx_, epoch, out);
    made_ += static_cast<int64_t>(inline_idx_.size());
    wait_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return true;
  }
  std::unique_lock lock(m_);
  if (end_ >= 0 && head_ >= end_) return false;
  Slot& s = slots_[static_cast<size_t>(head_ % static_cast<int64_t>(slots_.size()))];
  if (!(s.ready && s.seq == head_)) {
    const auto t0 = std::chrono::steady_clock::now();
    ready_cv_.wait(lock, [&] { return s.ready && s.seq == head_; });
    wait_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  if (s.error) {
    std::exception_ptr e = s.error;
    s.error = nullptr;
    std::rethrow_exception(e);
  }
  std::swap(out, s.batch);
  s.ready = false;
  ++head_;
  lock.unlock();
  free_cv_.notify_all();
  return true;
}

}  // namespace cb
