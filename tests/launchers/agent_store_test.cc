// gyre's store served by the launcher (gyrerun's gyre-store, GYRE_AGENT_STORE), tested
// with the real programs: gyrerun starting agent_store_rank (agent_store_rank.cc),
// gyre-bench or small shell programs, and the real torchrun where a torch is installed.
// - The store outlives rank 0: after rank 0 dies by SIGKILL, the other ranks open new
//   clients, use the store, and build a communicator of the survivors through it; a
//   process's second communicator from the environment on the same store works.
// - --max-restarts: the restarted group creates its communicator again on the same store,
//   its keys apart from the first attempt's (/worker/attempt_<n>).
// - A rank with another secret is named by the others (the store's refusals are read
//   outside the attempt's prefix).
// - SIGKILL of gyrerun leaves no gyre-store behind, and its port closes.
// - --no-agent-store is the old behaviour (rank 0 serves; no GYRE_AGENT_STORE).
// - A store that cannot start fails the launch at once, naming program, address, reason.
// - gyre-store alone: serves with the secret until SIGTERM; says what is wrong.
// - torchrun: a C++ program runs with TORCHELASTIC_USE_AGENT_STORE=True (torchrun's own
//   store holds MASTER_PORT) and False; a torch.distributed program runs under gyrerun.
// Every command runs under `timeout`; the tests that wait also check the elapsed time.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "base/error.h"
#include "free_ports.h"
#include "run_shell.h"
#include "store/tcp_store.h"

namespace {

using gyre::testing::binary;
using gyre::testing::freePort;
using gyre::testing::RunResult;
using gyre::testing::runShell;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// OMP_NUM_THREADS set: torchrun's notice about it stays out of stderr.
RunResult gyrerun(const std::string& args, int timeoutSeconds = 60) {
  return runShell("OMP_NUM_THREADS=1 GYRE_JOIN_TIMEOUT=20 timeout -k 5 " +
                  std::to_string(timeoutSeconds) + " " + binary("gyrerun") + " " + args);
}

// Whether something accepts connections at 127.0.0.1:port.
bool accepts(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return ok;
}

TEST(AgentStore, TheStoreOutlivesRankZero) {
  // Rank 0 dies by SIGKILL after both communicators exist; the grace lets the others finish.
  RunResult r = gyrerun("-n 4 --grace 20 " + binary("agent_store_rank") + " outlive", 90);
  EXPECT_EQ(r.exitCode, 1) << r.out << r.err;  // rank 0 failed, by design
  EXPECT_TRUE(contains(r.err, "gyrerun: rank 0 (local rank 0")) << r.err;
  EXPECT_TRUE(contains(r.err, "signal SIGKILL")) << r.err;
  for (int rank = 0; rank < 4; ++rank) {
    const std::string me = "rank " + std::to_string(rank) + ": ";
    EXPECT_TRUE(contains(r.out, me + "two communicators from the environment\n")) << r.out << r.err;
    EXPECT_TRUE(contains(r.out, me + "keys under /worker/attempt_0, this rank's communicators 2"))
        << r.out << r.err;
    if (rank == 0) continue;
    EXPECT_TRUE(contains(r.out, me + "the store serves after rank 0 died\n")) << r.out << r.err;
    EXPECT_TRUE(contains(r.out, me + "survivors' communicator of 3 ranks\n")) << r.out << r.err;
  }
  EXPECT_FALSE(contains(r.out, "rank 0: the store serves")) << r.out;
  // The survivors finished on their own: gyrerun never had to stop them.
  EXPECT_FALSE(contains(r.err, "SIGTERM to ranks")) << r.err;
  EXPECT_LT(r.seconds, 45) << r.err;
}

TEST(AgentStore, ARestartedGroupCreatesItsCommunicatorAgain) {
  RunResult r =
      gyrerun("-n 2 --max-restarts 1 --grace 2 " + binary("agent_store_rank") + " restart", 90);
  EXPECT_EQ(r.exitCode, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.err, "rank 1: failing on purpose, attempt 0")) << r.err;
  EXPECT_TRUE(contains(r.err, "restarting the local group (restart 1 of at most 1)")) << r.err;
  // Both attempts of both ranks, on one store (the same address every time).
  std::set<std::string> seen, stores;
  for (const std::string& line : lines(r.out)) {
    const size_t at = line.find(": ok at ");
    if (at == std::string::npos) continue;
    seen.insert(line.substr(0, at));
    stores.insert(line.substr(at + 8));
  }
  EXPECT_EQ(seen, (std::set<std::string>{"attempt 0 rank 0", "attempt 0 rank 1", "attempt 1 rank 0",
                                         "attempt 1 rank 1"}))
      << r.out << r.err;
  EXPECT_EQ(stores.size(), 1u) << r.out;
  EXPECT_LT(r.seconds, 45) << r.err;
}

