// NumPy .npy files and .npz archives (see npy.h). Every length and offset read from the input is
// checked against the bytes there before it is used, in 64-bit arithmetic with overflow checks;
// nothing is allocated from a size the input claims except after that check (owned copies are
// exactly the array's bytes, which the input holds) and inflated data goes to a temporary file.
#include "runtime/data/npy.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <new>
#include <set>
#include <string_view>

#include "runtime/checksum.h"
#include "runtime/error.h"
#include "runtime/small_vec.h"

namespace cb {

static_assert(std::endian::native == std::endian::little,
              "the readers assume a little-endian host");

namespace {

constexpr size_t kChunk = size_t{1} << 20;  // inflate output and write chunk
// Deflate's best ratio is 1032:1 (258-byte matches of 2 bits' code each): a member claiming more
// is a zip bomb or corrupt, and is refused before anything is inflated.
constexpr uint64_t kMaxDeflateRatio = 1032;

// ---- small helpers -----------------------------------------------------------------------------

template <typename T>
T load_le(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

std::string shape_str(const std::vector<int64_t>& s) {
  return fmt::format("[{}]", fmt::join(s, ","));
}

// Text from the input for a message: printable ASCII kept, the rest escaped, cut at `max`.
std::string printable(std::string_view s, size_t max = 100) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < max; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7F)
      out += static_cast<char>(c);
    else
      out += fmt::format("\\x{:02x}", c);
  }
  if (s.size() > max) out += "...";
  return out;
}

std::string temp_dir_of(const NpyOptions& o) {
  if (!o.temp_dir.empty()) return o.temp_dir;
  const char* t = std::getenv("TMPDIR");
  return t && *t ? t : "/tmp";
}

const std::string kTempHint =
    "set TMPDIR (or NpyOptions::temp_dir) to a writable folder with room, or save the arrays "
    "uncompressed with np.savez";

// An unlinked temporary file under `dir`, open for reading and writing.
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

struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// A mapping, unmapped when the last array using it goes.
struct Mapping {
  void* p = nullptr;
  size_t n = 0;
  Mapping(void* p, size_t n) : p(p), n(n) {}
  ~Mapping() {
    if (p && n) ::munmap(p, n);
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
};

// Fails when `need` bytes will not fit in the temporary folder's free space.
void check_room(const std::string& dir, uint64_t need, const std::string& what) {
  struct statvfs s {};
  if (::statvfs(dir.c_str(), &s) != 0) return;  // open_temp names the problem
  const uint64_t avail = uint64_t{s.f_bavail} * s.f_frsize;
  if (need > avail)
    fail("{}: needs {} bytes in the temporary folder {}, which has {} free; {}", what, need, dir,
         avail, kTempHint);
}

// Writable owned memory of `n` bytes: the heap up to o.heap_limit, else an unlinked temporary
// file mapped shared (its pages are written back to the file, not held in memory).
struct Owned {
  std::shared_ptr<const void> keep;
  std::byte* p = nullptr;
  NpyBacking backing = NpyBacking::Heap;
};

Owned make_owned(size_t n, const NpyOptions& o, const std::string& what) {
  Owned r;
  if (n == 0) return r;
  if (n <= o.heap_limit) {
    void* p = ::operator new (n, std::align_val_t{64}, std::nothrow);
    if (!p) fail("{}: cannot allocate {} bytes for a copy of the array", what, n);
    r.keep = std::shared_ptr<void>(p, [](void* q) { ::operator delete (q, std::align_val_t{64}); });
    r.p = static_cast<std::byte*>(p);
    return r;
  }
  const std::string dir = temp_dir_of(o);
  check_room(dir, n, what);
  Fd f{open_temp(dir, what)};
  // Reserve the blocks now: a full disk is an error here, not a SIGBUS when a page is written.
  if (const int e = ::posix_fallocate(f.fd, 0, static_cast<off_t>(n)); e != 0)
    fail("{}: cannot reserve {} bytes in a temporary file in {}: {}; {}", what, n, dir,
         std::strerror(e), kTempHint);
  void* m = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED, f.fd, 0);
  if (m == MAP_FAILED) fail("{}: cannot map a temporary file: {}", what, std::strerror(errno));
  r.keep = std::make_shared<Mapping>(m, n);
  r.p = static_cast<std::byte*>(m);
  r.backing = NpyBacking::TempFile;
  return r;
}

