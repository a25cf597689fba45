#include "sim/peer_set.h"

#include <algorithm>

#include "collectives/double_tree.h"
#include "collectives/recursive_doubling.h"

namespace gyre::sim {

namespace {

// The neighbours of position `me` on a ring of `members`.
void ringNeighbours(const std::vector<int>& members, int me, std::vector<int>& out) {
  const int g = static_cast<int>(members.size());
  if (g < 2) return;
  out.push_back(members[static_cast<size_t>((me + 1) % g)]);
  out.push_back(members[static_cast<size_t>((me + g - 1) % g)]);
}

}  // namespace

std::vector<int> schedulePeers(int rank, const HostTopology& t) {
  const int n = t.size();
  std::vector<int> peers{(rank + 1) % n, (rank + n - 1) % n};
  for (int p : doubleTreePeers(rank, n)) peers.push_back(p);
  for (int p : recursiveDoublingPeers(rank, n)) peers.push_back(p);
  const int host = t.hostOf[static_cast<size_t>(rank)];
  const int local = t.localIndexOf[static_cast<size_t>(rank)];
  ringNeighbours(t.hosts[static_cast<size_t>(host)], local, peers);
  if (t.even() && t.hostCount() >= 2) ringNeighbours(t.crossHostGroup(local), host, peers);
  if (local == 0) ringNeighbours(t.leaders(), host, peers);
  std::sort(peers.begin(), peers.end());
  peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
  peers.erase(std::remove(peers.begin(), peers.end(), rank), peers.end());
  return peers;
}

}  // namespace gyre::sim
