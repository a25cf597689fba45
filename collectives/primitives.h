// The five primitives every schedule is written in (NCCL's, from its device code's
// prims), over one receive pipe (from the left) and one send pipe (to the right):
//
//   send(src)                      -> right
//   recvReduceSend(src)            left + src -> right
//   recvReduceCopySend(src, dst)   left + src -> dst and -> right   (the chunk is final)
//   recvCopySend(dst)              left -> dst and -> right
//   recv(dst)                      left -> dst
//
// A tree rank has two children, so either side may have a second pipe (left2, right2,
// as NCCL's primitives take several peers): a reduction then combines left + src + left2
// (in that order, the same on every rank), and whatever goes right also goes right2.
// Each call moves one slice of at most sliceElems() elements: one slot. The reduce
// writes straight into the next send slot in one pass; slices that are only moved use
// the pipes' direct forms (tcp sends from and receives into the user's buffer), so a
// hop costs no copy the transport can avoid. Where the pipes say a direct form would
// only copy into or out of a slot (shm: SendPipe::fillSlotsInPlace,
// RecvPipe::readSlotsInPlace), recvReduceCopySend writes its result to dst and the send
// slot in one pass, and recvCopySend reads the received slot once into dst and the send
// slot. Every received slice must carry this call's Tag and the expected length;
// anything else is a kMismatch error naming both ranks and both calls, raised before a
// byte of it is written anywhere.
// With PrimitiveContext::moveBytes false (the simulator's payload-free mode) every wait,
// post and check happens as above, and no byte of a slot or a user buffer is touched.
// Every pipe operation tells the StallInspector (if any) which peer it involves and
// every slice moved, for stall reports and error messages.
//
// Threads: one Primitives object is used by the thread running the collective.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>

#include "collectives/collective.h"
#include "collectives/tuning.h"
#include "transport/pipe.h"

namespace gyre {

class StallInspector;

struct PrimitiveContext {
  RecvPipe* left = nullptr;
  SendPipe* right = nullptr;
  RecvPipe* left2 = nullptr;   // optional second source of the reductions
  SendPipe* right2 = nullptr;  // optional second destination of every send
  std::chrono::milliseconds timeout{0};
  std::chrono::microseconds spin{0};
  const std::atomic<bool>* aborted = nullptr;
  int rank = -1;                        // this rank, for mismatch messages
  StallInspector* inspector = nullptr;  // optional
  // false only in the simulator's payload-free mode (sim/): slices carry their sizes
  // and tags but no bytes, so the primitives and schedules read and write no buffer
  // (no reduction, no copy); every wait and post happens as with payload.
  bool moveBytes = true;
};

// Every pipe of a communicator by peer rank, for schedules that talk to more than the
// ring's two neighbours. A pair missing from the maps is connected on first use by
// `connect` (ring/lazy_connector.h, GYRE_CONNECT=lazy), which adds both of its pipes to
// the maps; null where every pipe is there (eager, the simulator).
struct PeerPipes {
  std::map<int, SendPipe*> send;
  std::map<int, RecvPipe*> recv;
  std::function<void(int peer)> connect;
};

// `base` with its pipes replaced: receive from `recvFrom` (and `recvFrom2`), send to
// `sendTo` (and `sendTo2`); -1: none. A pipe not there yet is connected through
// PeerPipes::connect (which throws naming the peer when it cannot); without one,
// kInternal.
PrimitiveContext linked(const PrimitiveContext& base, const PeerPipes& pipes, int recvFrom,
                        int sendTo, int recvFrom2 = -1, int sendTo2 = -1);

class Primitives {
 public:
  // Calls whose count is at least this many bytes (all-gather, reduce-scatter: one
  // rank's block) stream results into user memory (host_kernels/stream_copy.h) where a
  // slot is read in place: the ranks' buffers then outgrow the cache (collectives/tuning.h).
  static constexpr size_t kStreamOutMinBytes = kTuning.streamOutMinBytes;

  // avgDivisor: for ReduceOp::kAvg, the final reduction step divides by it.
  Primitives(const PrimitiveContext& ctx, const CollectiveCall& call, uint32_t avgDivisor);

  size_t sliceElems() const { return sliceElems_; }

  void send(const void* src, size_t n);
  void recvReduceSend(const void* src, size_t n);
  void recvReduceCopySend(const void* src, void* dst, size_t n);
  void recvCopySend(void* dst, size_t n);
  void recv(void* dst, size_t n);
  // left op src -> dst, no send (recursive doubling's exchange; left only). The lower rank's
  // operand goes first so both partners compute the same bits; finalStep applies
  // avg's division.
  void recvReduce(const void* src, void* dst, size_t n, bool receivedIsLower, bool finalStep);

  // Waits until every posted slice has left this rank.
  void flush();

  // Names the schedule's phase from here on ("reduce-scatter", "tree up", ...): a span
  // nested in the collective's on the timeline (GYRE_TIMELINE; stall_inspector.h). Off,
  // and for a phase already current, it does nothing.
  void phase(const char* name);

 private:
  WaitContext waitContext() const;
  Slice receive(RecvPipe* from, size_t n);
  void receiveInto(RecvPipe* from, void* dst, size_t n);
  void released(RecvPipe* from, size_t n);  // releases the slice from receive(), counted
  [[noreturn]] void throwMismatch(const RecvPipe* from, const Slice& got, size_t n) const;
  std::byte* acquire(SendPipe* to);
  void post(SendPipe* to, size_t n);
  void postDirect(SendPipe* to, const void* src, size_t n);
  void sendDirect(const void* src, size_t n);  // to right and right2
  // Posts right's acquired slot holding n elements; with right2, copies it into
  // right2's slot first and posts that too.
  void postCopies(const std::byte* slot, size_t n);
  void writeOut(void* dst, const void* src, size_t n);  // a final write into user memory

  PrimitiveContext ctx_;
  CollectiveCall call_;
  Tag tag_;
  size_t elemBytes_;
  size_t sliceElems_;
  uint32_t avgDivisor_;
  bool fillSlots_ = false;  // right (and right2) take fused writes into their slots
  bool readSlots_ = false;  // left's slots may be read in place (see pipe.h)
  bool streamOut_ = false;  // final writes to user memory bypass the cache
  bool moveBytes_ = true;   // PrimitiveContext::moveBytes
};

}  // namespace gyre
