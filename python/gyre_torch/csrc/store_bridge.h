// The store torch hands a backend's creator (a PrefixStore over its TCPStore or
// FileStore), as the callbacks gyre's C API bootstraps through (gyreStore_t), so gyre
// never opens a port of its own: under torchrun, torch already listens on MASTER_PORT.
//
// Ownership: makeStoreCallbacks() takes a reference to the store; gyre calls release()
// once its communicator is gone, which drops it. Thread safety: as c10d::Store is
// (thread-safe). The callbacks never let a C++ exception cross into C.
#pragma once

#include <c10/util/intrusive_ptr.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <string>

#include "capi/gyre.h"

namespace gyre_torch {

gyreStore_t makeStoreCallbacks(const c10::intrusive_ptr<c10d::Store>& store);

// One call through those callbacks, as gyre makes it, for the tests: `op` "set" (value "1"),
// "get", "add" (delta 1), "wait" or "check" on `key`, without makeStoreCallbacks' first
// add. Returns the callback's result (gyreTimeout for a wait that expired) and its error
// text in *error.
gyreResult_t callThroughBridge(const c10::intrusive_ptr<c10d::Store>& store,
                               const std::string& op, const std::string& key,
                               std::string* error);

}  // namespace gyre_torch