TEST(AgentStore, ARankWithAnotherSecretIsNamedByTheOthers) {
  // The store records the client it refused at its top level (gyre/store/refused/<r>), not
  // under the attempt's prefix: the join must still read it there and name rank 2.
  RunResult r = gyrerun(
      "-n 3 --grace 10 sh -c 'if [ $RANK = 2 ]; then export GYRE_TOKEN=other; "
      "fi; exec " +
      binary("gyre-bench") + " -b 8 -e 64K -n 2 -w 1'");
  EXPECT_EQ(r.exitCode, 1);
  // Each names it: the first to see it, or the other repeating what that one published.
  for (int rank : {0, 1}) {
    const std::string me = "[rank " + std::to_string(rank) + "] gyre-bench: rank " +
                           std::to_string(rank) + ": ";
    bool named = false;
    for (const std::string& line : lines(r.err)) {
      named |= line.rfind(me, 0) == 0 &&
               contains(line, "rank 2 could not join: a client claiming to be rank 2 did not "
                              "match the secret");
    }
    EXPECT_TRUE(named) << "rank " << rank << " did not name rank 2:\n" << r.err;
  }
  EXPECT_LT(r.seconds, 15) << r.err;  // the join's 3 s grace, not its timeout
}

TEST(AgentStore, DoesNotOutliveAKilledGyrerun) {
  char dir[] = "/tmp/gyre-agent-store-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string file = std::string(dir) + "/address";
  // gyrerun in the background; once its ranks run, SIGKILL to gyrerun alone. Its store
  // must end (a zombie counts: a container's init may never reap it) and its port close.
  RunResult r = runShell(
      "timeout -k 5 30 sh -c '" + binary("gyrerun") + " -n 2 sh -c \"echo \\$GYRE_AGENT_STORE > " +
      file +
      "; exec sleep 60\" & g=$!; "
      "for i in $(seq 100); do [ -s " +
      file +
      " ] && break; sleep 0.1; done; "
      "s=$(pgrep -P $g -x gyre-store); echo store=$s; cat " +
      file +
      "; kill -KILL $g; "
      "for i in $(seq 50); do st=$(cut -d\" \" -f3 /proc/$s/stat 2>/dev/null); "
      "[ -z \"$st\" ] || [ \"$st\" = Z ] && break; sleep 0.1; done; echo state=${st:-gone}'");
  std::vector<std::string> out = lines(r.out);
  ASSERT_EQ(out.size(), 3u) << r.out << r.err;
  EXPECT_GT(std::atoi(out[0].substr(6).c_str()), 0) << "no gyre-store child: " << r.out;
  ASSERT_EQ(out[1].rfind("127.0.0.1:", 0), 0u) << r.out;
  EXPECT_TRUE(out[2] == "state=Z" || out[2] == "state=gone") << r.out;
  EXPECT_FALSE(accepts(std::atoi(out[1].substr(10).c_str()))) << "the store's port still answers";
  EXPECT_LT(r.seconds, 20) << r.err;
  std::remove(file.c_str());
  ::rmdir(dir);
}

