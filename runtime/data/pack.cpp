// Packed caches (see pack.h).
#include "runtime/data/pack.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <thread>

#include "runtime/checksum.h"
#include "runtime/data/image_folder.h"
#include "runtime/error.h"

namespace cb {

namespace fs = std::filesystem;

namespace {

constexpr char kMagic[6] = {'C', 'B', 'P', 'A', 'C', 'K'};
constexpr uint16_t kVersion = 1;
constexpr int64_t kChunk = 256;  // images decoded in parallel before they are written in order

struct Header {
  char magic[6];
  uint16_t version;
  uint32_t size, classes;
  uint64_t train, test;
  uint64_t index_offset, index_bytes;
  uint64_t fingerprint;
  uint64_t file_bytes;
  double val_split;
  uint32_t index_crc, reserved;
  uint8_t pad[44];
  uint32_t header_crc;  // of the 124 bytes before it
};
static_assert(sizeof(Header) == 128);

struct Rec {
  uint64_t offset;
  uint32_t rows, cols;
  int64_t label;
  uint32_t crc, split;  // split: 0 training, 1 test
};
static_assert(sizeof(Rec) == 32);

void put_string(std::vector<uint8_t>& out, const std::string& s) {
  const auto n = static_cast<uint32_t>(s.size());
  const auto* p = reinterpret_cast<const uint8_t*>(&n);
  out.insert(out.end(), p, p + 4);
  out.insert(out.end(), s.begin(), s.end());
}

class Writer {
 public:
  explicit Writer(const std::string& path) : path_(path), f_(std::fopen(path.c_str(), "wb")) {
    if (!f_) fail("{}: cannot create the pack file: {}", path, std::strerror(errno));
  }
  ~Writer() {
    if (f_) std::fclose(f_);
  }
  void write(const void* p, size_t n) {
    if (n && std::fwrite(p, 1, n, f_) != n)
      fail("{}: write failed after {} bytes: {} (is the disk full?)", path_, pos_,
           std::strerror(errno));
    pos_ += n;
  }
  void align(size_t a) {
    static const uint8_t zeros[64] = {};
    if (pos_ % a) write(zeros, a - pos_ % a);
  }
  void seek_start() {
    if (std::fflush(f_) != 0 || std::fseek(f_, 0, SEEK_SET) != 0)
      fail("{}: cannot rewrite the header: {}", path_, std::strerror(errno));
  }
  void close() {
    const bool bad = std::fflush(f_) != 0 || fsync(fileno(f_)) != 0;
    const int e = errno;
    const bool closed = std::fclose(f_) == 0;
    f_ = nullptr;
    if (bad || !closed) fail("{}: write failed: {} (is the disk full?)", path_, std::strerror(e));
  }
  uint64_t pos() const { return pos_; }

 private:
  std::string path_;
  std::FILE* f_;
  uint64_t pos_ = 0;
};

// A pack, memory-mapped, shared by its two splits.
struct PackFile {
  std::string path;
  const uint8_t* base = nullptr;
  size_t len = 0;
  Header h{};
  const Rec* recs = nullptr;
  std::vector<std::string> names;  // per record, relative to the source folder
  std::unique_ptr<std::atomic<uint8_t>[]> verified;
  ~PackFile() {
    if (base) munmap(const_cast<uint8_t*>(base), len);
  }
};

class PackExamples final : public Examples {
 public:
  PackExamples(std::shared_ptr<PackFile> f, std::vector<uint32_t> ids)
      : f_(std::move(f)), ids_(std::move(ids)) {}
  int64_t size() const override { return static_cast<int64_t>(ids_.size()); }
  int64_t label(int64_t i) const override { return rec(i).label; }
  std::string name(int64_t i) const override {
    return fmt::format("{} (in {})", f_->names[ids_[static_cast<size_t>(i)]], f_->path);
  }
  ExampleDims dims() const override { return {3, 0, 0}; }
  bool load(int64_t i, const DecodeOptions& o, Image& out, std::string& why) const override {
    const uint32_t id = ids_[static_cast<size_t>(i)];
    const Rec& r = f_->recs[id];
    const uint8_t* p = f_->base + r.offset;
    const size_t n = static_cast<size_t>(r.rows) * r.cols * 3;
    if (!f_->verified[id].load(std::memory_order_relaxed)) {
      if (crc32_of(p, n) != r.crc)
        fail(
            "{}: record {} ({}) fails its checksum: the pack is corrupt; delete it and rebuild it "
            "with cb-pack (or cb-train --cache)",
            f_->path, id, f_->names[id]);
      f_->verified[id].store(1, std::memory_order_relaxed);
    }
    out.rows = static_cast<int>(r.rows);
    out.cols = static_cast<int>(r.cols);
    out.channels = o.channels;
    if (o.channels != 1 && o.channels != 3) {
      why = fmt::format("cannot convert 3 channels to {}", o.channels);
      return false;
    }
    const size_t px = static_cast<size_t>(r.rows) * r.cols;
    out.px.resize(px * static_cast<size_t>(o.channels));
    convert_channels(p, 3, out.px.data(), o.channels, px);
    return true;
  }

