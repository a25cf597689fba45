#include "base/launch_env.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <vector>

#include "base/error.h"
#include "base/slurm_hostlist.h"

namespace gyre {
namespace {

class Reader {
 public:
  Reader(const EnvLookup& lookup, const char* launcher) : lookup_(lookup), launcher_(launcher) {}

  std::optional<std::string> text(const char* name) const {
    const char* v = lookup_(name);
    if (v == nullptr || *v == '\0') return std::nullopt;
    return std::string(v);
  }

  std::optional<long long> integer(const char* name, long long lo, long long hi) const {
    std::optional<std::string> v = text(name);
    if (!v) return std::nullopt;
    char* end = nullptr;
    errno = 0;
    long long x = std::strtoll(v->c_str(), &end, 10);
    if (errno != 0 || *end != '\0' || x < lo || x > hi) {
      fail(ErrorCode::kInvalidArgument, "{}='{}' (set by {}) is not an integer in [{}, {}]",
           name, *v, launcher_, lo, hi);
    }
    return x;
  }

  const char* launcher() const { return launcher_; }

 private:
  const EnvLookup& lookup_;
  const char* launcher_;
};

constexpr long long kMaxRanks = 1 << 24;

bool isLoopback(const std::string& addr) {
  return addr.rfind("127.", 0) == 0 || addr == "::1" || addr == "localhost";
}

// OMPI_MCA_orte_hnp_uri = "1261895680.0;tcp://10.0.0.1,192.168.1.2:46631;tcp6://[fd00::2]:45813":
// mpirun's job id, then its listening addresses.
struct HnpUri {
  unsigned long long jobId = 0;
  bool hasJobId = false;
  std::vector<std::string> ipv4, ipv6;
};

HnpUri parseHnpUri(const std::string& uri) {
  HnpUri out;
  size_t semi = uri.find(';');
  std::string id = uri.substr(0, semi);
  char* end = nullptr;
  errno = 0;
  unsigned long long job = std::strtoull(id.c_str(), &end, 10);
  if (errno == 0 && end != id.c_str() && (*end == '.' || *end == '\0')) {
    out.jobId = job;
    out.hasJobId = true;
  }
  while (semi != std::string::npos) {
    size_t next = uri.find(';', semi + 1);
    std::string entry = uri.substr(semi + 1, next == std::string::npos ? next : next - semi - 1);
    semi = next;
    const bool v6 = entry.rfind("tcp6://", 0) == 0;
    if (!v6 && entry.rfind("tcp://", 0) != 0) continue;
    std::string hosts = entry.substr(v6 ? 7 : 6);
    size_t colon = hosts.rfind(':');
    if (colon == std::string::npos) continue;
    hosts.resize(colon);
    size_t start = 0;
    while (start <= hosts.size()) {
      size_t comma = hosts.find(',', start);
      std::string h = hosts.substr(start, comma == std::string::npos ? comma : comma - start);
      if (v6 && h.size() > 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
      if (!h.empty()) (v6 ? out.ipv6 : out.ipv4).push_back(h);
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  return out;
}

std::string firstNonLoopback(const std::vector<std::string>& addrs) {
  for (const std::string& a : addrs) {
    if (!isLoopback(a)) return a;
  }
  return "";
}

void resolveOpenMpi(const Reader& r, LaunchEnv& e) {
  std::optional<std::string> uri = r.text("OMPI_MCA_orte_hnp_uri");
  HnpUri hnp = uri ? parseHnpUri(*uri) : HnpUri{};
  if (e.masterAddrFrom == "default") {
    std::string addr = firstNonLoopback(hnp.ipv4);
    if (addr.empty()) addr = firstNonLoopback(hnp.ipv6);
    if (addr.empty() && !hnp.ipv4.empty()) addr = hnp.ipv4.front();
    if (!addr.empty()) {
      e.masterAddr = addr;
      e.masterAddrFrom = "OMPI_MCA_orte_hnp_uri";
    } else if (r.integer("OMPI_MCA_orte_num_nodes", 1, kMaxRanks).value_or(1) > 1) {
      fail(ErrorCode::kInvalidArgument,
           "Open MPI started this job on several nodes but gives no address for mpirun's host "
           "(OMPI_MCA_orte_hnp_uri is unset): export MASTER_ADDR=<rank 0's host> to every rank "
           "(mpirun -x MASTER_ADDR=...)");
    }
  }
  if (e.masterPortFrom == "default") {
    std::optional<long long> job = r.integer("OMPI_MCA_ess_base_jobid", 0, 1LL << 40);
    if (hnp.hasJobId || job) {
      const unsigned long long id = hnp.hasJobId ? hnp.jobId : static_cast<unsigned long long>(*job);
      e.masterPort = 10000 + static_cast<int>((id >> 16) % 20000);
      e.masterPortFrom = "the Open MPI job id";
    }
  }
}

void resolveSlurm(const Reader& r, LaunchEnv& e) {
  // This node's share of the step, when srun says.
  if (std::optional<long long> node = r.integer("SLURM_NODEID", 0, kMaxRanks)) {
    for (const char* name : {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"}) {
      std::optional<std::string> v = r.text(name);
      if (!v) continue;
      std::vector<int> counts = expandTasksPerNode(*v, name);
      if (static_cast<size_t>(*node) < counts.size()) e.localSize = counts[*node];
      break;
    }
  }
  if (e.masterAddrFrom == "default") {
    for (const char* name : {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"}) {
      std::optional<std::string> v = r.text(name);
      if (!v) continue;
      e.masterAddr = firstHost(*v, name);
      e.masterAddrFrom = std::string("the first host of ") + name;
      break;
    }
  }
  if (e.masterPortFrom == "default") {
    if (std::optional<long long> job = r.integer("SLURM_JOB_ID", 0, 1LL << 62)) {
      e.masterPort = 15000 + static_cast<int>(*job % 10000);
      e.masterPortFrom = "SLURM_JOB_ID (15000 + its last four digits)";
    }
  }
}

// The launcher's rank and size variables, in order of precedence.
struct RankSource {
  Launcher launcher;
  const char* rank;
  const char* size;
  const char* sizeFallback;
  const char* localRank;
  const char* localSize;
};

constexpr RankSource kSources[] = {
    {Launcher::kTorchrun, "RANK", "WORLD_SIZE", nullptr, "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
    {Launcher::kOpenMpi, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", nullptr,
     "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {Launcher::kSlurm, "SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_LOCALID",
     nullptr},
};

}  // namespace

const char* launcherName(Launcher launcher) {
  switch (launcher) {
    case Launcher::kNone: return "no launcher";
    case Launcher::kTorchrun: return "torchrun";
    case Launcher::kOpenMpi: return "Open MPI";
    case Launcher::kSlurm: return "Slurm";
  }
  return "?";
}

std::string LaunchEnv::describe() const {
  if (launcher == Launcher::kNone) return "no launcher (a world of one)";
  std::string local;
  if (localRank >= 0 && localSize >= 1) {
    local = fmt::format(" (local {} of {})", localRank, localSize);
  } else if (localRank >= 0) {
    local = fmt::format(" (local {})", localRank);
  }
  return fmt::format("{} rank {} of {}{}, rank 0's store at {}:{} (address from {}, port from {})",
                     launcherName(launcher), rank, size, local, masterAddr, masterPort,
                     masterAddrFrom, masterPortFrom);
}

LaunchEnv resolveLaunchEnv(const EnvLookup& lookup) {
  LaunchEnv e;
  const RankSource* source = nullptr;
  for (const RankSource& s : kSources) {
    Reader probe(lookup, launcherName(s.launcher));
    // A Slurm batch script has SLURM_PROCID=0 and the job's SLURM_NTASKS but is not one
    // of the job's tasks (only srun's tasks have a step id): it is a process on its own.
    if (s.launcher == Launcher::kSlurm && probe.text(s.rank) && !probe.text("SLURM_STEP_ID") &&
        !probe.text("SLURM_STEPID")) {
      e.note =
          "SLURM_PROCID is set but SLURM_STEP_ID is not: this runs in a Slurm batch script, "
          "not as a task of srun; start the ranks with srun (srun -n N prog)";
      continue;
    }
    if (probe.text(s.rank) || probe.text(s.size)) {
      source = &s;
      break;
    }
  }
  Reader common(lookup, source ? launcherName(source->launcher) : "the user");
  if (std::optional<std::string> addr = common.text("MASTER_ADDR")) {
    e.masterAddr = *addr;
    e.masterAddrFrom = "MASTER_ADDR";
  }
  if (std::optional<long long> port = common.integer("MASTER_PORT", 1, 65535)) {
    e.masterPort = static_cast<int>(*port);
    e.masterPortFrom = "MASTER_PORT";
  }
  if (source == nullptr) return e;

  Reader r(lookup, launcherName(source->launcher));
  std::optional<long long> rank = r.integer(source->rank, 0, kMaxRanks - 1);
  std::optional<long long> size = r.integer(source->size, 1, kMaxRanks);
  const char* sizeName = source->size;
  if (!size && source->sizeFallback) {
    size = r.integer(source->sizeFallback, 1, kMaxRanks);
    sizeName = source->sizeFallback;
  }
  if (!rank || !size) {
    fail(ErrorCode::kInvalidArgument, "{} is set but {} is not: start the program with {}",
         rank ? source->rank : sizeName, rank ? sizeName : source->rank,
         source->launcher == Launcher::kTorchrun
             ? "gyrerun or torchrun, or set both RANK and WORLD_SIZE"
             : "its launcher, which sets both");
  }
  if (*rank >= *size) {
    fail(ErrorCode::kInvalidArgument, "{}={} is not below {}={} (set by {})", source->rank, *rank,
         sizeName, *size, r.launcher());
  }
  e.launcher = source->launcher;
  e.rank = static_cast<int>(*rank);
  e.size = static_cast<int>(*size);
  e.localRank = static_cast<int>(r.integer(source->localRank, 0, kMaxRanks - 1).value_or(-1));
  if (source->localSize) {
    e.localSize = static_cast<int>(r.integer(source->localSize, 1, kMaxRanks).value_or(-1));
  }
  if (e.launcher == Launcher::kOpenMpi) resolveOpenMpi(r, e);
  if (e.launcher == Launcher::kSlurm) resolveSlurm(r, e);
  if (e.localRank >= 0 && e.localSize >= 1 && e.localRank >= e.localSize) {
    fail(ErrorCode::kInvalidArgument, "{} says local rank {} of {} local ranks", r.launcher(),
         e.localRank, e.localSize);
  }
  Reader gyrerun(lookup, "gyrerun --elastic");
  e.elastic = gyrerun.integer("GYRE_ELASTIC", 0, 1).value_or(0) == 1;
  e.newcomer = gyrerun.integer("GYRE_ELASTIC_NEWCOMER", 0, 1).value_or(0) == 1;
  return e;
}

namespace {

// "host:port" or "[v6addr]:port".
void parseAgentStore(const std::string& text, StoreLocation& out) {
  auto bad = [&](const char* why) {
    fail(ErrorCode::kInvalidArgument,
         "GYRE_AGENT_STORE='{}' {}: it must be HOST:PORT ([v6addr]:PORT), the store the "
         "launcher serves (gyrerun sets it)",
         text, why);
  };
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) bad("has no host and port");
  std::string host = text.substr(0, colon);
  if (host.front() == '[') {
    if (host.back() != ']' || host.size() < 3) bad("has an unclosed [");
    host = host.substr(1, host.size() - 2);
  } else if (host.find(':') != std::string::npos) {
    bad("has an IPv6 address without [ ]");
  }
  const std::string port = text.substr(colon + 1);
  char* end = nullptr;
  errno = 0;
  const long value = std::strtol(port.c_str(), &end, 10);
  if (port.empty() || errno != 0 || *end != '\0' || value < 1 || value > 65535) {
    bad("has no port in [1, 65535]");
  }
  out.host = host;
  out.port = static_cast<int>(value);
}

}  // namespace

StoreLocation resolveStoreLocation(const EnvLookup& lookup, const std::string& host, int port) {
  StoreLocation where;
  where.host = host;
  where.port = port;
  LaunchEnv launch;
  try {
    launch = resolveLaunchEnv(lookup);
  } catch (const Error&) {
    return where;  // not the launcher's endpoint, then (its caller has its own error)
  }
  if (launch.masterAddr != host || launch.masterPort != port) return where;
  Reader r(lookup, "the launcher");
  if (std::optional<std::string> agent = r.text("GYRE_AGENT_STORE")) {
    parseAgentStore(*agent, where);
    where.server = StoreServer::kAgent;
    where.from = "GYRE_AGENT_STORE";
    const long long attempt = r.integer("TORCHELASTIC_RESTART_COUNT", 0, 1LL << 30).value_or(0);
    where.prefix = fmt::format("/worker/attempt_{}", attempt);
    return where;
  }
  if (r.text("TORCHELASTIC_USE_AGENT_STORE") == std::optional<std::string>("True")) {
    if (port >= 65535) {
      fail(ErrorCode::kInvalidArgument,
           "TORCHELASTIC_USE_AGENT_STORE=True: torchrun's agent serves its own store at "
           "MASTER_PORT={}, so gyre's goes to MASTER_PORT+1, which is no port: give torchrun a "
           "lower --master-port",
           port);
    }
    where.server = StoreServer::kRankZeroBesideAgent;
    where.port = port + 1;
    where.from = fmt::format(
        "MASTER_PORT+1: torchrun's agent serves a torch store at MASTER_PORT={} "
        "(TORCHELASTIC_USE_AGENT_STORE=True)",
        port);
  }
  return where;
}

StoreLocation storeLocationFromProcess(const std::string& host, int port) {
  return resolveStoreLocation([](const char* name) { return std::getenv(name); }, host, port);
}

LaunchEnv launchEnvFromProcess() {
  return resolveLaunchEnv([](const char* name) { return std::getenv(name); });
}

std::string masterAddressFromEnvironment() {
  try {
    return launchEnvFromProcess().masterAddr;
  } catch (const Error&) {
    return "127.0.0.1";
  }
}

int launcherRank() {
  try {
    return launchEnvFromProcess().rank;
  } catch (const Error&) {
    // A malformed size still leaves a usable rank to name.
    for (const RankSource& s : kSources) {
      const char* v = std::getenv(s.rank);
      if (v == nullptr || *v == '\0') continue;
      char* end = nullptr;
      long x = std::strtol(v, &end, 10);
      return (*end == '\0' && x >= 0 && x < kMaxRanks) ? static_cast<int>(x) : -1;
    }
    return -1;
  }
}

bool namesItsRank(const char* message) {
  if (std::strncmp(message, "rank ", 5) != 0) return false;
  const char* p = message + 5;
  if (*p < '0' || *p > '9') return false;
  while (*p >= '0' && *p <= '9') ++p;
  return p[0] == ':' && p[1] == ' ';
}

}  // namespace gyre
