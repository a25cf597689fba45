#include "store/tcp_store_server.h"

#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <map>
#include <optional>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/error.h"
#include "base/log.h"
#include "base/secret.h"
#include "store/fd_limit.h"
#include "store/store_auth.h"
#include "store/store_protocol.h"

namespace gyre {
namespace {

constexpr int kNoRank = -1;  // the store runs before ranks are known

// epoll ids of the two descriptors that are not clients (client ids count up from 1).
constexpr uint64_t kStopId = UINT64_MAX;
constexpr uint64_t kListenId = UINT64_MAX - 1;
constexpr int kEventsPerWait = 256;

// Per poll round and client: bounds the time one client sending a large value keeps
// the others waiting, and how far its input runs ahead of the parser.
constexpr size_t kReadChunkBytes = 64 * 1024;
constexpr size_t kReadBudgetBytes = 1024 * 1024;
// Refused clients logged one by one; beyond that, one line per window with the count, so
// a client that retries without the secret cannot flood the log.
constexpr int kLoggedRefusals = 10;
constexpr std::chrono::seconds kRefusalWindow{10};
// Keys only the store writes: refusals are recorded here for the join to read.
constexpr std::string_view kReservedPrefix = "gyre/store/";
// After running out of file descriptors the listener stays readable; pausing it
// keeps the loop from spinning while clients already connected are served.
constexpr std::chrono::milliseconds kAcceptPause{100};

std::string describeDuration(std::chrono::milliseconds d) {
  if (d.count() >= 1000 && d.count() % 1000 == 0) return fmt::format("{} s", d.count() / 1000);
  return fmt::format("{} ms", d.count());
}

std::optional<int64_t> parseDecimal(const std::vector<uint8_t>& text) {
  const char* begin = reinterpret_cast<const char*>(text.data());
  const char* end = begin + text.size();
  int64_t v = 0;
  auto [ptr, ec] = std::from_chars(begin, end, v);
  if (text.empty() || ec != std::errc() || ptr != end) return std::nullopt;
  return v;
}

std::vector<uint8_t> toBytes(const std::string& s) { return {s.begin(), s.end()}; }

// Designated initializers would read better, but g++ 12 -Wextra flags every omitted
// member of them.
StoreReply makeReply(StoreReplyType type) {
  StoreReply r;
  r.type = type;
  return r;
}

StoreReply errorReply(std::string message) {
  StoreReply r = makeReply(StoreReplyType::kError);
  r.message = std::move(message);
  return r;
}
}  // namespace

// The store's server: one thread waiting in epoll on the listener, the clients and a
// stop eventfd (epoll, not poll: a round costs what is ready, not one entry per client,
// so 1,024+ clients stay cheap; docs/scaling.md). Sockets are non-blocking with an input and an output buffer per client;
// a get or wait whose keys are missing parks the client in waiters_ until a set or
// add of the key replies to it. A client that breaks the protocol is closed with a
// warning; the others are not affected. All state below stop_ belongs to the thread.
class TcpStoreServer::Loop {
 public:
  Loop(Fd listening, const std::string& secret)
      : listen_(std::move(listening)), secret_(!secret.empty()), key_(authKey(secret)) {
    int acceptsConnections = 0;
    socklen_t len = sizeof(acceptsConnections);
    if (::getsockopt(listen_.get(), SOL_SOCKET, SO_ACCEPTCONN, &acceptsConnections, &len) != 0 ||
        !acceptsConnections) {
      fail(ErrorCode::kInvalidArgument, "the store needs a listening socket; fd {} is not one",
           listen_.get());
    }
    setNonBlocking(listen_.get(), true);
    // One descriptor per client: the default soft limit (1,024) would cap the ranks.
    raiseFdLimit();
    stop_ = Fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!stop_) failSystem(errno, "eventfd");
    epoll_ = Fd(::epoll_create1(EPOLL_CLOEXEC));
    if (!epoll_) failSystem(errno, "epoll_create1");
    control(EPOLL_CTL_ADD, stop_.get(), kStopId, EPOLLIN);
    control(EPOLL_CTL_ADD, listen_.get(), kListenId, EPOLLIN);
    name_ = SocketAddress::ofSocket(listen_.get()).toString();
    thread_ = std::thread([this] { run(); });
  }