TEST(AgentStore, ServedByDefaultAndNotWithNoAgentStore) {
  const std::string show =
      " sh -c 'echo ${GYRE_AGENT_STORE:-unset} $TORCHELASTIC_USE_AGENT_STORE "
      "$(pgrep -P $PPID -x gyre-store >/dev/null && echo store || echo no-store)'";
  RunResult served = gyrerun("-n 2" + show);
  ASSERT_EQ(served.exitCode, 0) << served.err;
  for (const std::string& line : lines(served.out)) {
    EXPECT_EQ(line.rfind("127.0.0.1:", 0), 0u) << line;
    EXPECT_TRUE(contains(line, " False store")) << line;
  }
  // The old behaviour: no store of gyrerun's, none inherited from an outer job.
  RunResult old = runShell("GYRE_AGENT_STORE=10.9.9.9:5 OMP_NUM_THREADS=1 timeout -k 5 60 " +
                           binary("gyrerun") + " --no-agent-store -n 2" + show);
  EXPECT_EQ(old.exitCode, 0) << old.err;
  EXPECT_EQ(old.out, "unset False no-store\nunset False no-store\n") << old.err;
  // A real job both ways: rank 0 serving, and every rank a client of gyrerun's store.
  for (const char* flag : {"--no-agent-store ", ""}) {
    RunResult bench =
        gyrerun(std::string(flag) + "-n 3 " + binary("gyre-bench") + " -b 8 -e 64K -n 2 -w 1");
    EXPECT_EQ(bench.exitCode, 0) << flag << bench.out << bench.err;
    EXPECT_TRUE(contains(bench.out, "# Out of bounds values : 0 OK")) << flag << bench.out;
  }
}

TEST(AgentStore, OtherNodesPointTheirRanksAtNodeZerosStore) {
  const std::string show =
      " sh -c 'echo $GYRE_AGENT_STORE $(pgrep -P $PPID -x gyre-store >/dev/null && echo store "
      "|| echo no-store)'";
  RunResult r =
      gyrerun("--nnodes 2 --node-rank 1 --master-addr 10.0.0.1 --master-port 29555 -n 1" + show);
  EXPECT_EQ(r.exitCode, 0) << r.err;
  EXPECT_EQ(r.out, "10.0.0.1:29556 no-store\n") << r.err;  // MASTER_PORT+1, served on node 0
  r = gyrerun("--nnodes 2 --node-rank 1 --master-addr 10.0.0.1 --store-port 30001 -n 1" + show);
  EXPECT_EQ(r.out, "10.0.0.1:30001 no-store\n") << r.err;
  r = gyrerun("--nnodes 2 --node-rank 1 --master-port 65535 -n 1 true");
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_TRUE(contains(r.err, "give --store-port on every node")) << r.err;
  r = gyrerun("--no-agent-store --store-port 30001 -n 1 true");
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_TRUE(contains(r.err, "--store-port and --no-agent-store exclude each other")) << r.err;
}

TEST(AgentStore, AMasterAddrThatIsNotThisHostsIsServedOnEveryAddress) {
  // A name the nodes reach node 0 by (a service, a NAT) need not be an address of node 0,
  // as with torch's store: the store listens on every address and gyrerun says so.
  RunResult r = gyrerun(
      "--master-addr 192.0.2.1 -n 1 bash -c 'echo $GYRE_AGENT_STORE; "
      "(exec 3<>/dev/tcp/127.0.0.1/${GYRE_AGENT_STORE##*:}) && echo reached over loopback'");
  EXPECT_EQ(r.exitCode, 0) << r.err;
  std::vector<std::string> out = lines(r.out);
  ASSERT_EQ(out.size(), 2u) << r.out << r.err;
  EXPECT_EQ(out[0].rfind("192.0.2.1:", 0), 0u) << r.out;
  EXPECT_EQ(out[1], "reached over loopback") << "not listening on every address: " << r.out;
  EXPECT_TRUE(contains(r.err,
                       "gyrerun: 192.0.2.1 is not an address of this host: the job's "
                       "store listens on port "))
      << r.err;
}

