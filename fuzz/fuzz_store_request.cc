// libFuzzer target: store requests as the server reads them (parseStoreRequest).
#include <cstddef>
#include <cstdint>

#include "fuzz/fuzz_store.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  gyre::fuzz::parseStream(std::span<const uint8_t>(data, size), gyre::parseStoreRequest,
                          gyre::encodeStoreRequest, gyre::fuzz::sameRequest);
  return 0;
}