  ~Loop() {
    uint64_t one = 1;
    ssize_t ignored = ::write(stop_.get(), &one, sizeof(one));
    (void)ignored;  // an eventfd write only fails when the counter would overflow
    thread_.join();
    if (unloggedRefusals_ > 0) {
      log(LogLevel::kWarn, kNoRank, "bootstrap store at {}: refused {} more clients", name_,
          unloggedRefusals_);
    }
  }

  const std::string& name() const { return name_; }

 private:
  struct Client {
    Fd fd;
    std::string peer;  // "host:port", for log lines
    bool greeted = false;
    std::optional<StoreAuthHello> authHello;  // its authentication hello, once read
    Nonce nonce{};                            // ours, in the challenge
    bool authenticated = false;               // may send requests
    bool closeWhenFlushed = false;  // its hello was refused; tell it why, then close
    bool ended = false;  // it closed its side; closed here once its input is handled
    std::vector<uint8_t> in;
    std::vector<uint8_t> out;
    size_t outSent = 0;
    std::optional<StoreRequest> held;  // a get or wait waiting for its keys
    std::string heldOn;                // the key it is registered under in waiters_
    std::vector<std::pair<std::string, int64_t>> onClose;  // kAddOnClose: applied in close()
    bool watchingOut = false;  // registered for EPOLLOUT (output is pending)
  };

  void control(int op, int fd, uint64_t id, uint32_t events) {
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = id;
    if (::epoll_ctl(epoll_.get(), op, fd, &ev) != 0) failSystem(errno, "epoll_ctl");
  }

  // Level-triggered: EPOLLOUT only while output waits, or every wait would return at once.
  void watchOutput(uint64_t id) {
    auto it = clients_.find(id);
    if (it == clients_.end()) return;
    Client& c = it->second;
    const bool want = c.outSent < c.out.size();
    if (want == c.watchingOut) return;
    control(EPOLL_CTL_MOD, c.fd.get(), id, want ? (EPOLLIN | EPOLLOUT) : EPOLLIN);
    c.watchingOut = want;
  }

  void run() {
    try {
      loop();
    } catch (const std::exception& e) {
      // Only a failing poll() or allocation gets here. Closing every connection
      // (below) makes the clients fail now rather than at their timeouts.
      log(LogLevel::kError, kNoRank, "bootstrap store at {} stopped: {}", name_, e.what());
    }
    clients_.clear();
  }

  void loop() {
    epoll_event events[kEventsPerWait];
    std::vector<uint64_t> touched;
    bool listening = true;  // the listener is registered (not paused after EMFILE)
    for (;;) {
      const bool accepting = Clock::now() >= acceptPausedUntil_;
      if (accepting != listening) {
        // A listener paused after running out of descriptors stays readable: out of the
        // set until the pause ends, or the wait would spin.
        control(accepting ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, listen_.get(), kListenId, EPOLLIN);
        listening = accepting;
      }
      int rc = ::epoll_wait(epoll_.get(), events, kEventsPerWait,
                            accepting ? -1 : static_cast<int>(kAcceptPause.count()));
      if (rc < 0) {
        if (errno == EINTR) continue;
        failSystem(errno, "epoll_wait");
      }
      touched.clear();
      for (int i = 0; i < rc; ++i) {
        const uint64_t id = events[i].data.u64;
        const uint32_t revents = events[i].events;
        if (id == kStopId) return;
        if (id == kListenId) {
          acceptAll();
          continue;
        }
        if (clients_.count(id) == 0) continue;  // closed earlier in this round
        if ((revents & (EPOLLIN | EPOLLHUP | EPOLLERR)) && !receive(id)) continue;
        pump(id);
        auto it = clients_.find(id);
        if (it != clients_.end() && it->second.ended) {
          close(id, LogLevel::kInfo, "closed the connection");
          continue;
        }
        touched.push_back(id);
      }
      // Clients whose held get/wait a set just answered.
      while (!ready_.empty()) {
        uint64_t id = ready_.back();
        ready_.pop_back();
        if (clients_.count(id) != 0) pump(id);
        touched.push_back(id);
      }
      for (uint64_t id : touched) watchOutput(id);
    }
  }

