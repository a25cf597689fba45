#include "transport/shm/shm_pipe.h"

#include <errno.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <new>
#include <thread>

#include "base/error.h"
#include "base/log.h"
#include "transport/shm/peer_process.h"

namespace gyre {

using Clock = std::chrono::steady_clock;
using namespace shm_layout;

namespace {

// How often a sleeping waiter looks at the peer's process: the Doorbell's own sleep
// slice, so a dead peer is found within ~10 ms for one poll(2) per slice.
constexpr auto kLivenessSlice = std::chrono::milliseconds(10);

size_t roundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

long elapsedMs(Clock::time_point since) {
  return static_cast<long>(
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - since).count());
}

// Waits until ready(), throwing what a pipe must throw. ready() also returns true when
// either end closed; the caller tells the cases apart. Spins once (ctx.spin), then sleeps
// on `bell` in slices, checking the peer's process and showing the observer the peer's
// status (`peerStatus`, a StatusSlot) between slices.
template <typename Ready>
void waitOn(Doorbell& bell, Ready&& ready, const WaitContext& ctx, PeerProcess& peer, int peerRank,
            pid_t peerPid, const char* what, const std::string& name,
            const StatusSlot& peerStatus) {
  if (ready()) return;
  const auto start = Clock::now();
  WaitContext slice = ctx;
  for (;;) {
    slice.deadline = std::min(ctx.deadline, Clock::now() + kLivenessSlice);
    switch (bell.wait(ready, slice, /*shared=*/true)) {
      case Doorbell::WaitResult::kReady:
        return;
      case Doorbell::WaitResult::kAborted:
        fail(ErrorCode::kAborted, "aborted while waiting for {} from peer rank {} on shm pipe {}",
             what, peerRank, name);
      case Doorbell::WaitResult::kTimeout:
        break;
    }
    if (peer.gone()) {
      if (ready()) return;  // it posted (or released) and then exited: not an error yet
      fail(ErrorCode::kRemoteError, "peer rank {} (pid {}) exited while this rank waited for {}",
           peerRank, peerPid, what);
    }
    if (Clock::now() >= ctx.deadline) {
      fail(ErrorCode::kTimeout,
           "timed out after {} ms waiting for {} from peer rank {} (pid {}) on shm pipe {}",
           elapsedMs(start), what, peerRank, peerPid, name);
    }
    if (ctx.observer) {
      PeerStatus status;
      bool waiting = readStatus(peerStatus, &status) && status.state == PeerStatus::State::kWaiting;
      ctx.observer->waiting(peerRank, what, start, waiting ? &status : nullptr);
    }
    slice.spin = std::chrono::microseconds(0);  // spin once per wait, not per slice
  }
}

// The error for a pipe whose other end closed: its abort status if it published one.
[[noreturn]] void throwPeerClosed(const StatusSlot& peerStatus, int peerRank, pid_t peerPid,
                                  const std::string& name, const char* what) {
  PeerStatus status;
  if (readStatus(peerStatus, &status) && status.state == PeerStatus::State::kAborted) {
    throw PeerAbortError(describePeerAbort(peerRank, status), status);
  }
  fail(ErrorCode::kRemoteError,
       "peer rank {} (pid {}) closed shm pipe {} while this rank waited for {}", peerRank, peerPid,
       name, what);
}

// Reads a field the other process could rewrite at any time exactly once, so that the
// value checked is the value used.
template <typename T>
T readOnce(const T& field) {
  return static_cast<const volatile T&>(field);
}

}  // namespace

namespace shm_layout {

Geometry geometry(size_t slots, size_t slotBytes) {
  if (slots < 1 || slots > kMaxSlots) {
    fail(ErrorCode::kInvalidArgument, "an shm pipe needs 1 to {} slots, not {}", kMaxSlots, slots);
  }
  if (slotBytes < 1 || slotBytes > kMaxSlotBytes) {
    fail(ErrorCode::kInvalidArgument, "an shm pipe's slots hold 1 to {} bytes, not {}",
         kMaxSlotBytes, slotBytes);
  }
  Geometry g;
  g.slots = slots;
  g.slotBytes = slotBytes;
  g.slotStride = roundUp(slotBytes, kCacheLine);
  g.descOffset = roundUp(sizeof(Header), kCacheLine);
  // Payload page-aligned: full-speed vector copies and no line shared with the descs.
  g.dataOffset = roundUp(g.descOffset + slots * sizeof(SlotDesc), kPage);
  g.segmentBytes = g.dataOffset + slots * g.slotStride;  // < 2^51 by the bounds above
  return g;
}

}  // namespace shm_layout

