#include "bench/sim_options.h"

#include <cerrno>
#include <cstdlib>
#include <sstream>

#include "base/error.h"

namespace gyre::bench {

const char kSimUsage[] = R"(usage: gyre-sim [cluster options] [COLLECTIVE] [gyre-bench options]
Predicts gyre-bench's table for a cluster that is not there: gyre's own schedules run on
simulated pipes with a virtual clock, all ranks in this process, without payload (bytes
are counted, not moved). The time columns are predictions; #wrong is N/A.
Cluster:
  --hosts H                hosts (default 1)
  --ranks-per-host L       ranks on each host (default 8)
  --host-sizes A,B,..      unequal hosts instead (3,5,8)
  --link RATE              each NIC's line rate: 100gbit, 25gbit, 500mbit (default 100gbit)
  --alpha-us A             one-way latency between hosts, software included (default 10)
  --nic rank|host          one NIC per rank (default) or one per host, shared
  --link-burst BYTES       a token bucket on each NIC side, as tc's tbf (default 0: none;
                           tools/netns_bench.sh's links: max(128 KiB, 2 ms of the rate))
  --link-peak RATE         what the bucket's bytes pass at (default 10000: a veth)
  --calls-before N         with a bucket: identical calls before the timed one (default
                           1; gyre-bench --compare-algos' steady state: 4)
  --oversub R              leaf uplinks carry 1/R of their hosts' NIC capacity (default 1)
  --hosts-per-leaf N       hosts under one leaf switch (default 16 with --oversub, else
                           one switch for all)
  --tcp-payload-share F    payload bytes per wire byte (default 1448/1514)
  --shm-rate RATE          a rank's copy rate into a peer's slot on its host (default 3500,
                           bytes per us = MB/s; or 28gbit...)
  --shm-alpha-us A         a hand-off through shared memory (default 2)
  --host-mem-rate RATE     a host's memory bus shared by its ranks (default unlimited)
  --slice-overhead-us A    CPU per slice at each end (default 1)
  --cpu-rate RATE          the receiver's reduction/copy rate (default 3500)
What runs: gyre-bench's flags (gyre-bench --help): COLLECTIVE, -b -e -f -d -o -r, -A or
GYRE_ALGO (default auto: the cost model's pick for this cluster, as a communicator would
make it with its link probe); GYRE_SLOT_BYTES and GYRE_SLOTS apply.
  --compare-algos          all-reduce: ring, tree, rd (where it fits a slot), hier (where
                           hosts allow it) side by side per size, and auto's pick:
                           `compare: bytes=.. ring_us=.. ... auto_algo=.. auto/best=..`
  --as-bench R             with --compare-algos: gyre-bench --compare-algos' own sequence
                           (-w warm-up ops each, R rounds of a barrier and -n/R ops per
                           algorithm in turn), buckets carried from call to call; prints
                           ring, tree, hier and auto as gyre-bench does
  --picks                  all-reduce: only auto's pick per size (`pick: bytes=.. algo=..`),
                           from the cost model, nothing simulated
  --timing                 each row's simulation wall time on stderr
  -h, --help
  --version                print gyre-sim's version and commit (as: gyre-sim 0.2.0
                           (commit 1a2b3c4)); every header has them too
)";

namespace {

double number(const std::string& flag, const char* text) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text, &end);
  if (errno != 0 || end == text || *end != '\0' || !(v >= 0)) {
    fail(ErrorCode::kInvalidArgument, "{} wants a number >= 0, got '{}'", flag, text);
  }
  return v;
}

int positive(const std::string& flag, const char* text) {
  const double v = number(flag, text);
  if (v < 1 || v > 1e6 || v != static_cast<int>(v)) {
    fail(ErrorCode::kInvalidArgument, "{} wants a whole number >= 1, got '{}'", flag, text);
  }
  return static_cast<int>(v);
}

}  // namespace

SimCommandLine parseSimCommandLine(int argc, char** argv) {
  SimCommandLine c;
  c.benchArgs.push_back(argc > 0 ? argv[0] : "gyre-sim");
  int hosts = 1, perHost = 8;
  std::vector<int> sizes;
  bool leafSet = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) fail(ErrorCode::kInvalidArgument, "{} needs a value", a);
      return argv[++i];
    };
    sim::NetworkModel& m = c.network;
    if (a == "--hosts") {
      hosts = positive(a, value());
    } else if (a == "--ranks-per-host") {
      perHost = positive(a, value());
    } else if (a == "--host-sizes") {
      std::stringstream in(value());
      for (std::string part; std::getline(in, part, ',');)
        sizes.push_back(positive(a, part.c_str()));
    } else if (a == "--link") {
      m.linkBytesPerUs = sim::parseRate(value());
    } else if (a == "--alpha-us") {
      m.linkAlphaUs = number(a, value());
    } else if (a == "--link-burst") {
      m.linkBurstBytes = number(a, value());
    } else if (a == "--link-peak") {
      m.linkPeakBytesPerUs = sim::parseRate(value());
    } else if (a == "--nic") {
      const std::string v = value();
      if (v != "rank" && v != "host")
        fail(ErrorCode::kInvalidArgument, "--nic rank|host, got '{}'", v);
      m.nicPerRank = v == "rank";
    } else if (a == "--as-bench") {
      c.asBenchRounds = positive(a, value());
    } else if (a == "--calls-before") {
      c.callsBefore = positive(a, value());
    } else if (a == "--oversub") {
      m.oversub = number(a, value());
      if (m.oversub < 1) fail(ErrorCode::kInvalidArgument, "--oversub wants >= 1");
    } else if (a == "--hosts-per-leaf") {
      m.hostsPerLeaf = positive(a, value());
      leafSet = true;
    } else if (a == "--tcp-payload-share") {
      m.tcpPayloadShare = number(a, value());
      if (m.tcpPayloadShare <= 0 || m.tcpPayloadShare > 1) {
        fail(ErrorCode::kInvalidArgument, "--tcp-payload-share wants (0, 1]");
      }
    } else if (a == "--shm-rate") {
      m.shmBytesPerUs = sim::parseRate(value());
    } else if (a == "--shm-alpha-us") {
      m.shmAlphaUs = number(a, value());
    } else if (a == "--host-mem-rate") {
      m.hostMemBytesPerUs = sim::parseRate(value());
    } else if (a == "--slice-overhead-us") {
      m.sliceOverheadUs = number(a, value());
    } else if (a == "--cpu-rate") {
      m.cpuBytesPerUs = sim::parseRate(value());
    } else if (a == "--compare-algos") {
      c.compareAlgos = true;
    } else if (a == "--picks") {
      c.picksOnly = true;
    } else if (a == "--timing") {
      c.timing = true;
    } else if (a == "-h" || a == "--help") {
      c.help = true;
    } else if (a == "--version") {
      c.version = true;
    } else {
      c.benchArgs.push_back(a);
    }
  }
  c.network.hostSizes =
      sizes.empty() ? std::vector<int>(static_cast<size_t>(hosts), perHost) : sizes;
  if (c.network.oversub > 1 && !leafSet) c.network.hostsPerLeaf = 16;
  return c;
}

}  // namespace gyre::bench
