// NumPy .npy files and .npz archives (see npy.h). Every length and offset read from the input is
// checked against the bytes there before it is used, in 64-bit arithmetic with overflow checks;
// nothing is allocated from a size the input claims except after that check (owned copies are
// exactly the array's bytes, which the input holds) and inflated data goes to a temporary file.
#include "runtime/data/npy.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

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
#include "runtime/data/temp_files.h"
#include "runtime/data/untrusted_bytes.h"
#include "runtime/data/zip_archive.h"
#include "runtime/error.h"
#include "runtime/small_vec.h"

namespace cb {

static_assert(std::endian::native == std::endian::little,
              "the readers assume a little-endian host");

namespace {

// ---- small helpers -----------------------------------------------------------------------------

std::string shape_str(const std::vector<int64_t>& s) {
  return fmt::format("[{}]", fmt::join(s, ","));
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
  const std::string dir = temp_dir_or_default(o.temp_dir);
  check_room(dir, n, what);
  ScopedFd f{open_temp(dir, what)};
  // Reserve the blocks now: a full disk is an error here, not a SIGBUS when a page is written.
  if (const int e = ::posix_fallocate(f.fd, 0, static_cast<off_t>(n)); e != 0)
    fail("{}: cannot reserve {} bytes in a temporary file in {}: {}; {}", what, n, dir,
         std::strerror(e), kTempHint);
  void* m = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED, f.fd, 0);
  if (m == MAP_FAILED) fail("{}: cannot map a temporary file: {}", what, std::strerror(errno));
  r.keep = std::make_shared<FileMapping>(m, n);
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
  if (size == 0) fail("{}: the file is empty", what);
  if (size >= 6 && std::memcmp(data, kNpyMagic, 6) == 0)
    fail("{}: this is a .npy file, not a .npz archive; read it as .npy", what);
  const std::vector<ZipMember> ms = read_zip_directory(data, size, what);
  std::vector<NpyArray> out;
  out.reserve(ms.size());
  for (const ZipMember& m : ms) {
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
      auto map = inflate_member(data + m.data, m, mwhat, o.temp_dir);
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
