// The authenticated handshake of a pipe connection (tcp pipes and the rdma control
// link): which messages, what each MAC binds, and the pure checks of what a remote sent.
//
//   connector -> acceptor  Hello            commId, sender, receiver, channel, flags, nonce C
//   acceptor  -> connector HelloChallenge   status, nonce A, macA = HMAC(K, "gyre-pipe-v2 accept" | Hello | A)
//   connector -> acceptor  HelloProof       macC = HMAC(K, "gyre-pipe-v2 connect" | Hello | A)
//   acceptor  -> connector HelloReply       status 0: the pipe is open
//
// K = authKey(secret) (base/secret.h). Both nonces are fresh random per connection, so a
// recorded exchange is worthless later (replay), and the two MACs carry different labels,
// so neither side's MAC can be returned as the other's (reflection). The Hello's bytes,
// both ranks and the channel included, are inside both MACs. The connector checks macA
// before it sends anything that depends on K: a listener that does not know the secret
// (someone else at a rank's published address) learns nothing and gets no connection.
// Keys for sealed records (GYRE_ENCRYPT) are HKDF(K, salt = C | A, info = label | Hello),
// one per direction.
//
// Contract: pure functions (no I/O, no state); the check functions take bytes from a
// remote, never read past `n`, compare MACs in constant time (CRYPTO_memcmp) and return
// the reason on failure. They are libFuzzer entry points (fuzz/fuzz_handshake.cc).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "base/crypto.h"
#include "transport/wire.h"

namespace gyre {

struct HelloChallenge {
  std::array<char, 4> magic{'G', 'Y', 'C', 'H'};
  uint32_t status = 0;  // 0: go on; else the acceptor refused the Hello (its log says why)
  Nonce nonce{};        // the acceptor's
  Mac mac{};
};
static_assert(sizeof(HelloChallenge) == 72, "HelloChallenge is part of the wire format");

struct HelloProof {
  std::array<char, 4> magic{'G', 'Y', 'P', 'R'};
  uint32_t reserved = 0;
  Mac mac{};
};
static_assert(sizeof(HelloProof) == 40, "HelloProof is part of the wire format");

// The two directions of one connection: data flows connector -> acceptor (a send pipe
// to its receiver), statuses flow both ways.
struct ConnectionKeys {
  Key connectorToAcceptor{};
  Key acceptorToConnector{};
};

Mac acceptorMac(const Key& key, const Hello& hello, const Nonce& acceptorNonce);
Mac connectorMac(const Key& key, const Hello& hello, const Nonce& acceptorNonce);
ConnectionKeys deriveConnectionKeys(const Key& key, const Hello& hello, const Nonce& acceptorNonce);

// The connector's check of a challenge to `hello`: a refusal, wrong magic, or a MAC that
// the secret `key` did not make.
std::optional<std::string> checkChallenge(const void* bytes, size_t n, const Key& key,
                                          const Hello& hello, HelloChallenge* out);
// The acceptor's check of a proof for (`hello`, `acceptorNonce`).
std::optional<std::string> checkProof(const void* bytes, size_t n, const Key& key,
                                      const Hello& hello, const Nonce& acceptorNonce);

}  // namespace gyre
