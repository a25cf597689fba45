// A simulated communicator of many ranks in one process: gyre's own schedules
// (collectives/collective_table.h's runSchedule, unchanged) run on every rank over
// simulated pipes (sim/sim_pipe.h) on a virtual clock (sim/virtual_scheduler.h), timed
// by a network model (sim/network_model.h). What a rank gets is what the communicator
// gives a schedule (ring/communicator_impl.cc): a PrimitiveContext with its ring
// neighbours, its pipes by peer, the HostTopology, and a CollectiveCall whose algo is set
// by callAlgorithm (collectives/topology_choice.h) from the Options (GYRE_ALGO) and the
// cost gyre would build on this cluster: the shm table inside a host and, across hosts,
// what the link probe would measure on the model's link (NetworkModel::probeAlphaUs,
// probeBytesPerUs).
//
// Pipes. Up to allPairsMaxRanks ranks every ordered pair has a pipe, as a real
// communicator; above, only those the default schedules use (collectives/eager_peers.h
// schedulePeers, recursive doubling's partners included), plus each rooted two-level
// call's chain of HostTopology::hostOrderFrom(root), since n^2 pipes at 4,096 ranks
// would not fit in memory. A schedule that asks for another pipe fails
// with kInternal ("no pipe to rank ..."), never silently.
//
// Payload. With payload every rank's buffers are real and the result can be checked;
// without (payload = false) slices carry sizes only and the primitives run with
// PrimitiveContext::moveBytes false: the buffers may be any addresses that are never
// touched (NoPayloadBuffers reserves such an address range, so a stray access faults).
// The predicted time is the same in both modes.
//
// Contract: one thread. run() is collective over the simulated ranks: every rank runs
// the same call on its own buffers; the clocks start at 0 for each call, and the result
// is the latest rank's finishing time. On links with a token bucket
// (NetworkModel::linkBurstBytes) run() times the last of 1 + callsBefore identical calls
// back to back, as gyre-bench times ops that follow others; buckets start full before the
// first. Errors (a mismatch, a deadlock:
// SimDeadlock) propagate out of run() as gyre::Error.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "collectives/collective.h"
#include "collectives/collective_options.h"
#include "collectives/host_topology.h"
#include "collectives/primitives.h"
#include "collectives/topology_choice.h"
#include "sim/network_model.h"
#include "sim/sim_pipe.h"
#include "sim/virtual_scheduler.h"

namespace gyre::sim {

struct SimOptions {
  NetworkModel network;
  CollectiveOptions gyre;  // algo (GYRE_ALGO), slots, slotBytes as a communicator's
  bool payload = true;
  int allPairsMaxRanks = 256;
  // Shaped links only: identical calls run before the timed one, so the token buckets
  // hold what a stream of ops leaves (1: what one call leaves; gyre-bench's ops follow
  // its warm-up and the other algorithms' bursts, which the bucket never refills from).
  int callsBefore = 1;
};

struct SimResult {
  double micros = 0;  // when the last rank finished (all started at 0)
  uint8_t algo = 0;   // the call's algo (CollectiveCall::algo)
  SimCounters counters;
};

// Rank r's send and receive buffers for one call.
using BufferFn = std::function<std::pair<const void*, void*>(int rank)>;

class SimWorld {
 public:
  explicit SimWorld(const SimOptions& options);
  ~SimWorld();

  int size() const { return size_; }
  const HostTopology& topology() const { return topology_; }
  const TwoLevelCost& cost() const { return cost_; }
  const SimOptions& options() const { return options_; }
  // Every simulated pipe's slot: as a communicator's (transport_options.h slotBytesFor).
  size_t slotBytes() const { return slotBytes_; }
  // GYRE_ALGO for the calls that follow (kAuto: the cost model's pick).
  void setAlgo(AllReduceAlgo algo) { options_.gyre.algo = algo; }
  // The algo gyre puts in this call's tag here (auto's pick or GYRE_ALGO's).
  uint8_t algorithmFor(const CollectiveCall& call) const;
  // Runs `call` on every rank (its algo set by algorithmFor unless `keepAlgo`).
  SimResult run(CollectiveCall call, const BufferFn& buffers, bool keepAlgo = false);
  // One call that starts when the previous one's last rank finished, on the links as it
  // left them (fresh: on idle links with full buckets instead), with no calls before it:
  // for sequences of different calls, as gyre-bench --compare-algos runs them.
  SimResult runNext(CollectiveCall call, const BufferFn& buffers, bool fresh = false);
  // Runs body(rank, ctx, pipes) on every rank instead of a collective: for schedules
  // outside the table (tests of a deliberately wrong order).
  using RankBody =
      std::function<void(int rank, const PrimitiveContext& ctx, const PeerPipes& pipes)>;
  // after: start when the previous run's last rank finished, with the links as it left
  // them (else every rank starts at 0 on idle links).
  SimResult runBodies(const RankBody& body, bool after = false);

 private:
  SimResult runCall(const CollectiveCall& call, const BufferFn& buffers, bool after);
  void connect(int from, int to);
  void connectRing(const std::vector<int>& order);

  SimOptions options_;
  int size_;
  HostTopology topology_;
  const size_t slotBytes_;  // after topology_: derived from it
  TwoLevelCost cost_;
  VirtualScheduler scheduler_;
  LinkTimes links_;
  SimCounters counters_;
  std::map<std::pair<int, int>, std::unique_ptr<SimChannel>> channels_;
  std::vector<PeerPipes> pipes_;
  std::vector<PrimitiveContext> ctx_;  // each rank's base context for the schedules
  std::atomic<bool> aborted_{false};
  uint32_t seq_ = 0;
};

// An address range of `bytes` that is reserved and never readable or writable, for the
// buffers of payload-free runs: any access by mistake faults at once.
class NoPayloadBuffers {
 public:
  explicit NoPayloadBuffers(size_t bytes);
  ~NoPayloadBuffers();
  NoPayloadBuffers(const NoPayloadBuffers&) = delete;
  NoPayloadBuffers& operator=(const NoPayloadBuffers&) = delete;
  const void* send() const { return base_; }
  void* recv() const { return static_cast<std::byte*>(base_) + half_; }

 private:
  void* base_ = nullptr;
  size_t half_ = 0;
  size_t mapped_ = 0;
};

}  // namespace gyre::sim
