// Options: every GYRE_* setting of a communicator, as one struct made of each layer's own
// (BaseOptions, base/options.h; TransportOptions, transport/transport_options.h;
// CollectiveOptions, collectives/collective_options.h; RingOptions below), so a layer
// compiles against its own settings and below, and code above ring reads them all as
// `options.slots`, `options.timeout`.
//
// Contract: `Options::fromEnvironment()` parses every variable, here in one pass, and
// throws gyre::Error(kInvalidArgument) naming the variable for a malformed value. A
// Communicator copies the Options it is built with, so tests can override fields without
// touching the environment. docs/configuration.md's table lists the same variables; keep
// them in sync.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

#include "base/export.h"
#include "base/options.h"
#include "collectives/collective_options.h"

namespace gyre {

enum class ThreadPriority { kAuto, kRealtime, kNice, kNormal };
enum class CpuBinding { kNone, kCore };

// GYRE_CONNECT: which pipes creation connects (ring/lazy_connector.h, docs/DESIGN.md).
enum class ConnectMode { kLazy, kEager };

// The settings ring/ reads (creation, the join, the waits, the flight recorder's files),
// and GYRE_SYNC_PRIORITY, which GradSync (ddp/) reads from its communicator's options.
struct RingOptions {
  std::chrono::milliseconds timeout{1800 * 1000};      // GYRE_TIMEOUT (seconds, as torch)
  // GYRE_JOIN_TIMEOUT (seconds): how long a rank waits, at creation, for the store and for
  // the other ranks to join; minutes, as torch's rendezvous (300 s), not GYRE_TIMEOUT's
  // half hour, since a rank that never comes is a mistake to report, not a slow step.
  std::chrono::milliseconds joinTimeout{300 * 1000};
  // GYRE_JOIN_PROGRESS=<first>[,<every>] (seconds, decimals allowed): a waiting rank says
  // on stderr how many have joined after <first>, then every <every>.
  std::chrono::milliseconds joinProgressFirst{5 * 1000};
  std::chrono::milliseconds joinProgressEvery{30 * 1000};
  // GYRE_STALL_WARN (seconds, decimals allowed): a collective that has waited this long
  // logs once which rank it waits for and which rank the chain of waits leads to.
  std::chrono::milliseconds stallWarn{60 * 1000};
  std::string socketIfname;                            // GYRE_SOCKET_IFNAME (NCCL syntax)
  // The job's shared secret: GYRE_TOKEN, or the contents of GYRE_TOKEN_FILE (a file only
  // its owner may read; base/secret.h). Empty: no authentication (anyone who reaches the
  // store's port may join; logged once at INFO). Never printed, never sent.
  std::string token;
  std::string hostId;                                  // GYRE_HOST_ID (overrides host identity)
  // GYRE_LINK_PROBE=0|1: on >= 2 hosts with GYRE_ALGO=auto, measure the inter-host link
  // at creation (ring/host_link_calibration.h) instead of using fixed constants.
  bool linkProbe = true;
  // GYRE_SPIN_US: how long a waiter polls, yielding its core between polls, before it
  // sleeps: a yield is cheaper than a sleep and wake-up, and with more ranks than cores it
  // lets the awaited rank run (transport/spin_pause.h says why and when it backs off;
  // docs/benchmarks.md has the figures).
  std::chrono::microseconds spin{20};
  // GYRE_BIND=none|core: core moves this process, all its threads, onto one of the CPUs
  // it may use, by its index among its host's ranks, when its first communicator is
  // created (base/cpu_binding.h; the rule of `gyrerun --bind core`, for launchers that place
  // nothing: torchrun, mp.spawn). Later communicators of the process leave it where it is.
  CpuBinding bind = CpuBinding::kNone;
  // GYRE_CONNECT=lazy|eager: lazy, creation connects only the pipes the default schedules
  // use (collectives/eager_peers.h) and any other pair connects the first time an
  // operation needs it; eager, every pair at creation (n - 1 pipe pairs per rank).
  ConnectMode connect = ConnectMode::kLazy;
  // GYRE_TRACE_BUFFER: operations each communicator's flight recorder keeps
  // (collectives/flight_recorder.h; rounded up to a power of two); 0 turns it off.
  size_t traceBuffer = 64;
  // GYRE_TRACE_DIR: where the recorder is dumped, one file per rank and communicator, on a
  // failure, a stall report, SIGUSR1 or Communicator::dumpTrace(); unset: no automatic
  // dumps (docs/observability.md).
  std::string traceDir;
  // GYRE_SYNC_PRIORITY=auto|realtime|nice|normal: the scheduling of GradSync's all-reduce
  // worker (ddp/, above ring: it has no settings of its own to parse). auto: SCHED_FIFO
  // priority 1 where the process may (root, CAP_SYS_NICE or RLIMIT_RTPRIO), else nice -10
  // where it may, else unchanged. With more ranks than cores the worker must preempt
  // backward compute at once to overlap with it (docs/training.md, "GradSync and
  // DistributedSampler"). Its waits sleep after GYRE_SPIN_US, so it never holds a core for
  // long; the kernel's RT throttling bounds it besides.
  ThreadPriority syncPriority = ThreadPriority::kAuto;
  // GYRE_CUDA_IPC=0|1: 0 keeps device buffers on the staged path even where every rank is
  // on one host (cuda/, above ring, reads it here; docs/gpu.md).
  bool cudaIpc = true;
};

struct GYRE_API Options : BaseOptions, CollectiveOptions, RingOptions {
  static Options fromEnvironment();
};

}  // namespace gyre
