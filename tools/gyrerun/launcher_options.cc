#include "tools/gyrerun/launcher_options.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "tools/gyrerun/torch_compat.h"

namespace gyre::tools {
namespace {

constexpr int kTorchDefaultPort = 29500;
// A job bigger than this is a typo; the bound also keeps RANK arithmetic far from overflow.
constexpr int kMaxProcsPerNode = 4096;
constexpr int kMaxNodes = 1 << 16;
// Keeps the grace period far from overflowing a clock duration.
constexpr double kMaxGraceSeconds = 1e6;

const char kUsage[] =
    R"(usage: gyrerun --nproc-per-node N [options] program [args...]

Starts N local ranks of `program` (torchrun-style) with RANK, WORLD_SIZE, LOCAL_RANK,
LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE, MASTER_ADDR and MASTER_PORT set.

options (--opt VALUE or --opt=VALUE; `-` or `_` inside names):
  -n, --nproc-per-node N  ranks on this node (required): a number, auto (one per GPU, else
                          per CPU), cpu or gpu
  --nnodes M              number of nodes (default 1); MIN:MAX only with MIN == MAX
  --node-rank R           this node's index, 0..M-1 (default 0); RANK = R*N + local rank
  --master-addr A         node 0's address: where the job's stores are (default 127.0.0.1)
  --master-port P         rank 0's port, for torch's store (default: 29500 with several
                          nodes, else a free port)
  --store-port P          port of gyre's store, which node 0's gyrerun serves (gyre-store)
                          for the whole run, restarts included (default: a free port on
                          one node; MASTER_PORT+1 with several nodes)
  --no-agent-store        serve no store: rank 0 serves gyre's store at MASTER_PORT, as
                          before, and takes it away when it dies
  --standalone            one node, a free local port, a random TORCHELASTIC_RUN_ID
  --rdzv-endpoint H[:P]   MASTER_ADDR H, MASTER_PORT P (default 29400), as torchrun's
  --rdzv-backend B        c10d or static (the same here; ranks come from --node-rank,
                          which several c10d nodes must give)
  --rdzv-id ID            TORCHELASTIC_RUN_ID (default none)
  --max-restarts K        after a rank fails, restart the whole local group up to K times
                          (TORCHELASTIC_RESTART_COUNT counts them; default 0)
  --elastic               a failed rank does not stop the others: they go on without it
                          (shrink) and gyrerun restarts it alone, up to --max-restarts
                          times on this node, as a newcomer they take back in (grow); the
                          program must do both (gyre-train does; docs/elastic.md)
  --monitor-interval S    accepted (gyrerun sees rank exits at once)
  --role NAME             ROLE_NAME (default "default")
  --no-python             run the program as is, even a .py (default: python3 -u X.py)
  -m, --module            the program is a Python module (python3 -u -m MODULE)
  --torch-launch          behave as python -m torch.distributed.launch: append
                          --local_rank=N to the program's arguments...
  --use-env               ...unless this is given (the ranks read LOCAL_RANK instead)
  --grace SECONDS         after a rank fails, how long the others may run on to report
                          their own errors before SIGTERM, then SIGKILL 1 s later
                          (default 3)
  --prefix MODE           label output lines with "[rank R] ": stderr (default; stdout
                          passes through unchanged so tables stay parseable), all, none
  --no-prefix             same as --prefix none
  --bind MODE             none (default: the kernel places ranks) or core: local rank r
                          runs only on the r-th of the k CPUs gyrerun may use (as
                          mpirun --bind-to core); with more local ranks than CPUs,
                          neighbours share one: r on the (r * k / nproc)-th
  -h, --help              this text
  --version               print gyrerun's version and commit (as: gyrerun 0.2.0
                          (commit 1a2b3c4)) and exit

With several ranks per node and OMP_NUM_THREADS unset, it is set to 1 (torchrun's
notice is printed). Ranks also get ROLE_RANK, ROLE_WORLD_SIZE, ROLE_NAME,
TORCHELASTIC_RUN_ID, TORCHELASTIC_RESTART_COUNT, TORCHELASTIC_MAX_RESTARTS,
TORCHELASTIC_USE_AGENT_STORE=False (torch's rank 0 serves torch's store at MASTER_PORT)
and GYRE_AGENT_STORE=HOST:PORT, gyre's store served by node 0's gyrerun (every gyrerun
of a job must be of one version, and all or none given --no-agent-store). gyre-store is
found beside gyrerun (GYRE_STORE_PROGRAM overrides it).

Exit status: 0 when every rank exited 0; 1 when a rank failed (exit code != 0 or a
signal; the first failure is named on stderr) or the job's store could not start; 2 for
a wrong command line; 128+S when
gyrerun itself got signal S (forwarded to the ranks first).
)";