TEST(AgentStore, AStoreThatCannotStartFailsTheLaunchSayingWhy) {
  struct Case {
    std::string env, args;
    std::vector<std::string> said;
  };
  // A port held by a listener of this test, for --store-port.
  const int held = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::bind(held, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(held, 1), 0);
  ASSERT_EQ(::getsockname(held, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const std::string heldPort = std::to_string(ntohs(addr.sin_port));
  const std::vector<Case> cases = {
      {"GYRE_STORE_PROGRAM=/nonexistent/gyre-store",
       "",
       {"the job's store program /nonexistent/gyre-store did not start at 127.0.0.1:",
        "cannot execute it: No such file or directory", "--no-agent-store"}},
      {"GYRE_STORE_PROGRAM=/bin/false",
       "",
       {"/bin/false did not start at 127.0.0.1:", "it exited (exit code 1) before serving"}},
      {"GYRE_TOKEN_FILE=/nonexistent/secret",
       "",
       {"gyre-store did not start at 127.0.0.1:",
        "GYRE_TOKEN_FILE=/nonexistent/secret: cannot open it"}},
      {"",
       "--store-port " + heldPort,
       {"cannot serve the job's store at 127.0.0.1:" + heldPort +
        " (--store-port): the port is "
        "already in use"}},
  };
  for (const Case& c : cases) {
    RunResult r = runShell("env " + c.env + " OMP_NUM_THREADS=1 timeout -k 5 30 " +
                           binary("gyrerun") + " " + c.args + " -n 2 echo a rank ran");
    EXPECT_EQ(r.exitCode, 1) << c.env << c.args << r.err;
    EXPECT_EQ(r.out, "") << "no rank may start without the store: " << c.env << c.args;
    for (const std::string& words : c.said) EXPECT_TRUE(contains(r.err, words)) << r.err;
    EXPECT_LT(r.seconds, 10) << c.env << c.args;
  }
  ::close(held);
}

// ---- gyre-store on its own -----------------------------------------------------------------

TEST(GyreStore, ServesWithTheSecretUntilSigterm) {
  const int port = freePort();
  const std::string secret = "gyre-store-test-secret";
  // In the background under `timeout` (its parent, which outlives the shell), saying
  // "ready" on fd 3, a FIFO here that this process reads until gyre-store closes it;
  // SIGTERM (through timeout) once a client has used it.
  char dir[] = "/tmp/gyre-store-test-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string ready = std::string(dir) + "/ready";
  ASSERT_EQ(::mkfifo(ready.c_str(), 0600), 0);
  const int readyFd = ::open(ready.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);  // its reader
  ASSERT_GE(readyFd, 0);
  const std::string command = "GYRE_TOKEN=" + secret + " timeout -k 5 30 " + binary("gyre-store") +
                              " --port " + std::to_string(port) + " --ready-fd 3 3>" + ready +
                              " >/dev/null 2>&1 & echo $!";
  RunResult started = runShell(command);
  const pid_t pid = std::atoi(started.out.c_str());
  ASSERT_GT(pid, 0) << started.err;
  std::string said;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    pollfd p{readyFd, POLLIN, 0};
    if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
    char buf[256];
    const ssize_t n = ::read(readyFd, buf, sizeof(buf));
    if (n > 0) {
      said.append(buf, static_cast<size_t>(n));
    } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
      break;  // closed
    }
  }
  ::close(readyFd);
  EXPECT_EQ(said, "ready\n");
  {
    auto store = gyre::TcpStore::connect("127.0.0.1", static_cast<uint16_t>(port),
                                         std::chrono::seconds(5), secret);
    store->setString("k", "v");
    EXPECT_EQ(store->getString("k"), "v");
    EXPECT_EQ(store->add("n", 2), 2);
  }
  // Without the secret: refused at connect, naming no secret.
  try {
    gyre::TcpStore::connect("127.0.0.1", static_cast<uint16_t>(port), std::chrono::seconds(5));
    ADD_FAILURE() << "a client without the secret was served";
  } catch (const gyre::Error& e) {
    EXPECT_EQ(std::string(e.what()).find(secret), std::string::npos) << e.what();
  }
  ::kill(pid, SIGTERM);
  bool gone = false;
  for (int i = 0; i < 200 && !gone; ++i) {
    gone = !accepts(port);
    if (!gone) ::usleep(10000);  // polled: not our child, nothing tells us it has gone
  }
  EXPECT_TRUE(gone) << "gyre-store still serves 2 s after SIGTERM";
  std::remove(ready.c_str());
  ::rmdir(dir);
}

TEST(GyreStore, SaysWhatIsWrong) {
  struct Case {
    std::string args;
    int status;
    std::string said;
  };
  const std::vector<Case> cases = {
      {"", 2, "gyre-store: give either --listen-fd or --port"},
      {"--port 0", 2, "gyre-store: --port wants an integer in [1, 65535], got '0'"},
      {"--listen-fd 0 </dev/null", 1, "gyre-store: --listen-fd 0 is not a socket"},
      {"--host 192.0.2.1 --port 4", 1, "192.0.2.1 is not an address of this host"},
  };
  for (const Case& c : cases) {
    RunResult r = runShell("timeout -k 5 10 " + binary("gyre-store") + " " + c.args);
    EXPECT_EQ(r.exitCode, c.status) << c.args << r.err;
    EXPECT_TRUE(contains(r.err, c.said)) << c.args << ": " << r.err;
    EXPECT_EQ(r.out, "") << c.args;
  }
}

