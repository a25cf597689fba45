// What the store tests share (store_test.cc, tcp_store_hostile_test.cc,
// store_protocol_test.cc): the short bound that a refused or missing key is waited out
// with and the long one for calls that must succeed, with the literals the tests use.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "base/error.h"
#include "expect_error.h"
#include "transport/socket.h"  // Clock

namespace gyre::store_test {

using namespace std::chrono_literals;
using namespace std::string_literals;
using std::chrono::milliseconds;

constexpr milliseconds kShort = 200ms;
constexpr milliseconds kLong = 10s;  // for calls that must succeed; never waited out

inline std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }

inline milliseconds since(Clock::time_point start) {
  return std::chrono::duration_cast<milliseconds>(Clock::now() - start);
}

}  // namespace gyre::store_test
