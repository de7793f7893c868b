// IDX reading (gzip through zlib, which also reads uncompressed files transparently). IDX: 4-byte
// magic {0, 0, type, ndims}, ndims big-endian u32 dims, then the data. We accept type 0x08
// (unsigned byte) only: images have 3 dims, labels 1.
#include "runtime/data/idx_dataset.h"

#include <zlib.h>

#include <algorithm>
#include <filesystem>

#include "runtime/error.h"

namespace cb {

namespace fs = std::filesystem;

namespace {

// `path` or `path.gz`, whichever exists.
std::string resolve_file(const std::string& path) {
  if (fs::is_regular_file(path)) return path;
  if (fs::is_regular_file(path + ".gz")) return path + ".gz";
  fail(
      "missing data file {} (or {}.gz); an MNIST-style folder holds train-images-idx3-ubyte, "
      "train-labels-idx1-ubyte, t10k-images-idx3-ubyte and t10k-labels-idx1-ubyte, optionally "
      "gzipped (Debian: apt-get install dataset-fashion-mnist)",
      path, path);
}

// The file's (decompressed) bytes, at most `limit` of them: a gzip bomb stops at what the header
// promised (plus one byte, to tell that there is more) instead of filling the memory.
std::vector<uint8_t> read_all(const std::string& path, uint64_t limit) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) fail("{}: cannot open the file", path);
  std::vector<uint8_t> out;
  uint8_t buf[1 << 16];
  while (out.size() < limit) {
    const auto want = static_cast<unsigned>(std::min<uint64_t>(sizeof buf, limit - out.size()));
    int n = gzread(f, buf, want);
    if (n < 0) {
      int code = 0;
      std::string why = gzerror(f, &code);
      gzclose(f);
      fail("{}: corrupt or truncated file ({}); download or copy it again", path, why);
    }
    if (n == 0) break;
    try {
      out.insert(out.end(), buf, buf + n);
    } catch (const std::bad_alloc&) {
      gzclose(f);
      fail("{}: more than this machine's memory holds after {} bytes; is it really an IDX file?",
           path, out.size());
    }
  }
  if (out.size() >= limit) {  // stopped early: the rest is not read, so not checked either
    gzclose(f);
    return out;
  }
  // zlib reports a gzip stream cut short at close time (or as an error above).
  int code = 0;
  const char* why = gzerror(f, &code);
  if (code != Z_OK && code != Z_STREAM_END) {
    std::string w = why;
    gzclose(f);
    fail("{}: corrupt or truncated file ({}); download or copy it again", path, w);
  }
  if (gzclose(f) != Z_OK)
    fail("{}: corrupt or truncated compressed file; download or copy it again", path);
  return out;
}

uint32_t be32(const uint8_t* p) {
  return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | uint32_t{p[3]};
}

// The file size an IDX header promises (header + data), or the whole header when it is cut
// short or wrong (read_idx then names what is wrong).
uint64_t idx_size(const std::vector<uint8_t>& head, const std::string& path, int ndims) {
  const uint64_t header = 4 + 4 * static_cast<uint64_t>(ndims);
  if (head.size() < header || head[0] != 0 || head[1] != 0 || head[2] != 0x08 || head[3] != ndims)
    return header;
  uint64_t elems = 1;
  for (int i = 0; i < ndims; ++i) {
    elems *= be32(&head[4 + 4 * static_cast<size_t>(i)]);
    if (elems > (uint64_t{1} << 40)) fail("{}: corrupt IDX header (dims too large)", path);
  }
  return header + elems;
}

// The dims and the data of an IDX file of unsigned bytes with `ndims` dims.
struct Idx {
  std::vector<int64_t> dims;
  std::vector<uint8_t> bytes;  // whole file
  size_t data_offset = 0;
};