// ---- torch ------------------------------------------------------------------------------

std::string torch2Python() {
  const char* venv = std::getenv("GYRE_TORCH2_VENV");
  const char* home = std::getenv("HOME");
  return (venv ? std::string(venv) : std::string(home ? home : "") + "/.cache/gyre/venv-torch2") +
         "/bin/python";
}

bool hasTorch(const std::string& python) {
  return runShell(python + " -c 'import torch.distributed' >/dev/null 2>&1").exitCode == 0;
}

// torchrun of `python`'s torch: Debian's 1.13 needs gyre_torch's fix under Python 3.11
// (python/gyre_torch/_launch_fix.py), loaded by path so that the extension is not needed.
std::string torchrun(const std::string& python) {
  const std::string fix = std::string(GYRE_SOURCE_DIR) + "/python/gyre_torch/_launch_fix.py";
  return "OMP_NUM_THREADS=1 timeout -k 5 90 " + python +
         " -c \"import importlib.util as u, sys; s = u.spec_from_file_location('fix', '" + fix +
         "'); m = u.module_from_spec(s); s.loader.exec_module(m); m.fix(); "
         "from torch.distributed.run import main; sys.argv[0] = 'torchrun'; main()\" ";
}

TEST(AgentStore, TorchrunRunsTheCppProgramWithAndWithoutItsAgentStore) {
  const std::string bench = binary("gyre-bench") + " -b 8 -e 64K -n 2 -w 1";
  int torches = 0;
  for (const std::string& python : {torch2Python(), std::string("/usr/bin/python3")}) {
    if (!hasTorch(python)) continue;
    // The static rendezvous with a port: the agent's torch store holds MASTER_PORT (True).
    // c10d without sharing its store (1.13: always; 2.x: TORCH_DISABLE_SHARE_RDZV_TCP_STORE)
    // leaves MASTER_PORT to rank 0 (False).
    for (const auto& [rdzv, flag] :
         {std::pair<std::string, std::string>{
              "--rdzv_backend=static --master_port=" + std::to_string(freePort()) + " ", "True"},
          {"--rdzv_backend=c10d --rdzv_endpoint=127.0.0.1:0 ", "False"}}) {
      RunResult r = runShell("TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 " + torchrun(python) + rdzv +
                             "--no_python --nproc_per_node=2 sh -c 'echo agent store "
                             "$TORCHELASTIC_USE_AGENT_STORE >&2; exec " +
                             bench + "'");
      EXPECT_EQ(r.exitCode, 0) << python << " " << rdzv << r.out << r.err;
      EXPECT_TRUE(contains(r.err, "agent store " + flag)) << python << " " << rdzv << r.err;
      EXPECT_TRUE(contains(r.out, "# Out of bounds values : 0 OK")) << python << rdzv << r.out;
    }
    ++torches;
  }
  if (torches == 0) GTEST_SKIP() << "no torch: neither " << torch2Python() << " nor Debian's";
}

TEST(AgentStore, TorchDistributedRunsUnderGyrerunBesideItsStore) {
  // torch's env:// reads TORCHELASTIC_USE_AGENT_STORE: gyrerun's False keeps torch's rank
  // 0 serving its own store at MASTER_PORT, while gyre-store serves gyre's.
  const std::string python = torch2Python();
  if (!hasTorch(python)) GTEST_SKIP() << "no torch 2 at " << python;
  RunResult r = gyrerun("-n 2 " + python +
                            " -c \"import torch, torch.distributed as d; "
                            "d.init_process_group('gloo'); t = torch.ones(1); d.all_reduce(t); "
                            "print(int(t.item())); d.destroy_process_group()\"",
                        120);
  EXPECT_EQ(r.exitCode, 0) << r.out << r.err;
  EXPECT_EQ(r.out, "2\n2\n") << r.err;
}

}  // namespace
