// The memory this process may use (runtime/host_memory.h): the host's MemAvailable bounded by the
// cgroup v2 and v1 limits of the process's cgroup and its ancestors, read from fake /proc and
// /sys/fs/cgroup trees in a temporary folder; garbage never throws and falls back to the host's
// figure. Then the real thing: a CPU device (and cb-train) in a 512 MiB cgroup v1 memory group
// must plan against at most 512 MiB, not the host's free RAM.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "kernels/cpu/cpu_device.h"
#include "runtime/host_memory.h"
#include "tests/sma_util.h"
#include "tests/test_util.h"

using namespace cb;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kMiB = int64_t{1} << 20, kGiB = int64_t{1} << 30;

// A fake root: /proc/meminfo with 16 GiB installed, 8 GiB available; the rest per test.
struct FakeRoot {
  test::TempDir dir{"host_memory"};
  FakeRoot() {
    put("proc/meminfo",
        "MemTotal:       16777216 kB\nMemFree:         1048576 kB\nMemAvailable:    8388608 "
        "kB\nBuffers:            1024 kB\n");
  }
  void put(const std::string& rel, const std::string& text) {
    const fs::path p = dir.path / rel;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }
  // A cgroup2 mount at /sys/fs/cgroup and the process in `path`.
  void v2(const std::string& path) {
    put("proc/self/mountinfo",
        "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
        "30 22 0:26 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate\n");
    put("proc/self/cgroup", "0::" + path + "\n");
  }
  // A v1 memory hierarchy at /sys/fs/cgroup/memory whose mount root is `mount_root`.
  void v1(const std::string& path, const std::string& mount_root = "/") {
    put("proc/self/mountinfo",
        "22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw\n"
        "31 22 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw,mode=755\n"
        "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
        "35 31 0:32 " +
            mount_root + " /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n");
    put("proc/self/cgroup", "5:cpu:/\n4:memory:" + path + "\n1:name=systemd:/\n");
  }
  HostMemoryInfo read() const { return host_memory_info(dir.str()); }
};

void check_host(const HostMemoryInfo& m) {
  CHECK(m.source == MemorySource::HostMemAvailable);
  CHECK(m.free == 8 * kGiB);
  CHECK(m.total == 16 * kGiB);
  CHECK(m.describe() == "host: MemAvailable");
}

}  // namespace

TEST_CASE("host memory: no cgroup at all, or no /proc: the host's MemAvailable, or nothing") {
  FakeRoot r;
  check_host(r.read());
  // A cgroup2 mount without limit files (the root cgroup has no memory.max).
  r.v2("/");
  check_host(r.read());
  // Nothing readable: zeros, no throw.
  test::TempDir empty("host_memory_empty");
  const HostMemoryInfo m = host_memory_info(empty.str());
  CHECK(m.source == MemorySource::None);
  CHECK(m.free == 0);
  CHECK(m.total == 0);
}

TEST_CASE("host memory: cgroup v2 memory.max minus memory.current bounds the host's figure") {
  FakeRoot r;
  r.v2("/kubepods/pod1/c1");
  const std::string c1 = "sys/fs/cgroup/kubepods/pod1/c1/";
  r.put(c1 + "memory.max", "2147483648\n");
  r.put(c1 + "memory.current", "1073741824\n");
  HostMemoryInfo m = r.read();
  CHECK(m.source == MemorySource::CgroupV2);
  CHECK(m.free == 1 * kGiB);
  CHECK(m.total == 2 * kGiB);
  CHECK(m.describe() == "cgroup v2 memory.max 2.0 GiB, 1.0 GiB in use");
  CHECK(m.cgroup == r.dir / c1.substr(0, c1.size() - 1));

  // Inactive page cache is reclaimable: not counted as in use.
  r.put(c1 + "memory.stat", "anon 805306368\nfile 268435456\ninactive_file 268435456\n");
  m = r.read();
  CHECK(m.used == 768 * kMiB);
  CHECK(m.free == 1280 * kMiB);

  // "max": no limit here, the host's figure stands.
  r.put(c1 + "memory.max", "max\n");
  check_host(r.read());

  // A parent's smaller limit applies to the child too.
  r.put(c1 + "memory.max", "4294967296\n");
  r.put("sys/fs/cgroup/kubepods/pod1/memory.max", "1610612736\n");
  r.put("sys/fs/cgroup/kubepods/pod1/memory.current", "1073741824\n");
  m = r.read();
  CHECK(m.source == MemorySource::CgroupV2);
  CHECK(m.free == 512 * kMiB);
  CHECK(m.total == 1536 * kMiB);
  CHECK(m.cgroup == r.dir / "sys/fs/cgroup/kubepods/pod1");
  CHECK(m.describe() == "cgroup v2 memory.max 1.5 GiB, 1.0 GiB in use");

  // Usage above the limit (it happens briefly): no headroom, not a negative one.
  r.put("sys/fs/cgroup/kubepods/pod1/memory.current", "2147483648\n");
  CHECK(r.read().free == 0);
}

