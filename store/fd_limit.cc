#include "store/fd_limit.h"

#include <sys/resource.h>

#include <mutex>

#include "base/log.h"

namespace gyre {

uint64_t raiseFdLimit() {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return 0;
  if (limit.rlim_cur < limit.rlim_max) {
    rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
  }
  return limit.rlim_cur == RLIM_INFINITY ? UINT64_MAX : static_cast<uint64_t>(limit.rlim_cur);
}

std::string fdLimitShortfall(uint64_t need, const std::string& what) {
  const uint64_t have = raiseFdLimit();
  if (have >= need) return "";
  return fmt::format(
      "{} needs about {} file descriptors, but this process may open only {} (its hard "
      "limit, RLIMIT_NOFILE): raise it with `ulimit -n {}` (or LimitNOFILE= under systemd, "
      "nofile in /etc/security/limits.conf) before starting the job",
      what, need, have, need);
}

}  // namespace gyre
