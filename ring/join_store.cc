#include "ring/join_store.h"

#include <algorithm>
#include <string_view>
#include <thread>
#include <vector>

#include "base/error.h"
#include "base/log.h"
#include "ring/join.h"
#include "store/store.h"
#include "store/tcp_store.h"

namespace gyre {
namespace {

// The store layer's own keys: written only by the server (store/tcp_store_server.h), for
// the whole store, whatever prefix its clients use.
constexpr std::string_view kServerKeys = "gyre/store/";

// An attempt's view of the agent store: "<attempt>/<key>", except the server's own keys.
// A PrefixStore, so that describeStore() and servesStore() (ring/join.h) see through it.
class AttemptStore : public PrefixStore {
 public:
  using PrefixStore::PrefixStore;

  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    inner()->set(mapped(key), value);
  }
  std::vector<uint8_t> get(const std::string& key) override { return inner()->get(mapped(key)); }
  int64_t add(const std::string& key, int64_t delta) override {
    return inner()->add(mapped(key), delta);
  }
  void wait(const std::vector<std::string>& keys) override { inner()->wait(mapped(keys)); }
  bool check(const std::vector<std::string>& keys) override { return inner()->check(mapped(keys)); }
  bool addOnClose(const std::string& key, int64_t delta) override {
    return inner()->addOnClose(mapped(key), delta);
  }

 private:
  std::string mapped(const std::string& key) const {
    return key.starts_with(kServerKeys) ? key : prefix() + "/" + key;
  }
  std::vector<std::string> mapped(const std::vector<std::string>& keys) const {
    std::vector<std::string> out;
    out.reserve(keys.size());
    for (const std::string& key : keys) out.push_back(mapped(key));
    return out;
  }
};

}  // namespace

std::shared_ptr<Store> joinStore(const std::string& host, uint16_t port, int rank,
                                 const Options& options) {
  const StoreLocation where = storeLocationFromProcess(host, port);
  if (where.server == StoreServer::kAgent) {
    // The launcher's store lives across creations: one this rank already joined is this
    // attempt's, and the join gives the next communicator the next prefix (gyre/comm<k>).
    std::shared_ptr<TcpStore> client = connectStore(where, rank, options, /*fresh=*/false);
    log(LogLevel::kInfo, rank, "the launcher serves the store at {}:{} ({}); keys under {}",
        where.host, where.port, where.from, where.prefix);
    return std::make_shared<AttemptStore>(where.prefix, std::move(client));
  }
  if (rank == 0) {
    try {
      return TcpStore::serve(where.host, static_cast<uint16_t>(where.port), options.timeout,
                             options.token);
    } catch (const Error& e) {
      fail(e.code(), "rank 0: {} (MASTER_ADDR={}, MASTER_PORT={}{})", e.what(), host, port,
           where.server == StoreServer::kRankZero ? "" : ", gyre's store at " + where.from);
    }
  }
  return connectStore(where, rank, options, /*fresh=*/true);
}

std::shared_ptr<TcpStore> connectStore(const std::string& host, uint16_t port, int rank,
                                       const Options& options, bool fresh) {
  StoreLocation where;
  where.host = host;
  where.port = port;
  return connectStore(where, rank, options, fresh);
}

std::shared_ptr<TcpStore> connectStore(const StoreLocation& where, int rank,
                                       const Options& options, bool fresh) {
  const std::string& host = where.host;
  const int port = where.port;
  // Who serves it, the variables that say where, and what to check when it cannot be reached.
  const bool agent = where.server == StoreServer::kAgent;
  const std::string from = agent ? where.from + ", served by gyrerun on node 0" : where.from;
  const std::string vars =
      agent ? fmt::format("GYRE_AGENT_STORE={}:{}", host, port)
      : where.server == StoreServer::kRankZero
          ? fmt::format("MASTER_ADDR={}, MASTER_PORT={}", host, port)
          : fmt::format("MASTER_ADDR={}, {}", host, where.from);
  const std::string hint =
      agent ? "Is node 0's gyrerun (its gyre-store) still running, and can this node reach "
                    "that address?"
                  : "Is rank 0 running, and is MASTER_ADDR an address of rank 0's node that this "
                    "node can reach?";
  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline = start + options.joinTimeout;
  Clock::time_point nextReport = start + options.joinProgressFirst;
  auto seconds = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  std::string reason;  // why the last attempt failed, unframed
  for (;;) {
    // Attempts end at the next report, so that a waiting rank speaks.
    const Clock::time_point until = std::min(deadline, nextReport);
    try {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
      reason.clear();
      auto store = TcpStore::connect(host, port, std::max(left, std::chrono::milliseconds(1)),
                                      options.token, rank, &reason);
      store->setTimeout(options.timeout);
      const std::string owner = fmt::format("gyre/owner/{}", rank);
      if (fresh && store->check({owner}) && store->getString(owner) == processIdentity()) {
        store.reset();
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        if (Clock::now() < deadline) continue;
        fail(ErrorCode::kTimeout,
             "rank {}: the bootstrap store at {}:{} is still the one of this rank's previous "
             "communicator after {:.1f} s (GYRE_JOIN_TIMEOUT): rank 0 did not serve a new one",
             rank, host, port, seconds());
      }
      if (Clock::now() >= start + options.joinProgressFirst) {
        log(LogLevel::kWarn, rank, "reached the bootstrap store at {}:{} after {:.1f} s", host,
            port, seconds());
      }
      return store;
    } catch (const Error& e) {
      if (e.code() != ErrorCode::kTimeout && e.code() != ErrorCode::kRemoteError) {
        fail(e.code(), "rank {}: {} ({})", rank, e.what(), vars);
      }
      // The attempt's own reason ("connection refused"), not its framing again.
      if (reason.empty()) reason = e.what();
      if (Clock::now() >= deadline) {
        fail(ErrorCode::kTimeout,
             "rank {}: could not reach the bootstrap store at {}:{} ({}) after {:.1f} s "
             "(GYRE_JOIN_TIMEOUT={} s): {}. {}",
             rank, host, port, from, seconds(), options.joinTimeout.count() / 1000.0, reason,
             hint);
      }
      if (Clock::now() >= nextReport) {
        log(LogLevel::kWarn, rank,
            "waiting for the bootstrap store at {}:{} ({}) for {:.0f} s: {} "
            "(gives up at {} s, GYRE_JOIN_TIMEOUT)",
            host, port, from, seconds(), reason, options.joinTimeout.count() / 1000.0);
        while (nextReport <= Clock::now()) nextReport += options.joinProgressEvery;
      }
      // A store that closed on us (going away, or not answering yet): not at once again.
      if (e.code() == ErrorCode::kRemoteError) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
}

}  // namespace gyre
