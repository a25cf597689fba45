// The one table of collectives: for each CollectiveKind its name, the shape of its
// buffers (what the communicator checks before it issues a call, and what a single rank
// copies) and the schedule that runs it; for all-reduce, one row per algorithm, which
// also says where the algorithm fits and what it costs (the choice loops over the rows:
// algorithm_choice.h, topology_choice.h).
//
// Adding a collective: its schedule (a file of its own in collectives/), a CollectiveKind
// (collective.h), one row in kCollectives (collective_table.cc) and its public entry
// points in ring/communicator.h, each one line over Communicator::issue. Adding an
// all-reduce algorithm: its file in collectives/ (schedule, fits, predictions and its
// AllReduceRow), its declaration and place in kAllReduceAlgorithms below, and an
// AllReduceAlgo with its GYRE_ALGO spelling (collectives/allreduce_algo.h); docs/DESIGN.md lists it.
//
// Contract: constant tables, any thread. Lookups throw kInternal for a kind or an
// algorithm without a row (a bug, never a user's error: the communicator validates first).
#pragma once

#include "collectives/allreduce_algo.h"
#include "collectives/collective.h"
#include "collectives/cost_model.h"
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

// One all-reduce algorithm: its schedule, where it can run and what it costs there.
struct AllReduceRow {
  AllReduceAlgo algo;
  Schedule run;
  // Whether it can run a call there (a forced algorithm that cannot runs the ring).
  bool (*fits)(const AllReducePlace& place);
  // Predicted microseconds on one host: `size` ranks over links of `cost`.
  double (*predictOneHost)(size_t bytes, int size, const LinkCost& cost);
  // Predicted microseconds across hosts, the two-level model (topology_choice.h).
  double (*predict)(size_t bytes, const HostTopology& topology, const TwoLevelCost& cost);
  // Bytes the busiest NIC carries in one direction, `nicsPerHost` NICs a host (local
  // rank i on NIC i mod nicsPerHost): what predict() charges the inter-host rate for.
  double (*hostLinkBytes)(size_t bytes, const HostTopology& topology, int nicsPerHost);
};

// Each defined in its algorithm's file.
extern const AllReduceRow kRingAllReduce;               // ring_allreduce.cc
extern const AllReduceRow kTreeAllReduce;               // tree_allreduce.cc
extern const AllReduceRow kRecursiveDoublingAllReduce;  // recursive_doubling.cc
extern const AllReduceRow kHierarchicalAllReduce;       // hierarchical_allreduce.cc

// Every all-reduce algorithm, in the order auto breaks a tie in (the earlier row wins).
// The first, the ring, fits everywhere.
inline constexpr const AllReduceRow* kAllReduceAlgorithms[] = {
    &kRingAllReduce, &kTreeAllReduce, &kRecursiveDoublingAllReduce, &kHierarchicalAllReduce};
static_assert(kAllReduceAlgorithms[0] == &kRingAllReduce, "the fallback comes first");

// The row of `kind`; find: null for a kind without one (a tag from a newer peer, say).
const CollectiveRow& collectiveRow(CollectiveKind kind);
const CollectiveRow* findCollectiveRow(CollectiveKind kind);
// The row of `algo` (never kAuto); kInternal for an algorithm without one.
const AllReduceRow& allReduceRow(AllReduceAlgo algo);
// Whether the shape has a root (broadcast, reduce).
bool rooted(BufferShape shape);
// Runs args.call on its row's schedule (all-reduce and barrier: the row of call.algo).
void runSchedule(const ScheduleArgs& args);

}  // namespace gyre
