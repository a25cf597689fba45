// gyre-train's progress (tools/train/progress.h) from real 2-rank runs under gyrerun: the
// start stages and the periodic lines (not a terminal) or the bar (forced, and on a real
// pseudo-terminal through script(1), alone) on stderr, from rank 0 only, with samples/s and ETA;
// stdout keeps exactly its header, epoch and final lines; --progress none prints nothing
// and a bad mode is a usage error.
#include <unistd.h>

#include <regex>
#include <string>

#include <gtest/gtest.h>

#include "run_shell.h"

namespace gyre::testing {
namespace {

const std::string kData = "/usr/share/datasets/fashion-mnist";

class TrainProgress : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::access(binary("gyre-train").c_str(), X_OK) != 0 || ::access(kData.c_str(), R_OK) != 0) {
      GTEST_SKIP() << "gyre-train or " << kData << " missing";
    }
  }
  RunResult train(const std::string& args) {
    return runShell("timeout -k 5 120 " + binary("gyrerun") + " -n 2 " + binary("gyre-train") +
                    " --epochs 2 --max-samples 4000 " + args);
  }
};

// Only the header, one line per epoch and the final line: progress never reaches stdout.
void expectPlainStdout(const RunResult& r) {
  std::regex allowed("(# gyre-train world .*|epoch [12] loss .*|# final test_acc .*)");
  size_t lines = 0;
  for (size_t at = 0; at < r.out.size();) {
    size_t end = r.out.find('\n', at);
    if (end == std::string::npos) end = r.out.size();
    const std::string line = r.out.substr(at, end - at);
    EXPECT_TRUE(std::regex_match(line, allowed)) << "stdout line: '" << line << "'";
    ++lines;
    at = end + 1;
  }
  EXPECT_EQ(lines, 4u) << r.out;
}

TEST_F(TrainProgress, LinesWhenNotATerminal) {
  RunResult r = train("--progress-every 0.01");  // auto: stderr is a pipe here
  ASSERT_EQ(r.exitCode, 0) << r.out << r.err;
  expectPlainStdout(r);
  EXPECT_EQ(countOf(r.err, "gyre-train: loading data from " + kData), 1u) << r.err;
  EXPECT_EQ(countOf(r.err,
                    "gyre-train: 4000 train and 4000 test images; joining 2 ranks (rank "
                    "0's store at "),
            1u)
      << r.err;
  EXPECT_EQ(countOf(r.err, "gyre-train: 2 ranks joined; rank 0's weights to every rank"), 1u)
      << r.err;
  // 2000 samples per rank, 64 per step: 32 steps of 128 global samples per epoch.
  std::regex line(
      "gyre-train: epoch ([12])/2 [0-9]+% \\(([0-9]+)/32 steps\\) [0-9]+ samples/s "
      "ETA [0-9]+:[0-9]{2} \\(epoch\\), [0-9]+:[0-9]{2} \\(run\\)");
  size_t matches = 0;
  for (std::sregex_iterator it(r.err.begin(), r.err.end(), line), end; it != end; ++it) {
    ++matches;
    EXPECT_LT(std::stoi((*it)[2].str()), 32);  // the epoch's own line follows on stdout
  }
  EXPECT_GE(matches, 2u) << r.err;
  EXPECT_EQ(r.err.find("\033[K"), std::string::npos) << "no bar codes in a log";
}

TEST_F(TrainProgress, BarRedrawsInPlace) {
  RunResult r = train("--progress bar");
  ASSERT_EQ(r.exitCode, 0) << r.out << r.err;
  expectPlainStdout(r);
  std::regex bar("\r\033\\[Kepoch [12]/2 \\[[=> ]{30}\\] +[0-9]+%  [0-9]+ samples/s  ETA ");
  EXPECT_TRUE(std::regex_search(r.err, bar)) << r.err;
  // Erased before each epoch's stdout line; the start stages are plain lines.
  EXPECT_GE(countOf(r.err, "\r\033[K"), 2u);
  EXPECT_EQ(countOf(r.err, "gyre-train: loading data"), 1u) << r.err;
}

TEST_F(TrainProgress, AutoIsABarOnATerminal) {
  // script(1) gives a lone gyre-train (a world of one) a pseudo-terminal for stderr.
  // (Under gyrerun a rank's stderr is a pipe to gyrerun, so auto prints lines there.)
  RunResult r = runShell("timeout -k 5 120 script -qec '" + binary("gyre-train") +
                         " --epochs 1 --max-samples 2000' /dev/null");
  ASSERT_EQ(r.exitCode, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("\033[Kepoch 1/1 ["), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("gyre-train: 2000 train and 2000 test images; no launcher: a world of one"),
            std::string::npos)
      << r.out;
}

TEST_F(TrainProgress, NoneAndBadModes) {
  RunResult r = train("--progress none");
  ASSERT_EQ(r.exitCode, 0) << r.out << r.err;
  expectPlainStdout(r);
  EXPECT_EQ(r.err.find("gyre-train:"), std::string::npos) << r.err;
  r = runShell("timeout -k 5 30 " + binary("gyre-train") + " --progress loud");
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_NE(r.err.find("--progress wants auto, bar, lines or none, got 'loud'"), std::string::npos)
      << r.err;
}

}  // namespace
}  // namespace gyre::testing
