#include "base/log.h"

#include <unistd.h>

#include "base/options.h"

namespace gyre {

bool logEnabled(LogLevel level) {
  return static_cast<int>(level) <= static_cast<int>(globalOptions().logLevel);
}

void logLine(LogLevel level, int rank, std::string_view message) {
  static constexpr const char* kNames[] = {"ERROR", "WARN", "INFO", "TRACE"};
  std::string line = rank >= 0 ? fmt::format("[gyre rank {}] {} {}\n", rank,
                                             kNames[static_cast<int>(level)], message)
                               : fmt::format("[gyre] {} {}\n", kNames[static_cast<int>(level)],
                                             message);
  // One write per line; a short write to stderr is not worth retrying for a log.
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

}  // namespace gyre