std::optional<long> parseInt(const std::string& text) {
  if (text.empty()) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  long value = std::strtol(text.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') return std::nullopt;
  return value;
}

std::optional<double> parseSeconds(const std::string& text) {
  if (text.empty()) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  double value = std::strtod(text.c_str(), &end);
  if (errno != 0 || *end != '\0' || !std::isfinite(value) || value < 0 ||
      value > kMaxGraceSeconds) {
    return std::nullopt;
  }
  return value;
}

// Applies one option that takes a value; returns an error message or "".
std::string applyValue(const std::string& name, const std::string& value, LaunchOptions& o) {
  auto intIn = [&](int lo, int hi, int& out) -> std::string {
    std::optional<long> v = parseInt(value);
    if (!v || *v < lo || *v > hi) {
      return "--" + name + " wants an integer in [" + std::to_string(lo) + ", " +
             std::to_string(hi) + "], got '" + value + "'";
    }
    out = static_cast<int>(*v);
    return "";
  };
  if (name == "nproc-per-node") return parseNprocPerNode(value, o.nprocPerNode);
  if (name == "nnodes") return parseNnodes(value, o.nnodes);
  if (name == "node-rank") {
    o.nodeRankGiven = true;
    return intIn(0, kMaxNodes - 1, o.nodeRank);
  }
  if (name == "max-restarts") return intIn(0, 1 << 20, o.maxRestarts);
  if (name == "monitor-interval") {
    std::optional<double> v = parseSeconds(value);
    if (!v) return "--monitor-interval wants a number of seconds in [0, 1e6], got '" + value + "'";
    o.monitorInterval = *v;
    return "";
  }
  if (name == "rdzv-endpoint") {
    std::string host;
    int port = 0;
    std::string error = parseRdzvEndpoint(value, host, port);
    if (!error.empty()) return error;
    o.masterAddr = host;
    o.masterPort = port;
    return "";
  }
  if (name == "rdzv-backend") {
    if (value != "c10d" && value != "static") {
      return "--rdzv-backend=" + value +
             " is not supported: use c10d or static (gyrerun serves the same stores either way)";
    }
    o.rdzvBackend = value;
    return "";
  }
  if (name == "rdzv-id" || name == "role") {
    if (value.empty()) return "--" + name + " wants a value";
    (name == "role" ? o.role : o.rdzvId) = value;
    return "";
  }
  if (name == "rdzv-conf" || name == "start-method") return "";  // torchrun's, no meaning here
  if (name == "master-port") return intIn(1, 65535, o.masterPort);
  if (name == "store-port") return intIn(1, 65535, o.storePort);
  if (name == "master-addr") {
    if (value.empty()) return "--master-addr wants an address";
    o.masterAddr = value;
    return "";
  }
  if (name == "grace") {
    std::optional<double> v = parseSeconds(value);
    if (!v) return "--grace wants a number of seconds in [0, 1e6], got '" + value + "'";
    o.graceSeconds = *v;
    return "";
  }
  if (name == "prefix") {
    if (value == "stderr") {
      o.prefix = PrefixMode::kStderr;
    } else if (value == "all") {
      o.prefix = PrefixMode::kAll;
    } else if (value == "none") {
      o.prefix = PrefixMode::kNone;
    } else {
      return "--prefix wants stderr, all or none, got '" + value + "'";
    }
    return "";
  }
  if (name == "bind") {
    if (value == "none") {
      o.bind = BindMode::kNone;
    } else if (value == "core") {
      o.bind = BindMode::kCore;
    } else {
      return "--bind wants none or core, got '" + value + "'";
    }
    return "";
  }
  return "unknown option --" + name;
}

bool takesValue(const std::string& name) {
  static const char* const kNames[] = {
      "nproc-per-node", "nnodes",        "node-rank", "master-addr",  "master-port",
      "grace",          "prefix",        "bind",      "max-restarts", "monitor-interval",
      "rdzv-endpoint",  "rdzv-backend",  "rdzv-id",   "rdzv-conf",    "role",
      "start-method",   "store-port"};
  return std::any_of(std::begin(kNames), std::end(kNames),
                     [&](const char* n) { return name == n; });
}

}  // namespace

