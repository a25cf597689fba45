#include "tools/train/progress.h"

#include <unistd.h>

#include <algorithm>

#include <fmt/format.h>

namespace gyre::train {

namespace {

std::string clockText(double seconds) {
  const long s = static_cast<long>(seconds + 0.5);
  if (s >= 3600) return fmt::format("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60);
  return fmt::format("{}:{:02}", s / 60, s % 60);
}

}  // namespace

Progress::Mode Progress::modeFor(bool enabled, std::FILE* out) {
  if (!enabled) return Mode::kNone;
  return ::isatty(::fileno(out)) ? Mode::kBar : Mode::kLines;
}

Progress::Progress(Mode mode, std::FILE* out, std::chrono::milliseconds every)
    : mode_(mode), out_(out), every_(every) {}

void Progress::say(const std::string& what) {
  if (mode_ == Mode::kNone) return;
  clear();
  std::fprintf(out_, "gyre-train: %s\n", what.c_str());
  std::fflush(out_);
}

void Progress::startEpoch(size_t epoch, size_t epochs, size_t steps, size_t samplesPerStep) {
  epoch_ = epoch;
  epochs_ = epochs;
  steps_ = std::max<size_t>(steps, 1);
  samplesPerStep_ = samplesPerStep;
  epochStart_ = lastDraw_ = Clock::now();
}

std::string Progress::line(size_t stepsDone, double elapsed) const {
  const double done =
      static_cast<double>(std::min(stepsDone, steps_)) / static_cast<double>(steps_);
  const double rate = elapsed > 0 ? static_cast<double>(stepsDone * samplesPerStep_) / elapsed : 0;
  const double epochLeft = done > 0 ? elapsed * (1 - done) / done : 0;
  // The epochs after this one at this epoch's pace (evaluation not counted).
  const double runLeft =
      epochLeft + (done > 0 ? elapsed / done : 0) * static_cast<double>(epochs_ - epoch_);
  const std::string eta =
      done > 0 ? fmt::format("ETA {} (epoch), {} (run)", clockText(epochLeft), clockText(runLeft))
               : "ETA ?";
  if (mode_ == Mode::kLines) {
    return fmt::format("gyre-train: epoch {}/{} {:.0f}% ({}/{} steps) {:.0f} samples/s {}", epoch_,
                       epochs_, done * 100, stepsDone, steps_, rate, eta);
  }
  constexpr int kWidth = 30;
  const int filled = static_cast<int>(done * kWidth);
  std::string bar(static_cast<size_t>(filled), '=');
  if (filled < kWidth) bar += '>';
  bar.resize(kWidth, ' ');
  return fmt::format("epoch {}/{} [{}] {:3.0f}%  {:.0f} samples/s  {}", epoch_, epochs_, bar,
                     done * 100, rate, eta);
}

void Progress::step(size_t stepsDone) {
  if (mode_ == Mode::kNone) return;
  const auto now = Clock::now();
  const auto interval = mode_ == Mode::kBar ? std::chrono::milliseconds(200) : every_;
  if (now - lastDraw_ < interval && stepsDone < steps_) return;
  if (mode_ == Mode::kLines && stepsDone >= steps_) return;  // the epoch line follows
  lastDraw_ = now;
  const double elapsed = std::chrono::duration<double>(now - epochStart_).count();
  if (mode_ == Mode::kBar) {
    std::fprintf(out_, "\r\033[K%s", line(stepsDone, elapsed).c_str());
    drawn_ = true;
  } else {
    std::fprintf(out_, "%s\n", line(stepsDone, elapsed).c_str());
  }
  std::fflush(out_);
}

void Progress::clear() {
  if (!drawn_) return;
  std::fprintf(out_, "\r\033[K");
  std::fflush(out_);
  drawn_ = false;
}

}  // namespace gyre::train
