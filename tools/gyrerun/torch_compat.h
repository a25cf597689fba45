// The parts of torchrun's and torch.distributed.launch's command lines that need more than
// a number: --nproc-per-node=auto|cpu|gpu, --nnodes=MIN:MAX, --rdzv-endpoint=HOST[:PORT],
// how a Python script or module becomes the command (torchrun runs `python -u script`),
// and the OMP_NUM_THREADS default with the notice torchrun prints.
//
// Contract: plain functions; countGpus() and countCpus() query the OS (device nodes,
// affinity), nothing else has side effects except applyOmpDefault (setenv + notice).
// No threads.
#pragma once

#include <string>
#include <vector>

#include "tools/gyrerun/launcher_options.h"

namespace gyre::tools {

// GPUs this process may use: CUDA_VISIBLE_DEVICES's entries when set (an empty value or
// "-1" hides them all), else the /dev/nvidiaN device nodes.
int countGpus();
// CPUs this process may run on (its affinity mask), as torchrun's os.cpu_count() would
// count them inside a container's cpuset.
int countCpus();

// "4", "auto" (GPUs if any, else CPUs), "cpu", "gpu" (an error if there are none).
// Returns "" and sets `count`, or an error message.
std::string parseNprocPerNode(const std::string& value, int& count);

// "2" or "2:2"; "1:4" is an error: gyre jobs have a fixed size.
std::string parseNnodes(const std::string& value, int& nnodes);

// "host", "host:port", "[v6addr]:port" (torchrun's default rendezvous port 29400).
std::string parseRdzvEndpoint(const std::string& value, std::string& host, int& port);

// The argv to exec for local rank `localRank`: the command, run with `python3 -u` when it
// is a .py script (unless --no-python) or a module (-m), plus `--local_rank=N` at the end
// in torch.distributed.launch mode without --use-env.
std::vector<std::string> rankCommand(const LaunchOptions& options, int localRank);

// With several ranks per node and OMP_NUM_THREADS unset, sets it to 1 for the ranks and
// prints torchrun's notice on stderr.
void applyOmpDefault(const LaunchOptions& options);

// A random run id for --standalone (torchrun makes a uuid4).
std::string randomRunId();

}  // namespace gyre::tools
