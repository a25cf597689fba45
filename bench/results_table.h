// nccl-tests' results table, as gyre-bench prints it and gyre-sim prints its
// predictions: the two column-head lines, one 13-column row per size
//   size count type redop root | time algbw busbw #wrong (out-of-place) | same (in-place)
// (a group the collective lacks is four N/A; #wrong N/A without a check) and the trailer
// `# Out of bounds values : K OK|FAILED`, `# Avg bus bandwidth : X`.
//
// Contract: writes stdout (the caller's rank 0 only) and flushes after each line. The
// format is what scripts that parse nccl-tests read; tests/gyre_bench_test checks it. A
// row is built once as strings (ResultRow, bench/result_files.h) and the same strings go
// to the table and to gyre-bench's --csv/--json, so the outputs cannot disagree.
#pragma once

#include <cstdint>
#include <optional>

#include "base/types.h"
#include "bench/bench_collectives.h"
#include "bench/result_files.h"

namespace gyre::bench {

// The column heads: "#  size  count  type ..." and the units line below it.
void printColumnHeads();

// One timing group of a row: whether the collective has it, its seconds per op, and its
// wrong elements over all ranks (nullopt: not checked, printed N/A).
struct RowGroup {
  bool has = false;
  double seconds = 0;
  std::optional<uint64_t> wrong;
};

// Sums of the busbw column, for the trailer.
struct BusBwSum {
  double sum = 0;
  int count = 0;
};

// One row for layout l on n ranks (groups: out-of-place, in-place), formatted, its busbw
// added to busBw. The row's algorithm is left empty for the caller to name.
ResultRow tableRow(const CollectiveInfo& c, const Layout& l, DataType t, ReduceOp op, int root,
                   int n, const RowGroup (&groups)[2], BusBwSum& busBw);

// Prints one 13-column row.
void printRow(const ResultRow& row);

// The trailer; wrong nullopt: "N/A" instead of a count (nothing was checked).
void printTrailer(std::optional<uint64_t> wrong, const BusBwSum& busBw);

}  // namespace gyre::bench
