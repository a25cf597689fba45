// libFuzzer target: store replies as a client reads them (parseStoreReply).
#include <cstddef>
#include <cstdint>

#include "fuzz/fuzz_store.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  gyre::fuzz::parseStream(std::span<const uint8_t>(data, size), gyre::parseStoreReply,
                          gyre::encodeStoreReply, gyre::fuzz::sameReply);
  return 0;
}
