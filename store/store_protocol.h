// The TCP store's wire protocol: encoders, and pure parsers for what a remote sends.
//
// Format (little-endian, the only byte order gyre runs on):
//   hello   (both directions, once, client first): "GYST" u32 version
//   then the authentication exchange of store/store_auth.h, then requests:
//   request: u32 total length (these 4 bytes included), u8 command, fields
//     kSet   key value        kGet key        kAdd key i64 delta
//     kWait  u32 count, count x key           kCheck u32 count, count x key
//     kAddOnClose key i64 delta (when this connection closes, the store adds delta to key:
//                                how the ranks of a join learn that one of them died)
//   reply:   u32 total length, u8 type, fields
//     kOk    -                kValue value    kInteger i64    kBool u8 (0|1)
//     kError u32 length + UTF-8 message (the request was refused, the connection stays)
//   key = u32 length (<= 4 KiB) + bytes; value = u32 length (<= 64 MiB) + bytes.
//
// Contract: the parse functions are pure (no I/O, no global state, no exceptions) and
// are the libFuzzer entry points for the store. They never read past `buffer`, and
// they check every length against the limits below before allocating anything, so a
// hostile peer can make a parser allocate at most about one message. Each returns:
//   a value             : one complete message; *consumed = its size in bytes;
//   nullopt, *error ""  : the buffer holds only a prefix of a valid message; read more;
//   nullopt, *error set : the bytes can never become a valid message; close the peer.
// A declared length over the limit is reported as soon as its 4 bytes have arrived.
// The encoders throw gyre::Error(kInvalidArgument) for a key or value over the limits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace gyre {

inline constexpr char kStoreMagic[4] = {'G', 'Y', 'S', 'T'};
// 2: kAddOnClose. 3: authentication after the hellos (store/store_auth.h).
inline constexpr uint32_t kStoreProtocolVersion = 3;
inline constexpr size_t kStoreHelloBytes = 8;

inline constexpr size_t kStoreMaxKeyBytes = 4 * 1024;
inline constexpr size_t kStoreMaxValueBytes = 64 * 1024 * 1024;
inline constexpr size_t kStoreMaxErrorBytes = 4 * 1024;
// Bounds the key list of one wait/check (a world of 64 Ki ranks waits for all of
// them); without it a message of empty keys would cost 8x its size in std::strings.
inline constexpr size_t kStoreMaxKeysPerRequest = 64 * 1024;
// The largest message either side may send: a set of the largest key and value.
inline constexpr size_t kStoreMaxMessageBytes =
    4 + 1 + (4 + kStoreMaxKeyBytes) + (4 + kStoreMaxValueBytes);

enum class StoreCommand : uint8_t {
  kSet = 1,
  kGet = 2,
  kAdd = 3,
  kWait = 4,
  kCheck = 5,
  kAddOnClose = 6
};
enum class StoreReplyType : uint8_t { kOk = 1, kValue = 2, kInteger = 3, kBool = 4, kError = 5 };

const char* storeCommandName(StoreCommand command);

struct StoreRequest {
  StoreCommand command = StoreCommand::kGet;
  std::vector<std::string> keys;  // exactly one, except for kWait and kCheck
  std::vector<uint8_t> value;     // kSet
  int64_t delta = 0;              // kAdd, kAddOnClose
};

struct StoreReply {
  StoreReplyType type = StoreReplyType::kOk;
  std::vector<uint8_t> value;  // kValue
  int64_t integer = 0;         // kInteger
  bool flag = false;           // kBool
  std::string message;         // kError
};

std::vector<uint8_t> encodeStoreHello(uint32_t version = kStoreProtocolVersion);
std::vector<uint8_t> encodeStoreRequest(const StoreRequest& request);
// Error messages longer than the limit are cut, not refused: an error must get out.
std::vector<uint8_t> encodeStoreReply(const StoreReply& reply);

// Returns the peer's protocol version (any value: the caller decides what it accepts).
std::optional<uint32_t> parseStoreHello(std::span<const uint8_t> buffer, size_t* consumed,
                                        std::string* error);
std::optional<StoreRequest> parseStoreRequest(std::span<const uint8_t> buffer, size_t* consumed,
                                              std::string* error);
std::optional<StoreReply> parseStoreReply(std::span<const uint8_t> buffer, size_t* consumed,
                                          std::string* error);

}  // namespace gyre
