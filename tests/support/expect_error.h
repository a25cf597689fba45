// expectError(f): runs f, which must throw gyre::Error, and returns that Error for the
// test to check its code and message; a test failure (and a kInternal placeholder) if f
// throws none.
#pragma once

#include <gtest/gtest.h>

#include "base/error.h"

namespace gyre {

template <typename F>
Error expectError(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "expected a gyre::Error, none was thrown";
  return Error(ErrorCode::kInternal, "(none thrown)");
}

}  // namespace gyre
