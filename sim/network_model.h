// The simulated cluster's network and what each slice costs: when a slice posted at
// virtual time t by one rank is in its receiver's slot, and how long the sender and
// receiver are busy with it. Times in microseconds, rates in bytes per microsecond
// (= MB/s).
//
// The cluster: `hosts` hosts (hostSizes: ranks per host, in rank order: host 0 holds
// ranks 0..hostSizes[0]-1). Between hosts each rank has its own NIC (nicPerRank, as a
// GPU server's one NIC per GPU) or the host's ranks share one (a plain server, and the
// tbf-shaped veth of tools/netns_bench.sh); a NIC is full duplex: its transmit and
// receive sides are two resources. Hosts sit under leaf switches of hostsPerLeaf hosts
// (0: one switch, no oversubscription); a leaf's uplink carries (hostsPerLeaf x NICs per
// host x link rate) / oversub each way, shared by every slice that leaves or enters the
// leaf. Inside a host the slots are shared memory: the sender's CPU copies at
// shmBytesPerUs, and all ranks of a host share its memory bus (hostMemBytesPerUs, 0:
// unlimited).
//
// Inside a host a slice costs its sender a copy at shmBytesPerUs only when it is copied
// from a user buffer into the slot (a plain send); slices that a reduction or a copy
// wrote straight into the slot cost that pass once, at the receive it came from.
// A tcp slice of b bytes occupies the wire for (b + kFrameOverhead) / tcpPayloadShare
// bytes (the TCP/IP/Ethernet headers of each 1514-byte frame: 1448/1514 by default), at
// the link rate, on the sender's NIC, the uplinks it crosses and the receiver's NIC, in
// that order, each a FIFO claimed in virtual-time order (the scheduler's; with a token
// bucket, the bytes its tokens cover pass at the peak rate); it arrives
// linkAlphaUs after its last byte left the receiving NIC. Every slice costs each end
// sliceOverheadUs of CPU (the system call, the tag check, the wake-up: what the pipes
// pay per slot), and the receiver's CPU reads it at cpuBytesPerUs (a reduction or a
// copy out of the slot). A freed slot is back at the sender linkAlphaUs (tcp) or
// shmAlphaUs (shm) after its release.
//
// Contract: LinkTimes is the state of one run (resource queues); NetworkModel is a plain
// value. Not thread-safe (one scheduler thread).
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "collectives/tuning.h"

namespace gyre::sim {

struct NetworkModel {
  std::vector<int> hostSizes{1};  // ranks per host, hosts in rank order
  bool nicPerRank = true;         // false: the ranks of a host share one NIC
  double linkBytesPerUs = 12500;  // line rate (100 Gbit/s = 12500 B/us)
  double linkAlphaUs = 10;        // one-way latency between hosts, software included
  // A token-bucket shaper on each NIC side (tc's tbf, as tools/netns_bench.sh shapes its
  // links): up to linkBurstBytes of tokens, refilled at the link rate, let bytes through
  // at linkPeakBytesPerUs (the unshaped veth) instead of the link rate. 0: no bucket (a
  // real NIC). Buckets start full (sim_world.h times the second of two calls).
  // A veth hands a whole segment to its peer by reference; the bytes' cost is the
  // sockets' copies at both ends, which sliceOverheadUs and cpuBytesPerUs charge, so
  // the veth's own rate is far above what a copy moves (docs/simulator.md).
  double linkBurstBytes = 0;
  double linkPeakBytesPerUs = 10000;
  double tcpPayloadShare = 1448.0 / 1514.0;
  int hostsPerLeaf = 0;          // 0: every host on one switch
  double oversub = 1;            // a leaf's uplink capacity = its NICs' / oversub
  // Inside a host, the cost model's shm row (collectives/tuning.h): a one-host ring then
  // predicts what the model does.
  double shmBytesPerUs = kTuning.shm.bytesPerUs;  // one rank's copy rate into a peer's slot
  double shmAlphaUs = kTuning.shm.alphaUs;  // a hand-off through shared memory (doorbell, wake-up)
  double hostMemBytesPerUs = 0;  // a host's memory bus, shared by its ranks; 0: unlimited
  double sliceOverheadUs = 1;    // CPU per slice at each end
  // The receiver's reduction or copy out of a slot: the shm row's rate too.
  double cpuBytesPerUs = kTuning.shm.bytesPerUs;

  static constexpr double kFrameOverhead = 40;  // gyre's frame header + tag per slice

  int ranks() const;
  int hosts() const { return static_cast<int>(hostSizes.size()); }
  // What gyre's link probe would measure between two hosts (collectives/link_probe.h):
  // alpha and the payload rate of one NIC.
  double probeAlphaUs() const { return linkAlphaUs + sliceOverheadUs; }
  double probeBytesPerUs() const { return linkBytesPerUs * tcpPayloadShare; }
  std::string describe() const;
};

// "100gbit", "25Gbit", "500mbit", "2.5gbit", "12500" (bytes per us) -> bytes per us.
// Throws kInvalidArgument for anything else.
double parseRate(const std::string& text);

// The resource queues of one run: when each NIC side, uplink and memory bus is free.
class LinkTimes {
 public:
  explicit LinkTimes(const NetworkModel& model);

  struct Transfer {
    double senderDone;  // the sender's CPU is free again
    double arrival;     // the slice is in the receiver's slot
  };
  // A slice of `bytes` from rank `from` to rank `to`, posted at `now`. copied: the
  // sender copies it from the user's buffer into the peer's slot (shm's postDirect);
  // else the slot was filled by the pass that produced the slice (a fused reduction or
  // copy, charged to the receive it came from) or, across hosts, the kernel copies it.
  Transfer send(int from, int to, size_t bytes, double now, bool copied);
  // CPU time the receiver spends on a slice of `bytes` (at release).
  double receiveCost(size_t bytes) const;
  // When a slot released at `now` is back at the sender.
  double creditAt(int from, int to, double now) const;
  bool sameHost(int a, int b) const { return hostOf_[a] == hostOf_[b]; }
  // Whether a slice from `from` to `to` claims a resource other ranks may claim too
  // (then the claims must happen in virtual-time order): across hosts always (the
  // receiving NIC), inside a host only with a limited memory bus.
  bool sharesResources(int from, int to) const {
    return !sameHost(from, to) || model_.hostMemBytesPerUs > 0;
  }
  void reset();

 private:
  // One NIC side: a FIFO, with a token bucket when linkBurstBytes > 0.
  struct Side {
    double freeAt = 0;
    double tokens = 0;
    double tokenTime = 0;
  };
  // The slice's pass through a NIC side: starts no earlier than `start` and ends no
  // earlier than `end` (its pass through the previous resource); returns {start, end}.
  std::pair<double, double> passNic(Side& side, double wire, double start, double end) const;
  int nic(int rank) const { return model_.nicPerRank ? rank : hostOf_[rank]; }
  int leaf(int rank) const;

  NetworkModel model_;
  std::vector<int> hostOf_;
  double uplinkBytesPerUs_;
  std::vector<Side> tx_, rx_;
  std::vector<double> upFree_, downFree_, busFree_;
};

}  // namespace gyre::sim
