// NumPy readers (runtime/data/npy.h) against files Debian's NumPy writes at test time
// (/usr/bin/python3): every dtype, byte order and memory order np.save writes, .npy versions 1 to
// 3, 0-d and empty arrays, np.savez (stored) and np.savez_compressed (deflate) archives, zip64
// records everywhere; values compared byte for byte with what NumPy converts the arrays to. Then
// where the bytes live (a stored member inside the file's mapping, a deflated one in a mapped
// temporary file, with bounded memory for a 200 MB member), and malformed files: each message
// names the file (and member) and the problem.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/data/npy.h"
#include "runtime/error.h"
#include "tests/test_util.h"

using namespace cb;
using test::contains;
using test::error_of;
using test::TempDir;

namespace {

const char* const kPython = "/usr/bin/python3";

// Writes the fixtures into argv[1]. For each array it reads back, expect.txt has a line
// "FILE MEMBER DTYPE SHAPE" (MEMBER "-" for a .npy file, SHAPE comma-separated, "" for 0-d) and
// FILE.MEMBER.bin holds the C-order little-endian bytes crossbow should produce.
const char* const kScript = R"PY(
import struct, sys, warnings, zipfile
import numpy as np
d = sys.argv[1]
a = np.arange(24).reshape(2, 3, 4) - 5
cases = {
    'f4': (a.astype('<f4') / 3, 'f32'), 'f8': (a.astype('<f8') / 7, 'f64'),
    'f2': (a.astype('<f2') / 2, 'f16'), 'i8': (a.astype('<i8') * 2**40, 'i64'),
    'i4': (a.astype('<i4') * 70000, 'i32'), 'i2': (a.astype('<i2') * 1000, 'i32'),
    'i1': (a.astype('i1'), 'i8'), 'u1': ((a + 200).astype('u1'), 'u8'),
    'b1': (a % 3 == 0, 'bool'), 'u2': ((a + 5) * 2700, 'i32'),
    'u4': (((a + 5) * 2**27).astype('<u4'), 'i64'), 'u8': ((a + 5).astype('<u8') * 2**58, 'i64'),
    'f4be': ((a / 3).astype('>f4'), 'f32'), 'f8be': ((a / 7).astype('>f8'), 'f64'),
    'i2be': ((a * 1000).astype('>i2'), 'i32'), 'u8be': ((a + 5).astype('>u8'), 'i64'),
    'fort': (np.asfortranarray(a.astype('<f4') / 3), 'f32'),
    'fortbe': (np.asfortranarray(a.astype('>i8')), 'i64'),
    'fort2': (np.asfortranarray(np.arange(15, dtype='<i4').reshape(3, 5)), 'i32'),
    'scalar': (np.float32(2.5), 'f32'), 'empty': (np.zeros((0, 3), '<f8'), 'f64'),
    'vec': (np.arange(70000, dtype='<i4'), 'i32'),
}
cases['u2'] = (cases['u2'][0].astype('<u2'), 'i32')
target = {'f32': '<f4', 'f64': '<f8', 'f16': '<f2', 'i64': '<i8', 'i32': '<i4', 'i8': 'i1',
          'u8': 'u1', 'bool': '?'}
lines = []
def expect(file, member, arr, dt):
    arr = np.asarray(arr)
    with open(f'{d}/{file}.{member}.bin', 'wb') as f:
        f.write(np.ascontiguousarray(arr.astype(target[dt])).tobytes())
    lines.append(f"{file} {member} {dt} {','.join(map(str, arr.shape))}")
for k, (v, dt) in cases.items():
    np.save(f'{d}/{k}.npy', v)
    expect(f'{k}.npy', '-', v, dt)
for ver in [(2, 0), (3, 0)]:
    name = f'v{ver[0]}.npy'
    with open(f'{d}/{name}', 'wb') as f:
        np.lib.format.write_array(f, cases['f4'][0], version=ver)
    expect(name, '-', cases['f4'][0], 'f32')
members = {k: cases[k] for k in ['f4', 'i2', 'b1', 'fort', 'f8be', 'scalar', 'empty', 'vec']}
np.savez(f'{d}/stored.npz', **{k: v for k, (v, _) in members.items()})
np.savez_compressed(f'{d}/deflated.npz', **{k: v for k, (v, _) in members.items()})
for f in ['stored.npz', 'deflated.npz']:
    for k, (v, dt) in members.items():
        expect(f, k, v, dt)
# zip64 records everywhere: every size and offset in the zip64 extra field, a zip64 end record.
limits = zipfile.ZIP64_LIMIT, zipfile.ZIP_FILECOUNT_LIMIT
zipfile.ZIP64_LIMIT = zipfile.ZIP_FILECOUNT_LIMIT = 0
for f, save in [('zip64.npz', np.savez), ('zip64c.npz', np.savez_compressed)]:
    save(f'{d}/{f}', x=cases['i8'][0], y=cases['vec'][0])
    expect(f, 'x', cases['i8'][0], 'i64')
    expect(f, 'y', cases['vec'][0], 'i32')
zipfile.ZIP64_LIMIT, zipfile.ZIP_FILECOUNT_LIMIT = limits
# Member alignment: 'ab.npy' first puts its data at byte 184 (30 + 6 + 20 + 128), 'x.npy' at 183.
np.savez(f'{d}/aligned.npz', ab=cases['f4'][0])
np.savez(f'{d}/unaligned.npz', x=cases['f4'][0])
open(f'{d}/expect.txt', 'w').write('\n'.join(lines) + '\n')

# ---- malformed files ----
def save_bytes(name, b):
    open(f'{d}/{name}', 'wb').write(b)
good = open(f'{d}/f4.npy', 'rb').read()
save_bytes('bad_truncated.npy', good[:-5])
save_bytes('bad_magic.npy', b'\x93NUMPX' + good[6:])
save_bytes('bad_version.npy', good[:6] + b'\x04\x00' + good[8:])
save_bytes('bad_key.npy', good.replace(b"'shape'", b"'shapf'"))
save_bytes('bad_tuple.npy', good.replace(b"(2, 3, 4)", b"(2, 3; 4)"))
save_bytes('bad_overflow.npy', good.replace(b"(2, 3, 4)", b"(4294967296, 4294967296, 4)"))
save_bytes('bad_count.npy', good.replace(b"(2, 3, 4)", b"(2, 3, 5)"))
save_bytes('bad_extra.npy', good + b'\0\0\0\0')
save_bytes('bad_rank.npy', good.replace(b"(2, 3, 4), }" + b" " * 10, b"(1,1,1,1,1,1,1,1,1), }"))
np.save(f'{d}/bad_object.npy', np.array([{'a': 1}, None], dtype=object), allow_pickle=True)
np.save(f'{d}/bad_struct.npy', np.zeros(3, dtype=[('a', '<f4'), ('b', '<i8')]))
np.save(f'{d}/bad_complex.npy', np.zeros(3, dtype='<c8'))
np.save(f'{d}/bad_string.npy', np.array(['ab', 'c']))
np.save(f'{d}/bad_u8.npy', np.array([1, 2**63 + 5], dtype='<u8'))
save_bytes('bad_empty.npy', b'')
def cd(b):  # offsets of the central directory entries
    e = b.rfind(b'PK\x05\x06')
    n, off = struct.unpack_from('<H', b, e + 10)[0], struct.unpack_from('<I', b, e + 16)[0]
    out = []
    for _ in range(n):
        out.append(off)
        nl, xl, cl = struct.unpack_from('<HHH', b, off + 28)
        off += 46 + nl + xl + cl
    return out
def patch(b, at, fmt, v):
    b = bytearray(b); struct.pack_into(fmt, b, at, v); return bytes(b)
st = open(f'{d}/stored.npz', 'rb').read()
de = open(f'{d}/deflated.npz', 'rb').read()
save_bytes('bad_truncated.npz', st[:len(st) // 2])
e0, e1 = cd(st)[0], cd(st)[1]
last_data_end = struct.unpack_from('<I', st, st.rfind(b'PK\x05\x06') + 16)[0]
save_bytes('bad_crc.npz', st[:last_data_end - 1] + bytes([st[last_data_end - 1] ^ 1]) +
           st[last_data_end:])
save_bytes('bad_offset.npz', patch(st, e1 + 42, '<I', len(st) + 100))
save_bytes('bad_bomb.npz', patch(de, cd(de)[0] + 24, '<I', 0xFFFFFF00))
csize = struct.unpack_from('<I', de, cd(de)[0] + 20)[0]
save_bytes('bad_cut.npz', patch(de, cd(de)[0] + 20, '<I', csize // 2))
# member 0 made to cover member 1's local header (both sizes, stored)
size0 = struct.unpack_from('<I', st, e0 + 24)[0] + 40
save_bytes('bad_overlap.npz', patch(patch(st, e0 + 20, '<I', size0), e0 + 24, '<I', size0))
x = open(f'{d}/f4.npy', 'rb').read()
def zwrite(name, entries, method=zipfile.ZIP_STORED):
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        with zipfile.ZipFile(f'{d}/{name}', 'w', compression=method) as z:
            for n, b in entries:
                z.writestr(n, b)
zwrite('bad_duplicate.npz', [('x.npy', x), ('x.npy', x)])
zwrite('bad_nested.npz', [('x.npy', x), ('sub/y.npy', x)])
zwrite('bad_parent.npz', [('../y.npy', x)])
zwrite('bad_text.npz', [('x.npy', x), ('README.txt', b'hello')])
zwrite('bad_bzip2.npz', [('x.npy', x)], zipfile.ZIP_BZIP2)
zwrite('bad_inner.npz', [('x.npy', open(f'{d}/bad_object.npy', 'rb').read())])
)PY";

bool fixtures_ready = false;
TempDir& fixtures() {
  static TempDir dir("npy");
  if (!fixtures_ready) {
    std::ofstream(dir / "make.py") << kScript;
    const std::string cmd = fmt::format("{} {} {}", kPython, dir / "make.py", dir.str());
    const int rc = std::system(cmd.c_str());
    REQUIRE_MESSAGE((WIFEXITED(rc) && WEXITSTATUS(rc) == 0), "failed: " << cmd);
    fixtures_ready = true;
  }
  return dir;
}

bool need_numpy() {
  if (!test::need(kPython, "Debian's python3 (writes the NumPy fixtures)")) return false;
  const std::string cmd = fmt::format("{} -c 'import numpy' > /dev/null 2>&1", kPython);
  if (std::system(cmd.c_str()) == 0) return true;
  return test::need(fmt::format("{} with import numpy", kPython),
                    "NumPy for /usr/bin/python3 (python3-numpy)");
}

std::string dims_of(const std::vector<int64_t>& s) { return fmt::format("{}", fmt::join(s, ",")); }

// The line of /proc/self/maps whose range holds `p` ("" if none).
std::string mapping_of(const void* p) {
  std::ifstream f("/proc/self/maps");
  const auto a = reinterpret_cast<uintptr_t>(p);
  for (std::string line; std::getline(f, line);) {
    uintptr_t lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx", &lo, &hi) == 2 && lo <= a && a < hi) return line;
  }
  return "";
}

// A field of /proc/self/status in kB (-1 if missing).
int64_t status_kb(const std::string& key) {
  std::ifstream f("/proc/self/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind(key + ":", 0) == 0) return std::atoll(line.c_str() + key.size() + 1);
  return -1;
}

}  // namespace

TEST_CASE("npy: every dtype, byte order, memory order and container NumPy writes, byte for byte") {
  if (!need_numpy()) return;
  TempDir& dir = fixtures();
  std::map<std::string, std::vector<NpyArray>> npz;
  std::ifstream ex(dir / "expect.txt");
  int checked = 0;
  for (std::string line; std::getline(ex, line);) {
    std::istringstream in(line);
    std::string file, member, dt, dims;
    in >> file >> member >> dt >> dims;
    CAPTURE(line);
    NpyArray a;
    if (member == "-") {
      a = read_npy(dir / file);
      CHECK(a.name == file.substr(0, file.size() - 4));
      CHECK(a.source == dir / file);
    } else {
      if (!npz.count(file)) npz[file] = read_npz(dir / file);
      const NpyArray* m = nullptr;
      for (const NpyArray& x : npz[file])
        if (x.name == member) m = &x;
      REQUIRE(m != nullptr);
      a = *m;
      CHECK(a.source == fmt::format("{}: member '{}.npy'", dir / file, member));
    }
    CHECK(std::string(dtype_name(a.dtype)) == dt);
    CHECK(dims_of(a.shape) == dims);
    const std::string want = test::read_text(dir / (file + "." + member + ".bin"));
    REQUIRE(a.bytes() == want.size());
    CHECK(a.bytes() == static_cast<size_t>(a.numel()) * dtype_size(a.dtype));
    // (An empty array may have no data at all: memcmp must not see its null pointer.)
    CHECK((want.empty() || std::memcmp(a.data(), want.data(), want.size()) == 0));
    ++checked;
  }
  CHECK(checked >= 44);
  // The archive's order.
  std::vector<std::string> names;
  for (const NpyArray& a : npz["deflated.npz"]) names.push_back(a.name);
  CHECK(fmt::format("{}", fmt::join(names, " ")) == "f4 i2 b1 fort f8be scalar empty vec");
}

TEST_CASE("npy: where the bytes live: the file's mapping, a temporary file, or a copy") {
  if (!need_numpy()) return;
  TempDir& dir = fixtures();
  TempDir tmp("npy_tmp");
  NpyOptions o;
  o.temp_dir = tmp.str();
  SUBCASE("a .npy file and an aligned stored member point into the file's mapping") {
    const NpyArray a = read_npy(dir / "f4.npy", o);
    CHECK(a.backing == NpyBacking::Mapped);
    CHECK(contains(mapping_of(a.data()), dir / "f4.npy"));
    const std::vector<NpyArray> z = read_npz(dir / "aligned.npz", o);
    REQUIRE(z.size() == 1);
    CHECK(z[0].backing == NpyBacking::Mapped);
    CHECK(contains(mapping_of(z[0].data()), dir / "aligned.npz"));
  }
  SUBCASE("an unaligned stored member is copied, or mapped with unaligned_ok") {
    std::vector<NpyArray> z = read_npz(dir / "unaligned.npz", o);
    REQUIRE(z.size() == 1);
    CHECK(z[0].backing == NpyBacking::Heap);
    CHECK(reinterpret_cast<uintptr_t>(z[0].data()) % 4 == 0);
    o.unaligned_ok = true;
    z = read_npz(dir / "unaligned.npz", o);
    CHECK(z[0].backing == NpyBacking::Mapped);
    CHECK(contains(mapping_of(z[0].data()), dir / "unaligned.npz"));
    CHECK(reinterpret_cast<uintptr_t>(z[0].data()) % 4 == 3);
    CHECK(std::memcmp(z[0].data(), test::read_text(dir / "f4.npy.-.bin").data(), 96) == 0);
  }
  SUBCASE("a deflated member lives in an unlinked temporary file under temp_dir") {
    const std::vector<NpyArray> z = read_npz(dir / "deflated.npz", o);
    for (const NpyArray& a : z) {
      CAPTURE(a.name);
      if (a.name == "fort" || a.name == "f8be" || a.name == "i2") continue;  // copies
      if (a.bytes() == 0) continue;
      CHECK(a.backing == NpyBacking::TempFile);
      const std::string m = mapping_of(a.data());
      CHECK(contains(m, tmp.str()));
      CHECK(contains(m, "(deleted)"));
    }
    CHECK(std::filesystem::is_empty(tmp.path));  // unlinked: nothing left behind
  }
  SUBCASE("a copy bigger than heap_limit goes to a temporary file") {
    o.heap_limit = 16;
    const NpyArray a = read_npy(dir / "f8be.npy", o);
    CHECK(a.backing == NpyBacking::TempFile);
    CHECK(contains(mapping_of(a.data()), tmp.str()));
    CHECK(std::memcmp(a.data(), test::read_text(dir / "f8be.npy.-.bin").data(), a.bytes()) == 0);
  }
}

TEST_CASE("npy: a 200 MB deflated member inflates with bounded memory into a mapped file") {
  if (!need_numpy()) return;
  TempDir dir("npy_big");
  const std::string cmd = fmt::format(
      "{} -c \"import numpy as np; np.savez_compressed('{}', big=(np.arange(50_000_000, "
      "dtype=np.uint32) % 1000).astype(np.float32))\"",
      kPython, dir / "big.npz");
  REQUIRE(std::system(cmd.c_str()) == 0);
  NpyOptions o;
  o.temp_dir = dir.str();
  // Peak resident memory from here on: reset the high-water mark where the kernel allows it.
  const int fd = ::open("/proc/self/clear_refs", O_WRONLY | O_CLOEXEC);
  const bool reset = fd >= 0 && ::write(fd, "5", 1) == 1;
  if (fd >= 0) ::close(fd);
  const int64_t before = reset ? status_kb("VmRSS") : status_kb("RssAnon");
  std::vector<NpyArray> z = read_npz(dir / "big.npz", o);
  const int64_t after = reset ? status_kb("VmHWM") : status_kb("RssAnon");
  REQUIRE(z.size() == 1);
  const NpyArray& a = z[0];
  CHECK(a.bytes() == 200'000'000);
  CHECK(a.backing == NpyBacking::TempFile);
  CHECK(contains(mapping_of(a.data()), "(deleted)"));
  MESSAGE("resident growth while inflating 200 MB: " << (after - before) / 1024 << " MiB ("
                                                     << std::string(reset ? "peak" : "anonymous")
                                                     << ")");
  CHECK(after - before < 48 * 1024);
  for (int64_t i = 0; i < 50'000'000; i += 999'983) {
    float v;
    std::memcpy(&v, a.data() + 4 * i, 4);
    CHECK(v == static_cast<float>(i % 1000));
  }
}

TEST_CASE("npy: malformed files each get one clear error naming the file, member and problem") {
  if (!need_numpy()) return;
  TempDir& dir = fixtures();
  TempDir tmp("npy_bad");
  NpyOptions o;
  o.temp_dir = tmp.str();
  struct Case {
    std::string file;
    std::vector<std::string> expect;
    bool npz = false;  // read with read_npz (else read_npy)
  };
  const std::vector<Case> cases = {
      {"bad_truncated.npy", {"data is 91 bytes", "needs 96", "truncated"}},
      {"bad_magic.npy", {"not a .npy file"}},
      {"bad_version.npy", {"format version 4.0 is not supported"}},
      {"bad_key.npy", {"bad .npy header", "unknown key 'shapf'"}},
      {"bad_tuple.npy", {"bad .npy header", "expected ',' or ')' in the shape"}},
      {"bad_overflow.npy", {"shape [4294967296,4294967296,4]", "more elements than fit"}},
      {"bad_count.npy", {"shape [2,3,5]", "needs 120"}},
      {"bad_extra.npy", {"extra bytes at the end"}},
      {"bad_rank.npy", {"more than 8 dimensions"}},
      {"bad_object.npy", {"holds Python objects (pickled", "save it with a numeric dtype"}},
      {"bad_struct.npy", {"structured dtype [('a', '<f4'), ('b', '<i8')] is not supported"}},
      {"bad_complex.npy", {"dtype '<c8' (complex numbers) is not supported"}},
      {"bad_string.npy", {"(strings) is not supported"}},
      {"bad_u8.npy", {"uint64 value 9223372036854775813 does not fit in int64"}},
      {"bad_empty.npy", {"the file is empty"}},
      {"stored.npz", {"this is a .npz (zip) archive, not a .npy file"}},
      {"bad_truncated.npz", {"no zip end-of-central-directory record"}, true},
      {"bad_crc.npz", {"member 'vec.npy'", "CRC-32 mismatch", "corrupt"}, true},
      {"bad_offset.npz", {"member 'i2.npy'", "local header", "out of range"}, true},
      {"bad_bomb.npz", {"member 'f4.npy'", "more than deflate can produce", "zip bomb"}, true},
      {"bad_cut.npz", {"member 'f4.npy'", "compressed data ends early"}, true},
      {"bad_overlap.npz", {"members 'f4.npy' and 'i2.npy' overlap"}, true},
      {"bad_duplicate.npz", {"member 'x.npy'", "appears twice"}, true},
      {"bad_nested.npz", {"member 'sub/y.npy'", "nested path name"}, true},
      {"bad_parent.npz", {"member '../y.npy'", "nested path name"}, true},
      {"bad_text.npz", {"member 'README.txt'", "not a .npy array"}, true},
      {"bad_bzip2.npz", {"member 'x.npy'", "compression method 12 (bzip2) is not supported"}, true},
      {"bad_inner.npz", {"member 'x.npy'", "holds Python objects (pickled"}, true},
      {"f4.npy", {"this is a .npy file, not a .npz archive"}, true},
      {"missing.npz", {"cannot open"}, true},
  };
  for (const Case& c : cases) {
    CAPTURE(c.file);
    const std::string path = dir / c.file;
    const std::string msg = error_of([&] {
      if (c.npz)
        read_npz(path, o);
      else
        read_npy(path, o);
    });
    CAPTURE(msg);
    CHECK(contains(msg, path));
    for (const std::string& e : c.expect) CHECK(contains(msg, e));
  }
  CHECK(std::filesystem::is_empty(tmp.path));
}

TEST_CASE("npy: hand-made headers: versions, spacing, and what the strict parser refuses") {
  // A .npy file from a header dict and data bytes (version 1.0, no padding).
  auto npy = [](const std::string& dict, const std::string& data) {
    std::string s = std::string("\x93NUMPY\x01\x00", 8);
    const std::string h = dict + "\n";
    s += static_cast<char>(h.size() & 0xFF);
    s += static_cast<char>(h.size() >> 8);
    return s + h + data;
  };
  auto parse = [](const std::string& s) {
    auto keep = std::make_shared<std::string>(s);
    return parse_npy(keep, reinterpret_cast<const std::byte*>(keep->data()), keep->size(), "t");
  };
  const std::string four(4, '\x01');
  CHECK(parse(npy("{'shape':(1,),'fortran_order':False,'descr':'<i4'}", four)).numel() == 1);
  CHECK(
      parse(npy("{\"descr\": \"|u1\", \"fortran_order\": True, \"shape\": (2, 2)}", four)).shape ==
      std::vector<int64_t>{2, 2});
  CHECK(parse(npy("{'descr': '<i4', 'fortran_order': False, 'shape': (1L,), }", four)).numel() ==
        1);
  const std::pair<std::string, std::string> bad[] = {
      {"{'descr': '<i4', 'fortran_order': False, 'shape': (1)}", "needs a trailing comma"},
      {"{'descr': '<i4', 'fortran_order': 0, 'shape': (1,)}", "expected True or False"},
      {"{'descr': '<i4', 'shape': (1,)}", "key 'fortran_order' is missing"},
      {"{'descr': '<i4', 'descr': '<i4', 'fortran_order': False, 'shape': (1,)}", "twice"},
      {"{'descr': '<i4', 'fortran_order': False, 'shape': (-1,)}", "non-negative integer"},
      {"{'descr': '<i4', 'fortran_order': False, 'shape': (1,)} x", "after the closing"},
      {"{'descr': '<i4', 'fortran_order': False, 'shape': (1,)", "expected ',' or '}'"},
      {"{'descr': 'i4', 'fortran_order': False, 'shape': (1,)}", "not a dtype NumPy writes"},
      {"{'descr': '<f16', 'fortran_order': False, 'shape': (1,)}", "floats of this size"},
      {"{'descr': '|i4', 'fortran_order': False, 'shape': (1,)}", "no byte order"},
      {"{'descr': '<M8[ns]', 'fortran_order': False, 'shape': (1,)}", "dates or time spans"},
      {"{'descr': '<i4', 'fortran_order': False, 'shape': (99999999999999999999,)}", "too large"},
  };
  for (const auto& [dict, frag] : bad) {
    CAPTURE(dict);
    const std::string msg = error_of([&] { parse(npy(dict, four)); });
    CHECK(contains(msg, "t: "));
    CHECK(contains(msg, frag));
  }
  // Headers claiming more than there is.
  CHECK(contains(error_of([&] { parse(std::string("\x93NUMPY\x01\x00\xff\xff{", 11)); }),
                 "claims 65535 bytes"));
  CHECK(contains(error_of([&] { parse(std::string("\x93NUMPY\x02\x00\xff\xff", 10)); }),
                 "too short"));
  // A prefix of the magic is a short file, not a wrong one.
  CHECK(contains(error_of([&] { parse(std::string("\x93NUM", 4)); }), "too short"));
}
