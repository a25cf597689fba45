#include "ring/lazy_connector.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/error.h"
#include "base/log.h"
#include "base/secret.h"
#include "ring/transport_plan.h"
#include "transport/tcp/tcp_connector.h"

namespace gyre {
namespace {
constexpr auto kPoll = std::chrono::milliseconds(100);
}  // namespace

// One pair's pipes and the setup objects they may use (declared first: destroyed last).
struct LazyConnector::Pair {
  std::vector<std::unique_ptr<TransportSetup>> transports;
  std::unique_ptr<SendPipe> send;
  std::unique_ptr<RecvPipe> recv;
  std::string transport;
};

// Blocking I/O on a control connection in short polls, so that an abort or the
// connector's stop interrupts it; kTimeout at `deadline`, kRemoteError when it closes.
class PairControl {
 public:
  PairControl(int fd, int rank, int peer, const std::atomic<bool>* aborted,
          const std::atomic<bool>* stop, Clock::time_point deadline)
      : fd_(fd), rank_(rank), peer_(peer), aborted_(aborted), stop_(stop), deadline_(deadline) {}

  void write(const void* data, size_t n) {
    checkInterrupted();
    writeExact(fd_, data, n, deadline_);
  }
  void read(void* data, size_t n) {
    auto* p = static_cast<char*>(data);
    while (n > 0) {
      checkInterrupted();
      const auto now = Clock::now();
      if (now >= deadline_) {
        fail(ErrorCode::kTimeout, "rank {} did not answer", peer_);
      }
      if (!pollUntil(fd_, POLLIN, std::min(deadline_, now + kPoll))) continue;
      ssize_t r = ::recv(fd_, p, n, MSG_DONTWAIT);
      if (r < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
      if (r <= 0) {
        fail(ErrorCode::kRemoteError, "rank {} closed the connection ({})", peer_,
             r == 0 ? "end of stream" : std::strerror(errno));
      }
      p += r;
      n -= static_cast<size_t>(r);
    }
  }
  void writeU32(uint32_t v) { write(&v, sizeof(v)); }
  uint32_t readU32() {
    uint32_t v = 0;
    read(&v, sizeof(v));
    return v;
  }
  void checkInterrupted() const {
    if (aborted_ && aborted_->load()) {
      fail(ErrorCode::kAborted, "rank {}: the communicator was aborted while connecting to rank {}",
           rank_, peer_);
    }
    if (stop_ && stop_->load()) {
      fail(ErrorCode::kAborted, "rank {}: the communicator was closed while connecting to rank {}",
           rank_, peer_);
    }
  }
  Clock::time_point deadline() const { return deadline_; }
  int rank() const { return rank_; }
  int peer() const { return peer_; }
  int size = 0;  // the communicator's (notices' ranks are checked against it)

 private:
  int fd_;
 public:
  int fd() const { return fd_; }

 private:
  int rank_;
  int peer_;
  const std::atomic<bool>* aborted_;
  const std::atomic<bool>* stop_;
  Clock::time_point deadline_;
};

namespace {
// A crossed dial's repeat, while the winning dial has not arrived.
constexpr auto kRedial = std::chrono::milliseconds(500);
// A handshake's bytes come right after the connection; a silent client is dropped.
constexpr auto kHandshakeTimeout = std::chrono::seconds(5);
constexpr long kLoggedRefusals = 10;
constexpr auto kLinksTimeout = std::chrono::seconds(30);
// The largest exchange a pair's setup publishes (a few keys).
constexpr uint32_t kMaxExchangeBytes = 1 << 20;

// Each step of a pair's setup begins with a byte: kStepOk, or kStepAborted followed by
// the StatusRecord of the side's abort notice, so the other end relays the failure's
// origin as a pipe would instead of naming the peer that gave up.
constexpr uint8_t kStepOk = 1;
constexpr uint8_t kStepAborted = 3;

[[noreturn]] void throwRelayed(PairControl& control, int rank, int peer, int size) {
  StatusRecord record;
  control.read(&record, sizeof(record));
  PeerStatus status;
  if (auto why = checkStatusRecord(&record, sizeof(record), size, &status)) {
    fail(ErrorCode::kRemoteError, "rank {} sent a malformed abort notice: {}", peer, *why);
  }
  throw PeerAbortError(fmt::format("rank {}: connecting to rank {}: {}", rank, peer,
                                   describePeerAbort(peer, status)),
                       status);
}

void readStep(PairControl& control) {
  uint8_t step = 0;
  control.read(&step, 1);
  if (step == kStepAborted) throwRelayed(control, control.rank(), control.peer(), control.size);
  if (step != kStepOk) fail(ErrorCode::kRemoteError, "rank {} broke the setup's protocol", control.peer());
}

// A pair's SetupExchange over its control connection: publish buffers, swap() sends
// ours and receives theirs (the "segments" barrier of two), read() reads theirs.
class PairExchange final : public SetupExchange {
 public:
  explicit PairExchange(PairControl& control) : control_(control) {}
  void publish(const std::string& key, const std::string& value) override { mine_[key] = value; }
  std::string read(const std::string& key) override {
    auto it = theirs_.find(key);
    if (it == theirs_.end()) fail(ErrorCode::kInternal, "the peer did not publish '{}'", key);
    return it->second;
  }
  void checkAlarms() override { control_.checkInterrupted(); }

