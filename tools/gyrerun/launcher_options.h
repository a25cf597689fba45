// LaunchOptions: gyrerun's command line, parsed (torchrun's flags and defaults).
//
// Contract: parseLaunchOptions() reads argv without side effects and returns either the
// options or an error message for the user (or help requested). Options may be given as
// `--opt value` or `--opt=value`, with `-` or `_` inside names (torchrun accepts both);
// `-n N` (or `-nN`) is --nproc-per-node. torchrun's and torch.distributed.launch's flags
// are accepted with their meaning (tools/gyrerun/torch_compat.h for the details). The first word that is not an option ends the
// options: it is the program and the rest are its arguments, untouched (so the
// program's own `-n` is never taken for ours). `--` also ends the options.
// resolveMasterPort() binds a socket; --nproc-per-node=auto|cpu|gpu counts this
// machine's GPUs and CPUs while parsing; nothing else here touches the OS.
// Plain data; no threads.
#pragma once

#include <string>
#include <vector>

namespace gyre::tools {

// How children's output lines are labelled on gyrerun's own stdout/stderr.
enum class PrefixMode {
  kStderr,  // default: "[rank R] " on stderr only; stdout passes through unchanged, so
            // table parsers (the peer harness, nccl-tests scripts) read it as is
  kAll,     // stdout lines too
  kNone,    // neither
};

// Where each rank may run.
enum class BindMode {
  kNone,  // default (as torchrun): the kernel places and migrates ranks freely
  kCore,  // local rank r is pinned to the (r mod k)-th of the k CPUs gyrerun may use
};

struct LaunchOptions {
  int nprocPerNode = 0;       // required, >= 1
  int nnodes = 1;             // >= 1
  int nodeRank = 0;           // 0 <= nodeRank < nnodes
  bool nodeRankGiven = false;
  std::string masterAddr;     // empty: 127.0.0.1
  int masterPort = -1;        // -1: not given (see resolveMasterPort)
  // gyre's store: node 0's gyrerun serves it for the whole run (tools/gyrerun/agent_store.h)
  // at --store-port (-1: see resolveStorePort); --no-agent-store: rank 0 serves it instead.
  bool agentStore = true;
  int storePort = -1;
  // torchrun's: --standalone (one node, a free local port, a random run id),
  // --max-restarts (restart the whole local group after a failure, up to N times),
  // --monitor-interval (accepted; gyrerun learns of exits at once through SIGCHLD),
  // --rdzv-backend c10d|static and --rdzv-endpoint (rank 0's store there), --rdzv-id
  // (TORCHELASTIC_RUN_ID), --role (ROLE_NAME), --no-python, -m/--module.
  bool standalone = false;
  int maxRestarts = 0;
  // --elastic: a failed rank does not stop the others; it is restarted alone (up to
  // --max-restarts times on this node) as a newcomer the survivors grow back in
  // (GYRE_ELASTIC=1 on every rank, GYRE_ELASTIC_NEWCOMER=1 on a restarted one).
  bool elastic = false;
  double monitorInterval = 0.1;
  std::string rdzvBackend = "static";
  std::string rdzvId = "none";
  std::string role = "default";
  bool noPython = false;
  bool module = false;
  // torch.distributed.launch (--torch-launch): `--local_rank=N` is appended to the
  // program's arguments unless --use-env is given.
  bool torchLaunch = false;
  bool useEnv = false;
  double graceSeconds = 3.0;  // after a rank fails, before SIGTERM to the others
  PrefixMode prefix = PrefixMode::kStderr;
  BindMode bind = BindMode::kNone;
  std::vector<std::string> command;  // program and its arguments; non-empty when parsed

  int worldSize() const { return nnodes * nprocPerNode; }
  int globalRank(int localRank) const { return nodeRank * nprocPerNode + localRank; }
};

struct ParseResult {
  LaunchOptions options;
  bool helpRequested = false;
  bool versionRequested = false;  // --version
  std::string error;  // non-empty: the command line is wrong; print it with the usage
};

ParseResult parseLaunchOptions(int argc, const char* const* argv);

const char* launcherUsage();

// The port for MASTER_PORT: the given one; 29500 (torchrun's default) when several nodes
// must agree on it without being told; on a single node a port the kernel reports free
// (bind port 0, read it back, close), so that back-to-back and concurrent jobs on one
// machine do not collide on a fixed port. Returns -1 and sets `error` if no port can be
// found.
int resolveMasterPort(const LaunchOptions& options, std::string& error);

// The port of gyre's store that node 0's gyrerun serves: --store-port when given; on one
// node 0, for a free port the kernel picks when the store's socket is bound; with several
// nodes, which must agree on it without being told, MASTER_PORT+1 (`masterPort`, resolved).
// Returns -1 and sets `error` when there is no such port.
int resolveStorePort(const LaunchOptions& options, int masterPort, std::string& error);

}  // namespace gyre::tools
