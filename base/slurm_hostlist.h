// Slurm's hostlist syntax, expanded: what SLURM_JOB_NODELIST / SLURM_STEP_NODELIST hold
// ("node[01-04,07],gpu-a[1-2]-ib,login") and SLURM_TASKS_PER_NODE's "2(x3),1".
//
// Contract: pure functions of their text, no state, thread-safe. Malformed text throws
// gyre::Error(kInvalidArgument) naming `what` (the variable it came from).
#pragma once

#include <string>
#include <vector>

namespace gyre {

// "node[01-03,07]" -> node01 node02 node03 node07: several bracket groups per name (the
// cartesian product, left to right: "r[1-2]n[1-2]" -> r1n1 r1n2 r2n1 r2n2), commas
// between names, zero-padding kept as written ("[08-10]" -> 08 09 10). Empty text gives
// an empty list. A list that would expand past `limit` names throws (a typo, not a job).
std::vector<std::string> expandHostlist(const std::string& text, const char* what,
                                        size_t limit = 1 << 20);

// The first name of the list, without expanding the rest (cheap on huge lists).
std::string firstHost(const std::string& text, const char* what);

// "2(x3),1" -> 2 2 2 1 (tasks on each node of the step, in node order).
std::vector<int> expandTasksPerNode(const std::string& text, const char* what);

}  // namespace gyre
