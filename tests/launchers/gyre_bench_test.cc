// gyre-bench under gyrerun, as the peer harness runs it: several real ranks over
// loopback, checked results, and the output contract the harness parses, for every
// collective (nccl-tests' sizes, bus factors, in-place forms, roots), -A, the options and
// their errors. The algorithm options (GYRE_ALGO, --calibrate, --compare-algos) are
// gyre_bench_algo_test.cc. Every run is under `timeout`, so a hang fails instead of
// stalling.
#include <gtest/gtest.h>

#include "gyre_bench_harness.h"

namespace {

using namespace gyre_bench_test;

TEST_F(GyreBenchTest, HarnessSweepOnTwoRanks) {
  RunResult r = runBench(2, "-b 8 -e 1M -f 4 -c 1");
  expectCleanRun(r, 2, geometric(8, 1 << 20, 4), {"float"}, {"sum"});
}

TEST_F(GyreBenchTest, HarnessSweepOnFourRanks) {
  RunResult r = runBench(4, "-b 8 -e 1M -f 4 -c 1");
  expectCleanRun(r, 4, geometric(8, 1 << 20, 4), {"float"}, {"sum"});
}

TEST_F(GyreBenchTest, EveryTypeAndOpOnThreeRanks) {
  // Odd sizes (3 * 2^k) leave partial elements and uneven ring chunks.
  RunResult r = runBench(3, "allreduce -b 3 -e 200K -f 16 -n 2 -w 1 -d all -o all");
  expectCleanRun(r, 3, geometric(3, 200 << 10, 16), kAllTypes, kAllOps);
}

TEST_F(GyreBenchTest, SelectedTypesAndOps) {
  struct Case {
    int ranks;
    const char* type;
    const char* op;
  };
  for (const Case& c : {Case{2, "half", "avg"}, Case{4, "bfloat16", "sum"}, Case{4, "int8", "prod"},
                        Case{3, "uint64", "min"}, Case{2, "double", "max"}}) {
    SCOPED_TRACE(std::string(c.type) + " " + c.op + " on " + std::to_string(c.ranks));
    RunResult r =
        runBench(c.ranks, std::string("-b 1K -e 1M -f 32 -n 3 -w 1 -d ") + c.type + " -o " + c.op);
    expectCleanRun(r, c.ranks, geometric(1 << 10, 1 << 20, 32), {c.type}, {c.op});
  }
}

// Each collective alone on 2, 3 and 4 ranks (3 over tcp, the others over shared
// memory): every type (and every op where it reduces), odd sizes that leave partial
// elements and shares, and 16 KiB slots so that the largest sizes pipeline.
class CollectiveBenchTest : public GyreBenchTest,
                            public ::testing::WithParamInterface<std::tuple<size_t, int>> {};

TEST_P(CollectiveBenchTest, EveryTypeIsExact) {
  const Spec& spec = kSpecs[std::get<0>(GetParam())];
  const int ranks = std::get<1>(GetParam());
  const std::string env =
      std::string("GYRE_SLOT_BYTES=16K GYRE_TRANSPORT=") + (ranks == 3 ? "tcp" : "shm") + " ";
  RunResult r = runShell("timeout -k 5 120 env " + env + binary("gyrerun") + " -n " +
                         std::to_string(ranks) + " " + binary("gyre-bench") + " " + spec.name +
                         " -b 5 -e 100K -f 9 -n 2 -w 1 -d all -o all");
  EXPECT_EQ(r.exitCode, 0) << r.out << r.err;
  expectCleanBlock(r.out, spec, ranks, geometric(5, 100 << 10, 9), kAllTypes, kAllOps);
}

INSTANTIATE_TEST_SUITE_P(Collectives, CollectiveBenchTest,
                         ::testing::Combine(::testing::Range(size_t{0}, std::size(kSpecs)),
                                            ::testing::Values(2, 3, 4)),
                         [](const ::testing::TestParamInfo<std::tuple<size_t, int>>& info) {
                           return std::string(kSpecs[std::get<0>(info.param)].name) + "_" +
                                  std::to_string(std::get<1>(info.param)) + "ranks";
                         });

TEST_F(GyreBenchTest, AllRunsEveryCollectiveInTurn) {
  RunResult r = runBench(4, "all -b 8 -e 64K -f 8 -n 2 -w 1 -d int32");
  EXPECT_EQ(r.exitCode, 0) << r.out << r.err;
  auto blocks = splitBlocks(r.out);
  ASSERT_EQ(blocks.size(), std::size(kSpecs)) << r.out;
  for (size_t i = 0; i < blocks.size(); ++i) {
    EXPECT_EQ(blocks[i].first, kSpecs[i].name);
    expectCleanBlock(blocks[i].second, kSpecs[i], 4, geometric(8, 64 << 10, 8), {"int32"}, {"sum"});
  }
}

TEST_F(GyreBenchTest, OneRankSkipsOnlySendRecv) {
  RunResult r = runBench(1, "all -b 8 -e 4K -f 8 -n 1 -w 0");
  EXPECT_EQ(r.exitCode, 0) << r.out << r.err;
  auto blocks = splitBlocks(r.out);
  ASSERT_EQ(blocks.size(), std::size(kSpecs) - 1) << r.out;
  for (size_t i = 0; i < blocks.size(); ++i) {
    EXPECT_EQ(blocks[i].first, kSpecs[i].name);
    expectCleanBlock(blocks[i].second, kSpecs[i], 1, geometric(8, 4 << 10, 8), {"float"}, {"sum"});
  }
  EXPECT_EQ(countLinesStartingWith(r.out, "# sendrecv skipped: it needs at least 2 ranks"), 1u);
  // Asked for by name, it is a command-line error (gyrerun exits 1 for any failed rank).
  r = runBench(1, "sendrecv -b 8 -e 8");
  EXPECT_EQ(r.exitCode, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("failed: exit code 2"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("sendrecv needs at least 2 ranks"), std::string::npos) << r.err;
  EXPECT_EQ(parseRows(r.out).size(), 0u) << r.out;
}

TEST_F(GyreBenchTest, RootedCollectivesUseTheRoot) {
  for (const Spec& spec : kSpecs) {
    if (!spec.rooted) continue;
    RunResult r =
        runBench(3, std::string(spec.name) + " -r 2 -b 7 -e 40K -f 13 -n 2 -w 1 -d all -o all");
    EXPECT_EQ(r.exitCode, 0) << r.out << r.err;
    expectCleanBlock(r.out, spec, 3, geometric(7, 40 << 10, 13), kAllTypes, kAllOps, 2);
    // A root that is no rank stops every rank before any collective.
    r = runBench(3, std::string(spec.name) + " -r 3 -b 8 -e 8");
    EXPECT_EQ(r.exitCode, 1) << r.out << r.err;
    EXPECT_NE(r.err.find("failed: exit code 2"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("-r 3 is not a rank of 3"), std::string::npos) << r.err;
    EXPECT_EQ(parseRows(r.out).size(), 0u) << r.out;
  }
}

TEST_F(GyreBenchTest, AliasesAndTheCollectiveOption) {
  for (const char* args : {"allgather", "--collective all_gather", "--collective=allgather"}) {
    RunResult r = runBench(2, std::string(args) + " -b 64 -e 64 -n 1 -w 0");
    EXPECT_EQ(r.exitCode, 0) << args << "\n" << r.out << r.err;
    expectCleanBlock(r.out, kSpecs[1], 2, {64}, {"float"}, {"sum"});
  }
}

// -A overrides GYRE_ALGO for the all-reduce, as the header says; each one is exact.
TEST_F(GyreBenchTest, WithoutCheckWrongIsNotAvailable) {
  RunResult r = runBench(2, "-b 64 -e 64 -c 0");
  EXPECT_EQ(r.exitCode, 0) << r.err;
  std::vector<Row> rows = parseRows(r.out);
  ASSERT_EQ(rows.size(), 1u) << r.out;
  EXPECT_EQ(rows[0].wrong[0], "N/A");
  EXPECT_EQ(rows[0].wrong[1], "N/A");
}

TEST_F(GyreBenchTest, HelpNamesEveryCollective) {
  RunResult r = runShell("timeout -k 5 30 " + binary("gyre-bench") + " --help");
  EXPECT_EQ(r.exitCode, 0) << r.err;
  for (const Spec& spec : kSpecs) {
    EXPECT_NE(r.out.find(spec.name), std::string::npos) << spec.name;
  }
  for (const char* flag :
       {"--root", "--algo", "--calibrate", "--collective", "--compare-algos", "--rounds"}) {
    EXPECT_NE(r.out.find(flag), std::string::npos) << flag;
  }
}

TEST_F(GyreBenchTest, RejectsBadArgumentsBeforeStarting) {
  // Argument errors come before the communicator, so no ranks need to meet.
  for (const char* args :
       {"-d nosuch", "-o nosuch", "-b 2M -e 1M", "-n 0", "nosuch", "-x", "-r -1", "-A nosuch",
        "all_reduce broadcast", "--collective reduce broadcast", "--calibrate broadcast",
        "--calibrate -A ring", "--compare-algos broadcast", "--compare-algos -A tree",
        "--compare-algos --calibrate", "--compare-algos -d all", "--compare-algos --rounds 0",
        "--rounds 3"}) {
    RunResult r = runShell("timeout -k 5 30 " + binary("gyre-bench") + " " + args);
    EXPECT_EQ(r.exitCode, 2) << args << "\n" << r.err;
    EXPECT_NE(r.err.find("usage: gyre-bench"), std::string::npos) << args;
    EXPECT_EQ(r.out, "") << args;
  }
}

}  // namespace
