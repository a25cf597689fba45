// Communicator::Impl: a communicator's state and how it runs operations (internal to
// ring/communicator*.cc; users include ring/communicator.h).
//
// Contract: one Impl per Communicator. It owns the pipes to every other rank (a full mesh,
// from ring/bootstrap), the operation queue (ring/op_queue: issue order, inline when idle),
// the sequence numbers (collectives: one per communicator; send/recv: one per ordered pair),
// the stall inspector and the abort state. run()/runSend()/runRecv()/runSendRecv() execute
// one operation on the calling thread (the queue's); failures are named, the communicator is
// aborted and its peers told (failCollective). abort() may come from any other thread: what
// both touch is atomic or under abortMu_. The public entry points (ring/communicator_calls.cc)
// validate arguments on the issuing thread, then hand a closure to issue().
#pragma once

#include <atomic>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/log.h"
#include "collectives/algorithm_choice.h"
#include "collectives/all_gather.h"
#include "collectives/all_to_all.h"
#include "ring/bootstrap.h"
#include "ring/join.h"
#include "collectives/collective.h"
#include "ring/communicator.h"
#include "ring/failure_propagation.h"
#include "ring/op_queue.h"
#include "collectives/point_to_point.h"
#include "collectives/recursive_doubling.h"
#include "host_kernels/reduce.h"
#include "collectives/reduce_scatter.h"
#include "collectives/ring_allreduce.h"
#include "collectives/ring_broadcast.h"
#include "collectives/ring_reduce.h"
#include "collectives/stall_inspector.h"
#include "store/store.h"
#include "collectives/tree_allreduce.h"

namespace gyre {
namespace communicator_detail {

std::string randomToken();

}  // namespace communicator_detail

class Communicator::Impl {
 public:
  // prefix: the store keys of this communicator ("" = the next top-level one).
  Impl(std::shared_ptr<Store> store, int rank, int size, const Options& options,
       const std::string& listenHost, const std::string& prefix = "")
      : options_(options),
        rank_(rank),
        size_(size),
        store_(std::move(store)),
        listenHost_(listenHost),
        inspector_(rank, size, options.stallWarn, options.timeout) {
    if (options_.slots < 2 || options_.slotBytes < 64) {
      // The schedules keep up to two slices in flight on one pipe (ring, tree).
      fail(ErrorCode::kInvalidArgument,
           "rank {}: pipes need at least 2 slots of 64 bytes (slots {}, slot bytes {})", rank_,
           options_.slots, options_.slotBytes);
    }
    Join join(*store_, rank_, size_, options_);
    if (prefix.empty()) {
      prefix_ = join.claimPrefix();
    } else {
      prefix_ = prefix;
      join.usePrefix(prefix_);
    }
    try {
      try {
        activeReduceIsa();  // GYRE_REDUCE_ISA against this CPU: at creation, not at the first sum
      } catch (const Error& e) {
        fail(e.code(), "rank {}: {}", rank_, e.what());
      }
      auto comm = std::make_shared<PrefixStore>(prefix_, store_);
      comm->setTimeout(options_.timeout);
      // Rank 0's token (GYRE_TOKEN, or one it makes) is there before rank 0 checks in;
      // the others read it once the join is complete (ring/bootstrap).
      if (rank_ == 0) {
        comm->setString("token", options_.token.empty() ? communicator_detail::randomToken()
                                                        : options_.token);
      }
      BootstrapParams params;
      params.rank = rank_;
      params.size = size_;
      params.token = options_.token;
      params.listenHost = listenHost;
      // Every other rank: the ring's and trees' neighbours, the partners of recursive
      // doubling, and of send/recv and all-to-all. (n-1 pipe pairs per rank; for very
      // large groups these should be connected on first use instead.)
      for (int p = 0; p < size_; ++p) {
        if (p == rank_) continue;
        params.sendTo.push_back(p);
        params.recvFrom.push_back(p);
      }
      pipes_ = connectPeers(*comm, join, params, options_);
    } catch (const Error& e) {
      join.publishFailure(e);
      throw;
    }
    for (auto& [peer, pipe] : pipes_.send) peerPipes_.send[peer] = pipe.get();
    for (auto& [peer, pipe] : pipes_.recv) peerPipes_.recv[peer] = pipe.get();
    if (size_ > 1) {
      ring_.left = pipes_.recv.at((rank_ + size_ - 1) % size_).get();
      ring_.right = pipes_.send.at((rank_ + 1) % size_).get();
    }
    std::vector<SendPipe*> send;
    std::vector<RecvPipe*> recv;
    for (auto& [peer, pipe] : pipes_.send) send.push_back(pipe.get());
    for (auto& [peer, pipe] : pipes_.recv) recv.push_back(pipe.get());
    inspector_.attach(std::move(send), std::move(recv));
    ring_.timeout = options_.timeout;
    ring_.spin = options_.spin;
    ring_.aborted = &aborted_;
    ring_.rank = rank_;
    ring_.inspector = &inspector_;
    log(LogLevel::kInfo, rank_, "communicator of {} ranks ready", size_);
  }