// ---- Receiving end ----------------------------------------------------------------------

size_t ShmRecvPipe::segmentBytes(size_t slots, size_t slotBytes) {
  return geometry(slots, slotBytes).segmentBytes;
}

std::unique_ptr<ShmRecvPipe> ShmRecvPipe::create(const std::string& name, size_t slots,
                                                 size_t slotBytes, int peerRank, pid_t peerPid) {
  Geometry geo = geometry(slots, slotBytes);
  if (peerPid <= 0) {
    fail(ErrorCode::kInvalidArgument, "shm pipe {}: bad pid {} for peer rank {}", name, peerPid,
         peerRank);
  }
  ShmSegment segment = ShmSegment::create(name, geo.segmentBytes);
  try {
    std::byte* base = segment.data();
    // The pages are fresh zeros; placement-new starts the objects' lifetimes so the
    // atomics are atomics, then the fields, then the magic last (release): open() waits
    // for it, so the sender never sees a half-written header.
    auto* h = new (base) Header{};
    for (size_t i = 0; i < geo.slots; ++i)
      new (base + geo.descOffset + i * sizeof(SlotDesc)) SlotDesc{};
    h->version = kVersion;
    h->headerBytes = sizeof(Header);
    h->slots = geo.slots;
    h->slotBytes = geo.slotBytes;
    h->slotStride = geo.slotStride;
    h->descOffset = geo.descOffset;
    h->dataOffset = geo.dataOffset;
    h->segmentBytes = geo.segmentBytes;
    h->receiverPid = ::getpid();
    h->senderPid = peerPid;
    h->magic.store(kMagic, std::memory_order_release);
    log(LogLevel::kTrace, -1, "shm pipe {} created: {} slots of {} bytes for peer rank {} (pid {})",
        name, slots, slotBytes, peerRank, peerPid);
    return std::unique_ptr<ShmRecvPipe>(new ShmRecvPipe(std::move(segment), geo, peerRank, peerPid,
                                                        std::make_shared<PeerProcess>(peerPid)));
  } catch (...) {
    ShmSegment::unlink(name);
    throw;
  }
}

ShmRecvPipe::ShmRecvPipe(ShmSegment segment, Geometry geo, int peerRank, pid_t peerPid,
                         std::shared_ptr<PeerProcess> peerProcess)
    : segment_(std::move(segment)),
      geo_(geo),
      header_(std::launder(reinterpret_cast<Header*>(segment_.data()))),
      descs_(std::launder(reinterpret_cast<SlotDesc*>(segment_.data() + geo.descOffset))),
      slots_(segment_.data() + geo.dataOffset),
      peerRank_(peerRank),
      peerPid_(peerPid),
      peerProcess_(std::move(peerProcess)) {}

ShmRecvPipe::~ShmRecvPipe() {
  // Tell a sender blocked on credits that nobody will release them.
  header_->receiverClosed.store(1, std::memory_order_release);
  header_->releasedBell.ring(/*shared=*/true);
  try {
    unlinkName();
  } catch (const std::exception& e) {
    log(LogLevel::kWarn, -1, "{}", e.what());
  }
}

void ShmRecvPipe::unlinkName() {
  if (unlinked_) return;
  ShmSegment::unlink(segment_.name());
  unlinked_ = true;
}

