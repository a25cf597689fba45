// Which ranks share a host: the communicator's two-level shape, for the hierarchical
// all-reduce (collectives/hierarchical_allreduce.h) and the cost model that chooses it
// (collectives/topology_choice.h).
//
// Built from the host identities every rank published at bootstrap (ring/bootstrap:
// PipeSet::hostIds, the same vector on every rank), so every rank computes the same
// topology. Hosts are numbered in the order of their lowest rank; a host's ranks are
// its "local ranks", in ascending global rank order (local index 0 is the lowest).
//
// Contract: a plain value, immutable after construction; thread-safe to read.
#pragma once

#include <string>
#include <vector>

namespace gyre {

struct HostTopology {
  std::vector<std::vector<int>> hosts;  // the ranks of each host, ascending
  std::vector<int> hostOf;              // by rank: its host's index
  std::vector<int> localIndexOf;        // by rank: its position among its host's ranks

  static HostTopology fromHostIds(const std::vector<std::string>& hostIds);

  int size() const { return static_cast<int>(hostOf.size()); }
  int hostCount() const { return static_cast<int>(hosts.size()); }
  // Every host has the same number of ranks.
  bool even() const;
  // Ranks per host when even(), else 0.
  int ranksPerHost() const { return even() ? static_cast<int>(hosts[0].size()) : 0; }
  // The most ranks on one host.
  int maxRanksPerHost() const;
  // Whether a two-level schedule applies: >= 2 hosts and some host with >= 2 ranks.
  // (One rank per host is the flat ring; one host is the flat ring over shm.) Equal
  // hosts run the shard-parallel form, unequal ones the leaders-only form
  // (collectives/hierarchical_allreduce.h).
  bool hierarchical() const { return hostCount() >= 2 && maxRanksPerHost() >= 2; }
  // Whether the shard-parallel forms apply: hierarchical() and every host alike.
  bool evenHierarchical() const { return hierarchical() && even(); }
  // Why hierarchical() is false, for the log line of a forced GYRE_ALGO=hier.
  std::string whyFlat() const;
  // The lowest rank of each host (its local index 0), in host order.
  std::vector<int> leaders() const;
  // Every rank, host after host (each host's ranks ascending), starting at `first`'s
  // host with `first` and continuing round its host: the chain the two-level broadcast
  // and reduce follow, crossing each host boundary once.
  std::vector<int> hostOrderFrom(int first) const;
  // The ranks with local index `localIndex`, one per host, in host order (even() only).
  std::vector<int> crossHostGroup(int localIndex) const;
  // "2 hosts x 4 ranks" or "3 hosts (2+1+1 ranks)".
  std::string describe() const;
};

}  // namespace gyre
