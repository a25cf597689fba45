// TcpStore against broken and hostile clients over raw sockets: garbage closes only that
// connection, a client that reached something else fails clearly, and a server that
// goes away fails a waiting client promptly.
#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "base/error.h"
#include "store/store.h"
#include "store/store_protocol.h"
#include "store/tcp_store.h"
#include "store_test_support.h"
#include "transport/socket.h"

namespace gyre {
namespace {

using namespace store_test;  // with the chrono and string literals

// A raw TCP connection to the store, to speak to it as a broken or hostile client.
Fd rawConnect(uint16_t port) {
  Fd fd = connectWithRetry(SocketAddress::resolve("127.0.0.1", port), Clock::now() + kLong);
  return fd;
}

// Reads until the peer closes; returns what arrived. Fails the test if the peer keeps
// the connection open past 5 s.
std::vector<uint8_t> readUntilClosed(int fd) {
  std::vector<uint8_t> got;
  auto deadline = Clock::now() + 5s;
  for (;;) {
    uint8_t buf[4096];
    ssize_t r = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (r > 0) {
      got.insert(got.end(), buf, buf + r);
      continue;
    }
    if (r == 0 || (r < 0 && errno == ECONNRESET)) return got;
    if (!pollUntil(fd, POLLIN, deadline)) {
      ADD_FAILURE() << "the store kept a bad connection open";
      return got;
    }
  }
}

void sendAll(int fd, const std::vector<uint8_t>& data) {
  writeExact(fd, data.data(), data.size(), Clock::now() + kLong);
}

// ---- Hostile and broken clients --------------------------------------------------------

TEST(TcpStore, GarbageClosesOnlyThatConnection) {
  auto server = TcpStore::serve("127.0.0.1", 0, kLong);
  auto client = TcpStore::connect("127.0.0.1", server->port(), kLong);
  client->setString("before", "1");

  {  // not a gyre client at all
    Fd raw = rawConnect(server->port());
    sendAll(raw.get(), bytes("GET / HTTP/1.1\r\n\r\n"));
    EXPECT_TRUE(readUntilClosed(raw.get()).empty());
  }
  {  // a good hello, then bytes that are no request
    Fd raw = rawConnect(server->port());
    std::vector<uint8_t> msg = encodeStoreHello();
    std::vector<uint8_t> junk = {9, 0, 0, 0, 0xEE, 1, 2, 3, 4};  // unknown command 0xEE
    msg.insert(msg.end(), junk.begin(), junk.end());
    sendAll(raw.get(), msg);
    EXPECT_EQ(readUntilClosed(raw.get()), encodeStoreHello());  // its hello, then close
  }
  {  // a declared length far over the limit: refused before any body arrives
    Fd raw = rawConnect(server->port());
    std::vector<uint8_t> msg = encodeStoreHello();
    std::vector<uint8_t> huge = {0xFF, 0xFF, 0xFF, 0xFF, 1};
    msg.insert(msg.end(), huge.begin(), huge.end());
    sendAll(raw.get(), msg);
    EXPECT_EQ(readUntilClosed(raw.get()), encodeStoreHello());
  }
  {  // a value length over the limit inside a message of allowed size
    Fd raw = rawConnect(server->port());
    std::vector<uint8_t> msg = encodeStoreHello();
    std::vector<uint8_t> set = {18,  0,    0,    0,    1,    1, 0, 0, 0,
                                'k', 0xFF, 0xFF, 0xFF, 0x7F, 0, 0, 0, 0};
    msg.insert(msg.end(), set.begin(), set.end());
    sendAll(raw.get(), msg);
    EXPECT_EQ(readUntilClosed(raw.get()), encodeStoreHello());
  }
  {  // a client of another protocol version gets the store's hello, then is closed
    Fd raw = rawConnect(server->port());
    sendAll(raw.get(), encodeStoreHello(kStoreProtocolVersion + 1));
    EXPECT_EQ(readUntilClosed(raw.get()), encodeStoreHello());
  }
  {  // a client that leaves in the middle of a held get
    Fd raw = rawConnect(server->port());
    std::vector<uint8_t> msg = encodeStoreHello();
    StoreRequest get;
    get.command = StoreCommand::kGet;
    get.keys = {"never"};
    std::vector<uint8_t> req = encodeStoreRequest(get);
    msg.insert(msg.end(), req.begin(), req.end());
    sendAll(raw.get(), msg);
  }
  EXPECT_EQ(client->getString("before"), "1");
  client->setString("never", "now");  // wakes no one: the waiter above is gone
  auto third = TcpStore::connect("127.0.0.1", server->port(), kLong);
  EXPECT_EQ(third->getString("never"), "now");
}

TEST(TcpStore, ConnectingToSomethingElseFailsClearly) {
  Fd listening = listenOn(SocketAddress::resolve("127.0.0.1", 0));
  uint16_t port = SocketAddress::ofSocket(listening.get()).port();
  std::promise<void> refused;
  std::thread impostor([&] {
    Fd conn = acceptUntil(listening.get(), Clock::now() + kLong);
    std::vector<uint8_t> answer = bytes("HTTP/1.1 400 Bad Request\r\n\r\n");
    sendAll(conn.get(), answer);
    refused.get_future().wait_for(kLong);  // open until the client has read the answer
  });
  Error e = expectError([&] { TcpStore::connect("127.0.0.1", port, kLong); });
  refused.set_value();
  impostor.join();
  std::string what = e.what();
  EXPECT_NE(what.find("127.0.0.1:" + std::to_string(port)), std::string::npos) << what;
  EXPECT_NE(what.find("magic"), std::string::npos) << what;
}

TEST(TcpStore, DestroyingTheServerFailsAWaitingClientPromptly) {
  auto server = TcpStore::serve("127.0.0.1", 0, 30s);
  auto client = TcpStore::connect("127.0.0.1", server->port(), 30s);
  std::atomic<bool> failed{false};
  Clock::time_point failedAt;
  std::thread waiter([&] {
    Error e = expectError([&] { client->get("never"); });
    failedAt = Clock::now();
    EXPECT_EQ(e.code(), ErrorCode::kRemoteError) << e.what();
    EXPECT_NE(std::string(e.what()).find("never"), std::string::npos) << e.what();
    failed = true;
  });
  std::this_thread::sleep_for(100ms);  // time for the get to block: nothing signals from inside it
  auto start = Clock::now();
  server.reset();
  EXPECT_LT(since(start), 2s);  // the destructor does not wait for clients
  waiter.join();
  EXPECT_TRUE(failed.load());
  EXPECT_LT(failedAt - start, 2s);

  // Later calls fail at once rather than waiting out the timeout.
  start = Clock::now();
  EXPECT_EQ(expectError([&] { client->setString("k", "v"); }).code(), ErrorCode::kRemoteError);
  EXPECT_LT(since(start), 1s);
}

}  // namespace
}  // namespace gyre
