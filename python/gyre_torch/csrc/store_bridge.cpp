#include "store_bridge.h"

#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "torch_compat.h"

namespace gyre_torch {
namespace {

struct Context {
  c10::intrusive_ptr<c10d::Store> store;
};

c10d::Store& storeOf(void* context) { return *static_cast<Context*>(context)->store; }

void copyError(const char* what, char* error, size_t errorSize) {
  if (error == nullptr || errorSize == 0) return;
  std::strncpy(error, what, errorSize - 1);
  error[errorSize - 1] = '\0';
}

// Runs body; a torch exception becomes a result code (torch_compat.h tells an expired wait
// from a failed store) and a message.
template <typename Body>
gyreResult_t guarded(char* error, size_t errorSize, Body&& body) noexcept {
  try {
    body();
    return gyreSuccess;
  } catch (const std::exception& e) {
    copyError(e.what(), error, errorSize);
    return storeWaitExpired(e) ? gyreTimeout : gyreRemoteError;
  } catch (...) {
    copyError("unknown exception from torch's store", error, errorSize);
    return gyreRemoteError;
  }
}

std::vector<std::string> keysOf(const char* const* keys, size_t count) {
  return std::vector<std::string>(keys, keys + count);
}

gyreResult_t storeSet(void* context, const char* key, const void* value, size_t size,
                      char* error, size_t errorSize) {
  return guarded(error, errorSize, [&] {
    const uint8_t* bytes = static_cast<const uint8_t*>(value);
    storeOf(context).set(key, std::vector<uint8_t>(bytes, bytes + size));
  });
}

gyreResult_t storeGet(void* context, const char* key, void** value, size_t* size, char* error,
                      size_t errorSize) {
  *value = nullptr;
  *size = 0;
  return guarded(error, errorSize, [&] {
    std::vector<uint8_t> data = storeOf(context).get(key);
    if (data.empty()) return;
    void* copy = std::malloc(data.size());
    if (copy == nullptr) throw std::bad_alloc();
    std::memcpy(copy, data.data(), data.size());
    *value = copy;
    *size = data.size();
  });
}

gyreResult_t storeAdd(void* context, const char* key, long long delta, long long* result,
                      char* error, size_t errorSize) {
  return guarded(error, errorSize, [&] { *result = storeOf(context).add(key, delta); });
}

gyreResult_t storeWait(void* context, const char* const* keys, size_t count, char* error,
                       size_t errorSize) {
  return guarded(error, errorSize, [&] { storeOf(context).wait(keysOf(keys, count)); });
}

gyreResult_t storeCheck(void* context, const char* const* keys, size_t count, int* ready,
                        char* error, size_t errorSize) {
  *ready = 0;
  return guarded(error, errorSize,
                 [&] { *ready = storeOf(context).check(keysOf(keys, count)) ? 1 : 0; });
}

void storeRelease(void* context) { delete static_cast<Context*>(context); }

gyreStore_t callbacksOf(const c10::intrusive_ptr<c10d::Store>& store) {
  gyreStore_t callbacks{};
  callbacks.context = new Context{store};
  callbacks.set = storeSet;
  callbacks.get = storeGet;
  callbacks.add = storeAdd;
  callbacks.wait = storeWait;
  callbacks.check = storeCheck;
  callbacks.release = storeRelease;
  return callbacks;
}

}  // namespace

gyreStore_t makeStoreCallbacks(const c10::intrusive_ptr<c10d::Store>& store) {
  // torch's FileStore creates its file on the first write, and its check() and get() wait
  // (up to the store's timeout, 30 min by default) for the file to appear: gyre's join
  // starts with a check, so on a fresh init_method="file://PATH" every rank would wait
  // for a file none of them writes. An add of 0 writes nothing but creates the file;
  // any other store just answers it.
  store->add("gyre/store-opened", 0);
  return callbacksOf(store);
}

gyreResult_t callThroughBridge(const c10::intrusive_ptr<c10d::Store>& store,
                               const std::string& op, const std::string& key,
                               std::string* error) {
  gyreStore_t cb = callbacksOf(store);
  char text[1024] = "";
  const char* keys[] = {key.c_str()};
  gyreResult_t result = gyreInvalidArgument;
  if (op == "set") {
    result = cb.set(cb.context, key.c_str(), "1", 1, text, sizeof text);
  } else if (op == "get") {
    void* value = nullptr;
    size_t size = 0;
    result = cb.get(cb.context, key.c_str(), &value, &size, text, sizeof text);
    std::free(value);
  } else if (op == "add") {
    long long sum = 0;
    result = cb.add(cb.context, key.c_str(), 1, &sum, text, sizeof text);
  } else if (op == "wait") {
    result = cb.wait(cb.context, keys, 1, text, sizeof text);
  } else if (op == "check") {
    int ready = 0;
    result = cb.check(cb.context, keys, 1, &ready, text, sizeof text);
  } else {
    copyError(("no store call " + op).c_str(), text, sizeof text);
  }
  cb.release(cb.context);
  *error = text;
  return result;
}

}  // namespace gyre_torch
