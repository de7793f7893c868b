// Host memory: allocation, and how much of it this process may still use (runtime/host_memory.h).
// Every figure read from /proc and the cgroup files is optional: a file that is missing,
// unreadable or garbage leaves that limit unknown, never an error, so the budget falls back to the
// figures that could be read (in the end the host's).
#include "runtime/host_memory.h"

#include <sys/sysinfo.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <vector>

#include "runtime/error.h"

namespace cb {

void* allocate_host_memory(size_t bytes, std::string_view device) {
  // aligned_alloc wants a size that is a multiple of the alignment, and never 0.
  const size_t n = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, n);
  if (!p)
    fail(
        "out of memory on {}: allocating {} bytes ({:.1f} MiB) failed; lower the batch size or "
        "the number of learners",
        device, bytes, static_cast<double>(bytes) / (1 << 20));
  std::memset(p, 0, n);
  return p;
}

void release_host_memory(void* p) noexcept { std::free(p); }

void return_free_host_memory() noexcept {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

namespace {

// A cgroup v1 limit at or above this is "no limit": the kernel reports PAGE_COUNTER_MAX pages,
// 9223372036854771712 with 4 KiB pages (a little less with larger pages).
constexpr int64_t kV1Unlimited = int64_t{1} << 62;

// The text of a small file (these are all under a few KiB), or nothing when it cannot be read.
std::optional<std::string> read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return std::nullopt;
  std::string s(64 * 1024, '\0');
  f.read(s.data(), static_cast<std::streamsize>(s.size()));
  if (f.bad()) return std::nullopt;
  s.resize(static_cast<size_t>(f.gcount()));
  return s;
}

std::string_view trim(std::string_view s) {
  const auto b = s.find_first_not_of(" \t\n\r");
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t\n\r") - b + 1);
}

// A non-negative decimal integer that is the whole of `s` (spaces around allowed), else nothing.
std::optional<int64_t> parse_bytes(std::string_view s) {
  s = trim(s);
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() || v < 0) return std::nullopt;
  return v;
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  for (size_t b = 0;;) {
    const size_t e = s.find(sep, b);
    out.push_back(s.substr(b, e == std::string_view::npos ? std::string_view::npos : e - b));
    if (e == std::string_view::npos) return out;
    b = e + 1;
  }
}

// The value of `key` in a "key value [kB]" file (/proc/meminfo with ':' after the key,
// memory.stat without), scaled to bytes when it is in kB.
std::optional<int64_t> keyed_value(const std::string& text, std::string_view key) {
  for (std::string_view line : split(text, '\n')) {
    line = trim(line);
    if (line.substr(0, key.size()) != key) continue;
    std::string_view rest = line.substr(key.size());
    if (!rest.empty() && rest[0] == ':') rest.remove_prefix(1);
    if (rest.empty() || (rest[0] != ' ' && rest[0] != '\t')) continue;  // a longer key
    rest = trim(rest);
    int64_t scale = 1;
    if (rest.size() > 2 && rest.substr(rest.size() - 2) == "kB") {
      scale = 1024;
      rest = rest.substr(0, rest.size() - 2);
    }
    const auto v = parse_bytes(rest);
    if (!v || *v > INT64_MAX / scale) return std::nullopt;
    return *v * scale;
  }
  return std::nullopt;
}

