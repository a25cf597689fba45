// gyreCommInitWithStore (capi/gyre.h): a gyre::Store whose every call goes to the
// caller's callbacks (gyreStore_t), so gyre bootstraps through a store the host program
// already runs (torch's c10d PrefixStore over its TCPStore) instead of serving its own.
//
// Thread safety: as the callbacks are (the contract requires them to be thread-safe).
// Ownership: the CallbackStore is shared by the communicator and its splits; its
// destructor calls release(context) once, after the last of them is gone.
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "capi/gyre.h"
#include "capi/handles.h"
#include "ring/communicator.h"
#include "ring/options.h"
#include "store/store.h"

using gyre::ErrorCode;
using gyre::fail;

namespace {

class CallbackStore : public gyre::Store {
 public:
  explicit CallbackStore(const gyreStore_t& callbacks) : cb_(callbacks) {}
  ~CallbackStore() override {
    if (cb_.release) cb_.release(cb_.context);
  }

  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    char error[kErrorBytes] = "";
    check(cb_.set(cb_.context, key.c_str(), value.data(), value.size(), error, sizeof error),
          "set", key, error);
  }

  std::vector<uint8_t> get(const std::string& key) override {
    char error[kErrorBytes] = "";
    void* data = nullptr;
    size_t size = 0;
    gyreResult_t result = cb_.get(cb_.context, key.c_str(), &data, &size, error, sizeof error);
    // Owned before check() may throw, so a failing callback's buffer is freed too.
    std::unique_ptr<void, decltype(&std::free)> owned(data, &std::free);
    check(result, "get", key, error);
    if (size > 0 && data == nullptr) fail(ErrorCode::kInternal, "store get('{}') returned NULL", key);
    const uint8_t* bytes = static_cast<const uint8_t*>(data);
    return std::vector<uint8_t>(bytes, bytes + size);
  }

  int64_t add(const std::string& key, int64_t delta) override {
    char error[kErrorBytes] = "";
    long long result = 0;
    check(cb_.add(cb_.context, key.c_str(), delta, &result, error, sizeof error), "add", key,
          error);
    return result;
  }

  void wait(const std::vector<std::string>& keys) override {
    char error[kErrorBytes] = "";
    std::vector<const char*> names = cStrings(keys);
    check(cb_.wait(cb_.context, names.data(), names.size(), error, sizeof error), "wait",
          joined(keys), error);
  }

  bool check(const std::vector<std::string>& keys) override {
    char error[kErrorBytes] = "";
    std::vector<const char*> names = cStrings(keys);
    int ready = 0;
    check(cb_.check(cb_.context, names.data(), names.size(), &ready, error, sizeof error),
          "check", joined(keys), error);
    return ready != 0;
  }

 private:
  static constexpr size_t kErrorBytes = 1024;

  static void check(gyreResult_t result, const char* call, const std::string& key, char* error) {
    if (result == gyreSuccess) return;
    error[kErrorBytes - 1] = '\0';  // a callback that ignored errorSize cannot overrun us
    int code = gyre::capi::raw(result);
    ErrorCode kind = code > 0 && code <= gyreInternalError ? static_cast<ErrorCode>(code)
                                                           : ErrorCode::kRemoteError;
    fail(kind, "the caller's store failed {}('{}'): {}", call, key,
         error[0] ? error : gyreGetErrorString(result));
  }
  static std::vector<const char*> cStrings(const std::vector<std::string>& keys) {
    std::vector<const char*> out;
    out.reserve(keys.size());
    for (const std::string& key : keys) out.push_back(key.c_str());
    return out;
  }
  static std::string joined(const std::vector<std::string>& keys) {
    std::string out;
    for (const std::string& key : keys) out += (out.empty() ? "" : "', '") + key;
    return out;
  }

  const gyreStore_t cb_;
};

}  // namespace

extern "C" gyreResult_t gyreCommInitWithStore(gyreComm_t* comm, const gyreStore_t* store,
                                              int nranks, int rank, long long timeoutMs,
                                              const char* routeHost) {
  if (comm) *comm = nullptr;
  // Whatever fails below, release runs once: the CallbackStore owns it from here on.
  std::shared_ptr<CallbackStore> owned;
  return gyre::capi::guarded(nullptr, "gyreCommInitWithStore", [&] {
    if (store == nullptr) fail(ErrorCode::kInvalidArgument, "store is NULL");
    owned = std::make_shared<CallbackStore>(*store);
    gyre::capi::needOut(comm, "comm");
    if (!store->set || !store->get || !store->add || !store->wait || !store->check) {
      fail(ErrorCode::kInvalidArgument, "store has a NULL callback (set, get, add, wait and "
                                        "check are all required)");
    }
    if (nranks < 1) fail(ErrorCode::kInvalidArgument, "nranks {} must be >= 1", nranks);
    if (rank < 0 || rank >= nranks) {
      fail(ErrorCode::kInvalidArgument, "rank {} is outside [0, {})", rank, nranks);
    }
    if (timeoutMs < 0) fail(ErrorCode::kInvalidArgument, "timeoutMs {} is negative", timeoutMs);
    gyre::Options options = gyre::Options::fromEnvironment();
    if (timeoutMs > 0) options.timeout = std::chrono::milliseconds(timeoutMs);
    std::unique_ptr<gyre::Communicator> made =
        routeHost ? gyre::Communicator::create(std::move(owned), rank, nranks, options,
                                               routeHost)
                  : gyre::Communicator::create(std::move(owned), rank, nranks, options);
    *comm = gyre::capi::wrap(std::move(made));
  });
}
