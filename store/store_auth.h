// How a client and the TCP store authenticate each other (protocol version 3), right
// after the hellos of store/store_protocol.h and before any request:
//
//   client -> server  StoreAuthHello      rank (-1: not a rank), whether it has a secret, nonce C
//   server -> client  StoreAuthChallenge  mode, nonce S, macS = HMAC(K, "gyre-store-v3 server" | AuthHello | S)
//   client -> server  StoreAuthProof      macC = HMAC(K, "gyre-store-v3 client" | AuthHello | S)
//                                         (only when mode is kSecret)
//
// K = authKey(secret) (base/secret.h). mode kOpen: the store has no secret and serves
// anyone (macS zero, no proof); a client that has a secret refuses such a store, and a
// client without one refuses a store in kSecret mode, each with an error that says so.
// Either way the store learns of the mismatch (the flag; a zero proof) and records the
// rank, so that the job's other ranks name it instead of waiting for it.
// The client checks macS before it proves anything, so a listener without the secret
// (not the job's store) is refused. Fresh nonces on both sides and distinct labels make
// a recorded exchange useless for replay or reflection; the claimed rank is inside both
// MACs, so the store knows which rank an authenticated connection belongs to (it keeps
// each rank's own keys for it, store/tcp_store_server.h).
//
// Contract: pure functions (no I/O, no state); the parsers never read past `buffer`,
// compare MACs in constant time and follow store_protocol.h's convention: a value, or
// nullopt with *error empty (read more) or set (close the peer). libFuzzer entry points.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "base/crypto.h"

namespace gyre {

inline constexpr uint32_t kStoreModeOpen = 0;
inline constexpr uint32_t kStoreModeSecret = 1;

struct StoreAuthHello {
  std::array<char, 4> magic{'G', 'Y', 'A', 'U'};
  int32_t rank = -1;
  uint32_t flags = 0;  // kHasSecret: the client holds a secret (an open store records it)
  uint32_t reserved = 0;
  Nonce nonce{};
  static constexpr uint32_t kHasSecret = 1;
};
static_assert(sizeof(StoreAuthHello) == 48, "StoreAuthHello is part of the wire format");

struct StoreAuthChallenge {
  std::array<char, 4> magic{'G', 'Y', 'A', 'C'};
  uint32_t mode = kStoreModeOpen;
  Nonce nonce{};
  Mac mac{};
};
static_assert(sizeof(StoreAuthChallenge) == 72, "StoreAuthChallenge is part of the wire format");

struct StoreAuthProof {
  std::array<char, 4> magic{'G', 'Y', 'A', 'P'};
  uint32_t reserved = 0;
  Mac mac{};
};
static_assert(sizeof(StoreAuthProof) == 40, "StoreAuthProof is part of the wire format");

Mac storeServerMac(const Key& key, const StoreAuthHello& hello, const Nonce& serverNonce);
Mac storeClientMac(const Key& key, const StoreAuthHello& hello, const Nonce& serverNonce);

// Server side: the client's auth hello (its rank is any int32; the caller decides).
std::optional<StoreAuthHello> parseStoreAuthHello(std::span<const uint8_t> buffer,
                                                  size_t* consumed, std::string* error);
// Server side: the proof, checked against (`key`, `hello`, `serverNonce`); a wrong MAC is
// an error ("not signed with the job's secret").
std::optional<StoreAuthProof> parseStoreAuthProof(std::span<const uint8_t> buffer,
                                                  size_t* consumed, std::string* error,
                                                  const Key& key, const StoreAuthHello& hello,
                                                  const Nonce& serverNonce);
// Client side: the challenge's framing only (mode known, magic right); the caller checks
// the mode against its own secret and the MAC with storeServerMac.
std::optional<StoreAuthChallenge> parseStoreAuthChallenge(std::span<const uint8_t> buffer,
                                                          size_t* consumed, std::string* error);

}  // namespace gyre
