// libFuzzer target: the store's authentication messages (store/store_auth.h): the
// server's parsers of an auth hello and a proof, the client's parser of a challenge.
// Property: no crash, no read past the bytes; a message is returned only when a whole
// one arrived (*consumed = its size), never with an error; a proof only with the MAC the
// key makes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "store/store_auth.h"

namespace {

template <typename T>
void checkFraming(bool parsed, size_t consumed, const std::string& error, size_t size) {
  if (parsed && (consumed != sizeof(T) || size < consumed || !error.empty())) std::abort();
  if (!parsed && consumed != 0) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> bytes(data, size);
  static const gyre::Key key{};
  size_t consumed = 0;
  std::string error;
  auto hello = gyre::parseStoreAuthHello(bytes, &consumed, &error);
  checkFraming<gyre::StoreAuthHello>(hello.has_value(), consumed, error, size);

  consumed = 0;
  auto challenge = gyre::parseStoreAuthChallenge(bytes, &consumed, &error);
  checkFraming<gyre::StoreAuthChallenge>(challenge.has_value(), consumed, error, size);
  if (challenge && challenge->mode != gyre::kStoreModeOpen &&
      challenge->mode != gyre::kStoreModeSecret) {
    std::abort();
  }

  consumed = 0;
  gyre::StoreAuthHello forProof;
  forProof.rank = 3;
  gyre::Nonce nonce{};
  auto proof = gyre::parseStoreAuthProof(bytes, &consumed, &error, key, forProof, nonce);
  // A proof is only ever "incomplete" while fewer than its bytes arrived.
  if (!proof && error.empty() && size >= sizeof(gyre::StoreAuthProof)) std::abort();
  if (proof && proof->mac != gyre::storeClientMac(key, forProof, nonce)) std::abort();
  return 0;
}
