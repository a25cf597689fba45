#include "ring/communicator.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <set>
#include <mutex>

#include "base/error.h"
#include "base/log.h"
#include "ring/bootstrap.h"
#include "ring/collective.h"
#include "ring/failure_propagation.h"
#include "ring/host_identity.h"
#include "ring/reduce.h"
#include "ring/recursive_doubling.h"
#include "ring/ring_allreduce.h"
#include "ring/ring_broadcast.h"
#include "ring/stall_inspector.h"
#include "ring/store.h"
#include "ring/tcp_store.h"

namespace gyre {
namespace {

// Up to this size an all-reduce runs as recursive doubling, above it as the ring.
// gyre-bench, 4 ranks on 2 cores, 8 B .. 128 KiB: recursive doubling was faster at
// every size (shm 5.4 vs 9.1 us at 8 B, 40 vs 50 us at 128 KiB; tcp 32 vs 134 us at
// 8 B, 102 vs 212 us at 128 KiB). It moves log2(n) x S per rank against the ring's
// 2(n-1)/n x S, so the crossover falls as n grows; 64 KiB keeps 8 ranks on the safe side.
constexpr size_t kRecursiveDoublingMaxBytes = 64 * 1024;

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

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

// The k-th communicator a process creates on one store gets the key prefix
// "gyre/comm<k>"; ranks create communicators in the same order, so they agree.
std::string nextCommPrefix(const Store* store) {
  static std::mutex mu;
  static std::map<const Store*, int> counters;
  std::lock_guard<std::mutex> lock(mu);
  return fmt::format("gyre/comm{}", counters[store]++);
}

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

// The communicator's state. Collectives run on the caller's thread (run()); abort()
// may come from any other thread: what both touch is atomic or under abortMu_.
class Communicator::Impl {
 public:
  Impl(std::shared_ptr<Store> store, int rank, int size, const Options& options,
       const std::string& listenHost)
      : options_(options),
        rank_(rank),
        size_(size),
        store_(std::move(store)),
        inspector_(rank, size, options.stallWarn, options.timeout) {
    auto comm = std::make_shared<PrefixStore>(nextCommPrefix(store_.get()), store_);
    comm->setTimeout(options_.timeout);
    std::string token = options_.token;
    if (token.empty()) {
      if (rank_ == 0) comm->setString("token", randomToken());
      token = comm->getString("token");
    }
    BootstrapParams params;
    params.rank = rank_;
    params.size = size_;
    params.commId = fnv1a(token + "/" + comm->prefix());
    params.token = token;
    params.listenHost = listenHost;
    if (size_ > 1) {
      // The ring's neighbours, plus the partners of recursive doubling (small calls).
      std::set<int> peers = {(rank_ + 1) % size_, (rank_ + size_ - 1) % size_};
      for (int p : recursiveDoublingPeers(rank_, size_)) peers.insert(p);
      params.sendTo.assign(peers.begin(), peers.end());
      params.recvFrom.assign(peers.begin(), peers.end());
    }
    pipes_ = connectPeers(*comm, params, options_);
    for (auto& [peer, pipe] : pipes_.send) peerPipes_.send[peer] = pipe.get();
    for (auto& [peer, pipe] : pipes_.recv) peerPipes_.recv[peer] = pipe.get();
    if (size_ > 1) {
      ring_.left = pipes_.recv.at((rank_ + size_ - 1) % size_).get();
      ring_.right = pipes_.send.at((rank_ + 1) % size_).get();
    }
    std::vector<SendPipe*> send;
    std::vector<RecvPipe*> recv;
    for (auto& [peer, pipe] : pipes_.send) send.push_back(pipe.get());
    for (auto& [peer, pipe] : pipes_.recv) recv.push_back(pipe.get());
    inspector_.attach(std::move(send), std::move(recv));
    ring_.timeout = options_.timeout;
    ring_.spin = options_.spin;
    ring_.aborted = &aborted_;
    ring_.rank = rank_;
    ring_.inspector = &inspector_;
    log(LogLevel::kInfo, rank_, "communicator of {} ranks ready", size_);
  }

  ~Impl() {
    if (!aborted_.load()) {
      // Let the last slices reach the neighbours before the sockets close.
      try {
        auto bound = std::min<Clock::duration>(std::chrono::seconds(5), options_.timeout);
        WaitContext w{Clock::now() + bound, &aborted_, options_.spin};
        for (auto& [peer, pipe] : pipes_.send) pipe->flush(w);
      } catch (const Error& e) {
        log(LogLevel::kWarn, rank_, "closing: {}", e.what());
      }
    }
  }

