// gyre-bench and gyre-train under the real launchers users have, with no MASTER_ADDR,
// MASTER_PORT, RANK or WORLD_SIZE exported by the user (base/launch_env.h finds them):
//   Open MPI: mpirun on one host, and mpirun across two network namespaces joined by a
//     veth pair (mpirun and ranks 0-1 in one, ranks 2-3 entered into the other), as two
//     hosts: gyre-bench bootstraps through MPI_Bcast, gyre-train from mpirun's address in
//     OMPI_MCA_orte_hnp_uri;
//   Slurm: a real slurmctld + slurmd started by tools/slurm_local.sh, srun -n 4;
//   none: gyre-train --eval of a checkpoint at world sizes 1 and 3.
// Results are checked exactly (gyre-bench's 0 wrong; the same test accuracy at every
// world size), and early errors must name the launcher's rank. A launcher that is not
// installed (or not root, for namespaces and Slurm) skips its test saying why.
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <string>

#include <gtest/gtest.h>

#include "netns_hosts.h"
#include "free_ports.h"
#include "run_shell.h"

namespace {

using gyre::testing::binary;
using gyre::testing::freePort;
using gyre::testing::freePorts;
using gyre::testing::RunResult;
using gyre::testing::runShell;

// What a user's shell would not have: the variables gyre must find on its own.
const std::string kCleanEnv =
    "env -u MASTER_ADDR -u MASTER_PORT -u RANK -u WORLD_SIZE -u LOCAL_RANK -u LOCAL_WORLD_SIZE "
    "OMP_NUM_THREADS=1 ";
const std::string kBenchArgs = " -b 8 -e 256K -f 8 -n 5 -w 1 -c 1";
const std::string kData = "/usr/share/datasets/fashion-mnist";

bool have(const std::string& program) {
  return std::system(("command -v " + program + " >/dev/null 2>&1").c_str()) == 0;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

int count(const std::string& text, const std::string& part) {
  int n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

// Under ASan, the ranks' leak check is off: Open MPI keeps allocations past MPI_Finalize
// (in components it has unloaded by then, so no suppression can name them); gyre's own
// code is leak-checked by every other test.
#if defined(__SANITIZE_ADDRESS__)
constexpr const char* kMpiSanitizer = "-x ASAN_OPTIONS=detect_leaks=0 ";
#else
constexpr const char* kMpiSanitizer = "";
#endif

std::string mpirun() {
  return std::string("mpirun ") + (::geteuid() == 0 ? "--allow-run-as-root " : "") +
         "--oversubscribe " + kMpiSanitizer;
}

std::string trainer() { return binary("gyre-train"); }
bool haveTrainer() {
  return ::access(trainer().c_str(), X_OK) == 0 && ::access(kData.c_str(), R_OK) == 0;
}

// gyre-bench's output for `world` ranks: every row checked, 0 wrong in total.
void expectBenchCorrect(const RunResult& r, int world, const std::string& launcher,
                        const std::string& bootstrap) {
  EXPECT_EQ(r.exitCode, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "# gyre: " + std::to_string(world) + " ranks")) << r.out;
  EXPECT_TRUE(contains(r.out, "# gyre: launcher " + launcher + ", bootstrap " + bootstrap))
      << r.out;
  EXPECT_EQ(count(r.out, "#  Rank "), world) << r.out;
  EXPECT_TRUE(contains(r.out, "# Out of bounds values : 0 OK")) << r.out << r.err;
  std::printf("[launchers] %s/%s, %d ranks: %s", launcher.c_str(), bootstrap.c_str(), world,
              r.out.substr(r.out.find("# Out of bounds")).c_str());
}

// gyre-train's output: the world it joined and a final accuracy, returned as printed.
std::string expectTrained(const RunResult& r, int world) {
  EXPECT_EQ(r.exitCode, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "# gyre-train world " + std::to_string(world) + " ")) << r.out;
  std::smatch m;
  const std::regex finalLine("# final test_acc ([0-9.]+)");
  if (!std::regex_search(r.out, m, finalLine)) {
    ADD_FAILURE() << "no final line: " << r.out << r.err;
    return "";
  }
  std::printf("[launchers] gyre-train world %d: %s\n", world, m[0].str().c_str());
  return m[1];
}

std::string evalAccuracy(const RunResult& r, int world) {
  EXPECT_EQ(r.exitCode, 0) << r.out << r.err;
  std::smatch m;
  const std::regex line("# gyre-train eval world " + std::to_string(world) +
                        " .* test_acc ([0-9.]+)");
  if (!std::regex_search(r.out, m, line)) {
    ADD_FAILURE() << "no eval line for world " << world << ": " << r.out << r.err;
    return "";
  }
  return m[1];
}

// A setting every rank rejects at once: each must say which rank it is, not "rank ?".
void expectEarlyErrorsNameRanks(const RunResult& r, int world, const std::string& program) {
  EXPECT_NE(r.exitCode, 0);
  for (int rank = 0; rank < world; ++rank) {
    EXPECT_TRUE(contains(r.err, program + ": rank " + std::to_string(rank) + ": GYRE_ALGO") ||
                contains(r.err, program + ": error: rank " + std::to_string(rank) + ": GYRE_ALGO"))
        << r.err;
  }
  EXPECT_FALSE(contains(r.err, "rank ?")) << r.err;
}

// mpirun kills the other ranks as soon as one exits non-zero; each rank waits a second
// after its error (keeping its status) so that every rank's message gets out.
std::string lingeringAfterError(const std::string& command) {
  return "sh -c '" + command + "; status=$?; sleep 1; exit $status'";
}

TEST(OpenMpi, OneHostGyreBenchAndGyreTrain) {
  if (!have("mpirun")) GTEST_SKIP() << "no mpirun (apt-get install openmpi-bin libopenmpi-dev)";
  const std::string bench = binary("gyre-bench");
  RunResult r = runShell("timeout -k 5 120 " + kCleanEnv + mpirun() + "-np 3 " + bench + kBenchArgs);
  expectBenchCorrect(r, 3, "Open MPI", contains(r.out, "MPI_Bcast") ? "MPI_Bcast" : "environment");
  r = runShell("timeout -k 5 60 " + kCleanEnv + mpirun() + "-np 2 " +
               lingeringAfterError("env GYRE_ALGO=bogus " + bench));
  expectEarlyErrorsNameRanks(r, 2, "gyre-bench");
  if (!haveTrainer()) GTEST_SKIP() << "gyre-train or " << kData << " missing";
  r = runShell("timeout -k 5 120 " + kCleanEnv + mpirun() + "-np 2 " + trainer() +
               " --epochs 1 --max-samples 1000");
  expectTrained(r, 2);
  r = runShell("timeout -k 5 60 " + kCleanEnv + mpirun() + "-np 2 " +
               lingeringAfterError("env GYRE_ALGO=bogus " + trainer() + " --max-samples 100"));
  expectEarlyErrorsNameRanks(r, 2, "gyre-train");
}

TEST(OpenMpi, AcrossTwoNetworkNamespaces) {
  if (!have("mpirun")) GTEST_SKIP() << "no mpirun (apt-get install openmpi-bin libopenmpi-dev)";
  if (!have("nsenter")) GTEST_SKIP() << "no nsenter (util-linux)";
  gyre::testing::NamespaceHosts hosts("lt", "10.215.0", {});  // unshaped
  if (!hosts.ok()) GTEST_SKIP() << hosts.why();
  // mpirun runs in a (its address is a's); ranks 2 and 3 move to b before exec, as if
  // mpirun had started them on a second host. Open MPI's own traffic (PMIx, OOB) uses
  // the veth's subnet so that ranks in b can reach mpirun.
  const std::string wrap = "/tmp/gyre_lt_wrap_" + std::to_string(::getpid()) + ".sh";
  {
    std::ofstream w(wrap);
    w << "#!/bin/sh\nif [ \"$OMPI_COMM_WORLD_RANK\" -ge 2 ]; then exec nsenter --net=/run/netns/"
      << hosts.name(false) << " \"$@\"; fi\nexec \"$@\"\n";
  }
  ::chmod(wrap.c_str(), 0755);
  const std::string launch =
      "timeout -k 5 150 ip netns exec " + hosts.name(true) + " " + kCleanEnv +
      "PMIX_MCA_ptl_tcp_remote_connections=1 PMIX_MCA_ptl_tcp_if_include=10.215.0.0/24 " +
      mpirun() +
      "-np 4 --mca btl tcp,self --mca btl_tcp_if_include 10.215.0.0/24 "
      "--mca oob_tcp_if_include 10.215.0.0/24 " +
      wrap + " ";
  long long before = hosts.receivedByA();
  RunResult r = runShell(launch + binary("gyre-bench") + kBenchArgs);
  expectBenchCorrect(r, 4, "Open MPI", contains(r.out, "MPI_Bcast") ? "MPI_Bcast" : "environment");
  long long crossed = hosts.receivedByA() - before;
  std::printf("[launchers] mpirun across namespaces: %lld bytes into host a\n", crossed);
  EXPECT_GT(crossed, 1 << 20) << "the ranks in b did not talk to a over the veth";
  if (haveTrainer()) {
    // gyre-train has no MPI: it finds rank 0 at mpirun's address (OMPI_MCA_orte_hnp_uri).
    r = runShell(launch + trainer() + " --epochs 1 --max-samples 1000");
    expectTrained(r, 4);
    // Rank 0 on the other host than mpirun: it cannot serve at mpirun's address, and says
    // so at once (mpirun then stops the rest) instead of leaving the others waiting.
    {
      std::ofstream w(wrap);
      w << "#!/bin/sh\nif [ \"$OMPI_COMM_WORLD_RANK\" -lt 2 ]; then exec nsenter --net=/run/netns/"
        << hosts.name(false) << " \"$@\"; fi\nexec \"$@\"\n";
    }
    r = runShell(launch + trainer() + " --epochs 1 --max-samples 1000");
    EXPECT_NE(r.exitCode, 0);
    EXPECT_TRUE(contains(r.err, "gyre-train: error: rank 0: rank 0 does not run on mpirun's host"))
        << r.err;
    EXPECT_TRUE(contains(r.err, "MASTER_ADDR")) << r.err;
    EXPECT_LT(r.seconds, 30) << r.err;
    std::printf("[launchers] rank 0 away from mpirun's host: failed in %.1f s\n", r.seconds);
  }
  ::unlink(wrap.c_str());
}

// slurmctld + slurmd for the test's lifetime (tools/slurm_local.sh).
class LocalSlurm {
 public:
  LocalSlurm() : dir_("/tmp/gyre-slurm-" + std::to_string(::getpid())) {
    if (::geteuid() != 0) {
      why_ = "not root: the test's slurmctld/slurmd run as root";
      return;
    }
    if (!have("slurmctld") || !have("slurmd") || !have("srun")) {
      why_ = "no slurmctld/slurmd/srun (apt-get install slurm-wlm)";
      return;
    }
    const std::string script = std::string(GYRE_SOURCE_DIR) + "/tools/slurm_local.sh";
    const std::vector<uint16_t> ports = freePorts(2);
    RunResult r = runShell("SLURM_LOCAL_CTLD_PORT=" + std::to_string(ports[0]) +
                           " SLURM_LOCAL_SLURMD_PORT=" + std::to_string(ports[1]) +
                           " timeout -k 5 60 " + script + " start " + dir_);
    started_ = true;
    if (r.exitCode != 0) {
      why_ = "tools/slurm_local.sh start failed: " + r.err;
      return;
    }
    ok_ = true;
  }
  ~LocalSlurm() {
    if (started_) {
      runShell("timeout -k 5 30 " + std::string(GYRE_SOURCE_DIR) + "/tools/slurm_local.sh stop " +
               dir_);
    }
  }
  bool ok() const { return ok_; }
  const std::string& why() const { return why_; }
  std::string srun(int tasks, const std::string& command) const {
    return "SLURM_CONF=" + dir_ + "/slurm.conf timeout -k 5 150 " + kCleanEnv +
           "srun --immediate=30 -n " + std::to_string(tasks) + " " + command;
  }

