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
#include <deque>
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
  // Empties the pipe and frees every slot at time 0: each run starts from idle pipes
  // (also after a run that failed or deadlocked with slices in flight).
  void reset();

 private:
  class Send;
  class Recv;
  friend class Send;
  friend class Recv;

  struct Posted {
    size_t slot;
    size_t bytes;
    Tag tag;
    double arrival;
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
  std::vector<bool> busy_;        // by slot: acquired or posted, not yet released
  std::vector<double> freeAt_;    // by slot: when its credit is back at the sender
  size_t nextSend_ = 0;           // the slot the next acquire takes
  std::deque<Posted> posted_;     // posted, not released; front is the next to receive
  bool senderWaits_ = false, receiverWaits_ = false;
  std::unique_ptr<SendPipe> send_;
  std::unique_ptr<RecvPipe> recv_;
};

}  // namespace gyre::sim
