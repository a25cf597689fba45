#include "sim/sim_pipe.h"

#include <algorithm>
#include <cstring>

#include "base/error.h"

namespace gyre::sim {

class SimChannel::Send final : public SendPipe {
 public:
  explicit Send(SimChannel& c) : c_(c) {}

  std::byte* acquire(const WaitContext&) override {
    const size_t slot = c_.nextSend_;
    for (size_t tries = 0; c_.slot_[slot].busy; ++tries) {
      // Each wake-up follows a release on this channel; K releases free any slot.
      if (tries > c_.slots_) fail(ErrorCode::kInternal, "sim: slot {} never freed", slot);
      c_.senderWaits_ = true;
      c_.scheduler_.block("a free slot (credit) from", c_.to_);
    }
    c_.scheduler_.advanceTo(c_.slot_[slot].freeAt);
    c_.slot_[slot].busy = true;
    return c_.payload_ ? c_.slotMemory(slot) : nullptr;
  }

  void post(size_t bytes, const Tag& tag) override { postSlice(bytes, tag, false); }

  void postSlice(size_t bytes, const Tag& tag, bool copied) {
    if (bytes > c_.slotBytes_) fail(ErrorCode::kInternal, "sim: post of {} bytes", bytes);
    VirtualScheduler& s = c_.scheduler_;
    // Shared links (a NIC's receive side, an uplink, a host's bus) are claimed in
    // virtual-time order; a slot in a peer's shared memory involves none of them.
    if (c_.links_.sharesResources(c_.from_, c_.to_)) s.syncPoint();
    const LinkTimes::Transfer t = c_.links_.send(c_.from_, c_.to_, bytes, s.now(), copied);
    s.advanceTo(t.senderDone);
    Slot& slot = c_.slot_[c_.nextSend_];
    slot.bytes = bytes;
    slot.tag = tag;
    slot.arrival = t.arrival;
    ++c_.posted_;
    c_.nextSend_ = (c_.nextSend_ + 1) % c_.slots_;
    ++c_.counters_.slices;
    c_.counters_.bytes += bytes;
    if (c_.receiverWaits_) {
      c_.receiverWaits_ = false;
      s.wake(c_.to_, t.arrival);
    }
  }

  void postDirect(const void* src, size_t bytes, const Tag& tag, const WaitContext& ctx) override {
    std::byte* slot = acquire(ctx);
    if (c_.payload_ && bytes) std::memcpy(slot, src, bytes);
    postSlice(bytes, tag, /*copied=*/true);
  }

  // Every slice left when post() returned: tcp's kernel took it (the NIC drains it on
  // its own), shm's is in the peer's slot. No wait, no cost.
  void flush(const WaitContext&) override {}

  bool fillSlotsInPlace() const override { return c_.local_; }
  size_t slotBytes() const override { return c_.slotBytes_; }
  int peer() const override { return c_.to_; }
  void publish(const PeerStatus&) override {}

 private:
  SimChannel& c_;
};

class SimChannel::Recv final : public RecvPipe {
 public:
  explicit Recv(SimChannel& c) : c_(c) {}

  Slice wait(const WaitContext&) override {
    VirtualScheduler& s = c_.scheduler_;
    // A post always wakes the waiter, so one block per missing slice suffices; the bound
    // only guards against a bug.
    for (int tries = 0; c_.posted_ == 0; ++tries) {
      if (tries > 1) fail(ErrorCode::kInternal, "sim: woken without a slice");
      c_.receiverWaits_ = true;
      s.block("a slice from", c_.from_);
    }
    const Slot& p = c_.slot_[c_.nextRecv_];
    s.advanceTo(p.arrival);
    return Slice{c_.payload_ ? c_.slotMemory(c_.nextRecv_) : nullptr, p.bytes, p.tag};
  }

  void release() override {
    if (c_.posted_ == 0) fail(ErrorCode::kInternal, "sim: release without a slice");
    VirtualScheduler& s = c_.scheduler_;
    Slot& p = c_.slot_[c_.nextRecv_];
    c_.nextRecv_ = (c_.nextRecv_ + 1) % c_.slots_;
    --c_.posted_;
    s.advanceTo(s.now() + c_.links_.receiveCost(p.bytes));
    const double back = c_.links_.creditAt(c_.from_, c_.to_, s.now());
    p.busy = false;
    p.freeAt = back;
    if (c_.senderWaits_) {
      c_.senderWaits_ = false;
      s.wake(c_.from_, back);
    }
  }

  Slice waitInto(void* dst, size_t bytes, const Tag& expect, const WaitContext& ctx) override {
    Slice s = wait(ctx);
    if (s.tag != expect || s.bytes != bytes) return s;
    if (c_.payload_ && bytes) std::memcpy(dst, s.data, bytes);
    release();
    s.data = static_cast<const std::byte*>(dst);
    return s;
  }

  bool readSlotsInPlace() const override { return c_.local_; }
  size_t slotBytes() const override { return c_.slotBytes_; }
  int peer() const override { return c_.from_; }
  void publish(const PeerStatus&) override {}

 private:
  SimChannel& c_;
};

SimChannel::SimChannel(VirtualScheduler& scheduler, LinkTimes& links, int from, int to,
                       size_t slots, size_t slotBytes, bool payload, SimCounters& counters)
    : scheduler_(scheduler),
      links_(links),
      counters_(counters),
      from_(from),
      to_(to),
      slots_(slots),
      slotBytes_(slotBytes),
      payload_(payload),
      local_(links.sameHost(from, to)),
      slot_(slots),
      send_(std::make_unique<Send>(*this)),
      recv_(std::make_unique<Recv>(*this)) {}

void SimChannel::reset(double now) {
  std::fill(slot_.begin(), slot_.end(), Slot{now, 0, 0, Tag{}, false});
  nextSend_ = nextRecv_ = posted_ = 0;
  senderWaits_ = receiverWaits_ = false;
}

std::byte* SimChannel::slotMemory(size_t slot) {
  if (memory_.empty()) memory_.resize(slots_ * slotBytes_);
  return memory_.data() + slot * slotBytes_;
}

}  // namespace gyre::sim