TEST_CASE("host memory: cgroup v1 memory.limit_in_bytes minus memory.usage_in_bytes") {
  FakeRoot r;
  r.v1("/docker/abc");
  const std::string g = "sys/fs/cgroup/memory/docker/abc/";
  r.put(g + "memory.limit_in_bytes", "536870912\n");
  r.put(g + "memory.usage_in_bytes", "104857600\n");
  r.put(g + "memory.stat", "cache 0\ninactive_file 4194304\ntotal_inactive_file 0\n");
  HostMemoryInfo m = r.read();
  CHECK(m.source == MemorySource::CgroupV1);
  CHECK(m.free == 412 * kMiB);
  CHECK(m.total == 512 * kMiB);
  CHECK(m.describe() == "cgroup v1 memory.limit_in_bytes 512.0 MiB, 100.0 MiB in use");

  // The unlimited sentinel (PAGE_COUNTER_MAX pages) is no limit.
  r.put(g + "memory.limit_in_bytes", "9223372036854771712\n");
  check_host(r.read());

  // A container without a cgroup namespace: the mount's root is the container's cgroup, so its
  // files are at the mount point itself.
  FakeRoot c;
  c.v1("/docker/abc", "/docker/abc");
  c.put("sys/fs/cgroup/memory/memory.limit_in_bytes", "1073741824\n");
  c.put("sys/fs/cgroup/memory/memory.usage_in_bytes", "0\n");
  m = c.read();
  CHECK(m.source == MemorySource::CgroupV1);
  CHECK(m.free == 1 * kGiB);
}

TEST_CASE("host memory: the smaller of v1 and v2 wins; garbage falls back, never throws") {
  FakeRoot r;
  r.put("proc/self/mountinfo",
        "30 22 0:26 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n"
        "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n");
  r.put("proc/self/cgroup", "4:memory:/a\n0::/b\n");
  r.put("sys/fs/cgroup/unified/b/memory.max", "3221225472");
  r.put("sys/fs/cgroup/unified/b/memory.current", "0");
  r.put("sys/fs/cgroup/memory/a/memory.limit_in_bytes", "2147483648");
  r.put("sys/fs/cgroup/memory/a/memory.usage_in_bytes", "0");
  HostMemoryInfo m = r.read();
  CHECK(m.source == MemorySource::CgroupV1);
  CHECK(m.free == 2 * kGiB);

  // Garbage limits and usages: unknown limits, so the host's figure.
  for (const char* bad : {"", "lots", "-5", "12abc", "99999999999999999999999", "\n\n", "0x10"}) {
    CAPTURE(bad);
    r.put("sys/fs/cgroup/unified/b/memory.max", bad);
    r.put("sys/fs/cgroup/memory/a/memory.limit_in_bytes", bad);
    check_host(r.read());
  }
  // A garbage usage with a good limit counts as nothing in use (the limit still binds).
  r.put("sys/fs/cgroup/memory/a/memory.limit_in_bytes", "2147483648");
  r.put("sys/fs/cgroup/memory/a/memory.usage_in_bytes", "garbage");
  r.put("sys/fs/cgroup/memory/a/memory.stat", "total_inactive_file x\n\n:::\n");
  CHECK(r.read().free == 2 * kGiB);

  // Garbage in /proc: mountinfo and cgroup lines, a path that climbs out, meminfo without numbers.
  for (const char* mountinfo : {"", "garbage\n", "1 2 3 - cgroup2\n", "- - - - - - -\n"}) {
    r.put("proc/self/mountinfo", mountinfo);
    check_host(r.read());
  }
  r.v2("/../../etc");
  r.put("proc/self/cgroup", "0::/../../etc\n::\n:\nx\n0::relative\n");
  check_host(r.read());
  r.put("proc/meminfo", "MemTotal: many kB\nMemAvailable:\n");
  const HostMemoryInfo none = r.read();  // the fake root never falls back to the real sysinfo
  CHECK(none.source == MemorySource::None);
  CHECK(none.free == 0);
  // An unreadable file (a folder where a file should be).
  FakeRoot d;
  d.v2("/x");
  fs::create_directories(d.dir.path / "sys/fs/cgroup/x/memory.max");
  check_host(d.read());
}

