// The shared-memory pipe: one directed pipe of K slots of B bytes between two processes
// on one host (see transport/pipe.h for the pipe contract).
//
// Setup (the communicator passes names and pids through its bootstrap store):
//   receiver: auto rx = ShmRecvPipe::create(name, K, B, senderRank, senderPid);
//             publish "ready"; ... after the init barrier: rx->unlinkName();
//   sender:   auto tx = ShmSendPipe::open(name, receiverRank, receiverPid, ctx);
// The receiver creates and owns the segment: a header plus K slots, each slot with its
// Tag and byte count. The sender maps it and unlinks the name at once; the receiver
// unlinks too (after the barrier, and in its destructor, ignoring "already gone"), so
// neither a normal run nor a crash of one side between create and open leaves anything
// in /dev/shm (only both dying before the open can). shmSegmentName() builds the names.
//
// Data path: acquire() returns a pointer straight into the receiver's slot, so the
// sender's copy or fused reduce writes the final bytes once (one copy per hop). post()
// writes the slot's tag and size, then release-stores the producer counter and rings a
// futex doorbell; wait() acquire-loads it; release() release-stores the consumer
// counter and rings the other doorbell. flush() returns at once: a posted slice already
// lies in the receiver's memory and the sender keeps no reference to it. The default
// postDirect()/waitInto() (transport/pipe.cc) suit shm: their one memcpy is the hop's copy.
//
// Waiting spins for ctx.spin, then sleeps on the doorbell in slices of at most 10 ms.
// Between slices it checks the deadline (kTimeout, naming the peer rank and what was
// awaited), the abort flag (kAborted) and whether the peer process is gone
// (kRemoteError "peer rank R (pid P) exited", found within one slice, not at the
// timeout; pidfd_open with kill(pid, 0) and /proc/<pid>/stat as fallbacks). A pipe whose
// other end was destroyed (its process still alive) fails the same way, "closed".
//
// Status (pipe.h): each end has a status slot in the header that only it writes (a
// seqlock over atomic words); the other end reads it in every sleeping slice of a wait
// and when it finds the pipe closed. publish(kAborted) writes the slot, then sets this
// end's closed flag and rings the other end's doorbell, so the peer fails at once with
// PeerAbortError naming the cause (after the slices posted before it).
//
// Trust: everything read from the shared header is validated on open (magic, version,
// sizes against the mapped size), each side keeps private copies of the geometry, and
// every slice's size and every counter read is checked, so a bogus or corrupted segment
// is an error, never an out-of-bounds access.
//
// Pids: both sides must see each other's pids in one pid namespace (the communicator
// only uses shm between ranks that share a host identity, which should include the pid
// namespace). The segment records both pids and open() checks them against what the
// caller passed, so a mismatch fails at setup rather than as a false "exited" later.
//
// Threads: as every pipe, one thread at a time per object. Pipes are move-free objects
// held by unique_ptr. The segment layout below is shared between processes: it is fixed
// per kVersion, and it is in this header so that tests can forge bogus segments.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "transport/doorbell.h"
#include "transport/pipe.h"
#include "transport/shm/shm_segment.h"
#include "transport/wire.h"

