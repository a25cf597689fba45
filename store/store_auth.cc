#include "store/store_auth.h"

#include <cstring>
#include <string_view>

#include <fmt/format.h>

namespace gyre {
namespace {

constexpr std::string_view kServerLabel = "gyre-store-v3 server";
constexpr std::string_view kClientLabel = "gyre-store-v3 client";

// Copies a fixed-size message out of `buffer` once all of it has arrived; the caller
// sets *consumed once the message is also valid (never with an error).
template <typename T>
bool take(std::span<const uint8_t> buffer, T* out) {
  if (buffer.size() < sizeof(T)) return false;
  std::memcpy(out, buffer.data(), sizeof(T));
  return true;
}

// Wrong magic is visible from the first byte: garbage is refused before it is complete.
template <typename T>
bool magicSoFar(std::span<const uint8_t> buffer) {
  const T expected{};
  const size_t n = std::min(buffer.size(), expected.magic.size());
  return std::memcmp(buffer.data(), expected.magic.data(), n) == 0;
}

}  // namespace

Mac storeServerMac(const Key& key, const StoreAuthHello& hello, const Nonce& serverNonce) {
  return hmacSha256(key, {kServerLabel, Bytes(&hello, sizeof(hello)), serverNonce});
}

Mac storeClientMac(const Key& key, const StoreAuthHello& hello, const Nonce& serverNonce) {
  return hmacSha256(key, {kClientLabel, Bytes(&hello, sizeof(hello)), serverNonce});
}

std::optional<StoreAuthHello> parseStoreAuthHello(std::span<const uint8_t> buffer,
                                                  size_t* consumed, std::string* error) {
  error->clear();
  if (!magicSoFar<StoreAuthHello>(buffer)) {
    *error = "wrong magic in its authentication hello (not a gyre client of protocol 3)";
    return std::nullopt;
  }
  StoreAuthHello h;
  if (!take(buffer, &h)) return std::nullopt;
  *consumed = sizeof(h);
  return h;
}

std::optional<StoreAuthProof> parseStoreAuthProof(std::span<const uint8_t> buffer,
                                                  size_t* consumed, std::string* error,
                                                  const Key& key, const StoreAuthHello& hello,
                                                  const Nonce& serverNonce) {
  error->clear();
  if (!magicSoFar<StoreAuthProof>(buffer)) {
    *error = "wrong magic in its proof";
    return std::nullopt;
  }
  StoreAuthProof p;
  if (!take(buffer, &p)) return std::nullopt;
  if (p.reserved != 0) {
    *error = "malformed proof";
    return std::nullopt;
  }
  if (!equalMacs(p.mac, storeClientMac(key, hello, serverNonce))) {
    *error = fmt::format("claimed rank {}, but its proof is not signed with the job's secret "
                         "(no secret, another secret, or a replayed handshake)",
                         hello.rank);
    return std::nullopt;
  }
  *consumed = sizeof(p);
  return p;
}

std::optional<StoreAuthChallenge> parseStoreAuthChallenge(std::span<const uint8_t> buffer,
                                                          size_t* consumed, std::string* error) {
  error->clear();
  if (!magicSoFar<StoreAuthChallenge>(buffer)) {
    *error = "wrong magic in its authentication challenge";
    return std::nullopt;
  }
  StoreAuthChallenge c;
  if (!take(buffer, &c)) return std::nullopt;
  if (c.mode != kStoreModeOpen && c.mode != kStoreModeSecret) {
    *error = fmt::format("unknown authentication mode {}", c.mode);
    return std::nullopt;
  }
  *consumed = sizeof(c);
  return c;
}

}  // namespace gyre