  void swap() {
    std::string out;
    for (const auto& [k, v] : mine_) {
      appendU32(out, static_cast<uint32_t>(k.size()));
      out += k;
      appendU32(out, static_cast<uint32_t>(v.size()));
      out += v;
    }
    const uint8_t ok = kStepOk;
    control_.write(&ok, 1);
    control_.writeU32(static_cast<uint32_t>(out.size()));
    control_.write(out.data(), out.size());
    readStep(control_);
    swapped_ = true;
    const uint32_t n = control_.readU32();
    if (n > kMaxExchangeBytes) fail(ErrorCode::kRemoteError, "an exchange of {} bytes", n);
    std::string in(n, '\0');
    control_.read(in.data(), n);
    size_t at = 0;
    auto take = [&](size_t len) {
      if (at + len > in.size()) fail(ErrorCode::kRemoteError, "a truncated exchange");
      std::string s = in.substr(at, len);
      at += len;
      return s;
    };
    auto takeU32 = [&] {
      uint32_t v = 0;
      std::memcpy(&v, take(sizeof(v)).data(), sizeof(v));
      return v;
    };
    while (at < in.size()) {
      std::string k = take(takeU32());
      theirs_[k] = take(takeU32());
    }
  }

 private:
  static void appendU32(std::string& out, uint32_t v) {
    out.append(reinterpret_cast<const char*>(&v), sizeof(v));
  }
  PairControl& control_;
 public:
  bool swapped_ = false;  // their frame is read

 private:
  std::map<std::string, std::string> mine_;
  std::map<std::string, std::string> theirs_;
};

std::string seconds(std::chrono::milliseconds ms) {
  return ms.count() % 1000 == 0 ? fmt::format("{} s", ms.count() / 1000)
                                : fmt::format("{:.1f} s", ms.count() / 1000.0);
}

}  // namespace

LazyConnector::LazyConnector(PipeSet& set, const Options& options, std::string listenHost,
                             const std::atomic<bool>* aborted)
    : rank_(set.env.rank),
      size_(set.env.size),
      options_(options),
      listenHost_(std::move(listenHost)),
      aborted_(aborted),
      claims_(set.claims),
      env_(set.env),
      key_(authKey(options.token)),
      listener_(std::move(set.listener)) {
  env_.options = &options_;
  env_.exchange = nullptr;
  if (!listener_) fail(ErrorCode::kInternal, "rank {}: no listener kept for later pipes", rank_);
  setNonBlocking(listener_.get(), true);
  wake_ = Fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));  // -1 on failure: poll ignores it
  acceptor_ = std::thread([this] { acceptLoop(); });
}