namespace gyre {

namespace shm_layout {

inline constexpr uint64_t kMagic = 0x316d687365727967ull;  // "gyreshm1", little-endian
inline constexpr uint32_t kVersion = 2;                    // 2: status slots
inline constexpr size_t kCacheLine = 64;
inline constexpr size_t kPage = 4096;
// Bounds checked on both sides: they keep K * B far from overflow, and K fits any ring.
inline constexpr size_t kMaxSlots = size_t{1} << 16;
inline constexpr size_t kMaxSlotBytes = size_t{1} << 34;

static_assert(std::atomic<uint64_t>::is_always_lock_free &&
                  std::atomic<uint32_t>::is_always_lock_free,
              "shared-memory counters must be lock-free (address-free) atomics");

// One per slot, each on its own cache line, so that the sender filling slot i+1 does
// not steal the line the receiver is reading for slot i. Written by the sender before
// it posts the slot; read by the receiver after the acquire load.
struct alignas(kCacheLine) SlotDesc {
  Tag tag;
  uint64_t bytes;
};
static_assert(sizeof(SlotDesc) == kCacheLine);

// A StatusRecord (wire.h) that one end publishes: a seqlock (version odd while the
// writer writes, 0 = never written) over words that only that end stores.
struct StatusSlot {
  std::atomic<uint32_t> version;
  uint32_t reserved;
  std::atomic<uint64_t> words[sizeof(StatusRecord) / sizeof(uint64_t)];
};
static_assert(sizeof(StatusRecord) % sizeof(uint64_t) == 0);

// The segment: Header, then K SlotDescs, then (page-aligned) K slots of `slotStride`
// bytes. The producer side (posted counter, its doorbell, senderClosed) and the consumer
// side each sit on their own cache line(s): each line has one regular writer.
struct Header {
  std::atomic<uint64_t> magic;  // stored last (release) by the creator: the segment is ready
  uint32_t version;
  uint32_t headerBytes;  // sizeof(Header)
  uint64_t slots;        // K
  uint64_t slotBytes;    // B: payload capacity of a slot
  uint64_t slotStride;   // distance between slots: B rounded up to a cache line
  uint64_t descOffset;   // of SlotDesc[0]
  uint64_t dataOffset;   // of slot 0's payload
  uint64_t segmentBytes;
  int32_t receiverPid;  // creator
  int32_t senderPid;

  alignas(kCacheLine) std::atomic<uint64_t> posted;  // slices posted, ever (sender writes)
  std::atomic<uint32_t> senderClosed;                // sender's end destroyed
  Doorbell postedBell;                               // the receiver sleeps here

  alignas(kCacheLine) std::atomic<uint64_t> released;  // slices released, ever (receiver)
  std::atomic<uint32_t> receiverClosed;                // receiver's end destroyed
  Doorbell releasedBell;                               // the sender sleeps here

  alignas(kCacheLine) StatusSlot senderStatus;    // written by the sender only
  alignas(kCacheLine) StatusSlot receiverStatus;  // written by the receiver only
};

// Publishes `status` in `slot` (one writer at a time), and reads the latest one: false
// when none was written, the writer is mid-way, or the record is not valid.
void writeStatus(StatusSlot& slot, const PeerStatus& status);
bool readStatus(const StatusSlot& slot, PeerStatus* out);

struct Geometry {
  size_t slots = 0;
  size_t slotBytes = 0;
  size_t slotStride = 0;
  size_t descOffset = 0;
  size_t dataOffset = 0;
  size_t segmentBytes = 0;
};

// The layout for K slots of B bytes; throws kInvalidArgument outside the bounds above.
Geometry geometry(size_t slots, size_t slotBytes);

}  // namespace shm_layout

class PeerProcess;  // liveness of the process at the other end (peer_process.h)

class ShmRecvPipe : public RecvPipe {
 public:
  // Creates segment `name` for `slots` slots of `slotBytes` bytes, to be fed by rank
  // `peerRank` running as process `peerPid`. Throws kInvalidArgument for bad sizes and
  // kSystemError when the segment cannot be made (/dev/shm too small says so).
  static std::unique_ptr<ShmRecvPipe> create(const std::string& name, size_t slots,
                                             size_t slotBytes, int peerRank, pid_t peerPid);
  // Bytes of /dev/shm one pipe of this shape takes (to check space before creating).
  static size_t segmentBytes(size_t slots, size_t slotBytes);

  ~ShmRecvPipe() override;

  Slice wait(const WaitContext& ctx) override;  // calling again before release(): same slice
  void release() override;
  void publish(const PeerStatus& status) override;
  size_t slotBytes() const override { return geo_.slotBytes; }
  int peer() const override { return peerRank_; }
  bool readSlotsInPlace() const override { return true; }