  ~Impl() {
    queue_.reset();  // finishes what was issued, before the pipes close
    if (!aborted_.load()) {
      // Let the last slices reach the neighbours before the sockets close.
      try {
        auto bound = std::min<Clock::duration>(std::chrono::seconds(5), options_.timeout);
        WaitContext w{Clock::now() + bound, &aborted_, options_.spin};
        for (auto& [peer, pipe] : pipes_.send) pipe->flush(w);
      } catch (const Error& e) {
        log(LogLevel::kWarn, rank_, "closing: {}", e.what());
      }
    }
  }

  void run(CollectiveCall call, const void* sendbuf, void* recvbuf) {
    if (aborted_.load()) failAborted(call, seq_.load());
    call.seq = seq_.fetch_add(1);
    if (size_ > 1 && (call.kind == CollectiveKind::kAllReduce ||
                      call.kind == CollectiveKind::kBarrier)) {
      // In the tag: ranks that chose differently fail with a mismatch.
      const size_t bytes = call.count * dtypeSize(call.dtype);
      call.algo = static_cast<uint8_t>(
          static_cast<int>(chooseAllReduce(options_, bytes, size_, pipes_.allShm)) + 1);
    }
    execute(call, [&] { dispatch(call, sendbuf, recvbuf); });
  }

  // Point to point: numbered per ordered pair of ranks, not on the communicator's sequence.
  void runSend(CollectiveCall call, int peer, const void* buf) {
    if (aborted_.load()) failAborted(call, sendSeq_[peer]);
    call.seq = sendSeq_[peer]++;
    call.root = rank_;
    execute(call, [&] { sendTo(ring_, peerPipes_, call, peer, buf); });
  }

  void runRecv(CollectiveCall call, int peer, void* buf) {
    if (aborted_.load()) failAborted(call, recvSeq_[peer]);
    call.seq = recvSeq_[peer]++;
    call.root = peer;
    execute(call, [&] { recvFrom(ring_, peerPipes_, call, peer, buf); });
  }

  void runSendRecv(CollectiveCall send, int sendPeer, const void* sendbuf, CollectiveCall recv,
                   int recvPeer, void* recvbuf) {
    if (aborted_.load()) failAborted(send, sendSeq_[sendPeer]);
    send.seq = sendSeq_[sendPeer]++;
    send.root = rank_;
    recv.seq = recvSeq_[recvPeer]++;
    recv.root = recvPeer;
    execute(send, [&] {
      gyre::sendRecv(ring_, peerPipes_, send, sendPeer, sendbuf, recv, recvPeer, recvbuf);
    });
  }

  [[noreturn]] void failAborted(CollectiveCall call, uint32_t seq) {
    call.seq = seq;
    std::lock_guard<std::mutex> lock(abortMu_);
    fail(ErrorCode::kAborted, "rank {}: {} called on an aborted communicator{}", rank_,
         describe(call), firstError_.empty() ? "" : " (after: " + firstError_ + ")");
  }

  template <typename Body>
  void execute(const CollectiveCall& call, Body&& body) {
    inspector_.begin(call);
    try {
      body();
      inspector_.end();
    } catch (const Error& e) {
      failCollective(call, e);
    } catch (const std::exception& e) {
      // Not gyre's own (bad_alloc, say), yet the pipes must still be closed before return.
      failCollective(call, Error(ErrorCode::kInternal, e.what()));
    }
  }

