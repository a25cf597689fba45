// The flight recorder (collectives/flight_recorder.h) on real forked ranks, and
// tools/gyre_trace.py on what they dump: dumpTrace() holds exactly the last N operations
// in issue order with their states; GYRE_TRACE_BUFFER=0 records nothing; SIGUSR1 dumps;
// a rank SIGSTOPped between two calls is named by the analysis as the one that did not
// reach the collective the others timed out in (with and without its own dump); a rank
// that skips a call is named with the sequence number and the differing count. And in
// one process: a dump taken while the issuing thread rewrites the same slots never shows
// an entry mixed from two operations.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "collectives/flight_recorder.h"
#include "fork_ranks.h"
#include "run_shell.h"

namespace gyre::testing {
namespace {

namespace fs = std::filesystem;

class TraceDir {
 public:
  TraceDir() {
    path_ = fmt::format("{}gyre-fr-{}-{}", ::testing::TempDir(), ::getpid(), counter()++);
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TraceDir() { fs::remove_all(path_); }
  const std::string& path() const { return path_; }
  std::vector<std::string> dumps() const {
    std::vector<std::string> files;
    for (const auto& e : fs::directory_iterator(path_)) {
      const std::string name = e.path().filename().string();
      if (name.rfind("gyre-trace-", 0) == 0 && e.path().extension() == ".json") {
        files.push_back(e.path().string());
      }
    }
    std::sort(files.begin(), files.end());
    return files;
  }

 private:
  static int& counter() {
    static int n = 0;
    return n;
  }
  std::string path_;
};

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

RunResult analyse(const std::string& dir) {
  return runShell(fmt::format("timeout -k 5 60 /usr/bin/python3 {}/tools/gyre_trace.py {}",
                              GYRE_SOURCE_DIR, dir));
}

std::string describeAll(const std::vector<RankResult>& reports) {
  std::string s;
  for (const RankResult& r : reports) s += r.describe() + "\n";
  return s;
}

Options traceOptions(const TraceDir& dir, size_t buffer) {
  Options o;
  o.transport = TransportKind::kShm;
  o.timeout = std::chrono::seconds(2);
  o.stallWarn = std::chrono::seconds(60);  // the timeout's dump, not the stall report's
  o.traceBuffer = buffer;
  o.traceDir = dir.path();
  o.token = fmt::format("fr{}{}", ::getpid(), buffer);
  return o;
}

// 20 all-reduces, a broadcast, async ops (named by the caller) and a barrier; 8 slots keep
// the last 8 of 24.
TEST(FlightRecorder, DumpHoldsTheLastOperationsInIssueOrder) {
  TraceDir dir;
  CommRanks group(3, traceOptions(dir, 5));  // rounded up to 8
  group.start([&](Communicator& comm, int rank) {
    std::vector<float> v(1000, 1.0f);
    for (int i = 0; i < 20; ++i)
      comm.allReduce(v.data(), v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum);
    comm.broadcast(v.data(), 10, DataType::kFloat32, 1);
    // A caller's names (gyre_torch gives torch's): kept for one call, cut to 24 bytes,
    // printable ASCII only.
    comm.nameNextCall("all_reduce");
    Work a = comm.allReduceAsync(v.data(), v.data(), 7, DataType::kFloat32, ReduceOp::kMax);
    comm.nameNextCall("all_gather_into_tensor_\xc3\xa9 and more");
    Work b = comm.allGatherAsync(v.data() + rank, v.data(), 1, DataType::kFloat32);
    a.wait();
    b.wait();
    comm.barrier();
    const std::string path = comm.dumpTrace();
    const std::string end = fmt::format("-rank{}.json", rank);
    if (path.rfind(dir.path() + "/gyre-trace-", 0) != 0 ||
        path.compare(path.size() - end.size(), end.size(), end) != 0) {
      throw std::runtime_error("unexpected dump path " + path);
    }
  });
  ASSERT_TRUE(group.waitReady(std::chrono::seconds(30)));
  auto reports = group.join(Clock::now() + std::chrono::seconds(60));
  for (const RankResult& r : reports) ASSERT_TRUE(r.ok) << r.describe();
  const std::vector<std::string> files = dir.dumps();
  ASSERT_EQ(files.size(), 3u);
  for (int rank = 0; rank < 3; ++rank) {
    SCOPED_TRACE(files[rank]);
    const std::string text = readFile(files[rank]);
    EXPECT_NE(text.find("\"schema\": \"gyre-flight-recorder\""), std::string::npos) << text;
    EXPECT_NE(text.find("\"version\": 1,"), std::string::npos);
    EXPECT_NE(text.find(fmt::format("\"rank\": {},", rank)), std::string::npos);
    EXPECT_NE(text.find("\"size\": 3,"), std::string::npos);
    EXPECT_NE(text.find("\"reason\": \"dumpTrace()\""), std::string::npos);
    EXPECT_NE(text.find("\"capacity\": 8,"), std::string::npos) << text;
    EXPECT_NE(text.find("\"recorded\": 24,"), std::string::npos) << text;
    EXPECT_EQ(countOf(text, "\"record\": "), 8u) << text;
    EXPECT_EQ(countOf(text, "\"state\": \"completed\""), 8u) << text;
    // Records 16..23, in order: 4 all-reduces (seq 16-19), then the rest.
    std::regex entry("\"record\": (\\d+), \"seq\": (\\d+), \"collective\": \"(\\w+)\"");
    std::vector<std::string> seen;
    for (std::sregex_iterator it(text.begin(), text.end(), entry), end; it != end; ++it) {
      seen.push_back(fmt::format("{} {} {}", (*it)[1].str(), (*it)[2].str(), (*it)[3].str()));
    }
    EXPECT_EQ(seen, (std::vector<std::string>{
                        "16 16 allreduce", "17 17 allreduce", "18 18 allreduce", "19 19 allreduce",
                        "20 20 broadcast", "21 21 allreduce", "22 22 allgather", "23 23 barrier"}))
        << text;
    EXPECT_NE(text.find("\"count\": 7, \"root\": -1, \"peer\": -1, \"algorithm\": \"rd\""),
              std::string::npos)
        << text;
    EXPECT_NE(text.find("\"collective\": \"broadcast\", \"call\": null, \"dtype\": \"float\", "
                        "\"op\": \"sum\", \"count\": 10, \"root\": 1,"),
              std::string::npos)
        << text;
    EXPECT_NE(text.find("\"seq\": 21, \"collective\": \"allreduce\", \"call\": \"all_reduce\","),
              std::string::npos)
        << text;
    EXPECT_NE(text.find("\"collective\": \"allgather\", \"call\": \"all_gather_into_tensor_?\","),
              std::string::npos)
        << text;
    EXPECT_NE(text.find("\"collective\": \"barrier\", \"call\": null,"), std::string::npos) << text;
    // A completed 1000-float all-reduce moved bytes both ways.
    EXPECT_EQ(text.find("\"bytes_sent\": 0, \"bytes_received\": 0}"), std::string::npos) << text;
  }
  RunResult a = analyse(dir.path());
  ASSERT_EQ(a.exitCode, 0) << a.err;
  EXPECT_NE(a.out.find("not reached: none: every rank started barrier #23"), std::string::npos)
      << a.out;
  EXPECT_NE(a.out.find("verdict: nothing wrong found"), std::string::npos) << a.out;
  EXPECT_NE(a.out.find("slowest: over the last 8 collectives"), std::string::npos) << a.out;
}

TEST(FlightRecorder, DumpWhileIssuingNeverMixesTwoOperations) {
  // 4 slots rewritten as fast as one thread can issue, dumped from another: every entry a
  // dump shows must be one operation's, whose count and name both carry its record
  // number. Bounded in operations and in time.
  FlightRecorder recorder(4, 0, 1, "mix");
  std::atomic<bool> stop{false};
  std::thread issuer([&] {
    CollectiveCall call;
    for (uint64_t i = 0; i < 2'000'000 && !stop.load(std::memory_order_relaxed); ++i) {
      call.count = i;
      const std::string name = "op" + std::to_string(i);
      const uint64_t record = recorder.issued(call, -1, name);
      recorder.started(record, call);
      recorder.finished(record, true, i, i);
    }
  });
  const std::regex entry(R"re("record": (\d+), [^}]*"call": "op(\d+)"[^}]*)re"
                         R"re("count": (\d+),[^}]*"bytes_sent": (\d+))re");
  size_t seen = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  while (std::chrono::steady_clock::now() < until) {
    const std::string json = recorder.toJson("test", "");
    for (std::sregex_iterator it(json.begin(), json.end(), entry), end; it != end; ++it) {
      const std::string record = (*it)[1];
      ASSERT_EQ((*it)[2], record) << "an entry mixed from two operations: " << it->str();
      ASSERT_EQ((*it)[3], record) << "an entry mixed from two operations: " << it->str();
      const std::string sent = (*it)[4];
      ASSERT_TRUE(sent == "0" || sent == record) << it->str();
      ++seen;
    }
  }
  stop = true;
  issuer.join();
  EXPECT_GT(seen, 100u) << "the dumps showed almost no entries: the check checked nothing";
}

TEST(FlightRecorder, OffRecordsNothing) {
  TraceDir dir;
  CommRanks group(2, traceOptions(dir, 0));
  group.start([&](Communicator& comm, int) {
    float x = 1;
    comm.allReduce(&x, &x, 1, DataType::kFloat32, ReduceOp::kSum);
    try {
      comm.dumpTrace();
    } catch (const Error& e) {
      if (e.code() == ErrorCode::kInvalidArgument &&
          std::string(e.what()).find("GYRE_TRACE_BUFFER=0") != std::string::npos) {
        return;
      }
      throw;
    }
    throw std::runtime_error("dumpTrace() with the recorder off did not throw");
  });
  ASSERT_TRUE(group.waitReady(std::chrono::seconds(30)));
  for (const RankResult& r : group.join(Clock::now() + std::chrono::seconds(30))) {
    EXPECT_TRUE(r.ok) << r.describe();
  }
  EXPECT_EQ(dir.dumps().size(), 0u);
}

TEST(FlightRecorder, Sigusr1Dumps) {
  TraceDir dir;
  CommRanks group(2, traceOptions(dir, 16));
  group.start([&](Communicator& comm, int rank) {
    float x = 1;
    for (int i = 0; i < 3; ++i) comm.allReduce(&x, &x, 1, DataType::kFloat32, ReduceOp::kSum);
    ::kill(::getpid(), SIGUSR1);
    // The library's signal thread logs the dump once written.
    group.waitForLog(rank, "SIGUSR1: flight recorder dumped to", std::chrono::seconds(5));
    const std::string mine = fmt::format("-rank{}.json", rank);
    for (const auto& e : fs::directory_iterator(dir.path())) {
      const std::string name = e.path().string();
      if (name.size() > mine.size() &&
          name.compare(name.size() - mine.size(), mine.size(), mine) == 0) {
        comm.barrier();
        return;
      }
    }
    throw std::runtime_error("SIGUSR1's dump is not in the trace directory");
  });
  ASSERT_TRUE(group.waitReady(std::chrono::seconds(30)));
  for (const RankResult& r : group.join(Clock::now() + std::chrono::seconds(30))) {
    EXPECT_TRUE(r.ok) << r.describe();
    EXPECT_NE(r.log.find("SIGUSR1: flight recorder dumped to"), std::string::npos) << r.log;
  }
  ASSERT_EQ(dir.dumps().size(), 2u);
  const std::string text = readFile(dir.dumps()[0]);
  EXPECT_NE(text.find("\"reason\": \"SIGUSR1\""), std::string::npos) << text;
  EXPECT_EQ(countOf(text, "\"state\": \"completed\""), 3u) << text;
}

// Rank 2 stops itself (SIGSTOP) before its 31st all-reduce; the others time out in it and
// dump. The analysis names rank 2 and the collective, first without rank 2's dump (a
// hung rank writes none), then with it (continued, it fails at once and dumps).
TEST(FlightRecorder, StoppedRankIsNamed) {
  TraceDir dir;
  constexpr int kVictim = 2;
  Options o = traceOptions(dir, 64);
  o.transport = TransportKind::kTcp;
  CommRanks group(4, o);
  group.start([&](Communicator& comm, int rank) {
    std::vector<float> v(4096, 1.0f);
    for (int i = 0;; ++i) {
      if (rank == kVictim && i == 30) ::raise(SIGSTOP);
      comm.allReduce(v.data(), v.data(), v.size(), DataType::kFloat32, ReduceOp::kMax);
    }
  });
  ASSERT_TRUE(group.waitReady(std::chrono::seconds(30)));
  // The survivors time out, dump and exit.
  for (int r : {0, 1, 3}) ASSERT_TRUE(group.tryWaitEnded(r, std::chrono::seconds(20))) << r;
  ASSERT_EQ(dir.dumps().size(), 3u) << "the survivors did not dump";
  // The stopped rank has no dump: the analysis works from the others'.
  TraceDir survivors;
  for (const std::string& f : dir.dumps()) {
    fs::copy_file(f, survivors.path() + "/" + fs::path(f).filename().string());
  }
  ::kill(group.pid(kVictim), SIGCONT);
  auto reports = group.join(Clock::now() + std::chrono::seconds(30));
  int failedSeq = -1;
  for (const RankResult& r : reports) {
    ASSERT_TRUE(r.reported && !r.ok && !r.hung) << describeAll(reports);
    if (r.rank == kVictim) continue;
    EXPECT_EQ(r.code, static_cast<int>(ErrorCode::kTimeout)) << r.describe();
    std::smatch m;
    ASSERT_TRUE(std::regex_search(r.message, m, std::regex("allreduce #(\\d+)"))) << r.message;
    failedSeq = std::stoi(m[1].str());
    EXPECT_NE(r.log.find("flight recorder dumped to"), std::string::npos) << r.log;
  }
  ASSERT_EQ(dir.dumps().size(), 4u);

  RunResult a = analyse(survivors.path());
  ASSERT_EQ(a.exitCode, 0) << a.err;
  EXPECT_NE(a.out.find("missing dump: rank 2 "), std::string::npos) << a.out;
  EXPECT_NE(a.out.find(fmt::format("not reached: allreduce #{}: rank 2 (no dump); reached by "
                                   "ranks 0,1,3",
                                   failedSeq)),
            std::string::npos)
      << a.out;
  EXPECT_NE(a.out.find("blamed: rank 2 (stalled) by ranks 0,1,3"), std::string::npos) << a.out;
  EXPECT_NE(a.out.find(fmt::format("verdict: rank 2 did not reach allreduce #{}", failedSeq)),
            std::string::npos)
      << a.out;

  RunResult all = analyse(dir.path());
  ASSERT_EQ(all.exitCode, 0) << all.err;
  EXPECT_EQ(all.out.find("missing dump"), std::string::npos) << all.out;
  EXPECT_NE(all.out.find(fmt::format("not reached: allreduce #{}: rank 2 (", failedSeq)),
            std::string::npos)
      << all.out;
  EXPECT_NE(all.out.find(fmt::format("verdict: rank 2 did not reach allreduce #{}", failedSeq)),
            std::string::npos)
      << all.out;
  std::printf("[flight recorder] analysis of the stopped rank:\n%s\n", all.out.c_str());
}

// Rank 1 skips its 11th call; the counts differ call by call, so its #10 is the others' #11.
TEST(FlightRecorder, SkippedCallIsAMismatch) {
  TraceDir dir;
  CommRanks group(3, traceOptions(dir, 64));
  group.start([&](Communicator& comm, int rank) {
    std::vector<int32_t> v(400, 1);
    for (int i = 0; i < 20; ++i) {
      if (rank == 1 && i == 10) continue;
      comm.allReduce(v.data(), v.data(), 100 + static_cast<size_t>(i), DataType::kInt32,
                     ReduceOp::kSum);
    }
  });
  ASSERT_TRUE(group.waitReady(std::chrono::seconds(30)));
  auto reports = group.join(Clock::now() + std::chrono::seconds(30));
  for (const RankResult& r : reports) {
    ASSERT_TRUE(r.reported && !r.ok && !r.hung) << describeAll(reports);
  }
  ASSERT_EQ(dir.dumps().size(), 3u);
  RunResult a = analyse(dir.path());
  ASSERT_EQ(a.exitCode, 0) << a.err;
  EXPECT_NE(a.out.find("mismatch: #10: rank 1: allreduce int32 sum count 111 root -1; ranks 0,2: "
                       "allreduce int32 sum count 110 root -1"),
            std::string::npos)
      << a.out;
  EXPECT_NE(a.out.find("verdict: rank 1 issued a different call at #10"), std::string::npos)
      << a.out;
}

// A GYRE_TRACE_DIR that cannot be a directory fails creation on every rank, naming it;
// one that does not exist yet is made.
TEST(FlightRecorder, TraceDirIsCheckedAtCreation) {
  TraceDir dir;
  const std::string file = dir.path() + "/plain-file";
  std::ofstream(file) << "x";
  Options o = traceOptions(dir, 8);
  o.traceDir = file + "/sub";
  {
    // Its store's thread in this process ends with the group, before the next fork (a
    // fork from a process with threads is what TSan refuses).
    CommRanks bad(2, o);
    bad.start([](Communicator&, int) {});
    for (const RankResult& r : bad.join(Clock::now() + std::chrono::seconds(30))) {
      ASSERT_TRUE(r.reported && !r.ok) << r.describe();
      EXPECT_EQ(r.code, static_cast<int>(ErrorCode::kInvalidArgument)) << r.describe();
      EXPECT_NE(r.message.find(fmt::format("GYRE_TRACE_DIR={}/sub is not a directory", file)),
                std::string::npos)
          << r.message;
    }
  }
  o.traceDir = dir.path() + "/new/deeper";
  o.token += "b";
  CommRanks good(2, o);
  good.start([](Communicator& comm, int) { comm.dumpTrace(); });
  for (const RankResult& r : good.join(Clock::now() + std::chrono::seconds(30))) {
    EXPECT_TRUE(r.ok) << r.describe();
  }
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_TRUE(fs::exists(
        fmt::format("{}/new/deeper/gyre-trace-gyre.comm0-rank{}.json", dir.path(), rank)));
  }
}

// One dump entry, times in ms on a clock whose monotonic and Unix readings agree.
std::string entryJson(int seq, const char* state, double startMs, double endMs, int sent,
                      int received) {
  auto ns = [](double ms) { return fmt::format("{}", static_cast<long long>(ms * 1e6)); };
  return fmt::format(
      "{{\"record\": {0}, \"seq\": {0}, \"collective\": \"allreduce\", \"dtype\": \"float\", "
      "\"op\": \"max\", \"count\": 4096, \"root\": -1, \"peer\": -1, \"algorithm\": \"rd\", "
      "\"state\": \"{1}\", \"queued_ns\": {2}, \"start_ns\": {2}, \"end_ns\": {3}, "
      "\"bytes_sent\": {4}, \"bytes_received\": {5}}}",
      seq, state, ns(startMs), endMs < 0 ? std::string("null") : ns(endMs), sent, received);
}

void writeDump(const TraceDir& dir, int rank, const std::string& detail,
               const std::vector<std::string>& entries) {
  std::string list;
  for (const std::string& e : entries) list += (list.empty() ? "" : ", ") + e;
  std::ofstream(fmt::format("{}/gyre-trace-gyre.comm0-rank{}.json", dir.path(), rank))
      << fmt::format(
             "{{\"schema\": \"gyre-flight-recorder\", \"version\": 1, \"rank\": {}, "
             "\"size\": 4, \"comm\": \"gyre/comm0\", \"host\": \"h\", \"pid\": 1, "
             "\"reason\": \"failure\", \"detail\": \"{}\", "
             "\"clock\": {{\"monotonic_ns\": 0, \"unix_ns\": 0}}, \"capacity\": 64, "
             "\"recorded\": {}, \"entries\": [{}]}}",
             rank, detail, entries.size(), list);
}

// What StoppedRankIsNamed sees when the stopped rank, continued, still finds the others'
// bytes of #30 in its sockets: it completes #30 and fails only in #31, both after the
// others gave up on #30. Starts after the first give-up do not decide which collective
// the job stood in: the verdict is still that rank 2 did not reach #30 in time.
TEST(FlightRecorder, AnalysisIgnoresStartsAfterTheFirstFailure) {
  TraceDir dir;
  for (int rank : {0, 1, 3}) {
    writeDump(dir, rank,
              fmt::format("rank {}: allreduce #30 failed after 2.000 s: 0 of 16384 bytes: "
                          "rank 2 stalled",
                          rank),
              {entryJson(28, "completed", 10, 11, 32768, 32768),
               entryJson(29, "completed", 12, 13, 32768, 32768),
               entryJson(30, "failed", 100, 2100, 32768, 16384)});
  }
  writeDump(dir, 2, "rank 2: allreduce #31 failed after 0.000 s: 0 of 16384 bytes: rank 3 failed",
            {entryJson(29, "completed", 12.5, 13, 32768, 32768),
             entryJson(30, "completed", 2300, 2301, 32768, 32768),
             entryJson(31, "failed", 2302, 2302, 16384, 0)});
  RunResult a = analyse(dir.path());
  ASSERT_EQ(a.exitCode, 0) << a.err;
  EXPECT_NE(a.out.find("not reached: allreduce #30: rank 2 (it started 2.20 s after the first "
                       "rank, when another had already given up); reached by ranks 0,1,3"),
            std::string::npos)
      << a.out;
  EXPECT_NE(a.out.find("verdict: rank 2 did not reach allreduce #30: the others waited for it "
                       "there"),
            std::string::npos)
      << a.out;
}

TEST(FlightRecorder, AnalysisRefusesWhatIsNotADump) {
  TraceDir dir;
  RunResult a = analyse(dir.path());
  EXPECT_EQ(a.exitCode, 2);
  EXPECT_NE(a.err.find("no gyre-trace-*.json dumps in"), std::string::npos) << a.err;
  std::ofstream(dir.path() + "/gyre-trace-x-rank0.json") << "{\"schema\": \"other\"}";
  a = analyse(dir.path());
  EXPECT_EQ(a.exitCode, 2);
  EXPECT_NE(a.err.find("not a flight recorder dump"), std::string::npos) << a.err;
}

}  // namespace
}  // namespace gyre::testing
