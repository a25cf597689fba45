// libFuzzer target: the store's hello (store/store_protocol.h, parseStoreHello).
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "store/store_protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  size_t consumed = 0;
  std::string error;
  auto version = gyre::parseStoreHello(std::span<const uint8_t>(data, size), &consumed, &error);
  if (version && (consumed != gyre::kStoreHelloBytes || size < consumed)) std::abort();
  if (!version && consumed != 0) std::abort();
  return 0;
}
