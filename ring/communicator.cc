#include "ring/communicator.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>

#include "base/error.h"
#include "base/launch_env.h"
#include "base/log.h"
#include "ring/communicator_impl.h"
#include "ring/host_identity.h"
#include "ring/join.h"
#include "ring/join_store.h"
#include "store/store.h"
#include "store/tcp_store.h"

// Creating communicators (from the environment or a store) and their accessors; the
// operations are in ring/communicator_calls.cc, the state in ring/communicator_impl.h.
namespace gyre {
namespace communicator_detail {

std::string randomToken() {
  unsigned char bytes[16] = {0};
  int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) failSystem(errno, "open /dev/urandom");
  ssize_t n = ::read(fd, bytes, sizeof(bytes));
  ::close(fd);
  if (n != static_cast<ssize_t>(sizeof(bytes))) fail(ErrorCode::kSystemError, "short read of /dev/urandom");
  std::string out;
  for (unsigned char b : bytes) out += fmt::format("{:02x}", b);
  return out;
}

}  // namespace communicator_detail

std::unique_ptr<Communicator> Communicator::fromEnvironment() {
  return fromEnvironment(optionsFromEnvironment());
}

Options Communicator::optionsFromEnvironment() {
  try {
    return Options::fromEnvironment();
  } catch (const Error& e) {
    // The other ranks would wait for this one: tell them why it will not come, through
    // the store, if it can be reached soon (best effort; the error is thrown regardless).
    LaunchEnv launch;
    try {
      launch = launchEnvFromProcess();
    } catch (const Error&) {
      throw e;  // the launcher's own variables are malformed too: this error first
    }
    const int rank = launch.launcher == Launcher::kNone ? -1 : launch.rank;
    const int size = launch.size;
    const int port = launch.masterPort;
    Error named(e.code(), fmt::format("rank {}: {}", rank, e.what()));
    if (rank >= 0 && rank < size && port >= 1 && port <= 65535) {
      try {
        Options quick;
        quick.joinTimeout = std::chrono::seconds(10);
        quick.joinProgressFirst = quick.joinTimeout;
        auto store = joinStore(launch.masterAddr, static_cast<uint16_t>(port),
                               rank, quick);
        Join::failBeforeCheckIn(*store, rank, size, quick, named);
      } catch (const Error&) {
      }
    }
    throw named;
  }
}

std::unique_ptr<Communicator> Communicator::fromEnvironment(const Options& options) {
  // The launcher's variables (torchrun/gyrerun, Open MPI, Slurm): base/launch_env.h.
  const LaunchEnv launch = launchEnvFromProcess();
  if (launch.launcher == Launcher::kNone) {
    fail(ErrorCode::kInvalidArgument,
         "no launcher found (RANK/WORLD_SIZE, OMPI_COMM_WORLD_*, SLURM_PROCID are unset): start "
         "the program with gyrerun (gyrerun -n 4 prog), torchrun, mpirun or srun, or set RANK "
         "and WORLD_SIZE by hand{}",
         launch.note.empty() ? "" : " (" + launch.note + ")");
  }
  const int rank = launch.rank, size = launch.size;
  log(LogLevel::kInfo, rank, "{}", launch.describe());
  const std::string host = launch.masterAddr;
  const int port = launch.masterPort;
  if (rank == 0 && launch.masterAddrFrom == "OMPI_MCA_orte_hnp_uri" &&
      localAddressToward(host) != host) {
    fail(ErrorCode::kInvalidArgument,
         "rank 0 does not run on mpirun's host ({}, from OMPI_MCA_orte_hnp_uri), where the "
         "other ranks look for its store: run mpirun on rank 0's host, or export "
         "MASTER_ADDR=<rank 0's host> to every rank (mpirun -x MASTER_ADDR=...)",
         host);
  }
  if (launch.newcomer) {
    // gyrerun --elastic restarted this rank: the running ranks shrank without it and
    // take it back in by their next grow, through the store gyrerun serves.
    if (storeLocationFromProcess(host, port).server != StoreServer::kAgent) {
      fail(ErrorCode::kInvalidArgument,
           "rank {}: GYRE_ELASTIC_NEWCOMER=1 (a rank restarted by gyrerun --elastic) needs "
           "the store gyrerun serves (GYRE_AGENT_STORE), which is unset: a store served by "
           "rank 0's process is gone with it. Run gyrerun --elastic without --no-agent-store",
           rank);
    }
    log(LogLevel::kInfo, rank, "restarted by gyrerun --elastic: joining the running ranks' next grow");
    std::shared_ptr<Store> store = joinStore(host, static_cast<uint16_t>(port), rank, options);
    return joinGrow(std::move(store), options, host);
  }
  std::shared_ptr<Store> store = joinStore(host, static_cast<uint16_t>(port), rank, options);
  return create(std::move(store), rank, size, options, host);
}

