#include "store/store_protocol.h"

#include <algorithm>
#include <cstring>

#include "base/error.h"

namespace gyre {
namespace {

constexpr size_t kHeaderBytes = 4 + 1;  // u32 total length, u8 command or type

// Appends little-endian fields; the caller patches the total length at the end.
class Writer {
 public:
  explicit Writer(uint8_t tag) { out_.assign({0, 0, 0, 0, tag}); }

  void u8(uint8_t v) { out_.push_back(v); }
  void u32(uint32_t v) {
    for (int i = 0; i < 4; ++i) out_.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  void u64(uint64_t v) {
    for (int i = 0; i < 8; ++i) out_.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  void bytes(const void* data, size_t n) {
    u32(static_cast<uint32_t>(n));
    const auto* p = static_cast<const uint8_t*>(data);
    out_.insert(out_.end(), p, p + n);
  }
  size_t size() const { return out_.size(); }
  std::vector<uint8_t> finish() {
    const auto total = static_cast<uint32_t>(out_.size());
    for (int i = 0; i < 4; ++i) out_[i] = static_cast<uint8_t>(total >> (8 * i));
    return std::move(out_);
  }

 private:
  std::vector<uint8_t> out_;
};

uint32_t loadU32(const uint8_t* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}

// Reads the fields of one complete message. Running short inside a message whose
// declared length has fully arrived is malformed, not incomplete: the first failure
// is recorded in *error and every later read fails too.
class Reader {
 public:
  Reader(std::span<const uint8_t> body, std::string* error) : body_(body), error_(error) {}

  bool ok() const { return error_->empty(); }
  size_t left() const { return body_.size() - pos_; }

  uint8_t u8(const char* what) {
    if (!need(1, what)) return 0;
    return body_[pos_++];
  }
  uint32_t u32(const char* what) {
    if (!need(4, what)) return 0;
    uint32_t v = loadU32(&body_[pos_]);
    pos_ += 4;
    return v;
  }
  uint64_t u64(const char* what) {
    if (!need(8, what)) return 0;
    uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = v << 8 | body_[pos_ + static_cast<size_t>(i)];
    pos_ += 8;
    return v;
  }
  // A u32 length then that many bytes; the length is checked against `limit` before
  // anything is copied.
  std::span<const uint8_t> bytes(const char* what, size_t limit) {
    uint32_t n = u32(what);
    if (!ok()) return {};
    if (n > limit) {
      *error_ = fmt::format("{} of {} bytes exceeds the limit of {} bytes", what, n, limit);
      return {};
    }
    if (!need(n, what)) return {};
    auto out = body_.subspan(pos_, n);
    pos_ += n;
    return out;
  }
  std::string key() {
    auto b = bytes("key", kStoreMaxKeyBytes);
    return std::string(b.begin(), b.end());
  }
  void expectEnd() {
    if (ok() && left() != 0) *error_ = fmt::format("{} unexpected bytes after the fields", left());
  }

 private:
  bool need(size_t n, const char* what) {
    if (!ok()) return false;
    if (left() < n) {
      *error_ = fmt::format("{} runs past the end of the message ({} bytes left, {} needed)", what,
                            left(), n);
      return false;
    }
    return true;
  }

  std::span<const uint8_t> body_;
  size_t pos_ = 0;
  std::string* error_;
};

// The total length of the message at the start of `buffer`, once all of it has
// arrived; 0 while incomplete or when malformed (*error says which).
size_t completeMessageLength(std::span<const uint8_t> buffer, std::string* error) {
  if (buffer.size() < 4) return 0;
  uint32_t total = loadU32(buffer.data());
  if (total < kHeaderBytes) {
    *error = fmt::format("declared length {} is shorter than a message header", total);
    return 0;
  }
  if (total > kStoreMaxMessageBytes) {
    *error = fmt::format("declared length {} exceeds the limit of {} bytes", total,
                         kStoreMaxMessageBytes);
    return 0;
  }
  return buffer.size() < total ? 0 : total;
}

std::string printable(std::span<const uint8_t> bytes) {
  std::string out;
  for (uint8_t b : bytes) {
    out += (b >= 0x20 && b < 0x7f) ? std::string(1, static_cast<char>(b))
                                   : fmt::format("\\x{:02x}", b);
  }
  return out;
}

std::string shortKey(const std::string& key) {
  return key.size() <= 64 ? key : key.substr(0, 64) + "...";
}

void checkKey(const std::string& key) {
  if (key.size() > kStoreMaxKeyBytes) {
    fail(ErrorCode::kInvalidArgument, "store key '{}' is {} bytes, over the limit of {} bytes",
         shortKey(key), key.size(), kStoreMaxKeyBytes);
  }
}

}  // namespace

const char* storeCommandName(StoreCommand command) {
  switch (command) {
    case StoreCommand::kSet:
      return "set";
    case StoreCommand::kGet:
      return "get";
    case StoreCommand::kAdd:
      return "add";
    case StoreCommand::kWait:
      return "wait";
    case StoreCommand::kCheck:
      return "check";
    case StoreCommand::kAddOnClose:
      return "add-on-close";
  }
  return "unknown";
}

std::vector<uint8_t> encodeStoreHello(uint32_t version) {
  std::vector<uint8_t> out(kStoreMagic, kStoreMagic + 4);
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(version >> (8 * i)));
  return out;
}

std::vector<uint8_t> encodeStoreRequest(const StoreRequest& request) {
  const bool multiKey =
      request.command == StoreCommand::kWait || request.command == StoreCommand::kCheck;
  if (!multiKey && request.keys.size() != 1) {
    fail(ErrorCode::kInternal, "store {} request with {} keys", storeCommandName(request.command),
         request.keys.size());
  }
  if (request.keys.size() > kStoreMaxKeysPerRequest) {
    fail(ErrorCode::kInvalidArgument, "store {} of {} keys is over the limit of {} keys",
         storeCommandName(request.command), request.keys.size(), kStoreMaxKeysPerRequest);
  }
  for (const std::string& key : request.keys) checkKey(key);

  Writer w(static_cast<uint8_t>(request.command));
  if (multiKey) w.u32(static_cast<uint32_t>(request.keys.size()));
  for (const std::string& key : request.keys) w.bytes(key.data(), key.size());
  if (request.command == StoreCommand::kSet) {
    if (request.value.size() > kStoreMaxValueBytes) {
      fail(ErrorCode::kInvalidArgument,
           "store value for key '{}' is {} bytes, over the limit of {} bytes",
           shortKey(request.keys[0]), request.value.size(), kStoreMaxValueBytes);
    }
    w.bytes(request.value.data(), request.value.size());
  }
  if (request.command == StoreCommand::kAdd || request.command == StoreCommand::kAddOnClose) {
    w.u64(static_cast<uint64_t>(request.delta));
  }
  if (w.size() > kStoreMaxMessageBytes) {
    fail(ErrorCode::kInvalidArgument, "store {} of {} keys is {} bytes, over the limit of {}",
         storeCommandName(request.command), request.keys.size(), w.size(), kStoreMaxMessageBytes);
  }
  return w.finish();
}

std::vector<uint8_t> encodeStoreReply(const StoreReply& reply) {
  Writer w(static_cast<uint8_t>(reply.type));
  switch (reply.type) {
    case StoreReplyType::kOk:
      break;
    case StoreReplyType::kValue:
      if (reply.value.size() > kStoreMaxValueBytes) {
        fail(ErrorCode::kInternal, "store reply value of {} bytes", reply.value.size());
      }
      w.bytes(reply.value.data(), reply.value.size());
      break;
    case StoreReplyType::kInteger:
      w.u64(static_cast<uint64_t>(reply.integer));
      break;
    case StoreReplyType::kBool:
      w.u8(reply.flag ? 1 : 0);
      break;
    case StoreReplyType::kError:
      w.bytes(reply.message.data(), std::min(reply.message.size(), kStoreMaxErrorBytes));
      break;
  }
  return w.finish();
}

std::optional<uint32_t> parseStoreHello(std::span<const uint8_t> buffer, size_t* consumed,
                                        std::string* error) {
  *consumed = 0;
  error->clear();
  // Compare the magic as it arrives so that a stray client (an HTTP probe, a port
  // scanner) is turned away without waiting for its 8 bytes.
  size_t seen = std::min<size_t>(buffer.size(), 4);
  if (seen > 0 && std::memcmp(buffer.data(), kStoreMagic, seen) != 0) {
    *error = fmt::format("wrong magic '{}' (expected 'GYST': not a gyre store peer)",
                         printable(buffer.first(seen)));
    return std::nullopt;
  }
  if (buffer.size() < kStoreHelloBytes) return std::nullopt;
  *consumed = kStoreHelloBytes;
  return loadU32(buffer.data() + 4);
}

std::optional<StoreRequest> parseStoreRequest(std::span<const uint8_t> buffer, size_t* consumed,
                                              std::string* error) {
  *consumed = 0;
  error->clear();
  size_t total = completeMessageLength(buffer, error);
  if (total == 0) return std::nullopt;
  Reader r(buffer.subspan(4, total - 4), error);

  StoreRequest request;
  uint8_t command = r.u8("command");
  switch (command) {
    case static_cast<uint8_t>(StoreCommand::kSet): {
      request.keys.push_back(r.key());
      auto value = r.bytes("value", kStoreMaxValueBytes);
      request.value.assign(value.begin(), value.end());
      break;
    }
    case static_cast<uint8_t>(StoreCommand::kGet):
      request.keys.push_back(r.key());
      break;
    case static_cast<uint8_t>(StoreCommand::kAdd):
    case static_cast<uint8_t>(StoreCommand::kAddOnClose):
      request.keys.push_back(r.key());
      request.delta = static_cast<int64_t>(r.u64("delta"));
      break;
    case static_cast<uint8_t>(StoreCommand::kWait):
    case static_cast<uint8_t>(StoreCommand::kCheck): {
      uint32_t count = r.u32("key count");
      if (count > kStoreMaxKeysPerRequest) {
        *error =
            fmt::format("key count {} exceeds the limit of {}", count, kStoreMaxKeysPerRequest);
        return std::nullopt;
      }
      // No reserve(count): each key must first prove it is in the message.
      for (uint32_t i = 0; i < count && r.ok(); ++i) request.keys.push_back(r.key());
      break;
    }
    default:
      *error = fmt::format("unknown command {}", command);
      return std::nullopt;
  }
  request.command = static_cast<StoreCommand>(command);
  r.expectEnd();
  if (!r.ok()) return std::nullopt;
  *consumed = total;
  return request;
}

std::optional<StoreReply> parseStoreReply(std::span<const uint8_t> buffer, size_t* consumed,
                                          std::string* error) {
  *consumed = 0;
  error->clear();
  size_t total = completeMessageLength(buffer, error);
  if (total == 0) return std::nullopt;
  Reader r(buffer.subspan(4, total - 4), error);

  StoreReply reply;
  uint8_t type = r.u8("reply type");
  switch (type) {
    case static_cast<uint8_t>(StoreReplyType::kOk):
      break;
    case static_cast<uint8_t>(StoreReplyType::kValue): {
      auto value = r.bytes("value", kStoreMaxValueBytes);
      reply.value.assign(value.begin(), value.end());
      break;
    }
    case static_cast<uint8_t>(StoreReplyType::kInteger):
      reply.integer = static_cast<int64_t>(r.u64("integer"));
      break;
    case static_cast<uint8_t>(StoreReplyType::kBool): {
      uint8_t flag = r.u8("flag");
      if (r.ok() && flag > 1) {
        *error = fmt::format("boolean reply {} is neither 0 nor 1", flag);
        return std::nullopt;
      }
      reply.flag = flag == 1;
      break;
    }
    case static_cast<uint8_t>(StoreReplyType::kError): {
      auto message = r.bytes("error message", kStoreMaxErrorBytes);
      reply.message.assign(message.begin(), message.end());
      break;
    }
    default:
      *error = fmt::format("unknown reply type {}", type);
      return std::nullopt;
  }
  reply.type = static_cast<StoreReplyType>(type);
  r.expectEnd();
  if (!r.ok()) return std::nullopt;
  *consumed = total;
  return reply;
}

}  // namespace gyre
