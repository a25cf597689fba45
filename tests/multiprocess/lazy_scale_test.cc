// Connecting on first use at scale (GYRE_CONNECT=lazy, the default; ring/lazy_connector.h):
// real jobs of 256 ranks (32 in sanitized builds) under gyrerun, each rank lazy_scale_rank,
// which checks its own results exactly (every element encodes its source rank, destination
// and index):
//  - creation adds at most 32 descriptors a rank (it did not connect the full mesh), then
//    all-reduce, sendRecv along seeded random cycles through all ranks and far shifts,
//    and send/recv over a seeded random perfect matching: arbitrary pairs, connected on
//    first use from both sides at once;
//  - allToAll and allToAllv over the whole communicator: all 32,640 pairs connect;
//  - the checks' own test: a corrupted element, and GYRE_CONNECT=eager, fail the job.
// Each job runs under `timeout`; afterwards none of its processes (found by a marker in
// their environment) may be left and /dev/shm must hold no new gyre segment.
// Slots of 4 KiB x 2: a full mesh of 256 at the default 512 KiB a pipe is 32 GiB of shared
// memory (docs/scaling.md), at 8 KiB under 1 GiB (docs/testing.md has the figures).
#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include "run_shell.h"

namespace gyre {
namespace {

using testing::binary;
using testing::runShell;
using namespace std::chrono_literals;

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr int kRanks = 32;  // a sanitized rank holds ~90 MiB of shadow: 256 exhaust 24 GiB
#else
constexpr int kRanks = 256;
#endif
constexpr int kMaxCreatedFds = 32;  // as lazy_connect_test's ResourcesPerRankStayFlat

std::set<std::string> entries(const char* dir) {
  std::set<std::string> names;
  if (DIR* d = ::opendir(dir)) {
    while (dirent* e = ::readdir(d)) {
      if (e->d_name[0] != '.') names.insert(e->d_name);
    }
    ::closedir(d);
  }
  return names;
}

std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

long kibOf(const std::string& text, const std::string& key) {
  const size_t at = text.find(key + ":");
  return at == std::string::npos ? -1 : std::atol(text.c_str() + at + key.size() + 1);
}

// The processes whose environment holds `marker` (gyrerun, its store and the ranks).
std::vector<pid_t> processesMarked(const std::string& marker) {
  std::vector<pid_t> pids;
  for (const std::string& name : entries("/proc")) {
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = std::atoi(name.c_str());
    if (pid == ::getpid()) continue;
    const std::string env = readFile("/proc/" + name + "/environ");
    if (env.find(marker + '\0') != std::string::npos) pids.push_back(pid);
  }
  return pids;
}

struct Job {
  int exitCode = -1;
  double seconds = 0;
  std::string out, err;
  std::map<int, std::map<std::string, std::string>> ranks;  // each rank's key=value line
  long peakShmemKib = 0;   // host's Shmem above what it was before the job
  long peakPssKib = 0;     // the job's processes together (proportional set size)
  long minAvailableKib = 0;
  std::vector<std::string> leftovers;  // processes and /dev/shm entries left behind

