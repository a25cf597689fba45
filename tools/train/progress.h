// gyre::train::Progress: what gyre-train is doing, for the person watching it, on stderr
// (stdout keeps its one line per epoch, which scripts parse).
//
// Start: say() prints one line per stage ("loading data from DIR", "joining 4 ranks at
// HOST:PORT", ...). Training: step() after every step; on a terminal (stderr a TTY) a bar
// redrawn in place at most every 0.2 s, `epoch 2/5 [=====>    ] 51%  42000 samples/s  ETA
// 0:03 (epoch), 0:14 (run)`, erased by clear() before the epoch's stdout line; otherwise a
// plain line every `every` (default 10 s), with the same numbers. Rates and ETAs count the
// global samples (all ranks) since the epoch started.
//
// Mode kNone prints nothing; gyre-train passes it on every rank but 0. Not thread-safe:
// the training thread only.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <string>

namespace gyre::train {

class Progress {
 public:
  enum class Mode { kNone, kBar, kLines };
  using Clock = std::chrono::steady_clock;

  // kBar on a terminal, else kLines (`enabled` false: kNone).
  static Mode modeFor(bool enabled, std::FILE* out);

  Progress(Mode mode, std::FILE* out, std::chrono::milliseconds every = std::chrono::seconds(10));

  void say(const std::string& what);
  // The epoch about to run (1-based) of `epochs`, with `steps` steps of `samplesPerStep`
  // global samples each.
  void startEpoch(size_t epoch, size_t epochs, size_t steps, size_t samplesPerStep);
  void step(size_t stepsDone);  // steps of this epoch done so far
  void clear();                 // erases the bar (a terminal), before other output

 private:
  std::string line(size_t stepsDone, double elapsed) const;

  const Mode mode_;
  std::FILE* const out_;
  const std::chrono::milliseconds every_;
  size_t epoch_ = 0, epochs_ = 0, steps_ = 0, samplesPerStep_ = 0;
  Clock::time_point epochStart_{}, lastDraw_{};
  bool drawn_ = false;  // a bar is on the terminal
};

}  // namespace gyre::train
