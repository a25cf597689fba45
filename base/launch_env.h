// LaunchEnv: which launcher started this process and what it says about the job (rank,
// world size, local rank and size, rank 0's address and port), read in this one place.
//
// Contract: nothing else in gyre reads RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT or the OMPI_* / SLURM_* variables. The launchers, first match
// wins (so `srun torchrun ...` and `mpirun` inside a Slurm allocation do the right thing):
//   torchrun / gyrerun / torch.distributed.launch: RANK and WORLD_SIZE (LOCAL_RANK,
//     LOCAL_WORLD_SIZE when set);
//   Open MPI (mpirun): OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE;
//   Slurm (srun): SLURM_PROCID, SLURM_STEP_NUM_TASKS (else SLURM_NTASKS), SLURM_LOCALID,
//     and this node's entry of SLURM_STEP_TASKS_PER_NODE (else SLURM_TASKS_PER_NODE);
//     only in a task of a step (SLURM_STEP_ID set): a batch script itself is no launch,
//     and `note` says so.
// MASTER_ADDR and MASTER_PORT win under every launcher. Without them:
//   Open MPI: the address is mpirun's host, from OMPI_MCA_orte_hnp_uri (the first IPv4
//     address in it that is not loopback; mpirun lists its host's interfaces there), so
//     rank 0 must run on mpirun's host (the default mapping puts it there when mpirun
//     runs on the first host); the port is 10000 + (Open MPI job family % 20000), the job
//     family being the upper 16 bits of the job id in that URI.
//   Slurm: the address is the first host of SLURM_STEP_NODELIST (else SLURM_JOB_NODELIST,
//     SLURM_NODELIST), where srun places task 0; the port is 15000 + the last four digits
//     of SLURM_JOB_ID (PyTorch Lightning's rule), so every task of a job agrees on it.
//   torchrun, or nothing known: 127.0.0.1 and 29500 (torch's defaults).
// A malformed or inconsistent value throws gyre::Error(kInvalidArgument) naming the
// variable and the launcher. Pure reads; thread-safe.
#pragma once

#include <functional>
#include <string>

namespace gyre {

enum class Launcher { kNone, kTorchrun, kOpenMpi, kSlurm };

// "torchrun" (for torchrun, gyrerun and torch.distributed.launch), "Open MPI", "Slurm",
// "no launcher".
const char* launcherName(Launcher launcher);

struct LaunchEnv {
  Launcher launcher = Launcher::kNone;
  int rank = -1;       // -1 only with kNone
  int size = -1;       // >= 1 unless kNone
  int localRank = -1;  // -1: the launcher did not say
  int localSize = -1;  // -1: the launcher did not say
  std::string masterAddr = "127.0.0.1";
  std::string masterAddrFrom = "default";  // the variable it came from, or "default"
  int masterPort = 29500;
  std::string masterPortFrom = "default";  // a variable, or how it was derived
  // With kNone: why launcher variables that are present were not taken ("" if none).
  std::string note;
  // gyrerun --elastic (docs/launchers.md): GYRE_ELASTIC=1 on every rank of the job, and
  // GYRE_ELASTIC_NEWCOMER=1 on a rank gyrerun restarted after it failed, which joins the
  // running ranks' next grow instead of a creation (Communicator::fromEnvironment; its
  // rank comes from that grow, not from RANK). 0 or unset: false; another value throws.
  bool elastic = false;
  bool newcomer = false;

  // "Open MPI rank 1 of 4 (local 1 of 2), rank 0's store at 10.0.0.1:12345
  // (address from OMPI_MCA_orte_hnp_uri, port from the Open MPI job id)".
  std::string describe() const;
};

// Looks a variable up: nullptr or "" when unset.
using EnvLookup = std::function<const char*(const char* name)>;

LaunchEnv resolveLaunchEnv(const EnvLookup& lookup);
LaunchEnv launchEnvFromProcess();  // resolveLaunchEnv over getenv

// Where a job's gyre store is served, for the endpoint host:port a caller got from
// resolveLaunchEnv() (ring/join_store.cc acts on it). First match wins:
//   GYRE_AGENT_STORE=HOST:PORT ("[v6addr]:PORT" too): the launcher serves it (gyrerun on
//     node 0 runs gyre-store for the whole job and sets it): every rank, 0 included, is a
//     client, and the keys go under "/worker/attempt_<TORCHELASTIC_RESTART_COUNT>" (0 when
//     unset), as torch's workers do on torchrun's agent store, so that a restarted group
//     never reads an earlier attempt's keys.
//   TORCHELASTIC_USE_AGENT_STORE=True (torchrun): torchrun's agent holds MASTER_PORT with a
//     torch TCPStore, whose protocol gyre does not speak, so rank 0 serves gyre's store at
//     MASTER_PORT + 1 (an error when MASTER_PORT is 65535).
//   otherwise rank 0 serves it at host:port.
// Both variables apply only when host:port is the launcher's MASTER_ADDR:MASTER_PORT as
// resolveLaunchEnv() gives it (torch's rule: the agent promises a store at its own
// endpoint, not at any other), so a store opened at an address of the program's own is
// never redirected. A malformed GYRE_AGENT_STORE or TORCHELASTIC_RESTART_COUNT throws
// kInvalidArgument naming it.
enum class StoreServer {
  kRankZero,             // rank 0, at host:port
  kRankZeroBesideAgent,  // rank 0, at MASTER_PORT+1: torchrun's own store holds MASTER_PORT
  kAgent,                // the launcher (GYRE_AGENT_STORE): every rank is a client
};

struct StoreLocation {
  StoreServer server = StoreServer::kRankZero;
  std::string host;
  int port = 0;
  // For messages: "MASTER_ADDR:MASTER_PORT", "GYRE_AGENT_STORE", "MASTER_PORT+1 (...)".
  std::string from = "MASTER_ADDR:MASTER_PORT";
  std::string prefix;  // under which the keys go on an agent store; "" otherwise
};

StoreLocation resolveStoreLocation(const EnvLookup& lookup, const std::string& host, int port);
StoreLocation storeLocationFromProcess(const std::string& host, int port);  // over getenv

// Rank 0's address as above, for callers that only need a route (never throws; a
// malformed launcher variable gives 127.0.0.1 here and an error from the full resolve).
std::string masterAddressFromEnvironment();

// The launcher's rank of this process, -1 when unknown or malformed (never throws): for
// error messages printed before a communicator exists.
int launcherRank();

// Whether an error message already starts by naming its rank ("rank 3: ..."), as gyre's
// errors from a communicator (or its creation) do: programs then print it as it is
// instead of prefixing the launcher's rank a second time.
bool namesItsRank(const char* message);

}  // namespace gyre