Slice ShmRecvPipe::wait(const WaitContext& ctx) {
  if (holding_) return held_;
  auto ready = [this] {
    return header_->posted.load(std::memory_order_acquire) != released_ ||
           header_->senderClosed.load(std::memory_order_acquire) != 0 ||
           localAbort_.load(std::memory_order_acquire);
  };
  waitOn(header_->postedBell, ready, ctx, *peerProcess_, peerRank_, peerPid_, "a posted slice",
         segment_.name(), header_->senderStatus);
  uint64_t posted = header_->posted.load(std::memory_order_acquire);
  if (posted == released_) {
    if (localAbort_.load(std::memory_order_acquire)) {
      fail(ErrorCode::kAborted, "this rank aborted: the pipe from peer rank {} is closed",
           peerRank_);
    }
    throwPeerClosed(header_->senderStatus, peerRank_, peerPid_, segment_.name(), "a posted slice");
  }
  if (posted - released_ > geo_.slots) {  // also catches a counter that went backwards
    fail(ErrorCode::kRemoteError,
         "shm pipe {} is corrupt: peer rank {} posted slice {} with {} released and {} slots",
         segment_.name(), peerRank_, posted, released_, geo_.slots);
  }
  size_t index = static_cast<size_t>(released_ % geo_.slots);
  const SlotDesc& desc = descs_[index];
  uint64_t bytes = readOnce(desc.bytes);
  if (bytes > geo_.slotBytes) {
    fail(ErrorCode::kRemoteError,
         "shm pipe {} is corrupt: peer rank {} posted {} bytes in a slot of {} bytes",
         segment_.name(), peerRank_, bytes, geo_.slotBytes);
  }
  held_.data = slots_ + index * geo_.slotStride;
  held_.bytes = static_cast<size_t>(bytes);
  std::memcpy(&held_.tag, &desc.tag, sizeof(Tag));
  holding_ = true;
  return held_;
}

void ShmRecvPipe::publish(const PeerStatus& status) {
  std::lock_guard<std::mutex> lock(publishMu_);
  if (localAbort_.load(std::memory_order_relaxed)) return;
  writeStatus(header_->receiverStatus, status);
  if (status.state != PeerStatus::State::kAborted) return;
  localAbort_.store(true, std::memory_order_release);
  header_->receiverClosed.store(1, std::memory_order_release);
  header_->releasedBell.ring(/*shared=*/true);  // the sender, waiting for a credit
  header_->postedBell.ring(/*shared=*/true);    // our own user thread, waiting for a slice
}

void ShmRecvPipe::release() {
  if (!holding_) fail(ErrorCode::kInternal, "shm pipe {}: release() without wait()", name());
  holding_ = false;
  ++released_;
  header_->released.store(released_, std::memory_order_release);
  header_->releasedBell.ring(/*shared=*/true);
}

// ---- Sending end ------------------------------------------------------------------------

namespace {

[[noreturn]] void refuse(const std::string& name, int peerRank, const std::string& why) {
  fail(ErrorCode::kRemoteError, "shm segment {} is not a valid gyre pipe from peer rank {}: {}",
       name, peerRank, why);
}

// Checks every header field against what this build would have written for the sizes
// it claims and against the mapped size; returns the geometry to use from now on.
Geometry validate(const ShmSegment& segment, int peerRank, pid_t peerPid) {
  const std::string& name = segment.name();
  const auto& h = *std::launder(reinterpret_cast<const Header*>(segment.data()));
  uint32_t version = readOnce(h.version);
  if (version != kVersion) {
    refuse(name, peerRank,
           fmt::format("layout version {}, this build speaks {}", version, kVersion));
  }
  uint32_t headerBytes = readOnce(h.headerBytes);
  if (headerBytes != sizeof(Header)) {
    refuse(name, peerRank,
           fmt::format("header of {} bytes, expected {}", headerBytes, sizeof(Header)));
  }
  uint64_t slots = readOnce(h.slots), slotBytes = readOnce(h.slotBytes);
  if (slots < 1 || slots > kMaxSlots || slotBytes < 1 || slotBytes > kMaxSlotBytes) {
    refuse(name, peerRank, fmt::format("{} slots of {} bytes is out of bounds", slots, slotBytes));
  }
  Geometry g = geometry(slots, slotBytes);
  if (readOnce(h.slotStride) != g.slotStride || readOnce(h.descOffset) != g.descOffset ||
      readOnce(h.dataOffset) != g.dataOffset || readOnce(h.segmentBytes) != g.segmentBytes) {
    refuse(name, peerRank, "its offsets do not match its slot sizes");
  }
  if (g.segmentBytes > segment.size()) {
    refuse(name, peerRank,
           fmt::format("{} slots of {} bytes need {} bytes but the segment has {}", slots,
                       slotBytes, g.segmentBytes, segment.size()));
  }
  pid_t receiverPid = readOnce(h.receiverPid), senderPid = readOnce(h.senderPid);
  if (receiverPid != peerPid) {
    refuse(name, peerRank,
           fmt::format("it was created by pid {}, but peer rank {} is pid {}", receiverPid,
                       peerRank, peerPid));
  }
  if (senderPid != ::getpid()) {
    refuse(name, peerRank,
           fmt::format("it was made for sender pid {}, and this process is pid {}", senderPid,
                       ::getpid()));
  }
  return g;
}

}  // namespace

