// A rank of lazy_scale_test.cc, started by gyrerun: it creates a communicator from the
// environment, checks that creation connected only a few peers (descriptors), runs the
// operations its arguments name, checks every element exactly (each encodes its source
// rank, its destination and its index), and prints one "lazy_scale rank R: key=value ..."
// line on stdout. A failure is "rank R: ..." on stderr and exit status 1.
//
//   lazy_scale_rank [--pairs] [--alltoall] [--max-created-fds K] [--corrupt R]
//     --pairs          all-reduce (1 and 100,000 int64), sendRecv along 4 seeded random
//                      cycles through all ranks and 3 far shifts, plain send/recv over a
//                      seeded random perfect matching, a barrier
//     --alltoall       allToAll and allToAllv (uneven counts, some zero) over the whole
//                      communicator: every pair connects
//     --max-created-fds K  fail when creation added more than K descriptors (default 32,
//                      as lazy_connect_test's ResourcesPerRankStayFlat)
//     --corrupt R      rank R flips one received element before checking (the checks'
//                      own test: the run must fail naming it)
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "base/error.h"
#include "dir_entries.h"
#include "ring/communicator.h"

namespace {

using namespace gyre;
using gyre::testing::entriesIn;
using Clock = std::chrono::steady_clock;

int gRank = -1;
int gCorrupt = -1;

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "rank %d: %s\n", gRank, what.c_str());
  std::fflush(stderr);
  std::_Exit(1);
}

// A line of /proc/self/status or /proc/meminfo, in KiB.
long kibOf(const char* file, const char* key) {
  std::ifstream in(file);
  std::string line;
  const size_t len = std::strlen(key);
  while (std::getline(in, line)) {
    if (line.compare(0, len, key) == 0 && line.size() > len && line[len] == ':') {
      return std::atol(line.c_str() + len + 1);
    }
  }
  return -1;
}

// Every element: source rank, destination rank, a tag for the operation and its index.
int64_t enc(int src, int dst, int tag, size_t i) {
  return ((static_cast<int64_t>(src) * 4096 + dst) * 64 + tag) * (int64_t{1} << 24) +
         static_cast<int64_t>(i);
}

void check(std::vector<int64_t>& got, size_t at, size_t count, int src, int dst, int tag,
           const char* what) {
  if (gCorrupt == gRank && count > 0) {
    got[at + count / 2] ^= 1;
    gCorrupt = -1;
  }
  for (size_t i = 0; i < count; ++i) {
    if (got[at + i] != enc(src, dst, tag, i)) {
      die(fmt::format("{}: element {} from rank {} is {}, not {}", what, i, src, got[at + i],
                      enc(src, dst, tag, i)));
    }
  }
}

std::vector<int64_t> fill(size_t count, int src, int dst, int tag) {
  std::vector<int64_t> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = enc(src, dst, tag, i);
  return v;
}

// The same random order of 0..n-1 on every rank (own Fisher-Yates: std::shuffle's
// sequence is the library's choice).
std::vector<int> order(int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int> o(n);
  for (int i = 0; i < n; ++i) o[i] = i;
  for (int i = n - 1; i > 0; --i) std::swap(o[i], o[rng() % static_cast<uint64_t>(i + 1)]);
  return o;
}

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// The elements a pair carries in the all-to-all-v: 0 to 700, some zero.
size_t vcount(int src, int dst) {
  const uint64_t h = (static_cast<uint64_t>(src) * 2654435761u) ^ (static_cast<uint64_t>(dst) * 40503u);
  const size_t c = h % 701;
  return c % 7 == 0 ? 0 : c;
}

void pairs(Communicator& comm, std::string& line) {
  const int n = comm.size(), me = comm.rank();
  auto t = Clock::now();
  for (size_t count : {size_t{1}, size_t{100000}}) {
    std::vector<int64_t> v(count);
    for (size_t i = 0; i < count; ++i) v[i] = (me + 1) * int64_t{1000003} + static_cast<int64_t>(i);
    comm.allReduce(v.data(), v.data(), count, DataType::kInt64, ReduceOp::kSum);
    if (gCorrupt == me) v[count / 2] ^= 1;
    for (size_t i = 0; i < count; ++i) {
      const int64_t want = int64_t{n} * (n + 1) / 2 * 1000003 + int64_t{n} * static_cast<int64_t>(i);
      if (v[i] != want) die(fmt::format("allreduce of {}: element {} is {}, not {}", count, i, v[i], want));
    }
  }
  line += fmt::format(" allreduce_s={:.2f}", since(t));

  // sendRecv along random cycles through every rank, then far shifts: each rank sends to
  // and receives from a different arbitrary rank every round, all at once.
  t = Clock::now();
  int tag = 1;
  std::vector<std::pair<int, int>> rounds;  // (to, from)
  for (uint64_t seed : {11u, 12u, 13u, 14u}) {
    const std::vector<int> o = order(n, seed);
    std::vector<int> at(n);
    for (int i = 0; i < n; ++i) at[o[i]] = i;
    rounds.emplace_back(o[(at[me] + 1) % n], o[(at[me] + n - 1) % n]);
  }
  for (int k : {n / 2, n / 3 + 1, n - 5}) {
    if (k % n != 0) rounds.emplace_back((me + k) % n, (me + n - k % n) % n);
  }
  for (auto [to, from] : rounds) {
    // 1 to 3 slices of a 4 KiB slot, different per round.
    const size_t count = 300 + static_cast<size_t>(tag) * 171;
    std::vector<int64_t> out = fill(count, me, to, tag), in(count, -1);
    comm.sendRecv(out.data(), count, to, in.data(), count, from, DataType::kInt64);
    check(in, 0, count, from, me, tag, fmt::format("sendRecv round {} (to {}, from {})", tag, to, from).c_str());
    ++tag;
  }
  // Plain send and recv over a random perfect matching: the first of a pair sends then
  // receives, the second receives then sends.
  {
    const std::vector<int> o = order(n, 99);
    for (int i = 0; i + 1 < n; i += 2) {
      const int a = o[i], b = o[i + 1];
      if (me != a && me != b) continue;
      const int peer = me == a ? b : a;
      const size_t count = 1500;
      std::vector<int64_t> out = fill(count, me, peer, tag), in(count, -1);
      if (me == a) {
        comm.send(out.data(), count, DataType::kInt64, peer);
        comm.recv(in.data(), count, DataType::kInt64, peer);
      } else {
        comm.recv(in.data(), count, DataType::kInt64, peer);
        comm.send(out.data(), count, DataType::kInt64, peer);
      }
      check(in, 0, count, peer, me, tag, fmt::format("send/recv with rank {}", peer).c_str());
    }
    ++tag;
  }
  comm.barrier();
  line += fmt::format(" p2p_s={:.2f} p2p_peers={}", since(t), 2 * rounds.size() + 1);
}

