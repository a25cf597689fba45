#include "collectives/host_topology.h"

#include <fmt/format.h>

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

std::string HostTopology::whyFlat() const {
  if (hostCount() < 2) return "all ranks share one host";
  if (!even()) return fmt::format("the hosts have unequal rank counts ({})", describe());
  if (ranksPerHost() < 2) return "every host has a single rank";
  return "";
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
