// BaseOptions: the settings base/ itself reads (the log level, the timeline), and the
// helpers every layer's settings are parsed with.
//
// Each layer owns the struct of its own settings: BaseOptions here, TransportOptions
// (transport/transport_options.h), CollectiveOptions (collectives/collective_options.h),
// RingOptions and the aggregate Options (ring/options.h). Options::fromEnvironment()
// (ring/options.cc) parses every GYRE_* variable in one pass, with the helpers below;
// nothing else in gyre calls getenv for a GYRE_* name. docs/configuration.md's table
// lists the same variables; keep them in sync.
//
// `globalOptions()` is GYRE_DEBUG and GYRE_TIMELINE parsed once (thread-safe static
// init), for the logger and the timeline, which run before any communicator exists.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

#include "base/export.h"
#include "base/log.h"

namespace gyre {

struct BaseOptions {
  LogLevel logLevel = LogLevel::kWarn;                 // GYRE_DEBUG=WARN|INFO|TRACE
  // GYRE_TIMELINE=path: Chrome trace events of this process (base/timeline.h), "{rank}"
  // in the path replaced by the rank (else ".rank<R>" added); unset: none.
  std::string timeline;
};

// GYRE_DEBUG and GYRE_TIMELINE; throws kInvalidArgument for a bad GYRE_DEBUG.
BaseOptions baseOptionsFromEnvironment();

// baseOptionsFromEnvironment(), once; its defaults where GYRE_DEBUG is malformed (the
// logger must not throw; the communicator reports the bad variable).
GYRE_API const BaseOptions& globalOptions();

// GYRE_REDUCE_ISA alone, checked ("" when unset): for the host reduction, which must see
// a bad value (globalOptions() does not hold it).
std::string reduceIsaFromEnvironment();

// The job's secret alone, as Options::token holds it: GYRE_TOKEN, or the contents of
// GYRE_TOKEN_FILE ("" when neither is set), with fromEnvironment()'s errors for these two
// (both set, a file base/secret.h refuses, over kMaxSecretBytes). For a program that needs
// only the secret (gyre-store), so that an unrelated bad GYRE_* value does not stop it.
std::string secretFromEnvironment();

// "512K" -> 524288; plain numbers are bytes; K/M/G are powers of 2. Throws
// kInvalidArgument naming `what` for anything else.
GYRE_API size_t parseByteSize(const std::string& text, const char* what);

// The value of the variable `name`, or nullptr where it is unset or empty (an empty
// value counts as unset: a launcher exporting VAR= must not break a run).
const char* settingText(const char* name);

// `text` as an integer in [lo, hi]; else kInvalidArgument "<what>='<text>' is not an
// integer in [lo, hi]".
long long parseIntegerSetting(const char* text, const char* what, long long lo, long long hi);

// "60", "0.5": seconds, as a whole number of milliseconds in [lo, hi]; else
// kInvalidArgument "<what>='<text>' is not a number of seconds in [lo, hi]".
std::chrono::milliseconds parseSecondsSetting(const char* text, const char* what, double lo,
                                              double hi);

}  // namespace gyre