LazyConnector::~LazyConnector() {
  bool aborted = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    aborted = notice_.has_value();
  }
  // An aborted rank that goes answers the dials already waiting first, with its notice,
  // so that their ranks name the failure's origin, not this rank's exit (bounded).
  const auto until = Clock::now() + std::chrono::milliseconds(200);
  while (aborted && Clock::now() < until) {
    pollfd p{listener_.get(), POLLIN, 0};
    if (::poll(&p, 1, 0) <= 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  stop_.store(true);
  changed_.notify_all();
  if (wake_.get() >= 0) {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(wake_.get(), &one, sizeof(one));
  }
  if (acceptor_.joinable()) acceptor_.join();
  std::lock_guard<std::mutex> lock(mu_);
  pairs_.clear();
}

size_t LazyConnector::connectedPairs() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pairs_.size();
}

void LazyConnector::abort(const PeerStatus& notice) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!notice_) notice_ = notice;
  changed_.notify_all();
}

void LazyConnector::forEach(const std::function<void(SendPipe*)>& send,
                            const std::function<void(RecvPipe*)>& recv) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [peer, pair] : pairs_) {
    if (pair->send) send(pair->send.get());
    if (pair->recv) recv(pair->recv.get());
  }
}

std::pair<SendPipe*, RecvPipe*> LazyConnector::ensure(int peer, const std::string& what) {
  const auto deadline = Clock::now() + options_.timeout;
  auto named = [&](const std::string& why) {
    return fmt::format("rank {}: {} needed a pipe to rank {}, {}", rank_, what, peer, why);
  };
  std::unique_lock<std::mutex> lock(mu_);
  State& s = state_[peer];
  for (;;) {
    if (auto it = pairs_.find(peer); it != pairs_.end()) {
      return {it->second->send.get(), it->second->recv.get()};
    }
    if (!s.error.empty()) {
      std::string error = std::exchange(s.error, {});
      s.awaiting = false;
      throw Error(ErrorCode::kRemoteError, named("whose connection failed: " + error));
    }
    if (aborted_->load()) {
      fail(ErrorCode::kAborted, "{}", named("and the communicator was aborted meanwhile"));
    }
    if (!s.accepting && (!s.awaiting || Clock::now() >= s.redialAt)) {
      s.dialing = true;
      lock.unlock();
      Answer answer = Answer::kGo;
      try {
        answer = dial(peer, what, deadline);
      } catch (...) {
        lock.lock();
        s.dialing = false;
        throw;
      }
      lock.lock();
      s.dialing = false;
      // Crossed: the peer's dial wins and is coming. Already: the peer's dial won and our
      // acceptor is finishing that pair (the peer installs once both ends are done).
      if (answer != Answer::kGo && !s.accepting && !pairs_.count(peer)) {
        s.awaiting = true;
        s.redialAt = Clock::now() + kRedial;
      }
      continue;
    }
    if (Clock::now() >= deadline) {
      fail(ErrorCode::kTimeout, "{}",
           named(fmt::format("which did not answer within {} (GYRE_TIMEOUT)",
                             seconds(options_.timeout))));
    }
    ++s.waiters;
    changed_.wait_for(lock, kPoll);
    --s.waiters;
  }
}

