// The file-descriptor limit of a process that holds one connection per rank (the store's
// server: one per client; gyrerun: two pipes per child).
#pragma once

#include <cstdint>
#include <string>

namespace gyre {

// Raises this process's soft RLIMIT_NOFILE to its hard limit (the kernel's default soft
// limit, 1,024, is below what a store serving 1,024 ranks holds) and returns the soft limit
// now in force. Thread-safe; idempotent.
uint64_t raiseFdLimit();

// "" when `need` descriptors fit under the soft limit (raised first); otherwise what to
// tell the user: the need, `what` needs it, the limit, and `ulimit -n`.
std::string fdLimitShortfall(uint64_t need, const std::string& what);

}  // namespace gyre
