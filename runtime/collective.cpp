// In-process shared-memory collective (see collective.h): ranks publish their buffers, meet at a
// barrier, each sums its slice of the elements over all ranks (in rank order) and writes the
// result into every rank's buffer, and they meet again before anyone touches its buffer. Only for
// host-memory devices: peers read each other's buffers directly.
#include "runtime/collective.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>

#include "runtime/error.h"

namespace cb {

namespace {

class Group {
 public:
  Group(int ranks, double timeout_s)
      : ranks_(ranks),
        timeout_(std::chrono::duration<double>(timeout_s)),
        data_(static_cast<size_t>(ranks)),
        host_(static_cast<size_t>(ranks)),
        n_(static_cast<size_t>(ranks)) {}

  void allreduce(int rank, float* data, int64_t n) {
    data_[static_cast<size_t>(rank)] = data;
    n_[static_cast<size_t>(rank)] = n;
    barrier(rank);
    for (int64_t m : n_)
      if (m != n)
        fail("collective: ranks disagree on the length of an all-reduce ({} vs {} elements)", m, n);
    const int64_t per = (n + ranks_ - 1) / ranks_;
    const int64_t b = std::min(n, per * rank), e = std::min(n, b + per);
    for (int64_t i = b; i < e; ++i) {
      float s = data_[0][i];
      for (int r = 1; r < ranks_; ++r) s = s + data_[static_cast<size_t>(r)][i];
      for (int r = 0; r < ranks_; ++r) data_[static_cast<size_t>(r)][i] = s;
    }
    barrier(rank);
  }

  void agree(int rank, std::span<double> v, ReduceOp op) {
    host_[static_cast<size_t>(rank)] = v;
    barrier(rank);
    std::vector<double> out(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      double x = host_[0][i];
      for (int r = 1; r < ranks_; ++r) {
        const std::span<double>& h = host_[static_cast<size_t>(r)];
        if (h.size() != v.size())
          fail("collective: ranks disagree on the number of values to agree on ({} vs {})",
               h.size(), v.size());
        x = op == ReduceOp::Sum ? x + h[i] : std::max(x, h[i]);
      }
      out[i] = x;
    }
    barrier(rank);  // everyone has read every rank's values
    std::copy(out.begin(), out.end(), v.begin());
  }

  int ranks() const { return ranks_; }

 private:
  void barrier(int rank) {
    std::unique_lock<std::mutex> l(mu_);
    const uint64_t gen = generation_;
    arrived_mask_[static_cast<size_t>(rank)] = 1;
    if (++arrived_ == ranks_) {
      arrived_ = 0;
      std::fill(arrived_mask_.begin(), arrived_mask_.end(), 0);
      ++generation_;
      cv_.notify_all();
      return;
    }
    if (!cv_.wait_for(l, timeout_, [&] { return generation_ != gen; })) {
      std::string missing;
      for (int r = 0; r < ranks_; ++r)
        if (!arrived_mask_[static_cast<size_t>(r)])
          missing += fmt::format("{}{}", missing.empty() ? "" : ", ", r);
      fail("collective: rank{} {} did not arrive within {:.0f} s (rank {} waited)",
           missing.find(',') == std::string::npos ? "" : "s", missing, timeout_.count(), rank);
    }
  }

  const int ranks_;
  const std::chrono::duration<double> timeout_;
  std::vector<float*> data_;
  std::vector<std::span<double>> host_;
  std::vector<int64_t> n_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  std::vector<uint8_t> arrived_mask_ = std::vector<uint8_t>(static_cast<size_t>(ranks_));
  uint64_t generation_ = 0;
};

class SharedMemoryCollective final : public Collective {
 public:
  SharedMemoryCollective(std::shared_ptr<Group> g, int rank) : g_(std::move(g)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return g_->ranks(); }
  void allreduce_sum(Device& dev, Stream stream, float* data, int64_t n) override {
    if (g_->ranks() == 1) return;
    CB_CHECK(dev.caps().host_memory);  // peers read this buffer directly
    dev.synchronize(stream);           // the work that produced `data` is done
    g_->allreduce(rank_, data, n);
  }
  void agree(std::span<double> values, ReduceOp op) override {
    if (g_->ranks() > 1) g_->agree(rank_, values, op);
  }

 private:
  std::shared_ptr<Group> g_;
  int rank_;
};

}  // namespace

std::vector<std::unique_ptr<Collective>> make_shared_memory_collectives(int ranks,
                                                                        double timeout_s) {
  CB_CHECK(ranks >= 1 && timeout_s > 0);
  auto g = std::make_shared<Group>(ranks, timeout_s);
  std::vector<std::unique_ptr<Collective>> v;
  for (int r = 0; r < ranks; ++r) v.push_back(std::make_unique<SharedMemoryCollective>(g, r));
  return v;
}

}  // namespace cb
