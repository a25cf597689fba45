#include "base/options.h"

#include <cerrno>
#include <cstdlib>
#include <limits>

#include "base/error.h"
#include "base/secret.h"

namespace gyre {

const char* settingText(const char* name) {
  const char* v = std::getenv(name);
  return (v && *v) ? v : nullptr;
}

long long parseIntegerSetting(const char* text, const char* what, long long lo, long long hi) {
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(text, &end, 10);
  if (errno || end == text || *end != '\0' || v < lo || v > hi) {
    fail(ErrorCode::kInvalidArgument, "{}='{}' is not an integer in [{}, {}]", what, text, lo, hi);
  }
  return v;
}

std::chrono::milliseconds parseSecondsSetting(const char* text, const char* what, double lo,
                                              double hi) {
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(text, &end);
  if (errno || end == text || *end != '\0' || !(v >= lo && v <= hi)) {
    fail(ErrorCode::kInvalidArgument, "{}='{}' is not a number of seconds in [{}, {}]", what,
         text, lo, hi);
  }
  return std::chrono::milliseconds(static_cast<long long>(v * 1000.0 + 0.5));
}

size_t parseByteSize(const std::string& text, const char* what) {
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (errno || end == text.c_str() || text[0] == '-') {
    fail(ErrorCode::kInvalidArgument, "{}='{}' is not a byte size (e.g. 4096, 512K, 4M)", what,
         text);
  }
  unsigned shift = 0;
  std::string suffix(end);
  if (suffix == "K" || suffix == "k") shift = 10;
  else if (suffix == "M" || suffix == "m") shift = 20;
  else if (suffix == "G" || suffix == "g") shift = 30;
  else if (!suffix.empty()) {
    fail(ErrorCode::kInvalidArgument, "{}='{}' has an unknown suffix (use K, M or G)", what, text);
  }
  if (v > (std::numeric_limits<size_t>::max() >> shift)) {
    fail(ErrorCode::kInvalidArgument, "{}='{}' is too large", what, text);
  }
  return static_cast<size_t>(v) << shift;
}

std::string secretFromEnvironment() {
  std::string secret;
  if (const char* v = settingText("GYRE_TOKEN")) secret = v;
  if (const char* v = settingText("GYRE_TOKEN_FILE")) {
    if (!secret.empty()) {
      fail(ErrorCode::kInvalidArgument,
           "both GYRE_TOKEN and GYRE_TOKEN_FILE are set: give the job's secret one way only");
    }
    secret = readSecretFile(v);
  }
  if (secret.size() > kMaxSecretBytes) {
    fail(ErrorCode::kInvalidArgument, "GYRE_TOKEN holds {} bytes, more than the {} a secret "
         "may have", secret.size(), kMaxSecretBytes);
  }
  return secret;
}

std::string reduceIsaFromEnvironment() {
  const char* v = settingText("GYRE_REDUCE_ISA");
  if (!v) return "";
  std::string s(v);
  if (s != "auto" && s != "portable" && s != "avx2" && s != "avx512") {
    fail(ErrorCode::kInvalidArgument, "GYRE_REDUCE_ISA='{}': use auto, portable, avx2 or avx512",
         s);
  }
  return s;
}

BaseOptions baseOptionsFromEnvironment() {
  BaseOptions o;
  if (const char* v = settingText("GYRE_DEBUG")) {
    std::string s(v);
    if (s == "WARN") o.logLevel = LogLevel::kWarn;
    else if (s == "INFO") o.logLevel = LogLevel::kInfo;
    else if (s == "TRACE") o.logLevel = LogLevel::kTrace;
    else if (s == "ERROR") o.logLevel = LogLevel::kError;
    else fail(ErrorCode::kInvalidArgument, "GYRE_DEBUG='{}': use ERROR, WARN, INFO or TRACE", s);
  }
  if (const char* v = settingText("GYRE_TIMELINE")) o.timeline = v;
  return o;
}

const BaseOptions& globalOptions() {
  static const BaseOptions options = [] {
    try {
      return baseOptionsFromEnvironment();
    } catch (const Error&) {
      // The communicator reports the bad variable with a proper error; the logger
      // must not throw, so it falls back to defaults.
      return BaseOptions{};
    }
  }();
  return options;
}

}  // namespace gyre