  // Removes the segment's name (idempotent; the sender normally did it already). Call
  // after the communicator's init barrier, when the sender has surely mapped it.
  void unlinkName();
  const std::string& name() const { return segment_.name(); }
  // The peer's liveness handle, for its send pipe to share (ShmSendPipe::open).
  std::shared_ptr<PeerProcess> peerProcess() const { return peerProcess_; }

  ShmRecvPipe(const ShmRecvPipe&) = delete;
  ShmRecvPipe& operator=(const ShmRecvPipe&) = delete;

 private:
  friend class ShmSendPipe;
  ShmRecvPipe(ShmSegment segment, shm_layout::Geometry geo, int peerRank, pid_t peerPid,
              std::shared_ptr<PeerProcess> peerProcess);

  ShmSegment segment_;
  shm_layout::Geometry geo_;  // private copy: never re-read from shared memory
  shm_layout::Header* header_;
  shm_layout::SlotDesc* descs_;
  std::byte* slots_;
  int peerRank_;
  pid_t peerPid_;
  std::shared_ptr<PeerProcess> peerProcess_;
  uint64_t released_ = 0;  // slices released so far (== the next one to wait for)
  bool holding_ = false;   // a slice was returned by wait() and not released yet
  Slice held_;
  bool unlinked_ = false;
  std::mutex publishMu_;  // one status writer at a time
  std::atomic<bool> localAbort_{false};
};

class ShmSendPipe : public SendPipe {
 public:
  // Maps the segment `name` that rank `peerRank` (process `peerPid`) creates, waiting
  // for it until ctx.deadline (kTimeout), ctx.aborted (kAborted) or the peer's exit
  // (kRemoteError), then unlinks the name. A segment that is not a valid pipe for this
  // pair of processes is refused with kRemoteError saying why.
  // `peerProcess`: the peer's liveness handle when this rank already holds one (its
  // receive pipe from the same peer's), so that a pair of pipes holds one pidfd.
  static std::unique_ptr<ShmSendPipe> open(const std::string& name, int peerRank, pid_t peerPid,
                                           const WaitContext& ctx,
                                           std::shared_ptr<PeerProcess> peerProcess = nullptr);

  // The sending end of `receiver` in the same process, sharing its mapping rather than
  // mapping the segment a second time. For tests: ThreadSanitizer keys synchronisation
  // by address, so only a shared mapping lets it check the pipe's memory ordering.
  // `receiver` must outlive the returned pipe.
  static std::unique_ptr<ShmSendPipe> attach(ShmRecvPipe& receiver, int peerRank);

  ~ShmSendPipe() override;

  std::byte* acquire(const WaitContext& ctx) override;  // again before post(): same slot
  void post(size_t bytes, const Tag& tag) override;
  void flush(const WaitContext& ctx) override;
  void publish(const PeerStatus& status) override;
  size_t slotBytes() const override { return geo_.slotBytes; }
  int peer() const override { return peerRank_; }
  bool fillSlotsInPlace() const override { return true; }
  const std::string& name() const { return name_; }

  ShmSendPipe(const ShmSendPipe&) = delete;
  ShmSendPipe& operator=(const ShmSendPipe&) = delete;

 private:
  ShmSendPipe(std::string name, ShmSegment segment, std::byte* base, shm_layout::Geometry geo,
              int peerRank, pid_t peerPid, std::shared_ptr<PeerProcess> peerProcess);

  std::string name_;
  ShmSegment segment_;  // empty when attached in-process
  shm_layout::Geometry geo_;
  shm_layout::Header* header_;
  shm_layout::SlotDesc* descs_;
  std::byte* slots_;
  int peerRank_;
  pid_t peerPid_;
  std::shared_ptr<PeerProcess> peerProcess_;
  uint64_t posted_ = 0;  // slices posted so far (== the next slot to fill)
  bool acquired_ = false;
  std::mutex publishMu_;  // one status writer at a time
  std::atomic<bool> localAbort_{false};
};

}  // namespace gyre