// ---- the .npy header ---------------------------------------------------------------------------

// The element type as stored, and what it becomes.
enum class Conv : uint8_t { Same, I16ToI32, U16ToI32, U32ToI64, U64ToI64 };
struct Elem {
  DType dtype;
  int src_size;  // bytes per stored element
  Conv conv;
  bool swap;  // big-endian, more than one byte
};

Elem parse_descr(const std::string& d, const std::string& what) {
  const std::string supported =
      "supported: f2 f4 f8 i1 i2 i4 i8 u1 u2 u4 u8 b1, little- or big-endian ('<f4', '>i8')";
  if (d.size() < 2 || std::string_view("<>|=").find(d[0]) == std::string_view::npos)
    fail("{}: dtype '{}' is not a dtype NumPy writes; {}", what, printable(d), supported);
  const char kind = d[1];
  if (kind == 'O')
    fail("{}: the array holds Python objects (pickled; dtype '{}'); save it with a numeric dtype",
         what, printable(d));
  int size = 0;
  const std::string digits = d.substr(2);
  if (digits.size() == 1 && digits[0] >= '1' && digits[0] <= '9') size = digits[0] - '0';
  const char* name = kind == 'U' || kind == 'S' || kind == 'a'            ? "strings"
                     : kind == 'c'                                        ? "complex numbers"
                     : kind == 'M' || kind == 'm'                         ? "dates or time spans"
                     : kind == 'V'                                        ? "raw bytes (void)"
                     : kind == 'f' && size != 2 && size != 4 && size != 8 ? "floats of this size"
                                                                          : nullptr;
  if (name) fail("{}: dtype '{}' ({}) is not supported; {}", what, printable(d), name, supported);
  struct Known {
    const char* kind_size;
    DType dtype;
    Conv conv;
  };
  static constexpr Known kKnown[] = {
      {"f2", DType::F16, Conv::Same},     {"f4", DType::F32, Conv::Same},
      {"f8", DType::F64, Conv::Same},     {"i1", DType::I8, Conv::Same},
      {"i2", DType::I32, Conv::I16ToI32}, {"i4", DType::I32, Conv::Same},
      {"i8", DType::I64, Conv::Same},     {"u1", DType::U8, Conv::Same},
      {"u2", DType::I32, Conv::U16ToI32}, {"u4", DType::I64, Conv::U32ToI64},
      {"u8", DType::I64, Conv::U64ToI64}, {"b1", DType::Bool, Conv::Same}};
  const Known* k = nullptr;
  for (const Known& c : kKnown)
    if (d.substr(1) == c.kind_size) k = &c;
  if (!k) fail("{}: dtype '{}' is not supported; {}", what, printable(d), supported);
  const Elem e{k->dtype, size, k->conv, d[0] == '>' && size > 1};
  if (d[0] == '|' && size > 1)
    fail("{}: dtype '{}' has no byte order ('|') but {} bytes per element", what, d, size);
  return e;
}

struct Header {
  std::string descr;
  bool fortran = false;
  std::vector<int64_t> shape;
  size_t data_offset = 0;
};

// A strict reader of the header's Python dict literal:
//   {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
// padded with spaces and ended by '\n'. Exactly these three keys, in any order.
class DictReader {
 public:
  DictReader(std::string_view s, const std::string& what) : s_(s), what_(what) {}

  Header read() {
    Header h;
    bool seen[3] = {false, false, false};
    expect('{');
    for (;;) {
      ws();
      if (peek() == '}') break;
      const std::string key = str();
      ws();
      expect(':');
      ws();
      int k = key == "descr" ? 0 : key == "fortran_order" ? 1 : key == "shape" ? 2 : -1;
      if (k < 0) bad(fmt::format("unknown key '{}'", printable(key)));
      if (seen[k]) bad(fmt::format("key '{}' appears twice", key));
      seen[k] = true;
      if (k == 0) h.descr = descr();
      if (k == 1) h.fortran = boolean();
      if (k == 2) h.shape = tuple();
      ws();
      if (peek() == ',') {
        ++i_;
        continue;
      }
      if (peek() != '}') bad("expected ',' or '}'");
    }
    ++i_;
    for (; i_ < s_.size(); ++i_)
      if (s_[i_] != ' ' && s_[i_] != '\n' && s_[i_] != '\t' && s_[i_] != '\r' && s_[i_] != '\0')
        bad("text after the closing '}'");
    const char* names[3] = {"descr", "fortran_order", "shape"};
    for (int k = 0; k < 3; ++k)
      if (!seen[k]) bad(fmt::format("key '{}' is missing", names[k]));
    return h;
  }