std::unique_ptr<Communicator> Communicator::create(std::shared_ptr<Store> store, int rank,
                                                   int size) {
  return create(std::move(store), rank, size, Options::fromEnvironment());
}

std::unique_ptr<Communicator> Communicator::create(std::shared_ptr<Store> store, int rank,
                                                   int size, const Options& options) {
  return create(std::move(store), rank, size, options, masterAddressFromEnvironment());
}

std::unique_ptr<Communicator> Communicator::create(std::shared_ptr<Store> store, int rank,
                                                   int size, const Options& options,
                                                   const std::string& routeHost) {
  if (!store) fail(ErrorCode::kInvalidArgument, "Communicator::create: null store");
  if (size < 1) fail(ErrorCode::kInvalidArgument, "communicator size {} must be >= 1", size);
  if (rank < 0 || rank >= size) {
    fail(ErrorCode::kInvalidArgument, "rank {} is outside [0, {})", rank, size);
  }
  std::string host;
  try {
    host = listenAddress(options.socketIfname, routeHost);
  } catch (const Error& e) {
    Error named(e.code(), fmt::format("rank {}: {}", rank, e.what()));
    Join::failBeforeCheckIn(*store, rank, size, options, named);
    throw named;
  }
  return std::unique_ptr<Communicator>(
      new Communicator(std::make_unique<Impl>(std::move(store), rank, size, options, host)));
}

Communicator::Communicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Communicator::~Communicator() = default;

int Communicator::rank() const { return impl_->rank_; }
int Communicator::size() const { return impl_->size_; }
const char* Communicator::allReduceAlgorithm(size_t bytes) const {
  return algoName(impl_->chooseAlgorithm(bytes));
}
const Options& Communicator::options() const { return impl_->options_; }
size_t Communicator::slotBytes() const { return impl_->slotBytes(); }

void Communicator::abort() { impl_->abortFromUser(false); }
void Communicator::revoke() { impl_->abortFromUser(true); }
int Communicator::failedRank() const { return impl_->failedRank(); }

std::unique_ptr<Communicator> Communicator::grow(int newSize) {
  return std::unique_ptr<Communicator>(new Communicator(impl_->grow(newSize)));
}

std::unique_ptr<Communicator> Communicator::joinGrow(std::shared_ptr<Store> store,
                                                     const Options& options,
                                                     const std::string& routeHost) {
  if (!store) fail(ErrorCode::kInvalidArgument, "Communicator::joinGrow: null store");
  const std::string host = listenAddress(options.socketIfname, routeHost);
  return std::unique_ptr<Communicator>(
      new Communicator(Impl::joinGrow(std::move(store), options, host)));
}

int Communicator::waitingNewcomers() {
  int64_t seen = impl_->newcomersSeen();
  if (size() > 1) allReduce(&seen, &seen, 1, DataType::kInt64, ReduceOp::kMin);
  return static_cast<int>(seen);
}

std::unique_ptr<Communicator> Communicator::shrink(const std::vector<int>& excluded,
                                                   ShrinkMode mode) {
  return std::unique_ptr<Communicator>(
      new Communicator(impl_->shrink(excluded, mode == ShrinkMode::kAbort)));
}

}  // namespace gyre
