// MPI processes (see mpi_job.h).
#include "sma/mpi_job.h"

#include <fmt/format.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <sstream>
#include <thread>

#include "runtime/checksum.h"
#include "runtime/error.h"

#ifdef CB_HAVE_MPI
#include <mpi.h>
#endif

namespace cb {

bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"})
    if (std::getenv(v)) return true;
  return false;
}

#ifndef CB_HAVE_MPI

bool built_with_mpi() { return false; }
MpiJob::MpiJob(double timeout_s) : timeout_s_(timeout_s) {
  fail(
      "this process was started by an MPI launcher, but this cb-train was built without MPI: "
      "install OpenMPI (apt-get install libopenmpi-dev openmpi-bin; ./setup.sh does) and build "
      "again");
}
MpiJob::~MpiJob() = default;
std::vector<std::unique_ptr<Collective>> MpiJob::collectives(int) { return {}; }
std::string MpiJob::broadcast(const std::string& text) { return text; }
void MpiJob::wait_for_rank0() {}
std::vector<std::string> MpiJob::all_gather(const std::string&) { return {}; }
std::string MpiJob::differences(const std::vector<std::pair<std::string, std::string>>&) {
  return "";
}
void MpiJob::abort(const std::string& why, int code) {
  fmt::print(stderr, "{}\n", why);
  std::exit(code);
}

#else

bool built_with_mpi() { return true; }

namespace {

// Blocking MPI collectives (MPI's own progress loop: the lowest latency) watched by one thread:
// a call in flight for longer than the timeout (a rank died, hangs or is far slower) is named
// and the whole job aborted, so no rank is left waiting. To name the rank at fault, every other
// rank's watchdog sends rank 0 a heartbeat with its call counts four times a second (on a
// communicator of its own); rank 0's names the ranks whose heartbeats stopped (stopped, or their
// host is gone) or whose counts are behind (alive but stuck before that call).
class Watchdog {
 public:
  Watchdog(int rank, int size, double timeout_s)
      : rank_(rank), size_(size), timeout_(timeout_s), seen_(static_cast<size_t>(size)) {
    MPI_Comm_dup(MPI_COMM_WORLD, &beat_comm_);
    for (Seen& s : seen_) s.at = Clock::now();
    thread_ = std::thread([this] { run(); });
  }
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
    if (send_pending_) {
      MPI_Cancel(&send_req_);
      MPI_Request_free(&send_req_);
    }
    MPI_Comm_free(&beat_comm_);
  }
  // While a Guard lives, its call counts as in flight; `count` numbers the calls of its slot.
  class Guard {
   public:
    Guard(Watchdog& w, int slot, int64_t count, std::string what) : w_(w), slot_(slot) {
      std::lock_guard<std::mutex> lk(w_.mu_);
      w_.slots_[slot_] = {Clock::now(), std::move(what), true};
      w_.counts_[slot_] = count;
    }
    ~Guard() {
      std::lock_guard<std::mutex> lk(w_.mu_);
      w_.slots_[slot_].busy = false;
    }

   private:
    Watchdog& w_;
    int slot_;
  };

 private:
  using Clock = std::chrono::steady_clock;
  static constexpr int kSlots = 3, kTag = 7;
  struct Slot {
    Clock::time_point since;
    std::string what;
    bool busy = false;
  };
  struct Seen {
    Clock::time_point at;
    int64_t counts[kSlots] = {0, 0, 0};
  };
  static double since(Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
  }
  void heartbeat() {  // with mu_ held
    if (rank_ != 0) {
      int done = 1;
      if (send_pending_) MPI_Test(&send_req_, &done, MPI_STATUS_IGNORE);
      if (done) {
        std::copy(counts_, counts_ + kSlots, beat_);
        MPI_Isend(beat_, kSlots, MPI_INT64_T, 0, kTag, beat_comm_, &send_req_);
        send_pending_ = true;
      }
      return;
    }
    for (;;) {
      int flag = 0;
      MPI_Status st;
      MPI_Iprobe(MPI_ANY_SOURCE, kTag, beat_comm_, &flag, &st);
      if (!flag) break;
      int64_t c[kSlots];
      MPI_Recv(c, kSlots, MPI_INT64_T, st.MPI_SOURCE, kTag, beat_comm_, MPI_STATUS_IGNORE);
      Seen& s = seen_[static_cast<size_t>(st.MPI_SOURCE)];
      s.at = Clock::now();
      std::copy(c, c + kSlots, s.counts);
    }
  }
  // Rank 0's view of who is at fault for the call in `slot`.
  std::string culprits(int slot) const {
    std::string out;
    for (int r = 1; r < size_; ++r) {
      const Seen& s = seen_[static_cast<size_t>(r)];
      if (since(s.at) > std::max(2.0, timeout_ / 2))
        out +=
            fmt::format("; rank {} sent no heartbeat for {:.0f} s (stopped, or its host is gone)",
                        r, since(s.at));
      else if (s.counts[slot] < counts_[slot])
        out += fmt::format("; rank {} is alive but has not reached this call (it is at call {})", r,
                           s.counts[slot]);
    }
    return out;
  }
  void run() {
    std::unique_lock<std::mutex> lk(mu_);
    while (!stop_) {
      cv_.wait_for(lk, std::chrono::milliseconds(250));
      if (stop_) break;
      heartbeat();
      for (int i = 0; i < kSlots; ++i) {
        const Slot& s = slots_[i];
        if (!s.busy || since(s.since) <= timeout_) continue;
        fmt::print(stderr,
                   "cb-train: rank {}: {} did not complete within {:.0f} s "
                   "(--collective-timeout){}; aborting the whole job\n",
                   rank_, s.what, timeout_,
                   rank_ == 0 ? culprits(i) : std::string(": a rank died, hangs or is far slower"));
        std::fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, 3);
      }
    }
  }
  int rank_, size_;
  double timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  Slot slots_[kSlots];
  int64_t counts_[kSlots] = {0, 0, 0};
  std::vector<Seen> seen_;  // rank 0: each rank's last heartbeat
  MPI_Comm beat_comm_;
  MPI_Request send_req_;
  bool send_pending_ = false;
  int64_t beat_[kSlots];
  std::thread thread_;
};