 private:
  const Rec& rec(int64_t i) const { return f_->recs[ids_[static_cast<size_t>(i)]]; }
  std::shared_ptr<PackFile> f_;
  std::vector<uint32_t> ids_;
};

// Decodes and resizes one file for the pack.
bool pack_image(const ImageFile& f, int size, Image& out, std::string& why) {
  std::vector<uint8_t> bytes;
  if (!read_file(f.path, bytes, why)) return false;
  DecodeOptions o;
  o.channels = 3;
  o.min_side = size;
  Image img;
  if (!decode_image(bytes.data(), bytes.size(), o, img, why)) return false;
  if (std::min(img.rows, img.cols) > size) {
    const auto [r, c] = shorter_side_size(img.rows, img.cols, size);
    out = resize(img, r, c);
  } else {
    out = std::move(img);
  }
  return true;
}

}  // namespace

PackSummary write_pack(const std::string& dir, const std::string& out, const PackOptions& o) {
  if (o.size < 8 || o.size > 4096) fail("--size must be between 8 and 4096, got {}", o.size);
  if (o.workers < 1) fail("--workers must be at least 1, got {}", o.workers);
  FolderListing l = list_image_folder(dir, o.val_split);
  PackSummary sum;
  sum.skipped = l.skipped;
  const std::string tmp = out + ".tmp";
  std::vector<Rec> recs;
  std::vector<std::string> names;
  {
    Writer w(tmp);
    Header h{};
    w.write(&h, sizeof h);  // rewritten at the end
    const int64_t total = static_cast<int64_t>(l.train.size() + l.test.size());
    int64_t done = 0;
    for (uint32_t split = 0; split < 2; ++split) {
      const std::vector<ImageFile>& files = split == 0 ? l.train : l.test;
      for (size_t begin = 0; begin < files.size(); begin += kChunk) {
        const size_t n = std::min<size_t>(kChunk, files.size() - begin);
        std::vector<Image> imgs(n);
        std::vector<std::string> whys(n);
        std::vector<char> ok(n, 0);
        std::atomic<size_t> next{0};
        auto work = [&] {
          for (size_t k; (k = next.fetch_add(1)) < n;)
            ok[k] = pack_image(files[begin + k], o.size, imgs[k], whys[k]);
        };
        std::vector<std::thread> pool;
        for (int t = 1; t < std::min<int>(o.workers, static_cast<int>(n)); ++t)
          pool.emplace_back(work);
        work();
        for (std::thread& t : pool) t.join();
        for (size_t k = 0; k < n; ++k) {
          const ImageFile& f = files[begin + k];
          if (!ok[k]) {
            sum.skipped.push_back({f.path, whys[k]});
            continue;
          }
          w.align(64);
          Rec r{};
          r.offset = w.pos();
          r.rows = static_cast<uint32_t>(imgs[k].rows);
          r.cols = static_cast<uint32_t>(imgs[k].cols);
          r.label = f.label;
          r.split = split;
          r.crc = crc32_of(imgs[k].px.data(), imgs[k].px.size());
          w.write(imgs[k].px.data(), imgs[k].px.size());
          recs.push_back(r);
          names.push_back(fs::path(f.path).lexically_relative(dir).string());
          ++(split == 0 ? sum.train : sum.test);
        }
        done += static_cast<int64_t>(n);
        if (o.on_progress) o.on_progress(done, total);
      }
    }
    if (sum.train == 0 || sum.test == 0)
      fail("{}: no {} image could be decoded ({} skipped); nothing to pack", dir,
           sum.train == 0 ? "training" : "test", sum.skipped.size());
    w.align(64);
    std::vector<uint8_t> index(recs.size() * sizeof(Rec));
    std::memcpy(index.data(), recs.data(), index.size());
    for (const std::string& s : names) put_string(index, s);
    for (const std::string& s : l.classes) put_string(index, s);
    put_string(index, fs::absolute(dir).lexically_normal().string());
    h.index_offset = w.pos();
    h.index_bytes = index.size();
    w.write(index.data(), index.size());
    std::memcpy(h.magic, kMagic, sizeof kMagic);
    h.version = kVersion;
    h.size = static_cast<uint32_t>(o.size);
    h.classes = static_cast<uint32_t>(l.classes.size());
    h.train = static_cast<uint64_t>(sum.train);
    h.test = static_cast<uint64_t>(sum.test);
    h.fingerprint = l.fingerprint();
    h.file_bytes = w.pos();
    h.val_split = o.val_split;
    h.index_crc = crc32_of(index.data(), index.size());
    h.header_crc = crc32_of(&h, offsetof(Header, header_crc));
    sum.bytes = static_cast<int64_t>(w.pos());
    w.seek_start();
    w.write(&h, sizeof h);
    w.close();
  }
  std::error_code ec;
  fs::rename(tmp, out, ec);
  if (ec) fail("{}: cannot rename {} to it: {}", out, tmp, ec.message());
  return sum;
}

Dataset load_pack_dataset(const std::string& path, const std::string& source) {
  const std::string rebuild = "delete it and rebuild it with cb-pack (or cb-train --cache)";
  auto f = std::make_shared<PackFile>();
  f->path = path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // a FIFO: no block
  if (fd < 0) fail("{}: cannot open the pack: {}", path, std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("{}: not a regular file, so not a pack", path);
  }
  f->len = static_cast<size_t>(st.st_size);
  if (f->len < sizeof(Header)) {
    ::close(fd);
    fail("{}: {} bytes, too short for a .cbpack file (a pack starts with a 128-byte header); {}",
         path, f->len, rebuild);
  }
  void* m = mmap(nullptr, f->len, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (m == MAP_FAILED) fail("{}: cannot map the pack: {}", path, std::strerror(errno));
  f->base = static_cast<const uint8_t*>(m);
  std::memcpy(&f->h, f->base, sizeof(Header));
  const Header& h = f->h;
  if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0)
    fail("{}: not a .cbpack file (no CBPACK magic); make one with cb-pack DIR --out {}", path,
         path);
  if (h.version != kVersion)
    fail("{}: pack version {}, this crossbow reads version {}; {}", path, h.version, kVersion,
         rebuild);
  if (crc32_of(&h, offsetof(Header, header_crc)) != h.header_crc)
    fail("{}: the header fails its checksum: the pack is corrupt; {}", path, rebuild);
  if (h.file_bytes != f->len)
    fail("{}: the pack should be {} bytes but is {} (truncated or appended to); {}", path,
         h.file_bytes, f->len, rebuild);
  const uint64_t nrec = h.train + h.test;
  if (h.index_offset > f->len || h.index_bytes > f->len - h.index_offset ||
      nrec > h.index_bytes / sizeof(Rec))
    fail("{}: the index lies outside the file: the pack is corrupt; {}", path, rebuild);
  const uint8_t* idx = f->base + h.index_offset;
  if (crc32_of(idx, h.index_bytes) != h.index_crc)
    fail("{}: the index fails its checksum: the pack is corrupt; {}", path, rebuild);
  f->recs = reinterpret_cast<const Rec*>(idx);
  // The strings after the records: names, class names, the source folder.
  size_t pos = nrec * sizeof(Rec);
  auto get = [&](std::string& s) {
    uint32_t n = 0;
    if (h.index_bytes - pos < 4) fail("{}: the index is cut short; {}", path, rebuild);
    std::memcpy(&n, idx + pos, 4);
    pos += 4;
    if (h.index_bytes - pos < n) fail("{}: the index is cut short; {}", path, rebuild);
    s.assign(reinterpret_cast<const char*>(idx + pos), n);
    pos += n;
  };
  f->names.resize(nrec);
  for (std::string& s : f->names) get(s);
  Dataset d;
  d.classes.resize(h.classes);
  for (std::string& s : d.classes) get(s);
  std::string src;
  get(src);
  std::vector<uint32_t> train, test;
  for (uint64_t i = 0; i < nrec; ++i) {
    const Rec& r = f->recs[i];
    const uint64_t bytes = uint64_t{r.rows} * r.cols * 3;
    if (r.rows == 0 || r.cols == 0 || r.offset < sizeof(Header) || r.offset > h.index_offset ||
        bytes > h.index_offset - r.offset || r.label < 0 ||
        r.label >= static_cast<int64_t>(h.classes) || r.split > 1)
      fail("{}: record {} ({}) is out of bounds or has a bad label: the pack is corrupt; {}", path,
           i, f->names[i], rebuild);
    (r.split == 0 ? train : test).push_back(static_cast<uint32_t>(i));
  }
  if (train.size() != h.train || test.size() != h.test)
    fail("{}: the split counts disagree with the header: the pack is corrupt; {}", path, rebuild);
  f->verified = std::make_unique<std::atomic<uint8_t>[]>(nrec);
  for (uint64_t i = 0; i < nrec; ++i) f->verified[i].store(0);

  if (!source.empty()) {
    std::error_code ec;
    const std::string want = fs::absolute(source, ec).lexically_normal().string();
    if (fs::path(want) != fs::path(src) && !fs::equivalent(fs::path(want), fs::path(src), ec))
      fail("{} was made from {}, not from {}; give another --cache file, or delete this one", path,
           src, source);
  }
  std::error_code ec;
  if (fs::is_directory(src, ec)) {
    FolderListing now = list_image_folder(src, h.val_split);
    if (now.fingerprint() != h.fingerprint)
      fail(
          "{} is stale: {} has changed since it was packed ({} + {} images now, {} + {} in the "
          "pack, or files changed); delete it and rebuild it with cb-pack {} --out {} (or "
          "cb-train --cache)",
          path, src, now.train.size(), now.test.size(), h.train, h.test, src, path);
  }
  d.dir = path;
  d.format = DataFormat::Pack;
  d.description = fmt::format("pack of {} (shorter side {})", src, h.size);
  d.photos = true;
  d.train = std::make_shared<PackExamples>(f, std::move(train));
  d.test = std::make_shared<PackExamples>(f, std::move(test));
  return d;
}

}  // namespace cb
