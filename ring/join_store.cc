#include "ring/join_store.h"

#include <algorithm>
#include <thread>

#include "base/error.h"
#include "base/log.h"
#include "ring/join.h"
#include "store/tcp_store.h"

namespace gyre {

std::shared_ptr<TcpStore> joinStore(const std::string& host, uint16_t port, int rank,
                                    const Options& options) {
  if (rank == 0) {
    try {
      return TcpStore::serve(host, port, options.timeout, options.token);
    } catch (const Error& e) {
      fail(e.code(), "rank 0: {} (MASTER_ADDR={}, MASTER_PORT={})", e.what(), host, port);
    }
  }
  return connectStore(host, port, rank, options, /*fresh=*/true);
}

std::shared_ptr<TcpStore> connectStore(const std::string& host, uint16_t port, int rank,
                                       const Options& options, bool fresh) {
  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline = start + options.joinTimeout;
  Clock::time_point nextReport = start + options.joinProgressFirst;
  auto seconds = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  for (;;) {
    // Attempts end at the next report, so that a waiting rank speaks.
    const Clock::time_point until = std::min(deadline, nextReport);
    try {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
      auto store = TcpStore::connect(host, port, std::max(left, std::chrono::milliseconds(1)),
                                      options.token, rank);
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
        fail(e.code(), "rank {}: {} (MASTER_ADDR={}, MASTER_PORT={})", rank, e.what(), host, port);
      }
      // The attempt's own reason ("connection refused"), not its framing again.
      std::string reason = e.what();
      size_t framed = reason.find("(MASTER_ADDR:MASTER_PORT) in ");
      if (framed != std::string::npos && reason.find(": ", framed) != std::string::npos) {
        reason = reason.substr(reason.find(": ", framed) + 2);
      }
      if (Clock::now() >= deadline) {
        fail(ErrorCode::kTimeout,
             "rank {}: could not reach the bootstrap store at {}:{} (MASTER_ADDR:MASTER_PORT) "
             "after {:.1f} s (GYRE_JOIN_TIMEOUT={} s): {}. Is rank 0 running, and is MASTER_ADDR "
             "an address of rank 0's node that this node can reach?",
             rank, host, port, seconds(), options.joinTimeout.count() / 1000.0, reason);
      }
      if (Clock::now() >= nextReport) {
        log(LogLevel::kWarn, rank,
            "waiting for the bootstrap store at {}:{} (MASTER_ADDR:MASTER_PORT) for {:.0f} s: {} "
            "(gives up at {} s, GYRE_JOIN_TIMEOUT)",
            host, port, seconds(), reason, options.joinTimeout.count() / 1000.0);
        while (nextReport <= Clock::now()) nextReport += options.joinProgressEvery;
      }
      // A store that closed on us (going away, or not answering yet): not at once again.
      if (e.code() == ErrorCode::kRemoteError) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
}

}  // namespace gyre
