// The .npz zip container (see zip_archive.h).
#include "runtime/data/zip_archive.h"

#include <sys/mman.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>
#include <vector>

#include <fmt/format.h>

#include "runtime/data/untrusted_bytes.h"
#include "runtime/error.h"

namespace cb {

namespace {

constexpr size_t kChunk = size_t{1} << 20;  // inflate output and write chunk
// Deflate's best ratio is 1032:1 (258-byte matches of 2 bits' code each): a member claiming more
// is a zip bomb or corrupt, and is refused before anything is inflated.
constexpr uint64_t kMaxDeflateRatio = 1032;

std::string method_name(uint16_t m) {
  switch (m) {
    case 9:
      return "deflate64";
    case 12:
      return "bzip2";
    case 14:
      return "LZMA";
    case 93:
      return "Zstandard";
    case 95:
      return "xz";
    default:
      return "unknown";
  }
}

}  // namespace

std::vector<ZipMember> read_zip_directory(const std::byte* d, size_t n, const std::string& what) {
  const std::string bad = "not a file np.savez wrote?";
  // The end-of-central-directory record: 22 bytes and a comment that ends the file.
  size_t eocd = SIZE_MAX;
  if (n >= 22)
    for (size_t p = n - 22, lo = n - 22 > 0xFFFF ? n - 22 - 0xFFFF : 0;; --p) {
      if (load_le<uint32_t>(d + p) == 0x06054b50 && load_le<uint16_t>(d + p + 20) == n - p - 22) {
        eocd = p;
        break;
      }
      if (p == lo) break;
    }
  if (eocd == SIZE_MAX)
    fail(
        "{}: not a .npz archive (no zip end-of-central-directory record: not a zip file, or "
        "truncated)",
        what);
  uint64_t disk = load_le<uint16_t>(d + eocd + 4), cd_disk = load_le<uint16_t>(d + eocd + 6);
  uint64_t entries_disk = load_le<uint16_t>(d + eocd + 8);
  uint64_t entries = load_le<uint16_t>(d + eocd + 10);
  uint64_t cd_size = load_le<uint32_t>(d + eocd + 12), cd_off = load_le<uint32_t>(d + eocd + 16);
  uint64_t cd_end_limit = eocd;  // the central directory ends before this
  if (eocd >= 20 && load_le<uint32_t>(d + eocd - 20) == 0x07064b50) {
    const uint64_t z = load_le<uint64_t>(d + eocd - 12);
    if (z > eocd - 20 || eocd - 20 - z < 56 || load_le<uint32_t>(d + z) != 0x06064b50)
      fail("{}: the zip64 end-of-central-directory record is missing or out of place; {}", what,
           bad);
    disk = load_le<uint32_t>(d + z + 16);
    cd_disk = load_le<uint32_t>(d + z + 20);
    entries_disk = load_le<uint64_t>(d + z + 24);
    entries = load_le<uint64_t>(d + z + 32);
    cd_size = load_le<uint64_t>(d + z + 40);
    cd_off = load_le<uint64_t>(d + z + 48);
    cd_end_limit = z;
  } else if (entries == 0xFFFF || cd_size == 0xFFFFFFFF || cd_off == 0xFFFFFFFF) {
    fail("{}: the archive needs zip64 records but has none (truncated?); {}", what, bad);
  }
  if (disk != 0 || cd_disk != 0 || entries_disk != entries)
    fail("{}: the archive spans several disks (split zip files are not supported)", what);
  if (cd_off > cd_end_limit || cd_size > cd_end_limit - cd_off)
    fail(
        "{}: the central directory (offset {}, {} bytes) lies outside the file's {} bytes "
        "(truncated?); {}",
        what, cd_off, cd_size, n, bad);
  if (entries > cd_size / 46)
    fail("{}: the archive claims {} members but its central directory has room for {}; {}", what,
         entries, cd_size / 46, bad);
  if (entries == 0) fail("{}: the archive holds no arrays", what);

  std::vector<ZipMember> ms;
  ms.reserve(entries);
  std::set<std::string> names;
  const std::byte* cd = d + cd_off;
  uint64_t pos = 0;
  for (uint64_t i = 0; i < entries; ++i) {
    if (cd_size - pos < 46 || load_le<uint32_t>(cd + pos) != 0x02014b50)
      fail("{}: central directory entry {} is corrupt; {}", what, i, bad);
    const std::byte* e = cd + pos;
    ZipMember m;
    m.flags = load_le<uint16_t>(e + 8);
    m.method = load_le<uint16_t>(e + 10);
    m.crc = load_le<uint32_t>(e + 16);
    m.csize = load_le<uint32_t>(e + 20);
    m.usize = load_le<uint32_t>(e + 24);
    const uint64_t nlen = load_le<uint16_t>(e + 28), xlen = load_le<uint16_t>(e + 30),
                   clen = load_le<uint16_t>(e + 32);
    uint64_t mdisk = load_le<uint16_t>(e + 34);
    m.local = load_le<uint32_t>(e + 42);
    if (cd_size - pos - 46 < nlen + xlen + clen)
      fail("{}: central directory entry {} runs past the directory's end; {}", what, i, bad);
    m.name.assign(reinterpret_cast<const char*>(e + 46), nlen);
    const std::string mwhat = fmt::format("{}: member '{}'", what, printable(m.name));
    // The zip64 extra field: the 64-bit values of the fields saturated above, in this order.
    const std::byte* x = e + 46 + nlen;
    for (uint64_t xp = 0; xlen - xp >= 4;) {
      const uint16_t id = load_le<uint16_t>(x + xp), len = load_le<uint16_t>(x + xp + 2);
      if (len > xlen - xp - 4) fail("{}: a corrupt extra field; {}", mwhat, bad);
      if (id == 0x0001) {
        uint64_t q = xp + 4;
        const uint64_t end = q + len;
        auto take = [&](uint64_t& v, uint64_t bytes) {
          if (end - q < bytes) fail("{}: a zip64 extra field too short; {}", mwhat, bad);
          v = bytes == 8 ? load_le<uint64_t>(x + q) : load_le<uint32_t>(x + q);
          q += bytes;
        };
        if (m.usize == 0xFFFFFFFF) take(m.usize, 8);
        if (m.csize == 0xFFFFFFFF) take(m.csize, 8);
        if (m.local == 0xFFFFFFFF) take(m.local, 8);
        if (mdisk == 0xFFFF) take(mdisk, 4);
      }
      xp += 4 + uint64_t{len};
    }
    pos += 46 + nlen + xlen + clen;

    if (m.name.empty() || m.name.find('\0') != std::string::npos)
      fail("{}: member {} has an empty or invalid name; {}", what, i, bad);
    if (m.name.find('/') != std::string::npos || m.name.find('\\') != std::string::npos ||
        m.name.find(':') != std::string::npos)
      fail(
          "{}: a nested path name (folders are not supported: np.savez writes every array at "
          "the top level)",
          mwhat);
    if (m.name.size() <= 4 || m.name.substr(m.name.size() - 4) != ".npy")
      fail("{}: not a .npy array (an .npz holds NAME.npy members only); {}", mwhat, bad);
    if (!names.insert(m.name).second)
      fail("{}: the name appears twice in the archive; {}", mwhat, bad);
    if (mdisk != 0) fail("{}: the member is on another disk of a split archive", mwhat);
    if (m.flags & 0x41)
      fail("{}: the member is encrypted; save the arrays again without encryption", mwhat);
    if (m.method != 0 && m.method != 8)
      fail(
          "{}: compression method {} ({}) is not supported; only stored (np.savez) and deflate "
          "(np.savez_compressed) are",
          mwhat, m.method, method_name(m.method));
    if (m.method == 8 && m.usize / kMaxDeflateRatio > m.csize + 1)
      fail(
          "{}: claims {} bytes from {} compressed, more than deflate can produce (a zip bomb, "
          "or corrupt)",
          mwhat, m.usize, m.csize);
    if (m.method == 0 && m.csize != m.usize)
      fail("{}: stored uncompressed but its sizes differ ({} and {} bytes); {}", mwhat, m.csize,
           m.usize, bad);
    // The local header: its own name and extra field lengths place the data.
    if (m.local > cd_off || cd_off - m.local < 30 || load_le<uint32_t>(d + m.local) != 0x04034b50)
      fail("{}: its local header (at offset {}) is missing or out of range; {}", mwhat, m.local,
           bad);
    const uint64_t lnlen = load_le<uint16_t>(d + m.local + 26),
                   lxlen = load_le<uint16_t>(d + m.local + 28);
    m.data = m.local + 30 + lnlen + lxlen;
    if (m.data > cd_off || cd_off - m.data < m.csize)
      fail(
          "{}: its data ({} bytes at offset {}) runs past the start of the central directory "
          "(truncated?); {}",
          mwhat, m.csize, m.data, bad);
    if (lnlen != nlen || std::memcmp(d + m.local + 30, m.name.data(), nlen) != 0)
      fail("{}: the local header names another file; {}", mwhat, bad);
    ms.push_back(std::move(m));
  }
  // ZipMembers must not share bytes (overlapping members are how some zip bombs multiply).
  std::vector<const ZipMember*> by_pos;
  for (const ZipMember& m : ms) by_pos.push_back(&m);
  std::sort(by_pos.begin(), by_pos.end(),
            [](const ZipMember* a, const ZipMember* b) { return a->local < b->local; });
  for (size_t i = 1; i < by_pos.size(); ++i)
    if (by_pos[i]->local < by_pos[i - 1]->data + by_pos[i - 1]->csize)
      fail("{}: members '{}' and '{}' overlap in the file; {}", what,
           printable(by_pos[i - 1]->name), printable(by_pos[i]->name), bad);
  return ms;
}

// zlib's crc32 (the same CRC as cb::crc32_of) runs chunk by chunk, as the data is inflated.
std::shared_ptr<const FileMapping> inflate_member(const std::byte* in, const ZipMember& m,
                                                  const std::string& what,
                                                  const std::string& temp_dir) {
  if (m.usize == 0) fail("{}: the member is empty (a .npy array has at least a header)", what);
  const std::string dir = temp_dir_or_default(temp_dir);
  check_room(dir, m.usize, what);
  ScopedFd f{open_temp(dir, what)};
  z_stream zs{};
  if (inflateInit2(&zs, -MAX_WBITS) != Z_OK) fail("{}: cannot start zlib's inflate", what);
  struct End {
    z_stream* z;
    ~End() { inflateEnd(z); }
  } end{&zs};
  std::vector<Bytef> buf(kChunk);
  uint64_t in_pos = 0, out = 0;
  uLong crc = ::crc32(0L, Z_NULL, 0);
  for (;;) {
    if (zs.avail_in == 0 && in_pos < m.csize) {
      const uint64_t take = std::min<uint64_t>(m.csize - in_pos, uint64_t{1} << 30);
      zs.next_in = const_cast<Bytef*>(reinterpret_cast<const Bytef*>(in + in_pos));
      zs.avail_in = static_cast<uInt>(take);
      in_pos += take;
    }
    zs.next_out = buf.data();
    zs.avail_out = static_cast<uInt>(buf.size());
    const int r = inflate(&zs, Z_NO_FLUSH);
    if (r != Z_OK && r != Z_STREAM_END) {
      if (r == Z_BUF_ERROR) fail("{}: the compressed data ends early (truncated?)", what);
      fail("{}: corrupt compressed data ({}); save the arrays again", what,
           zs.msg ? zs.msg : zError(r));
    }
    const size_t got = buf.size() - zs.avail_out;
    if (got > m.usize - out)
      fail("{}: inflates to more than the {} bytes its header claims (corrupt)", what, m.usize);
    crc = ::crc32(crc, buf.data(), static_cast<uInt>(got));
    for (size_t w = 0; w < got;) {
      const ssize_t k = ::pwrite(f.fd, buf.data() + w, got - w, static_cast<off_t>(out + w));
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0)
        fail("{}: cannot write the inflated array to a temporary file in {}: {}; {}", what, dir,
             k < 0 ? std::strerror(errno) : "nothing written", kTempHint);
      w += static_cast<size_t>(k);
    }
    out += got;
    if (r == Z_STREAM_END) break;
  }
  if (out != m.usize)
    fail("{}: inflates to {} bytes but its header claims {} (corrupt)", what, out, m.usize);
  if (zs.avail_in != 0 || in_pos != m.csize)
    fail("{}: {} bytes follow the end of its compressed data (corrupt)", what,
         m.csize - in_pos + zs.avail_in);
  if (static_cast<uint32_t>(crc) != m.crc)
    fail(
        "{}: CRC-32 mismatch (the archive says {:08x}, the data gives {:08x}): the file is "
        "corrupt",
        what, m.crc, static_cast<uint32_t>(crc));
  void* p = ::mmap(nullptr, m.usize, PROT_READ, MAP_SHARED, f.fd, 0);
  if (p == MAP_FAILED)
    fail("{}: cannot map the inflated temporary file: {}", what, std::strerror(errno));
  return std::make_shared<FileMapping>(p, m.usize);
}

}  // namespace cb
