#include "sim/sim_world.h"

#include <algorithm>

#include <sys/mman.h>

#include <string>

#include "base/error.h"
#include "collectives/collective_table.h"
#include "collectives/eager_peers.h"

namespace gyre::sim {

namespace {

HostTopology topologyOf(const NetworkModel& model) {
  std::vector<std::string> ids;
  for (int h = 0; h < model.hosts(); ++h) {
    ids.insert(ids.end(), static_cast<size_t>(model.hostSizes[static_cast<size_t>(h)]),
               "host" + std::to_string(h));
  }
  return HostTopology::fromHostIds(ids);
}

}  // namespace

SimWorld::SimWorld(const SimOptions& options)
    : options_(options),
      size_(options.network.ranks()),
      topology_(topologyOf(options.network)),
      // Hosts meet over tcp in the model (gyre-sim was checked against tcp links), a
      // host's ranks over shm: with one rank a host every pipe is tcp, as a communicator's.
      slotBytes_(slotBytesFor(options.gyre, topology_.hostCount() == size_)),
      scheduler_(size_),
      links_(options.network) {
  if (size_ < 2) fail(ErrorCode::kInvalidArgument, "sim: {} ranks; at least 2", size_);
  if (options.gyre.slots < 2 || options.gyre.smallestSlotBytes() < 64) {
    fail(ErrorCode::kInvalidArgument, "sim: pipes need at least 2 slots of 64 bytes");
  }
  // As a communicator: the shm table inside hosts; across hosts what the probe measures.
  cost_ = topology_.hostCount() >= 2
              ? twoLevelCost(true, options.network.probeAlphaUs(),
                             options.network.probeBytesPerUs(), options.gyre.nicsPerHost)
              : twoLevelCost(true, options.gyre.nicsPerHost);
  pipes_.resize(static_cast<size_t>(size_));
  if (size_ <= options.allPairsMaxRanks) {
    for (int a = 0; a < size_; ++a) {
      for (int b = 0; b < size_; ++b) {
        if (a != b) connect(a, b);
      }
    }
  } else {
    for (int r = 0; r < size_; ++r) {
      for (int p : schedulePeers(r, topology_, true)) connect(r, p);
    }
  }
  ctx_.resize(static_cast<size_t>(size_));
  for (int r = 0; r < size_; ++r) {
    PrimitiveContext& c = ctx_[static_cast<size_t>(r)];
    c.left = pipes_[static_cast<size_t>(r)].recv.at((r + size_ - 1) % size_);
    c.right = pipes_[static_cast<size_t>(r)].send.at((r + 1) % size_);
    c.timeout = std::chrono::hours(1);  // virtual waits never time out; a deadlock is found
    c.spin = std::chrono::microseconds(0);
    c.aborted = &aborted_;
    c.rank = r;
    c.moveBytes = options.payload;
  }
}

SimWorld::~SimWorld() = default;

void SimWorld::connect(int from, int to) {
  auto key = std::make_pair(from, to);
  if (channels_.count(key)) return;
  auto channel = std::make_unique<SimChannel>(scheduler_, links_, from, to, options_.gyre.slots,
                                              slotBytes_, options_.payload, counters_);
  pipes_[static_cast<size_t>(from)].send[to] = &channel->sendEnd();
  pipes_[static_cast<size_t>(to)].recv[from] = &channel->recvEnd();
  channels_.emplace(key, std::move(channel));
}

void SimWorld::connectRing(const std::vector<int>& order) {
  const size_t g = order.size();
  for (size_t i = 0; i < g && g >= 2; ++i) {
    connect(order[i], order[(i + 1) % g]);
    connect(order[(i + 1) % g], order[i]);
  }
}

uint8_t SimWorld::algorithmFor(const CollectiveCall& call) const {
  return callAlgorithm(options_.gyre, call, topology_, topology_.hostCount() == 1, cost_);
}

SimResult SimWorld::runCall(const CollectiveCall& call, const BufferFn& buffers, bool after) {
  const bool rootedCall =
      call.kind == CollectiveKind::kBroadcast || call.kind == CollectiveKind::kReduce;
  if (rootedCall && call.root >= 0 && call.root < size_) {
    connectRing(topology_.hostOrderFrom(call.root));  // the two-level chain
  }
  SimResult result = runBodies(
      [&](int r, const PrimitiveContext& ctx, const PeerPipes& pipes) {
        auto [send, recv] = buffers(r);
        runSchedule(ScheduleArgs{ctx, pipes, topology_, r, size_, call, send, recv});
      },
      after);
  result.algo = call.algo;
  return result;
}

SimResult SimWorld::run(CollectiveCall call, const BufferFn& buffers, bool keepAlgo) {
  call.seq = seq_++;
  if (!keepAlgo) call.algo = algorithmFor(call);
  SimResult result = runCall(call, buffers, /*after=*/false);
  if (options_.network.linkBurstBytes > 0) {
    // Shaped links: time the call that follows identical ones, as gyre-bench times
    // back-to-back ops, so the token buckets hold what is left after them, not full.
    for (int k = 0; k < std::max(1, options_.callsBefore); ++k) {
      call.seq = seq_++;
      result = runCall(call, buffers, /*after=*/true);
    }
  }
  return result;
}

SimResult SimWorld::runNext(CollectiveCall call, const BufferFn& buffers, bool fresh) {
  call.seq = seq_++;
  call.algo = algorithmFor(call);
  return runCall(call, buffers, /*after=*/!fresh);
}

SimResult SimWorld::runBodies(const RankBody& body, bool after) {
  const double start = after ? scheduler_.latest() : 0.0;
  scheduler_.resetClocks(start);
  if (!after) links_.reset();
  for (auto& [key, channel] : channels_) channel->reset(start);
  counters_ = SimCounters{};
  scheduler_.run(
      [&](int r) { body(r, ctx_[static_cast<size_t>(r)], pipes_[static_cast<size_t>(r)]); });
  return SimResult{scheduler_.latest() - start, 0, counters_};
}

NoPayloadBuffers::NoPayloadBuffers(size_t bytes) {
  constexpr size_t kPage = 4096;
  half_ = (bytes + 64 * 8 + kPage - 1) / kPage * kPage;
  mapped_ = 2 * half_;
  base_ = ::mmap(nullptr, mapped_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base_ == MAP_FAILED) {
    base_ = nullptr;
    fail(ErrorCode::kSystemError, "sim: cannot reserve {} bytes of address space", mapped_);
  }
}

NoPayloadBuffers::~NoPayloadBuffers() {
  if (base_) ::munmap(base_, mapped_);
}

}  // namespace gyre::sim
