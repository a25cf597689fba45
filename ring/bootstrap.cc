#include "ring/bootstrap.h"

#include <unistd.h>

#include <algorithm>
#include <set>

#include "base/error.h"
#include "base/log.h"
#include "base/secret.h"
#include "ring/host_identity.h"
#include "ring/join.h"
#include "ring/transport_plan.h"
#include "store/store.h"
#include "transport/rdma/rdma_connector.h"
#include "transport/shm/shm_pipe.h"
#include "transport/shm/shm_segment.h"
#include "transport/socket.h"
#include "transport/tcp/tcp_connector.h"
#include "transport/tcp/tcp_pipe.h"
#include "transport/tcp/tcp_striped_pipe.h"

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
  // Shared memory means not every pipe is tcp: its slot is slotBytesFor(options, false).
  size_t need = ShmRecvPipe::segmentBytes(options.slots, slotBytesFor(options, false)) *
                p.recvFrom.size();
  if (free && *free >= need) return true;
  log(LogLevel::kWarn, rank,
      "/dev/shm has {} bytes free, {} needed for shared-memory pipes: using tcp instead "
      "(enlarge /dev/shm, e.g. docker --shm-size, or lower GYRE_SLOT_BYTES)",
      free ? *free : 0, need);
  return false;
}

std::string rdmaKey(int sender, int receiver, const char* end) {
  return fmt::format("rdma/{}-{}/{}", sender, receiver, end);
}