 private:
  [[noreturn]] void bad(const std::string& why) const {
    std::string_view text = s_;  // without the padding
    while (!text.empty() && (text.back() == ' ' || text.back() == '\n')) text.remove_suffix(1);
    fail("{}: bad .npy header ({} at character {}): {}; not a file np.save wrote?", what_, why, i_,
         printable(text, 160));
  }
  char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  void ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n')) ++i_;
  }
  void expect(char c) {
    ws();
    if (peek() != c) bad(fmt::format("expected '{}'", c));
    ++i_;
  }
  std::string str() {
    const char q = peek();
    if (q != '\'' && q != '"') bad("expected a quoted string");
    const size_t start = ++i_;
    while (i_ < s_.size() && s_[i_] != q) {
      if (s_[i_] == '\\') bad("escapes in strings are not supported");
      ++i_;
    }
    if (i_ >= s_.size()) bad("unterminated string");
    return std::string(s_.substr(start, i_++ - start));
  }
  std::string descr() {
    const char c = peek();
    if (c == '[' || c == '{') {  // a structured dtype: name it and refuse
      const size_t start = i_;
      int depth = 0;
      for (; i_ < s_.size(); ++i_) {
        if (s_[i_] == '[' || s_[i_] == '{' || s_[i_] == '(') ++depth;
        if ((s_[i_] == ']' || s_[i_] == '}' || s_[i_] == ')') && --depth == 0) break;
      }
      const std::string_view d = s_.substr(start, std::min(i_ + 1, s_.size()) - start);
      fail("{}: structured dtype {} is not supported; save each field as an array of its own",
           what_, printable(d, 120));
    }
    return str();
  }
  bool boolean() {
    if (s_.substr(i_, 4) == "True") {
      i_ += 4;
      return true;
    }
    if (s_.substr(i_, 5) == "False") {
      i_ += 5;
      return false;
    }
    bad("expected True or False");
  }
  std::vector<int64_t> tuple() {
    std::vector<int64_t> dims;
    expect('(');
    for (;;) {
      ws();
      if (peek() == ')') break;
      if (peek() < '0' || peek() > '9') bad("expected a dimension (a non-negative integer)");
      int64_t v = 0;
      while (peek() >= '0' && peek() <= '9') {
        if (v > (std::numeric_limits<int64_t>::max() - 9) / 10) bad("a dimension too large");
        v = v * 10 + (peek() - '0');
        ++i_;
      }
      if (peek() == 'L') ++i_;  // Python 2's long literals
      if (dims.size() >= kMaxRank)
        fail("{}: the array has more than {} dimensions, the most crossbow's tensors have", what_,
             kMaxRank);
      dims.push_back(v);
      ws();
      if (peek() == ',') {
        ++i_;
        continue;
      }
      if (peek() != ')') bad("expected ',' or ')' in the shape");
      if (dims.size() == 1) bad("a one-element shape needs a trailing comma: (n,)");
    }
    ++i_;
    return dims;
  }

  std::string_view s_;
  const std::string& what_;
  size_t i_ = 0;
};

const char kNpyMagic[6] = {'\x93', 'N', 'U', 'M', 'P', 'Y'};
const char kZipMagic[4] = {'P', 'K', '\x03', '\x04'};

Header parse_header(const std::byte* d, size_t n, const std::string& what) {
  if (n == 0) fail("{}: the file is empty", what);
  if (n >= 4 && std::memcmp(d, kZipMagic, 4) == 0)
    fail("{}: this is a .npz (zip) archive, not a .npy file; read it as .npz", what);
  if (std::memcmp(d, kNpyMagic, std::min(n, sizeof kNpyMagic)) != 0)
    fail("{}: not a .npy file (it does not start with \\x93NUMPY); is this the right file?", what);
  if (n < 10) fail("{}: {} bytes, too short for a .npy file (truncated?)", what, n);
  const auto major = static_cast<unsigned>(d[6]), minor = static_cast<unsigned>(d[7]);
  if (major < 1 || major > 3 || minor != 0)
    fail("{}: .npy format version {}.{} is not supported (1.0, 2.0 and 3.0 are)", what, major,
         minor);
  size_t start = 10;
  uint64_t hlen = load_le<uint16_t>(d + 8);
  if (major >= 2) {
    if (n < 12) fail("{}: {} bytes, too short for a .npy file (truncated?)", what, n);
    hlen = load_le<uint32_t>(d + 8);
    start = 12;
  }
  if (hlen > n - start)
    fail("{}: the .npy header claims {} bytes but only {} follow (truncated?)", what, hlen,
         n - start);
  const std::string_view text(reinterpret_cast<const char*>(d) + start, hlen);
  Header h = DictReader(text, what).read();
  h.data_offset = start + hlen;
  return h;
}

