#include "sim/network_model.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <numeric>

#include <fmt/format.h>

#include "base/error.h"

namespace gyre::sim {

int NetworkModel::ranks() const { return std::accumulate(hostSizes.begin(), hostSizes.end(), 0); }

std::string NetworkModel::describe() const {
  std::string shape;
  const bool even =
      std::all_of(hostSizes.begin(), hostSizes.end(), [&](int s) { return s == hostSizes[0]; });
  if (even) {
    shape = fmt::format("{} hosts x {} ranks", hosts(), hostSizes[0]);
  } else {
    shape = fmt::format("{} hosts ({})", hosts(), fmt::join(hostSizes, "+"));
  }
  std::string leaves = hostsPerLeaf > 0
                           ? fmt::format(", {} hosts per leaf, oversub {:g}", hostsPerLeaf, oversub)
                           : std::string();
  std::string burst = linkBurstBytes > 0 ? fmt::format(", tbf burst {:g} B at {:g} MB/s",
                                                       linkBurstBytes, linkPeakBytesPerUs)
                                         : std::string();
  return fmt::format(
      "{}, link {:g} Gbit/s {} (alpha {:g} us, tcp payload {:.3f}{}){}, shm {:g} MB/s per rank "
      "(alpha {:g} us), slice overhead {:g} us, cpu {:g} MB/s",
      shape, linkBytesPerUs * 8 / 1000, nicPerRank ? "per rank" : "per host", linkAlphaUs,
      tcpPayloadShare, burst, leaves, shmBytesPerUs, shmAlphaUs, sliceOverheadUs, cpuBytesPerUs);
}

double parseRate(const std::string& text) {
  std::string lower;
  for (char c : text) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  char* end = nullptr;
  const double value = std::strtod(lower.c_str(), &end);
  const std::string unit = end ? std::string(end) : std::string();
  double bitsPerSecond = 0;
  if (unit == "gbit") {
    bitsPerSecond = value * 1e9;
  } else if (unit == "mbit") {
    bitsPerSecond = value * 1e6;
  } else if (unit.empty()) {
    if (value > 0) return value;
  }
  if (!(value > 0) || (bitsPerSecond <= 0 && !unit.empty())) {
    fail(ErrorCode::kInvalidArgument,
         "rate '{}': want a number with gbit or mbit (100gbit, 500mbit) or bytes per us", text);
  }
  return bitsPerSecond / 8 / 1e6;
}

LinkTimes::LinkTimes(const NetworkModel& model) : model_(model) {
  for (int h = 0; h < model.hosts(); ++h) {
    hostOf_.insert(hostOf_.end(), static_cast<size_t>(model.hostSizes[static_cast<size_t>(h)]), h);
  }
  const size_t nics = static_cast<size_t>(model.nicPerRank ? model.ranks() : model.hosts());
  tx_.assign(nics, Side{0, model.linkBurstBytes, 0});
  rx_.assign(nics, Side{0, model.linkBurstBytes, 0});
  busFree_.assign(static_cast<size_t>(model.hosts()), 0.0);
  size_t leaves = 1;
  uplinkBytesPerUs_ = 0;
  if (model.hostsPerLeaf > 0) {
    leaves = static_cast<size_t>((model.hosts() + model.hostsPerLeaf - 1) / model.hostsPerLeaf);
    const int maxRanks = *std::max_element(model.hostSizes.begin(), model.hostSizes.end());
    const double nicsPerHost = model.nicPerRank ? maxRanks : 1;
    uplinkBytesPerUs_ =
        model.hostsPerLeaf * nicsPerHost * model.linkBytesPerUs / std::max(1.0, model.oversub);
  }
  upFree_.assign(leaves, 0.0);
  downFree_.assign(leaves, 0.0);
}

void LinkTimes::reset() {
  std::fill(tx_.begin(), tx_.end(), Side{0, model_.linkBurstBytes, 0});
  std::fill(rx_.begin(), rx_.end(), Side{0, model_.linkBurstBytes, 0});
  for (auto* v : {&upFree_, &downFree_, &busFree_}) {
    std::fill(v->begin(), v->end(), 0.0);
  }
}

int LinkTimes::leaf(int rank) const {
  return model_.hostsPerLeaf > 0 ? hostOf_[rank] / model_.hostsPerLeaf : 0;
}

LinkTimes::Transfer LinkTimes::send(int from, int to, size_t bytes, double now, bool copied) {
  const double b = static_cast<double>(bytes);
  const double ready = now + model_.sliceOverheadUs;
  if (sameHost(from, to)) {
    // The sender's CPU writes the slot; the host's bus carries it (shared by its ranks).
    double done = ready + (copied ? b / model_.shmBytesPerUs : 0.0);
    if (model_.hostMemBytesPerUs > 0) {
      double& bus = busFree_[static_cast<size_t>(hostOf_[from])];
      const double start = std::max(ready, bus);
      bus = start + b / model_.hostMemBytesPerUs;
      done = std::max(done, bus);
    }
    return {done, done + model_.shmAlphaUs};
  }
  // Store-and-forward per resource would overcount; each resource is a FIFO the slice
  // streams through: it starts on a resource once that is free and the slice started on
  // the previous one, and it cannot finish before it finished on the previous one.
  const double wire = (b + NetworkModel::kFrameOverhead) / model_.tcpPayloadShare;
  auto pass = [&](double& freeAt, double rate, double start, double end) {
    const double s = std::max(start, freeAt);
    const double e = std::max(s + wire / rate, end);
    freeAt = e;
    return std::pair<double, double>{s, e};
  };
  auto [s, e] = passNic(tx_[static_cast<size_t>(nic(from))], wire, ready, 0);
  const double senderDone = ready;  // the kernel takes the bytes; the NIC drains them
  if (uplinkBytesPerUs_ > 0 && leaf(from) != leaf(to)) {
    std::tie(s, e) = pass(upFree_[static_cast<size_t>(leaf(from))], uplinkBytesPerUs_, s, e);
    std::tie(s, e) = pass(downFree_[static_cast<size_t>(leaf(to))], uplinkBytesPerUs_, s, e);
  }
  std::tie(s, e) = passNic(rx_[static_cast<size_t>(nic(to))], wire, s, e);
  return {senderDone, e + model_.linkAlphaUs};
}

std::pair<double, double> LinkTimes::passNic(Side& side, double wire, double start,
                                             double end) const {
  const double s = std::max(start, side.freeAt);
  double busy = wire / model_.linkBytesPerUs;
  if (model_.linkBurstBytes > 0) {
    // tbf: the bytes the bucket holds go at the peak rate, the rest as tokens come.
    const double tokens =
        std::min(model_.linkBurstBytes, side.tokens + (s - side.tokenTime) * model_.linkBytesPerUs);
    const double fast = std::min(tokens, wire);
    busy = fast / model_.linkPeakBytesPerUs + (wire - fast) / model_.linkBytesPerUs;
    side.tokens = tokens - fast;
    side.tokenTime = s + busy;
  }
  const double e = std::max(s + busy, end);
  side.freeAt = e;
  return {s, e};
}

double LinkTimes::receiveCost(size_t bytes) const {
  return model_.sliceOverheadUs + static_cast<double>(bytes) / model_.cpuBytesPerUs;
}

double LinkTimes::creditAt(int from, int to, double now) const {
  return now + (sameHost(from, to) ? model_.shmAlphaUs : model_.linkAlphaUs);
}

}  // namespace gyre::sim