LazyConnector::Answer LazyConnector::dial(int peer, const std::string& what,
                                          Clock::time_point deadline) {
  const std::string& address = claims_.at(static_cast<size_t>(peer)).address;
  auto named = [&](const std::string& why) {
    return fmt::format("rank {}: {} needed a pipe to rank {} (listening at {}), {}", rank_, what,
                       peer, address, why);
  };
  Fd fd;
  try {
    // A listener is there for the communicator's life: a refusal for 2 s means the process
    // is gone. SYNs left unanswered (every rank dialing one listener at once) are waited for.
    fd = connectWithRetry(SocketAddress::parse(address), deadline,
                          Clock::now() + std::chrono::seconds(2));
  } catch (const Error& e) {
    if (Clock::now() >= deadline)
      throw Error(ErrorCode::kTimeout,
                  named(fmt::format("which did not accept the connection within the timeout "
                                    "(GYRE_TIMEOUT) ({})", e.what())));
    throw Error(ErrorCode::kRemoteError,
                named(fmt::format("which refused the connection: its process is gone? ({})",
                                  e.what())));
  }
  PairControl control(fd.get(), rank_, peer, aborted_, &stop_, deadline);
  bool answered = false;  // its acceptor completed the handshake
  try {
    Hello hello;
    hello.commId = env_.commId;
    hello.sender = rank_;
    hello.receiver = peer;
    hello.channel = 0;
    hello.flags = options_.encrypt ? Hello::kEncrypt : 0;
    hello.nonce = randomNonce();
    control.write(&hello, sizeof(hello));
    std::array<uint8_t, sizeof(HelloChallenge)> buf{};
    control.read(buf.data(), buf.size());
    HelloChallenge challenge;
    if (auto why = checkChallenge(buf.data(), buf.size(), key_, hello, &challenge)) {
      fail(ErrorCode::kRemoteError, "its listener failed the handshake: {} (another "
           "GYRE_TOKEN, or not rank {}?)", *why, peer);
    }
    HelloProof proof;
    proof.mac = connectorMac(key_, hello, challenge.nonce);
    control.write(&proof, sizeof(proof));
    HelloReply reply;
    control.read(&reply, sizeof(reply));
    if (reply.magic != HelloReply{}.magic || reply.status != 0) {
      fail(ErrorCode::kRemoteError, "it refused our handshake (its log says why)");
    }
    uint8_t answer = 0;
    control.read(&answer, 1);
    answered = true;
    if (answer == static_cast<uint8_t>(Answer::kAborted)) {
      StatusRecord record;
      control.read(&record, sizeof(record));
      PeerStatus status;
      if (auto why = checkStatusRecord(&record, sizeof(record), size_, &status)) {
        fail(ErrorCode::kRemoteError, "it sent a malformed abort notice: {}", *why);
      }
      throw PeerAbortError(named(describePeerAbort(peer, status)), status);
    }
    if (answer != static_cast<uint8_t>(Answer::kGo)) return static_cast<Answer>(answer);
    install(peer, connectPair(fd.get(), peer, deadline));
    return Answer::kGo;
  } catch (const PeerAbortError&) {
    throw;
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kAborted) throw;
    if (e.code() == ErrorCode::kTimeout) {
      throw Error(ErrorCode::kTimeout,
                  named(fmt::format("which did not answer within {} (GYRE_TIMEOUT): {}",
                                    seconds(options_.timeout), e.what())));
    }
    if (!answered && e.code() == ErrorCode::kRemoteError) {
      throw Error(e.code(), named(fmt::format("which closed the connection before answering: "
                                              "its process is gone? ({})", e.what())));
    }
    throw Error(e.code(), named(fmt::format("and connecting failed: {}", e.what())));
  }
}

void LazyConnector::acceptLoop() {
  while (!stop_.load()) {
    pollfd p[2] = {{listener_.get(), POLLIN, 0}, {wake_.get(), POLLIN, 0}};
    int rc = ::poll(p, 2, static_cast<int>(kPoll.count()));
    if (rc <= 0 || (p[0].revents & POLLIN) == 0) continue;
    int fd = ::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    try {
      serve(Fd(fd));
    } catch (const std::exception& e) {
      // The first few one by one, as creation's listener logs refusals; then a count.
      if (stop_.load()) continue;
      if (++refusals_ <= kLoggedRefusals) {
        log(LogLevel::kWarn, rank_, "a connection on first use failed or was refused: {}",
            e.what());
      }
    }
  }
  if (refusals_ > kLoggedRefusals) {
    log(LogLevel::kWarn, rank_, "refused {} more connections (not logged one by one)",
        refusals_ - kLoggedRefusals);
  }
}

