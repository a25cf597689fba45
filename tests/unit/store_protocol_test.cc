// The store's wire parsers and encoders (store/store_protocol.h), without sockets: every
// request and reply round-trips, every proper prefix is incomplete (never an error),
// malformed messages are errors, and the encoders refuse what the parsers would refuse.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "base/error.h"
#include "store/store_protocol.h"
#include "store_test_support.h"

namespace gyre {
namespace {

using namespace store_test;  // with the chrono and string literals

// ---- The wire parsers ----------------------------------------------------------------------

StoreRequest roundTrip(const StoreRequest& in) {
  std::vector<uint8_t> wire = encodeStoreRequest(in);
  size_t consumed = 0;
  std::string error;
  // Every proper prefix is incomplete, never an error.
  for (size_t n = 0; n < wire.size(); ++n) {
    EXPECT_FALSE(parseStoreRequest(std::span(wire.data(), n), &consumed, &error));
    EXPECT_EQ(error, "") << "prefix of " << n << " bytes";
  }
  wire.push_back(0xAB);  // the start of the next message is left alone
  auto out = parseStoreRequest(wire, &consumed, &error);
  EXPECT_TRUE(out) << error;
  EXPECT_EQ(consumed, wire.size() - 1);
  return out.value_or(StoreRequest{});
}

TEST(StoreProtocol, RequestsRoundTrip) {
  StoreRequest set;
  set.command = StoreCommand::kSet;
  set.keys = {"key"};
  set.value = bytes("value\0with\xff bytes"s);
  StoreRequest out = roundTrip(set);
  EXPECT_EQ(out.command, StoreCommand::kSet);
  EXPECT_EQ(out.keys, set.keys);
  EXPECT_EQ(out.value, set.value);

  StoreRequest add;
  add.command = StoreCommand::kAdd;
  add.keys = {"n"};
  add.delta = -1234567890123;
  EXPECT_EQ(roundTrip(add).delta, add.delta);

  StoreRequest wait;
  wait.command = StoreCommand::kWait;
  wait.keys = {"a", "", "ccc"};
  EXPECT_EQ(roundTrip(wait).keys, wait.keys);
}

TEST(StoreProtocol, RepliesRoundTrip) {
  for (StoreReplyType type : {StoreReplyType::kOk, StoreReplyType::kValue, StoreReplyType::kInteger,
                              StoreReplyType::kBool, StoreReplyType::kError}) {
    StoreReply in;
    in.type = type;
    in.value = bytes("v");
    in.integer = INT64_MIN;
    in.flag = true;
    in.message = "why";
    std::vector<uint8_t> wire = encodeStoreReply(in);
    size_t consumed = 0;
    std::string error;
    auto out = parseStoreReply(wire, &consumed, &error);
    ASSERT_TRUE(out) << error;
    EXPECT_EQ(consumed, wire.size());
    EXPECT_EQ(out->type, type);
    EXPECT_EQ(out->value, type == StoreReplyType::kValue ? in.value : std::vector<uint8_t>{});
    EXPECT_EQ(out->integer, type == StoreReplyType::kInteger ? INT64_MIN : 0);
    EXPECT_EQ(out->flag, type == StoreReplyType::kBool);
    EXPECT_EQ(out->message, type == StoreReplyType::kError ? "why" : "");
  }
}

TEST(StoreProtocol, MalformedMessagesAreErrors) {
  auto requestError = [](std::vector<uint8_t> wire) {
    size_t consumed = 0;
    std::string error;
    EXPECT_FALSE(parseStoreRequest(wire, &consumed, &error));
    EXPECT_EQ(consumed, 0u);
    return error;
  };
  // Oversized and undersized declared lengths are caught from the 4 length bytes alone.
  EXPECT_NE(requestError({0xFF, 0xFF, 0xFF, 0xFF}), "");
  EXPECT_NE(requestError({4, 0, 0, 0}), "");
  EXPECT_NE(requestError({5, 0, 0, 0, 0x77}), "");                       // unknown command
  EXPECT_NE(requestError({9, 0, 0, 0, 2, 9, 0, 0, 0}), "");              // key past the end
  EXPECT_NE(requestError({10, 0, 0, 0, 2, 0, 0, 0, 0, 'x'}), "");        // trailing byte
  EXPECT_NE(requestError({10, 0, 0, 0, 2, 1, 0x10, 0, 0, 'x'}), "");     // key over 4 KiB
  EXPECT_NE(requestError({9, 0, 0, 0, 4, 0xFF, 0xFF, 0xFF, 0xFF}), "");  // too many keys
  EXPECT_NE(requestError({8, 0, 0, 0, 3, 0, 0, 0}), "");                 // add without delta

  size_t consumed = 0;
  std::string error;
  std::vector<uint8_t> reply = {6, 0, 0, 0, 4, 2};  // a bool that is 2
  EXPECT_FALSE(parseStoreReply(reply, &consumed, &error));
  EXPECT_NE(error, "");

  EXPECT_FALSE(parseStoreHello(bytes("GY"), &consumed, &error));
  EXPECT_EQ(error, "");  // a prefix of the magic: wait for more
  EXPECT_FALSE(parseStoreHello(bytes("GE"), &consumed, &error));
  EXPECT_NE(error, "");  // turned away at the second byte
  EXPECT_EQ(parseStoreHello(encodeStoreHello(7), &consumed, &error), 7u);
}

TEST(StoreProtocol, EncodersRefuseWhatParsersWouldRefuse) {
  StoreRequest set;
  set.command = StoreCommand::kSet;
  set.keys = {std::string(kStoreMaxKeyBytes + 1, 'k')};
  EXPECT_EQ(expectError([&] { encodeStoreRequest(set); }).code(), ErrorCode::kInvalidArgument);
  set.keys = {std::string(kStoreMaxKeyBytes, 'k')};
  set.value.resize(kStoreMaxValueBytes + 1);
  EXPECT_EQ(expectError([&] { encodeStoreRequest(set); }).code(), ErrorCode::kInvalidArgument);
  set.value.resize(kStoreMaxValueBytes);  // the largest message is exactly at the limit
  std::vector<uint8_t> wire = encodeStoreRequest(set);
  EXPECT_EQ(wire.size(), kStoreMaxMessageBytes);
  size_t consumed = 0;
  std::string error;
  EXPECT_TRUE(parseStoreRequest(wire, &consumed, &error)) << error;
}

}  // namespace
}  // namespace gyre
