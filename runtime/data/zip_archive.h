// The zip container of .npz archives (np.savez, np.savez_compressed): the central directory and
// local headers read and checked against the bytes there (zip64 included: ranges, overlaps,
// duplicates, nested paths, compression methods other than stored and deflate, sizes deflate
// cannot produce), and deflated members inflated into mapped temporary files. Every problem is a
// cb::Error naming `what` (the archive) and the member.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/data/temp_files.h"

namespace cb {

// One member of the archive, its ranges checked.
struct ZipMember {
  std::string name;
  uint16_t flags = 0, method = 0;
  uint32_t crc = 0;
  uint64_t csize = 0, usize = 0, local = 0;
  uint64_t data = 0;  // where the (compressed) bytes start
};

// Reads the central directory (and its zip64 extensions) and every local header; returns the
// members in the archive's order with their ranges checked.
std::vector<ZipMember> read_zip_directory(const std::byte* d, size_t n, const std::string& what);

// Inflates a deflated member into an unlinked temporary file, 1 MiB at a time, checking its size
// and CRC-32, and maps the file; `temp_dir` as temp_dir_or_default takes it.
std::shared_ptr<const FileMapping> inflate_member(const std::byte* in, const ZipMember& m,
                                                  const std::string& what,
                                                  const std::string& temp_dir);

}  // namespace cb
