// TransportOptions: the settings of the pipes (transport/), from GYRE_* variables that
// Options::fromEnvironment() (ring/options.cc) parses; the transports take this part of a
// communicator's Options (SetupEnv::options).
#pragma once

#include <cstddef>
#include <string>

#include "base/export.h"

namespace gyre {

enum class TransportKind { kAuto, kTcp, kShm, kRdma };

struct TransportOptions {
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
  // GYRE_ENCRYPT=1: AES-256-GCM on every tcp pipe (needs a secret; docs/security.md).
  bool encrypt = false;

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
};

// The slot of a communicator's pipes: TransportOptions::slotBytes when set; else
// kTcpSlotBytes when every pipe between any two of its ranks is tcp
// (TransportPlan::allTcp), kSlotBytes if not.
inline size_t slotBytesFor(const TransportOptions& options, bool allTcp) {
  if (options.slotBytes) return options.slotBytes;
  return allTcp ? TransportOptions::kTcpSlotBytes : TransportOptions::kSlotBytes;
}

// The GYRE_TRANSPORT spelling of `kind`: "auto", "tcp", "shm", "rdma".
GYRE_API const char* transportName(TransportKind kind);

}  // namespace gyre
