#include "collectives/eager_peers.h"

#include <algorithm>

#include "collectives/double_tree.h"
#include "collectives/recursive_doubling.h"

namespace gyre {
namespace {

// The neighbours of position `me` on a ring of `members`.
void ringNeighbours(const std::vector<int>& members, int me, std::vector<int>& out) {
  const int g = static_cast<int>(members.size());
  if (g < 2) return;
  out.push_back(members[static_cast<size_t>((me + 1) % g)]);
  out.push_back(members[static_cast<size_t>((me + g - 1) % g)]);
}

// The peers rank's own schedules name (not yet made symmetric).
std::vector<int> namedPeers(int rank, const HostTopology& t, bool recursiveDoubling) {
  const int n = t.size();
  std::vector<int> peers{(rank + 1) % n, (rank + n - 1) % n};
  for (int p : doubleTreePeers(rank, n)) peers.push_back(p);
  if (recursiveDoubling) {
    for (int p : recursiveDoublingPeers(rank, n)) peers.push_back(p);
  }
  const int host = t.hostOf[static_cast<size_t>(rank)];
  const int local = t.localIndexOf[static_cast<size_t>(rank)];
  ringNeighbours(t.hosts[static_cast<size_t>(host)], local, peers);
  if (t.even() && t.hostCount() >= 2) ringNeighbours(t.crossHostGroup(local), host, peers);
  if (local == 0) ringNeighbours(t.leaders(), host, peers);
  return peers;
}

void normalize(std::vector<int>& peers, int rank) {
  std::sort(peers.begin(), peers.end());
  peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
  peers.erase(std::remove(peers.begin(), peers.end(), rank), peers.end());
}

}  // namespace

std::vector<int> schedulePeers(int rank, const HostTopology& topology, bool recursiveDoubling) {
  if (topology.size() < 2) return {};
  std::vector<int> peers = namedPeers(rank, topology, recursiveDoubling);
  normalize(peers, rank);
  return peers;
}

std::vector<int> eagerPeers(int rank, const HostTopology& topology, bool recursiveDoubling) {
  const int n = topology.size();
  if (n < 2) return {};
  std::vector<int> peers = namedPeers(rank, topology, recursiveDoubling);
  // Symmetric by construction: a pipe exists where either end's schedules name the other
  // (each relation above is symmetric already; this keeps a new one from breaking that).
  for (int other = 0; other < n; ++other) {
    if (other == rank) continue;
    const std::vector<int> theirs = namedPeers(other, topology, recursiveDoubling);
    if (std::find(theirs.begin(), theirs.end(), rank) != theirs.end()) peers.push_back(other);
  }
  normalize(peers, rank);
  return peers;
}

}  // namespace gyre
