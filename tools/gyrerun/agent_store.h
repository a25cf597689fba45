// AgentStore: gyre's store for the whole job, which node 0's gyrerun serves (as torchrun's
// agent serves its store): a gyre-store child (tools/store) on a listening socket gyrerun
// binds itself, so that the port is held from the start (no race with another program),
// the store outlives every rank and every restart of the local group, and the ranks, 0
// included, are all its clients (GYRE_AGENT_STORE, base/launch_env.h).
//
// Contract: start() binds host:port (port 0: a free one the kernel picks; every address
// of this host, as torch's store, when host is not one of them, saying so), forks and execs
// the program with the socket as fd 3 and a pipe as fd 4 on which the program says
// "ready" (or why it cannot serve), and waits for that at most kReadyTimeout. On any
// failure it returns nullptr and an error that names the program, the address and the
// reason, and leaves nothing running. The child runs in a process group of its own (a
// terminal's ^C reaches the ranks, not the store, which gyrerun stops after them), gets
// SIGKILL should gyrerun die before the program takes over (PR_SET_PDEATHSIG; gyre-store
// then asks for SIGTERM itself), inherits gyrerun's stderr and environment (GYRE_TOKEN
// replaced by `secret` when one is given). The destructor stops it: SIGTERM, then SIGKILL
// kStopGrace later, and reaps it. Only this pid is signalled or waited for.
// Single-threaded, like the rest of gyrerun; uses nothing from the gyre library.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>

namespace gyre::tools {

class AgentStore {
 public:
  static constexpr std::chrono::seconds kReadyTimeout{10};
  static constexpr std::chrono::seconds kStopGrace{2};

  static std::unique_ptr<AgentStore> start(const std::string& program, const std::string& host,
                                           int port, const std::string& secret, std::string& error);
  ~AgentStore();
  AgentStore(const AgentStore&) = delete;
  AgentStore& operator=(const AgentStore&) = delete;

  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  bool running() const { return running_; }
  // "gyre-store (pid 123) at 127.0.0.1:41234", for messages.
  std::string describe() const;

  // Reaps the store if it has exited, without waiting; true the first time, with how it
  // ended ("exit code 1", "signal SIGKILL (9)").
  bool reapIfExited(std::string& how);

 private:
  AgentStore(std::string program, std::string address, int port, pid_t pid)
      : program_(std::move(program)), address_(std::move(address)), port_(port), pid_(pid) {}

  std::string program_;
  std::string address_;  // "host:port", as bound
  int port_;
  pid_t pid_;
  bool running_ = true;
};

// The gyre-store to run: GYRE_STORE_PROGRAM when set, else gyre-store in the folder of
// gyrerun's own executable (/proc/self/exe). "" and `error` when that cannot be read.
std::string storeProgram(std::string& error);

// "host:port", or "[v6addr]:port" for an IPv6 literal (GYRE_AGENT_STORE's syntax).
std::string joinHostPort(const std::string& host, int port);

}  // namespace gyre::tools
