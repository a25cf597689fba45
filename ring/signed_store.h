// SignedStore: a view of another store in which every value set is signed with the job's
// secret, and every value read must carry a valid signature.
//
// Why: the store a communicator bootstraps through may be open to anyone (torch's TCPStore
// under gyre_torch; gyre's own store without a secret). What a rank reads there decides
// whom it connects to (shared-memory segment paths, RDMA queue pair addresses, the
// measured link constants). With a secret, set(key, v) stores v followed by
// HMAC(K, "gyre-entry-v1" | key | v) (32 bytes), so a value cannot be forged, altered or
// moved to another key by anyone without the secret; get() checks and strips it, and a
// value that fails throws gyre::Error(kInvalidArgument) naming the key and the store
// (never the secret). add() counters are integers the store adds to atomically: they stay
// unsigned (an outsider can change a count, which can fail or stall creation, never make
// a rank connect to it). check(), wait() and addOnClose() pass through.
// Thread-safe as the inner store is.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/crypto.h"
#include "store/store.h"

namespace gyre {

class SignedStore : public Store {
 public:
  SignedStore(std::shared_ptr<Store> inner, const std::string& secret, std::string name);

  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::vector<uint8_t> get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override { return inner_->add(key, delta); }
  void wait(const std::vector<std::string>& keys) override { inner_->wait(keys); }
  bool check(const std::vector<std::string>& keys) override { return inner_->check(keys); }
  bool addOnClose(const std::string& key, int64_t delta) override {
    return inner_->addOnClose(key, delta);
  }
  std::chrono::milliseconds timeout() const override { return inner_->timeout(); }
  void setTimeout(std::chrono::milliseconds timeout) override { inner_->setTimeout(timeout); }

 private:
  Mac sign(const std::string& key, const uint8_t* value, size_t n) const;

  const std::shared_ptr<Store> inner_;
  const Key key_;
  const std::string name_;  // the store, for messages
};

// The keys under `prefix` in `store`, signed with `secret` when there is one: what a
// communicator publishes and reads (creation, the link probe, split, shrink, grow).
std::shared_ptr<Store> prefixedStore(std::shared_ptr<Store> store, const std::string& prefix,
                                     const std::string& secret);

}  // namespace gyre
