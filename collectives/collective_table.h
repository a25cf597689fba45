// The one table of collectives: for each CollectiveKind its name, the shape of its
// buffers (what the communicator checks before it issues a call, and what a single rank
// copies) and the schedule that runs it; for all-reduce, one row per algorithm.
//
// Adding a collective: its schedule (a file of its own in collectives/), a CollectiveKind
// (collective.h), one row in kCollectives (collective_table.cc) and its public entry
// points in ring/communicator.h, each one line over Communicator::issue. Adding an
// all-reduce algorithm: its schedule, an AllReduceAlgo (base/options.h), one row in
// kAllReduceAlgos (collective_table.cc) and its cost in algorithm_choice.cc.
//
// Contract: constant tables, any thread. Lookups throw kInternal for a kind or an
// algorithm without a row (a bug, never a user's error: the communicator validates first).
#pragma once

#include "base/options.h"
#include "collectives/collective.h"
#include "collectives/host_topology.h"
#include "collectives/primitives.h"

namespace gyre {

// What a schedule runs on (size >= 2; one rank never reaches a schedule).
struct ScheduleArgs {
  const PrimitiveContext& ctx;   // every schedule's base: timeouts, abort flag, ring neighbours
  const PeerPipes& pipes;        // every pipe of the communicator, by peer rank
  const HostTopology& topology;  // which ranks share a host (the same on every rank)
  int rank;
  int size;
  const CollectiveCall& call;
  const void* sendbuf;
  void* recvbuf;
  const PeerBlocks* blocks = nullptr;  // alltoallv's layout; null for every other kind
};
using Schedule = void (*)(const ScheduleArgs&);

// How a collective's buffers relate to CollectiveCall::count and to each other.
enum class BufferShape {
  kNone,          // no buffer (barrier)
  kOneBuffer,     // one buffer of count elements: read on the root, written elsewhere
  kWhole,         // sendbuf and recvbuf of count elements, the same (in place) or disjoint
  kToRoot,        // kWhole, but only the root's recvbuf is used (null allowed elsewhere)
  kGather,        // recvbuf: size shares of count; sendbuf: this rank's share, or disjoint
  kScatter,       // sendbuf: size shares of count; recvbuf: this rank's share, or disjoint
  kPerPeer,       // both size shares of count (one per peer), disjoint
  kPerPeerSized,  // a block per peer, each of its own size (PeerBlocks), disjoint
  kPointToPoint,  // send/recv: the communicator's point-to-point path, not a schedule
};

struct CollectiveRow {
  CollectiveKind kind;
  const char* name;   // as errors and logs name it: "allreduce"
  BufferShape shape;
  bool reduces;       // takes a ReduceOp (describe() names it)
  Schedule run;       // null for point to point
};

struct AllReduceRow {
  AllReduceAlgo algo;
  Schedule run;
};

// The row of `kind`; find: null for a kind without one (a tag from a newer peer, say).
const CollectiveRow& collectiveRow(CollectiveKind kind);
const CollectiveRow* findCollectiveRow(CollectiveKind kind);
// Whether the shape has a root (broadcast, reduce).
bool rooted(BufferShape shape);
// Runs args.call on its row's schedule (all-reduce and barrier: the row of call.algo).
void runSchedule(const ScheduleArgs& args);

}  // namespace gyre
