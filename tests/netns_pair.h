// NamespacePair: two network namespaces "a" and "b" joined by a veth pair, made by the
// test itself, as two hosts: 10.213.0.1 in a, 10.213.0.2 in b (only addresses inside the
// namespaces it creates). Needs root and iproute2; ok() is false, and why() says why,
// otherwise, so that the tests skip with a reason. enter() moves the calling process (a
// forked rank) into one side. The destructor deletes both namespaces.
#pragma once

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>

#include "base/error.h"

namespace gyre::testing {

inline bool sh(const std::string& command) {
  return std::system((command + " >/dev/null 2>&1").c_str()) == 0;
}

// Two namespaces "a" and "b", one veth pair between them, 10.213.0.1 in a, .2 in b.
class NamespacePair {
 public:
  NamespacePair() {
    const std::string id = std::to_string(::getpid());
    a_ = "gyre-nf-" + id + "-a";
    b_ = "gyre-nf-" + id + "-b";
    va_ = "gy" + id + "a";
    vb_ = "gy" + id + "b";
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
        !sh("ip -n " + a_ + " addr add 10.213.0.1/24 dev " + va_) ||
        !sh("ip -n " + b_ + " addr add 10.213.0.2/24 dev " + vb_) ||
        !sh("ip -n " + a_ + " link set " + va_ + " up") ||
        !sh("ip -n " + b_ + " link set " + vb_ + " up") || !sh("ip -n " + a_ + " link set lo up") ||
        !sh("ip -n " + b_ + " link set lo up")) {
      why_ = "could not set up the veth pair";
      return;
    }
    // A slower, buffered link, as between hosts; the test stands without it.
    for (const auto& [ns, dev] : {std::pair{a_, va_}, std::pair{b_, vb_}}) {
      if (!sh("tc -n " + ns + " qdisc add dev " + dev +
              " root tbf rate 400mbit burst 64kb "
              "latency 20ms")) {
        std::printf("[netns] tbf not available; testing over the unshaped veth\n");
        break;
      }
    }
    ok_ = true;
  }
  ~NamespacePair() {
    if (created_) {
      sh("ip netns del " + a_);
      sh("ip netns del " + b_);
    }
  }

  bool ok() const { return ok_; }
  const std::string& why() const { return why_; }
  void enter(bool inA) const {
    std::string path = "/var/run/netns/" + (inA ? a_ : b_);
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || ::setns(fd, CLONE_NEWNET) != 0) failSystem(errno, "setns " + path);
    ::close(fd);
  }
  bool cut() const { return sh("ip -n " + a_ + " link set " + va_ + " down"); }

 private:
  std::string a_, b_, va_, vb_, why_;
  bool created_ = false;
  bool ok_ = false;
};

}  // namespace gyre::testing
