// Options: every GYRE_* environment variable, read in this one place.
//
// Contract: `Options::fromEnvironment()` parses the variables and throws
// gyre::Error(kInvalidArgument) naming the variable for a malformed value; nothing
// else in gyre calls getenv for a GYRE_* name. A Communicator copies the Options it
// is built with, so tests can override fields without touching the environment.
// `globalOptions()` is the environment parsed once (thread-safe static init); the
// logger uses it. docs/configuration.md's table lists the same variables; keep them in sync.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "base/export.h"
#include "base/log.h"

namespace gyre {

enum class TransportKind { kAuto, kTcp, kShm, kRdma };
enum class ThreadPriority { kAuto, kRealtime, kNice, kNormal };
enum class CpuBinding { kNone, kCore };
// The all-reduce algorithms, as GYRE_ALGO names them and as the schedules run them. kAuto
// is only a setting (the cost model of collectives/algorithm_choice.h picks); a chosen
// algorithm never is. The value travels in every slice's Tag (0 there: no algorithm), so
// append only.
enum class AllReduceAlgo : uint8_t { kAuto = 0, kRing = 1, kTree = 2, kRecursiveDoubling = 3,
                                    kHierarchical = 4 };
// Every AllReduceAlgo with its GYRE_ALGO spelling (algoName, parseAlgo and their errors).
struct AlgoSpelling {
  AllReduceAlgo algo;
  const char* name;
};
inline constexpr AlgoSpelling kAlgoSpellings[] = {
    {AllReduceAlgo::kAuto, "auto"}, {AllReduceAlgo::kRing, "ring"}, {AllReduceAlgo::kTree, "tree"},
    {AllReduceAlgo::kRecursiveDoubling, "rd"}, {AllReduceAlgo::kHierarchical, "hier"}};

struct GYRE_API Options {
  LogLevel logLevel = LogLevel::kWarn;                 // GYRE_DEBUG=WARN|INFO|TRACE
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
  // GYRE_SLOT_BYTES (K/M suffixes): the bytes of one pipe slot, every pipe alike (each
  // rank must cut a call into the same slices). 0, the default: chosen at creation by
  // slotBytesFor() below from what the pipes are.
  size_t slotBytes = 0;
  size_t slots = 4;                                    // GYRE_SLOTS per pipe
  // GYRE_NSOCKS: TCP connections per directed tcp pipe, slices spread round-robin over
  // them (transport/tcp/tcp_striped_pipe.h), as NCCL_NSOCKS_PERTHREAD. 1 measured best
  // on veth and loopback (docs/tcp_links.md, "Several connections per pipe").
  int nsocks = 1;
  // GYRE_TCP_CONGESTION: the TCP congestion control of every tcp pipe's connections
  // ("cubic", "bbr", any name the kernel lists in tcp_available_congestion_control);
  // empty, the default: the host's (net.ipv4.tcp_congestion_control). A job that keeps
  // its links full for minutes loses 1.5-4% of them to BBR's periodic probing of the
  // round-trip time (docs/tcp_links.md, "Congestion control"). Per rank; ranks may differ.
  std::string tcpCongestion;
  TransportKind transport = TransportKind::kAuto;      // GYRE_TRANSPORT=auto|tcp|shm|rdma
  // GYRE_IB_HCA: which RDMA devices and ports to use, NCCL_IB_HCA's syntax
  // ("mlx5_0:1,mlx5_1" prefixes, "^" excludes, "=" exact; transport/rdma/hca_filter.h).
  std::string ibHca;
  int ibGidIndex = -1;  // GYRE_IB_GID_INDEX: the GID table entry (-1: first RoCE v2 IPv4)
  AllReduceAlgo algo = AllReduceAlgo::kAuto;           // GYRE_ALGO=auto|ring|tree|rd|hier
  std::string socketIfname;                            // GYRE_SOCKET_IFNAME (NCCL syntax)
  // The job's shared secret: GYRE_TOKEN, or the contents of GYRE_TOKEN_FILE (a file only
  // its owner may read; base/secret.h). Empty: no authentication (anyone who reaches the
  // store's port may join; logged once at INFO). Never printed, never sent.
  std::string token;
  // GYRE_ENCRYPT=1: AES-256-GCM on every tcp pipe (needs a secret; docs/security.md).
  bool encrypt = false;
  std::string hostId;                                  // GYRE_HOST_ID (overrides host identity)
  // GYRE_LINK_PROBE=0|1: on >= 2 hosts with GYRE_ALGO=auto, measure the inter-host link
  // at creation (ring/host_link_calibration.h) instead of using fixed constants.
  bool linkProbe = true;
  // GYRE_NICS_PER_HOST: how many NICs a host's ranks spread their inter-host traffic over
  // (1..1024; local rank i uses NIC i mod N). The cost model charges each NIC the bytes of
  // the ranks on it: 1 (the default) is one shared NIC per host; a GPU server with a NIC
  // per GPU sets it to its ranks per host, where rd and hier cross hosts 8 times wider
  // (docs/simulator.md, "Auto's choice at scale"). gyre cannot see this itself: the link probe
  // measures one pair of leaders. Equal on every rank.
  int nicsPerHost = 1;
  // GYRE_REDUCE_ISA=auto|portable|avx2|avx512: forces the host reduction's ISA (tests and
  // debugging). The spelling is checked here; whether this CPU runs it, by
  // host_kernels/reduce.cc, which the communicator asks at creation.
  std::string reduceIsa;
  // GYRE_SPIN_US: how long a waiter polls, yielding its core between polls, before it
  // sleeps: a yield is cheaper than a sleep and wake-up, and with more ranks than cores it
  // lets the awaited rank run (transport/spin_pause.h says why and when it backs off;
  // docs/benchmarks.md has the figures).
  std::chrono::microseconds spin{20};
  // GYRE_SYNC_PRIORITY=auto|realtime|nice|normal: the scheduling of GradSync's all-reduce
  // worker. auto: SCHED_FIFO priority 1 where the process may (root, CAP_SYS_NICE or
  // RLIMIT_RTPRIO), else nice -10 where it may, else unchanged. With more ranks than
  // cores the worker must preempt backward compute at once to overlap with it
  // (docs/training.md, "GradSync and DistributedSampler"). Its waits sleep after
  // GYRE_SPIN_US, so it never holds a core for long; the kernel's RT throttling bounds it
  // besides.
  ThreadPriority syncPriority = ThreadPriority::kAuto;
  // GYRE_BIND=none|core: core moves this process, all its threads, onto one of the CPUs
  // it may use, by its index among its host's ranks, when its first communicator is
  // created (base/cpu_binding.h; the rule of `gyrerun --bind core`, for launchers that place
  // nothing: torchrun, mp.spawn). Later communicators of the process leave it where it is.
  CpuBinding bind = CpuBinding::kNone;
  // GYRE_TRACE_BUFFER: operations each communicator's flight recorder keeps
  // (collectives/flight_recorder.h; rounded up to a power of two); 0 turns it off.
  size_t traceBuffer = 64;
  // GYRE_TRACE_DIR: where the recorder is dumped, one file per rank and communicator, on a
  // failure, a stall report, SIGUSR1 or Communicator::dumpTrace(); unset: no automatic
  // dumps (docs/observability.md).
  std::string traceDir;
  // GYRE_TIMELINE=path: Chrome trace events of this process (base/timeline.h), "{rank}"
  // in the path replaced by the rank (else ".rank<R>" added); unset: none.
  std::string timeline;