  std::string value(int rank, const std::string& key) const {
    auto r = ranks.find(rank);
    if (r == ranks.end()) return "";
    auto v = r->second.find(key);
    return v == r->second.end() ? "" : v->second;
  }
  long most(const std::string& key) const {
    long m = 0;
    for (const auto& [rank, kv] : ranks) {
      auto v = kv.find(key);
      if (v != kv.end()) m = std::max(m, std::atol(v->second.c_str()));
    }
    return m;
  }
  // gyrerun's line naming the first rank that failed, that rank's lines, the end.
  std::string tail() const {
    std::string first, own;
    int rank = -1;
    std::istringstream lines(err);
    for (std::string line; std::getline(lines, line);) {
      int r = -1;
      if (rank < 0 && std::sscanf(line.c_str(), "gyrerun: rank %d (", &r) == 1 &&
          line.find(" failed: ") != std::string::npos) {
        first = line;
        rank = r;
      }
    }
    if (rank >= 0) {
      std::istringstream again(err);
      const std::string tag = fmt::format("[rank {}] ", rank);
      for (std::string line; std::getline(again, line);) {
        // Its own lines, every acceptor's refusals (the other side of a failed dial) and
        // the checks' own failures on any rank (a rank that failed first may be named
        // after one that failed because of it).
        const bool check = line.find("] rank ") != std::string::npos &&
                           line.find("[gyre rank") == std::string::npos &&
                           line.find(" failed: rank ") == std::string::npos;
        if (line.compare(0, tag.size(), tag) == 0 || check ||
            line.find("a connection on first use failed") != std::string::npos) {
          own += line.substr(0, 2000) + "\n";
        }
      }
    }
    return fmt::format("{}\n{}...\n{}", first, own,
                       err.size() > 4000 ? err.substr(err.size() - 4000) : err);
  }
};

// gyrerun -n `n` lazy_scale_rank `args` with `env`, killed after `limit` seconds;
// afterwards its processes are waited for (10 s), killed and counted if still there, and
// /dev/shm compared with before.
Job runJob(int n, const std::string& args, const std::string& env, int limit) {
  static int jobs = 0;
  const std::string marker = fmt::format("LAZY_SCALE_JOB={}.{}", ::getpid(), ++jobs);
  const std::set<std::string> shmBefore = entries("/dev/shm");
  const long shmemBefore = kibOf(readFile("/proc/meminfo"), "Shmem");
  Job job;
  job.minAvailableKib = kibOf(readFile("/proc/meminfo"), "MemAvailable");
  std::atomic<bool> running{true};
  std::thread sampler([&] {
    while (running) {
      const std::string info = readFile("/proc/meminfo");
      job.peakShmemKib = std::max(job.peakShmemKib, kibOf(info, "Shmem") - shmemBefore);
      job.minAvailableKib = std::min(job.minAvailableKib, kibOf(info, "MemAvailable"));
      long rss = 0;
      for (pid_t pid : processesMarked(marker)) {
        rss += std::max(0L, kibOf(readFile(fmt::format("/proc/{}/smaps_rollup", pid)), "Pss"));
      }
      job.peakPssKib = std::max(job.peakPssKib, rss);
      for (int i = 0; i < 10 && running; ++i) std::this_thread::sleep_for(50ms);
    }
  });
  const testing::RunResult r = runShell(fmt::format(
      "timeout -k 5 {} env {} GYRE_TIMEOUT=60 GYRE_JOIN_TIMEOUT=60 GYRE_SLOT_BYTES=4K "
      "GYRE_SLOTS=2 {} {} --grace 1 -n {} {} {}",
      limit, marker, env, binary("gyrerun"), n, binary("lazy_scale_rank"), args));
  running = false;
  sampler.join();
  job.exitCode = r.exitCode;
  job.seconds = r.seconds;
  job.out = r.out;
  job.err = r.err;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    int rank = -1;
    if (std::sscanf(line.c_str(), "lazy_scale rank %d:", &rank) != 1) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    for (std::string w; words >> w;) {
      const size_t eq = w.find('=');
      if (eq != std::string::npos) job.ranks[rank][w.substr(0, eq)] = w.substr(eq + 1);
    }
  }
  // gyrerun takes its ranks and store down with it; whatever is still there is a leak.
  std::vector<pid_t> left = processesMarked(marker);
  for (int i = 0; i < 100 && !left.empty(); ++i) {
    std::this_thread::sleep_for(100ms);
    left = processesMarked(marker);
  }
  for (pid_t pid : left) {
    job.leftovers.push_back(fmt::format("process {} ({})", pid,
                                        readFile(fmt::format("/proc/{}/comm", pid))));
    ::kill(pid, SIGKILL);
  }
  for (const std::string& name : entries("/dev/shm")) {  // gyre's only: other programs run too
    if (!shmBefore.count(name) && name.rfind("gyre-", 0) == 0)
      job.leftovers.push_back("/dev/shm/" + name);
  }
  std::printf("[lazy_scale] %d ranks %s%s: exit %d after %.1f s; host shmem +%ld MiB, job PSS "
              "%ld MiB, memory available >= %ld MiB\n",
              n, args.c_str(), env.empty() ? "" : (" " + env).c_str(), job.exitCode, job.seconds,
              job.peakShmemKib / 1024, job.peakPssKib / 1024, job.minAvailableKib / 1024);
  std::fflush(stdout);
  return job;
}

void expectExact(const Job& job, int n) {
  EXPECT_EQ(job.exitCode, 0) << job.tail();
  EXPECT_TRUE(job.leftovers.empty()) << fmt::format("left behind: {}", fmt::join(job.leftovers, ", "));
  EXPECT_EQ(static_cast<int>(job.ranks.size()), n) << "ranks that reported\n" << job.tail();
  for (const auto& [rank, kv] : job.ranks) {
    EXPECT_EQ(job.value(rank, "size"), std::to_string(n)) << "rank " << rank;
    EXPECT_LE(std::atoi(job.value(rank, "created_fds").c_str()), kMaxCreatedFds) << "rank " << rank;
  }
}

std::string phases(const Job& job) {
  std::string s;
  for (const char* key : {"create_s", "allreduce_s", "p2p_s", "alltoall_s", "alltoallv_s",
                          "destroy_s", "total_s"}) {
    if (!job.value(0, key).empty()) s += fmt::format(" {} {}", key, job.value(0, key));
  }
  return s;
}

TEST(LazyScale, ManyRanksConnectFewAtCreationThenArbitraryPairsAreExact) {
  const Job job = runJob(kRanks, "--pairs", "", 100);
  expectExact(job, kRanks);
  std::printf("[lazy_scale] rank 0:%s; most descriptors a rank: %ld at creation, %ld after\n",
              phases(job).c_str(), job.most("created_fds"), job.most("fds"));
}

TEST(LazyScale, ManyRanksAllToAllAndAllToAllvOnTheWholeCommunicatorAreExact) {
  const int n = kRanks;
  const Job job = runJob(n, "--alltoall", "", 150);
  expectExact(job, n);
  // Every pair connected: about two descriptors a peer (docs/DESIGN.md).
  for (const auto& [rank, kv] : job.ranks) {
    EXPECT_GE(std::atoi(job.value(rank, "fds").c_str()), n - 1) << "rank " << rank;
  }
  std::printf("[lazy_scale] rank 0:%s; most descriptors a rank: %ld at creation, %ld after\n",
              phases(job).c_str(), job.most("created_fds"), job.most("fds"));
}

// The checks can fail: a flipped element is named by its rank, and creation connecting
// the full mesh (GYRE_CONNECT=eager) is caught before any operation.
TEST(LazyScale, ChecksFailOnACorruptElementAndOnAFullMeshAtCreation) {
  const Job corrupt = runJob(16, "--pairs --alltoall --corrupt 5", "", 60);
  EXPECT_NE(corrupt.exitCode, 0);
  EXPECT_NE(corrupt.err.find("rank 5: allreduce of 1: element 0 is"), std::string::npos)
      << corrupt.tail();
  EXPECT_TRUE(corrupt.leftovers.empty()) << fmt::format("{}", fmt::join(corrupt.leftovers, ", "));

  const Job eager = runJob(64, "--pairs", "GYRE_CONNECT=eager", 60);
  EXPECT_NE(eager.exitCode, 0);
  EXPECT_NE(eager.err.find("descriptors, more than 32: did it connect every pair "
                           "(GYRE_CONNECT=eager)?"),
            std::string::npos)
      << eager.tail();
  EXPECT_TRUE(eager.leftovers.empty()) << fmt::format("{}", fmt::join(eager.leftovers, ", "));
}

}  // namespace
}  // namespace gyre