std::unique_ptr<ShmSendPipe> ShmSendPipe::open(const std::string& name, int peerRank, pid_t peerPid,
                                               const WaitContext& ctx,
                                               std::shared_ptr<PeerProcess> peer) {
  if (peerPid <= 0) {
    fail(ErrorCode::kInvalidArgument, "shm pipe {}: bad pid {} for peer rank {}", name, peerPid,
         peerRank);
  }
  if (!peer) peer = std::make_shared<PeerProcess>(peerPid);
  const auto start = Clock::now();
  ShmSegment segment;
  for (;;) {
    if (auto s = ShmSegment::tryOpen(name)) {
      if (s->size() < sizeof(Header)) {
        refuse(
            name, peerRank,
            fmt::format("it has {} bytes, less than a {}-byte header", s->size(), sizeof(Header)));
      }
      const auto* h = std::launder(reinterpret_cast<const Header*>(s->data()));
      uint64_t magic = h->magic.load(std::memory_order_acquire);
      if (magic == kMagic) {
        segment = std::move(*s);
        break;
      }
      if (magic != 0) refuse(name, peerRank, fmt::format("bad magic {:#x}", magic));
      // Zero: the creator is still writing the header; try again shortly.
    }
    if (ctx.aborted && ctx.aborted->load(std::memory_order_relaxed)) {
      fail(ErrorCode::kAborted, "aborted while waiting for peer rank {} to create shm pipe {}",
           peerRank, name);
    }
    if (peer->gone()) {
      // It may have died half-way through create(); the name is this pipe's alone and
      // nobody else will ever open it, so do not leave it in /dev/shm.
      ShmSegment::unlink(name);
      fail(ErrorCode::kRemoteError, "peer rank {} (pid {}) exited before creating shm pipe {}",
           peerRank, peerPid, name);
    }
    if (Clock::now() >= ctx.deadline) {
      fail(ErrorCode::kTimeout,
           "timed out after {} ms waiting for peer rank {} (pid {}) to create shm pipe {}",
           elapsedMs(start), peerRank, peerPid, name);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  Geometry geo = validate(segment, peerRank, peerPid);
  // Both ends have it mapped now: the name has done its job.
  ShmSegment::unlink(name);
  std::byte* base = segment.data();
  log(LogLevel::kTrace, -1, "shm pipe {} opened: {} slots of {} bytes to peer rank {} (pid {})",
      name, geo.slots, geo.slotBytes, peerRank, peerPid);
  return std::unique_ptr<ShmSendPipe>(
      new ShmSendPipe(name, std::move(segment), base, geo, peerRank, peerPid, std::move(peer)));
}

std::unique_ptr<ShmSendPipe> ShmSendPipe::attach(ShmRecvPipe& receiver, int peerRank) {
  return std::unique_ptr<ShmSendPipe>(
      new ShmSendPipe(receiver.name(), ShmSegment(), receiver.segment_.data(), receiver.geo_,
                      peerRank, ::getpid(), std::make_shared<PeerProcess>(::getpid())));
}

ShmSendPipe::ShmSendPipe(std::string name, ShmSegment segment, std::byte* base, Geometry geo,
                         int peerRank, pid_t peerPid, std::shared_ptr<PeerProcess> peerProcess)
    : name_(std::move(name)),
      segment_(std::move(segment)),
      geo_(geo),
      header_(std::launder(reinterpret_cast<Header*>(base))),
      descs_(std::launder(reinterpret_cast<SlotDesc*>(base + geo.descOffset))),
      slots_(base + geo.dataOffset),
      peerRank_(peerRank),
      peerPid_(peerPid),
      peerProcess_(std::move(peerProcess)) {}

ShmSendPipe::~ShmSendPipe() {
  // Tell a receiver waiting for slices that none will come.
  header_->senderClosed.store(1, std::memory_order_release);
  header_->postedBell.ring(/*shared=*/true);
}

std::byte* ShmSendPipe::acquire(const WaitContext& ctx) {
  size_t index = static_cast<size_t>(posted_ % geo_.slots);
  if (acquired_) return slots_ + index * geo_.slotStride;
  auto ready = [this] {
    uint64_t released = header_->released.load(std::memory_order_acquire);
    return released > posted_ || posted_ - released < geo_.slots ||
           header_->receiverClosed.load(std::memory_order_acquire) != 0 ||
           localAbort_.load(std::memory_order_acquire);
  };
  waitOn(header_->releasedBell, ready, ctx, *peerProcess_, peerRank_, peerPid_,
         "a free slot (a released slice)", name(), header_->receiverStatus);
  if (localAbort_.load(std::memory_order_acquire)) {
    fail(ErrorCode::kAborted, "this rank aborted: the pipe to peer rank {} is closed", peerRank_);
  }
  uint64_t released = header_->released.load(std::memory_order_acquire);
  if (released > posted_) {
    fail(ErrorCode::kRemoteError,
         "shm pipe {} is corrupt: peer rank {} released {} slices of the {} posted", name(),
         peerRank_, released, posted_);
  }
  // A receiver that closed (aborted) takes nothing more, even with credits left: the
  // slice would never be read, and this rank must learn of the abort now, not succeed
  // on data its peer will never use.
  if (posted_ - released >= geo_.slots ||
      header_->receiverClosed.load(std::memory_order_acquire) != 0) {
    throwPeerClosed(header_->receiverStatus, peerRank_, peerPid_, name(), "a free slot");
  }
  acquired_ = true;
  return slots_ + index * geo_.slotStride;
}

void ShmSendPipe::post(size_t bytes, const Tag& tag) {
  if (!acquired_) fail(ErrorCode::kInternal, "shm pipe {}: post() without acquire()", name());
  if (bytes > geo_.slotBytes) {
    fail(ErrorCode::kInternal, "shm pipe {}: post() of {} bytes into a slot of {}", name(), bytes,
         geo_.slotBytes);
  }
  SlotDesc& desc = descs_[posted_ % geo_.slots];
  desc.tag = tag;
  desc.bytes = bytes;
  acquired_ = false;
  ++posted_;
  // Release: the payload, tag and size above are visible before the new count.
  header_->posted.store(posted_, std::memory_order_release);
  header_->postedBell.ring(/*shared=*/true);
}

void ShmSendPipe::publish(const PeerStatus& status) {
  std::lock_guard<std::mutex> lock(publishMu_);
  if (localAbort_.load(std::memory_order_relaxed)) return;
  writeStatus(header_->senderStatus, status);
  if (status.state != PeerStatus::State::kAborted) return;
  localAbort_.store(true, std::memory_order_release);
  header_->senderClosed.store(1, std::memory_order_release);
  header_->postedBell.ring(/*shared=*/true);    // the receiver, waiting for a slice
  header_->releasedBell.ring(/*shared=*/true);  // our own user thread, waiting for a credit
}

void ShmSendPipe::flush(const WaitContext& ctx) {
  // A posted slice is already in the receiver's memory and this side holds no reference
  // to it, so it has "left this rank" as soon as post() returned.
  (void)ctx;
}

}  // namespace gyre
