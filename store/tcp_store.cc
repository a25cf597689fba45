#include "store/tcp_store.h"

#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "base/error.h"
#include "base/log.h"
#include "base/secret.h"
#include "store/store_auth.h"
#include "store/tcp_store_server.h"

namespace gyre {
namespace {

std::string describeDuration(std::chrono::milliseconds d) {
  if (d.count() >= 1000 && d.count() % 1000 == 0) return fmt::format("{} s", d.count() / 1000);
  return fmt::format("{} ms", d.count());
}

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// What holds a port that could not be bound: a gyre store answers the hello, another
// program does not (or not in the store's words).
std::string whoHolds(const SocketAddress& address) {
  try {
    const Clock::time_point deadline = Clock::now() + std::chrono::seconds(1);
    Fd fd = connectWithRetry(address, deadline);
    std::vector<uint8_t> hello = encodeStoreHello();
    writeExact(fd.get(), hello.data(), hello.size(), deadline);
    uint8_t theirs[kStoreHelloBytes];
    readExact(fd.get(), theirs, sizeof(theirs), deadline);
    size_t consumed = 0;
    std::string error;
    if (parseStoreHello(theirs, &consumed, &error)) {
      return "another gyre job's bootstrap store is running there (two jobs on one "
             "MASTER_PORT: give this job another port, or wait for the other to end)";
    }
  } catch (const Error&) {
  }
  return "another program holds it (choose another MASTER_PORT)";
}

std::string hostPort(const std::string& host, uint16_t port) {
  if (host.find(':') != std::string::npos) return fmt::format("[{}]:{}", host, port);
  return fmt::format("{}:{}", host, port);
}

std::string quoteKeys(const std::vector<std::string>& keys) {
  constexpr size_t kShown = 4;
  std::string out;
  for (size_t i = 0; i < keys.size() && i < kShown; ++i) {
    out += fmt::format("{}'{}'", i ? ", " : "", keys[i]);
  }
  if (keys.size() > kShown) out += fmt::format(" and {} more", keys.size() - kShown);
  return out;
}

// Designated initializers would read better, but g++ 12 -Wextra flags every omitted
// member of them.
StoreRequest makeRequest(StoreCommand command, std::vector<std::string> keys) {
  StoreRequest r;
  r.command = command;
  r.keys = std::move(keys);
  return r;
}
}  // namespace

TcpStore::TcpStore(SocketAddress address, std::string name, std::chrono::milliseconds timeout,
                   std::unique_ptr<TcpStoreServer> server, const std::string& secret, int rank)
    : Store(timeout),
      address_(address),
      name_(std::move(name)),
      server_(std::move(server)),
      secret_(!secret.empty()),
      key_(authKey(secret)),
      rank_(rank) {}

TcpStore::~TcpStore() {
  // Server first: its clients, other ranks included, see their connections close now.
  server_.reset();
}

std::shared_ptr<TcpStore> TcpStore::connect(const std::string& host, uint16_t port,
                                            std::chrono::milliseconds timeout,
                                            const std::string& secret, int rank,
                                            std::string* reason) {
  SocketAddress address;
  try {
    address = SocketAddress::resolve(host, port);
  } catch (const Error& e) {
    if (reason) *reason = e.what();
    throw Error(e.code(), fmt::format("could not reach the bootstrap store at {}: {}",
                                      hostPort(host, port), e.what()));
  }
  std::shared_ptr<TcpStore> store(
      new TcpStore(address, hostPort(host, port), timeout, nullptr, secret, rank));
  std::lock_guard<std::mutex> lock(store->mu_);
  store->connectLocked(Clock::now() + timeout, reason);
  return store;
}

std::shared_ptr<TcpStore> TcpStore::serve(const std::string& host, uint16_t port,
                                          std::chrono::milliseconds timeout,
                                          const std::string& secret) {
  Fd listening;
  SocketAddress address;
  int bindErrno = 0;
  try {
    address = SocketAddress::resolve(host, port);
    // Every rank connects at once: a backlog of 128 drops SYNs at a few hundred ranks,
    // and each drop costs a client a 1 s retransmission (the kernel caps it at somaxconn).
    listening = tryListenOn(address, &bindErrno, SOMAXCONN);
  } catch (const Error& e) {
    throw Error(e.code(), fmt::format("bootstrap store: {}", e.what()));
  }
  if (bindErrno == EADDRINUSE && port != 0) {
    fail(ErrorCode::kSystemError, "bootstrap store: port {} of {} is already in use: {}", port,
         host, whoHolds(address));
  }
  if (bindErrno == EADDRNOTAVAIL) {
    fail(ErrorCode::kSystemError,
         "bootstrap store: {} is not an address of this host, so rank 0 cannot serve the "
         "store there (MASTER_ADDR must be an address of the node that runs rank 0): bind {}: "
         "{}",
         host, address.toString(), std::strerror(bindErrno));
  }
  if (bindErrno != 0) {
    fail(ErrorCode::kSystemError, "bootstrap store: bind {}: {}", address.toString(),
         std::strerror(bindErrno));
  }
  return serveOn(std::move(listening), timeout, secret);
}

std::shared_ptr<TcpStore> TcpStore::serveOn(Fd listening, std::chrono::milliseconds timeout,
                                            const std::string& secret) {
  SocketAddress bound = SocketAddress::ofSocket(listening.get());
  // A wildcard bind is reached over loopback from this process.
  SocketAddress local = bound;
  if (bound.storage.ss_family == AF_INET) {
    auto* in = reinterpret_cast<sockaddr_in*>(&local.storage);
    if (in->sin_addr.s_addr == htonl(INADDR_ANY)) in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  } else if (bound.storage.ss_family == AF_INET6) {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&local.storage);
    if (IN6_IS_ADDR_UNSPECIFIED(&in6->sin6_addr)) in6->sin6_addr = in6addr_loopback;
  }
  auto server = std::make_unique<TcpStoreServer>(std::move(listening), secret);
  if (secret.empty()) noteOpenJob("the bootstrap store at " + bound.toString());
  std::shared_ptr<TcpStore> store(
      new TcpStore(local, bound.toString(), timeout, std::move(server), secret, -1));
  std::lock_guard<std::mutex> lock(store->mu_);
  store->connectLocked(Clock::now() + timeout);
  return store;
}

