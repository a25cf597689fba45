#include "collectives/stall_inspector.h"

#include <algorithm>

#include "base/error.h"
#include "base/log.h"
#include "collectives/allreduce_algo.h"

namespace gyre {
namespace {

std::chrono::milliseconds beaconDelay(std::chrono::milliseconds stallWarn,
                                      std::chrono::milliseconds timeout) {
  using std::chrono::milliseconds;
  // Early enough that the suspects have converged (a hop takes one wait slice, ~10 ms)
  // before the stall report and long before the timeout; late enough that the short
  // waits of a healthy job send nothing.
  return std::max(milliseconds(10), std::min({milliseconds(1000), timeout / 4, stallWarn / 2}));
}

double seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

}  // namespace

StallInspector::StallInspector(int rank, int size, std::chrono::milliseconds stallWarn,
                               std::chrono::milliseconds timeout)
    : rank_(rank),
      size_(size),
      stallWarn_(stallWarn),
      beaconAfter_(beaconDelay(stallWarn, timeout)),
      timeline_(Timeline::active()) {}

void StallInspector::attach(std::vector<SendPipe*> send, std::vector<RecvPipe*> recv) {
  sendPipes_ = std::move(send);
  recvPipes_ = std::move(recv);
}

void StallInspector::attachMore(SendPipe* send, RecvPipe* recv) {
  if (send) sendPipes_.push_back(send);
  if (recv) recvPipes_.push_back(recv);
}

void StallInspector::begin(const CollectiveCall& call) {
  call_ = call;
  sent_ = 0;
  received_ = 0;
  peer_ = -1;
  peerStatus_.reset();
  reported_ = false;
  if (timeline_) {
    spanStart_ = monotonicNs();
    phaseName_ = nullptr;
  }
}

void StallInspector::end() {
  if (published_) resume();
  if (!timeline_) return;
  const int64_t now = monotonicNs();
  if (phaseName_) timeline_->span(phaseName_, "phase", phaseStart_, now);
  TimelineArgs args;
  args.bytes = static_cast<int64_t>(call_.count * dtypeSize(call_.dtype));
  args.seq = call_.seq;
  if (call_.algo != 0) args.algorithm = algoName(static_cast<AllReduceAlgo>(call_.algo));
  timeline_->span(collectiveName(call_.kind), "collective", spanStart_, now, args);
}

void StallInspector::nextPhase(const char* name) {
  const int64_t now = monotonicNs();
  if (phaseName_) timeline_->span(phaseName_, "phase", phaseStart_, now);
  phaseName_ = name;
  phaseStart_ = now;
}

void StallInspector::publish(const PeerStatus& status) {
  for (SendPipe* p : sendPipes_) p->publish(status);
  for (RecvPipe* p : recvPipes_) p->publish(status);
}

void StallInspector::resume() {
  published_ = false;
  peerStatus_.reset();
  PeerStatus s;
  s.state = PeerStatus::State::kResumed;
  s.writer = rank_;
  s.seq = call_.seq;
  publish(s);
}

std::pair<int, int> StallInspector::chain(int peer, const PeerStatus* status) const {
  // Adopt the awaited peer's suspect, unless its chain comes back to us or is as long as
  // the ring: then every rank waits on the next one, and the peer is all we can name.
  if (status && status->suspect >= 0 && status->suspect < size_ && status->suspect != rank_ &&
      status->hops + 1 < size_) {
    return {status->suspect, status->hops + 1};
  }
  return {peer, 1};
}

void StallInspector::waiting(int peer, const char* what,
                             std::chrono::steady_clock::time_point since,
                             const PeerStatus* status) {
  peer_ = peer;
  what_ = what;
  if (status) {
    peerStatus_ = *status;
  } else {
    peerStatus_.reset();
  }
  const auto waited = std::chrono::steady_clock::now() - since;
  if (waited < beaconAfter_) return;
  auto [suspect, hops] = chain(peer, status);
  if (!published_ || suspect != publishedSuspect_ || hops != publishedHops_) {
    PeerStatus s;
    s.state = PeerStatus::State::kWaiting;
    s.writer = rank_;
    s.suspect = suspect;
    s.hops = static_cast<uint8_t>(std::min(hops, 255));
    s.seq = call_.seq;
    publish(s);
    published_ = true;
    publishedSuspect_ = suspect;
    publishedHops_ = hops;
  }
  if (waited >= stallWarn_ && !reported_) {
    reported_ = true;
    Blame b = blame();
    log(LogLevel::kWarn, rank_,
        "stall: {} has waited {:.1f} s for {} from peer rank {} (sent {} and received {} bytes "
        "of it so far); {}; rank {} has not arrived at {} or is stalled in it",
        describe(call_), seconds(waited), what, peer, sent_, received_, b.story, b.suspect,
        describe(call_));
    if (recorder_ && recorder_->enabled() && !dumpDir_.empty()) {
      try {
        const std::string path = recorder_->dumpTo(
            dumpDir_, "stall",
            fmt::format("{} has waited {:.1f} s for peer rank {}; rank {} has not arrived or is "
                        "stalled in it",
                        describe(call_), seconds(waited), peer, b.suspect));
        log(LogLevel::kWarn, rank_, "stall: flight recorder dumped to {}", path);
      } catch (const Error& e) {
        log(LogLevel::kWarn, rank_, "stall: {}", e.what());
      }
    }
  }
}

StallInspector::Blame StallInspector::blame() const {
  const PeerStatus* status = peerStatus_ ? &*peerStatus_ : nullptr;
  auto [suspect, hops] = chain(peer_, status);
  Blame b;
  b.suspect = suspect;
  if (suspect != peer_) {
    b.story =
        fmt::format("peer rank {} waits too, and the chain of waits ({} long) ends at rank {}",
                    peer_, hops, suspect);
  } else if (status) {
    b.story = fmt::format(
        "peer rank {} waits too, but its chain of waits comes back to this "
        "rank (every rank waits: a lost message or a network fault)",
        peer_);
  } else {
    b.story = fmt::format(
        "peer rank {} reports no wait of its own (it is stopped, has not "
        "called this collective, or the network to it is down)",
        peer_);
  }
  return b;
}

}  // namespace gyre
