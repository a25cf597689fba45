// Store: the bootstrap key-value store through which ranks find each other (as torch's
// c10d::Store). Rank 0 serves one (TcpStore); every rank publishes its addresses and
// reads its peers'.
//
// Contract:
// - Keys are strings up to 4 KiB, values byte strings up to 64 MiB (the TCP store's
//   wire limits). A key, once set, stays; set() overwrites.
// - Every blocking call (get, wait) is bounded by timeout(): when it expires the call
//   throws gyre::Error(kTimeout) naming the key(s) and the store. Nothing waits forever.
// - add() is atomic across all clients of the store; the counter is stored as decimal
//   text (as torch does), so get() of an added key returns its digits.
// - Failures are gyre::Error (kTimeout, kRemoteError when the store went away,
//   kInvalidArgument for a key or value over the limits, kSystemError).
// - Thread-safe: any number of threads may call any method of one Store concurrently.
// PrefixStore shares another store under a key prefix so that several communicators
// (split, several groups) keep their keys apart; it keeps the inner store alive.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/export.h"

namespace gyre {

class GYRE_API Store {
 public:
  // torch's default store timeout; a communicator sets its own (GYRE_TIMEOUT).
  static constexpr std::chrono::milliseconds kDefaultTimeout{300 * 1000};

  explicit Store(std::chrono::milliseconds timeout = kDefaultTimeout) : timeout_(timeout) {}
  virtual ~Store() = default;
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  virtual void set(const std::string& key, const std::vector<uint8_t>& value) = 0;
  // Blocks until `key` exists (at most timeout()) and returns its value.
  virtual std::vector<uint8_t> get(const std::string& key) = 0;
  // Adds `delta` to the integer at `key` (0 if absent) and returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // Blocks until every key exists (at most timeout()).
  virtual void wait(const std::vector<std::string>& keys) = 0;
  // True when every key exists; never blocks on a key.
  virtual bool check(const std::vector<std::string>& keys) = 0;
  // Asks the store to add `delta` to `key` when this client's connection to it closes
  // (the process died, or the store object was destroyed): how the ranks of a join learn
  // that one of them is gone. False when this kind of store cannot (the default).
  virtual bool addOnClose(const std::string& key, int64_t delta) {
    (void)key;
    (void)delta;
    return false;
  }

  // Virtual so that a PrefixStore reports and changes the bound of the store that
  // actually waits (as torch's PrefixStore does).
  virtual std::chrono::milliseconds timeout() const { return timeout_.load(); }
  virtual void setTimeout(std::chrono::milliseconds timeout) { timeout_.store(timeout); }

  void setString(const std::string& key, const std::string& value) {
    set(key, std::vector<uint8_t>(value.begin(), value.end()));
  }
  std::string getString(const std::string& key) {
    std::vector<uint8_t> value = get(key);
    return std::string(value.begin(), value.end());
  }

 private:
  std::atomic<std::chrono::milliseconds> timeout_;
};

// Every key becomes "<prefix>/<key>" in `inner`. Thread-safe as `inner` is.
class GYRE_API PrefixStore : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> inner)
      : prefix_(std::move(prefix)), inner_(std::move(inner)) {}

  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    inner_->set(prefixed(key), value);
  }
  std::vector<uint8_t> get(const std::string& key) override { return inner_->get(prefixed(key)); }
  int64_t add(const std::string& key, int64_t delta) override {
    return inner_->add(prefixed(key), delta);
  }
  void wait(const std::vector<std::string>& keys) override { inner_->wait(prefixed(keys)); }
  bool check(const std::vector<std::string>& keys) override {
    return inner_->check(prefixed(keys));
  }
  bool addOnClose(const std::string& key, int64_t delta) override {
    return inner_->addOnClose(prefixed(key), delta);
  }

  std::chrono::milliseconds timeout() const override { return inner_->timeout(); }
  void setTimeout(std::chrono::milliseconds timeout) override { inner_->setTimeout(timeout); }

  const std::string& prefix() const { return prefix_; }
  const std::shared_ptr<Store>& inner() const { return inner_; }

 private:
  std::string prefixed(const std::string& key) const { return prefix_ + "/" + key; }
  std::vector<std::string> prefixed(const std::vector<std::string>& keys) const {
    std::vector<std::string> out;
    out.reserve(keys.size());
    for (const std::string& key : keys) out.push_back(prefixed(key));
    return out;
  }

  const std::string prefix_;
  const std::shared_ptr<Store> inner_;
};

}  // namespace gyre