  void dispatch(const CollectiveCall& call, const void* sendbuf, void* recvbuf) {
    if (size_ == 1) return runSingle(call, sendbuf, recvbuf);
    switch (call.kind) {
      case CollectiveKind::kAllReduce:
      case CollectiveKind::kBarrier:
        switch (static_cast<AllReduceAlgo>(call.algo - 1)) {
          case AllReduceAlgo::kRecursiveDoubling:
            return recursiveDoublingAllReduce(ring_, peerPipes_, rank_, size_, call, sendbuf,
                                              recvbuf);
          case AllReduceAlgo::kTree:
            return treeAllReduce(ring_, peerPipes_, rank_, size_, call, sendbuf, recvbuf);
          case AllReduceAlgo::kRing:
            return ringAllReduce(ring_, rank_, size_, call, sendbuf, recvbuf);
        }
        break;
      case CollectiveKind::kBroadcast: return ringBroadcast(ring_, rank_, size_, call, recvbuf);
      case CollectiveKind::kReduce:
        return ringReduce(ring_, rank_, size_, call, sendbuf, recvbuf);
      case CollectiveKind::kAllGather:
        return ringAllGather(ring_, rank_, size_, call, sendbuf, recvbuf);
      case CollectiveKind::kReduceScatter:
        return ringReduceScatter(ring_, rank_, size_, call, sendbuf, recvbuf);
      case CollectiveKind::kAllToAll:
        return pairwiseAllToAll(ring_, peerPipes_, rank_, size_, call, sendbuf, recvbuf);
      case CollectiveKind::kSendRecv: break;
    }
    fail(ErrorCode::kInternal, "rank {}: {} has no schedule", rank_, describe(call));
  }

  // Names the failure, aborts (telling the neighbours) and throws the named error.
  [[noreturn]] void failCollective(const CollectiveCall& call, const Error& e) {
    std::string localAbort;
    {
      std::lock_guard<std::mutex> lock(abortMu_);
      localAbort = localAbortReason_;
    }
    Failure failure = classifyFailure(e, rank_, inspector_, localAbort);
    std::string message = failureMessage(rank_, call, inspector_.bytesSent(),
                                         inspector_.bytesReceived(), failure);
    log(LogLevel::kError, rank_, "{}", message);
    // Before returning: the pipes may still send from the caller's buffers.
    abortAll(abortNotice(failure, rank_, call.seq), message);
    throw Error(failure.code, message);
  }

  // Aborts: every later call fails, and every neighbour learns why (its pending waits
  // fail at once, naming the culprit). Idempotent; any thread.
  void abortAll(const PeerStatus& notice, const std::string& message) {
    std::lock_guard<std::mutex> lock(abortMu_);
    if (firstError_.empty()) firstError_ = message;
    aborted_.store(true);
    if (pipesClosed_) return;
    pipesClosed_ = true;
    // Forward first: the data direction is where every waiting rank listens.
    for (auto& [peer, pipe] : pipes_.send) pipe->publish(notice);
    for (auto& [peer, pipe] : pipes_.recv) pipe->publish(notice);
  }

  void abortFromUser() {
    std::string reason = fmt::format("abort() was called on rank {}", rank_);
    {
      std::lock_guard<std::mutex> lock(abortMu_);
      if (!localAbortReason_.empty()) return;
      localAbortReason_ = reason;
    }
    log(LogLevel::kWarn, rank_, "{}", reason);
    Failure failure;
    failure.code = ErrorCode::kAborted;
    failure.culprit = rank_;
    failure.reporter = rank_;
    failure.detail = reason;
    abortAll(abortNotice(failure, rank_, seq_.load()), reason);
  }

  // One rank: every collective is a local copy (avg of one value included).
  void runSingle(const CollectiveCall& call, const void* sendbuf, void* recvbuf) {
    const size_t bytes = call.count * dtypeSize(call.dtype);
    if (bytes == 0 || recvbuf == nullptr) return;
    switch (call.kind) {
      case CollectiveKind::kAllReduce:
      case CollectiveKind::kReduce:
      case CollectiveKind::kReduceScatter:
        if (call.op == ReduceOp::kAvg) {
          scaleCopy(recvbuf, nullptr, sendbuf, call.count, call.dtype, 1);
          return;
        }
        break;
      case CollectiveKind::kAllGather:
      case CollectiveKind::kAllToAll: break;
      default: return;  // broadcast, barrier: nothing moves
    }
    if (sendbuf != recvbuf) copy2(recvbuf, nullptr, sendbuf, bytes);
  }

  template <typename F>
  Work issue(bool async, F&& op) {
    if (async) return queue_->submit(OpQueue::Op(std::forward<F>(op)));
    queue_->run(std::forward<F>(op));
    return Work();
  }
  void checkRoot(const char* what, int root) const;
  void checkPeer(const char* what, int peer) const;
  void checkDistinctOrSame(const char* what, const void* sendbuf, const void* recvbuf,
                           size_t count, DataType dtype) const;
  void checkPerRankCount(const char* what, size_t count, DataType dtype) const;
  void checkShares(const char* what, const void* whole, const void* share, size_t count,
                   DataType dtype) const;