void LazyConnector::serve(Fd fd) {
  // The handshake: a stray or silent client is dropped within kHandshakeTimeout.
  // Not interrupted by an abort: an aborted rank still answers, with its notice.
  PairControl hs(fd.get(), rank_, -1, nullptr, &stop_, Clock::now() + kHandshakeTimeout);
  Hello hello;
  hs.read(&hello, sizeof(hello));
  HelloExpectation expect;
  expect.commId = env_.commId;
  expect.receiver = rank_;
  expect.worldSize = size_;
  expect.flags = options_.encrypt ? Hello::kEncrypt : 0;
  expect.channels = 1;
  Hello checked;
  if (auto why = checkHello(&hello, sizeof(hello), expect, &checked)) {
    fail(ErrorCode::kRemoteError, "refused: {}", *why);
  }
  const int peer = checked.sender;
  if (peer == rank_) fail(ErrorCode::kRemoteError, "refused: a Hello from this rank itself");
  HelloChallenge challenge;
  challenge.nonce = randomNonce();
  challenge.mac = acceptorMac(key_, hello, challenge.nonce);
  hs.write(&challenge, sizeof(challenge));
  HelloProof proof;
  hs.read(&proof, sizeof(proof));
  if (auto why = checkProof(&proof, sizeof(proof), key_, hello, challenge.nonce)) {
    fail(ErrorCode::kRemoteError, "refused rank {}'s connection: {}", peer, *why);
  }
  HelloReply reply;
  hs.write(&reply, sizeof(reply));

  Answer answer = Answer::kGo;
  StatusRecord notice;
  {
    std::lock_guard<std::mutex> lock(mu_);
    State& s = state_[peer];
    if (notice_) {
      answer = Answer::kAborted;
      notice = encodeStatus(*notice_);
    } else if (pairs_.count(peer)) {
      answer = Answer::kAlready;
    } else if (s.dialing && rank_ < peer) {
      answer = Answer::kCrossed;  // ours wins: the lower rank's dial
    } else {
      s.accepting = true;
      s.awaiting = false;
    }
  }
  const uint8_t a = static_cast<uint8_t>(answer);
  hs.write(&a, 1);
  if (answer == Answer::kAborted) hs.write(&notice, sizeof(notice));
  if (answer != Answer::kGo) return;
  try {
    install(peer, connectPair(fd.get(), peer, Clock::now() + options_.timeout));
  } catch (const Error& e) {
    std::lock_guard<std::mutex> lock(mu_);
    State& s = state_[peer];
    s.accepting = false;
    if (s.waiters > 0 || s.awaiting) s.error = e.what();
    changed_.notify_all();
    throw;
  }
}

void LazyConnector::install(int peer, std::unique_ptr<Pair> pair) {
  log(LogLevel::kInfo, rank_, "peer rank {}: {} (connected on first use)", peer, pair->transport);
  std::lock_guard<std::mutex> lock(mu_);
  State& s = state_[peer];
  s.accepting = false;
  s.awaiting = false;
  pairs_[peer] = std::move(pair);
  changed_.notify_all();
}

void LazyConnector::explainFailure(PairControl& control, bool swapped) {
  if (aborted_->load()) {
    // Ours: the peer learns where it came from (best effort; abortAll sets the notice
    // just after the flag).
    std::unique_lock<std::mutex> lock(mu_);
    changed_.wait_for(lock, kPoll, [&] { return notice_.has_value(); });
    if (!notice_) return;
    const StatusRecord record = encodeStatus(*notice_);
    lock.unlock();
    std::string bytes(1, static_cast<char>(kStepAborted));
    bytes.append(reinterpret_cast<const char*>(&record), sizeof(record));
    ssize_t ignored = ::send(control.fd(), bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)ignored;
    return;
  }
  // Theirs, perhaps: a peer that aborted meanwhile said so on the control connection.
  try {
    PairControl late(control.fd(), rank_, control.peer(), nullptr, &stop_, Clock::now() + kPoll * 3);
    late.size = size_;
    uint8_t step = 0;
    late.read(&step, 1);
    if (step == kStepOk && !swapped) {  // their exchange, not read yet
      const uint32_t n = late.readU32();
      if (n > kMaxExchangeBytes) return;
      std::string skip(n, '\0');
      late.read(skip.data(), n);
      late.read(&step, 1);
    }
    if (step == kStepAborted) throwRelayed(late, rank_, control.peer(), size_);
  } catch (const PeerAbortError&) {
    throw;
  } catch (const Error&) {
    // Nothing more to learn: the caller's error stands.
  }
}

