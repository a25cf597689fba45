#include "ring/signed_store.h"

#include <string_view>

#include "base/error.h"
#include "base/secret.h"
#include "ring/join.h"  // describeStore

namespace gyre {

SignedStore::SignedStore(std::shared_ptr<Store> inner, const std::string& secret, std::string name)
    : inner_(std::move(inner)), key_(authKey(secret)), name_(std::move(name)) {}

Mac SignedStore::sign(const std::string& key, const uint8_t* value, size_t n) const {
  // The key's length first, so that (key, value) pairs cannot be re-split.
  const uint64_t keyBytes = key.size();
  return hmacSha256(key_, {std::string_view("gyre-entry-v1"), Bytes(&keyBytes, sizeof(keyBytes)),
                           key, Bytes(value, n)});
}

void SignedStore::set(const std::string& key, const std::vector<uint8_t>& value) {
  std::vector<uint8_t> signedValue = value;
  const Mac mac = sign(key, value.data(), value.size());
  signedValue.insert(signedValue.end(), mac.begin(), mac.end());
  inner_->set(key, signedValue);
}

std::vector<uint8_t> SignedStore::get(const std::string& key) {
  std::vector<uint8_t> value = inner_->get(key);
  const size_t n = value.size() >= kMacBytes ? value.size() - kMacBytes : 0;
  const Mac want = sign(key, value.data(), n);
  if (value.size() < kMacBytes || !equalMacs(value.data() + n, want.data(), kMacBytes)) {
    fail(ErrorCode::kInvalidArgument,
         "the entry '{}' in the store at {} is not signed with the job's secret: someone "
         "without the secret wrote or rewrote it (or a rank without the secret did). "
         "Refusing to use it",
         key, name_);
  }
  value.resize(n);
  return value;
}

std::shared_ptr<Store> prefixedStore(std::shared_ptr<Store> store, const std::string& prefix,
                                     const std::string& secret) {
  std::shared_ptr<Store> scoped = std::make_shared<PrefixStore>(prefix, store);
  if (secret.empty()) return scoped;
  return std::make_shared<SignedStore>(std::move(scoped), secret, describeStore(*store));
}

}  // namespace gyre
