#include "capi/unique_id.h"

#include <sys/random.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "base/error.h"
#include "base/launch_env.h"
#include "store/tcp_store.h"

namespace gyre::capi {
namespace {

constexpr const char* kMagic = "gyre-id1";

std::string randomToken() {
  unsigned char bytes[16];
  size_t got = 0;
  while (got < sizeof(bytes)) {
    ssize_t n = ::getrandom(bytes + got, sizeof(bytes) - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      failSystem(errno, "gyreGetUniqueId: getrandom");
    }
    got += static_cast<size_t>(n);
  }
  std::string out;
  for (unsigned char b : bytes) out += fmt::format("{:02x}", b);
  return out;
}

bool isHexToken(const std::string& s) {
  if (s.size() != 32) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

// The servers started here, with the process that started each. Allocated once and never
// freed: entries inherited through fork() must never be destroyed in the child (their
// destructor would join a thread that does not exist there).
struct ServedStore {
  pid_t owner;
  std::shared_ptr<TcpStore> store;
};
struct Registry {
  std::mutex mu;
  std::vector<ServedStore> stores;
  bool atExitRegistered = false;  // inherited by fork() together with the handler
};

Registry& registry() {
  static Registry* r = new Registry;
  return *r;
}

// At exit: stop and join this process's servers before static destruction begins, so
// that no server thread outlives what it uses (the logger's options).
void stopOwnServers() {
  Registry& r = registry();
  // A child forked while another thread held the lock can never take it: leave all.
  std::unique_lock<std::mutex> lock(r.mu, std::try_to_lock);
  if (!lock.owns_lock()) return;
  const pid_t self = ::getpid();
  std::vector<std::shared_ptr<TcpStore>> mine;
  std::vector<ServedStore> kept;
  for (ServedStore& s : r.stores) {
    if (s.owner == self) {
      mine.push_back(std::move(s.store));
    } else {
      kept.push_back(std::move(s));
    }
  }
  r.stores = std::move(kept);
  lock.unlock();
  mine.clear();  // stops the threads and closes every connection
}

}  // namespace

void encode(const UniqueId& id, char* out) {
  std::string text = fmt::format("{} {} {} {}", kMagic, id.port, id.token, id.host);
  if (text.size() >= kUniqueIdBytes) {
    fail(ErrorCode::kInvalidArgument,
         "gyreGetUniqueId: the store address '{}' is too long for a gyreUniqueId ({} bytes)",
         id.host, kUniqueIdBytes);
  }
  std::memset(out, 0, kUniqueIdBytes);
  std::memcpy(out, text.data(), text.size());
}

UniqueId decode(const char* bytes) {
  const void* end = std::memchr(bytes, '\0', kUniqueIdBytes);
  std::string text(bytes, end ? static_cast<const char*>(end) - bytes : kUniqueIdBytes);
  std::vector<std::string> fields;
  size_t start = 0;
  while (start <= text.size()) {
    size_t space = text.find(' ', start);
    if (space == std::string::npos) space = text.size();
    fields.push_back(text.substr(start, space - start));
    start = space + 1;
  }
  UniqueId id;
  bool ok = end != nullptr && fields.size() == 4 && fields[0] == kMagic && isHexToken(fields[2]) &&
            !fields[3].empty();
  if (ok) {
    char* stop = nullptr;
    long port = std::strtol(fields[1].c_str(), &stop, 10);
    ok = !fields[1].empty() && *stop == '\0' && port >= 1 && port <= 65535;
    id.port = static_cast<uint16_t>(port);
  }
  if (!ok) {
    fail(ErrorCode::kInvalidArgument,
         "not a gyreUniqueId (fill it with gyreGetUniqueId on one rank and copy all {} "
         "bytes to the others)",
         kUniqueIdBytes);
  }
  id.token = fields[2];
  id.host = fields[3];
  return id;
}

UniqueId serveUniqueId(const Options& options) {
  UniqueId id;
  // MASTER_ADDR, else what the launcher says of rank 0's host (base/launch_env.h).
  id.host = masterAddressFromEnvironment();
  id.token = randomToken();
  char check[kUniqueIdBytes];
  encode(id, check);  // a host too long fails before a server starts
  std::shared_ptr<TcpStore> store = TcpStore::serve(id.host, 0, options.timeout, id.token);
  id.port = store->port();
  // Constructed before the handler is registered, so destroyed after it runs.
  (void)globalOptions();
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.stores.push_back(ServedStore{::getpid(), std::move(store)});
  if (!r.atExitRegistered) {
    r.atExitRegistered = true;
    std::atexit(stopOwnServers);
  }
  return id;
}

}  // namespace gyre::capi
