// The bootstrap store: TcpStore over loopback (threads and forked processes), reaching
// and serving it (timeouts, unreachable or taken ports, IPv6), and PrefixStore. Hostile
// clients are tcp_store_hostile_test.cc, the wire parsers store_protocol_test.cc.
#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "base/error.h"
#include "fork_ranks.h"
#include "store/store.h"
#include "store/store_protocol.h"
#include "store/tcp_store.h"
#include "store_test_support.h"
#include "transport/socket.h"

namespace gyre {
namespace {

using namespace store_test;  // with the chrono and string literals

// ---- TcpStore: the operations ----------------------------------------------------------

TEST(TcpStore, SetGetAddWaitCheck) {
  auto store = TcpStore::serve("127.0.0.1", 0, kLong);
  ASSERT_TRUE(store->serving());
  ASSERT_NE(store->port(), 0);

  store->set("a", bytes("alpha"));
  EXPECT_EQ(store->get("a"), bytes("alpha"));
  store->set("a", bytes("again"));  // overwrite
  EXPECT_EQ(store->getString("a"), "again");
  store->setString("empty", "");
  EXPECT_EQ(store->get("empty"), std::vector<uint8_t>{});

  EXPECT_EQ(store->add("n", 5), 5);
  EXPECT_EQ(store->add("n", -7), -2);
  EXPECT_EQ(store->add("n", 0), -2);
  EXPECT_EQ(store->getString("n"), "-2");  // counters are decimal text, as in torch
  store->setString("m", "40");
  EXPECT_EQ(store->add("m", 2), 42);

  store->wait({"a", "n", "empty"});
  store->wait({});
  EXPECT_TRUE(store->check({"a", "n"}));
  EXPECT_TRUE(store->check({}));
  EXPECT_FALSE(store->check({"a", "missing"}));

  std::vector<uint8_t> big(8 << 20);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 131 + 7);
  store->set("big", big);
  EXPECT_EQ(store->get("big"), big);
}

TEST(TcpStore, RefusedRequestsLeaveTheConnectionUsable) {
  auto store = TcpStore::serve("127.0.0.1", 0, kLong);
  store->setString("text", "not a number");
  Error e = expectError([&] { store->add("text", 1); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(std::string(e.what()).find("text"), std::string::npos) << e.what();

  store->add("big", INT64_MAX);
  EXPECT_EQ(expectError([&] { store->add("big", 1); }).code(), ErrorCode::kInvalidArgument);

  std::string longKey(kStoreMaxKeyBytes + 1, 'k');
  EXPECT_EQ(expectError([&] { store->setString(longKey, "v"); }).code(),
            ErrorCode::kInvalidArgument);

  EXPECT_EQ(store->add("text2", 3), 3);  // still connected
}

TEST(TcpStore, GetOfAMissingKeyTimesOutNamingKeyAndStore) {
  auto store = TcpStore::serve("127.0.0.1", 0, kShort);
  auto start = Clock::now();
  Error e = expectError([&] { store->get("rank7/addr"); });
  auto took = since(start);
  EXPECT_EQ(e.code(), ErrorCode::kTimeout);
  std::string what = e.what();
  EXPECT_NE(what.find("rank7/addr"), std::string::npos) << what;
  EXPECT_NE(what.find(store->address()), std::string::npos) << what;
  EXPECT_GE(took, kShort - 20ms);
  EXPECT_LT(took, kShort + 1500ms);

  start = Clock::now();
  e = expectError([&] { store->wait({"present", "absent"}); });
  EXPECT_EQ(e.code(), ErrorCode::kTimeout);
  EXPECT_NE(std::string(e.what()).find("absent"), std::string::npos) << e.what();
  EXPECT_LT(since(start), kShort + 1500ms);

  // The timed-out exchange dropped its connection; the next call reconnects.
  store->setString("later", "ok");
  EXPECT_EQ(store->getString("later"), "ok");
}

TEST(TcpStore, SetTimeoutChangesTheBound) {
  auto store = TcpStore::serve("127.0.0.1", 0, kLong);
  store->setTimeout(100ms);
  EXPECT_EQ(store->timeout(), 100ms);
  auto start = Clock::now();
  EXPECT_EQ(expectError([&] { store->get("missing"); }).code(), ErrorCode::kTimeout);
  EXPECT_LT(since(start), 1500ms);
}

TEST(TcpStore, SecondClientSeesTheFirstsWrites) {
  auto server = TcpStore::serve("127.0.0.1", 0, kLong);
  auto client = TcpStore::connect("127.0.0.1", server->port(), kLong);
  EXPECT_FALSE(client->serving());
  EXPECT_EQ(client->port(), server->port());
  server->setString("from-server", "1");
  EXPECT_EQ(client->getString("from-server"), "1");
  client->setString("from-client", "2");
  EXPECT_EQ(server->getString("from-client"), "2");
  EXPECT_EQ(client->add("c", 1), 1);
  EXPECT_EQ(server->add("c", 1), 2);
}

TEST(TcpStore, BlockingGetAndWaitAreAnsweredByALaterSet) {
  auto server = TcpStore::serve("127.0.0.1", 0, kLong);
  auto setter = TcpStore::connect("127.0.0.1", server->port(), kLong);
  std::vector<std::thread> waiters;
  std::atomic<int> done{0};
  for (int i = 0; i < 4; ++i) {
    waiters.emplace_back([&, i] {
      auto client = TcpStore::connect("127.0.0.1", server->port(), kLong);
      if (i % 2 == 0) {
        EXPECT_EQ(client->getString("late"), "value");
      } else {
        client->wait({"late", "later"});
      }
      ++done;
    });
  }
  std::this_thread::sleep_for(100ms);  // time passes: no waiter may return meanwhile
  EXPECT_EQ(done.load(), 0);
  setter->setString("late", "value");
  std::this_thread::sleep_for(50ms);  // time passes: a wait on both keys must not end on one
  setter->add("later", 1);
  for (auto& t : waiters) t.join();
  EXPECT_EQ(done.load(), 4);
}

TEST(TcpStore, AddFromThreadsSums) {
  auto server = TcpStore::serve("127.0.0.1", 0, kLong);
  constexpr int kThreads = 4;
  constexpr int kAdds = 200;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // Half share the server's client (its mutex), half have their own connection.
      std::shared_ptr<TcpStore> own;
      Store* store = server.get();
      if (t % 2 == 1) {
        own = TcpStore::connect("127.0.0.1", server->port(), kLong);
        store = own.get();
      }
      for (int i = 0; i < kAdds; ++i) store->add("sum", t + 1);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(server->add("sum", 0), kAdds * (1 + 2 + 3 + 4));
}

TEST(TcpStore, AddFromForkedProcessesSums) {
  auto server = TcpStore::serve("127.0.0.1", 0, kLong);
  constexpr int kProcs = 4;
  constexpr int kAdds = 100;
  // A process must not touch the parent's store (its server thread is not there).
  testing::ForkedRanks procs(kProcs);
  procs.start([&](int p) {
    auto client = TcpStore::connect("127.0.0.1", server->port(), kLong);
    for (int i = 0; i < kAdds; ++i) client->add("procs", p + 1);
    client->setString("done" + std::to_string(p), "1");
  });
  std::vector<std::string> keys;
  for (int p = 0; p < kProcs; ++p) keys.push_back("done" + std::to_string(p));
  try {
    server->wait(keys);
  } catch (const Error& e) {
    ADD_FAILURE() << e.what();
  }
  testing::expectAllOk(procs.join(Clock::now() + 30s));
  EXPECT_EQ(server->add("procs", 0), kAdds * (1 + 2 + 3 + 4));
}

// ---- Reaching and serving ---------------------------------------------------------------

TEST(TcpStore, ConnectWhereNothingListensTimesOutNamingTheAddress) {
  uint16_t port;
  {
    Fd probe = listenOn(SocketAddress::resolve("127.0.0.1", 0));
    port = SocketAddress::ofSocket(probe.get()).port();
  }  // closed: nothing listens there now
  auto start = Clock::now();
  std::string reason;
  Error e = expectError([&] { TcpStore::connect("127.0.0.1", port, 300ms, "", -1, &reason); });
  EXPECT_EQ(e.code(), ErrorCode::kTimeout);
  std::string what = e.what();
  EXPECT_NE(what.find("could not reach the bootstrap store at 127.0.0.1:" + std::to_string(port) +
                      " in "),
            std::string::npos)
      << what;
  // The reason alone, for callers that say themselves where the address came from
  // (ring/join_store.cc: MASTER_ADDR, GYRE_AGENT_STORE, ...).
  EXPECT_FALSE(reason.empty());
  EXPECT_EQ(reason.find("bootstrap store"), std::string::npos) << reason;
  EXPECT_NE(what.find(": " + reason), std::string::npos) << what << " / " << reason;
  EXPECT_LT(since(start), 3s);
}

TEST(TcpStore, ConnectBeforeTheServerListensSucceeds) {
  uint16_t port;
  {
    Fd probe = listenOn(SocketAddress::resolve("127.0.0.1", 0));
    port = SocketAddress::ofSocket(probe.get()).port();
  }
  std::shared_ptr<TcpStore> server;
  std::thread late([&] {
    std::this_thread::sleep_for(100ms);  // models a late server: connect retries meanwhile
    server = TcpStore::serve("127.0.0.1", port, kLong);
  });
  auto client = TcpStore::connect("127.0.0.1", port, kLong);  // retries until then
  late.join();
  client->setString("k", "v");
  EXPECT_EQ(server->getString("k"), "v");
}

TEST(TcpStore, ServeOnATakenPortFailsNamingThePort) {
  auto first = TcpStore::serve("127.0.0.1", 0, kLong);
  Error e = expectError([&] { TcpStore::serve("127.0.0.1", first->port(), kLong); });
  std::string what = e.what();
  EXPECT_NE(what.find(std::to_string(first->port())), std::string::npos) << what;
  EXPECT_NE(what.find("already in use"), std::string::npos) << what;
  EXPECT_NE(what.find("another gyre job"), std::string::npos) << what;
  first->setString("still", "serving");
  EXPECT_EQ(first->getString("still"), "serving");
}

TEST(TcpStore, ServeOnAPortAnotherProgramHoldsSaysSo) {
  Fd other = listenOn(SocketAddress::resolve("127.0.0.1", 0));  // listens, never answers
  uint16_t port = SocketAddress::ofSocket(other.get()).port();
  auto start = Clock::now();
  Error e = expectError([&] { TcpStore::serve("127.0.0.1", port, kLong); });
  std::string what = e.what();
  EXPECT_NE(what.find("another program"), std::string::npos) << what;
  EXPECT_EQ(what.find("another gyre job"), std::string::npos) << what;
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 3.0);
}

TEST(TcpStore, AddOnCloseFiresWhenTheClientGoes) {
  auto server = TcpStore::serve("127.0.0.1", 0, kLong);
  {
    auto client = TcpStore::connect("127.0.0.1", server->port(), kLong);
    EXPECT_TRUE(client->addOnClose("gone", 1));
    EXPECT_TRUE(client->addOnClose("gone", 2));
    client->setString("alive", "1");
    EXPECT_FALSE(server->check({"gone"}));
  }
  server->wait({"gone"});  // the server applies both adds when the connection closes
  EXPECT_EQ(server->getString("gone"), "3");
  // Through a prefix, as a communicator registers it.
  auto inner = TcpStore::connect("127.0.0.1", server->port(), kLong);
  {
    PrefixStore prefixed("p", inner);
    EXPECT_TRUE(prefixed.addOnClose("dropped", 1));
  }
  EXPECT_FALSE(server->check({"p/dropped"}));  // the connection is still open
  inner.reset();
  server->wait({"p/dropped"});
}

TEST(TcpStore, ServeOnAListeningSocket) {
  Fd listening = listenOn(SocketAddress::resolve("0.0.0.0", 0));
  uint16_t port = SocketAddress::ofSocket(listening.get()).port();
  auto server = TcpStore::serveOn(std::move(listening), kLong);
  EXPECT_EQ(server->port(), port);
  auto client = TcpStore::connect("127.0.0.1", port, kLong);
  client->setString("k", "v");
  EXPECT_EQ(server->getString("k"), "v");

  Fd notListening(::socket(AF_INET, SOCK_STREAM, 0));
  EXPECT_EQ(expectError([&] { TcpStore::serveOn(std::move(notListening), kLong); }).code(),
            ErrorCode::kInvalidArgument);
}

TEST(TcpStore, ServesOverIpv6Loopback) {
  std::shared_ptr<TcpStore> server;
  try {
    server = TcpStore::serve("::1", 0, kLong);
  } catch (const Error& e) {
    GTEST_SKIP() << "no IPv6 loopback here: " << e.what();
  }
  auto client = TcpStore::connect("::1", server->port(), kLong);
  EXPECT_EQ(client->address(), "[::1]:" + std::to_string(server->port()));
  client->setString("k", "v6");
  EXPECT_EQ(server->getString("k"), "v6");
}

// ---- PrefixStore -------------------------------------------------------------------------

TEST(PrefixStore, KeepsKeysApart) {
  auto inner = TcpStore::serve("127.0.0.1", 0, kLong);
  PrefixStore a("comm0", inner);
  PrefixStore b("comm1", inner);
  a.setString("addr", "A");
  b.setString("addr", "B");
  EXPECT_EQ(a.getString("addr"), "A");
  EXPECT_EQ(b.getString("addr"), "B");
  EXPECT_EQ(inner->getString("comm0/addr"), "A");

  EXPECT_EQ(a.add("count", 1), 1);
  EXPECT_EQ(b.add("count", 5), 5);
  EXPECT_EQ(a.add("count", 1), 2);

  a.setString("only-a", "x");
  EXPECT_TRUE(a.check({"only-a", "addr"}));
  EXPECT_FALSE(b.check({"only-a"}));
  a.wait({"only-a", "count"});

  // Nested prefixes compose, and the bound is the inner store's.
  PrefixStore nested("sub", std::make_shared<PrefixStore>("comm0", inner));
  nested.setString("k", "v");
  EXPECT_EQ(inner->getString("comm0/sub/k"), "v");
  nested.setTimeout(kShort);
  EXPECT_EQ(inner->timeout(), kShort);
  EXPECT_EQ(expectError([&] { b.get("only-a"); }).code(), ErrorCode::kTimeout);
}

}  // namespace
}  // namespace gyre