// ---- conversion: byte order, Fortran order, widening -------------------------------------------

template <size_t N>
using UintOf = std::conditional_t<
    N == 1, uint8_t,
    std::conditional_t<N == 2, uint16_t, std::conditional_t<N == 4, uint32_t, uint64_t>>>;

template <typename S>
S load_elem(const std::byte* p, bool swap) {
  using U = UintOf<sizeof(S)>;
  U u;
  std::memcpy(&u, p, sizeof u);
  if constexpr (sizeof(S) == 2) {
    if (swap) u = __builtin_bswap16(u);
  } else if constexpr (sizeof(S) == 4) {
    if (swap) u = __builtin_bswap32(u);
  } else if constexpr (sizeof(S) == 8) {
    if (swap) u = __builtin_bswap64(u);
  }
  S s;
  std::memcpy(&s, &u, sizeof s);
  return s;
}

// dst[C-order i] = D(src element i), reading src in C order or Fortran order (column-major).
template <typename S, typename D>
void gather(const std::byte* src, std::byte* dst, const std::vector<int64_t>& shape, bool fortran,
            bool swap, const std::string& what) {
  int64_t numel = 1;
  for (int64_t s : shape) numel *= s;
  if (numel == 0) return;
  // Strides in elements of the source for each axis.
  const size_t r = shape.size();
  std::vector<int64_t> stride(r, 1), idx(r, 0);
  if (fortran) {
    for (size_t k = 1; k < r; ++k) stride[k] = stride[k - 1] * shape[k - 1];
  } else {
    for (size_t k = r; k-- > 1;) stride[k - 1] = stride[k] * shape[k];
  }
  // C order is one run of numel; Fortran order walks the last axis with its stride.
  const int64_t inner = fortran && r > 0 ? shape[r - 1] : numel;
  const int64_t step = fortran && r > 0 ? stride[r - 1] : 1;
  const size_t outer_axes = fortran && r > 0 ? r - 1 : 0;
  auto* out = reinterpret_cast<D*>(dst);  // dst is 64-byte aligned owned memory
  int64_t base = 0;
  for (int64_t done = 0; done < numel; done += inner) {
    for (int64_t j = 0; j < inner; ++j) {
      const S v = load_elem<S>(src + (base + j * step) * sizeof(S), swap);
      if constexpr (std::is_same_v<S, uint64_t> && std::is_same_v<D, int64_t>) {
        if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
          fail(
              "{}: uint64 value {} does not fit in int64 (crossbow's I64); save the array as "
              "int64",
              what, v);
      }
      *out++ = static_cast<D>(v);
    }
    // Next index of the outer axes (the last of them fastest), in C order.
    for (size_t k = outer_axes; k-- > 0;) {
      base += stride[k];
      if (++idx[k] < shape[k]) break;
      base -= stride[k] * shape[k];
      idx[k] = 0;
    }
  }
}

void convert(const Elem& e, const std::byte* src, std::byte* dst, const std::vector<int64_t>& shape,
             bool fortran, const std::string& what) {
  const bool sw = e.swap;
  switch (e.conv) {
    case Conv::Same:
      switch (e.src_size) {
        case 1:
          return gather<uint8_t, uint8_t>(src, dst, shape, fortran, sw, what);
        case 2:
          return gather<uint16_t, uint16_t>(src, dst, shape, fortran, sw, what);
        case 4:
          return gather<uint32_t, uint32_t>(src, dst, shape, fortran, sw, what);
        default:
          return gather<uint64_t, uint64_t>(src, dst, shape, fortran, sw, what);
      }
    case Conv::I16ToI32:
      return gather<int16_t, int32_t>(src, dst, shape, fortran, sw, what);
    case Conv::U16ToI32:
      return gather<uint16_t, int32_t>(src, dst, shape, fortran, sw, what);
    case Conv::U32ToI64:
      return gather<uint32_t, int64_t>(src, dst, shape, fortran, sw, what);
    case Conv::U64ToI64:
      return gather<uint64_t, int64_t>(src, dst, shape, fortran, sw, what);
  }
}