void TcpStore::connectLocked(Clock::time_point deadline, std::string* reason) {
  const Clock::time_point start = Clock::now();
  try {
    Fd fd = connectWithRetry(address_, deadline);
    setNoDelay(fd.get());
    std::vector<uint8_t> hello = encodeStoreHello();
    writeExact(fd.get(), hello.data(), hello.size(), deadline);
    uint8_t theirs[kStoreHelloBytes];
    readExact(fd.get(), theirs, sizeof(theirs), deadline);
    size_t consumed = 0;
    std::string error;
    std::optional<uint32_t> version = parseStoreHello(theirs, &consumed, &error);
    if (!version) fail(ErrorCode::kRemoteError, "the server's hello is invalid: {}", error);
    if (*version != kStoreProtocolVersion) {
      fail(ErrorCode::kRemoteError,
           "the store speaks protocol version {}, this client {} (mixed gyre builds?)", *version,
           kStoreProtocolVersion);
    }
    authenticate(fd.get(), deadline);
    fd_ = std::move(fd);
  } catch (const Error& e) {
    if (reason) *reason = e.what();
    throw Error(e.code(), fmt::format("could not reach the bootstrap store at {} in {:.1f} s: {}",
                                      name_, secondsSince(start), e.what()));
  }
}

void TcpStore::authenticate(int fd, Clock::time_point deadline) {
  StoreAuthHello hello;
  hello.rank = rank_;
  hello.flags = secret_ ? StoreAuthHello::kHasSecret : 0;
  hello.nonce = randomNonce();
  writeExact(fd, &hello, sizeof(hello), deadline);
  uint8_t bytes[sizeof(StoreAuthChallenge)];
  readExact(fd, bytes, sizeof(bytes), deadline);
  size_t consumed = 0;
  std::string error;
  std::optional<StoreAuthChallenge> challenge = parseStoreAuthChallenge(bytes, &consumed, &error);
  if (!challenge) fail(ErrorCode::kRemoteError, "the server's challenge is invalid: {}", error);
  if (challenge->mode == kStoreModeOpen && secret_) {
    fail(ErrorCode::kInvalidArgument,
         "the store asks for no secret, but this rank has one (GYRE_TOKEN / GYRE_TOKEN_FILE): "
         "the store's server (rank 0, or the launcher) was started without the job's secret, "
         "or this is not the job's store");
  }
  if (challenge->mode == kStoreModeSecret && !secret_) {
    // A proof that cannot pass: the store refuses it and records this rank (see above).
    const StoreAuthProof none;
    writeExact(fd, &none, sizeof(none), deadline);
    fail(ErrorCode::kInvalidArgument,
         "the store requires the job's secret and this process has none: set GYRE_TOKEN_FILE "
         "(or GYRE_TOKEN) as for the job's other ranks (gyrerun passes it to its ranks)");
  }
  if (challenge->mode == kStoreModeOpen) return;
  // A proof is sent even when the store's MAC is wrong, so that the store can record the
  // refused rank and the job's other ranks name it (ring/join.h).
  const bool storeKnowsSecret =
      equalMacs(challenge->mac, storeServerMac(key_, hello, challenge->nonce));
  StoreAuthProof proof;
  proof.mac = storeClientMac(key_, hello, challenge->nonce);
  writeExact(fd, &proof, sizeof(proof), deadline);
  if (!storeKnowsSecret) {
    fail(ErrorCode::kInvalidArgument,
         "the store holds another secret than this rank: this rank's GYRE_TOKEN / "
         "GYRE_TOKEN_FILE differs from the one the store's server (rank 0, or the launcher) "
         "was given (or this is not the job's store)");
  }
}