enum Slots { kSums = 0, kAgree = 1, kStartup = 2 };

// The processes' step of the two-level collective (runtime/collective.h ProcessLink), called by
// one thread of this process at a time: the chained sum's point-to-point messages and broadcast
// on one communicator, the agreements' gathers on another. Every call is watched. The sums are
// numbered by the broadcast that ends each (one per sum on every process), so the watchdog's
// counts compare across ranks although the first process receives nothing and the last sends
// nothing.
class MpiLink final : public ProcessLink {
 public:
  MpiLink(int rank, int size, Watchdog& dog) : rank_(rank), size_(size), dog_(dog) {
    MPI_Comm_dup(MPI_COMM_WORLD, &sums_);
    MPI_Comm_dup(MPI_COMM_WORLD, &agree_);
  }
  ~MpiLink() override {
    flush();
    MPI_Comm_free(&sums_);
    MPI_Comm_free(&agree_);
  }
  int process() const override { return rank_; }
  int processes() const override { return size_; }

  void receive_prefix(float* data, int64_t n) override {
    Watchdog::Guard g(dog_, kSums, sums_done_ + 1,
                      fmt::format("the sum (call {}): receiving {} values from rank {}",
                                  sums_done_ + 1, n, rank_ - 1));
    MPI_Recv(data, count(n), MPI_FLOAT, rank_ - 1, kTag, sums_, MPI_STATUS_IGNORE);
  }
  void send_prefix(const float* data, int64_t n) override {
    MPI_Request r;
    MPI_Isend(data, count(n), MPI_FLOAT, rank_ + 1, kTag, sums_, &r);
    sends_.push_back(r);
  }
  void flush() override {
    if (sends_.empty()) return;
    Watchdog::Guard g(
        dog_, kSums, sums_done_ + 1,
        fmt::format("the sum (call {}): sending to rank {}", sums_done_ + 1, rank_ + 1));
    MPI_Waitall(static_cast<int>(sends_.size()), sends_.data(), MPI_STATUSES_IGNORE);
    sends_.clear();
  }
  void broadcast_from_last(float* data, int64_t n) override {
    ++sums_done_;
    Watchdog::Guard g(dog_, kSums, sums_done_,
                      fmt::format("the sum of {} values (call {})", n, sums_done_));
    constexpr int64_t kMax = int64_t{1} << 28;  // counts are ints
    for (int64_t at = 0; at < n; at += kMax)
      MPI_Bcast(data + at, count(std::min(kMax, n - at)), MPI_FLOAT, size_ - 1, sums_);
  }
  void all_gather(std::span<const double> mine, std::span<double> all) override {
    ++agrees_;
    Watchdog::Guard g(dog_, kAgree, agrees_,
                      fmt::format("an agreement between the ranks (call {})", agrees_));
    CB_CHECK(all.size() == mine.size() * static_cast<size_t>(size_));
    MPI_Allgather(mine.data(), count(static_cast<int64_t>(mine.size())), MPI_DOUBLE, all.data(),
                  count(static_cast<int64_t>(mine.size())), MPI_DOUBLE, agree_);
  }

