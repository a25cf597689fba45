// A simulated pipe of slots (transport/pipe.h) between two ranks of one process, on the
// virtual clock of sim/virtual_scheduler.h and the costs of sim/network_model.h.
//
// One SimChannel is the pipe from rank `from` to rank `to`: K slots of B bytes used in
// turn, as the real transports do. acquire() waits (a fiber block) until the next slot
// was released by the receiver and its credit came back; post() stamps the slice with
// its arrival time from LinkTimes::send and advances the sender's clock by the time its
// CPU is busy; wait() blocks until a slice is posted, then advances the receiver's clock
// to its arrival; release() charges the receiver's CPU for the slice and frees the slot.
// flush() returns at once (a posted slice has left its sender). Tags and sizes travel as on
// a real pipe, so the primitives' mismatch checks run unchanged.
//
// With payload the slots are real memory (K x B bytes, allocated at the first acquire),
// and postDirect / waitInto copy as transport/pipe.cc's defaults do. Without payload
// (sim/sim_world.h's payload-free mode; the primitives then run with
// PrimitiveContext::moveBytes false) no slot memory exists and no byte is copied:
// acquire() returns null and slices carry their sizes only.
//
// Pipes between ranks of one host say fillSlotsInPlace / readSlotsInPlace like shm's,
// the others like tcp's, so the primitives take the same paths as over the real
// transports.
//
// Contract: used only by fibers of one VirtualScheduler; the sending end by rank
// `from`'s fiber, the receiving end by rank `to`'s. publish() is accepted and ignored
// (no failure propagation in the simulator: a failure ends the run).
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "sim/network_model.h"
#include "sim/virtual_scheduler.h"
#include "transport/pipe.h"

namespace gyre::sim {

struct SimCounters {
  size_t slices = 0;
  size_t bytes = 0;
};

class SimChannel {
 public:
  SimChannel(VirtualScheduler& scheduler, LinkTimes& links, int from, int to, size_t slots,
             size_t slotBytes, bool payload, SimCounters& counters);

  SendPipe& sendEnd() { return *send_; }
  RecvPipe& recvEnd() { return *recv_; }
  // Empties the pipe and frees every slot at time `now`: each run starts from idle pipes
  // (also after a run that failed or deadlocked with slices in flight).
  void reset(double now = 0);

 private:
  class Send;
  class Recv;
  friend class Send;
  friend class Recv;

  // One slot: free (its credit back at freeAt), acquired, or posted (a slice that
  // arrives at `arrival`). Slots are taken and received in turn, so the posted ones are
  // nextRecv_, nextRecv_ + 1, ... (mod K), posted_ of them.
  struct Slot {
    double freeAt = 0;
    double arrival = 0;
    size_t bytes = 0;
    Tag tag;
    bool busy = false;  // acquired or posted, not yet released
  };

  std::byte* slotMemory(size_t slot);

  VirtualScheduler& scheduler_;
  LinkTimes& links_;
  SimCounters& counters_;
  const int from_, to_;
  const size_t slots_, slotBytes_;
  const bool payload_;
  const bool local_;
  std::vector<std::byte> memory_;
  std::vector<Slot> slot_;
  size_t nextSend_ = 0;  // the slot the next acquire takes
  size_t nextRecv_ = 0;  // the oldest posted slot
  size_t posted_ = 0;    // slots posted and not released
  bool senderWaits_ = false, receiverWaits_ = false;
  std::unique_ptr<SendPipe> send_;
  std::unique_ptr<RecvPipe> recv_;
};

}  // namespace gyre::sim
