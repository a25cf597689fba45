#include "collectives/host_topology.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

namespace gyre {

HostTopology HostTopology::fromHostIds(const std::vector<std::string>& hostIds) {
  HostTopology t;
  std::map<std::string, int> index;
  for (size_t r = 0; r < hostIds.size(); ++r) {
    auto [it, added] = index.emplace(hostIds[r], static_cast<int>(t.hosts.size()));
    if (added) t.hosts.emplace_back();
    t.hostOf.push_back(it->second);
    t.localIndexOf.push_back(static_cast<int>(t.hosts[it->second].size()));
    t.hosts[it->second].push_back(static_cast<int>(r));
  }
  return t;
}

bool HostTopology::even() const {
  if (hosts.empty()) return false;
  for (const auto& h : hosts) {
    if (h.size() != hosts[0].size()) return false;
  }
  return true;
}

int HostTopology::maxRanksPerHost() const {
  size_t m = 0;
  for (const auto& h : hosts) m = std::max(m, h.size());
  return static_cast<int>(m);
}

std::string HostTopology::whyFlat() const {
  if (hostCount() < 2) return "all ranks share one host";
  if (maxRanksPerHost() < 2) return "every host has a single rank";
  return "";
}

std::vector<int> HostTopology::leaders() const {
  std::vector<int> l;
  for (const auto& h : hosts) l.push_back(h.front());
  return l;
}

std::vector<int> HostTopology::hostOrderFrom(int first) const {
  std::vector<int> order;
  const int h0 = hostOf.at(static_cast<size_t>(first));
  for (int k = 0; k < hostCount(); ++k) {
    const std::vector<int>& h = hosts[static_cast<size_t>((h0 + k) % hostCount())];
    const size_t start = k == 0 ? static_cast<size_t>(localIndexOf[first]) : 0;
    for (size_t i = 0; i < h.size(); ++i) order.push_back(h[(start + i) % h.size()]);
  }
  return order;
}

std::vector<int> HostTopology::crossHostGroup(int localIndex) const {
  std::vector<int> group;
  for (const auto& h : hosts) group.push_back(h.at(static_cast<size_t>(localIndex)));
  return group;
}

std::string HostTopology::describe() const {
  if (even()) return fmt::format("{} hosts x {} ranks", hostCount(), hosts[0].size());
  std::string counts;
  for (const auto& h : hosts) counts += fmt::format("{}{}", counts.empty() ? "" : "+", h.size());
  return fmt::format("{} hosts ({} ranks)", hostCount(), counts);
}

}  // namespace gyre
