// SignedStore (ring/signed_store.h) over a real TcpStore that is open to anyone: values
// round-trip; a value altered, moved to another key, written unsigned or signed with
// another secret is refused naming the key, never returned.
#include <gtest/gtest.h>

#include "base/error.h"
#include "expect_error.h"
#include "ring/signed_store.h"
#include "store/tcp_store.h"

namespace gyre {
namespace {

using namespace std::chrono_literals;

std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }

TEST(SignedStore, ValuesRoundTripAndForgeriesAreRefusedNamingTheKey) {
  auto open = TcpStore::serve("127.0.0.1", 0, 10s);  // no secret: anyone may write
  SignedStore job(open, "the-job-secret", "the test store");
  SignedStore other(open, "another-secret", "the test store");

  job.set("segment/0-1", bytes("/proc/123/fd/7"));
  EXPECT_EQ(job.get("segment/0-1"), bytes("/proc/123/fd/7"));
  job.set("empty", {});
  EXPECT_EQ(job.get("empty"), std::vector<uint8_t>{});

  // An outsider rewrites the value in the open store, keeping the old signature.
  std::vector<uint8_t> raw = open->get("segment/0-1");
  raw[6] ^= 1;
  open->set("segment/0-1", raw);
  Error altered = expectError([&] { job.get("segment/0-1"); });
  EXPECT_EQ(altered.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(std::string(altered.what()).find("'segment/0-1'"), std::string::npos);
  EXPECT_NE(std::string(altered.what()).find("not signed with the job's secret"),
            std::string::npos);
  EXPECT_EQ(std::string(altered.what()).find("the-job-secret"), std::string::npos);

  // A genuine value moved to another key.
  job.set("segment/0-2", bytes("/proc/123/fd/8"));
  open->set("segment/0-3", open->get("segment/0-2"));
  EXPECT_EQ(expectError([&] { job.get("segment/0-3"); }).code(), ErrorCode::kInvalidArgument);

  // Unsigned, too short to hold a signature, or signed with another secret.
  open->set("plain", bytes("/proc/666/fd/3"));
  open->set("short", bytes("x"));
  other.set("forged", bytes("/proc/666/fd/3"));
  for (const char* key : {"plain", "short", "forged"}) {
    EXPECT_EQ(expectError([&] { job.get(key); }).code(), ErrorCode::kInvalidArgument) << key;
  }
  // Counters pass through unsigned (documented).
  EXPECT_EQ(job.add("count", 2), 2);
  EXPECT_EQ(open->add("count", 1), 3);
}

}  // namespace
}  // namespace gyre