// Whether a Fortran-ordered array of this shape has its elements in C order anyway (at most one
// axis longer than 1).
bool order_irrelevant(const std::vector<int64_t>& shape) {
  return std::count_if(shape.begin(), shape.end(), [](int64_t s) { return s > 1; }) <= 1;
}

NpyArray parse_npy_as(std::shared_ptr<const void> keep, const std::byte* data, size_t size,
                      const std::string& what, const NpyOptions& o, NpyBacking backing) {
  const Header h = parse_header(data, size, what);
  const Elem e = parse_descr(h.descr, what);
  NpyArray a;
  a.source = what;
  a.dtype = e.dtype;
  a.shape = h.shape;
  int64_t numel = 1;
  for (int64_t s : h.shape)
    if (__builtin_mul_overflow(numel, s, &numel))
      fail("{}: shape {} has more elements than fit in 64 bits", what, shape_str(h.shape));
  uint64_t need = 0, out_bytes = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(numel), static_cast<uint64_t>(e.src_size),
                             &need) ||
      __builtin_mul_overflow(static_cast<uint64_t>(numel), dtype_size(e.dtype), &out_bytes) ||
      out_bytes > static_cast<uint64_t>(std::numeric_limits<ptrdiff_t>::max()))
    fail("{}: shape {} of dtype '{}' needs more bytes than fit in 64 bits", what,
         shape_str(h.shape), h.descr);
  const uint64_t have = size - h.data_offset;
  if (have != need)
    fail("{}: the array's data is {} bytes but shape {} of dtype '{}' needs {}{}", what, have,
         shape_str(h.shape), h.descr, need,
         have < need ? " (truncated?)" : " (extra bytes at the end: not a file np.save wrote?)");
  const std::byte* raw = data + h.data_offset;
  const bool fortran = h.fortran && !order_irrelevant(h.shape);
  const bool aligned = reinterpret_cast<uintptr_t>(raw) % static_cast<uintptr_t>(e.src_size) == 0;
  if (e.conv == Conv::Same && !e.swap && !fortran && (aligned || o.unaligned_ok)) {
    a.keep = std::move(keep);
    a.ptr = raw;
    a.size = need;
    a.backing = backing;
    return a;
  }
  if (e.conv == Conv::U64ToI64 && !e.swap && !fortran && (aligned || o.unaligned_ok)) {
    // Same bytes when every value fits: check them and point at the input.
    for (int64_t i = 0; i < numel; ++i)
      if (load_le<uint64_t>(raw + 8 * i) > uint64_t{std::numeric_limits<int64_t>::max()})
        fail("{}: uint64 value {} does not fit in int64 (crossbow's I64); save the array as int64",
             what, load_le<uint64_t>(raw + 8 * i));
    a.keep = std::move(keep);
    a.ptr = raw;
    a.size = need;
    a.backing = backing;
    return a;
  }
  Owned w = make_owned(out_bytes, o, what);
  convert(e, raw, w.p, h.shape, fortran, what);
  a.keep = std::move(w.keep);
  a.ptr = w.p;
  a.size = out_bytes;
  a.backing = w.backing;
  return a;
}

// ---- the zip container -------------------------------------------------------------------------

struct Member {
  std::string name;
  uint16_t flags = 0, method = 0;
  uint32_t crc = 0;
  uint64_t csize = 0, usize = 0, local = 0;
  uint64_t data = 0;  // where the (compressed) bytes start
};

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