 private:
  std::string dir_, why_;
  bool started_ = false, ok_ = false;
};

TEST(Slurm, SrunRunsGyreBenchAndGyreTrain) {
  LocalSlurm slurm;
  if (!slurm.ok()) {
    if (slurm.why().rfind("tools/slurm_local.sh", 0) == 0) FAIL() << slurm.why();
    GTEST_SKIP() << slurm.why();
  }
  RunResult r = runShell(slurm.srun(4, binary("gyre-bench") + kBenchArgs));
  expectBenchCorrect(r, 4, "Slurm", "environment");
  r = runShell(slurm.srun(2, "env GYRE_ALGO=bogus " + binary("gyre-bench")));
  expectEarlyErrorsNameRanks(r, 2, "gyre-bench");
  if (!haveTrainer()) GTEST_SKIP() << "gyre-train or " << kData << " missing";
  r = runShell(slurm.srun(2, trainer() + " --epochs 1 --max-samples 1000"));
  expectTrained(r, 2);
}

TEST(GyreTrainEval, ACheckpointEvaluatesTheSameAtAnyWorldSize) {
  if (!haveTrainer()) GTEST_SKIP() << "gyre-train or " << kData << " missing";
  const std::string checkpoint = "/tmp/gyre_eval_" + std::to_string(::getpid()) + ".ckpt";
  const std::string common = " --max-samples 1500 --checkpoint " + checkpoint;
  RunResult r = runShell("timeout -k 5 120 " + kCleanEnv + binary("gyrerun") + " -n 2 " +
                         trainer() + " --epochs 1" + common);
  const std::string trained = expectTrained(r, 2);
  // One process without a launcher, and three under gyrerun: the same accuracy, exactly.
  r = runShell("timeout -k 5 60 " + kCleanEnv + trainer() + " --eval" + common);
  EXPECT_EQ(evalAccuracy(r, 1), trained) << r.out;
  r = runShell("timeout -k 5 60 " + kCleanEnv + binary("gyrerun") + " -n 3 " + trainer() +
               " --eval" + common);
  EXPECT_EQ(evalAccuracy(r, 3), trained) << r.out;
  // Two lone runs at once do not meet (each has its own store on a free port).
  r = runShell("timeout -k 5 60 sh -c '" + kCleanEnv + trainer() + " --eval" + common + " & " +
               kCleanEnv + trainer() + " --eval" + common + "; wait'");
  EXPECT_EQ(count(r.out, "# gyre-train eval world 1 "), 2) << r.out << r.err;
  ::unlink(checkpoint.c_str());
  // A missing checkpoint is an error on every rank, not a hang.
  r = runShell("timeout -k 5 60 " + kCleanEnv + trainer() + " --eval" + common);
  EXPECT_NE(r.exitCode, 0);
  EXPECT_TRUE(contains(r.err, checkpoint)) << r.err;
  EXPECT_LT(r.seconds, 30);
}

}  // namespace
