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

void printRow(const CollectiveInfo& c, const Layout& l, DataType t, ReduceOp op, int root, int n,
              const RowGroup (&groups)[2], BusBwSum& busBw) {
  std::printf("%12zu  %12zu  %8s  %6s  %6d", l.bytes, l.elements, dtypeName(t),
              c.reduces ? opName(op) : "none", c.rooted ? root : -1);
  for (const RowGroup& g : groups) {
    if (!g.has) {
      std::printf("  %9s  %7s  %7s  %6s", "N/A", "N/A", "N/A", "N/A");
      continue;
    }
    const double algBw = g.seconds > 0 ? static_cast<double>(l.bytes) / g.seconds / 1e9 : 0;
    const double bw = algBw * c.busBwFactor(n);
    busBw.sum += bw;
    ++busBw.count;
    const std::string w = g.wrong ? std::to_string(*g.wrong) : "N/A";
    std::printf("  %9.2f  %7.3f  %7.3f  %6s", g.seconds * 1e6, algBw, bw, w.c_str());
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
