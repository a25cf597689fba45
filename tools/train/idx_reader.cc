#include "tools/train/idx_reader.h"

#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>

#include "base/error.h"

namespace gyre::train {
namespace {

constexpr uint8_t kUnsignedByte = 0x08;
// A sanity bound that stops a corrupt header from asking for terabytes.
constexpr size_t kMaxElements = size_t{1} << 34;

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};
using GzHandle = std::unique_ptr<gzFile_s, GzCloser>;

std::vector<uint8_t> readAll(const std::string& path) {
  errno = 0;
  GzHandle file(gzopen(path.c_str(), "rb"));
  if (!file) {
    failSystem(errno ? errno : ENOMEM, "cannot open IDX file " + path);
  }
  gzbuffer(file.get(), 1 << 20);
  std::vector<uint8_t> bytes;
  constexpr size_t kChunk = 1 << 20;
  for (;;) {
    const size_t old = bytes.size();
    bytes.resize(old + kChunk);
    const int got = gzread(file.get(), bytes.data() + old, static_cast<unsigned>(kChunk));
    if (got < 0) {
      int code = 0;
      const char* msg = gzerror(file.get(), &code);
      fail(ErrorCode::kInvalidArgument, "cannot read IDX file {}: {}", path,
           code == Z_ERRNO ? std::strerror(errno) : msg);
    }
    bytes.resize(old + static_cast<size_t>(got));
    if (got == 0) break;
  }
  // gzread reports a gzip stream cut short as end of file; gzerror still knows.
  int code = 0;
  const char* msg = gzerror(file.get(), &code);
  if (code != Z_OK && code != Z_STREAM_END) {
    fail(ErrorCode::kInvalidArgument, "cannot read IDX file {}: {}", path, msg);
  }
  return bytes;
}

uint32_t bigEndian32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

std::string existingVariant(const std::string& gzPath) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(gzPath, ec)) return gzPath;
  const std::string plain = gzPath.substr(0, gzPath.size() - 3);
  if (fs::exists(plain, ec)) return plain;
  fail(ErrorCode::kSystemError,
       "missing data file {} (apt-get install dataset-fashion-mnist, or pass --data DIR)", gzPath);
}

}  // namespace

IdxArray readIdx(const std::string& path) {
  std::vector<uint8_t> bytes = readAll(path);
  if (bytes.size() < 4) {
    fail(ErrorCode::kInvalidArgument, "{}: not an IDX file ({} bytes, no header)", path,
         bytes.size());
  }
  if (bytes[0] != 0 || bytes[1] != 0) {
    fail(ErrorCode::kInvalidArgument, "{}: not an IDX file (magic {:02x}{:02x}, expected 0000)",
         path, bytes[0], bytes[1]);
  }
  if (bytes[2] != kUnsignedByte) {
    fail(ErrorCode::kInvalidArgument, "{}: IDX element type 0x{:02x}, only unsigned byte (0x08)",
         path, bytes[2]);
  }
  const size_t ndim = bytes[3];
  const size_t header = 4 + 4 * ndim;
  if (ndim == 0 || bytes.size() < header) {
    fail(ErrorCode::kInvalidArgument, "{}: truncated IDX header ({} dimensions, {} bytes)", path,
         ndim, bytes.size());
  }
  IdxArray out;
  size_t elements = 1;
  for (size_t d = 0; d < ndim; ++d) {
    const size_t extent = bigEndian32(&bytes[4 + 4 * d]);
    out.dims.push_back(extent);
    if (extent != 0 && elements > kMaxElements / extent) {
      fail(ErrorCode::kInvalidArgument, "{}: IDX header shape is implausibly large", path);
    }
    elements *= extent;
  }
  if (bytes.size() - header != elements) {
    fail(ErrorCode::kInvalidArgument, "{}: {} data bytes, but the header shape needs {}", path,
         bytes.size() - header, elements);
  }
  out.data.assign(bytes.begin() + static_cast<std::ptrdiff_t>(header), bytes.end());
  return out;
}

ImageSet loadImageSplit(const std::string& dir, const std::string& prefix, size_t numClasses,
                        size_t maxSamples) {
  const std::string imagesPath = existingVariant(dir + "/" + prefix + "-images-idx3-ubyte.gz");
  const std::string labelsPath = existingVariant(dir + "/" + prefix + "-labels-idx1-ubyte.gz");
  IdxArray images = readIdx(imagesPath);
  IdxArray labels = readIdx(labelsPath);
  if (images.dims.size() != 3) {
    fail(ErrorCode::kInvalidArgument, "{}: {} dimensions, images need 3", imagesPath,
         images.dims.size());
  }
  if (labels.dims.size() != 1) {
    fail(ErrorCode::kInvalidArgument, "{}: {} dimensions, labels need 1", labelsPath,
         labels.dims.size());
  }
  if (images.dims[0] != labels.dims[0]) {
    fail(ErrorCode::kInvalidArgument, "{} has {} images but {} has {} labels", imagesPath,
         images.dims[0], labelsPath, labels.dims[0]);
  }
  ImageSet set;
  set.count = images.dims[0];
  if (maxSamples != 0 && maxSamples < set.count) set.count = maxSamples;
  set.features = images.dims[1] * images.dims[2];
  set.pixels.resize(set.count * set.features);
  // Divide, not multiply by 1/255: torch's uint8 -> float / 255 rounds the same way.
  for (size_t i = 0; i < set.pixels.size(); ++i) {
    set.pixels[i] = static_cast<float>(images.data[i]) / 255.0f;
  }
  set.labels.assign(labels.data.begin(),
                    labels.data.begin() + static_cast<std::ptrdiff_t>(set.count));
  for (size_t i = 0; i < set.count; ++i) {
    if (set.labels[i] >= numClasses) {
      fail(ErrorCode::kInvalidArgument, "{}: label {} of sample {} is not below {}", labelsPath,
           set.labels[i], i, numClasses);
    }
  }
  return set;
}

}  // namespace gyre::train