  // The least slot any pipe gets: slotBytes where set, else the smaller default. What a
  // call must fit to travel as one slice whatever the pipes (recursive doubling's test).
  size_t smallestSlotBytes() const { return slotBytes ? slotBytes : kSlotBytes; }

  // The default slot: a pipe's K slots of 128 KiB stay in the L2 cache while the
  // neighbour consumes them (docs/DESIGN.md, "The pipe of slots").
  static constexpr size_t kSlotBytes = 128 * 1024;
  // Where every pipe is tcp: each tcp slice wakes the receiving thread, and fewer wake-ups
  // keep a link full beside busy cores (docs/benchmarks.md's slots table, from
  // bench/results/peers_netns_4x1_2gbit_fair/). Not where some pipes are shm or rdma:
  // those would then cut 512 KiB slices too.
  static constexpr size_t kTcpSlotBytes = 512 * 1024;

  static Options fromEnvironment();
};

// The slot of a communicator's pipes: Options::slotBytes when set; else kTcpSlotBytes when
// every pipe between any two of its ranks is tcp (TransportPlan::allTcp), kSlotBytes if not.
inline size_t slotBytesFor(const Options& options, bool allTcp) {
  if (options.slotBytes) return options.slotBytes;
  return allTcp ? Options::kTcpSlotBytes : Options::kSlotBytes;
}

GYRE_API const Options& globalOptions();

// GYRE_REDUCE_ISA alone, checked ("" when unset): for the host reduction, which must see
// a bad value (globalOptions() falls back to defaults instead).
std::string reduceIsaFromEnvironment();

// The job's secret alone, as Options::token holds it: GYRE_TOKEN, or the contents of
// GYRE_TOKEN_FILE ("" when neither is set), with fromEnvironment()'s errors for these two
// (both set, a file base/secret.h refuses, over kMaxSecretBytes). For a program that needs
// only the secret (gyre-store), so that an unrelated bad GYRE_* value does not stop it.
std::string secretFromEnvironment();

// The GYRE_ALGO spelling of `algo`: "auto", "ring", "tree", "rd", "hier"; and back (false for any
// other text).
GYRE_API const char* algoName(AllReduceAlgo algo);
GYRE_API bool parseAlgo(const std::string& text, AllReduceAlgo& algo);

// The GYRE_TRANSPORT spelling of `kind`: "auto", "tcp", "shm", "rdma".
GYRE_API const char* transportName(TransportKind kind);

// "512K" -> 524288; plain numbers are bytes; K/M/G are powers of 2. Throws
// kInvalidArgument naming `what` for anything else.
GYRE_API size_t parseByteSize(const std::string& text, const char* what);

}  // namespace gyre