  void acceptAll() {
    for (;;) {
      sockaddr_storage addr{};
      socklen_t len = sizeof(addr);
      int fd = ::accept4(listen_.get(), reinterpret_cast<sockaddr*>(&addr), &len,
                         SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO) continue;
        const int err = errno;
        log(LogLevel::kWarn, kNoRank, "bootstrap store at {}: accept failed ({}); retrying in {}{}",
            name_, std::strerror(err), describeDuration(kAcceptPause),
            err == EMFILE || err == ENFILE
                ? fmt::format(" ({} clients connected; {})", clients_.size(), [&] {
                    std::string why = fdLimitShortfall(clients_.size() + 64, "the store");
                    return why.empty() ? std::string("the system's descriptor limit is reached")
                                       : why;
                  }())
                : std::string());
        acceptPausedUntil_ = Clock::now() + kAcceptPause;
        return;
      }
      Client c;
      c.fd = Fd(fd);
      control(EPOLL_CTL_ADD, fd, nextId_, EPOLLIN);
      SocketAddress peer;
      std::memcpy(&peer.storage, &addr, len);
      peer.length = len;
      c.peer = peer.toString();
      try {
        setNoDelay(fd);
      } catch (const Error& e) {
        log(LogLevel::kWarn, kNoRank, "bootstrap store: client {}: {}", c.peer, e.what());
      }
      clients_.emplace(nextId_++, std::move(c));
    }
  }

  // Reads what has arrived; false when the client was closed.
  bool receive(uint64_t id) {
    Client& c = clients_.at(id);
    for (size_t budget = kReadBudgetBytes; budget > 0;) {
      size_t old = c.in.size();
      size_t chunk = std::min(kReadChunkBytes, budget);
      c.in.resize(old + chunk);
      ssize_t r = ::recv(c.fd.get(), c.in.data() + old, chunk, MSG_DONTWAIT);
      c.in.resize(old + static_cast<size_t>(std::max<ssize_t>(r, 0)));
      if (r > 0) {
        budget -= static_cast<size_t>(r);
        continue;
      }
      if (r == 0) {
        // What it sent before closing is handled first (pump(), then the loop closes it):
        // a rank that fails authentication sends its proof and leaves at once.
        c.ended = true;
        return true;
      }
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      // A reset is how a client that leaves with a reply unread says goodbye.
      LogLevel level = errno == ECONNRESET ? LogLevel::kInfo : LogLevel::kWarn;
      return close(id, level, fmt::format("receive failed: {}", std::strerror(errno)));
    }
    return true;
  }

  // Sends buffered output; false when the client was closed.
  bool flush(uint64_t id) {
    Client& c = clients_.at(id);
    while (c.outSent < c.out.size()) {
      ssize_t w = ::send(c.fd.get(), c.out.data() + c.outSent, c.out.size() - c.outSent,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w > 0) {
        c.outSent += static_cast<size_t>(w);
      } else if (w < 0 && errno == EINTR) {
        continue;
      } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        return true;
      } else {
        return close(id, LogLevel::kInfo, fmt::format("send failed: {}", std::strerror(errno)));
      }
    }
    c.out.clear();
    c.outSent = 0;
    return true;
  }

  // Flushes, then handles the complete requests buffered from one client, in order.
  // A client gets no new request handled while a reply to it is unsent or a request
  // of it is held: replies stay in request order and its output stays bounded.
  void pump(uint64_t id) {
    for (;;) {
      if (!flush(id)) return;
      Client& c = clients_.at(id);
      if (c.outSent < c.out.size()) break;
      if (c.closeWhenFlushed) {
        close(id, LogLevel::kInfo, "hello refused and answered");
        return;
      }
      if (c.held) break;
      size_t consumed = 0;
      std::string error;
      if (!c.greeted) {
        std::optional<uint32_t> version = parseStoreHello(c.in, &consumed, &error);
        if (!error.empty()) return (void)close(id, LogLevel::kWarn, "bad hello: " + error);
        if (!version) break;
        c.in.erase(c.in.begin(), c.in.begin() + static_cast<ptrdiff_t>(consumed));
        c.out = encodeStoreHello();  // ours, so that the client can report a mismatch too
        c.greeted = true;
        if (*version != kStoreProtocolVersion) {
          log(LogLevel::kWarn, kNoRank,
              "bootstrap store at {}: refusing client {}: it speaks protocol version {}, this "
              "store {} (mixed gyre builds?)",
              name_, c.peer, *version, kStoreProtocolVersion);
          c.closeWhenFlushed = true;
        }
        continue;
      }
      if (!c.authHello) {
        c.authHello = parseStoreAuthHello(c.in, &consumed, &error);
        if (!error.empty()) return (void)refuse(id, error);
        if (!c.authHello) break;
        c.in.erase(c.in.begin(), c.in.begin() + static_cast<ptrdiff_t>(consumed));
        StoreAuthChallenge challenge;
        challenge.nonce = c.nonce = randomNonce();
        if (secret_) {
          challenge.mode = kStoreModeSecret;
          challenge.mac = storeServerMac(key_, *c.authHello, c.nonce);
        } else {
          c.authenticated = true;  // an open store: anyone may ask
        }
        const auto* bytes = reinterpret_cast<const uint8_t*>(&challenge);
        c.out.insert(c.out.end(), bytes, bytes + sizeof(challenge));
        if (!secret_ && (c.authHello->flags & StoreAuthHello::kHasSecret)) {
          // It will refuse us (it holds a secret, this store none): record its rank so
          // that the ranks waiting for it name it (ring/join.h, checkRefusals).
          recordRefused(*c.authHello);
          log(LogLevel::kWarn, kNoRank,
              "bootstrap store at {}: client {} (rank {}) holds a secret and this store none: "
              "start every rank with the same GYRE_TOKEN / GYRE_TOKEN_FILE",
              name_, c.peer, c.authHello->rank);
        }
        continue;
      }
      if (!c.authenticated) {
        parseStoreAuthProof(c.in, &consumed, &error, key_, *c.authHello, c.nonce);
        if (!error.empty()) return (void)refuse(id, error);
        if (consumed == 0) break;
        c.in.erase(c.in.begin(), c.in.begin() + static_cast<ptrdiff_t>(consumed));
        c.authenticated = true;
        continue;
      }
      std::optional<StoreRequest> request = parseStoreRequest(c.in, &consumed, &error);
      if (!error.empty()) return (void)close(id, LogLevel::kWarn, "malformed request: " + error);
      if (!request) break;
      c.in.erase(c.in.begin(), c.in.begin() + static_cast<ptrdiff_t>(consumed));
      handle(id, std::move(*request));
    }
    // Only a client that sends ahead of its replies gets here with a full message
    // buffered; a real client waits for each reply.
    Client& c = clients_.at(id);
    if (c.in.size() >= kStoreMaxMessageBytes) {
      close(id, LogLevel::kWarn, fmt::format("sent {} bytes ahead of its replies", c.in.size()));
    }
  }

  void handle(uint64_t id, StoreRequest&& request) {
    Client& c = clients_.at(id);
    const bool writes = request.command == StoreCommand::kSet ||
                        request.command == StoreCommand::kAdd ||
                        request.command == StoreCommand::kAddOnClose;
    if (writes && request.keys.front().starts_with(kReservedPrefix)) {
      return reply(c, errorReply(fmt::format("keys under '{}' are written by the store only",
                                             kReservedPrefix)));
    }
    switch (request.command) {
      case StoreCommand::kSet: {
        const std::string& key = request.keys.front();  // the parser checked there is one
        data_[key] = std::move(request.value);
        reply(c, makeReply(StoreReplyType::kOk));
        wake(key);
        return;
      }
      case StoreCommand::kAdd: {
        int64_t sum = 0;
        std::string error = addTo(request.keys.front(), request.delta, &sum);
        if (!error.empty()) return reply(c, errorReply(std::move(error)));
        StoreReply r = makeReply(StoreReplyType::kInteger);
        r.integer = sum;
        reply(c, r);
        return;
      }
      case StoreCommand::kAddOnClose:
        c.onClose.emplace_back(std::move(request.keys.front()), request.delta);
        reply(c, makeReply(StoreReplyType::kOk));
        return;
      case StoreCommand::kCheck: {
        bool all = true;
        for (const std::string& k : request.keys) all = all && data_.count(k) != 0;
        StoreReply r = makeReply(StoreReplyType::kBool);
        r.flag = all;
        reply(c, r);
        return;
      }
      case StoreCommand::kGet:
      case StoreCommand::kWait:
        c.held = std::move(request);
        answerOrPark(id, c);
        return;
    }
  }

  // Adds `delta` to the integer at `key` (0 if absent) into *sum and wakes its waiters;
  // returns why it could not ("" when done).
  std::string addTo(const std::string& key, int64_t delta, int64_t* sum) {
    *sum = delta;
    auto it = data_.find(key);
    if (it != data_.end()) {
      std::optional<int64_t> old = parseDecimal(it->second);
      if (!old) {
        return fmt::format(
            "key '{}' holds {} bytes that are not a decimal integer, so it cannot be added to",
            key, it->second.size());
      }
      if (__builtin_add_overflow(*old, delta, sum)) {
        return fmt::format("adding {} to key '{}' (= {}) overflows int64", delta, key, *old);
      }
    }
    data_[key] = toBytes(std::to_string(*sum));
    wake(key);
    return "";
  }

  // Answers the held get/wait of `c` if its keys are all set; otherwise registers it
  // under the first missing key (one registration per client: a wait for n keys is
  // re-registered as they arrive, not n times up front).
  bool answerOrPark(uint64_t id, Client& c) {
    for (const std::string& key : c.held->keys) {
      if (data_.count(key) == 0) {
        waiters_[key].push_back(id);
        c.heldOn = key;
        return false;
      }
    }
    if (c.held->command == StoreCommand::kGet) {
      StoreReply r = makeReply(StoreReplyType::kValue);
      r.value = data_.at(c.held->keys[0]);
      reply(c, r);
    } else {
      reply(c, makeReply(StoreReplyType::kOk));
    }
    c.held.reset();
    c.heldOn.clear();
    return true;
  }

  void wake(const std::string& key) {
    auto it = waiters_.find(key);
    if (it == waiters_.end()) return;
    std::vector<uint64_t> ids = std::move(it->second);
    waiters_.erase(it);
    for (uint64_t id : ids) {
      auto c = clients_.find(id);
      if (c != clients_.end() && c->second.held && answerOrPark(id, c->second)) {
        ready_.push_back(id);  // flushed by the loop, not here: the caller is mid-pump
      }
    }
  }

  static void reply(Client& c, const StoreReply& r) {
    std::vector<uint8_t> bytes = encodeStoreReply(r);
    c.out.insert(c.out.end(), bytes.begin(), bytes.end());
  }

  // Closes a client that failed authentication (or broke its protocol): logged one by one
  // up to kLoggedRefusals, then as one count per kRefusalWindow. A rank it claimed is
  // recorded under "gyre/store/refused/<rank>" (the join names it when that rank never
  // arrives). Always false.
  bool refuse(uint64_t id, const std::string& why) {
    Client& c = clients_.at(id);
    const Clock::time_point now = Clock::now();
    if (loggedRefusals_ < kLoggedRefusals) {
      ++loggedRefusals_;
      log(LogLevel::kWarn, kNoRank, "bootstrap store at {}: refused client {}: {}{}", name_,
          c.peer, why,
          loggedRefusals_ == kLoggedRefusals ? " (further refusals are counted, not listed)" : "");
      refusalWindowStart_ = now;
    } else {
      ++unloggedRefusals_;
      if (now - refusalWindowStart_ >= kRefusalWindow) {
        log(LogLevel::kWarn, kNoRank, "bootstrap store at {}: refused {} more clients (the "
            "last: {}: {})", name_, unloggedRefusals_, c.peer, why);
        unloggedRefusals_ = 0;
        refusalWindowStart_ = now;
      }
    }
    if (c.authHello) recordRefused(*c.authHello);
    return close(id, LogLevel::kTrace, "refused: " + why);
  }

  // Counts a refusal of the rank `hello` claimed (none for -1 or an absurd rank).
  void recordRefused(const StoreAuthHello& hello) {
    if (hello.rank < 0 || hello.rank >= (1 << 24)) return;
    int64_t ignored = 0;
    addTo(fmt::format("{}refused/{}", kReservedPrefix, hello.rank), 1, &ignored);
    addTo(std::string(kReservedPrefix) + "refused", 1, &ignored);
  }

  // Always false, so that callers can `return close(...)`.
  bool close(uint64_t id, LogLevel level, const std::string& why) {
    Client& c = clients_.at(id);
    log(level, kNoRank, "bootstrap store at {}: closing client {}: {}", name_, c.peer, why);
    if (!c.heldOn.empty()) {
      auto it = waiters_.find(c.heldOn);
      if (it != waiters_.end()) {
        std::erase(it->second, id);
        if (it->second.empty()) waiters_.erase(it);
      }
    }
    // What the client asked for when it leaves (a rank that dies while joining). Taken
    // before the erase: the adds may wake other clients.
    std::vector<std::pair<std::string, int64_t>> onClose = std::move(c.onClose);
    clients_.erase(id);
    for (const auto& [key, delta] : onClose) {
      int64_t ignored = 0;
      std::string error = addTo(key, delta, &ignored);
      if (!error.empty()) log(LogLevel::kWarn, kNoRank, "bootstrap store at {}: {}", name_, error);
    }
    return false;
  }

  Fd listen_;
  const bool secret_;  // clients must prove they hold it
  const Key key_;
  int loggedRefusals_ = 0;
  long unloggedRefusals_ = 0;
  Clock::time_point refusalWindowStart_{};
  Fd stop_;
  Fd epoll_;
  std::string name_;
  std::thread thread_;

  std::map<uint64_t, Client> clients_;  // node-based: references survive other erases
  uint64_t nextId_ = 1;
  std::unordered_map<std::string, std::vector<uint8_t>> data_;
  std::unordered_map<std::string, std::vector<uint64_t>> waiters_;
  std::vector<uint64_t> ready_;
  Clock::time_point acceptPausedUntil_{};
};

TcpStoreServer::TcpStoreServer(Fd listening, const std::string& secret)
    : loop_(std::make_unique<Loop>(std::move(listening), secret)) {}
TcpStoreServer::~TcpStoreServer() = default;
const std::string& TcpStoreServer::name() const { return loop_->name(); }

}  // namespace gyre