// Opens the segment a peer published, in short waits with a look at the join between
// them: when another rank failed or died meanwhile (and the peer gave up because of it),
// that is the error, not "the peer exited". The join's failure text is preferred only
// when it could be read; a store already gone leaves the pipe's own error.
std::unique_ptr<ShmSendPipe> openPeerSegment(Join& join, const std::string& where, int peer,
                                             pid_t pid, Clock::time_point deadline) {
  for (;;) {
    WaitContext ctx{std::min(deadline, Clock::now() + std::chrono::milliseconds(100)), nullptr,
                    std::chrono::microseconds(0)};
    try {
      return ShmSendPipe::open(where, peer, pid, ctx);
    } catch (const Error& e) {
      if (e.code() != ErrorCode::kTimeout && e.code() != ErrorCode::kRemoteError) throw;
      bool readable = true;
      try {
        join.checkAlarms();
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

uint64_t fnv1a64(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

PipeSet connectPeers(Store& store, Join& join, BootstrapParams p, const Options& options) {
  // Creation's waits are bounded as joining is (GYRE_JOIN_TIMEOUT), not by GYRE_TIMEOUT.
  const auto deadline = Clock::now() + std::min(options.timeout, options.joinTimeout);
  PipeSet set;

  // 1. Check in with what we are and where we listen; the join checks what must agree
  // (world size, ranks, the settings the schedules depend on, the job token) on every
  // rank, so a disagreement fails at creation everywhere, naming the setting.
  Fd listener = listenOn(SocketAddress::resolve(p.listenHost, 0));
  // A congestion control the kernel refuses fails here, before the check-in, on every
  // rank that asks for it (the join tells the others), not midway through connecting.
  if (!options.tcpCongestion.empty()) setCongestionControl(listener.get(), options.tcpCongestion);
  SocketAddress bound = SocketAddress::ofSocket(listener.get());
  Claim mine;
  mine.rank = p.rank;
  mine.size = p.size;
  mine.pid = ::getpid();
  mine.shm = options.transport != TransportKind::kTcp && shmHasRoom(p, options, p.rank);
  mine.hostId = hostIdentity(options.hostId);
  mine.hostName = mine.hostId.substr(0, mine.hostId.find('/'));
  mine.address = bound.toString();
  mine.process = processIdentity();
  // A keyed hash: equal secrets give equal fingerprints, and the store learns nothing of
  // the secret from it.
  mine.token = p.token.empty() ? "-" : claimFingerprint(p.token);
  // Everything both ends of a pipe depend on is in the claim or in these settings.
  mine.settings = fmt::format(
      "GYRE_ALGO={} GYRE_TRANSPORT={} GYRE_SLOT_BYTES={} GYRE_SLOTS={} GYRE_NSOCKS={} "
      "GYRE_ENCRYPT={} GYRE_NICS_PER_HOST={} protocol={}",
      algoName(options.algo), transportName(options.transport),
      options.slotBytes ? std::to_string(options.slotBytes) : "auto", options.slots, options.nsocks,
      options.encrypt ? 1 : 0, options.nicsPerHost, kJoinProtocolVersion);
  // The device is opened before the check-in so that the claim can say whether there is
  // one; it is closed again below when no peer gets an rdma pipe.
  std::unique_ptr<RdmaConnector> rdmaDevice;
  if (options.transport == TransportKind::kAuto || options.transport == TransportKind::kRdma) {
    rdmaDevice = RdmaConnector::open(options, &mine.rdmaWhyNot);
    if (rdmaDevice) mine.rdma = rdmaDevice->description();
  } else {
    mine.rdmaWhyNot = fmt::format("GYRE_TRANSPORT={}", transportName(options.transport));
  }
  log(LogLevel::kInfo, p.rank, "listening on {}", bound.toString());
  const std::vector<Claim> claims = join.checkIn(mine);
  for (const Claim& c : claims) set.hostIds.push_back(c.hostId);
  set.localRanks = static_cast<int>(
      std::count(set.hostIds.begin(), set.hostIds.end(), set.hostIds[p.rank]));
  // Names (shm segments, the communicator id) carry the job's tag: a keyed hash of the
  // secret (never the secret: names are visible), or without a secret the random token
  // rank 0 set before it checked in. They carry rank 0's process too, so that two jobs
  // given one secret still never share a name.
  const std::string tag = p.token.empty() ? store.getString("token") : nameTag(p.token);
  p.commId = fnv1a64(tag + "/" + join.prefix() + "/" + claims[0].process);

  // 2. Per peer: shared memory on this host, rdma to another host when both ends have a
  // device, else tcp (ring/transport_plan.h): computed from the claims alone, so both
  // ends of every pipe agree.
  std::vector<int> peers = p.sendTo;
  peers.insert(peers.end(), p.recvFrom.begin(), p.recvFrom.end());
  std::sort(peers.begin(), peers.end());
  peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
  const TransportPlan plan = planTransports(claims, p.rank, peers, options.transport);
  for (const auto& [peer, choice] : plan.peers) {
    log(LogLevel::kInfo, p.rank, "peer rank {}: {} ({})", peer,
        pipeTransportName(choice.transport), choice.reason);
  }
  if (plan.count(PipeTransport::kRdma) == 0) rdmaDevice.reset();
  // Every rank computes allTcp from the same claims: one slot size on every pipe.
  const size_t slotBytes = slotBytesFor(options, plan.allTcp);
  set.slotBytes = slotBytes;
  auto useShm = [&](int peer) { return plan.uses(peer, PipeTransport::kShm); };
  auto useRdma = [&](int peer) { return plan.uses(peer, PipeTransport::kRdma); };
  auto pidOf = [&](int peer) { return static_cast<pid_t>(claims[peer].pid); };

  // 3. Receivers create their segments, anonymous (memfd: never a name in /dev/shm, so
  // nothing is left there however the job dies) and publish where to open them; all
  // ranks wait for that; senders open them; then tcp connections form. Where memfd is
  // missing the segments are named: a rank that fails on the way unlinks every name it
  // is an end of (its peer may have died holding one), and senders unlink at the open.
  std::vector<std::string> names;
  try {
    TcpPipeEndpoints ep;
    ep.self = p.rank;
    ep.worldSize = p.size;
    ep.commId = p.commId;
    ep.key = authKey(p.token);
    ep.encrypt = options.encrypt;
    ep.channels = options.nsocks;
    for (int peer : peers) {
      if (useRdma(peer)) ep.oneChannel.insert(peer);
    }
    for (int peer : p.recvFrom) {
      if (useRdma(peer)) {
        store.setString(rdmaKey(peer, p.rank, "r"),
                        rdmaDevice->addRecv(peer, options.slots, slotBytes, p.size));
      }
    }
    for (int peer : p.sendTo) {
      if (useRdma(peer)) {
        store.setString(rdmaKey(p.rank, peer, "s"),
                        rdmaDevice->addSend(peer, options.slots, slotBytes, p.size));
      }
    }
    for (int peer : p.recvFrom) {
      if (useShm(peer)) {
        names.push_back(shmSegmentName(tag, p.commId, peer, p.rank));
        auto pipe = ShmRecvPipe::create("memfd:" + names.back(), options.slots, slotBytes, peer,
                                        pidOf(peer));
        store.setString(fmt::format("segment/{}-{}", peer, p.rank), pipe->name());
        set.recv.emplace(peer, std::move(pipe));
      } else {
        ep.recvFrom.push_back(peer);
      }
    }
    std::vector<int> shmSendTo;
    for (int peer : p.sendTo) {
      if (useShm(peer)) {
        shmSendTo.push_back(peer);
        names.push_back(shmSegmentName(tag, p.commId, p.rank, peer));
      } else {
        ep.sendTo.emplace(peer, parseAddress(claims[peer].address));
      }
    }
    join.arrive("segments", "creating shared-memory segments");
    join.waitAll("segments", "creating shared-memory segments");
    for (int peer : shmSendTo) {
      const std::string where = store.getString(fmt::format("segment/{}-{}", p.rank, peer));
      set.send.emplace(peer, openPeerSegment(join, where, peer, pidOf(peer), deadline));
    }
    TcpConnections conns = connectPipes(listener.get(), ep, deadline);
    listener.reset();

    // The rdma pipes take their tcp connection as the status channel (rdma_pipe.h).
    size_t rdmaPipes = 0;
    for (auto it = conns.out.begin(); it != conns.out.end();) {
      if (!useRdma(it->first)) {
        ++it;
        continue;
      }
      set.send.emplace(it->first, rdmaDevice->connectSend(
                                      it->first, store.getString(rdmaKey(p.rank, it->first, "r")),
                                      std::move(it->second.front())));
      it = conns.out.erase(it);
      ++rdmaPipes;
    }
    for (auto it = conns.in.begin(); it != conns.in.end();) {
      if (!useRdma(it->first)) {
        ++it;
        continue;
      }
      set.recv.emplace(it->first, rdmaDevice->connectRecv(
                                      it->first, store.getString(rdmaKey(it->first, p.rank, "s")),
                                      std::move(it->second.front())));
      it = conns.in.erase(it);
      ++rdmaPipes;
    }
    rdmaDevice.reset();

    std::string congestion;  // what the tcp pipes use, for the log
    for (auto* side : {&conns.out, &conns.in}) {
      for (auto& [peer, fds] : *side) {
        for (Fd& fd : fds) {
          if (!options.tcpCongestion.empty()) setCongestionControl(fd.get(), options.tcpCongestion);
          if (congestion.empty()) congestion = congestionControlOf(fd.get());
        }
      }
    }

    set.progress = std::make_unique<TcpProgress>();
    // With GYRE_ENCRYPT, each connection's keys from its handshake (empty: plain).
    for (auto& [peer, fds] : conns.out) {
      set.send.emplace(peer, makeTcpSendPipe(std::move(fds), peer, options.slots, slotBytes,
                                             set.progress.get(), p.size, conns.outKeys[peer]));
    }
    for (auto& [peer, fds] : conns.in) {
      set.recv.emplace(peer, makeTcpRecvPipe(std::move(fds), peer, options.slots, slotBytes, p.size,
                                             conns.inKeys[peer]));
    }

    // 4. Once every rank has opened its segments, no name is needed any more: nothing
    // is left in /dev/shm even if a rank dies later.
    join.arrive("connected", "connecting the pipes");
    join.waitAll("connected", "connecting the pipes");
    for (const std::string& name : names) ShmSegment::unlink(name);
    log(LogLevel::kInfo, p.rank, "pipes: {} shm, {} rdma, {} tcp ({} connection{} each{}{})",
        names.size(), rdmaPipes, conns.in.size() + conns.out.size(), options.nsocks,
        options.nsocks == 1 ? "" : "s", options.encrypt ? ", AES-256-GCM" : "",
        congestion.empty() ? std::string()
                           : fmt::format(", congestion control {}{}", congestion,
                                         options.tcpCongestion.empty() ? " (the host's)" : ""));
  } catch (...) {
    for (const std::string& name : names) {
      try {
        ShmSegment::unlink(name);
      } catch (const std::exception&) {
      }
    }
    throw;
  }

  set.allShm = plan.allShm;

  return set;
}

}  // namespace gyre
