#include "ring/bootstrap.h"

#include <unistd.h>

#include <algorithm>
#include <iterator>

#include "base/error.h"
#include "base/log.h"
#include "base/secret.h"
#include "ring/host_identity.h"
#include "ring/join.h"
#include "ring/transport_plan.h"
#include "store/store.h"
#include "transport/tcp/tcp_links.h"

namespace gyre {
namespace {

// The store and the join as the transports' setup sees them (transport/transport_setup.h).
class JoinExchange final : public SetupExchange {
 public:
  JoinExchange(Store& store, Join& join) : store_(store), join_(join) {}
  void publish(const std::string& key, const std::string& value) override {
    store_.setString(key, value);
  }
  std::string read(const std::string& key) override { return store_.getString(key); }
  void checkAlarms() override { join_.checkAlarms(); }

 private:
  Store& store_;
  Join& join_;
};

// What this rank checks in with. The join checks what must agree (world size, ranks, the
// settings the schedules depend on, the job token) on every rank, so a disagreement fails
// at creation everywhere, naming the setting.
Claim claimOf(const BootstrapParams& p, const Options& options, const std::string& address,
              const TransportList& transports, const SetupEnv& env) {
  Claim mine;
  mine.rank = p.rank;
  mine.size = p.size;
  mine.pid = ::getpid();
  mine.hostId = hostIdentity(options.hostId);
  mine.hostName = mine.hostId.substr(0, mine.hostId.find('/'));
  mine.address = address;
  mine.process = processIdentity();
  // A keyed hash: equal secrets give equal fingerprints, and the store learns nothing of
  // the secret from it.
  mine.token = p.token.empty() ? "-" : claimFingerprint(p.token);
  // Everything both ends of a pipe depend on is in the claim or in these settings.
  mine.settings = fmt::format(
      "GYRE_ALGO={} GYRE_TRANSPORT={} GYRE_SLOT_BYTES={} GYRE_SLOTS={} GYRE_NSOCKS={} "
      "GYRE_ENCRYPT={} GYRE_NICS_PER_HOST={} GYRE_CONNECT={} protocol={}",
      algoName(options.algo), transportName(options.transport),
      options.slotBytes ? std::to_string(options.slotBytes) : "auto", options.slots, options.nsocks,
      options.encrypt ? 1 : 0, options.nicsPerHost,
      options.connect == ConnectMode::kEager ? "eager" : "lazy", kJoinProtocolVersion);
  // Offers are made before the check-in so that the claim can say what this rank has (an
  // RDMA device is opened here, and closed again when no peer gets an rdma pipe).
  for (const auto& t : transports) setOffer(&mine, t->name(), t->offer(env));
  return mine;
}

// Every rank this one has a pipe with, ascending.
std::vector<int> peersOf(const BootstrapParams& p) {
  std::vector<int> peers = p.sendTo;
  peers.insert(peers.end(), p.recvFrom.begin(), p.recvFrom.end());
  std::sort(peers.begin(), peers.end());
  peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
  return peers;
}

// The peers among `from` whose pipes `transport` carries.
std::vector<int> carriedBy(const TransportPlan& plan, const std::vector<int>& from,
                           const std::string& transport) {
  std::vector<int> out;
  std::copy_if(from.begin(), from.end(), std::back_inserter(out),
               [&](int peer) { return plan.uses(peer, transport); });
  return out;
}

// Each transport makes what its peers will open and publishes it; the links every pipe
// takes are declared for the one connectPipes call.
void prepareAll(PipeSet& set, SetupEnv& env, const BootstrapParams& p, const TransportPlan& plan,
                const std::vector<Claim>& claims, TcpLinks& links) {
  for (const auto& t : set.transports) {
    const std::vector<int> sendTo = carriedBy(plan, p.sendTo, t->name());
    const std::vector<int> recvFrom = carriedBy(plan, p.recvFrom, t->name());
    t->prepare(env, sendTo, recvFrom);
    const int count = t->linksPerPipe(*env.options);
    if (count == 0) continue;
    for (int peer : sendTo) links.addSend(peer, claims[static_cast<size_t>(peer)].address, count);
    for (int peer : recvFrom) links.addRecv(peer, count);
  }
}

// Connects the pipes of the transports that take no links first (what they open is there
// once the barrier passed), then forms every link in one call, then connects the others.
// Returns the pipes made, by transport.
std::vector<size_t> connectAll(PipeSet& set, SetupEnv& env, const std::vector<int>& peers,
                               const TransportPlan& plan, TcpLinks& links, uint64_t commId,
                               const std::string& token, bool keepListener) {
  std::vector<size_t> made(set.transports.size(), 0);
  for (bool linked : {false, true}) {
    if (linked) links.connect(commId, authKey(token), env.deadline, keepListener);
    for (size_t i = 0; i < set.transports.size(); ++i) {
      TransportSetup& t = *set.transports[i];
      if ((t.linksPerPipe(*env.options) > 0) != linked) continue;
      for (int peer : carriedBy(plan, peers, t.name())) {
        PipePair pipes = t.connect(env, peer, linked ? links.take(peer) : PeerLinks{});
        made[i] += (pipes.send ? 1 : 0) + (pipes.recv ? 1 : 0);
        if (pipes.send) set.send.emplace(peer, std::move(pipes.send));
        if (pipes.recv) set.recv.emplace(peer, std::move(pipes.recv));
      }
    }
  }
  return made;
}

// "pipes: 2 shm, 0 rdma, 4 tcp (1 connection each, congestion control cubic (the host's))".
std::string pipesLine(const PipeSet& set, const std::vector<size_t>& made, const Options& options) {
  std::string line;
  for (size_t i = 0; i < set.transports.size(); ++i) {
    const TransportSetup& t = *set.transports[i];
    line += fmt::format("{}{} {}{}", i ? ", " : "", made[i], t.name(), t.detail(options));
  }
  return line;
}

// 1. Checks in with what this rank is, where it listens and what each transport offers;
// returns every rank's claim, and sets what follows from them (hosts, names).
std::vector<Claim> checkIn(PipeSet& set, SetupEnv& env, Store& store, Join& join,
                           BootstrapParams& p, const Options& options, const TcpLinks& links) {
  const Claim mine = claimOf(p, options, links.address(), set.transports, env);
  log(LogLevel::kInfo, p.rank, "listening on {}", links.address());
  std::vector<Claim> claims = join.checkIn(mine);
  for (const Claim& c : claims) set.hostIds.push_back(c.hostId);
  set.localRanks = static_cast<int>(
      std::count(set.hostIds.begin(), set.hostIds.end(), set.hostIds[p.rank]));
  // Names (shm segments, the communicator id) carry the job's tag: a keyed hash of the
  // secret (never the secret: names are visible), or without a secret the random token
  // rank 0 set before it checked in. They carry rank 0's process too, so that two jobs
  // given one secret still never share a name.
  env.tag = p.token.empty() ? store.getString("token") : nameTag(p.token);
  p.commId = fnv1a64(env.tag + "/" + join.prefix() + "/" + claims[0].process);
  env.commId = p.commId;
  for (const Claim& c : claims) env.claims.push_back(peerClaimOf(c));
  return claims;
}

// 2. Per peer, a transport computed from the claims alone, so both ends of every pipe
// agree (ring/transport_plan.h), and what follows from it for every pipe.
TransportPlan plan(PipeSet& set, SetupEnv& env, const std::vector<Claim>& claims,
                   const BootstrapParams& p, const std::vector<int>& peers,
                   const Options& options) {
  TransportPlan plan = planTransports(set.transports, claims, p.rank, peers, options.transport);
  for (const auto& [peer, choice] : plan.peers) {
    log(LogLevel::kInfo, p.rank, "peer rank {}: {} ({})", peer, choice.transport, choice.reason);
  }
  // Every rank computes allTcp from the same claims: one slot size on every pipe.
  set.slotBytes = slotBytesFor(options, plan.allTcp);
  set.allShm = plan.allShm;
  env.slotBytes = set.slotBytes;
  return plan;
}

}  // namespace

uint64_t fnv1a64(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

PipeSet connectPeers(Store& store, Join& join, BootstrapParams p, const Options& options) {
  PipeSet set;
  set.transports = registeredTransports();
  SetupEnv env;
  env.rank = p.rank;
  env.size = p.size;
  env.options = &options;
  // Creation's waits are bounded as joining is (GYRE_JOIN_TIMEOUT), not by GYRE_TIMEOUT.
  env.deadline = Clock::now() + std::min(options.timeout, options.joinTimeout);
  // Lazy: the eager peers are known only after the check-in; /dev/shm's room is judged
  // for about as many (ring neighbours, tree and two-level peers).
  env.receivePipes = p.choosePeers ? std::min<size_t>(static_cast<size_t>(p.size - 1), 8)
                                   : p.recvFrom.size();
  TcpLinks links(p.listenHost, p.rank, p.size, options);
  const std::vector<Claim> claims = checkIn(set, env, store, join, p, options, links);
  if (p.choosePeers) {
    p.sendTo = p.choosePeers(set.hostIds);
    p.recvFrom = p.sendTo;
    env.receivePipes = p.recvFrom.size();
  }
  const std::vector<int> peers = peersOf(p);
  const TransportPlan planned = plan(set, env, claims, p, peers, options);
  JoinExchange exchange(store, join);
  env.exchange = &exchange;

  // 3. Every transport publishes what its peers open; all ranks wait for that; then the
  // pipes connect. A rank that fails on the way leaves nothing behind (abandon()).
  try {
    prepareAll(set, env, p, planned, claims, links);
    join.arrive("segments", "creating shared-memory segments");
    join.waitAll("segments", "creating shared-memory segments");
    const std::vector<size_t> made =
        connectAll(set, env, peers, planned, links, p.commId, p.token, p.keepListener);

    // 4. Once every rank has connected, what only creation needed goes (shm names).
    join.arrive("connected", "connecting the pipes");
    join.waitAll("connected", "connecting the pipes");
    for (const auto& t : set.transports) t->finish();
    log(LogLevel::kInfo, p.rank, "pipes: {}", pipesLine(set, made, options));
    if (p.keepListener) {
      set.listener = links.takeListener();
      set.claims = claims;
      set.env = env;
      set.env.exchange = nullptr;
    }
  } catch (...) {
    for (const auto& t : set.transports) t->abandon();
    throw;
  }
  return set;
}

}  // namespace gyre
