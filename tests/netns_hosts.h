// Two "hosts" on one machine for tests: network namespaces a and b joined by one veth
// pair, each end shaped by tbf (as a host's NIC), addresses 10.214.0.1 (a) and .2 (b).
// Ranks enter a namespace after fork (enter()); their host identity includes the
// namespace, so ranks in one namespace share shm and pipes across go over the veth.
// Needs root and iproute2: ok() is false with the reason in why() otherwise.
//
// Ownership: the object creates the namespaces (named after the test's pid) and
// deletes them, with their links, in its destructor. Not thread-safe; one per test.
#pragma once

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "base/error.h"

namespace gyre::testing {

inline bool sh(const std::string& command) {
  return std::system((command + " >/dev/null 2>&1").c_str()) == 0;
}

class NamespaceHosts {
 public:
  explicit NamespaceHosts(const std::string& rate) {
    const std::string id = std::to_string(::getpid());
    a_ = "gyre-hier-" + id + "-a";
    b_ = "gyre-hier-" + id + "-b";
    va_ = "gh" + id + "a";
    vb_ = "gh" + id + "b";
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
        !sh("ip -n " + a_ + " addr add 10.214.0.1/24 dev " + va_) ||
        !sh("ip -n " + b_ + " addr add 10.214.0.2/24 dev " + vb_) ||
        !sh("ip -n " + a_ + " link set " + va_ + " up") ||
        !sh("ip -n " + b_ + " link set " + vb_ + " up") || !sh("ip -n " + a_ + " link set lo up") ||
        !sh("ip -n " + b_ + " link set lo up")) {
      why_ = "could not set up the veth pair";
      return;
    }
    for (const auto& [ns, dev] : {std::pair{a_, va_}, std::pair{b_, vb_}}) {
      if (!sh("tc -n " + ns + " qdisc add dev " + dev + " root tbf rate " + rate +
              " burst 128kb latency 50ms")) {
        why_ = "tc tbf is not available";
        return;
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
  static const char* addressOf(bool inA) { return inA ? "10.214.0.1" : "10.214.0.2"; }

  // In a forked rank: move this process into namespace a or b.
  void enter(bool inA) const {
    const std::string path = "/var/run/netns/" + (inA ? a_ : b_);
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || ::setns(fd, CLONE_NEWNET) != 0) failSystem(errno, "setns " + path);
    ::close(fd);
  }

  // Takes host a's link down (the cable pulled), true when done.
  bool cut() const { return sh("ip -n " + a_ + " link set " + va_ + " down"); }

  // Bytes host a's shaped link has sent so far (its tbf qdisc's counter), -1 if unknown.
  long long bytesSentByA() const {
    const std::string cmd = "tc -s -n " + a_ + " qdisc show dev " + va_;
    FILE* p = ::popen(cmd.c_str(), "r");
    if (!p) return -1;
    char line[512];
    long long bytes = -1;
    while (std::fgets(line, sizeof line, p)) {
      if (std::sscanf(line, " Sent %lld bytes", &bytes) == 1) break;
    }
    ::pclose(p);
    return bytes;
  }

 private:
  std::string a_, b_, va_, vb_, why_;
  bool created_ = false;
  bool ok_ = false;
};

}  // namespace gyre::testing
