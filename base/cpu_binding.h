// Placing a rank's process on one CPU: `gyrerun --bind core` before it starts a rank, and
// GYRE_BIND=core inside the library, for the launchers that place nothing (torchrun,
// mp.spawn), once the communicator knows which of its host's ranks this process is.
//
// The rule (cpuIndexFor): of the k CPUs the process may use, local rank r of n gets the
// r-th when every local rank has one of its own (n <= k), else the (r * k / n)-th, so
// that consecutive local ranks, neighbours on the ring, share a CPU and hand their slots
// over in its cache: 4 ranks on 2 CPUs as 0 0 1 1 (docs/benchmarks.md, "Shared memory at
// 1 MiB against Open MPI, and ranks bound to CPUs"). Every rank of a host must be allowed the same
// CPUs (true under torchrun and mp.spawn); under a launcher that binds (Slurm's
// --cpu-bind, mpirun --bind-to) leave it to the launcher.
//
// bindProcessToCpu moves every thread the process has now (/proc/self/task) onto the
// CPU; threads started later inherit it from the thread that starts them, so data-loader
// workers forked afterwards share the rank's one CPU.
//
// Contract: cpuIndexFor is a pure function; chooseCpu reads this thread's allowed set;
// bindProcessToCpu is safe to call from any thread, and a thread that ends while it runs
// is skipped. Errors come back as a false return and a message, never thrown: a rank
// that cannot be bound still runs.
#pragma once

#include <string>

namespace gyre {

// Which of `cpuCount` allowed CPUs local rank `localRank` of `localSize` takes (an index
// into the allowed set, 0-based). Requires 0 <= localRank < localSize and cpuCount >= 1.
int cpuIndexFor(int localRank, int localSize, int cpuCount);

// The CPU number (as sched_setaffinity counts) for this local rank, from the set this
// thread may run on. False, with `error` saying why, when the set cannot be read.
bool chooseCpu(int localRank, int localSize, int& cpu, std::string& error);

// Every current thread of this process onto `cpu` alone. False, with `error` naming the
// thread and the errno, when one of them refuses (the others stay moved).
bool bindProcessToCpu(int cpu, std::string& error);

}  // namespace gyre
