#include "ring/bootstrap.h"

#include <unistd.h>

#include <algorithm>
#include <set>

#include "base/error.h"
#include "base/log.h"
#include "ring/host_identity.h"
#include "store/store.h"
#include "transport/shm/shm_pipe.h"
#include "transport/socket.h"
#include "transport/tcp/tcp_connector.h"
#include "transport/tcp/tcp_pipe.h"

namespace gyre {
namespace {

SocketAddress parseAddress(const std::string& text) {
  auto colon = text.rfind(':');
  if (colon == std::string::npos) fail(ErrorCode::kInternal, "malformed address '{}'", text);
  std::string host = text.substr(0, colon);
  if (!host.empty() && host.front() == '[') host = host.substr(1, host.size() - 2);
  return SocketAddress::resolve(host, static_cast<uint16_t>(std::stoi(text.substr(colon + 1))));
}

// Whether /dev/shm can hold this rank's receive segments; published so that both ends
// of a pipe decide alike (a full /dev/shm is a common container failure: fall back).
bool shmHasRoom(const BootstrapParams& p, const Options& options, int rank) {
  auto free = shmFreeBytes();
  size_t need = ShmRecvPipe::segmentBytes(options.slots, options.slotBytes) * p.recvFrom.size();
  if (free && *free >= need) return true;
  log(LogLevel::kWarn, rank,
      "/dev/shm has {} bytes free, {} needed for shared-memory pipes: using tcp instead "
      "(enlarge /dev/shm, e.g. docker --shm-size, or lower GYRE_SLOT_BYTES)",
      free ? *free : 0, need);
  return false;
}

}  // namespace

PipeSet connectPeers(Store& store, const BootstrapParams& p, const Options& options) {
  const auto deadline = Clock::now() + options.timeout;
  PipeSet set;

  // 1. Publish who we are and where we listen.
  Fd listener = listenOn(SocketAddress::resolve(p.listenHost, 0));
  SocketAddress bound = SocketAddress::ofSocket(listener.get());
  const bool room = options.transport != TransportKind::kTcp && shmHasRoom(p, options, p.rank);
  store.setString(fmt::format("addr/{}", p.rank), bound.toString());
  store.setString(fmt::format("host/{}", p.rank), hostIdentity(options.hostId));
  store.setString(fmt::format("pid/{}", p.rank), std::to_string(::getpid()));
  store.setString(fmt::format("shm/{}", p.rank), room ? "1" : "0");
  log(LogLevel::kInfo, p.rank, "listening on {}", bound.toString());

  // What every rank must agree on, or the schedules would not fit together (the algorithm
  // choice and the slicing): checked here so a disagreement fails at creation on every
  // rank, naming the setting, instead of as a mismatch or a stall in some later call.
  const std::string config = fmt::format("GYRE_ALGO={} GYRE_SLOT_BYTES={}",
                                         algoName(options.algo), options.slotBytes);
  store.setString(fmt::format("config/{}", p.rank), config);
  for (int r = 0; r < p.size; ++r) {
    set.hostIds.push_back(store.getString(fmt::format("host/{}", r)));
    std::string theirs = store.getString(fmt::format("config/{}", r));
    if (theirs != config) {
      fail(ErrorCode::kInvalidArgument,
           "rank {}: ranks disagree on their settings: rank {} has '{}', rank {} has '{}' "
           "(give every rank the same environment)",
           p.rank, p.rank, config, r, theirs);
    }
  }
  set.localRanks = static_cast<int>(
      std::count(set.hostIds.begin(), set.hostIds.end(), set.hostIds[p.rank]));

  // 2. Per peer: shared memory when on this host (and allowed), else tcp.
  auto useShm = [&](int peer) {
    bool sameHost = set.hostIds[peer] == set.hostIds[p.rank];
    if (options.transport == TransportKind::kTcp) return false;
    if (options.transport == TransportKind::kShm && !sameHost) {
      fail(ErrorCode::kInvalidArgument,
           "rank {}: GYRE_TRANSPORT=shm, but peer rank {} is on another host ({} vs {})", p.rank,
           peer, set.hostIds[peer], set.hostIds[p.rank]);
    }
    return sameHost && room && store.getString(fmt::format("shm/{}", peer)) == "1";
  };
  auto pidOf = [&](int peer) {
    return static_cast<pid_t>(std::stol(store.getString(fmt::format("pid/{}", peer))));
  };

  // 3. Receivers create their segments first (never blocks), then tcp connections
  // form, then senders open the segments: no rank waits on a step another skips.
  std::vector<ShmRecvPipe*> created;
  TcpPipeEndpoints ep;
  ep.self = p.rank;
  ep.worldSize = p.size;
  ep.commId = p.commId;
  ep.token = tokenBytes(p.token);
  for (int peer : p.recvFrom) {
    if (useShm(peer)) {
      auto pipe = ShmRecvPipe::create(shmSegmentName(p.token, p.commId, peer, p.rank),
                                      options.slots, options.slotBytes, peer, pidOf(peer));
      created.push_back(pipe.get());
      set.recv.emplace(peer, std::move(pipe));
    } else {
      ep.recvFrom.push_back(peer);
    }
  }
  std::vector<int> shmSendTo;
  for (int peer : p.sendTo) {
    if (useShm(peer)) {
      shmSendTo.push_back(peer);
    } else {
      ep.sendTo.emplace(peer, parseAddress(store.getString(fmt::format("addr/{}", peer))));
    }
  }
  TcpConnections conns = connectPipes(listener.get(), ep, deadline);
  listener.reset();

  set.progress = std::make_unique<TcpProgress>();
  for (auto& [peer, fd] : conns.out) {
    set.send.emplace(peer, std::make_unique<TcpSendPipe>(std::move(fd), peer, options.slots,
                                                         options.slotBytes, set.progress.get(),
                                                         p.size));
  }
  for (auto& [peer, fd] : conns.in) {
    set.recv.emplace(peer, std::make_unique<TcpRecvPipe>(std::move(fd), peer, options.slots,
                                                         options.slotBytes, p.size));
  }
  WaitContext ctx{deadline, nullptr, std::chrono::microseconds(0)};
  for (int peer : shmSendTo) {
    set.send.emplace(peer, ShmSendPipe::open(shmSegmentName(p.token, p.commId, p.rank, peer),
                                             peer, pidOf(peer), ctx));
  }

  // 4. Once every rank has opened its segments, no name is needed any more: nothing
  // is left in /dev/shm even if a rank dies later.
  store.setString(fmt::format("connected/{}", p.rank), "1");
  std::vector<std::string> keys;
  for (int r = 0; r < p.size; ++r) keys.push_back(fmt::format("connected/{}", r));
  store.wait(keys);
  for (ShmRecvPipe* pipe : created) pipe->unlinkName();

  // Decided alike on every rank: shm everywhere iff every rank is on one host and offered it.
  set.allShm = options.transport != TransportKind::kTcp && set.localRanks == p.size;
  for (int r = 0; r < p.size && set.allShm; ++r) {
    set.allShm = store.getString(fmt::format("shm/{}", r)) == "1";
  }

  // 5. Rank 0's process may be the one serving the store: it must not return (and
  // perhaps exit, taking the store with it) while another rank still waits for a
  // reply. Every rank's last store call is this add; the last one marks completion.
  if (store.add("bootstrapped", 1) == p.size) store.setString("bootstrap-complete", "1");
  if (p.rank == 0) store.wait({"bootstrap-complete"});
  log(LogLevel::kInfo, p.rank, "pipes: {} shm, {} tcp", created.size() + shmSendTo.size(),
      conns.in.size() + conns.out.size());
  return set;
}

}  // namespace gyre
