#include "transport/handshake.h"

#include <cstring>
#include <string_view>

#include <fmt/format.h>

namespace gyre {
namespace {

constexpr std::string_view kAcceptLabel = "gyre-pipe-v2 accept";
constexpr std::string_view kConnectLabel = "gyre-pipe-v2 connect";
constexpr std::string_view kForwardLabel = "gyre-pipe-v2 data connector->acceptor";
constexpr std::string_view kBackwardLabel = "gyre-pipe-v2 data acceptor->connector";

}  // namespace

Mac acceptorMac(const Key& key, const Hello& hello, const Nonce& acceptorNonce) {
  return hmacSha256(key, {kAcceptLabel, Bytes(&hello, sizeof(hello)), acceptorNonce});
}

Mac connectorMac(const Key& key, const Hello& hello, const Nonce& acceptorNonce) {
  return hmacSha256(key, {kConnectLabel, Bytes(&hello, sizeof(hello)), acceptorNonce});
}

ConnectionKeys deriveConnectionKeys(const Key& key, const Hello& hello,
                                    const Nonce& acceptorNonce) {
  std::array<uint8_t, 2 * kNonceBytes> salt;
  std::memcpy(salt.data(), hello.nonce.data(), kNonceBytes);
  std::memcpy(salt.data() + kNonceBytes, acceptorNonce.data(), kNonceBytes);
  auto info = [&](std::string_view label) {
    std::string s(label);
    s.append(reinterpret_cast<const char*>(&hello), sizeof(hello));
    return s;
  };
  ConnectionKeys k;
  k.connectorToAcceptor = hkdfSha256(key, salt, info(kForwardLabel));
  k.acceptorToConnector = hkdfSha256(key, salt, info(kBackwardLabel));
  return k;
}

std::optional<std::string> checkChallenge(const void* bytes, size_t n, const Key& key,
                                          const Hello& hello, HelloChallenge* out) {
  if (n != sizeof(HelloChallenge)) {
    return fmt::format("challenge of {} bytes, expected {}", n, sizeof(HelloChallenge));
  }
  HelloChallenge c;
  std::memcpy(&c, bytes, sizeof(c));
  if (c.magic != HelloChallenge{}.magic) return std::string("wrong magic (not a gyre rank)");
  if (c.status != 0) return fmt::format("it refused the connection (status {})", c.status);
  if (!equalMacs(c.mac, acceptorMac(key, hello, c.nonce))) {
    return std::string("its answer is not signed with this job's secret");
  }
  *out = c;
  return std::nullopt;
}

std::optional<std::string> checkProof(const void* bytes, size_t n, const Key& key,
                                      const Hello& hello, const Nonce& acceptorNonce) {
  if (n != sizeof(HelloProof)) {
    return fmt::format("proof of {} bytes, expected {}", n, sizeof(HelloProof));
  }
  HelloProof p;
  std::memcpy(&p, bytes, sizeof(p));
  if (p.magic != HelloProof{}.magic || p.reserved != 0) {
    return std::string("wrong magic in its proof");
  }
  if (!equalMacs(p.mac, connectorMac(key, hello, acceptorNonce))) {
    return std::string("its proof is not signed with this job's secret (no secret, another "
                       "secret, or a replayed handshake)");
  }
  return std::nullopt;
}

}  // namespace gyre
