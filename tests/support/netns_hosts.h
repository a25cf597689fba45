// Two "hosts" on one machine for tests: network namespaces a and b joined by one veth
// pair, addresses <subnet>.1 (a) and <subnet>.2 (b), each end optionally shaped by tbf
// (as a host's NIC). Ranks enter a namespace after fork (enter()); their host identity
// includes the namespace, so ranks in one namespace share shm and pipes across go over
// the veth. Needs root and iproute2: ok() is false with the reason in why() otherwise, so
// that the tests skip saying why.
//
// Every test binary that uses it passes its own tag (part of the namespace and link
// names, with the pid) and subnet; the subnets live inside the namespaces the test made,
// so two binaries running at once never see each other's.
//
// Ownership: the object creates the namespaces and deletes them, with their links, in
// its destructor. Not thread-safe; one per test.
#pragma once

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>

#include "base/error.h"

namespace gyre::testing {

inline bool sh(const std::string& command) {
  return std::system((command + " >/dev/null 2>&1").c_str()) == 0;
}

// The tbf shaping of each end; an empty rate leaves the veth unshaped.
struct LinkShape {
  std::string rate;
  std::string burst = "128kb";
  std::string latency = "50ms";
  bool required = true;  // false: without tbf the test runs over the unshaped veth
};

class NamespaceHosts {
 public:
  // tag: a short word naming the test binary ("hier", "nf", ...); subnet: "10.214.0".
  NamespaceHosts(const std::string& tag, const std::string& subnet, const LinkShape& shape)
      : subnet_(subnet) {
    const std::string id = std::to_string(::getpid());
    a_ = "gyre-" + tag + "-" + id + "-a";
    b_ = "gyre-" + tag + "-" + id + "-b";
    va_ = "g" + tag.substr(0, 2) + id + "a";
    vb_ = "g" + tag.substr(0, 2) + id + "b";
    if (::geteuid() != 0) {
      why_ = "not root: network namespaces need CAP_SYS_ADMIN";
      return;
    }
    if (!sh("ip netns add " + a_) || !sh("ip netns add " + b_)) {
      why_ = "'ip netns add' failed (no iproute2, or namespaces not allowed here)";
      return;
    }
    created_ = true;
    if (!sh("ip link add " + va_ + " type veth peer name " + vb_) ||
        !sh("ip link set " + va_ + " netns " + a_) || !sh("ip link set " + vb_ + " netns " + b_) ||
        !sh("ip -n " + a_ + " addr add " + address(true) + "/24 dev " + va_) ||
        !sh("ip -n " + b_ + " addr add " + address(false) + "/24 dev " + vb_) ||
        !sh("ip -n " + a_ + " link set " + va_ + " up") ||
        !sh("ip -n " + b_ + " link set " + vb_ + " up") || !sh("ip -n " + a_ + " link set lo up") ||
        !sh("ip -n " + b_ + " link set lo up")) {
      why_ = "could not set up the veth pair";
      return;
    }
    if (!shape.rate.empty()) {
      for (const auto& [ns, dev] : {std::pair{a_, va_}, std::pair{b_, vb_}}) {
        if (sh("tc -n " + ns + " qdisc add dev " + dev + " root tbf rate " + shape.rate +
               " burst " + shape.burst + " latency " + shape.latency)) {
          continue;
        }
        if (shape.required) {
          why_ = "tc tbf is not available";
          return;
        }
        std::printf("[netns] tbf not available; testing over the unshaped veth\n");
        break;
      }
    }
    ok_ = true;
  }
  ~NamespaceHosts() {
    if (created_) {
      sh("ip netns del " + a_);
      sh("ip netns del " + b_);
    }
  }
  NamespaceHosts(const NamespaceHosts&) = delete;
  NamespaceHosts& operator=(const NamespaceHosts&) = delete;

  bool ok() const { return ok_; }
  const std::string& why() const { return why_; }
  std::string address(bool inA) const { return subnet_ + (inA ? ".1" : ".2"); }
  // The namespace's name, for `ip netns exec` and nsenter --net=/run/netns/<name>.
  const std::string& name(bool inA) const { return inA ? a_ : b_; }

  // In a forked rank: move this process into namespace a or b.
  void enter(bool inA) const {
    const std::string path = "/var/run/netns/" + name(inA);
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || ::setns(fd, CLONE_NEWNET) != 0) failSystem(errno, "setns " + path);
    ::close(fd);
  }

  // Takes host a's link down (the cable pulled), true when done.
  bool cut() const { return sh("ip -n " + a_ + " link set " + va_ + " down"); }

  // Bytes host a's shaped link has sent so far (its tbf qdisc's counter), -1 if unknown.
  long long bytesSentByA() const {
    return readNumber("tc -s -n " + a_ + " qdisc show dev " + va_, " Sent %lld bytes");
  }
  // Bytes host a's veth has received (the traffic between the "hosts"), -1 if unknown.
  long long receivedByA() const {
    return readNumber("ip netns exec " + a_ + " cat /sys/class/net/" + va_ + "/statistics/rx_bytes",
                      "%lld");
  }

 private:
  static long long readNumber(const std::string& command, const char* format) {
    FILE* p = ::popen(command.c_str(), "r");
    if (!p) return -1;
    char line[512];
    long long value = -1;
    while (std::fgets(line, sizeof line, p)) {
      if (std::sscanf(line, format, &value) == 1) break;
    }
    ::pclose(p);
    return value;
  }

  std::string subnet_, a_, b_, va_, vb_, why_;
  bool created_ = false;
  bool ok_ = false;
};

}  // namespace gyre::testing
