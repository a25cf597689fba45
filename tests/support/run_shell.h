// Runs a shell command for the tests that start gyre's real programs (gyrerun,
// gyre-bench), with stdout and stderr kept apart and the wall time measured. Callers
// wrap the command in `timeout` so that a hang fails the test instead of stalling it.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

namespace gyre::testing {

struct RunResult {
  int exitCode = -1;  // -1 if the shell itself did not exit normally
  std::string out;
  std::string err;
  double seconds = 0;
};

inline std::string binary(const char* name) { return std::string(GYRE_BIN_DIR) + "/" + name; }

// How many times `what` occurs in `text` (overlapping occurrences counted): for the
// lines a program's output must hold exactly once.
inline size_t countOf(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

inline RunResult runShell(const std::string& shellCommand) {
  char errPath[] = "/tmp/gyre_test_stderr.XXXXXX";
  int fd = ::mkstemp(errPath);
  EXPECT_GE(fd, 0);
  ::close(fd);
  std::string command = "{ " + shellCommand + "; } 2>" + errPath;
  RunResult result;
  auto start = std::chrono::steady_clock::now();
  FILE* pipe = ::popen(command.c_str(), "r");
  EXPECT_NE(pipe, nullptr) << command;
  if (pipe == nullptr) return result;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) result.out.append(buffer, n);
  int status = ::pclose(pipe);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (WIFEXITED(status)) result.exitCode = WEXITSTATUS(status);
  std::ifstream errFile(errPath);
  std::stringstream errText;
  errText << errFile.rdbuf();
  result.err = errText.str();
  ::unlink(errPath);
  return result;
}

}  // namespace gyre::testing
