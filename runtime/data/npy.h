// NumPy files as arrays of bytes with a dtype and a C-order shape: .npy files (np.save) and .npz
// archives (np.savez, np.savez_compressed), the tensor data sets of `cb-train --data`.
//
// Convention: an array's bytes are never held twice and a data set larger than memory still
// works. A .npy file and a stored (np.savez) member are memory-mapped and data() points into the
// mapping; a deflated (np.savez_compressed) member is inflated in 1 MiB chunks into an unlinked
// temporary file that is then mapped. Only what has to change is copied ("owned"): big-endian
// data (byte-swapped), Fortran order (transposed to C order), dtypes widened to one crossbow has
// (i2/u2 -> I32, u4 -> I64), and data not aligned to its element size (unless unaligned_ok).
// Copies up to heap_limit live on the heap, bigger ones in an unlinked temporary file.
//
// Supported dtypes: f2 f4 f8 i1 i2 i4 i8 u1 u2 u4 u8 b1, little- or big-endian; u8 becomes I64
// when every value fits (else refused, naming the first that does not). Refused, by name: object
// arrays (pickles), structured dtypes, strings, complex, datetimes, long double.
//
// Every malformed input is a cb::Error naming the file (and member) and what is wrong: bad magic,
// version or header dict, a shape that overflows or does not match the byte count, zip members out
// of range, overlapping or duplicated, nested path names, compression methods other than stored
// and deflate, CRC-32 or size mismatches, sizes deflate cannot produce (zip bombs). Memory use is
// bounded whatever the input claims.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/dtype.h"

namespace cb {

// Where an array's bytes live.
enum class NpyBacking : uint8_t {
  Mapped,    // in the mapping of the file read (a .npy file, a stored .npz member)
  TempFile,  // in a mapped, unlinked temporary file (a deflated member, or a big owned copy)
  Heap,      // in an owned heap buffer (a copy of at most NpyOptions::heap_limit bytes)
};

// One array of a .npy file or of a .npz member.
struct NpyArray {
  std::string name;            // the .npz member's name without ".npy"; a .npy file's stem
  std::string source;          // "data/train.npz: member 'x.npy'", for messages
  DType dtype = DType::F32;    // runtime/dtype.h
  std::vector<int64_t> shape;  // C order; empty for a 0-d array
  NpyBacking backing = NpyBacking::Heap;
  std::shared_ptr<const void> keep;  // whatever keeps data() alive (a mapping, a buffer)
  const std::byte* ptr = nullptr;    // numel() * dtype_size(dtype) bytes, C order, little-endian
  size_t size = 0;

  const std::byte* data() const { return ptr; }
  size_t bytes() const { return size; }
  int64_t numel() const;
};

struct NpyOptions {
  std::string temp_dir;  // for inflated members and big copies; "" : $TMPDIR or /tmp
  // A stored member whose data is not aligned to its element size (np.savez's usually are not:
  // the zip and .npy headers before them have odd lengths) is copied, unless this is set: then
  // data() points into the mapping anyway, for readers that only memcpy from it.
  bool unaligned_ok = false;
  bool check_stored_crc = true;          // read each stored member once at open to check its CRC-32
  size_t heap_limit = size_t{64} << 20;  // owned copies bigger than this go to a temporary file
};

// A .npy file (format 1.0, 2.0 or 3.0).
NpyArray read_npy(const std::string& path, const NpyOptions& o = {});
// Every member of a .npz archive (np.savez or np.savez_compressed), in the archive's order.
std::vector<NpyArray> read_npz(const std::string& path, const NpyOptions& o = {});

// The same from bytes in memory that `keep` keeps alive (read_npy and read_npz map the file and
// call these; the fuzzer drives them). `what` names the input in messages.
std::vector<NpyArray> parse_npz(std::shared_ptr<const void> keep, const std::byte* data,
                                size_t size, const std::string& what, const NpyOptions& o = {});
NpyArray parse_npy(std::shared_ptr<const void> keep, const std::byte* data, size_t size,
                   const std::string& what, const NpyOptions& o = {});

}  // namespace cb
