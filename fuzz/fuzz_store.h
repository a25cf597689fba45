// Shared by the store-protocol fuzz targets: a message that parsed encodes back to bytes
// that parse to the same message, and the parser never claims more bytes than it had.
#pragma once

#include <cstdlib>
#include <span>
#include <string>

#include "store/store_protocol.h"

namespace gyre::fuzz {

inline bool sameRequest(const StoreRequest& a, const StoreRequest& b) {
  return a.command == b.command && a.keys == b.keys && a.value == b.value && a.delta == b.delta;
}

inline bool sameReply(const StoreReply& a, const StoreReply& b) {
  return a.type == b.type && a.value == b.value && a.integer == b.integer && a.flag == b.flag &&
         a.message == b.message;
}

// Parses every message in `bytes` one after another, as a connection's reader does.
template <typename Parse, typename Encode, typename Same>
void parseStream(std::span<const uint8_t> bytes, Parse parse, Encode encode, Same same) {
  while (!bytes.empty()) {
    size_t consumed = 0;
    std::string error;
    auto message = parse(bytes, &consumed, &error);
    if (!message) return;  // incomplete or malformed: the reader stops here
    if (consumed == 0 || consumed > bytes.size() || !error.empty()) std::abort();
    auto encoded = encode(*message);
    size_t again = 0;
    auto reparsed = parse(std::span<const uint8_t>(encoded), &again, &error);
    if (!reparsed || again != encoded.size() || !same(*message, *reparsed)) std::abort();
    bytes = bytes.subspan(consumed);
  }
}

}  // namespace gyre::fuzz
