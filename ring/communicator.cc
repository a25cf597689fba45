#include "ring/communicator.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>

#include "base/error.h"
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

namespace {

const char* envOr(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return (v && *v) ? v : fallback;
}

int envInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  if (*end != '\0' || x < 0 || x > (1 << 30)) {
    fail(ErrorCode::kInvalidArgument, "{}='{}' is not a non-negative integer", name, v);
  }
  return static_cast<int>(x);
}

}  // namespace

std::unique_ptr<Communicator> Communicator::fromEnvironment() {
  return fromEnvironment(optionsFromEnvironment());
}

Options Communicator::optionsFromEnvironment() {
  try {
    return Options::fromEnvironment();
  } catch (const Error& e) {
    // The other ranks would wait for this one: tell them why it will not come, through
    // the store, if it can be reached soon (best effort; the error is thrown regardless).
    int rank = envInt("RANK", envInt("OMPI_COMM_WORLD_RANK", envInt("SLURM_PROCID", -1)));
    int size = envInt("WORLD_SIZE", envInt("OMPI_COMM_WORLD_SIZE", envInt("SLURM_NTASKS", -1)));
    int port = envInt("MASTER_PORT", 29500);
    Error named(e.code(), fmt::format("rank {}: {}", rank, e.what()));
    if (rank >= 0 && rank < size && port >= 1 && port <= 65535) {
      try {
        Options quick;
        quick.joinTimeout = std::chrono::seconds(10);
        quick.joinProgressFirst = quick.joinTimeout;
        auto store = joinStore(envOr("MASTER_ADDR", "127.0.0.1"), static_cast<uint16_t>(port),
                               rank, quick);
        Join::failBeforeCheckIn(*store, rank, size, quick, named);
      } catch (const Error&) {
      }
    }
    throw named;
  }
}

std::unique_ptr<Communicator> Communicator::fromEnvironment(const Options& options) {
  // torchrun's variables first, then mpirun's and Slurm's, so existing launchers work.
  int rank = envInt("RANK", envInt("OMPI_COMM_WORLD_RANK", envInt("SLURM_PROCID", -1)));
  int size = envInt("WORLD_SIZE", envInt("OMPI_COMM_WORLD_SIZE", envInt("SLURM_NTASKS", -1)));
  if (rank < 0 || size < 1) {
    fail(ErrorCode::kInvalidArgument,
         "RANK and WORLD_SIZE are not set: start the program with gyrerun (gyrerun -n 4 prog), "
         "torchrun or mpirun, or set them by hand");
  }
  if (rank >= size) {
    fail(ErrorCode::kInvalidArgument, "RANK={} is not below WORLD_SIZE={}", rank, size);
  }
  std::string host = envOr("MASTER_ADDR", "127.0.0.1");
  int port = envInt("MASTER_PORT", 29500);
  if (port < 1 || port > 65535) {
    fail(ErrorCode::kInvalidArgument, "MASTER_PORT={} is not a TCP port", port);
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
  return create(std::move(store), rank, size, options, envOr("MASTER_ADDR", "127.0.0.1"));
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
const Options& Communicator::options() const { return impl_->options_; }

void Communicator::abort() { impl_->abortFromUser(); }

}  // namespace gyre