ParseResult parseLaunchOptions(int argc, const char* const* argv) {
  ParseResult result;
  LaunchOptions& o = result.options;
  int i = 1;
  for (; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg == "-h" || arg == "--help") {
      result.helpRequested = true;
      return result;
    }
    if (arg == "--version") {
      result.versionRequested = true;
      return result;
    }
    std::string name, value;
    bool hasValue = false;
    if (arg.rfind("--", 0) == 0) {
      name = arg.substr(2);
      size_t eq = name.find('=');
      if (eq != std::string::npos) {
        value = name.substr(eq + 1);
        name.resize(eq);
        hasValue = true;
      }
      std::replace(name.begin(), name.end(), '_', '-');
    } else if (arg == "-m") {
      name = "module";
    } else if (arg.rfind("-n", 0) == 0) {
      name = "nproc-per-node";
      if (arg.size() > 2) {
        value = arg.substr(arg[2] == '=' ? 3 : 2);
        hasValue = true;
      }
    } else if (arg.size() > 1 && arg[0] == '-') {
      result.error = "unknown option " + arg;
      return result;
    } else {
      break;  // the program
    }
    if (!hasValue) {
      bool* flag = name == "standalone"     ? &o.standalone
                   : name == "no-python"    ? &o.noPython
                   : name == "module"       ? &o.module
                   : name == "torch-launch" ? &o.torchLaunch
                   : name == "use-env"      ? &o.useEnv
                   : name == "elastic"      ? &o.elastic
                                            : nullptr;
      if (flag != nullptr) {
        *flag = true;
        continue;
      }
      if (name == "no-prefix") {
        o.prefix = PrefixMode::kNone;
        continue;
      }
      if (name == "no-agent-store") {
        o.agentStore = false;
        continue;
      }
    }
    if (!takesValue(name)) {
      result.error = "unknown option " + arg;
      return result;
    }
    if (!hasValue) {
      if (i + 1 >= argc) {
        result.error = "option " + arg + " wants a value";
        return result;
      }
      value = argv[++i];
    }
    result.error = applyValue(name, value, o);
    if (!result.error.empty()) return result;
  }
  for (; i < argc; ++i) o.command.emplace_back(argv[i]);
  if (o.standalone) {  // as torchrun: one node, whatever --nnodes said
    o.nnodes = 1;
    o.nodeRank = 0;
    o.masterAddr = "127.0.0.1";
    o.masterPort = -1;
  }

  if (o.nprocPerNode == 0) {
    result.error = "--nproc-per-node is required";
  } else if (o.nodeRank >= o.nnodes) {
    result.error = "--node-rank " + std::to_string(o.nodeRank) + " is not below --nnodes " +
                   std::to_string(o.nnodes);
  } else if (static_cast<long>(o.nnodes) * o.nprocPerNode > (1L << 24)) {
    result.error = "world size nnodes*nproc-per-node is too large";
  } else if (o.command.empty()) {
    result.error = "no program given";
  } else if (o.noPython && o.module) {
    result.error = "--no-python and --module exclude each other";
  } else if (o.elastic && !o.agentStore) {
    result.error =
        "--elastic needs gyrerun's store (without --no-agent-store): a store served by rank "
        "0's process would be gone with it, and the survivors meet the restarted rank there";
  } else if (!o.agentStore && o.storePort > 0) {
    result.error = "--store-port and --no-agent-store exclude each other";
  } else if (o.rdzvBackend == "c10d" && o.nnodes > 1 && !o.nodeRankGiven) {
    result.error =
        "--rdzv-backend=c10d on " + std::to_string(o.nnodes) +
        " nodes needs --node-rank on each node: gyrerun numbers ranks by node (RANK = "
        "node-rank * nproc-per-node + local rank), and the node at --rdzv-endpoint is 0";
  }
  return result;
}

const char* launcherUsage() { return kUsage; }

int resolveStorePort(const LaunchOptions& options, int masterPort, std::string& error) {
  if (options.storePort > 0) return options.storePort;
  if (options.nnodes == 1) return 0;
  if (masterPort >= 65535) {
    error = "MASTER_PORT " + std::to_string(masterPort) +
            " leaves no MASTER_PORT+1 for the job's store: give --store-port on every node";
    return -1;
  }
  return masterPort + 1;
}

int resolveMasterPort(const LaunchOptions& options, std::string& error) {
  if (options.masterPort > 0) return options.masterPort;
  // Several nodes cannot agree on a port picked locally, so they use torchrun's default.
  if (options.nnodes > 1) return kTorchDefaultPort;
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    error = std::string("socket: ") + std::strerror(errno);
    return -1;
  }
  // Any address rather than 127.0.0.1: the port must also be free where a --master-addr
  // other than loopback points. Between close() and rank 0's bind another process could
  // take it, but the kernel picks such ports at random over the ephemeral range (about
  // 28k ports), so back-to-back and concurrent jobs almost never get the same one.
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  int port = -1;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    error = std::string("cannot find a free port: ") + std::strerror(errno);
  } else {
    port = ntohs(addr.sin_port);
  }
  ::close(fd);
  return port;
}

}  // namespace gyre::tools
