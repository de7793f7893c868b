// What the NumPy readers keep arrays in: read-only mappings of whole files, and unlinked
// temporary files (inflated archive members, big copies) with a check of the folder's room first,
// so that a full disk is an error naming the folder, not a SIGBUS.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace cb {

// A file descriptor, closed when it goes.
struct ScopedFd {
  int fd;
  ~ScopedFd() {
    if (fd >= 0) ::close(fd);
  }
};

// A mapping, unmapped when the last array using it goes.
struct FileMapping {
  void* p = nullptr;
  size_t n = 0;
  FileMapping(void* p, size_t n) : p(p), n(n) {}
  ~FileMapping();  // unmaps
  FileMapping(const FileMapping&) = delete;
  FileMapping& operator=(const FileMapping&) = delete;
};

// Maps a whole regular file read-only; `kind` (".npy") names what it should be in messages.
std::shared_ptr<const FileMapping> map_file(const std::string& path, const char* kind);

// The folder for temporary files: `dir` if given, else $TMPDIR, else /tmp.
std::string temp_dir_or_default(const std::string& dir);
// What to do when a temporary file cannot be made or filled (for messages).
extern const std::string kTempHint;
// An unlinked temporary file under `dir`, open for reading and writing; `what` names the input
// it is for.
int open_temp(const std::string& dir, const std::string& what);
// Fails when `need` bytes will not fit in the temporary folder's free space.
void check_room(const std::string& dir, uint64_t need, const std::string& what);

}  // namespace cb
