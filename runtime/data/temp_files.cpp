// Mapped files and temporary files (see temp_files.h).
#include "runtime/data/temp_files.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "runtime/error.h"

namespace cb {

FileMapping::~FileMapping() {
  if (p && n) ::munmap(p, n);
}

std::string temp_dir_or_default(const std::string& dir) {
  if (!dir.empty()) return dir;
  const char* t = std::getenv("TMPDIR");
  return t && *t ? t : "/tmp";
}

const std::string kTempHint =
    "set TMPDIR (or NpyOptions::temp_dir) to a writable folder with room, or save the arrays "
    "uncompressed with np.savez";

int open_temp(const std::string& dir, const std::string& what) {
  int fd = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd >= 0) return fd;
  std::string name = dir + "/cb_npy_XXXXXX";
  fd = ::mkostemp(name.data(), O_CLOEXEC);
  if (fd < 0)
    fail("{}: cannot create a temporary file in {}: {}; {}", what, dir, std::strerror(errno),
         kTempHint);
  ::unlink(name.c_str());
  return fd;
}

void check_room(const std::string& dir, uint64_t need, const std::string& what) {
  struct statvfs s {};
  if (::statvfs(dir.c_str(), &s) != 0) return;  // open_temp names the problem
  const uint64_t avail = uint64_t{s.f_bavail} * s.f_frsize;
  if (need > avail)
    fail("{}: needs {} bytes in the temporary folder {}, which has {} free; {}", what, need, dir,
         avail, kTempHint);
}

std::shared_ptr<const FileMapping> map_file(const std::string& path, const char* kind) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // a FIFO: no block
  if (fd < 0) fail("{}: cannot open the {} file: {}", path, kind, std::strerror(errno));
  ScopedFd f{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
    fail("{}: not a regular file, so not a {} file", path, kind);
  const auto n = static_cast<size_t>(st.st_size);
  if (n == 0) fail("{}: the file is empty", path);
  void* p = ::mmap(nullptr, n, PROT_READ, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) fail("{}: cannot map the file: {}", path, std::strerror(errno));
  return std::make_shared<FileMapping>(p, n);
}

}  // namespace cb
