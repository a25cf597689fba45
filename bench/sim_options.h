// gyre-sim's command line: the cluster (hosts, ranks per host, link, switch tier, the
// per-slice costs; sim/network_model.h) and --compare-algos, followed by gyre-bench's
// own flags for what to run (bench/bench_options.h: COLLECTIVE -b -e -f -d -o -r -A),
// which go through gyre-bench's parser unchanged. The usage text is kSimUsage.
//
// Contract: pure functions; throw gyre::Error(kInvalidArgument) naming the flag.
#pragma once

#include <string>
#include <vector>

#include "sim/network_model.h"

namespace gyre::bench {

extern const char kSimUsage[];

struct SimCommandLine {
  sim::NetworkModel network;
  bool compareAlgos = false;
  bool timing = false;     // --timing: each row's simulation wall time on stderr
  bool picksOnly = false;  // --picks: auto's all-reduce pick per size, nothing simulated
  bool help = false;
  bool version = false;    // --version: the version line instead of a run
  int callsBefore = 1;     // --calls-before: shaped links, identical calls before the timed one
  int asBenchRounds = 0;   // --as-bench R: --compare-algos as gyre-bench's sequence (0: off)
  // What is left for gyre-bench's parser, argv[0] first.
  std::vector<std::string> benchArgs;
};

SimCommandLine parseSimCommandLine(int argc, char** argv);

}  // namespace gyre::bench
