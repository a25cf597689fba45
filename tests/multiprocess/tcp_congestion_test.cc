// GYRE_TCP_CONGESTION: the congestion control of the tcp pipes' connections. On real
// sockets: the kernel reports what was set; a stream that is not TCP is left alone; a name
// the kernel lacks and one it does not allow (a child without CAP_NET_ADMIN) fail naming
// the setting, what the kernel offers and what to change. Then communicators: every pipe
// connection of every rank uses the setting (read back from the sockets) while the
// store's keeps the host's, with exact collectives; and one rank asking for a name the
// kernel lacks fails creation on every rank, naming the setting, without a hang.
#include <linux/capability.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "collective_test_support.h"
#include "data_sockets.h"
#include "fork_ranks.h"
#include "ring/communicator.h"
#include "store/tcp_store.h"
#include "tcp_pair.h"
#include "transport/socket.h"

namespace gyre {
namespace {

using namespace std::chrono_literals;
using testing::dataSockets;
using testing::CommRanks;
using testing::RankResult;

std::vector<std::string> procList(const char* path) {
  std::ifstream in(path);
  std::vector<std::string> names;
  for (std::string name; in >> name;) names.push_back(name);
  return names;
}

std::string hostDefault() {
  std::ifstream in("/proc/sys/net/ipv4/tcp_congestion_control");
  std::string name;
  in >> name;
  return name;
}

// The error setCongestionControl throws for `name`, or "" when it succeeded.
std::string refusal(int fd, const std::string& name) {
  try {
    setCongestionControl(fd, name);
    return "";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    return e.what();
  }
}

TEST(SetCongestionControl, TheSocketReportsWhatWasSet) {
  auto [a, b] = testing::tcpPair();
  // reno is built into every kernel and always allowed.
  setCongestionControl(a.get(), "reno");
  EXPECT_EQ(congestionControlOf(a.get()), "reno");
  const std::string other = hostDefault();
  if (!other.empty() && other != "reno") {
    setCongestionControl(a.get(), other);  // on a connection that is already established
    EXPECT_EQ(congestionControlOf(a.get()), other);
  }
  EXPECT_EQ(congestionControlOf(b.get()), hostDefault());
}

TEST(SetCongestionControl, AStreamThatIsNotTcpIsLeftAlone) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  Fd a(sv[0]), b(sv[1]);
  EXPECT_NO_THROW(setCongestionControl(a.get(), "reno"));
  EXPECT_EQ(congestionControlOf(a.get()), "");
}

TEST(SetCongestionControl, ANameTheKernelLacksNamesWhatItHas) {
  auto [a, b] = testing::tcpPair();
  const std::string message = refusal(a.get(), "nosuchcc");
  EXPECT_NE(message.find("GYRE_TCP_CONGESTION=nosuchcc"), std::string::npos) << message;
  EXPECT_NE(message.find("tcp_available_congestion_control"), std::string::npos) << message;
  for (const std::string& name : procList("/proc/sys/net/ipv4/tcp_available_congestion_control")) {
    EXPECT_NE(message.find(name), std::string::npos) << name << " missing from: " << message;
  }
  EXPECT_NE(message.find("modprobe tcp_nosuchcc"), std::string::npos) << message;
  EXPECT_EQ(congestionControlOf(a.get()), hostDefault());  // untouched
}

// A process without CAP_NET_ADMIN may only choose what tcp_allowed_congestion_control
// lists. The child drops the capability from its effective set and asks for one the
// kernel has but does not allow.
TEST(SetCongestionControl, ANameNotAllowedNamesTheSysctlToChange) {
  const std::vector<std::string> available =
      procList("/proc/sys/net/ipv4/tcp_available_congestion_control");
  const std::vector<std::string> allowed =
      procList("/proc/sys/net/ipv4/tcp_allowed_congestion_control");
  std::string notAllowed;
  for (const std::string& name : available) {
    if (std::find(allowed.begin(), allowed.end(), name) == allowed.end()) notAllowed = name;
  }
  if (notAllowed.empty()) {
    GTEST_SKIP() << "every congestion control this kernel has is allowed to every process";
  }
  testing::ForkedRanks child(1);
  child.start([&](int) {
    __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct data[2] = {};
    std::string said = "capget/capset failed";
    if (::syscall(SYS_capget, &header, data) == 0) {
      data[0].effective &= ~(1u << CAP_NET_ADMIN);
      if (::syscall(SYS_capset, &header, data) == 0) {
        Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
        try {
          setCongestionControl(fd.get(), notAllowed);
          said = "accepted";
        } catch (const Error& e) {
          said = e.what();
        }
      }
    }
    child.note("said", said);
  });
  const RankResult ended = child.join(Clock::now() + 30s)[0];
  ASSERT_TRUE(ended.ok) << ended.describe();
  const std::string message = ended.note("said");
  EXPECT_NE(message.find("GYRE_TCP_CONGESTION=" + notAllowed), std::string::npos) << message;
  EXPECT_NE(message.find("net.ipv4.tcp_allowed_congestion_control"), std::string::npos) << message;
  EXPECT_NE(message.find("CAP_NET_ADMIN"), std::string::npos) << message;
  for (const std::string& name : allowed) {
    EXPECT_NE(message.find(name), std::string::npos) << name << " missing from: " << message;
  }
}

// 3 ranks over tcp asking for reno: every pipe connection of every rank reports reno, the
// store's connection the host's, and the collectives are exact.
TEST(CongestionControlPipes, EveryTcpPipeConnectionUsesTheSetting) {
  Options o;
  o.transport = TransportKind::kTcp;
  o.tcpCongestion = "reno";
  o.timeout = 30s;
  o.joinTimeout = 30s;
  Fd listener = listenOn(SocketAddress::resolve("127.0.0.1", 0));
  const uint16_t port = SocketAddress::ofSocket(listener.get()).port();
  const std::string host = hostDefault();
  CommRanks group(3, o);
  group.makeStore = [&](int) { return TcpStore::connect("127.0.0.1", port, 30s); };
  group.start([&](Communicator& comm, int rank) {
    const int n = comm.size();
    std::vector<int> fds = dataSockets(port);
    // A ring needs a pipe in and a pipe out at least.
    testing::check(fds.size() >= 2, "rank {} has {} pipe connections", rank, fds.size());
    for (int fd : fds) {
      const std::string cc = congestionControlOf(fd);
      testing::check(cc == "reno", "rank {}: a pipe connection uses '{}', not reno", rank, cc);
    }
    size_t storeConnections = 0;
    for (int fd = 0; fd < 1024; ++fd) {
      sockaddr_in peer{};
      socklen_t len = sizeof(peer);
      if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len) != 0 ||
          peer.sin_family != AF_INET || ntohs(peer.sin_port) != port) {
        continue;
      }
      ++storeConnections;
      const std::string cc = congestionControlOf(fd);
      testing::check(cc == host, "rank {}: the store's connection uses '{}', not the host's {}",
                     rank, cc, host);
    }
    testing::check(storeConnections >= 1, "rank {}: no connection to the store found", rank);
    for (size_t count : {size_t{1}, size_t{100003}}) {
      std::vector<int32_t> buf(count, rank + 1);
      comm.allReduce(buf.data(), buf.data(), count, DataType::kInt32, ReduceOp::kSum);
      for (int32_t v : buf) {
        testing::check(v == n * (n + 1) / 2, "rank {}: allreduce of {} gave {}", rank, count, v);
      }
    }
  });
  auto store = TcpStore::serveOn(std::move(listener), 30s);
  auto reports = group.join(Clock::now() + 60s);
  for (const RankResult& r : reports) {
    SCOPED_TRACE(fmt::format("rank {}: '{}'\nlog:\n{}", r.rank, r.message, r.log));
    EXPECT_FALSE(r.hung);
    EXPECT_TRUE(r.ok);
  }
}

// Rank 1 asks for a name the kernel lacks, rank 0 for nothing: creation fails on both,
// promptly, each naming the setting.
TEST(CongestionControlPipes, ANameTheKernelLacksFailsCreationOnEveryRank) {
  Options o;
  o.transport = TransportKind::kTcp;
  o.timeout = 20s;
  o.joinTimeout = 20s;
  CommRanks group(2, o);
  group.perRank = [](int rank, Options& opts) {
    if (rank == 1) opts.tcpCongestion = "nosuchcc";
  };
  const auto started = Clock::now();
  group.start([](Communicator&, int) {});
  auto reports = group.join(Clock::now() + 30s);
  for (const RankResult& r : reports) {
    SCOPED_TRACE(fmt::format("rank {}: '{}'\nlog:\n{}", r.rank, r.message, r.log));
    EXPECT_FALSE(r.hung);
    EXPECT_FALSE(r.ok) << "rank " << r.rank << " formed a communicator";
    EXPECT_NE(r.message.find("GYRE_TCP_CONGESTION=nosuchcc"), std::string::npos);
    EXPECT_LT(testing::secondsBetween(started, r.endedAt), 10.0);
  }
}

}  // namespace
}  // namespace gyre