 private:
  static constexpr int kTag = 11;
  static int count(int64_t n) {
    CB_CHECK(n >= 0 && n <= std::numeric_limits<int>::max());
    return static_cast<int>(n);
  }
  int rank_, size_;
  Watchdog& dog_;
  MPI_Comm sums_, agree_;
  std::vector<MPI_Request> sends_;
  int64_t sums_done_ = 0, agrees_ = 0;
};

}  // namespace

MpiJob::MpiJob(double timeout_s) : timeout_s_(timeout_s) {
  // A rank's threads share the cores it is bound to: OpenMPI's blocking calls then yield while
  // they poll instead of spinning the learners' compute off the core (an explicit setting wins).
  setenv("OMPI_MCA_mpi_yield_when_idle", "1", 0);
  int provided = 0;
  if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
    fail("MPI_Init_thread failed");
  if (provided < MPI_THREAD_MULTIPLE) {
    MPI_Finalize();
    fail("this MPI library gives thread level {} where crossbow needs MPI_THREAD_MULTIPLE ({})",
         provided, static_cast<int>(MPI_THREAD_MULTIPLE));
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  dog_ = std::make_shared<Watchdog>(rank_, size_, timeout_s_);
}

MpiJob::~MpiJob() {
  dog_.reset();
  MPI_Finalize();
}

std::vector<std::unique_ptr<Collective>> MpiJob::collectives(int devices) {
  return make_two_level_collectives(
      devices, std::make_shared<MpiLink>(rank_, size_, *std::static_pointer_cast<Watchdog>(dog_)),
      timeout_s_);
}

std::string MpiJob::broadcast(const std::string& text) { return all_gather(text)[0]; }

void MpiJob::wait_for_rank0() {
  int go = 1;
  MPI_Bcast(&go, 1, MPI_INT, 0, MPI_COMM_WORLD);
}

std::vector<std::string> MpiJob::all_gather(const std::string& text) {
  const int n = static_cast<int>(text.size());
  std::vector<int> sizes(static_cast<size_t>(size_));
  Watchdog::Guard g(*std::static_pointer_cast<Watchdog>(dog_), kStartup, ++gathers_,
                    "the start-up agreement (all_gather)");
  MPI_Allgather(&n, 1, MPI_INT, sizes.data(), 1, MPI_INT, MPI_COMM_WORLD);
  std::vector<int> offsets(static_cast<size_t>(size_));
  int total = 0;
  for (int r = 0; r < size_; ++r) {
    offsets[static_cast<size_t>(r)] = total;
    total += sizes[static_cast<size_t>(r)];
  }
  std::string all(static_cast<size_t>(total), '\0');
  MPI_Allgatherv(text.data(), n, MPI_CHAR, all.data(), sizes.data(), offsets.data(), MPI_CHAR,
                 MPI_COMM_WORLD);
  std::vector<std::string> out;
  for (int r = 0; r < size_; ++r)
    out.push_back(all.substr(static_cast<size_t>(offsets[static_cast<size_t>(r)]),
                             static_cast<size_t>(sizes[static_cast<size_t>(r)])));
  return out;
}

std::string MpiJob::differences(const std::vector<std::pair<std::string, std::string>>& mine) {
  std::string text;
  for (const auto& [name, value] : mine) text += value + "\n";
  const std::vector<std::string> all = all_gather(text);
  std::string diff;
  for (int rk = 1; rk < size_; ++rk) {
    std::istringstream a(all[0]), b(all[static_cast<size_t>(rk)]);
    for (const auto& [name, value] : mine) {
      std::string va, vb;
      std::getline(a, va);
      std::getline(b, vb);
      if (va != vb) diff += fmt::format("\n  {}: rank 0 has {}, rank {} has {}", name, va, rk, vb);
    }
  }
  return diff;
}

void MpiJob::abort(const std::string& why, int code) {
  fmt::print(stderr, "{}\n", why);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, code);
  std::exit(code);
}

#endif

void MpiJob::require_same(const std::vector<std::pair<std::string, std::string>>& mine) {
  const std::string diff = differences(mine);
  if (!diff.empty())
    fail("the ranks of this job differ:{}\nstart every rank with the same model, data and settings",
         diff);
}

std::string MpiJob::require_identical(const void* data, size_t bytes, const std::string& what) {
  const std::string h = fmt::format("{:016x}", fnv1a(data, bytes));
  const std::vector<std::string> all = all_gather(h);
  for (int rk = 1; rk < size_; ++rk)
    if (all[static_cast<size_t>(rk)] != all[0])
      fail("{} differs between rank 0 ({}) and rank {} ({})", what, all[0], rk,
           all[static_cast<size_t>(rk)]);
  return h;
}

}  // namespace cb