// Reads the central directory (and its zip64 extensions) and every local header; returns the
// members in the archive's order with their ranges checked.
std::vector<Member> read_directory(const std::byte* d, size_t n, const std::string& what) {
  const std::string bad = "not a file np.savez wrote?";
  if (n == 0) fail("{}: the file is empty", what);
  if (n >= 6 && std::memcmp(d, kNpyMagic, 6) == 0)
    fail("{}: this is a .npy file, not a .npz archive; read it as .npy", what);
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

  std::vector<Member> ms;
  ms.reserve(entries);
  std::set<std::string> names;
  const std::byte* cd = d + cd_off;
  uint64_t pos = 0;
  for (uint64_t i = 0; i < entries; ++i) {
    if (cd_size - pos < 46 || load_le<uint32_t>(cd + pos) != 0x02014b50)
      fail("{}: central directory entry {} is corrupt; {}", what, i, bad);
    const std::byte* e = cd + pos;
    Member m;
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
  // Members must not share bytes (overlapping members are how some zip bombs multiply).
  std::vector<const Member*> by_pos;
  for (const Member& m : ms) by_pos.push_back(&m);
  std::sort(by_pos.begin(), by_pos.end(),
            [](const Member* a, const Member* b) { return a->local < b->local; });
  for (size_t i = 1; i < by_pos.size(); ++i)
    if (by_pos[i]->local < by_pos[i - 1]->data + by_pos[i - 1]->csize)
      fail("{}: members '{}' and '{}' overlap in the file; {}", what,
           printable(by_pos[i - 1]->name), printable(by_pos[i]->name), bad);
  return ms;
}

// Inflates a deflated member into an unlinked temporary file, 1 MiB at a time, checking its size
// and CRC-32, and maps the file. zlib's crc32 (the same CRC as cb::crc32_of) runs chunk by chunk.
std::shared_ptr<const Mapping> inflate_member(const std::byte* in, const Member& m,
                                              const std::string& what, const NpyOptions& o) {
  if (m.usize == 0) fail("{}: the member is empty (a .npy array has at least a header)", what);
  const std::string dir = temp_dir_of(o);
  check_room(dir, m.usize, what);
  Fd f{open_temp(dir, what)};
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
  return std::make_shared<Mapping>(p, m.usize);
}

// Maps a whole regular file read-only.
std::shared_ptr<const Mapping> map_file(const std::string& path, const char* kind) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // a FIFO: no block
  if (fd < 0) fail("{}: cannot open the {} file: {}", path, kind, std::strerror(errno));
  Fd f{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
    fail("{}: not a regular file, so not a {} file", path, kind);
  const auto n = static_cast<size_t>(st.st_size);
  if (n == 0) fail("{}: the file is empty", path);
  void* p = ::mmap(nullptr, n, PROT_READ, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) fail("{}: cannot map the file: {}", path, std::strerror(errno));
  return std::make_shared<Mapping>(p, n);
}

}  // namespace

int64_t NpyArray::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

NpyArray parse_npy(std::shared_ptr<const void> keep, const std::byte* data, size_t size,
                   const std::string& what, const NpyOptions& o) {
  return parse_npy_as(std::move(keep), data, size, what, o, NpyBacking::Mapped);
}

std::vector<NpyArray> parse_npz(std::shared_ptr<const void> keep, const std::byte* data,
                                size_t size, const std::string& what, const NpyOptions& o) {
  const std::vector<Member> ms = read_directory(data, size, what);
  std::vector<NpyArray> out;
  out.reserve(ms.size());
  for (const Member& m : ms) {
    const std::string mwhat = fmt::format("{}: member '{}'", what, m.name);
    NpyArray a;
    if (m.method == 0) {
      if (o.check_stored_crc && crc32_of(data + m.data, m.usize) != m.crc)
        fail(
            "{}: CRC-32 mismatch (the archive says {:08x}, the data gives {:08x}): the file is "
            "corrupt",
            mwhat, m.crc, crc32_of(data + m.data, m.usize));
      a = parse_npy_as(keep, data + m.data, m.usize, mwhat, o, NpyBacking::Mapped);
    } else {
      auto map = inflate_member(data + m.data, m, mwhat, o);
      const auto* p = static_cast<const std::byte*>(map->p);
      a = parse_npy_as(map, p, map->n, mwhat, o, NpyBacking::TempFile);
    }
    a.name = m.name.substr(0, m.name.size() - 4);
    out.push_back(std::move(a));
  }
  return out;
}

NpyArray read_npy(const std::string& path, const NpyOptions& o) {
  auto map = map_file(path, ".npy");
  const auto* p = static_cast<const std::byte*>(map->p);
  NpyArray a = parse_npy(map, p, map->n, path, o);
  a.name = std::filesystem::path(path).stem().string();
  return a;
}

std::vector<NpyArray> read_npz(const std::string& path, const NpyOptions& o) {
  auto map = map_file(path, ".npz");
  const auto* p = static_cast<const std::byte*>(map->p);
  return parse_npz(map, p, map->n, path, o);
}

}  // namespace cb
