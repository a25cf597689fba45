// Options::fromEnvironment for the settings this file's variables choose between: each
// accepted spelling maps to its value, and anything else is kInvalidArgument naming the
// variable and the accepted values.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "base/error.h"
#include "base/options.h"

namespace gyre {
namespace {

// Sets one variable for the scope of a test, restoring the old value after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    ::setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (had_) {
      ::setenv(name_, old_.c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

TEST(Options, AlgorithmSpellings) {
  const std::pair<const char*, AlgoKind> cases[] = {{"auto", AlgoKind::kAuto},
                                                    {"ring", AlgoKind::kRing},
                                                    {"tree", AlgoKind::kTree},
                                                    {"rd", AlgoKind::kRecursiveDoubling}};
  for (const auto& [text, want] : cases) {
    ScopedEnv env("GYRE_ALGO", text);
    EXPECT_EQ(Options::fromEnvironment().algo, want) << text;
  }
  ScopedEnv env("GYRE_ALGO", "butterfly");
  try {
    Options::fromEnvironment();
    FAIL() << "GYRE_ALGO=butterfly was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("GYRE_ALGO='butterfly'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("tree"), std::string::npos) << e.what();
  }
}

TEST(Options, SyncPrioritySpellings) {
  EXPECT_EQ(Options{}.syncPriority, ThreadPriority::kAuto);
  const std::pair<const char*, ThreadPriority> cases[] = {{"auto", ThreadPriority::kAuto},
                                                          {"realtime", ThreadPriority::kRealtime},
                                                          {"nice", ThreadPriority::kNice},
                                                          {"normal", ThreadPriority::kNormal}};
  for (const auto& [text, want] : cases) {
    ScopedEnv env("GYRE_SYNC_PRIORITY", text);
    EXPECT_EQ(Options::fromEnvironment().syncPriority, want) << text;
  }
  ScopedEnv env("GYRE_SYNC_PRIORITY", "high");
  try {
    Options::fromEnvironment();
    FAIL() << "GYRE_SYNC_PRIORITY=high was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("GYRE_SYNC_PRIORITY='high'"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace gyre