// mountinfo escapes space, tab, newline and backslash in paths as \ooo (octal).
std::string unescape_mount_path(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '3' && s[i + 2] >= '0' &&
        s[i + 2] <= '7' && s[i + 3] >= '0' && s[i + 3] <= '7') {
      out += static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

// One cgroup hierarchy as /proc/self/mountinfo shows it: where it is mounted, and which of its
// cgroups is the mount's root.
struct CgroupMount {
  std::string point;  // "/sys/fs/cgroup/memory"
  std::string root;   // "/", or "/docker/<id>" in a container without a cgroup namespace
};

// The first cgroup2 mount (v2) or the first cgroup mount with the memory controller (v1).
std::optional<CgroupMount> find_mount(const std::string& mountinfo, bool v2) {
  for (std::string_view line : split(mountinfo, '\n')) {
    // "36 35 0:32 / /sys/fs/cgroup/memory rw,relatime shared:1 - cgroup cgroup rw,memory"
    const auto f = split(trim(line), ' ');
    const auto dash = std::find(f.begin(), f.end(), "-");
    if (f.size() < 5 || dash == f.end() || f.end() - dash < 4) continue;
    const std::string_view type = dash[1];
    if (v2 ? type != "cgroup2" : type != "cgroup") continue;
    if (!v2) {
      const auto opts = split(dash[3], ',');
      if (std::find(opts.begin(), opts.end(), "memory") == opts.end()) continue;
    }
    return CgroupMount{unescape_mount_path(f[4]), unescape_mount_path(f[3])};
  }
  return std::nullopt;
}

// The process's cgroup path in a hierarchy, from /proc/self/cgroup ("hier:controllers:path"):
// the "0::/path" line for v2, the line whose controllers include memory for v1.
std::optional<std::string> find_cgroup_path(const std::string& self_cgroup, bool v2) {
  for (std::string_view line : split(self_cgroup, '\n')) {
    const size_t a = line.find(':');
    const size_t b = a == std::string_view::npos ? a : line.find(':', a + 1);
    if (b == std::string_view::npos) continue;
    const std::string_view id = line.substr(0, a), ctl = line.substr(a + 1, b - a - 1);
    const std::string_view path = trim(line.substr(b + 1));
    if (path.empty() || path[0] != '/') continue;
    if (v2 ? (id == "0" && ctl.empty()) : [&] {
          const auto c = split(ctl, ',');
          return std::find(c.begin(), c.end(), "memory") != c.end();
        }())
      return std::string(path);
  }
  return std::nullopt;
}

// The folders of the process's cgroup and of its ancestors up to the mount's root, innermost
// first. A path outside the mount's root (not visible there) gives the mount's root alone.
std::vector<std::string> cgroup_dirs(const std::string& root, const CgroupMount& m,
                                     const std::string& path) {
  std::string_view rel = path;
  if (m.root != "/") {
    if (rel.substr(0, m.root.size()) == m.root &&
        (rel.size() == m.root.size() || rel[m.root.size()] == '/'))
      rel.remove_prefix(m.root.size());
    else
      rel = {};
  }
  std::vector<std::string> parts;
  for (std::string_view p : split(rel, '/')) {
    if (p.empty() || p == ".") continue;
    if (p == "..") return {root + m.point};  // garbage: do not walk out of the mount
    parts.emplace_back(p);
  }
  std::vector<std::string> dirs;
  for (size_t n = parts.size() + 1; n-- > 0;) {
    std::string d = root + m.point;
    for (size_t i = 0; i < n; ++i) d += "/" + parts[i];
    dirs.push_back(std::move(d));
  }
  return dirs;
}

// A limit and what is charged against it, in one cgroup.
struct CgroupReading {
  int64_t limit = 0;
  int64_t used = 0;
  std::string dir;
};

// The tightest limit (least headroom) among the process's cgroup and its ancestors in one
// hierarchy; nothing when no level has a readable limit.
std::optional<CgroupReading> tightest_cgroup(const std::string& root, const std::string& mountinfo,
                                             const std::string& self_cgroup, bool v2) {
  const auto mount = find_mount(mountinfo, v2);
  const auto path = find_cgroup_path(self_cgroup, v2);
  if (!mount || !path) return std::nullopt;
  std::optional<CgroupReading> best;
  for (const std::string& dir : cgroup_dirs(root, *mount, *path)) {
    const auto max_text = read_text(dir + (v2 ? "/memory.max" : "/memory.limit_in_bytes"));
    if (!max_text) continue;
    const auto limit = parse_bytes(*max_text);  // v2's "max" (no limit) does not parse
    if (!limit || (!v2 && *limit >= kV1Unlimited)) continue;
    const auto usage_text = read_text(dir + (v2 ? "/memory.current" : "/memory.usage_in_bytes"));
    int64_t used = usage_text ? parse_bytes(*usage_text).value_or(0) : 0;
    // The page cache not recently used is reclaimed before the cgroup runs out (v1's usage is
    // hierarchical, hence its total_ figure).
    if (const auto stat = read_text(dir + "/memory.stat")) {
      auto inactive = keyed_value(*stat, v2 ? "inactive_file" : "total_inactive_file");
      if (!inactive && !v2) inactive = keyed_value(*stat, "inactive_file");
      if (inactive) used -= std::min(used, *inactive);
    }
    CgroupReading r{*limit, std::min(used, *limit), dir};
    if (!best || r.limit - r.used < best->limit - best->used) best = std::move(r);
  }
  return best;
}

std::string bytes_text(int64_t bytes) {
  const double b = static_cast<double>(bytes);
  return b >= (1 << 30) ? fmt::format("{:.1f} GiB", b / (1 << 30))
                        : fmt::format("{:.1f} MiB", b / (1 << 20));
}

}  // namespace

