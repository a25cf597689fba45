#include "transport/shm/shm_segment.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <thread>
#include <utility>

#include "base/error.h"

namespace gyre {
namespace {

// glibc's shm_open maps "/name" to this directory; only used to ask for free space.
constexpr const char* kShmDir = "/dev/shm";

constexpr const char* kAnonymous = "memfd:";

bool isProcPath(const std::string& name) { return name.rfind("/proc/", 0) == 0; }

void checkName(const std::string& name) {
  if (isProcPath(name)) return;
  // shm_open's rule: one leading slash, no other, and a file name that fits NAME_MAX.
  if (name.size() < 2 || name.size() > 255 || name[0] != '/' ||
      name.find('/', 1) != std::string::npos) {
    fail(ErrorCode::kInvalidArgument, "bad shm segment name '{}'", name);
  }
}

double mib(size_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

[[noreturn]] void failTooSmall(const std::string& name, size_t bytes, size_t freeBytes,
                               size_t totalBytes) {
  fail(ErrorCode::kSystemError,
       "{} is too small for shm segment {}: it needs {} bytes ({:.1f} MiB) but only {:.1f} MiB "
       "of {:.1f} MiB are free; enlarge it (docker run --shm-size=1g, or mount -o "
       "remount,size=1G {}), use fewer or smaller slots (GYRE_SLOTS, GYRE_SLOT_BYTES), or use "
       "GYRE_TRANSPORT=tcp",
       kShmDir, name, bytes, mib(bytes), mib(freeBytes), mib(totalBytes), kShmDir);
}

}  // namespace

ShmSegment::ShmSegment(std::string name, std::byte* data, size_t size, int fd)
    : name_(std::move(name)), fd_(fd), data_(data), size_(size) {}

ShmSegment::ShmSegment(ShmSegment&& other) noexcept
    : name_(std::move(other.name_)),
      fd_(std::exchange(other.fd_, -1)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

ShmSegment& ShmSegment::operator=(ShmSegment&& other) noexcept {
  if (this != &other) {
    reset();
    name_ = std::move(other.name_);
    fd_ = std::exchange(other.fd_, -1);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

ShmSegment::~ShmSegment() { reset(); }

void ShmSegment::reset() {
  if (data_ != nullptr) ::munmap(data_, size_);
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  data_ = nullptr;
  size_ = 0;
}

ShmSegment ShmSegment::create(const std::string& requested, size_t bytes) {
  std::string name = requested;
  int fd = -1;
  bool anonymous = false;
  if (name.rfind(kAnonymous, 0) == 0) {
    name = name.substr(std::string(kAnonymous).size());
    checkName(name);
    fd = ::memfd_create(name.c_str() + 1, MFD_CLOEXEC);
    anonymous = fd >= 0;
    if (fd < 0 && errno != ENOSYS) failSystem(errno, fmt::format("memfd_create({})", name));
  }
  checkName(name);
  if (bytes == 0) fail(ErrorCode::kInvalidArgument, "shm segment {} of 0 bytes", name);
  // Closes fd and removes the name we just created: a failed create leaves nothing.
  auto abandon = [&](int f, const std::string& n) {
    ::close(f);
    if (!anonymous) ::shm_unlink(n.c_str());
  };
  if (!anonymous) fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    int err = errno;
    if (err == EEXIST) {
      // Names carry the job token, so this is a leftover of a crashed job that used the
      // same token, or two communicators with the same id: refuse rather than share.
      failSystem(err, fmt::format("shm segment {} already exists (a leftover from an earlier "
                                  "job with the same token? remove {}{})",
                                  name, kShmDir, name));
    }
    failSystem(err, fmt::format("shm_open({}) to create", name));
  }
  // Ask first so the message can give sizes; posix_fallocate below is what guarantees
  // the pages (another process may take the space between the two).
  struct statvfs fs;
  if (::fstatvfs(fd, &fs) == 0) {
    size_t freeBytes = static_cast<size_t>(fs.f_bavail) * fs.f_frsize;
    size_t totalBytes = static_cast<size_t>(fs.f_blocks) * fs.f_frsize;
    if (totalBytes != 0 && bytes > freeBytes) {
      abandon(fd, name);
      failTooSmall(name, bytes, freeBytes, totalBytes);
    }
  }
  // posix_fallocate, not ftruncate: ftruncate makes a sparse file that tmpfs backs page
  // by page on first touch, and a full /dev/shm then kills the process with SIGBUS in
  // the middle of a collective. Allocating now turns that into an error here.
  int rc;
  do {
    rc = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  } while (rc == EINTR);
  if (rc != 0) {
    abandon(fd, name);
    if (rc == ENOSPC || rc == EFBIG) {
      size_t freeBytes = 0, totalBytes = 0;
      if (::statvfs(kShmDir, &fs) == 0) {
        freeBytes = static_cast<size_t>(fs.f_bavail) * fs.f_frsize;
        totalBytes = static_cast<size_t>(fs.f_blocks) * fs.f_frsize;
      }
      failTooSmall(name, bytes, freeBytes, totalBytes);
    }
    failSystem(rc, fmt::format("posix_fallocate({}, {} bytes)", name, bytes));
  }
  // MAP_POPULATE: the pages exist already; mapping them now keeps page faults out of the
  // first collective's latency.
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (p == MAP_FAILED) {
    int err = errno;
    abandon(fd, name);
    failSystem(err, fmt::format("mmap of shm segment {} ({} bytes)", name, bytes));
  }
  if (anonymous) {
    // Kept open: others open it through /proc while this process holds it.
    return ShmSegment(fmt::format("/proc/{}/fd/{}", ::getpid(), fd), static_cast<std::byte*>(p),
                      bytes, fd);
  }
  ::close(fd);  // the mapping keeps the segment alive
  return ShmSegment(name, static_cast<std::byte*>(p), bytes);
}

std::optional<ShmSegment> ShmSegment::tryOpen(const std::string& name) {
  checkName(name);
  int fd = isProcPath(name) ? ::open(name.c_str(), O_RDWR | O_CLOEXEC)
                            : ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) {
    int err = errno;
    if (err == ENOENT) return std::nullopt;
    failSystem(err, fmt::format("shm_open({}) to open", name));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    failSystem(err, fmt::format("fstat of shm segment {}", name));
  }
  // Size 0: the creator is between shm_open and posix_fallocate. On tmpfs, fallocate sets
  // the final size only once every page is allocated, so a non-zero size is final.
  if (st.st_size <= 0) {
    ::close(fd);
    return std::nullopt;
  }
  size_t bytes = static_cast<size_t>(st.st_size);
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  int err = errno;
  ::close(fd);
  if (p == MAP_FAILED)
    failSystem(err, fmt::format("mmap of shm segment {} ({} bytes)", name, bytes));
  return ShmSegment(name, static_cast<std::byte*>(p), bytes);
}

ShmSegment ShmSegment::open(const std::string& name, Clock::time_point deadline) {
  for (;;) {
    if (auto segment = tryOpen(name)) return std::move(*segment);
    if (Clock::now() >= deadline) {
      fail(ErrorCode::kTimeout, "shm segment {} did not appear before the deadline", name);
    }
    // Creation takes microseconds to milliseconds; a 1 ms poll costs nothing measurable
    // at init and leaves a small host's cores free for the creator.
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

bool ShmSegment::unlink(const std::string& requested) {
  // "memfd:/x": the named fallback, if create() had to use it.
  const std::string name = requested.rfind(kAnonymous, 0) == 0
                               ? requested.substr(std::string(kAnonymous).size())
                               : requested;
  checkName(name);
  if (isProcPath(name)) return false;  // anonymous: it has no name to remove
  if (::shm_unlink(name.c_str()) == 0) return true;
  int err = errno;
  if (err == ENOENT) return false;
  failSystem(err, fmt::format("shm_unlink({})", name));
}

bool ShmSegment::exists(const std::string& name) {
  checkName(name);
  if (isProcPath(name)) return false;
  int fd = ::shm_open(name.c_str(), O_RDONLY | O_CLOEXEC, 0);
  if (fd < 0) return false;
  ::close(fd);
  return true;
}

std::string shmSegmentName(const std::string& jobToken, uint64_t commId, int sender, int receiver) {
  constexpr size_t kMaxToken = 32;
  constexpr size_t kKeptPrefix = 15;
  std::string token;
  bool changed = false;
  for (char c : jobToken) {
    bool ok =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    token += ok ? c : '_';
    changed |= !ok;
  }
  if (token.empty()) {
    token = "none";
  } else if (changed || token.size() > kMaxToken) {
    // Replacing characters or cutting could make two tokens collide; a hash of the
    // original keeps them apart (FNV-1a, 64 bits: plenty for the jobs on one host).
    uint64_t h = 0xcbf29ce484222325ull;
    for (unsigned char c : jobToken) h = (h ^ c) * 0x100000001b3ull;
    token = fmt::format("{}{:016x}", token.substr(0, kKeptPrefix), h);
  }
  return fmt::format("/gyre-{}-{:x}-{}-{}", token, commId, sender, receiver);
}

std::optional<size_t> shmFreeBytes() {
  struct statvfs fs;
  if (::statvfs(kShmDir, &fs) != 0) return std::nullopt;
  return static_cast<size_t>(fs.f_bavail) * fs.f_frsize;
}

}  // namespace gyre
