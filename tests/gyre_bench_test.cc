// gyre-bench under gyrerun, as the peer harness runs it: several real ranks over
// loopback, checked results, and the output contract the harness parses (rank 0's
// stdout: `#` comments, 13-column rows, nccl-tests' trailer). Needs a working
// Communicator. Every run is under `timeout`, so a hang fails instead of stalling.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "run_shell.h"

namespace {

using gyre::testing::binary;
using gyre::testing::RunResult;
using gyre::testing::runShell;

// `gyrerun -n ranks gyre-bench benchArgs`, bounded in time.
RunResult runBench(int ranks, const std::string& benchArgs, int timeoutSeconds = 180) {
  return runShell("timeout -k 5 " + std::to_string(timeoutSeconds) + " " + binary("gyrerun") +
                  " -n " + std::to_string(ranks) + " " + binary("gyre-bench") + " " + benchArgs);
}

std::vector<std::string> fields(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> f;
  for (std::string w; in >> w;) f.push_back(w);
  return f;
}

struct Row {
  size_t size = 0, count = 0;
  std::string type, redop;
  double time[2] = {0, 0}, algbw[2] = {0, 0}, busbw[2] = {0, 0};
  std::string wrong[2];
};

// Parses stdout the way ../shared/peers/summarize.py does: lines starting with '#' are
// comments; everything else must be a 13-column data row.
std::vector<Row> parseRows(const std::string& out) {
  std::vector<Row> rows;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> f = fields(line);
    EXPECT_EQ(f.size(), 13u) << "not a 13-column row: '" << line << "'";
    if (f.size() != 13) continue;
    Row r;
    r.size = std::stoull(f[0]);
    r.count = std::stoull(f[1]);
    r.type = f[2];
    r.redop = f[3];
    EXPECT_EQ(f[4], "-1") << "root column: " << line;
    for (int g = 0; g < 2; ++g) {
      r.time[g] = std::stod(f[5 + 4 * g]);
      r.algbw[g] = std::stod(f[6 + 4 * g]);
      r.busbw[g] = std::stod(f[7 + 4 * g]);
      r.wrong[g] = f[8 + 4 * g];
    }
    rows.push_back(r);
  }
  return rows;
}

size_t countLinesStartingWith(const std::string& text, const std::string& start) {
  size_t count = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) count += line.rfind(start, 0) == 0;
  return count;
}

size_t elementSize(const std::string& type) {
  if (type == "int8" || type == "uint8") return 1;
  if (type == "half" || type == "bfloat16") return 2;
  if (type == "int32" || type == "uint32" || type == "float") return 4;
  return 8;
}

// The whole contract for one run: exit 0, one header (rank 0 only), the expected sizes
// in order for each type and op, nothing wrong, sane numbers, the trailer.
void expectCleanRun(const RunResult& r, int ranks, const std::vector<size_t>& sizes,
                    const std::vector<std::string>& types, const std::vector<std::string>& ops) {
  EXPECT_EQ(r.exitCode, 0) << r.out << r.err;
  EXPECT_EQ(countLinesStartingWith(r.out, "# Collective test starting"), 1u) << r.out;
  EXPECT_EQ(countLinesStartingWith(r.out, "#  Rank "), static_cast<size_t>(ranks)) << r.out;
  EXPECT_EQ(countLinesStartingWith(r.out, "# Out of bounds values : 0 OK"), 1u) << r.out;
  EXPECT_EQ(countLinesStartingWith(r.out, "# Avg bus bandwidth    : "), 1u) << r.out;
  std::vector<Row> rows = parseRows(r.out);
  ASSERT_EQ(rows.size(), sizes.size() * types.size() * ops.size()) << r.out;
  size_t i = 0;
  for (const std::string& type : types) {
    for (const std::string& op : ops) {
      for (size_t size : sizes) {
        const Row& row = rows[i++];
        const size_t elem = elementSize(type);
        EXPECT_EQ(row.type, type);
        EXPECT_EQ(row.redop, op);
        EXPECT_EQ(row.count, size / elem) << "sizes round down to whole elements";
        EXPECT_EQ(row.size, size / elem * elem);
        for (int g = 0; g < 2; ++g) {
          EXPECT_EQ(row.wrong[g], "0") << type << " " << op << " " << size << " group " << g;
          // An op on 0 elements may return in well under the 0.01 us printed.
          if (row.count > 0) {
            EXPECT_GT(row.time[g], 0);
          }
          EXPECT_GE(row.algbw[g], 0);
          if (ranks > 1 && row.algbw[g] > 0.1) {
            // busbw = algbw * 2(n-1)/n, up to the printed rounding.
            EXPECT_NEAR(row.busbw[g] / row.algbw[g], 2.0 * (ranks - 1) / ranks, 0.05);
          }
        }
      }
    }
  }
}

std::vector<size_t> geometric(size_t from, size_t to, size_t factor) {
  std::vector<size_t> v;
  for (size_t s = from; s <= to; s *= factor) v.push_back(s);
  return v;
}

class GyreBenchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : {"gyrerun", "gyre-bench"}) {
      if (::access(binary(name).c_str(), X_OK) != 0) {
        FAIL() << binary(name) << " is missing: build it first";
      }
    }
  }
};

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
  expectCleanRun(r, 3, geometric(3, 200 << 10, 16),
                 {"int8", "uint8", "int32", "uint32", "int64", "uint64", "half", "bfloat16",
                  "float", "double"},
                 {"sum", "prod", "min", "max", "avg"});
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

TEST_F(GyreBenchTest, WithoutCheckWrongIsNotAvailable) {
  RunResult r = runBench(2, "-b 64 -e 64 -c 0");
  EXPECT_EQ(r.exitCode, 0) << r.err;
  std::vector<Row> rows = parseRows(r.out);
  ASSERT_EQ(rows.size(), 1u) << r.out;
  EXPECT_EQ(rows[0].wrong[0], "N/A");
  EXPECT_EQ(rows[0].wrong[1], "N/A");
}

TEST_F(GyreBenchTest, RejectsBadArgumentsBeforeStarting) {
  // Argument errors come before the communicator, so no ranks need to meet.
  for (const char* args : {"-d nosuch", "-o nosuch", "-b 2M -e 1M", "-n 0", "broadcast", "-x"}) {
    RunResult r = runShell("timeout -k 5 30 " + binary("gyre-bench") + " " + args);
    EXPECT_EQ(r.exitCode, 2) << args << "\n" << r.err;
    EXPECT_NE(r.err.find("usage: gyre-bench"), std::string::npos) << args;
    EXPECT_EQ(r.out, "") << args;
  }
}

}  // namespace
