// TensorBoard event files (see tensorboard.h).
#include "sma/tensorboard.h"

#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "runtime/checksum.h"
#include "runtime/error.h"

namespace cb {

namespace {

uint32_t masked_crc(const void* data, size_t n) {
  const uint32_t c = crc32c_of(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Protobuf wire encoding, the few cases used.
void varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
void key(std::string& out, int field, int wire) {
  varint(out, static_cast<uint64_t>(field << 3 | wire));
}
void fixed64(std::string& out, int field, double v) {
  key(out, field, 1);
  char b[8];
  std::memcpy(b, &v, 8);
  out.append(b, 8);
}
void fixed32(std::string& out, int field, float v) {
  key(out, field, 5);
  char b[4];
  std::memcpy(b, &v, 4);
  out.append(b, 4);
}
void bytes(std::string& out, int field, const std::string& s) {
  key(out, field, 2);
  varint(out, s.size());
  out += s;
}

// Decoding: a cursor over one message.
struct Cursor {
  const std::string& s;
  size_t at, end;
  const std::string& what;
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (at >= end) fail("{}: a varint runs past its message", what);
      const auto b = static_cast<uint8_t>(s[at++]);
      v |= static_cast<uint64_t>(b & 0x7F) << shift;
      if (!(b & 0x80)) return v;
    }
    fail("{}: a varint is longer than 10 bytes", what);
  }
  std::string take(size_t n) {
    if (n > end - at) fail("{}: a field runs past its message", what);
    std::string r = s.substr(at, n);
    at += n;
    return r;
  }
  void skip(int wire) {
    if (wire == 0)
      varint();
    else if (wire == 1)
      take(8);
    else if (wire == 2)
      take(varint());
    else if (wire == 5)
      take(4);
    else
      fail("{}: wire type {} is not expected here", what, wire);
  }
};

}  // namespace

EventWriter::EventWriter(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) fail("--tensorboard {}: cannot create the folder: {}", dir, ec.message());
  char host[256] = "localhost";
  gethostname(host, sizeof host - 1);
  path_ = (std::filesystem::path(dir) / fmt::format("events.out.tfevents.{}.{}.{}",
                                                    static_cast<int64_t>(now_s()), host, getpid()))
              .string();
  f_ = std::fopen(path_.c_str(), "wb");
  if (!f_) fail("{}: cannot create the event file: {}", path_, std::strerror(errno));
  std::string ev;
  fixed64(ev, 1, now_s());
  bytes(ev, 3, "brain.Event:2");
  record(ev);
}

EventWriter::~EventWriter() {
  if (f_) std::fclose(f_);
}

void EventWriter::record(const std::string& data) {
  std::string r;
  const uint64_t n = data.size();
  char len[8];
  std::memcpy(len, &n, 8);  // little-endian on every platform crossbow builds for
  r.append(len, 8);
  const uint32_t lc = masked_crc(len, 8), dc = masked_crc(data.data(), data.size());
  r.append(reinterpret_cast<const char*>(&lc), 4);
  r += data;
  r.append(reinterpret_cast<const char*>(&dc), 4);
  if (std::fwrite(r.data(), 1, r.size(), f_) != r.size() || std::fflush(f_) != 0)
    fail("{}: writing an event failed (is the disk full?): {}", path_, std::strerror(errno));
}

void EventWriter::scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values) {
  std::string summary;
  for (const auto& [tag, v] : values) {
    std::string value;
    bytes(value, 1, tag);
    fixed32(value, 2, static_cast<float>(v));
    bytes(summary, 1, value);
  }
  std::string ev;
  fixed64(ev, 1, now_s());
  key(ev, 2, 0);
  varint(ev, static_cast<uint64_t>(step));
  bytes(ev, 5, summary);
  record(ev);
}

std::vector<ScalarEvent> read_event_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("{}: cannot open the event file", path);
  const std::string all((std::istreambuf_iterator<char>(f)), {});
  std::vector<ScalarEvent> out;
  size_t at = 0;
  for (int index = 0; at < all.size(); ++index) {
    const std::string what = fmt::format("{}: record {} (byte {})", path, index, at);
    if (all.size() - at < 12) fail("{}: a cut record header", what);
    uint64_t n = 0;
    uint32_t lc = 0, dc = 0;
    std::memcpy(&n, all.data() + at, 8);
    std::memcpy(&lc, all.data() + at + 8, 4);
    if (lc != masked_crc(all.data() + at, 8)) fail("{}: the length's CRC does not match", what);
    if (n > all.size() - at - 12 || all.size() - at - 12 - n < 4)
      fail("{}: the record is cut ({} bytes announced)", what, n);
    const std::string data = all.substr(at + 12, n);
    std::memcpy(&dc, all.data() + at + 12 + n, 4);
    if (dc != masked_crc(data.data(), data.size())) fail("{}: the data's CRC does not match", what);
    at += 12 + n + 4;

    ScalarEvent ev;
    Cursor c{data, 0, data.size(), what};
    while (c.at < c.end) {
      const uint64_t k = c.varint();
      const int field = static_cast<int>(k >> 3), wire = static_cast<int>(k & 7);
      if (field == 1 && wire == 1) {
        std::string b = c.take(8);
        std::memcpy(&ev.wall_time, b.data(), 8);
      } else if (field == 2 && wire == 0) {
        ev.step = static_cast<int64_t>(c.varint());
      } else if (field == 3 && wire == 2) {
        ev.file_version = c.take(c.varint());
      } else if (field == 5 && wire == 2) {
        const std::string summary = c.take(c.varint());
        Cursor sc{summary, 0, summary.size(), what};
        while (sc.at < sc.end) {
          const uint64_t sk = sc.varint();
          if (sk != (1 << 3 | 2)) {
            sc.skip(static_cast<int>(sk & 7));
            continue;
          }
          const std::string value = sc.take(sc.varint());
          Cursor vc{value, 0, value.size(), what};
          std::pair<std::string, float> tv;
          while (vc.at < vc.end) {
            const uint64_t vk = vc.varint();
            if (vk == (1 << 3 | 2)) {
              tv.first = vc.take(vc.varint());
            } else if (vk == (2 << 3 | 5)) {
              std::string b = vc.take(4);
              std::memcpy(&tv.second, b.data(), 4);
            } else {
              vc.skip(static_cast<int>(vk & 7));
            }
          }
          ev.scalars.push_back(std::move(tv));
        }
      } else {
        c.skip(wire);
      }
    }
    out.push_back(std::move(ev));
  }
  return out;
}

}  // namespace cb
