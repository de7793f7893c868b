// The public API's prefetcher (see api_prefetcher.h).
#include "session/api_prefetcher.h"

#include <algorithm>
#include <utility>

namespace crossbow {

Prefetcher::Prefetcher(std::function<Data::Next()> start, Data::Next first, Arrays first_batch,
                       std::function<void(const Arrays&, cb::Batch&)> convert, size_t depth)
    : start_(std::move(start)),
      first_(std::move(first)),
      first_batch_(std::move(first_batch)),
      convert_(std::move(convert)),
      depth_(std::max<size_t>(depth, 2)) {
  thread_ = std::thread([this] { work(); });
}

Prefetcher::~Prefetcher() {
  {
    std::lock_guard<std::mutex> l(m_);
    quit_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Prefetcher::start_pass() {
  {
    std::lock_guard<std::mutex> l(m_);
    ++passes_asked_;
  }
  cv_.notify_all();
}

bool Prefetcher::next(cb::Batch& b) {
  std::unique_lock<std::mutex> l(m_);
  cv_.wait(l, [&] { return !q_.empty(); });
  Item it = std::move(q_.front());
  q_.pop_front();
  cv_.notify_all();
  if (it.error) std::rethrow_exception(it.error);
  if (it.end) return false;
  b = std::move(it.batch);
  return true;
}

bool Prefetcher::push(Item it) {
  std::unique_lock<std::mutex> l(m_);
  cv_.wait(l, [&] { return quit_ || q_.size() < depth_; });
  if (quit_) return false;
  q_.push_back(std::move(it));
  cv_.notify_all();
  return true;
}

void Prefetcher::work() {
  int64_t passes_done = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> l(m_);
      cv_.wait(l, [&] { return quit_ || passes_asked_ > passes_done; });
      if (quit_) return;
    }
    try {
      Data::Next next;
      if (passes_done == 0 && first_) {
        next = std::move(first_);
        Item it;
        convert_(first_batch_, it.batch);
        first_batch_.clear();
        if (!push(std::move(it))) return;
      } else {
        next = start_();
        if (!next) throw Error(Error::Kind::Input, "the batch source started no pass");
      }
      for (;;) {
        Arrays a;
        if (!next(a)) break;
        Item it;
        convert_(a, it.batch);
        if (it.batch.size() == 0) {  // a short last batch
          ++dropped_;
          continue;
        }
        if (!push(std::move(it))) return;
      }
      Item end;
      end.end = true;
      if (!push(std::move(end))) return;
    } catch (...) {
      Item it;
      it.error = std::current_exception();
      push(std::move(it));
      return;
    }
    ++passes_done;
  }
}

}  // namespace crossbow
