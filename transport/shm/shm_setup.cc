#include "transport/shm/shm_setup.h"

#include <algorithm>

#include "base/error.h"
#include "base/log.h"
#include "transport/shm/shm_segment.h"

namespace gyre {
namespace {

std::string segmentKey(int sender, int receiver) {
  return fmt::format("segment/{}-{}", sender, receiver);
}

// Whether /dev/shm can hold this rank's receive segments.
bool hasRoom(const SetupEnv& env) {
  const TransportOptions& options = *env.options;
  auto free = shmFreeBytes();
  // Shared memory means not every pipe is tcp: its slot is slotBytesFor(options, false).
  size_t need = ShmRecvPipe::segmentBytes(options.slots, slotBytesFor(options, false)) *
                env.receivePipes;
  if (free && *free >= need) return true;
  log(LogLevel::kWarn, env.rank,
      "/dev/shm has {} bytes free, {} needed for shared-memory pipes: using tcp instead "
      "(enlarge /dev/shm, e.g. docker --shm-size, or lower GYRE_SLOT_BYTES)",
      free ? *free : 0, need);
  return false;
}

// Opens the segment a peer published, in short waits with a look at the join between
// them: when another rank failed or died meanwhile (and the peer gave up because of it),
// that is the error, not "the peer exited". The join's failure text is preferred only
// when it could be read; a store already gone leaves the pipe's own error.
std::unique_ptr<ShmSendPipe> openPeerSegment(SetupExchange& exchange, const std::string& where,
                                             int peer, pid_t pid, Clock::time_point deadline,
                                             const std::shared_ptr<PeerProcess>& process) {
  for (;;) {
    WaitContext ctx{std::min(deadline, Clock::now() + std::chrono::milliseconds(100)), nullptr,
                    std::chrono::microseconds(0)};
    try {
      return ShmSendPipe::open(where, peer, pid, ctx, process);
    } catch (const Error& e) {
      if (e.code() != ErrorCode::kTimeout && e.code() != ErrorCode::kRemoteError) throw;
      bool readable = true;
      try {
        exchange.checkAlarms();
      } catch (const Error& cause) {
        readable = cause.cause() == ErrorCause::kFailedElsewhere ||
                   cause.cause() == ErrorCause::kRankLeft;
        if (readable) throw;
      }
      if (e.code() == ErrorCode::kRemoteError || Clock::now() >= deadline || !readable) throw;
    }
  }
}

}  // namespace

TransportOffer ShmSetup::offer(const SetupEnv& env) {
  if (env.options->transport == TransportKind::kTcp || !hasRoom(env)) return {};
  return {"room", ""};
}

PeerFit ShmSetup::canConnect(const PeerClaim& mine, const PeerClaim& peer, bool forced) const {
  if (mine.hostId == peer.hostId) {
    if (mine.offer(name()).offered() && peer.offer(name()).offered()) {
      return {PeerFit::kYes, "same host"};
    }
    const PeerClaim& full = mine.offer(name()).offered() ? peer : mine;
    return {PeerFit::kNo, fmt::format("same host, but /dev/shm has no room on rank {}", full.rank)};
  }
  if (forced) {
    fail(ErrorCode::kInvalidArgument,
         "rank {}: GYRE_TRANSPORT=shm, but peer rank {} is on another host ({} vs {})", mine.rank,
         peer.rank, peer.hostId, mine.hostId);
  }
  return {PeerFit::kPass, ""};
}

void ShmSetup::prepare(SetupEnv& env, const std::vector<int>& sendTo,
                       const std::vector<int>& recvFrom) {
  const size_t slots = env.options->slots;
  for (int peer : recvFrom) {
    names_.push_back(shmSegmentName(env.tag, env.commId, peer, env.rank));
    auto pipe = ShmRecvPipe::create("memfd:" + names_.back(), slots, env.slotBytes, peer,
                                    static_cast<pid_t>(env.claims.at(static_cast<size_t>(peer)).pid));
    env.exchange->publish(segmentKey(peer, env.rank), pipe->name());
    recv_.emplace(peer, std::move(pipe));
  }
  for (int peer : sendTo) {
    sendTo_.insert(peer);
    names_.push_back(shmSegmentName(env.tag, env.commId, env.rank, peer));
  }
}

PipePair ShmSetup::connect(SetupEnv& env, int peer, PeerLinks) {
  PipePair pipes;
  std::shared_ptr<PeerProcess> process;  // one liveness handle (pidfd) for the pair's pipes
  if (auto it = recv_.find(peer); it != recv_.end()) {
    process = it->second->peerProcess();
    pipes.recv = std::move(it->second);
    recv_.erase(it);
  }
  if (sendTo_.count(peer)) {
    const std::string where = env.exchange->read(segmentKey(env.rank, peer));
    pipes.send = openPeerSegment(*env.exchange, where, peer,
                                 static_cast<pid_t>(env.claims.at(static_cast<size_t>(peer)).pid),
                                 env.deadline, process);
  }
  return pipes;
}

// Every rank has opened its segments: no name is needed any more, so nothing is left in
// /dev/shm even if a rank dies later.
void ShmSetup::finish() {
  for (const std::string& name : names_) ShmSegment::unlink(name);
}

void ShmSetup::abandon() noexcept {
  for (const std::string& name : names_) {
    try {
      ShmSegment::unlink(name);
    } catch (const std::exception&) {
    }
  }
}

}  // namespace gyre
