// The library's one logger: stderr, one line per call, prefixed "[gyre rank r] LEVEL".
//
// Contract: gyre never writes to stdout. The level comes from GYRE_DEBUG (read once, by
// base/options): WARN (default), INFO, TRACE. Thread-safe: each line is written with
// one write(2), so lines from several threads or ranks do not interleave mid-line.
#pragma once

#include <string_view>

#include <fmt/format.h>

#include "base/export.h"

namespace gyre {

enum class LogLevel : int { kError = 0, kWarn = 1, kInfo = 2, kTrace = 3 };

GYRE_API bool logEnabled(LogLevel level);
// rank < 0 means "not known yet" (before a communicator exists).
GYRE_API void logLine(LogLevel level, int rank, std::string_view message);

template <typename... Args>
void log(LogLevel level, int rank, fmt::format_string<Args...> f, Args&&... args) {
  if (logEnabled(level)) logLine(level, rank, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace gyre