StoreReply TcpStore::exchange(const StoreRequest& request, StoreReplyType expected,
                              const std::string& what) {
  std::vector<uint8_t> message = encodeStoreRequest(request);  // checks limits first
  std::lock_guard<std::mutex> lock(mu_);
  if (!lost_.empty()) {
    failWith(ErrorCode::kRemoteError, ErrorCause::kStoreLost,
             "{}: the bootstrap store at {} is gone: {}", what, name_, lost_);
  }
  const std::chrono::milliseconds bound = timeout();
  const Clock::time_point deadline = Clock::now() + bound;
  if (!fd_) connectLocked(deadline);
  StoreReply reply;
  try {
    writeExact(fd_.get(), message.data(), message.size(), deadline);
    std::vector<uint8_t> buffer(4);
    readExact(fd_.get(), buffer.data(), 4, deadline);
    size_t consumed = 0;
    std::string error;
    parseStoreReply(buffer, &consumed, &error);  // checks the declared length
    if (!error.empty()) fail(ErrorCode::kRemoteError, "malformed reply: {}", error);
    uint32_t total = 0;
    std::memcpy(&total, buffer.data(), 4);
    buffer.resize(total);
    readExact(fd_.get(), buffer.data() + 4, total - 4, deadline);
    std::optional<StoreReply> parsed = parseStoreReply(buffer, &consumed, &error);
    if (!parsed) fail(ErrorCode::kRemoteError, "malformed reply: {}", error);
    reply = std::move(*parsed);
  } catch (const Error& e) {
    // The stream may hold a late reply: it cannot carry another request.
    fd_.reset();
    if (e.code() == ErrorCode::kTimeout) {
      const char* why = request.command == StoreCommand::kGet    ? "the key was not set"
                        : request.command == StoreCommand::kWait ? "not every key was set"
                                                                 : "the store did not answer";
      fail(ErrorCode::kTimeout, "{} timed out after {}: {} (bootstrap store at {})", what,
           describeDuration(bound), why, name_);
    }
    lost_ = e.what();
    failWith(e.code(), ErrorCause::kStoreLost,
             "{}: lost the connection to the bootstrap store at {}: {}", what, name_, e.what());
  }
  if (reply.type == StoreReplyType::kError) {
    fail(ErrorCode::kInvalidArgument, "{} refused by the bootstrap store at {}: {}", what, name_,
         reply.message);
  }
  if (reply.type != expected) {
    fd_.reset();
    lost_ = fmt::format("reply of type {} to {}", static_cast<int>(reply.type), what);
    failWith(ErrorCode::kRemoteError, ErrorCause::kStoreLost,
             "{}: the bootstrap store at {} sent a reply of the wrong type", what, name_);
  }
  return reply;
}

void TcpStore::set(const std::string& key, const std::vector<uint8_t>& value) {
  StoreRequest request = makeRequest(StoreCommand::kSet, {key});
  request.value = value;
  exchange(request, StoreReplyType::kOk, fmt::format("set('{}')", key));
}

std::vector<uint8_t> TcpStore::get(const std::string& key) {
  return exchange(makeRequest(StoreCommand::kGet, {key}), StoreReplyType::kValue,
                  fmt::format("get('{}')", key))
      .value;
}

int64_t TcpStore::add(const std::string& key, int64_t delta) {
  StoreRequest request = makeRequest(StoreCommand::kAdd, {key});
  request.delta = delta;
  return exchange(request, StoreReplyType::kInteger, fmt::format("add('{}', {})", key, delta))
      .integer;
}

void TcpStore::wait(const std::vector<std::string>& keys) {
  exchange(makeRequest(StoreCommand::kWait, keys), StoreReplyType::kOk,
           fmt::format("wait({})", quoteKeys(keys)));
}

bool TcpStore::addOnClose(const std::string& key, int64_t delta) {
  StoreRequest request = makeRequest(StoreCommand::kAddOnClose, {key});
  request.delta = delta;
  exchange(request, StoreReplyType::kOk, fmt::format("addOnClose('{}', {})", key, delta));
  return true;
}

bool TcpStore::check(const std::vector<std::string>& keys) {
  return exchange(makeRequest(StoreCommand::kCheck, keys), StoreReplyType::kBool,
                  fmt::format("check({})", quoteKeys(keys)))
      .flag;
}

}  // namespace gyre