  // Small calls are latency-bound: log2(n) exchanges beat the ring's 2(n-1) hops up to
  // kRecursiveDoublingMaxBytes (measured: see the constant).
  bool useRecursiveDoubling(const CollectiveCall& call) const {
    if (options_.algo == AlgoKind::kRing) return false;
    const size_t bytes = call.count * dtypeSize(call.dtype);
    if (options_.algo == AlgoKind::kRecursiveDoubling) {
      return recursiveDoublingFits(bytes, options_.slotBytes);
    }
    return bytes <= kRecursiveDoublingMaxBytes && recursiveDoublingFits(bytes, options_.slotBytes);
  }

  void run(CollectiveCall call, const void* sendbuf, void* recvbuf) {
    if (aborted_.load()) {
      call.seq = seq_.load();
      std::lock_guard<std::mutex> lock(abortMu_);
      fail(ErrorCode::kAborted, "rank {}: {} called on an aborted communicator{}", rank_,
           describe(call), firstError_.empty() ? "" : " (after: " + firstError_ + ")");
    }
    call.seq = seq_.fetch_add(1);
    inspector_.begin(call);
    try {
      if (size_ == 1) {
        runSingle(call, sendbuf, recvbuf);
      } else if (call.kind == CollectiveKind::kBroadcast) {
        ringBroadcast(ring_, rank_, size_, call, recvbuf);
      } else if (useRecursiveDoubling(call)) {
        recursiveDoublingAllReduce(ring_, peerPipes_, rank_, size_, call, sendbuf, recvbuf);
      } else {
        ringAllReduce(ring_, rank_, size_, call, sendbuf, recvbuf);
      }
      inspector_.end();
    } catch (const Error& e) {
      failCollective(call, e);
    } catch (const std::exception& e) {
      // Not gyre's own (bad_alloc, say), yet the pipes must still be closed before return.
      failCollective(call, Error(ErrorCode::kInternal, e.what()));
    }
  }

  // Names the failure, aborts (telling the neighbours) and throws the named error.
  [[noreturn]] void failCollective(const CollectiveCall& call, const Error& e) {
    std::string localAbort;
    {
      std::lock_guard<std::mutex> lock(abortMu_);
      localAbort = localAbortReason_;
    }
    Failure failure = classifyFailure(e, rank_, inspector_, localAbort);
    std::string message = failureMessage(rank_, call, inspector_.bytesSent(),
                                         inspector_.bytesReceived(), failure);
    log(LogLevel::kError, rank_, "{}", message);
    // Before returning: the pipes may still send from the caller's buffers.
    abortAll(abortNotice(failure, rank_, call.seq), message);
    throw Error(failure.code, message);
  }

  // Aborts: every later call fails, and every neighbour learns why (its pending waits
  // fail at once, naming the culprit). Idempotent; any thread.
  void abortAll(const PeerStatus& notice, const std::string& message) {
    std::lock_guard<std::mutex> lock(abortMu_);
    if (firstError_.empty()) firstError_ = message;
    aborted_.store(true);
    if (pipesClosed_) return;
    pipesClosed_ = true;
    // Forward first: the data direction is where every waiting rank listens.
    for (auto& [peer, pipe] : pipes_.send) pipe->publish(notice);
    for (auto& [peer, pipe] : pipes_.recv) pipe->publish(notice);
  }

  void abortFromUser() {
    std::string reason = fmt::format("abort() was called on rank {}", rank_);
    {
      std::lock_guard<std::mutex> lock(abortMu_);
      if (!localAbortReason_.empty()) return;
      localAbortReason_ = reason;
    }
    log(LogLevel::kWarn, rank_, "{}", reason);
    Failure failure;
    failure.code = ErrorCode::kAborted;
    failure.culprit = rank_;
    failure.reporter = rank_;
    failure.detail = reason;
    abortAll(abortNotice(failure, rank_, seq_.load()), reason);
  }

  void runSingle(const CollectiveCall& call, const void* sendbuf, void* recvbuf) {
    if (call.kind != CollectiveKind::kAllReduce || call.count == 0) return;
    if (call.op == ReduceOp::kAvg) {
      scaleCopy(recvbuf, nullptr, sendbuf, call.count, call.dtype, 1);
    } else if (sendbuf != recvbuf) {
      copy2(recvbuf, nullptr, sendbuf, call.count * dtypeSize(call.dtype));
    }
  }

