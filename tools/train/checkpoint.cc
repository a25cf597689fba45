#include "tools/train/checkpoint.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

#include "base/error.h"

namespace gyre::train {
namespace {

constexpr char kMagic[8] = {'G', 'Y', 'R', 'E', 'C', 'K', 'P', 'T'};
constexpr uint32_t kVersion = 1;
// Refuses absurd sizes from a corrupt header before allocating them.
constexpr uint64_t kMaxCount = uint64_t{1} << 32;

class Writer {
 public:
  template <typename T>
  void put(const T& v) {
    raw(&v, sizeof(T));
  }
  void raw(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    bytes.insert(bytes.end(), b, b + n);
  }
  void tensor(const std::vector<float>& t) {
    put<uint64_t>(t.size());
    raw(t.data(), t.size() * sizeof(float));
  }
  std::vector<uint8_t> bytes;
};

class Reader {
 public:
  Reader(const std::vector<uint8_t>& bytes, size_t end, const std::string& path)
      : bytes_(bytes), end_(end), path_(path) {}
  template <typename T>
  T get() {
    T v;
    raw(&v, sizeof(T));
    return v;
  }
  void raw(void* p, size_t n) {
    if (n > end_ - pos_) fail(ErrorCode::kInvalidArgument, "checkpoint {} is truncated", path_);
    std::memcpy(p, bytes_.data() + pos_, n);
    pos_ += n;
  }
  uint64_t count(const char* what) {
    const uint64_t n = get<uint64_t>();
    if (n > kMaxCount) {
      fail(ErrorCode::kInvalidArgument, "checkpoint {}: implausible {} count {}", path_, what, n);
    }
    return n;
  }
  std::vector<float> tensor() {
    std::vector<float> t(count("tensor"));
    raw(t.data(), t.size() * sizeof(float));
    return t;
  }
  bool atEnd() const { return pos_ == end_; }

 private:
  const std::vector<uint8_t>& bytes_;
  size_t end_;
  size_t pos_ = 0;
  const std::string& path_;
};

}  // namespace

uint64_t fnv1a64(const void* data, size_t bytes, uint64_t hash) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < bytes; ++i) {
    hash ^= p[i];
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

void saveCheckpoint(const std::string& path, const Checkpoint& c) {
  Writer w;
  w.raw(kMagic, sizeof(kMagic));
  w.put<uint32_t>(kVersion);
  w.put<uint32_t>(0);
  w.put(c.epochsDone);
  w.put(c.samplerSeed);
  w.put(c.samplerEpoch);
  w.put(c.worldSize);
  w.put(c.batch);
  w.put(c.lr);
  w.put(c.momentum);
  w.put(c.seed);
  w.put<uint64_t>(c.widths.size());
  for (uint64_t v : c.widths) w.put(v);
  w.put<uint64_t>(c.params.size() + c.momentumBuffers.size());
  for (const auto& t : c.params) w.tensor(t);
  for (const auto& t : c.momentumBuffers) w.tensor(t);
  w.put(fnv1a64(w.bytes.data(), w.bytes.size()));

  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(w.bytes.data()),
              static_cast<std::streamsize>(w.bytes.size()));
    out.flush();
    if (!out) failSystem(errno ? errno : EIO, "cannot write checkpoint " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    failSystem(errno, "cannot rename " + tmp + " to checkpoint " + path);
  }
}

Checkpoint loadCheckpoint(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) failSystem(errno ? errno : ENOENT, "cannot open checkpoint " + path);
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                                   std::istreambuf_iterator<char>());
  if (bytes.size() < sizeof(kMagic) + 8 || std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    fail(ErrorCode::kInvalidArgument, "{} is not a gyre-train checkpoint (bad magic)", path);
  }
  const size_t body = bytes.size() - sizeof(uint64_t);
  Reader r(bytes, body, path);
  char magic[8];
  r.raw(magic, sizeof(magic));
  const uint32_t version = r.get<uint32_t>();
  if (version != kVersion) {
    fail(ErrorCode::kInvalidArgument, "checkpoint {} has version {}, this gyre-train reads {}",
         path, version, kVersion);
  }
  uint64_t stored;
  std::memcpy(&stored, bytes.data() + body, sizeof(stored));
  if (stored != fnv1a64(bytes.data(), body)) {
    fail(ErrorCode::kInvalidArgument, "checkpoint {} is corrupt or truncated (checksum)", path);
  }
  r.get<uint32_t>();  // flags
  Checkpoint c;
  c.epochsDone = r.get<uint64_t>();
  c.samplerSeed = r.get<uint64_t>();
  c.samplerEpoch = r.get<uint64_t>();
  c.worldSize = r.get<uint64_t>();
  c.batch = r.get<uint64_t>();
  c.lr = r.get<float>();
  c.momentum = r.get<float>();
  c.seed = r.get<uint64_t>();
  c.widths.resize(r.count("width"));
  for (uint64_t& v : c.widths) v = r.get<uint64_t>();
  const uint64_t tensors = r.count("tensor");
  if (tensors % 2 != 0) {
    fail(ErrorCode::kInvalidArgument, "checkpoint {}: odd tensor count {}", path, tensors);
  }
  for (uint64_t t = 0; t < tensors / 2; ++t) c.params.push_back(r.tensor());
  for (uint64_t t = 0; t < tensors / 2; ++t) c.momentumBuffers.push_back(r.tensor());
  if (!r.atEnd()) fail(ErrorCode::kInvalidArgument, "checkpoint {}: trailing bytes", path);
  return c;
}

}  // namespace gyre::train
