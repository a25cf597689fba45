#include "ring/trace_signal.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "base/error.h"
#include "base/log.h"
#include "collectives/flight_recorder.h"

namespace gyre {
namespace {

int gWakeFd = -1;  // the pipe's write end, for the handler

void onDumpSignal(int) {
  const int saved = errno;
  const char byte = 1;
  [[maybe_unused]] ssize_t n = ::write(gWakeFd, &byte, 1);  // a full pipe: a dump is pending
  errno = saved;
}

struct Registry {
  std::mutex mu;
  std::map<const FlightRecorder*, std::string> recorders;  // -> directory
  bool installed = false;
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: the dump thread outlives main
  return *r;
}

void dumpLoop(int readFd) {
  char buf[64];
  for (;;) {
    ssize_t n = ::read(readFd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    for (const auto& [recorder, dir] : r.recorders) {
      try {
        std::string path = recorder->dumpTo(dir, "SIGUSR1", "");
        log(LogLevel::kWarn, recorder->rank(), "SIGUSR1: flight recorder dumped to {}", path);
      } catch (const Error& e) {
        log(LogLevel::kWarn, recorder->rank(), "SIGUSR1: {}", e.what());
      }
    }
  }
}

// Under the registry's lock.
void install(Registry& r, int rank) {
  r.installed = true;
  struct sigaction old {};
  if (::sigaction(SIGUSR1, nullptr, &old) == 0 && old.sa_handler != SIG_DFL) {
    log(LogLevel::kWarn, rank,
        "SIGUSR1 has a handler already: the flight recorder dumps on failures and "
        "Communicator::dumpTrace() only");
    return;
  }
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
    log(LogLevel::kWarn, rank, "flight recorder: no SIGUSR1 dumps (pipe: {})",
        std::strerror(errno));
    return;
  }
  // The reader blocks; only the handler's end must never block.
  ::fcntl(fds[0], F_SETFL, ::fcntl(fds[0], F_GETFL) & ~O_NONBLOCK);
  gWakeFd = fds[1];
  std::thread(dumpLoop, fds[0]).detach();
  struct sigaction sa {};
  sa.sa_handler = onDumpSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  ::sigaction(SIGUSR1, &sa, nullptr);
}

}  // namespace

void watchForDumpSignal(const FlightRecorder* recorder, const std::string& dir) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  if (!r.installed) install(r, recorder->rank());
  r.recorders[recorder] = dir;
}

void unwatchForDumpSignal(const FlightRecorder* recorder) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.recorders.erase(recorder);
}

}  // namespace gyre