std::string HostMemoryInfo::describe() const {
  switch (source) {
    case MemorySource::None:
      return "unknown";
    case MemorySource::HostMemAvailable:
      return "host: MemAvailable";
    case MemorySource::HostSysinfo:
      return "host: sysinfo free + buffers";
    case MemorySource::CgroupV2:
      return fmt::format("cgroup v2 memory.max {}, {} in use", bytes_text(limit), bytes_text(used));
    case MemorySource::CgroupV1:
      return fmt::format("cgroup v1 memory.limit_in_bytes {}, {} in use", bytes_text(limit),
                         bytes_text(used));
  }
  return "unknown";
}

HostMemoryInfo host_memory_info(const std::string& root) {
  HostMemoryInfo m;
  // The host: MemAvailable counts the page cache and slab the kernel can reclaim, which sysinfo's
  // freeram leaves out; on a machine whose cache has filled its RAM (any that has read its data
  // set once) freeram is a fraction of what can be allocated. sysinfo only where meminfo says
  // nothing (kernels before 3.14), and never under a fake root (it would read the real host).
  if (const auto meminfo = read_text(root + "/proc/meminfo")) {
    const auto total = keyed_value(*meminfo, "MemTotal");
    const auto avail = keyed_value(*meminfo, "MemAvailable");
    if (total && avail) {
      m.total = *total;
      m.free = *avail;
      m.source = MemorySource::HostMemAvailable;
    }
  }
  struct sysinfo si {};
  if (m.source == MemorySource::None && root.empty() && sysinfo(&si) == 0) {
    m.total = static_cast<int64_t>(si.totalram) * si.mem_unit;
    m.free = static_cast<int64_t>(si.freeram + si.bufferram) * si.mem_unit;
    m.source = MemorySource::HostSysinfo;
  }

  // The cgroups: a container's limit (Docker, Kubernetes) binds long before the host's RAM does.
  const auto mountinfo = read_text(root + "/proc/self/mountinfo");
  const auto self_cgroup = read_text(root + "/proc/self/cgroup");
  if (!mountinfo || !self_cgroup) return m;
  for (const bool v2 : {true, false}) {
    const auto r = tightest_cgroup(root, *mountinfo, *self_cgroup, v2);
    if (!r) continue;
    if (m.total == 0 || r->limit < m.total) m.total = r->limit;
    const int64_t headroom = r->limit - r->used;
    if (m.source != MemorySource::None && headroom >= m.free) continue;
    m.free = headroom;
    m.source = v2 ? MemorySource::CgroupV2 : MemorySource::CgroupV1;
    m.limit = r->limit;
    m.used = r->used;
    m.cgroup = r->dir;
  }
  return m;
}

}  // namespace cb
