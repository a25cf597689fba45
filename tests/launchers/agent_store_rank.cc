// A rank of the agent-store tests (agent_store_test.cc), started by gyrerun: it creates
// communicators from the environment and then uses the store the way shrink/grow will,
// printing one line per fact it proved on stdout (gyrerun passes stdout through) and, on
// a failure, "rank R: ..." on stderr with exit status 1. Every wait is bounded.
//
//   agent_store_rank outlive   two communicators from the environment, both alive (the
//                              second gets the next prefix on the same store); then rank
//                              0 dies by SIGKILL and the others, once the store has seen
//                              its connection close, open new clients of the store, use
//                              it, and build a communicator of the survivors through it.
//   agent_store_rank restart   one communicator and a checked all-reduce; on the first
//                              attempt (TORCHELASTIC_RESTART_COUNT=0) rank 1 then exits 3,
//                              so that gyrerun --max-restarts starts the group again.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/launch_env.h"
#include "base/options.h"
#include "ring/communicator.h"
#include "store/store.h"
#include "store/tcp_store.h"

namespace {

using namespace gyre;
using namespace std::chrono_literals;

constexpr std::chrono::milliseconds kStoreTimeout{20000};

int gRank = -1;

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "rank %d: %s\n", gRank, what.c_str());
  std::exit(1);
}

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

// A new client of the agent store, as any process holding the job's secret can open one.
std::shared_ptr<TcpStore> agentClient(int rank) {
  const LaunchEnv launch = launchEnvFromProcess();
  const StoreLocation where = storeLocationFromProcess(launch.masterAddr, launch.masterPort);
  if (where.server != StoreServer::kAgent) die("GYRE_AGENT_STORE is not set: gyrerun serves no store");
  return TcpStore::connect(where.host, static_cast<uint16_t>(where.port), kStoreTimeout,
                           secretFromEnvironment(), rank);
}

// A checked all-reduce: every rank gives rank+1, the sum is n(n+1)/2.
void checkAllReduce(Communicator& comm, const char* what) {
  std::vector<int64_t> v(1000, comm.rank() + 1);
  comm.allReduce(v.data(), v.data(), v.size(), DataType::kInt64, ReduceOp::kSum);
  const int64_t want = static_cast<int64_t>(comm.size()) * (comm.size() + 1) / 2;
  for (int64_t x : v) {
    if (x != want)
      die(std::string(what) + ": all-reduce gave " + std::to_string(x) + ", not " +
          std::to_string(want));
  }
}

// Every one of `count` ranks adds 1 to `key`; the last to arrive opens it for all (the
// store's wait, at most kStoreTimeout).
void barrier(Store& store, const std::string& key, int64_t count) {
  if (store.add(key, 1) == count) store.setString(key + "/open", "1");
  try {
    store.wait({key + "/open"});
  } catch (const Error& e) {
    die("barrier " + key + " timed out: " + e.what());
  }
}

void outlive() {
  auto first = Communicator::fromEnvironment();
  const int rank = first->rank(), size = first->size();
  checkAllReduce(*first, "first communicator");
  auto second = Communicator::fromEnvironment();  // the first one still alive
  checkAllReduce(*second, "second communicator");
  std::printf("rank %d: two communicators from the environment\n", rank);

  std::shared_ptr<TcpStore> raw = agentClient(rank);
  const std::string created = "/worker/attempt_0/gyre/created/" + std::to_string(rank);
  if (raw->getString(created) != "2") die(created + " is " + raw->getString(created));
  if (raw->check({"gyre/owner/" + std::to_string(rank)})) die("a key outside the attempt's prefix");
  std::printf("rank %d: keys under /worker/attempt_0, this rank's communicators 2\n", rank);
  std::fflush(stdout);

  if (rank == 0) raw->addOnClose("test/rank0-gone", 1);
  barrier(*raw, "test/armed", size);
  if (rank == 0) ::raise(SIGKILL);

  // The store saw rank 0's connection close: rank 0 is gone, the store is not.
  raw->wait({"test/rank0-gone"});
  std::shared_ptr<TcpStore> fresh = agentClient(rank);  // a new connection after rank 0 died
  fresh->setString("test/survivor/" + std::to_string(rank), "here");
  barrier(*fresh, "test/after", size - 1);
  if (fresh->getString("test/survivor/" + std::to_string(rank)) != "here") die("lost a key");
  std::printf("rank %d: the store serves after rank 0 died\n", rank);
  std::fflush(stdout);

  // The survivors build a communicator of their own through it (what shrink will do).
  first.reset();
  second.reset();
  auto shrunk =
      Communicator::create(std::make_shared<PrefixStore>("test/shrunk", fresh), rank - 1, size - 1);
  checkAllReduce(*shrunk, "the survivors' communicator");
  std::printf("rank %d: survivors' communicator of %d ranks\n", rank, shrunk->size());
}

void restart() {
  const std::string attempt = env("TORCHELASTIC_RESTART_COUNT");
  auto comm = Communicator::fromEnvironment();
  checkAllReduce(*comm, "attempt's communicator");
  const int rank = comm->rank();
  std::shared_ptr<TcpStore> raw = agentClient(rank);
  const std::string owner = "/worker/attempt_" + attempt + "/gyre/owner/" + std::to_string(rank);
  if (!raw->check({owner})) die(owner + " is missing");
  std::printf("attempt %s rank %d: ok at %s\n", attempt.c_str(), rank,
              env("GYRE_AGENT_STORE").c_str());
  std::fflush(stdout);
  if (attempt == "0" && rank == 1) {
    barrier(*raw, "test/attempt0-done", comm->size());  // rank 0 read its result too
    std::fprintf(stderr, "rank 1: failing on purpose, attempt 0\n");
    std::exit(3);
  }
  if (attempt == "0") barrier(*raw, "test/attempt0-done", comm->size());
}

}  // namespace

int main(int argc, char** argv) {
  gRank = launcherRank();
  const std::string mode = argc > 1 ? argv[1] : "";
  try {
    if (mode == "outlive") {
      outlive();
    } else if (mode == "restart") {
      restart();
    } else {
      die("usage: agent_store_rank outlive|restart");
    }
  } catch (const std::exception& e) {
    die(e.what());
  }
  return 0;
}
