// libFuzzer target: the authenticated pipe handshake (transport/handshake.h): the
// connector's check of a challenge and the acceptor's check of a proof, on any bytes.
// Property: no crash and no read past the bytes; a challenge or proof is accepted only
// when it carries the MAC that the key makes for this Hello and nonce.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "transport/handshake.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const gyre::Key key = [] {
    gyre::Key k{};
    for (size_t i = 0; i < k.size(); ++i) k[i] = static_cast<uint8_t>(i * 7 + 1);
    return k;
  }();
  gyre::Hello hello;
  hello.commId = 42;
  hello.sender = 0;
  hello.receiver = 1;
  gyre::HelloChallenge challenge;
  if (!gyre::checkChallenge(data, size, key, hello, &challenge)) {
    if (size != sizeof(gyre::HelloChallenge) || challenge.status != 0 ||
        challenge.mac != gyre::acceptorMac(key, hello, challenge.nonce)) {
      std::abort();
    }
  }
  gyre::Nonce nonce{};
  if (size >= sizeof(gyre::Nonce)) std::memcpy(nonce.data(), data, nonce.size());
  if (!gyre::checkProof(data, size, key, hello, nonce)) {
    gyre::HelloProof proof;
    if (size != sizeof(proof)) std::abort();
    std::memcpy(&proof, data, sizeof(proof));
    if (proof.mac != gyre::connectorMac(key, hello, nonce)) std::abort();
  }
  return 0;
}