std::unique_ptr<LazyConnector::Pair> LazyConnector::connectPair(int fd, int peer,
                                                               Clock::time_point deadline) {
  PairControl control(fd, rank_, peer, aborted_, &stop_, deadline);
  control.size = size_;
  PairExchange exchange(control);
  SetupEnv env = env_;
  env.deadline = deadline;
  env.receivePipes = 1;
  env.exchange = &exchange;

  auto pair = std::make_unique<Pair>();
  pair->transports = registeredTransports();
  // The same choice as creation's, from the same claims (ring/transport_plan.h).
  const TransportPlan plan =
      planTransports(pair->transports, claims_, rank_, {peer}, options_.transport);
  pair->transport = plan.peers.at(peer).transport;
  TransportSetup* t = nullptr;
  for (auto& candidate : pair->transports) {
    if (pair->transport == candidate->name()) t = candidate.get();
  }
  if (!t) fail(ErrorCode::kInternal, "rank {}: no transport {}", rank_, pair->transport);
  try {
    t->offer(env);  // opens what the transport needs (rdma: the device)
    const int count = t->linksPerPipe(options_);
    Fd linkListener;
    if (count > 0) {
      // The pair's links meet on a listener of their own, so the long-lived one only
      // ever sees control connections.
      linkListener = listenOn(SocketAddress::resolve(listenHost_, 0));
      if (!options_.tcpCongestion.empty()) {
        setCongestionControl(linkListener.get(), options_.tcpCongestion);
      }
      exchange.publish("links", SocketAddress::ofSocket(linkListener.get()).toString());
    }
    t->prepare(env, {peer}, {peer});
    exchange.swap();
    PeerLinks links;
    if (count > 0) {
      TcpPipeEndpoints ep;
      ep.self = rank_;
      ep.worldSize = size_;
      ep.commId = env_.commId;
      ep.key = key_;
      ep.encrypt = options_.encrypt;
      ep.channels = count;
      ep.sendTo.emplace(peer, SocketAddress::parse(exchange.read("links")));
      ep.recvFrom.push_back(peer);
      control.checkInterrupted();
      // Both ends are here, so the links form at once; a peer that died meanwhile is
      // not waited for long (connectPipes is not interrupted by an abort).
      TcpConnections conns = connectPipes(
          linkListener.get(), ep, std::min(deadline, Clock::now() + kLinksTimeout));
      links.out = std::move(conns.out[peer]);
      links.in = std::move(conns.in[peer]);
      links.outKeys = std::move(conns.outKeys[peer]);
      links.inKeys = std::move(conns.inKeys[peer]);
    }
    PipePair pipes = t->connect(env, peer, std::move(links));
    // The "connected" barrier of two: names (shm) go once both ends opened them.
    const uint8_t ok = kStepOk;
    control.write(&ok, 1);
    readStep(control);
    t->finish();
    pair->send = std::move(pipes.send);
    pair->recv = std::move(pipes.recv);
  } catch (const PeerAbortError&) {
    t->abandon();
    throw;
  } catch (const Error&) {
    t->abandon();
    explainFailure(control, exchange.swapped_);
    throw;
  }
  if (!pair->send || !pair->recv) {
    fail(ErrorCode::kInternal, "rank {}: the {} pipes to rank {} are incomplete", rank_,
         pair->transport, peer);
  }
  return pair;
}

}  // namespace gyre
