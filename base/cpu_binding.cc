#include "base/cpu_binding.h"

#include <dirent.h>
#include <sched.h>
#include <sys/types.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace gyre {

int cpuIndexFor(int localRank, int localSize, int cpuCount) {
  if (localSize <= cpuCount) return localRank;
  return static_cast<int>(static_cast<long long>(localRank) * cpuCount / localSize);
}

bool chooseCpu(int localRank, int localSize, int& cpu, std::string& error) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (::sched_getaffinity(0, sizeof(allowed), &allowed) != 0) {
    error = std::string("sched_getaffinity: ") + std::strerror(errno);
    return false;
  }
  const int count = CPU_COUNT(&allowed);
  if (count <= 0) {
    error = "no CPU is allowed";
    return false;
  }
  int wanted = cpuIndexFor(localRank, localSize, count);
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (!CPU_ISSET(c, &allowed)) continue;
    if (wanted-- == 0) {
      cpu = c;
      return true;
    }
  }
  error = "the allowed CPU set changed while it was read";
  return false;
}

bool bindProcessToCpu(int cpu, std::string& error) {
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  DIR* tasks = ::opendir("/proc/self/task");
  if (tasks == nullptr) {
    // No /proc: the calling thread at least, and threads it starts later.
    if (::sched_setaffinity(0, sizeof(one), &one) == 0) return true;
    error = std::string("sched_setaffinity: ") + std::strerror(errno);
    return false;
  }
  // Twice: a thread started during the first pass by a thread not yet moved inherits
  // the old set, and its entry may lie behind the pass's position.
  bool ok = true;
  for (int pass = 0; pass < 2 && ok; ++pass) {
    ::rewinddir(tasks);
    while (const dirent* entry = ::readdir(tasks)) {
      char* end = nullptr;
      const long tid = std::strtol(entry->d_name, &end, 10);
      if (end == entry->d_name || *end != '\0' || tid <= 0) continue;  // "." and ".."
      if (::sched_setaffinity(static_cast<pid_t>(tid), sizeof(one), &one) == 0) continue;
      if (errno == ESRCH) continue;  // the thread ended meanwhile
      error = "thread " + std::to_string(tid) + ": sched_setaffinity: " + std::strerror(errno);
      ok = false;
      break;
    }
  }
  ::closedir(tasks);
  return ok;
}

}  // namespace gyre
