#include "ring/communicator_impl.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "base/cpu_binding.h"
#include "base/error.h"
#include "base/log.h"
#include "base/timeline.h"
#include "base/version.h"
#include "collectives/algorithm_choice.h"
#include "collectives/eager_peers.h"
#include "collectives/point_to_point.h"
#include "collectives/topology_choice.h"
#include "base/secret.h"
#include "ring/host_link_calibration.h"
#include "ring/join.h"
#include "ring/signed_store.h"
#include "ring/trace_signal.h"
#include "host_kernels/reduce.h"

// Communicator::Impl's bodies: connecting, running operations (each through its row of
// collectives/collective_table.h), naming failures and aborting. Split, shrink and grow
// are in ring/communicator_membership.cc.
namespace gyre {
namespace {

// GYRE_BIND=core: the process's first communicator made with it places the process
// (base/cpu_binding.h). A later one (a subgroup, a shrunk or grown group) counts its
// host's ranks differently and must not move it.
void bindToCoreOnce(const HostTopology& topology, int rank) {
  static std::atomic<bool> done{false};
  if (done.exchange(true)) return;
  const int localRank = topology.localIndexOf[rank];
  const int localSize = static_cast<int>(topology.hosts[topology.hostOf[rank]].size());
  int cpu = 0;
  std::string error;
  if (!chooseCpu(localRank, localSize, cpu, error) || !bindProcessToCpu(cpu, error)) {
    log(LogLevel::kWarn, rank, "GYRE_BIND=core: this process stays where it was: {}", error);
    return;
  }
  log(LogLevel::kInfo, rank, "GYRE_BIND=core: local rank {} of {} bound to CPU {}", localRank,
      localSize, cpu);
}

// A job without a secret whose ranks span hosts is open to the network between them
// (docs/security.md); a job on one host, normally on loopback, gets only noteOpenJob's
// INFO line (base/secret.h). Said once per process, at its first communicator that spans
// hosts, and only where this process is that communicator's rank 0: a job's first
// communicator is normally its world, so the job says it once, not again at every split.
void warnOpenAcrossHostsOnce(const HostTopology& topology, int rank) {
  static std::atomic<bool> decided{false};
  if (topology.hostCount() < 2 || decided.exchange(true) || rank != 0) return;
  log(LogLevel::kWarn, rank,
      "the job's ranks span {} hosts and no secret is set (GYRE_TOKEN or GYRE_TOKEN_FILE): "
      "anyone who can reach its store or its ranks' ports can read and rewrite the store and "
      "join the job's connections; give every rank the same secret (docs/security.md)",
      topology.hostCount());
}

}  // namespace

Communicator::Impl::Impl(std::shared_ptr<Store> store, int rank, int size,
                         const Options& options, const std::string& listenHost,
                         const std::string& prefix, const std::map<int, std::string>& goneKeys)
    : options_(options),
      rank_(rank),
      size_(size),
      store_(std::move(store)),
      listenHost_(listenHost),
      inspector_(rank, size, options.stallWarn, options.timeout) {
  if (options_.slots < 2 || options_.smallestSlotBytes() < 64) {
    // The schedules keep up to two slices in flight on one pipe (ring, tree).
    fail(ErrorCode::kInvalidArgument,
         "rank {}: pipes need at least 2 slots of 64 bytes (slots {}, slot bytes {})", rank_,
         options_.slots, options_.smallestSlotBytes());
  }
  if (options_.traceBuffer > 0 && !options_.traceDir.empty()) {
    // Now, not at the first failure: the dump is what a failure needs to be understood.
    std::error_code ec;
    std::filesystem::create_directories(options_.traceDir, ec);
    if (!std::filesystem::is_directory(options_.traceDir)) {
      fail(ErrorCode::kInvalidArgument, "rank {}: GYRE_TRACE_DIR={} is not a directory and "
           "cannot be made one{}", rank_, options_.traceDir, ec ? ": " + ec.message() : "");
    }
  }
  Join join(*store_, rank_, size_, options_);
  if (prefix.empty()) {
    try {
      prefix_ = join.claimPrefix();
    } catch (const Error& e) {
      if (e.cause() == ErrorCause::kStoreLost) throw join.explainStoreLoss(e);
      throw;
    }
  } else {
    prefix_ = prefix;
    join.usePrefix(prefix_);
  }
  for (const auto& [r, key] : goneKeys) join.watchForGone(r, key);
  try {
    try {
      activeReduceIsa();  // GYRE_REDUCE_ISA against this CPU: at creation, not at the first sum
    } catch (const Error& e) {
      fail(e.code(), "rank {}: {}", rank_, e.what());
    }
    // With a secret, what this communicator publishes is signed and what it reads must
    // be (ring/signed_store.h): the store may be open to anyone (torch's).
    std::shared_ptr<Store> comm = prefixedStore(store_, prefix_, options_.token);
    if (options_.token.empty() && rank_ == 0) noteOpenJob(describeStore(*store_));
    comm->setTimeout(options_.timeout);
    // Rank 0's random job token (public: never the secret) is there before rank 0
    // checks in; without a secret the others read it for their names (ring/bootstrap).
    if (rank_ == 0) comm->setString("token", communicator_detail::randomToken());
    BootstrapParams params;
    params.rank = rank_;
    params.size = size_;
    params.token = options_.token;
    params.listenHost = listenHost;
    if (options_.connect == ConnectMode::kEager || size_ < 2) {
      // Every other rank: n - 1 pipe pairs per rank.
      for (int p = 0; p < size_; ++p) {
        if (p == rank_) continue;
        params.sendTo.push_back(p);
        params.recvFrom.push_back(p);
      }
    } else {
      // The default schedules' peers, once the hosts are known; the rest on first use.
      const bool rd = options_.algo == AllReduceAlgo::kAuto ||
                      options_.algo == AllReduceAlgo::kRecursiveDoubling;
      params.choosePeers = [r = rank_, rd](const std::vector<std::string>& hostIds) {
        return eagerPeers(r, HostTopology::fromHostIds(hostIds), rd);
      };
      params.keepListener = true;
    }
    pipes_ = connectPeers(*comm, join, params, options_);
    finishCreation(join);
  } catch (const Error& e) {
    join.publishFailure(e);
    if (e.cause() == ErrorCause::kStoreLost) {
      const Error told = join.explainStoreLoss(e);
      tellPeersCreationFailed(told);
      throw told;
    }
    tellPeersCreationFailed(e);
    throw;
  }
  log(LogLevel::kInfo, rank_, "gyre {} (commit {}): communicator of {} ranks ready ({})",
      version(), versionCommit(), size_, topology_.describe());
}

// A rank that fails late in creation (its store gone while others have already gone
// on to their first collective) tells them why on its pipes, so that they name the
// cause, not only "rank r closed its pipe". Where this rank is not the cause (the store,
// another rank's failure) the culprit is left unknown.
void Communicator::Impl::tellPeersCreationFailed(const Error& e) {
  Failure f;
  f.code = e.code();
  f.reporter = rank_;
  f.culprit = e.cause() == ErrorCause::kUnspecified ? rank_ : -1;
  f.detail = e.what();
  const PeerStatus notice = abortNotice(f, rank_, 0);
  for (auto& [peer, pipe] : pipes_.send) pipe->publish(notice);
  for (auto& [peer, pipe] : pipes_.recv) pipe->publish(notice);
}

// After the pipes: the queue's context, the recorder, the topology and the link probe;
// then the join's last two barriers, so that creation ends together. "done": every rank
// has finished creating (a failure before it fails every rank); "left": every rank has
// seen that and makes no more store calls for creation. Rank 0's process may be the one
// serving the store: it returns (and may exit, taking the store with it) only after
// every other rank's last store call, or its death (a rank killed after "done" is the
// next collective's error, naming it, not a wait of GYRE_JOIN_TIMEOUT).
void Communicator::Impl::finishCreation(Join& join) {
  for (auto& [peer, pipe] : pipes_.send) peerPipes_.send[peer] = pipe.get();
  for (auto& [peer, pipe] : pipes_.recv) peerPipes_.recv[peer] = pipe.get();
  if (pipes_.listener) {
    lazy_ = std::make_unique<LazyConnector>(pipes_, options_, listenHost_, &aborted_);
    // Executing thread: a schedule's first use of a pair connects it, both pipes.
    peerPipes_.connect = [this](int peer) {
      inspector_.at(peer);  // a failure to connect names this peer as its culprit
      // Formatted only here: naming the operation costs the per-call path nothing.
      auto [send, recv] = lazy_->ensure(
          peer, connectForProbe_ ? std::string("the host link probe") : describe(connectFor_));
      peerPipes_.send[peer] = send;
      peerPipes_.recv[peer] = recv;
      inspector_.attachMore(send, recv);
    };
  }
  if (size_ > 1) {
    ctx_.left = pipes_.recv.at((rank_ + size_ - 1) % size_).get();
    ctx_.right = pipes_.send.at((rank_ + 1) % size_).get();
  }
  std::vector<SendPipe*> send;
  std::vector<RecvPipe*> recv;
  for (auto& [peer, pipe] : pipes_.send) send.push_back(pipe.get());
  for (auto& [peer, pipe] : pipes_.recv) recv.push_back(pipe.get());
  inspector_.attach(std::move(send), std::move(recv));
  ctx_.timeout = options_.timeout;
  ctx_.spin = options_.spin;
  ctx_.aborted = &aborted_;
  ctx_.rank = rank_;
  ctx_.inspector = &inspector_;
  recorder_ = std::make_unique<FlightRecorder>(options_.traceBuffer, rank_, size_, prefix_);
  if (Timeline* timeline = Timeline::active()) timeline->bindRank(rank_);  // the first wins
  inspector_.record(recorder_.get(), options_.traceDir);
  if (recorder_->enabled() && !options_.traceDir.empty()) {
    watchForDumpSignal(recorder_.get(), options_.traceDir);
  }
  topology_ = HostTopology::fromHostIds(pipes_.hostIds);
  if (options_.token.empty()) warnOpenAcrossHostsOnce(topology_, rank_);
  if (options_.bind == CpuBinding::kCore) bindToCoreOnce(topology_, rank_);
  if (options_.algo == AllReduceAlgo::kHierarchical && !topology_.hierarchical()) {
    log(LogLevel::kInfo, rank_, "GYRE_ALGO=hier: {}, running the flat ring instead",
        topology_.whyFlat());
  }
  connectForProbe_ = true;
  cost_ = calibrateHostLinks(*prefixedStore(store_, prefix_, options_.token), ctx_, peerPipes_,
                             topology_, rank_, options_, pipes_.allShm,
                             options_.transport != TransportKind::kTcp,
                             [&] { join.checkAlarms(); });
  connectForProbe_ = false;
  join.arrive("done", "finishing creation");
  join.waitAll("done", "finishing creation");
  join.leave();
}

AllReduceAlgo Communicator::Impl::chooseAlgorithm(size_t bytes) const {
  return chooseForTopology(options_, bytes, topology_, pipes_.allShm, cost_);
}

Communicator::Impl::~Impl() {
  queue_.reset();  // finishes what was issued, before the pipes close
  if (recorder_) unwatchForDumpSignal(recorder_.get());
  if (Timeline* timeline = Timeline::active()) timeline->flush();
  if (!aborted_.load()) {
    // Let the last slices reach the neighbours before the sockets close.
    try {
      auto bound = std::min<Clock::duration>(std::chrono::seconds(5), options_.timeout);
      WaitContext w{Clock::now() + bound, &aborted_, options_.spin};
      for (auto& [peer, pipe] : pipes_.send) pipe->flush(w);
      if (lazy_) lazy_->forEach([&](SendPipe* p) { p->flush(w); }, [](RecvPipe*) {});
    } catch (const Error& e) {
      log(LogLevel::kWarn, rank_, "closing: {}", e.what());
    }
  }
}

void Communicator::Impl::run(CollectiveCall call, const void* sendbuf, void* recvbuf,
                             uint64_t record, const PeerBlocks* blocks) {
  if (aborted_.load()) {
    recorder_->refused(record, seq_.load());
    failAborted(call, seq_.load());
  }
  call.seq = seq_.fetch_add(1);
  // In the tag: ranks that chose differently fail with a mismatch.
  if (size_ > 1) call.algo = callAlgorithm(options_, call, topology_, pipes_.allShm, cost_);
  execute(call, record, [&] {
    if (size_ == 1) return runSingle(call, sendbuf, recvbuf, blocks);
    connectFor_ = call;
    if (lazy_ && (call.kind == CollectiveKind::kAllToAll || call.kind == CollectiveKind::kAllToAllv)) {
      // Every pair before a byte moves, rank + 1 first: in each step the ranks dial distinct
      // peers, where ascending order would queue every rank at rank 0's acceptor.
      for (int k = 1; k < size_; ++k) {
        int p = (rank_ + k) % size_;
        if (!peerPipes_.send.count(p)) peerPipes_.connect(p);
      }
    }
    runSchedule(
        ScheduleArgs{ctx_, peerPipes_, topology_, rank_, size_, call, sendbuf, recvbuf, blocks});
  });
}

void Communicator::Impl::runSend(CollectiveCall call, int peer, const void* buf,
                                 uint64_t record) {
  if (aborted_.load()) {
    recorder_->refused(record, sendSeq_[peer]);
    failAborted(call, sendSeq_[peer]);
  }
  call.seq = sendSeq_[peer]++;
  call.root = rank_;
  execute(call, record, [&] {
    connectFor_ = call;
    sendTo(ctx_, peerPipes_, call, peer, buf);
  });
}

void Communicator::Impl::runRecv(CollectiveCall call, int peer, void* buf, uint64_t record) {
  if (aborted_.load()) {
    recorder_->refused(record, recvSeq_[peer]);
    failAborted(call, recvSeq_[peer]);
  }
  call.seq = recvSeq_[peer]++;
  call.root = peer;
  execute(call, record, [&] {
    connectFor_ = call;
    recvFrom(ctx_, peerPipes_, call, peer, buf);
  });
}

void Communicator::Impl::runSendRecv(CollectiveCall send, int sendPeer, const void* sendbuf,
                                     CollectiveCall recv, int recvPeer, void* recvbuf,
                                     uint64_t record) {
  if (aborted_.load()) {
    recorder_->refused(record, sendSeq_[sendPeer]);
    failAborted(send, sendSeq_[sendPeer]);
  }
  send.seq = sendSeq_[sendPeer]++;
  send.root = rank_;
  recv.seq = recvSeq_[recvPeer]++;
  recv.root = recvPeer;
  execute(send, record, [&] {
    connectFor_ = send;
    gyre::sendRecv(ctx_, peerPipes_, send, sendPeer, sendbuf, recv, recvPeer, recvbuf);
  });
}

void Communicator::Impl::failAborted(CollectiveCall call, uint32_t seq) {
  call.seq = seq;
  std::lock_guard<std::mutex> lock(abortMu_);
  failWith(ErrorCode::kAborted, abortCause(), "rank {}: {} called on an {} communicator{}", rank_,
           describe(call), revoked_.load() ? "revoked" : "aborted",
           firstError_.empty() ? "" : " (after: " + firstError_ + ")");
}

template <typename Body>
void Communicator::Impl::execute(const CollectiveCall& call, uint64_t record, Body&& body) {
  recorder_->started(record, call);
  inspector_.begin(call);
  try {
    body();
    inspector_.end();
    recorder_->finished(record, true, inspector_.bytesSent(), inspector_.bytesReceived());
  } catch (const Error& e) {
    recorder_->finished(record, false, inspector_.bytesSent(), inspector_.bytesReceived());
    failCollective(call, e);
  } catch (const std::exception& e) {
    // Not gyre's own (bad_alloc, say), yet the pipes must still be closed before return.
    recorder_->finished(record, false, inspector_.bytesSent(), inspector_.bytesReceived());
    failCollective(call, Error(ErrorCode::kInternal, e.what()));
  }
}

void Communicator::Impl::nameNextCall(std::string_view name) {
  nextNameSize_ = std::min(name.size(), nextName_.size());
  for (size_t i = 0; i < nextNameSize_; ++i) {
    const char c = name[i];
    nextName_[i] = (c >= 0x20 && c < 0x7f) ? c : '?';
  }
}

std::string Communicator::Impl::dumpTrace(const std::string& dir) {
  if (!recorder_->enabled()) {
    fail(ErrorCode::kInvalidArgument, "rank {}: dumpTrace: the flight recorder is off "
         "(GYRE_TRACE_BUFFER=0)", rank_);
  }
  const std::string where = dir.empty() ? options_.traceDir : dir;
  if (where.empty()) {
    fail(ErrorCode::kInvalidArgument,
         "rank {}: dumpTrace: no directory: pass one or set GYRE_TRACE_DIR", rank_);
  }
  return recorder_->dumpTo(where, "dumpTrace()", "");
}

void Communicator::Impl::failCollective(const CollectiveCall& call, const Error& e) {
  std::string localAbort;
  {
    std::lock_guard<std::mutex> lock(abortMu_);
    localAbort = localAbortReason_;
  }
  Failure failure = classifyFailure(e, rank_, inspector_, localAbort);
  if (failure.culprit >= 0 && failure.culprit != rank_) {
    int none = -1;
    failedRank_.compare_exchange_strong(none, failure.culprit);
  }
  std::string message = failureMessage(rank_, call, inspector_.bytesSent(),
                                       inspector_.bytesReceived(), failure);
  log(LogLevel::kError, rank_, "{}", message);
  // Before returning: the pipes may still send from the caller's buffers.
  abortAll(abortNotice(failure, rank_, call.seq), message);
  // The first failure only: later calls on the aborted communicator add nothing.
  if (recorder_->enabled() && !options_.traceDir.empty() && !dumpedFailure_.exchange(true)) {
    try {
      const std::string path = recorder_->dumpTo(options_.traceDir, "failure", message);
      log(LogLevel::kWarn, rank_, "flight recorder dumped to {}", path);
    } catch (const Error& dumpError) {
      log(LogLevel::kWarn, rank_, "{}", dumpError.what());
    }
  }
  throw Error(failure.code, message, abortCause());
}

void Communicator::Impl::abortAll(const PeerStatus& notice, const std::string& message) {
  std::lock_guard<std::mutex> lock(abortMu_);
  if (firstError_.empty()) firstError_ = message;
  aborted_.store(true);
  if (pipesClosed_) return;
  pipesClosed_ = true;
  // Forward first: the data direction is where every waiting rank listens.
  for (auto& [peer, pipe] : pipes_.send) pipe->publish(notice);
  for (auto& [peer, pipe] : pipes_.recv) pipe->publish(notice);
  if (lazy_) {
    lazy_->abort(notice);
    lazy_->forEach([&](SendPipe* p) { p->publish(notice); },
                   [&](RecvPipe* p) { p->publish(notice); });
  }
}

void Communicator::Impl::abortFromUser(bool revoke) {
  std::string reason = fmt::format("{}() was called on rank {}", revoke ? "revoke" : "abort", rank_);
  if (revoke) revoked_.store(true);
  {
    std::lock_guard<std::mutex> lock(abortMu_);
    if (!localAbortReason_.empty()) return;
    localAbortReason_ = reason;
  }
  // revoke() is how survivors stop a parent they go on without: part of a recovery.
  log(revoke ? LogLevel::kInfo : LogLevel::kWarn, rank_, "{}", reason);
  Failure failure;
  failure.code = ErrorCode::kAborted;
  failure.culprit = rank_;
  failure.reporter = rank_;
  failure.detail = reason;
  abortAll(abortNotice(failure, rank_, seq_.load()), reason);
}

// One rank: every collective is a local copy of one share (avg of one value included).
void Communicator::Impl::runSingle(const CollectiveCall& call, const void* sendbuf, void* recvbuf,
                                   const PeerBlocks* blocks) {
  const CollectiveRow& row = collectiveRow(call.kind);
  const size_t bytes = call.count * dtypeSize(call.dtype);
  if (bytes == 0 || recvbuf == nullptr) return;
  if (blocks) {  // alltoallv: the one block, from its send offset to its receive offset
    const size_t elem = dtypeSize(call.dtype);
    return copy2(static_cast<std::byte*>(recvbuf) + blocks->recvDispls[0] * elem, nullptr,
                 static_cast<const std::byte*>(sendbuf) + blocks->sendDispls[0] * elem, bytes);
  }
  if (row.shape == BufferShape::kNone || row.shape == BufferShape::kOneBuffer) return;
  if (row.reduces && call.op == ReduceOp::kAvg) {
    scaleCopy(recvbuf, nullptr, sendbuf, call.count, call.dtype, 1);
  } else if (sendbuf != recvbuf) {
    copy2(recvbuf, nullptr, sendbuf, bytes);
  }
}

}  // namespace gyre
