// In-process shared-memory all-reduce (see collective.h): ranks publish their buffers, meet at a
// barrier, each sums its slice of the elements over all ranks (in rank order) and writes the
// result into every rank's buffer, and they meet again before anyone touches its buffer.
#include "sma/collective.h"

#include <algorithm>
#include <condition_variable>
#include <mutex>

#include "runtime/error.h"

namespace cb {

namespace {

class Group {
 public:
  explicit Group(int ranks)
      : ranks_(ranks), data_(static_cast<size_t>(ranks)), n_(static_cast<size_t>(ranks)) {}

  void allreduce(int rank, float* data, int64_t n) {
    data_[static_cast<size_t>(rank)] = data;
    n_[static_cast<size_t>(rank)] = n;
    barrier();
    for (int64_t m : n_) CB_CHECK(m == n);  // every rank reduces the same length
    const int64_t per = (n + ranks_ - 1) / ranks_;
    const int64_t b = std::min(n, per * rank), e = std::min(n, b + per);
    for (int64_t i = b; i < e; ++i) {
      float s = data_[0][i];
      for (int r = 1; r < ranks_; ++r) s = s + data_[static_cast<size_t>(r)][i];
      for (int r = 0; r < ranks_; ++r) data_[static_cast<size_t>(r)][i] = s;
    }
    barrier();
  }
  int ranks() const { return ranks_; }

 private:
  void barrier() {
    std::unique_lock<std::mutex> l(mu_);
    const uint64_t gen = generation_;
    if (++arrived_ == ranks_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
      return;
    }
    cv_.wait(l, [&] { return generation_ != gen; });
  }

  const int ranks_;
  std::vector<float*> data_;
  std::vector<int64_t> n_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
};

class SharedMemoryCollective final : public Collective {
 public:
  SharedMemoryCollective(std::shared_ptr<Group> g, int rank) : g_(std::move(g)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return g_->ranks(); }
  void allreduce_sum(float* data, int64_t n) override {
    if (g_->ranks() > 1) g_->allreduce(rank_, data, n);
  }

 private:
  std::shared_ptr<Group> g_;
  int rank_;
};

}  // namespace

std::vector<std::unique_ptr<Collective>> make_shared_memory_collectives(int ranks) {
  CB_CHECK(ranks >= 1);
  auto g = std::make_shared<Group>(ranks);
  std::vector<std::unique_ptr<Collective>> v;
  for (int r = 0; r < ranks; ++r) v.push_back(std::make_unique<SharedMemoryCollective>(g, r));
  return v;
}

}  // namespace cb
