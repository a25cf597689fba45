#include "bench/results_table.h"

#include <cstdio>
#include <string>

namespace gyre::bench {

void printColumnHeads() {
  // Group labels centred over their four columns (rows: 52 + 2 x 37 characters).
  std::printf("#%76s%35s\n", "out-of-place", "in-place");
  std::printf("#%11s  %12s  %8s  %6s  %6s  %9s  %7s  %7s  %6s  %9s  %7s  %7s  %6s\n", "size",
              "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw",
              "busbw", "#wrong");
  std::printf("#%11s  %12s  %8s  %6s  %6s  %9s  %7s  %7s  %6s  %9s  %7s  %7s  %6s\n", "(B)",
              "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)",
              "");
  std::fflush(stdout);
}

ResultRow tableRow(const CollectiveInfo& c, const Layout& l, DataType t, ReduceOp op, int root,
                   int n, const RowGroup (&groups)[2], BusBwSum& busBw) {
  ResultRow row;
  row.collective = c.name;
  row.bytes = l.bytes;
  row.elements = l.elements;
  row.type = dtypeName(t);
  row.redop = c.reduces ? opName(op) : "none";
  row.root = c.rooted ? root : -1;
  for (int g = 0; g < 2; ++g) {
    if (!groups[g].has) continue;
    const double seconds = groups[g].seconds;
    const double algBw = seconds > 0 ? static_cast<double>(l.bytes) / seconds / 1e9 : 0;
    const double bw = algBw * c.busBwFactor(n);
    busBw.sum += bw;
    ++busBw.count;
    row.group[g] = formatGroup(seconds, algBw, bw, groups[g].wrong.has_value(),
                               groups[g].wrong.value_or(0));
  }
  return row;
}

void printRow(const ResultRow& row) {
  std::printf("%12zu  %12zu  %8s  %6s  %6d", row.bytes, row.elements, row.type.c_str(),
              row.redop.c_str(), row.root);
  for (const GroupText& g : row.group) {
    if (!g.present) {
      std::printf("  %9s  %7s  %7s  %6s", "N/A", "N/A", "N/A", "N/A");
    } else {
      std::printf("  %9s  %7s  %7s  %6s", g.time.c_str(), g.algbw.c_str(), g.busbw.c_str(),
                  g.wrong.c_str());
    }
  }
  std::printf("\n");
  std::fflush(stdout);
}

void printTrailer(std::optional<uint64_t> wrong, const BusBwSum& busBw) {
  if (wrong) {
    std::printf("# Out of bounds values : %llu %s\n", static_cast<unsigned long long>(*wrong),
                *wrong == 0 ? "OK" : "FAILED");
  } else {
    std::printf("# Out of bounds values : N/A (not checked)\n");
  }
  std::printf("# Avg bus bandwidth    : %g\n", busBw.count > 0 ? busBw.sum / busBw.count : 0.0);
  std::printf("#\n");
  std::fflush(stdout);
}

}  // namespace gyre::bench