Idx read_idx(const std::string& path, int ndims, const char* what) {
  Idx r;
  r.bytes = read_all(path, 4 + 4 * static_cast<uint64_t>(ndims));  // the header first
  const uint64_t promised = idx_size(r.bytes, path, ndims);
  r.bytes = read_all(path, promised + 1);
  const auto& b = r.bytes;
  if (b.size() < 4)
    fail("{}: truncated IDX file ({} bytes, not even the 4-byte magic number)", path, b.size());
  if (b[0] != 0 || b[1] != 0 || b[2] != 0x08 || b[3] != ndims)
    fail(
        "{}: bad magic number {:02x} {:02x} {:02x} {:02x}: not an IDX file of {} (expected "
        "00 00 08 {:02x}: unsigned bytes, {} dims)",
        path, b[0], b[1], b[2], b[3], what, ndims, ndims);
  r.data_offset = 4 + 4 * static_cast<size_t>(ndims);
  if (b.size() < r.data_offset)
    fail("{}: truncated IDX file ({} bytes, the header needs {})", path, b.size(), r.data_offset);
  uint64_t elems = 1;
  for (int i = 0; i < ndims; ++i) {
    uint32_t d = be32(&b[4 + 4 * static_cast<size_t>(i)]);
    r.dims.push_back(d);
    elems *= d;
    if (elems > (uint64_t{1} << 40)) fail("{}: corrupt IDX header (dims too large)", path);
  }
  uint64_t have = b.size() - r.data_offset;
  if (have < elems)
    fail("{}: truncated IDX file: the header promises {} bytes of data, the file has {}", path,
         elems, have);
  if (have > elems)
    fail("{}: corrupt IDX file: {} bytes after the {} bytes of data the header promises", path,
         have - elems, elems);
  return r;
}

}  // namespace

ImageSet read_idx_pair(const std::string& images_path, const std::string& labels_path) {
  std::string ip = resolve_file(images_path), lp = resolve_file(labels_path);
  Idx im = read_idx(ip, 3, "images");
  Idx lb = read_idx(lp, 1, "labels");
  if (im.dims[0] != lb.dims[0])
    fail("{} holds {} images but {} holds {} labels; the files do not belong together", ip,
         im.dims[0], lp, lb.dims[0]);
  ImageSet s;
  s.count = im.dims[0];
  s.rows = im.dims[1];
  s.cols = im.dims[2];
  size_t n = static_cast<size_t>(s.count * s.rows * s.cols);
  s.source = ip;
  s.pixels.assign(im.bytes.data() + im.data_offset, im.bytes.data() + im.data_offset + n);
  s.labels.resize(static_cast<size_t>(s.count));
  const uint8_t* l = lb.bytes.data() + lb.data_offset;
  for (size_t i = 0; i < s.labels.size(); ++i) s.labels[i] = l[i];
  return s;
}

Dataset load_idx_dataset(const std::string& dir) {
  if (!fs::is_directory(dir))
    fail(
        "data folder {} does not exist (or is not a folder); pass --data DIR with the MNIST-style "
        "IDX files (Debian's dataset-fashion-mnist: /usr/share/datasets/fashion-mnist)",
        dir);
  Dataset d;
  d.dir = dir;
  d.format = DataFormat::Idx;
  d.description = "IDX files";
  fs::path p(dir);
  auto train = std::make_shared<ImageSet>(read_idx_pair((p / "train-images-idx3-ubyte").string(),
                                                        (p / "train-labels-idx1-ubyte").string()));
  auto test = std::make_shared<ImageSet>(read_idx_pair((p / "t10k-images-idx3-ubyte").string(),
                                                       (p / "t10k-labels-idx1-ubyte").string()));
  if (train->rows != test->rows || train->cols != test->cols)
    fail("{}: training images are {}x{} but test images are {}x{}", dir, train->rows, train->cols,
         test->rows, test->cols);
  d.train = std::move(train);
  d.test = std::move(test);
  return d;
}

}  // namespace cb