void allToAlls(Communicator& comm, std::string& line) {
  const int n = comm.size(), me = comm.rank();
  const int tagA = 40, tagV = 41;
  auto t = Clock::now();
  {
    const size_t count = 600;  // 4.7 KiB a pair: two slices of a 4 KiB slot
    std::vector<int64_t> send(count * n), recv(count * n, -1);
    for (int p = 0; p < n; ++p) {
      for (size_t i = 0; i < count; ++i) send[p * count + i] = enc(me, p, tagA, i);
    }
    comm.allToAll(send.data(), recv.data(), count, DataType::kInt64);
    for (int p = 0; p < n; ++p) check(recv, p * count, count, p, me, tagA, "alltoall");
  }
  line += fmt::format(" alltoall_s={:.2f}", since(t));
  t = Clock::now();
  {
    std::vector<size_t> sc(n), rc(n);
    size_t sTotal = 0, rTotal = 0;
    for (int p = 0; p < n; ++p) {
      sc[p] = vcount(me, p);
      rc[p] = vcount(p, me);
      sTotal += sc[p];
      rTotal += rc[p];
    }
    std::vector<int64_t> send(sTotal), recv(rTotal, -1);
    for (int p = 0, at = 0; p < n; at += static_cast<int>(sc[p]), ++p) {
      for (size_t i = 0; i < sc[p]; ++i) send[at + i] = enc(me, p, tagV, i);
    }
    comm.allToAllv(send.data(), sc.data(), nullptr, recv.data(), rc.data(), nullptr,
                   DataType::kInt64);
    for (int p = 0, at = 0; p < n; at += static_cast<int>(rc[p]), ++p) {
      check(recv, at, rc[p], p, me, tagV, "alltoallv");
    }
  }
  line += fmt::format(" alltoallv_s={:.2f}", since(t));
}

}  // namespace

int main(int argc, char** argv) {
  bool doPairs = false, doAllToAll = false;
  int maxCreatedFds = 32;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--pairs") doPairs = true;
    else if (a == "--alltoall") doAllToAll = true;
    else if (a == "--max-created-fds" && i + 1 < argc) maxCreatedFds = std::atoi(argv[++i]);
    else if (a == "--corrupt" && i + 1 < argc) gCorrupt = std::atoi(argv[++i]);
    else die("unknown argument " + a);
  }
  try {
    const auto t0 = Clock::now();
    const int fds0 = entriesIn("/proc/self/fd");
    auto comm = Communicator::fromEnvironment();
    gRank = comm->rank();
    const int created = entriesIn("/proc/self/fd") - fds0;
    // No rank dials another before every rank has counted (the barrier uses only pipes
    // creation made): a dial that arrived first would be counted as creation's.
    comm->barrier();
    std::string line = fmt::format("lazy_scale rank {}: size={} created_fds={} create_s={:.2f}",
                                   gRank, comm->size(), created, since(t0));
    // Before any operation: creation must not have connected the full mesh.
    if (created > maxCreatedFds) {
      die(fmt::format("creation added {} descriptors, more than {}: did it connect every "
                      "pair (GYRE_CONNECT={})?", created, maxCreatedFds,
                      std::getenv("GYRE_CONNECT") ? std::getenv("GYRE_CONNECT") : "unset"));
    }
    if (doPairs) pairs(*comm, line);
    if (doAllToAll) allToAlls(*comm, line);
    // Every rank still holds every pipe here: rank 0 reads the host's shared memory.
    comm->barrier();
    line += fmt::format(" fds={} rss_kib={} hwm_kib={}", entriesIn("/proc/self/fd") - fds0,
                        kibOf("/proc/self/status", "VmRSS"), kibOf("/proc/self/status", "VmHWM"));
    if (gRank == 0) line += fmt::format(" host_shmem_kib={}", kibOf("/proc/meminfo", "Shmem"));
    comm->barrier();
    const auto td = Clock::now();
    comm.reset();
    line += fmt::format(" destroy_s={:.2f} total_s={:.2f}", since(td), since(t0));
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  } catch (const std::exception& e) {
    die(e.what());
  }
  return 0;
}
