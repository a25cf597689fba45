// The job's secret as a user meets it, with real programs: ranks of gyre-bench started
// by hand (RANK, WORLD_SIZE, MASTER_ADDR/PORT as torchrun sets them) and under gyrerun.
// - Without a secret: the job runs as before, and says once, at INFO, that it is open.
// - GYRE_TOKEN_FILE: a file group or others may read is refused naming the file; a 0600
//   one works.
// - gyrerun makes a secret by itself and hands it to its ranks in the environment, never
//   on a command line; the job then does not say it is open.
// - GYRE_ENCRYPT=1 without a secret is refused at once.
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <vector>
#include <string>

#include <gtest/gtest.h>

#include "free_ports.h"
#include "run_shell.h"

namespace gyre {
namespace {

using testing::binary;
using testing::countOf;
using testing::freePort;
using testing::RunResult;
using testing::runShell;

// `n` ranks of a small checked all-reduce sweep, each with `env` (and rank `odd` with
// `oddEnv` instead, when >= 0).
RunResult byHand(int n, const std::string& env, int odd = -1, const std::string& oddEnv = "") {
  const int port = freePort();
  std::string cmd;
  for (int r = 0; r < n; ++r) {
    cmd += "RANK=" + std::to_string(r) + " WORLD_SIZE=" + std::to_string(n) +
           " MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port) +
           " GYRE_JOIN_TIMEOUT=20 " + (r == odd ? oddEnv : env) + " timeout -k 5 40 " +
           binary("gyre-bench") + " -b 8 -e 64K -n 2 -w 1 & pids=\"$pids $!\"; ";
  }
  cmd += "fails=0; for j in $pids; do wait $j || fails=$((fails+1)); done; exit $fails";
  return runShell(cmd);
}

std::string secretFile(const char* name, const std::string& secret, mode_t mode) {
  const std::string path = "/tmp/gyre-auth-test-" + std::to_string(::getpid()) + "-" + name;
  std::ofstream(path) << secret << "\n";
  ::chmod(path.c_str(), mode);
  return path;
}

TEST(AuthLaunch, WithoutASecretTheJobRunsAndSaysOnceThatItIsOpen) {
  RunResult r = byHand(4, "GYRE_DEBUG=INFO");
  EXPECT_EQ(r.exitCode, 0) << r.err;
  EXPECT_EQ(countOf(r.out, "Out of bounds values : 0 OK"), 1u) << r.out;  // rank 0's summary
  EXPECT_EQ(countOf(r.err, "no secret (GYRE_TOKEN / GYRE_TOKEN_FILE) is set"), 1u) << r.err;
}

TEST(AuthLaunch, ASecretFileOthersMayReadIsRefusedAndA0600OneWorks) {
  const std::string secret = "file-secret-" + std::to_string(::getpid());
  const std::string open = secretFile("open", secret, 0644);
  RunResult bad = byHand(2, "GYRE_TOKEN_FILE=" + open);
  EXPECT_NE(bad.exitCode, 0);
  EXPECT_NE(bad.err.find("GYRE_TOKEN_FILE=" + open + " has mode 0644"), std::string::npos)
      << bad.err;
  EXPECT_NE(bad.err.find("chmod 600"), std::string::npos) << bad.err;
  EXPECT_LT(bad.seconds, 15.0);

  const std::string good = secretFile("good", secret, 0600);
  RunResult ok = byHand(4, "GYRE_DEBUG=INFO GYRE_TOKEN_FILE=" + good);
  EXPECT_EQ(ok.exitCode, 0) << ok.err;
  EXPECT_EQ(countOf(ok.out, "Out of bounds values : 0 OK"), 1u) << ok.out;
  EXPECT_EQ(countOf(ok.err, "no secret"), 0u) << ok.err;
  for (const RunResult* r : {&bad, &ok}) {
    EXPECT_EQ(r->out.find(secret), std::string::npos);
    EXPECT_EQ(r->err.find(secret), std::string::npos);
  }
  ::unlink(open.c_str());
  ::unlink(good.c_str());
}

TEST(AuthLaunch, GyrerunMakesASecretAndPassesItOnlyInTheEnvironment) {
  // Each rank reports whether it has a secret of 64 hex digits and whether its command
  // line (what every user on the machine may read) holds it.
  const std::string probe =
      "sh -c 'case \"$GYRE_TOKEN\" in *[!0-9a-f]*|\"\") echo nosecret;; *) "
      "[ ${#GYRE_TOKEN} -eq 64 ] && echo secret64;; esac; "
      "tr \"\\0\" \" \" < /proc/$$/cmdline | grep -q \"$GYRE_TOKEN\" && echo incmdline; "
      "echo $GYRE_TOKEN | md5sum'";
  RunResult r = runShell("env -u GYRE_TOKEN -u GYRE_TOKEN_FILE timeout -k 5 30 " +
                         binary("gyrerun") + " --no-prefix -n 3 " + probe);
  EXPECT_EQ(r.exitCode, 0) << r.err;
  EXPECT_EQ(countOf(r.out, "secret64"), 3u) << r.out;
  EXPECT_EQ(countOf(r.out, "incmdline"), 0u) << r.out;
  // One secret for the whole job: the three ranks print one digest.
  std::vector<std::string> digests;
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);) {
    if (line.size() > 32 && line.find("  -") == 32) digests.push_back(line.substr(0, 32));
  }
  ASSERT_EQ(digests.size(), 3u) << r.out;
  EXPECT_EQ(digests[0], digests[1]);
  EXPECT_EQ(digests[0], digests[2]);

  // A real job under gyrerun: authenticated, so it does not say it is open.
  RunResult job = runShell("env -u GYRE_TOKEN -u GYRE_TOKEN_FILE GYRE_DEBUG=INFO timeout -k 5 60 " +
                           binary("gyrerun") + " -n 4 " + binary("gyre-bench") +
                           " -b 8 -e 64K -n 2 -w 1");
  EXPECT_EQ(job.exitCode, 0) << job.err;
  EXPECT_EQ(countOf(job.out, "Out of bounds values : 0 OK"), 1u) << job.out;
  EXPECT_EQ(countOf(job.err, "no secret"), 0u) << job.err;
}

TEST(AuthLaunch, EncryptionWithoutASecretIsRefusedAtOnce) {
  RunResult r = byHand(2, "GYRE_ENCRYPT=1");
  EXPECT_NE(r.exitCode, 0);
  EXPECT_NE(r.err.find("GYRE_ENCRYPT=1 needs the job's secret"), std::string::npos) << r.err;
  EXPECT_LT(r.seconds, 15.0);
}

}  // namespace
}  // namespace gyre
