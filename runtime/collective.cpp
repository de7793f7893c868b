// In-process shared-memory collective (see collective.h): ranks publish their buffers, meet at a
// barrier, each sums its slice of the elements over all ranks (in rank order) and writes the
// result into every rank's buffer, and they meet again before anyone touches its buffer. Only for
// host-memory devices: peers read each other's buffers directly. With a ProcessLink the group is
// one process's part of a job: the sums are chained through the processes in order (the link's
// comment) and agreements gathered from every process, so the order is the global rank order.
#include "runtime/collective.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>

#include "runtime/error.h"

namespace cb {

namespace {

// Elements per chunk of a two-level sum: the next process adds chunk c while this one adds c + 1.
constexpr int64_t kChunk = int64_t{1} << 20;

class Group {
 public:
  Group(int ranks, double timeout_s, std::shared_ptr<ProcessLink> link)
      : ranks_(ranks),
        timeout_(std::chrono::duration<double>(timeout_s)),
        link_(std::move(link)),
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
    if (processes() == 1) {
      const auto [b, e] = slice(rank, 0, n);
      for (int64_t i = b; i < e; ++i) {
        float s = data_[0][i];
        for (int r = 1; r < ranks_; ++r) s = s + data_[static_cast<size_t>(r)][i];
        for (int r = 0; r < ranks_; ++r) data_[static_cast<size_t>(r)][i] = s;
      }
      barrier(rank);
      return;
    }
    // Several processes: a chunk at a time, rank 0's thread receives the earlier processes' running
    // sum, every rank adds this process's devices onto its slice, and rank 0's thread passes it on.
    const int p = link_->process(), last = link_->processes() - 1;
    if (rank == 0) scratch_.resize(static_cast<size_t>(n));  // read by the others after a barrier
    for (int64_t c = 0; c < n; c += kChunk) {
      const int64_t m = std::min(kChunk, n - c);
      if (rank == 0 && p > 0) link_->receive_prefix(scratch_.data() + c, m);
      barrier(rank);
      const auto [b, e] = slice(rank, c, m);
      for (int64_t i = b; i < e; ++i) {
        float s = p > 0 ? scratch_[static_cast<size_t>(i)] + data_[0][i] : data_[0][i];
        for (int r = 1; r < ranks_; ++r) s = s + data_[static_cast<size_t>(r)][i];
        scratch_[static_cast<size_t>(i)] = s;
      }
      barrier(rank);
      if (rank == 0 && p < last) link_->send_prefix(scratch_.data() + c, m);
    }
    if (rank == 0) {
      link_->flush();
      link_->broadcast_from_last(scratch_.data(), n);
    }
    barrier(rank);
    const auto [b, e] = slice(rank, 0, n);
    for (int r = 0; r < ranks_; ++r)
      std::copy(scratch_.begin() + b, scratch_.begin() + e, data_[static_cast<size_t>(r)] + b);
    barrier(rank);
  }

  void agree(int rank, std::span<double> v, std::span<const ReduceOp> ops) {
    CB_CHECK(ops.size() == 1 || ops.size() == v.size());
    host_[static_cast<size_t>(rank)] = v;
    barrier(rank);
    for (const std::span<double>& h : host_)
      if (h.size() != v.size())
        fail("collective: ranks disagree on the number of values to agree on ({} vs {})", h.size(),
             v.size());
    if (rank == 0) {  // every rank's values in global rank order, reduced by this thread
      const size_t len = v.size();
      mine_.clear();
      for (const std::span<double>& h : host_) mine_.insert(mine_.end(), h.begin(), h.end());
      const std::vector<double>* all = &mine_;
      if (processes() > 1) {
        all_.resize(mine_.size() * static_cast<size_t>(processes()));
        link_->all_gather(mine_, all_);
        all = &all_;
      }
      out_.assign(all->begin(), all->begin() + static_cast<std::ptrdiff_t>(len));
      for (size_t at = len; at < all->size(); at += len)
        for (size_t i = 0; i < len; ++i) {
          const double x = (*all)[at + i];
          out_[i] = (ops.size() == 1 ? ops[0] : ops[i]) == ReduceOp::Sum ? out_[i] + x
                                                                         : std::max(out_[i], x);
        }
    }
    barrier(rank);  // out_ is rewritten only after the next call's first barrier
    std::copy(out_.begin(), out_.end(), v.begin());
  }

  int ranks() const { return ranks_; }
  int processes() const { return link_ ? link_->processes() : 1; }
  int first_rank() const { return link_ ? link_->process() * ranks_ : 0; }

 private:
  // This rank's share [b, e) of the elements [c, c + m).
  std::pair<int64_t, int64_t> slice(int rank, int64_t c, int64_t m) const {
    const int64_t per = (m + ranks_ - 1) / ranks_;
    const int64_t b = std::min(m, per * rank), e = std::min(m, b + per);
    return {c + b, c + e};
  }

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
          missing += fmt::format("{}{}", missing.empty() ? "" : ", ", r + first_rank());
      fail("collective: rank{} {} did not arrive within {:.0f} s (rank {} waited)",
           missing.find(',') == std::string::npos ? "" : "s", missing, timeout_.count(),
           rank + first_rank());
    }
  }

  const int ranks_;
  const std::chrono::duration<double> timeout_;
  std::shared_ptr<ProcessLink> link_;  // null: this process is the whole group
  std::vector<float*> data_;
  std::vector<std::span<double>> host_;
  std::vector<int64_t> n_;
  std::vector<float> scratch_;            // a two-level sum's running sum
  std::vector<double> mine_, all_, out_;  // agree(): rank 0's thread
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  std::vector<uint8_t> arrived_mask_ = std::vector<uint8_t>(static_cast<size_t>(ranks_));
  uint64_t generation_ = 0;
};

class SharedMemoryCollective final : public Collective {
 public:
  SharedMemoryCollective(std::shared_ptr<Group> g, int rank) : g_(std::move(g)), rank_(rank) {}
  int rank() const override { return g_->first_rank() + rank_; }
  int size() const override { return g_->ranks() * g_->processes(); }
  void allreduce_sum(Device& dev, Stream stream, float* data, int64_t n) override {
    if (size() == 1) return;
    CB_CHECK(dev.caps().host_memory);  // peers read this buffer directly
    dev.synchronize(stream);           // the work that produced `data` is done
    g_->allreduce(rank_, data, n);
  }
  void agree(std::span<double> values, std::span<const ReduceOp> ops) override {
    if (size() > 1) g_->agree(rank_, values, ops);
  }

 private:
  std::shared_ptr<Group> g_;
  int rank_;  // in this process's group
};

std::vector<std::unique_ptr<Collective>> make_group(int ranks, double timeout_s,
                                                    std::shared_ptr<ProcessLink> link) {
  CB_CHECK(ranks >= 1 && timeout_s > 0);
  auto g = std::make_shared<Group>(ranks, timeout_s, std::move(link));
  std::vector<std::unique_ptr<Collective>> v;
  for (int r = 0; r < ranks; ++r) v.push_back(std::make_unique<SharedMemoryCollective>(g, r));
  return v;
}

}  // namespace

std::vector<std::unique_ptr<Collective>> make_shared_memory_collectives(int ranks,
                                                                        double timeout_s) {
  return make_group(ranks, timeout_s, nullptr);
}

std::vector<std::unique_ptr<Collective>> make_two_level_collectives(
    int ranks, std::shared_ptr<ProcessLink> link, double timeout_s) {
  CB_CHECK(link != nullptr);
  return make_group(ranks, timeout_s, std::move(link));
}

}  // namespace cb
