// One run per checkpoint folder (CheckpointLock, see checkpoint.h): an advisory flock on DIR/.lock.
// flock locks belong to an open file description, so two CheckpointLocks in one process exclude
// each other like two processes do; the descriptor is close-on-exec so that no child process
// inherits (and outlives us holding) the lock.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <thread>
#include <utility>

#include "runtime/error.h"
#include "sma/checkpoint.h"

namespace cb {

namespace {

// The holder's line, as read by a run the lock refuses. The holder writes it just after locking:
// an empty file is a holder between the two, so read again a few times before saying so.
std::string holder_of(int fd) {
  for (int attempt = 0; attempt < 20; ++attempt) {
    char buf[4096];
    const ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    if (n > 0) {
      std::string s(buf, static_cast<size_t>(n));
      while (!s.empty() && (s.back() == '\n' || s.back() == '\0')) s.pop_back();
      if (!s.empty()) return s;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  return "a process that has not written its name into the lock file";
}

std::string now_text() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S %z", &tm);
  return buf;
}

}  // namespace

CheckpointLock::CheckpointLock(const std::string& dir, const std::string& command)
    : path_((std::filesystem::path(dir) / kFileName).string()) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) fail("checkpoint folder {}: cannot create it: {}", dir, ec.message());
  fd_ = open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("checkpoint folder {}: cannot open {}: {}", dir, path_, std::strerror(errno));
  int rc = 0;
  do {
    rc = flock(fd_, LOCK_EX | LOCK_NB);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    const int err = errno;
    const std::string holder = err == EWOULDBLOCK ? holder_of(fd_) : "";
    close(fd_);
    fd_ = -1;
    if (err == EWOULDBLOCK)
      fail(
          "checkpoint folder {} is in use by another run: {} (lock file {}). Two runs in one "
          "folder would delete each other's checkpoints: stop that run, or give this one another "
          "--checkpoint-dir",
          dir, holder, path_);
    fail(
        "checkpoint folder {}: cannot lock {}: {} (the filesystem does not support locks, as a "
        "network folder without a lock service: without the lock a second run could write the "
        "same folder unnoticed, so it is refused; use a folder on a local disk)",
        dir, path_, std::strerror(err));
  }
  char host[256] = "?";
  gethostname(host, sizeof host - 1);
  std::string cmd = command;
  for (char& c : cmd)
    if (c == '\n' || c == '\r') c = ' ';
  const std::string text = fmt::format("pid {} on {} since {}, command: {}\n", getpid(), host,
                                       now_text(), cmd.empty() ? "?" : cmd);
  // Only what the refused run reads for its message: the lock holds even if this write fails.
  if (ftruncate(fd_, 0) == 0) {
    [[maybe_unused]] const ssize_t n = pwrite(fd_, text.data(), text.size(), 0);
  }
}

CheckpointLock::~CheckpointLock() {
  if (fd_ >= 0) close(fd_);  // releases the lock (the file stays: see checkpoint.h)
}

CheckpointLock::CheckpointLock(CheckpointLock&& o) noexcept
    : fd_(std::exchange(o.fd_, -1)), path_(std::move(o.path_)) {}

CheckpointLock& CheckpointLock::operator=(CheckpointLock&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) close(fd_);
    fd_ = std::exchange(o.fd_, -1);
    path_ = std::move(o.path_);
  }
  return *this;
}

}  // namespace cb