TEST_CASE("host memory: this machine says something, and the CPU device reports where from") {
  const HostMemoryInfo m = host_memory_info();
  CHECK(m.source != MemorySource::None);
  CHECK(m.free > 0);
  CHECK(m.total >= m.free);
  const DeviceCaps c = make_cpu_device(1)->caps();
  CHECK(c.memory_free > 0);
  CHECK(!c.memory_source.empty());
}

namespace {

// A v1 memory cgroup limited to 512 MiB, /sys/fs/cgroup/memory/cb_test_<pid>, removed at the end;
// ok() is false where it cannot be made (not root, no v1 memory controller).
struct MemoryCgroup {
  fs::path dir = fmt::format("/sys/fs/cgroup/memory/cb_test_{}", getpid());
  bool made = false;
  MemoryCgroup() {
    std::error_code ec;
    if (!fs::is_directory("/sys/fs/cgroup/memory") || !fs::create_directory(dir, ec)) return;
    made = true;
    std::ofstream((dir / "memory.limit_in_bytes").string()) << 512 * kMiB;
  }
  bool ok() const {
    return made && test::read_text((dir / "memory.limit_in_bytes").string()) ==
                       fmt::format("{}\n", 512 * kMiB);
  }
  ~MemoryCgroup() {
    if (made) ::rmdir(dir.c_str());  // empty again once the processes moved in have exited
  }
};

}  // namespace

TEST_CASE("host memory: a CPU device in a 512 MiB cgroup plans against at most 512 MiB") {
  MemoryCgroup cg;
  if (!cg.ok()) {
    MESSAGE("skipped: cannot create a v1 memory cgroup with a 512 MiB limit here (not root?)");
    return;
  }
  // A child moves itself into the cgroup and reports its CPU device's free memory through a pipe.
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(fds[0]);
    int64_t out[2] = {-1, -1};
    { std::ofstream((cg.dir / "cgroup.procs").string()) << ::getpid() << "\n"; }
    const HostMemoryInfo m = host_memory_info();
    out[0] = make_cpu_device(1)->caps().memory_free;
    out[1] = m.source == MemorySource::CgroupV1 ? m.limit : -1;
    [[maybe_unused]] const auto n = ::write(fds[1], out, sizeof out);
    ::_exit(0);
  }
  ::close(fds[1]);
  int64_t got[2] = {-1, -1};
  const auto n = ::read(fds[0], got, sizeof got);
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  REQUIRE(n == static_cast<ssize_t>(sizeof got));
  CHECK(got[0] > 0);
  CHECK(got[0] <= 512 * kMiB);
  CHECK(got[1] == 512 * kMiB);
}

TEST_CASE("host memory: cb-train in a 512 MiB cgroup says so on its memory line") {
  if (!test::need(fs::path(test::sma::kFashion) / "train-images-idx3-ubyte.gz",
                  "Fashion-MNIST, Debian's dataset-fashion-mnist (./setup.sh installs it)"))
    return;
  MemoryCgroup cg;
  if (!cg.ok()) {
    MESSAGE("skipped: cannot create a v1 memory cgroup with a 512 MiB limit here (not root?)");
    return;
  }
  test::TempDir dir("host_memory_train");
  const std::string log = dir / "log.txt";
  const std::string cmd = fmt::format(
      "sh -c 'echo $$ > {}/cgroup.procs && exec {}/cb-train {} --data {} --threads 1 --steps 2 "
      "--test-limit 10' > {} 2>&1",
      cg.dir.string(), CB_BINARY_DIR, test::sma::kLenet, test::sma::kFashion, log);
  const int rc = std::system(cmd.c_str());
  const std::string text = test::read_text(log);
  CAPTURE(text);
  CHECK((WIFEXITED(rc) && WEXITSTATUS(rc) == 0));
  const size_t at = text.find("budget ", text.find("memory   "));
  REQUIRE(at != std::string::npos);
  const double budget_mib = std::atof(text.c_str() + at + 7);  // "budget 407.3 MiB per device"
  CHECK(budget_mib > 0);
  CHECK(budget_mib <= 512);
  CHECK(test::contains(text, "(cgroup v1 memory.limit_in_bytes 512.0 MiB, "));
}
