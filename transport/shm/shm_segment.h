// ShmSegment: one named POSIX shared-memory segment, mapped read-write into this process.
//
// What it is: the storage under an shm pipe. create() makes a new name (O_CREAT|O_EXCL,
// mode 0600) and backs every byte with posix_fallocate before mapping it, so a
// /dev/shm that is too small fails here with a message that says so and how much is
// needed, instead of killing the process with SIGBUS on first touch later (the common
// container failure: docker's default /dev/shm is 64 MiB). open() maps a segment that
// another process created, waiting for it to appear until a deadline.
//
// Ownership: the object owns the mapping (unmapped by the destructor; move-only). The
// name is separate from the mapping: unlink() removes the name, idempotently, and a
// mapping stays valid after its name is gone. Who unlinks is the caller's decision
// (the shm pipe unlinks as soon as both sides have mapped, so nothing is left behind).
//
// Anonymous segments: create("memfd:/name", ...) makes the segment with memfd_create, so
// it never has a name in /dev/shm and nothing can be left there, whenever and however
// its processes die; the object keeps the fd, and name() is "/proc/<pid>/fd/<fd>", which
// open()/tryOpen() of another process of the same user opens (the creator must still
// hold it). unlink() and exists() of such names do nothing / say false. Where the kernel
// has no memfd_create, create() falls back to the named segment "/name".
//
// Thread safety: the static functions are safe from any thread; an object is used by
// one thread at a time. What is stored in the mapped bytes is the caller's business.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace gyre {

class ShmSegment {
 public:
  using Clock = std::chrono::steady_clock;

  ShmSegment() = default;  // maps nothing
  ShmSegment(ShmSegment&& other) noexcept;
  ShmSegment& operator=(ShmSegment&& other) noexcept;
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;
  ~ShmSegment();

  // Creates `name` ("/..." as shm_open wants it) with `bytes` bytes, zero-filled and
  // fully allocated, and maps it. Throws kSystemError if the name exists or /dev/shm is
  // too small (the message names the sizes), kInvalidArgument for a bad name or size.
  // On failure nothing is left under the name.
  static ShmSegment create(const std::string& name, size_t bytes);

  // Maps an existing segment. Returns nullopt while the name does not exist or the
  // creator has not sized it yet (size 0); throws kSystemError for other failures.
  static std::optional<ShmSegment> tryOpen(const std::string& name);

  // tryOpen() retried (polling every millisecond or so) until `deadline`; throws
  // kTimeout naming the segment when it never appears.
  static ShmSegment open(const std::string& name, Clock::time_point deadline);

  // Removes the name. Returns false if it was already gone (not an error: both sides
  // of a pipe unlink, whichever comes second finds nothing). Throws kSystemError for
  // other failures.
  static bool unlink(const std::string& name);

  // Whether a segment of this name exists right now (for tests and diagnostics).
  static bool exists(const std::string& name);

  std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& name() const { return name_; }
  bool mapped() const { return data_ != nullptr; }

 private:
  ShmSegment(std::string name, std::byte* data, size_t size, int fd = -1);
  void reset();

  std::string name_;
  int fd_ = -1;  // an anonymous segment's memfd, held so that others can open it
  std::byte* data_ = nullptr;
  size_t size_ = 0;
};

// The shm name of the pipe from `sender` to `receiver` in communicator `commId` of the
// job `jobToken`: "/gyre-<token>-<comm hex>-<sender>-<receiver>". The token is cut to
// the characters [A-Za-z0-9_] (others become '_'); a long token is shortened to a prefix
// plus a hash of the whole, so the name stays short and still unique per job.
std::string shmSegmentName(const std::string& jobToken, uint64_t commId, int sender, int receiver);

// Bytes free for an unprivileged user in the file system behind shm_open (/dev/shm),
// or nullopt if it cannot be asked. Lets a communicator pick tcp before creating
// anything when shared memory is short.
std::optional<size_t> shmFreeBytes();

}  // namespace gyre