  void validate(const char* what, const void* sendbuf, const void* recvbuf, size_t count,
                DataType dtype, ReduceOp op) const {
    if (!isValid(dtype)) {
      fail(ErrorCode::kInvalidArgument, "rank {}: {}: unknown dtype {}", rank_, what,
           static_cast<int>(dtype));
    }
    if (!isValid(op)) {
      fail(ErrorCode::kInvalidArgument, "rank {}: {}: unknown reduce op {}", rank_, what,
           static_cast<int>(op));
    }
    if (count > 0 && (sendbuf == nullptr || recvbuf == nullptr)) {
      fail(ErrorCode::kInvalidArgument, "rank {}: {}: null {} with count {}", rank_, what,
           sendbuf == nullptr ? "sendbuf" : "recvbuf", count);
    }
    if (count > (std::numeric_limits<size_t>::max() / 2) / dtypeSize(dtype)) {
      fail(ErrorCode::kInvalidArgument, "rank {}: {}: count {} is too large", rank_, what, count);
    }
  }

  Options options_;
  const int rank_;
  const int size_;
  std::shared_ptr<Store> store_;
  PipeSet pipes_;
  PrimitiveContext ring_;
  PeerPipes peerPipes_;
  StallInspector inspector_;
  std::atomic<bool> aborted_{false};
  std::atomic<uint32_t> seq_{0};  // written by the collective thread, read by abort()
  std::mutex abortMu_;            // serializes aborts; guards the three below
  std::string firstError_;
  std::string localAbortReason_;
  bool pipesClosed_ = false;
};

std::unique_ptr<Communicator> Communicator::fromEnvironment() {
  return fromEnvironment(Options::fromEnvironment());
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
  std::shared_ptr<Store> store;
  if (rank == 0) {
    store = TcpStore::serve(host, static_cast<uint16_t>(port), options.timeout);
  } else {
    store = TcpStore::connect(host, static_cast<uint16_t>(port), options.timeout);
  }
  std::string listenHost = listenAddress(options.socketIfname, host);
  return std::unique_ptr<Communicator>(new Communicator(
      std::make_unique<Impl>(std::move(store), rank, size, options, listenHost)));
}

std::unique_ptr<Communicator> Communicator::create(std::shared_ptr<Store> store, int rank,
                                                   int size) {
  return create(std::move(store), rank, size, Options::fromEnvironment());
}

std::unique_ptr<Communicator> Communicator::create(std::shared_ptr<Store> store, int rank,
                                                   int size, const Options& options) {
  if (!store) fail(ErrorCode::kInvalidArgument, "Communicator::create: null store");
  if (size < 1) fail(ErrorCode::kInvalidArgument, "communicator size {} must be >= 1", size);
  if (rank < 0 || rank >= size) {
    fail(ErrorCode::kInvalidArgument, "rank {} is outside [0, {})", rank, size);
  }
  std::string host = listenAddress(options.socketIfname, envOr("MASTER_ADDR", "127.0.0.1"));
  return std::unique_ptr<Communicator>(
      new Communicator(std::make_unique<Impl>(std::move(store), rank, size, options, host)));
}

Communicator::Communicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Communicator::~Communicator() = default;

int Communicator::rank() const { return impl_->rank_; }
int Communicator::size() const { return impl_->size_; }
const Options& Communicator::options() const { return impl_->options_; }

void Communicator::allReduce(const void* sendbuf, void* recvbuf, size_t count, DataType dtype,
                             ReduceOp op) {
  impl_->validate("allreduce", sendbuf, recvbuf, count, dtype, op);
  CollectiveCall call;
  call.kind = CollectiveKind::kAllReduce;
  call.dtype = dtype;
  call.op = op;
  call.count = count;
  impl_->run(call, sendbuf, recvbuf);
}

void Communicator::broadcast(void* buffer, size_t count, DataType dtype, int root) {
  impl_->validate("broadcast", buffer, buffer, count, dtype, ReduceOp::kSum);
  if (root < 0 || root >= size()) {
    fail(ErrorCode::kInvalidArgument, "rank {}: broadcast: root {} is outside [0, {})", rank(),
         root, size());
  }
  CollectiveCall call;
  call.kind = CollectiveKind::kBroadcast;
  call.dtype = dtype;
  call.count = count;
  call.root = root;
  impl_->run(call, buffer, buffer);
}

void Communicator::barrier() {
  // A one-byte ring all-reduce: nobody leaves before everyone's byte went round.
  uint8_t byte = 0;
  CollectiveCall call;
  call.kind = CollectiveKind::kBarrier;
  call.dtype = DataType::kUint8;
  call.op = ReduceOp::kMax;
  call.count = 1;
  impl_->run(call, &byte, &byte);
}

void Communicator::abort() { impl_->abortFromUser(); }

}  // namespace gyre
