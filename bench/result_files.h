// gyre-bench's machine-readable results: `--csv FILE` and `--json FILE` beside the
// nccl-tests table, for plots (tools/plot_bench.py) and scripts.
//
// Contract: a ResultRow is one table row already formatted: its fields are the very
// strings the table prints (time "%.2f" us, algbw and busbw "%.3f" GB/s, #wrong or "N/A"),
// so the three outputs cannot disagree. Rank 0 alone owns a ResultFiles; the files are
// opened (truncated) by the constructor, which throws kInvalidArgument naming the path
// and the reason when one cannot be written. The CSV gets one line per row as the row is
// added (flushed, so a run that dies keeps its rows); the JSON is written whole by
// finish(). Schemas (docs/observability.md):
//   CSV: a header line, then collective,ranks,transport,algorithm,size,count,type,redop,
//        root,oop_time_us,oop_algbw,oop_busbw,oop_wrong,ip_time_us,ip_algbw,ip_busbw,
//        ip_wrong; a group the collective lacks, or #wrong without -c 1, is empty.
//   JSON: {"schema": "gyre-bench-results", "version": 1, header fields, "rows": [...]},
//        each row's groups an object {time_us, algbw, busbw, wrong} or null.
// Not thread-safe.
#pragma once

#include <cstddef>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

namespace gyre::bench {

struct GroupText {
  bool present = false;            // false: the table prints N/A x 4
  std::string time, algbw, busbw;  // as printed
  std::string wrong;               // a count, or "N/A" without -c 1
};

struct ResultRow {
  std::string collective;  // nccl-tests' name: all_reduce, ...
  std::string algorithm;   // all-reduce: the algorithm that ran at this size; else ""
  size_t bytes = 0;
  size_t elements = 0;
  std::string type, redop;
  int root = -1;
  GroupText group[2];  // out of place, in place
};

// Formats one group's numbers as the table prints them.
GroupText formatGroup(double seconds, double algBw, double busBw, bool checked,
                      unsigned long long wrong);

// What the JSON header says about the run.
struct RunHeader {
  std::string command;  // argv, space-separated
  std::string date;     // UTC, ISO 8601
  std::string host;     // rank 0's host name
  std::vector<std::string> rankHosts;
  int ranks = 0;
  std::string transport, algorithm, launcher, bootstrap;
  size_t slots = 0, slotBytes = 0;
  int nsocks = 1;
  std::string tcpCongestion;  // "cubic (GYRE_TCP_CONGESTION)", "bbr (the host's)"
  std::vector<std::string> collectives;
  int iters = 0, warmup = 0;
  bool check = true;
};

// The current UTC time as YYYY-MM-DDTHH:MM:SSZ.
std::string utcNow();

class ResultFiles {
 public:
  // Empty paths: that file is not written.
  ResultFiles(const std::string& csvPath, const std::string& jsonPath);
  ~ResultFiles();
  ResultFiles(const ResultFiles&) = delete;
  ResultFiles& operator=(const ResultFiles&) = delete;

  void setHeader(RunHeader header) { header_ = std::move(header); }
  void add(const ResultRow& row);
  // Writes the JSON (header and every row added) and closes both files.
  void finish();

 private:
  struct FileCloser {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  using File = std::unique_ptr<std::FILE, FileCloser>;

  std::string jsonPath_;
  File csv_, json_;
  RunHeader header_;
  std::vector<ResultRow> rows_;
};

}  // namespace gyre::bench
