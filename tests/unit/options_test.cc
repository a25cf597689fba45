// Options::fromEnvironment, variable by variable (ring/options.cc reads all 13 GYRE_*
// variables; docs/configuration.md's table lists them): the default when unset or empty,
// every accepted spelling and suffix with its value, both ends of each range, and for
// anything else a kInvalidArgument whose message names the variable, the value and what
// is accepted.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "host_kernels/reduce.h"
#include "ring/options.h"

namespace gyre {
namespace {

// Sets (or, with nullptr, unsets) one variable for the scope of a test, restoring the old
// value after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    if (value) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (had_) {
      ::setenv(name_, old_.c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

constexpr const char* kAllVariables[] = {
    "GYRE_DEBUG",     "GYRE_TIMEOUT",    "GYRE_STALL_WARN",    "GYRE_SLOT_BYTES",    "GYRE_SLOTS",
    "GYRE_TRANSPORT", "GYRE_ALGO",       "GYRE_SYNC_PRIORITY", "GYRE_SOCKET_IFNAME", "GYRE_TOKEN",
    "GYRE_HOST_ID",   "GYRE_REDUCE_ISA", "GYRE_SPIN_US",       "GYRE_TRACE_BUFFER",  "GYRE_TRACE_DIR",
    "GYRE_TIMELINE",  "GYRE_TOKEN_FILE", "GYRE_ENCRYPT",       "GYRE_NSOCKS",        "GYRE_NICS_PER_HOST",
    "GYRE_TCP_CONGESTION", "GYRE_BIND",      "GYRE_CONNECT",       "GYRE_CUDA_IPC"};

// Options parsed with only `name=value` set (the other variables unset, whatever the
// environment the suite runs in holds).
Options parsedWith(const char* name, const char* value) {
  std::vector<std::unique_ptr<ScopedEnv>> cleared;
  for (const char* variable : kAllVariables) {
    cleared.push_back(std::make_unique<ScopedEnv>(variable, nullptr));
  }
  ScopedEnv set(name, value);
  return Options::fromEnvironment();
}

// name=value must be rejected with kInvalidArgument, and the message must hold each of
// `fragments` (the variable with the value, and the accepted values or range).
void expectRejected(const char* name, const char* value,
                    std::initializer_list<const char*> fragments) {
  SCOPED_TRACE(std::string(name) + "=" + value);
  try {
    parsedWith(name, value);
    ADD_FAILURE() << name << "='" << value << "' was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    for (const char* fragment : fragments) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos)
          << "'" << fragment << "' is not in: " << e.what();
    }
  }
}

TEST(Options, DefaultsWhenUnsetOrEmpty) {
  for (const char* empty : {static_cast<const char*>(nullptr), ""}) {
    // An empty value counts as unset (a launcher exporting VAR= must not break a run).
    for (const char* name : kAllVariables) {
      SCOPED_TRACE(std::string(name) + (empty ? " empty" : " unset"));
      const Options o = parsedWith(name, empty);
      EXPECT_EQ(o.logLevel, LogLevel::kWarn);
      EXPECT_EQ(o.timeout, std::chrono::seconds(1800));
      EXPECT_EQ(o.stallWarn, std::chrono::seconds(60));
      EXPECT_EQ(o.slotBytes, 0u);  // chosen from the pipes at creation
      EXPECT_EQ(o.smallestSlotBytes(), 128u * 1024);
      EXPECT_EQ(o.slots, 4u);
      EXPECT_EQ(o.transport, TransportKind::kAuto);
      EXPECT_EQ(o.algo, AllReduceAlgo::kAuto);
      EXPECT_EQ(o.syncPriority, ThreadPriority::kAuto);
      EXPECT_EQ(o.bind, CpuBinding::kNone);
      EXPECT_EQ(o.socketIfname, "");
      EXPECT_EQ(o.token, "");
      EXPECT_EQ(o.hostId, "");
      EXPECT_EQ(o.reduceIsa, "");
      EXPECT_EQ(o.spin, std::chrono::microseconds(20));
    }
  }
}

TEST(Options, DebugLevels) {
  const std::pair<const char*, LogLevel> cases[] = {{"ERROR", LogLevel::kError},
                                                    {"WARN", LogLevel::kWarn},
                                                    {"INFO", LogLevel::kInfo},
                                                    {"TRACE", LogLevel::kTrace}};
  for (const auto& [text, want] : cases) {
    EXPECT_EQ(parsedWith("GYRE_DEBUG", text).logLevel, want) << text;
  }
  // Upper case only, as NCCL_DEBUG's documented values.
  expectRejected("GYRE_DEBUG", "info", {"GYRE_DEBUG='info'", "ERROR, WARN, INFO or TRACE"});
  expectRejected("GYRE_DEBUG", "VERBOSE", {"GYRE_DEBUG='VERBOSE'", "TRACE"});
}

TEST(Options, TimeoutIsWholeSecondsUpToAYear) {
  EXPECT_EQ(parsedWith("GYRE_TIMEOUT", "1").timeout, std::chrono::milliseconds(1000));
  EXPECT_EQ(parsedWith("GYRE_TIMEOUT", "600").timeout, std::chrono::seconds(600));
  EXPECT_EQ(parsedWith("GYRE_TIMEOUT", "31536000").timeout, std::chrono::seconds(31536000));
  for (const char* bad :
       {"0", "-5", "31536001", "1.5", "10s", "5 ", "abc", "99999999999999999999"}) {
    expectRejected("GYRE_TIMEOUT", bad,
                   {(std::string("GYRE_TIMEOUT='") + bad + "'").c_str(),
                    "is not an integer in [1, 31536000]"});
  }
}

TEST(Options, StallWarnIsSecondsWithDecimals) {
  EXPECT_EQ(parsedWith("GYRE_STALL_WARN", "60").stallWarn, std::chrono::seconds(60));
  EXPECT_EQ(parsedWith("GYRE_STALL_WARN", "0.5").stallWarn, std::chrono::milliseconds(500));
  EXPECT_EQ(parsedWith("GYRE_STALL_WARN", "0.001").stallWarn, std::chrono::milliseconds(1));
  EXPECT_EQ(parsedWith("GYRE_STALL_WARN", "2.0004").stallWarn, std::chrono::milliseconds(2000));
  EXPECT_EQ(parsedWith("GYRE_STALL_WARN", "1e3").stallWarn, std::chrono::seconds(1000));
  EXPECT_EQ(parsedWith("GYRE_STALL_WARN", "31536000").stallWarn, std::chrono::seconds(31536000));
  for (const char* bad : {"0", "0.0009", "-1", "31536001", "5s", "nan", "inf", "x"}) {
    expectRejected("GYRE_STALL_WARN", bad,
                   {(std::string("GYRE_STALL_WARN='") + bad + "'").c_str(),
                    "is not a number of seconds in [0.001, "});
  }
}

TEST(Options, SlotBytesSuffixesAndBounds) {
  const std::pair<const char*, size_t> cases[] = {{"4096", 4096},
                                                  {"4K", 4096},
                                                  {"4k", 4096},
                                                  {"4160", 4160},
                                                  {"512K", 512 * 1024},
                                                  {"1M", 1 << 20},
                                                  {"3m", 3 << 20},
                                                  {"1G", size_t{1} << 30},
                                                  {"1g", size_t{1} << 30},
                                                  {"1073741824", size_t{1} << 30}};
  for (const auto& [text, want] : cases) {
    EXPECT_EQ(parsedWith("GYRE_SLOT_BYTES", text).slotBytes, want) << text;
  }
  // In range of the parser but not of a slot: the message names the value in bytes.
  for (const char* bad : {"2048", "4095", "4100", "2G", "1073741888"}) {
    expectRejected("GYRE_SLOT_BYTES", bad,
                   {"GYRE_SLOT_BYTES=", "must be a multiple of 64 between 4K and 1G"});
  }
  expectRejected("GYRE_SLOT_BYTES", "0", {"GYRE_SLOT_BYTES=0 must be a multiple of 64"});
  // "auto" is the default spelled out (a launcher may pass it through).
  EXPECT_EQ(parsedWith("GYRE_SLOT_BYTES", "auto").slotBytes, 0u);
  EXPECT_EQ(slotBytesFor(parsedWith("GYRE_SLOT_BYTES", "auto"), true), 512u * 1024);
  EXPECT_EQ(slotBytesFor(parsedWith("GYRE_SLOT_BYTES", "auto"), false), 128u * 1024);
  EXPECT_EQ(slotBytesFor(parsedWith("GYRE_SLOT_BYTES", "64K"), true), 64u * 1024);
  EXPECT_EQ(parsedWith("GYRE_SLOT_BYTES", "64K").smallestSlotBytes(), 64u * 1024);
  expectRejected("GYRE_SLOT_BYTES", "AUTO", {"GYRE_SLOT_BYTES='AUTO' is not a byte size"});
  // Not a byte size at all.
  expectRejected("GYRE_SLOT_BYTES", "4T",
                 {"GYRE_SLOT_BYTES='4T' has an unknown suffix (use K, M or G)"});
  expectRejected("GYRE_SLOT_BYTES", "4KB", {"GYRE_SLOT_BYTES='4KB' has an unknown suffix"});
  expectRejected("GYRE_SLOT_BYTES", "4 K", {"GYRE_SLOT_BYTES='4 K' has an unknown suffix"});
  for (const char* bad : {"-4K", "K", "big", "18446744073709551616"}) {
    expectRejected("GYRE_SLOT_BYTES", bad,
                   {(std::string("GYRE_SLOT_BYTES='") + bad + "' is not a byte size").c_str()});
  }
  expectRejected("GYRE_SLOT_BYTES", "99999999999G",
                 {"GYRE_SLOT_BYTES='99999999999G' is too large"});
}

TEST(Options, ParseByteSizeNamesItsCaller) {
  EXPECT_EQ(parseByteSize("0", "--bytes"), 0u);
  EXPECT_EQ(parseByteSize("64M", "--bytes"), size_t{64} << 20);
  EXPECT_EQ(parseByteSize("17179869184", "--bytes"), size_t{16} << 30);
  try {
    parseByteSize("12Q", "--bytes");
    FAIL() << "12Q was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_STREQ(e.what(), "--bytes='12Q' has an unknown suffix (use K, M or G)");
  }
}

TEST(Options, SlotsBetweenTwoAndSixtyFour) {
  EXPECT_EQ(parsedWith("GYRE_SLOTS", "2").slots, 2u);
  EXPECT_EQ(parsedWith("GYRE_SLOTS", "8").slots, 8u);
  EXPECT_EQ(parsedWith("GYRE_SLOTS", "64").slots, 64u);
  for (const char* bad : {"1", "0", "65", "-4", "4.0", "four", "4K"}) {
    expectRejected(
        "GYRE_SLOTS", bad,
        {(std::string("GYRE_SLOTS='") + bad + "' is not an integer in [2, 64]").c_str()});
  }
}

TEST(Options, NsocksBetweenOneAndSixteen) {
  EXPECT_EQ(Options{}.nsocks, 1);
  EXPECT_EQ(parsedWith("GYRE_NSOCKS", "1").nsocks, 1);
  EXPECT_EQ(parsedWith("GYRE_NSOCKS", "4").nsocks, 4);
  EXPECT_EQ(parsedWith("GYRE_NSOCKS", "16").nsocks, 16);
  for (const char* bad : {"0", "17", "-1", "2.5", "two"}) {
    expectRejected(
        "GYRE_NSOCKS", bad,
        {(std::string("GYRE_NSOCKS='") + bad + "' is not an integer in [1, 16]").c_str()});
  }
}

TEST(Options, TcpCongestionTakesAKernelName) {
  EXPECT_EQ(Options{}.tcpCongestion, "");
  EXPECT_EQ(parsedWith("GYRE_TCP_CONGESTION", "cubic").tcpCongestion, "cubic");
  EXPECT_EQ(parsedWith("GYRE_TCP_CONGESTION", "bbr").tcpCongestion, "bbr");
  EXPECT_EQ(parsedWith("GYRE_TCP_CONGESTION", "dctcp").tcpCongestion, "dctcp");
  EXPECT_EQ(parsedWith("GYRE_TCP_CONGESTION", "abcdefghijklm_5").tcpCongestion, "abcdefghijklm_5");
  EXPECT_EQ(parsedWith("GYRE_TCP_CONGESTION", "").tcpCongestion, "");  // empty is unset: the host's
  for (const char* bad : {"CUBIC", "cu bic", "../bbr", "abcdefghijklmnop", "bbr;reno"}) {
    expectRejected("GYRE_TCP_CONGESTION", bad,
                   {(std::string("GYRE_TCP_CONGESTION='") + bad + "'").c_str(),
                    "tcp_available_congestion_control"});
  }
}

TEST(Options, NicsPerHostBetweenOneAnd1024) {
  EXPECT_EQ(Options{}.nicsPerHost, 1);
  EXPECT_EQ(parsedWith("GYRE_NICS_PER_HOST", "8").nicsPerHost, 8);
  EXPECT_EQ(parsedWith("GYRE_NICS_PER_HOST", "1024").nicsPerHost, 1024);
  for (const char* bad : {"0", "1025", "-2", "eight"}) {
    expectRejected("GYRE_NICS_PER_HOST", bad,
                   {(std::string("GYRE_NICS_PER_HOST='") + bad +
                     "' is not an integer in [1, 1024]")
                        .c_str()});
  }
}

TEST(Options, FlightRecorderBufferAndDirectory) {
  EXPECT_EQ(Options{}.traceBuffer, 64u);
  EXPECT_EQ(Options{}.traceDir, "");
  EXPECT_EQ(parsedWith("GYRE_TRACE_BUFFER", "0").traceBuffer, 0u);
  EXPECT_EQ(parsedWith("GYRE_TRACE_BUFFER", "1000").traceBuffer, 1000u);
  EXPECT_EQ(parsedWith("GYRE_TRACE_DIR", "/tmp/t").traceDir, "/tmp/t");
  EXPECT_EQ(parsedWith("GYRE_TIMELINE", "/tmp/t-{rank}.json").timeline, "/tmp/t-{rank}.json");
  for (const char* bad : {"-1", "1048577", "64K", "lots"}) {
    expectRejected("GYRE_TRACE_BUFFER", bad,
                   {(std::string("GYRE_TRACE_BUFFER='") + bad +
                     "' is not an integer in [0, 1048576]")
                        .c_str()});
  }
}

TEST(Options, TransportSpellings) {
  const std::pair<const char*, TransportKind> cases[] = {
      {"auto", TransportKind::kAuto}, {"tcp", TransportKind::kTcp}, {"shm", TransportKind::kShm}};
  for (const auto& [text, want] : cases) {
    EXPECT_EQ(parsedWith("GYRE_TRANSPORT", text).transport, want) << text;
  }
  expectRejected("GYRE_TRANSPORT", "TCP", {"GYRE_TRANSPORT='TCP'", "use auto, tcp"});
  expectRejected("GYRE_TRANSPORT", "carrier-pigeon", {"GYRE_TRANSPORT='carrier-pigeon'", "shm"});
}

TEST(Options, ConnectLazyByDefaultOrEager) {
  EXPECT_EQ(parsedWith("GYRE_CONNECT", "").connect, ConnectMode::kLazy);
  EXPECT_EQ(parsedWith("GYRE_CONNECT", "lazy").connect, ConnectMode::kLazy);
  EXPECT_EQ(parsedWith("GYRE_CONNECT", "eager").connect, ConnectMode::kEager);
  expectRejected("GYRE_CONNECT", "EAGER", {"GYRE_CONNECT='EAGER'", "use lazy or eager"});
  expectRejected("GYRE_CONNECT", "full", {"GYRE_CONNECT='full'", "use lazy or eager"});
}

TEST(Options, AlgorithmSpellings) {
  const std::pair<const char*, AllReduceAlgo> cases[] = {{"auto", AllReduceAlgo::kAuto},
                                                    {"ring", AllReduceAlgo::kRing},
                                                    {"tree", AllReduceAlgo::kTree},
                                                    {"rd", AllReduceAlgo::kRecursiveDoubling},
                                                    {"hier", AllReduceAlgo::kHierarchical}};
  for (const auto& [text, want] : cases) {
    EXPECT_EQ(parsedWith("GYRE_ALGO", text).algo, want) << text;
    // The same spellings serve gyre-bench and the logs.
    EXPECT_STREQ(algoName(want), text);
    AllReduceAlgo parsed = AllReduceAlgo::kAuto;
    EXPECT_TRUE(parseAlgo(text, parsed));
    EXPECT_EQ(parsed, want);
  }
  AllReduceAlgo untouched = AllReduceAlgo::kTree;
  EXPECT_FALSE(parseAlgo("Ring", untouched));
  EXPECT_EQ(untouched, AllReduceAlgo::kTree);
  expectRejected("GYRE_ALGO", "butterfly", {"GYRE_ALGO='butterfly'", "use auto, ring, tree, rd or hier"});
  expectRejected("GYRE_ALGO", "RING", {"GYRE_ALGO='RING'"});
}

TEST(Options, SyncPrioritySpellings) {
  const std::pair<const char*, ThreadPriority> cases[] = {{"auto", ThreadPriority::kAuto},
                                                          {"realtime", ThreadPriority::kRealtime},
                                                          {"nice", ThreadPriority::kNice},
                                                          {"normal", ThreadPriority::kNormal}};
  for (const auto& [text, want] : cases) {
    EXPECT_EQ(parsedWith("GYRE_SYNC_PRIORITY", text).syncPriority, want) << text;
  }
  expectRejected("GYRE_SYNC_PRIORITY", "high",
                 {"GYRE_SYNC_PRIORITY='high'", "use auto, realtime, nice or normal"});
}

TEST(Options, BindSpellings) {
  EXPECT_EQ(parsedWith("GYRE_BIND", "none").bind, CpuBinding::kNone);
  EXPECT_EQ(parsedWith("GYRE_BIND", "core").bind, CpuBinding::kCore);
  expectRejected("GYRE_BIND", "socket", {"GYRE_BIND='socket'", "use none or core"});
  expectRejected("GYRE_BIND", "Core", {"GYRE_BIND='Core'"});
}

// The four strings are taken verbatim: their syntax belongs to the code that uses them
// (interface selection, the job token, host identity, the host reduction).
TEST(Options, StringsAreTakenVerbatim) {
  EXPECT_EQ(parsedWith("GYRE_SOCKET_IFNAME", "^docker,lo").socketIfname, "^docker,lo");
  EXPECT_EQ(parsedWith("GYRE_SOCKET_IFNAME", "=eth0").socketIfname, "=eth0");
  EXPECT_EQ(parsedWith("GYRE_TOKEN", "job-42:a b").token, "job-42:a b");
  EXPECT_TRUE(parsedWith("GYRE_TOKEN", "job-42").encrypt == false);
  EXPECT_EQ(parsedWith("GYRE_HOST_ID", "node17").hostId, "node17");
  EXPECT_EQ(parsedWith("GYRE_REDUCE_ISA", "avx2").reduceIsa, "avx2");
  EXPECT_EQ(parsedWith("GYRE_REDUCE_ISA", "avx512").reduceIsa, "avx512");
  EXPECT_EQ(parsedWith("GYRE_REDUCE_ISA", "portable").reduceIsa, "portable");
  // Checked when read, on every rank (not at the first reduction).
  expectRejected("GYRE_REDUCE_ISA", "sse9",
                 {"GYRE_REDUCE_ISA='sse9': use auto, portable, avx2 or avx512"});
  expectRejected("GYRE_REDUCE_ISA", "AVX2", {"GYRE_REDUCE_ISA='AVX2'"});
}

TEST(Options, SpinMicrosecondsUpToOneSecond) {
  EXPECT_EQ(parsedWith("GYRE_SPIN_US", "0").spin, std::chrono::microseconds(0));
  EXPECT_EQ(parsedWith("GYRE_SPIN_US", "150").spin, std::chrono::microseconds(150));
  EXPECT_EQ(parsedWith("GYRE_SPIN_US", "1000000").spin, std::chrono::seconds(1));
  for (const char* bad : {"-1", "1000001", "20us", "2.5"}) {
    expectRejected(
        "GYRE_SPIN_US", bad,
        {(std::string("GYRE_SPIN_US='") + bad + "' is not an integer in [0, 1000000]").c_str()});
  }
}

// The host reduction takes GYRE_REDUCE_ISA from the options parsed once per process
// (globalOptions), so each case runs in a fresh process: a death test in the "threadsafe"
// style re-executes this binary. A bad value fails there too, not only in fromEnvironment.
TEST(OptionsDeathTest, ReduceIsaIsCheckedAtFirstReduction) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto firstReduction = [](const char* value) {
    ::setenv("GYRE_REDUCE_ISA", value, 1);
    try {
      std::fprintf(stderr, "active %s\n", reduceIsaName(activeReduceIsa()));
    } catch (const Error& e) {
      std::fprintf(stderr, "%s\n", e.what());
      ::_exit(e.code() == ErrorCode::kInvalidArgument ? 3 : 4);
    }
    ::_exit(0);
  };
  EXPECT_EXIT(firstReduction("sse9"), ::testing::ExitedWithCode(3),
              "GYRE_REDUCE_ISA='sse9': use auto, portable, avx2 or avx512");
  EXPECT_EXIT(firstReduction("portable"), ::testing::ExitedWithCode(0), "active portable");
  EXPECT_EXIT(firstReduction("auto"), ::testing::ExitedWithCode(0), "active ");
}

}  // namespace
}  // namespace gyre