  // The new communicator of this rank's color, or null for a negative color. Every rank
  // publishes (color, key) under this communicator's keys, reads everyone's, and joins
  // the ranks of its color (ordered by key, then rank) under a key prefix of its own.
  std::unique_ptr<Impl> split(int color, int key) {
    if (aborted_.load()) {
      std::lock_guard<std::mutex> lock(abortMu_);
      fail(ErrorCode::kAborted, "rank {}: split called on an aborted communicator{}", rank_,
           firstError_.empty() ? "" : " (after: " + firstError_ + ")");
    }
    const int n = splits_++;
    PrefixStore store(fmt::format("{}/split{}", prefix_, n), store_);
    store.setTimeout(options_.timeout);
    store.setString(fmt::format("{}", rank_), fmt::format("{} {}", color, key));
    struct Member {
      int key, rank;
      bool operator<(const Member& o) const { return key != o.key ? key < o.key : rank < o.rank; }
    };
    std::vector<Member> members;
    for (int r = 0; r < size_; ++r) {
      int c = 0;
      int k = 0;
      std::string entry = store.getString(fmt::format("{}", r));
      if (std::sscanf(entry.c_str(), "%d %d", &c, &k) != 2) {
        fail(ErrorCode::kInternal, "rank {}: split: malformed entry '{}' of rank {}", rank_,
             entry, r);
      }
      if (c == color && color >= 0) members.push_back(Member{k, r});
    }
    // Everyone has read every entry before any rank leaves (so a rank that goes on to
    // destroy this communicator cannot take the store with it too early).
    if (store.add("read", 1) == size_) store.setString("all-read", "1");
    store.wait({"all-read"});
    if (color < 0) return nullptr;
    std::sort(members.begin(), members.end());
    int newRank = 0;
    while (members[newRank].rank != rank_) ++newRank;
    log(LogLevel::kInfo, rank_, "split {}: color {} key {} -> rank {} of {}", n, color, key,
        newRank, members.size());
    return std::make_unique<Impl>(store_, newRank, static_cast<int>(members.size()), options_,
                                  listenHost_, fmt::format("{}/split{}/color{}", prefix_, n, color));
  }

  void validate(const char* what, const void* sendbuf, const void* recvbuf, size_t count,
                DataType dtype, ReduceOp op) const {
    if (!isValid(dtype)) {
      fail(ErrorCode::kInvalidArgument, "rank {}: {}: unknown dtype {}", rank_, what,
           static_cast<int>(dtype));
    }
    if (!isValid(op)) {
      fail(ErrorCode::kInvalidArgument, "rank {}: {}: unknown reduce op {}", rank_, what,
           static_cast<int>(op));
    }
    if (count > 0 && (sendbuf == nullptr || recvbuf == nullptr)) {
      fail(ErrorCode::kInvalidArgument, "rank {}: {}: null {} with count {}", rank_, what,
           sendbuf == nullptr ? "sendbuf" : "recvbuf", count);
    }
    if (count > (std::numeric_limits<size_t>::max() / 2) / dtypeSize(dtype)) {
      fail(ErrorCode::kInvalidArgument, "rank {}: {}: count {} is too large", rank_, what, count);
    }
  }

  Options options_;
  const int rank_;
  const int size_;
  std::shared_ptr<Store> store_;
  std::string listenHost_;
  std::string prefix_;   // this communicator's store keys
  int splits_ = 0;       // split() calls so far (the same on every rank)
  PipeSet pipes_;
  PrimitiveContext ring_;
  PeerPipes peerPipes_;
  StallInspector inspector_;
  std::atomic<bool> aborted_{false};
  std::atomic<uint32_t> seq_{0};  // written by the collective thread, read by abort()
  std::mutex abortMu_;            // serializes aborts; guards the three below
  std::string firstError_;
  std::string localAbortReason_;
  bool pipesClosed_ = false;
  std::map<int, uint32_t> sendSeq_;  // point to point, per peer (executing thread only)
  std::map<int, uint32_t> recvSeq_;
  // Last: destroyed (drained) first, while everything its operations use exists.
  std::unique_ptr<OpQueue> queue_ = std::make_unique<OpQueue>();
};

}  // namespace gyre
