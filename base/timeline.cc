#include "base/timeline.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "base/log.h"
#include "base/options.h"

namespace gyre {

namespace {

int threadId() {
  thread_local const int tid = static_cast<int>(::syscall(SYS_gettid));
  return tid;
}

int64_t nowNs(bool unix) {
  auto d = unix ? std::chrono::system_clock::now().time_since_epoch()
                : std::chrono::steady_clock::now().time_since_epoch();
  return std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
}

void flushAtExit() {
  if (Timeline* t = Timeline::active()) t->flush();
}

}  // namespace

Timeline* Timeline::active() {
  static Timeline* const timeline = [] {
    const std::string& path = globalOptions().timeline;
    if (path.empty()) return static_cast<Timeline*>(nullptr);
    std::atexit(flushAtExit);
    return new Timeline(path);  // lives until exit: spans may come from any thread
  }();
  return timeline;
}

Timeline::Timeline(std::string pathPattern) : pattern_(std::move(pathPattern)) {}

void Timeline::bindRank(int rank) {
  std::lock_guard<std::mutex> lock(mu_);
  if (rank_ < 0) rank_ = rank;
}

void Timeline::span(const char* name, const char* category, int64_t startNs, int64_t endNs,
                    const TimelineArgs& args) {
  const int tid = threadId();
  std::lock_guard<std::mutex> lock(mu_);
  if (events_.capacity() == 0) events_.reserve(kCapacity);
  if (events_.size() == kCapacity) {
    ++dropped_;
    return;
  }
  events_.push_back(Event{name, category, startNs, endNs, tid, args});
}

void Timeline::nameThisThread(const char* name) {
  const int tid = threadId();
  std::lock_guard<std::mutex> lock(mu_);
  threadNames_.emplace_back(tid, name);
}

std::string Timeline::path() const {
  const std::string r = std::to_string(rank_);
  std::string p = pattern_;
  if (size_t at = p.find("{rank}"); at != std::string::npos) return p.replace(at, 6, r);
  const std::string json = ".json";
  if (p.size() > json.size() && p.compare(p.size() - json.size(), json.size(), json) == 0) {
    return p.insert(p.size() - json.size(), ".rank" + r);
  }
  return p + ".rank" + r + ".json";
}

std::string Timeline::flush() {
  std::lock_guard<std::mutex> lock(mu_);
  if (rank_ < 0) return "";
  const int pid = rank_;
  std::string out = "{\"traceEvents\": [\n";
  out += fmt::format(
      "{{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": {0}, \"args\": {{\"name\": \"rank "
      "{0}\"}}}}",
      pid);
  for (const auto& [tid, name] : threadNames_) {
    out += fmt::format(
        ",\n{{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": {}, \"tid\": {}, \"args\": "
        "{{\"name\": \"{}\"}}}}",
        pid, tid, name);
  }
  for (const Event& e : events_) {
    std::string args;
    auto add = [&](const std::string& field) { args += (args.empty() ? "" : ", ") + field; };
    if (e.args.bytes >= 0) add(fmt::format("\"bytes\": {}", e.args.bytes));
    if (e.args.seq >= 0) add(fmt::format("\"seq\": {}", e.args.seq));
    if (e.args.index >= 0) add(fmt::format("\"index\": {}", e.args.index));
    if (e.args.algorithm) add(fmt::format("\"algorithm\": \"{}\"", e.args.algorithm));
    out += fmt::format(
        ",\n{{\"name\": \"{}\", \"cat\": \"{}\", \"ph\": \"X\", \"pid\": {}, \"tid\": {}, "
        "\"ts\": {:.3f}, \"dur\": {:.3f}, \"args\": {{{}}}}}",
        e.name, e.category, pid, e.tid, static_cast<double>(e.startNs) / 1e3,
        static_cast<double>(e.endNs - e.startNs) / 1e3, args);
  }
  out += fmt::format(
      "\n], \"displayTimeUnit\": \"ms\", \"otherData\": {{\"schema\": \"gyre-timeline\", "
      "\"version\": 1, \"rank\": {}, \"clock\": {{\"monotonic_ns\": {}, \"unix_ns\": {}}}, "
      "\"dropped\": {}}}}}\n",
      rank_, nowNs(false), nowNs(true), dropped_);
  const std::string file = path();
  const std::string tmp = file + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  bool ok = f != nullptr && std::fwrite(out.data(), 1, out.size(), f) == out.size();
  if (f != nullptr) ok = std::fclose(f) == 0 && ok;
  if (!ok || std::rename(tmp.c_str(), file.c_str()) != 0) {
    log(LogLevel::kWarn, rank_, "GYRE_TIMELINE: cannot write {}: {}", file, std::strerror(errno));
    std::remove(tmp.c_str());
    return "";
  }
  return file;
}

}  // namespace gyre
