#include "ddp/grad_sync.h"

#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/error.h"
#include "base/log.h"
#include "base/timeline.h"
#include "base/types.h"

namespace gyre {

namespace {

// A steady_clock time as the timeline's CLOCK_MONOTONIC nanoseconds.
int64_t nanosOf(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

}  // namespace

std::vector<std::vector<size_t>> assignBuckets(const std::vector<size_t>& counts,
                                               size_t firstBucketCapBytes, size_t bucketCapBytes) {
  // DDP's compute_bucket_assignment_by_size: add, then close once the size reaches the
  // limit; the limit list is {first, cap, cap, ...}.
  std::vector<std::vector<size_t>> buckets;
  std::vector<size_t> current;
  size_t bytes = 0;
  size_t limit = firstBucketCapBytes;
  for (size_t i = counts.size(); i-- > 0;) {
    current.push_back(i);
    bytes += counts[i] * sizeof(float);
    if (bytes >= limit) {
      buckets.push_back(std::move(current));
      current.clear();
      bytes = 0;
      limit = bucketCapBytes;
    }
  }
  if (!current.empty()) buckets.push_back(std::move(current));
  return buckets;
}

void broadcastFromRankZero(Communicator& comm, std::span<float> data) {
  comm.broadcast(data.data(), data.size(), DataType::kFloat32, 0);
}

void broadcastParameters(Communicator& comm, const std::vector<std::span<float>>& params) {
  for (std::span<float> p : params) broadcastFromRankZero(comm, p);
}

GradSync::GradSync(Communicator& comm, std::vector<GradSyncParam> params, GradSyncOptions options)
    : comm_(comm), params_(std::move(params)) {
  std::vector<size_t> counts;
  std::vector<std::span<float>> values;
  size_t total = 0;
  for (const GradSyncParam& p : params_) {
    counts.push_back(p.count);
    offsets_.push_back(total);
    total += p.count;
    if (p.value != nullptr) values.emplace_back(p.value, p.count);
  }
  broadcastParameters(comm_, values);

  arena_.assign(total, 0.0f);
  bucketOf_.assign(params_.size(), 0);
  for (std::vector<size_t>& members :
       assignBuckets(counts, options.firstBucketCapBytes, options.bucketCapBytes)) {
    Bucket b;
    b.params = std::move(members);
    // Members are consecutive parameters, so their arena ranges are adjacent.
    const size_t lo = *std::min_element(b.params.begin(), b.params.end());
    const size_t hi = *std::max_element(b.params.begin(), b.params.end());
    b.offset = offsets_[lo];
    b.count = offsets_[hi] + counts[hi] - b.offset;
    b.unmarked = b.params.size();
    for (size_t i : b.params) bucketOf_[i] = buckets_.size();
    buckets_.push_back(std::move(b));
  }
  // Caller-owned gradients start in the arena as they are, like the views.
  for (size_t i = 0; i < params_.size(); ++i) {
    if (params_[i].grad != nullptr && params_[i].count > 0) {
      std::memcpy(&arena_[offsets_[i]], params_[i].grad, params_[i].count * sizeof(float));
    }
  }
  marked_.assign(params_.size(), false);
  worker_ = std::thread([this] { workerLoop(); });
}

// With more ranks than cores, every core is busy with backward compute, and a bucket's
// all-reduce advances only when all ranks' workers get a core: at the default priority
// they wait behind the compute threads' time slices and the all-reduce ends up after
// backward. A higher priority (lower nice) lets a woken worker preempt compute at
// once. Lowering nice needs CAP_SYS_NICE; without it the worker keeps the default.
void GradSync::raiseWorkerPriority() {
  const ThreadPriority want = comm_.options().syncPriority;
  const char* got = "normal";
  if (want == ThreadPriority::kAuto || want == ThreadPriority::kRealtime) {
    sched_param sp{};
    sp.sched_priority = 1;
    const int err = ::pthread_setschedparam(::pthread_self(), SCHED_FIFO, &sp);
    if (err == 0) {
      got = "realtime";
    } else {
      log(want == ThreadPriority::kRealtime ? LogLevel::kWarn : LogLevel::kInfo, comm_.rank(),
          "grad sync worker: SCHED_FIFO refused ({}): trying nice {}", std::strerror(err),
          kWorkerNice);
    }
  }
  if (want != ThreadPriority::kNormal && std::strcmp(got, "normal") == 0) {
    const pid_t tid = static_cast<pid_t>(::syscall(SYS_gettid));
    if (::setpriority(PRIO_PROCESS, static_cast<id_t>(tid), kWorkerNice) == 0) {
      got = "nice";
    } else {
      log(LogLevel::kInfo, comm_.rank(), "grad sync worker keeps the default priority: {}",
          std::strerror(errno));
    }
  }
  workerPriority_.store(got);
}

const char* GradSync::workerPriority() const {
  for (int i = 0; i < 5000; ++i) {
    if (const char* p = workerPriority_.load()) return p;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return "unknown";
}

GradSync::~GradSync() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  workAvailable_.notify_all();
  worker_.join();
}

std::span<float> GradSync::gradient(size_t i) {
  if (i >= params_.size()) {
    fail(ErrorCode::kInvalidArgument, "GradSync: parameter index {} out of range ({} parameters)",
         i, params_.size());
  }
  if (params_[i].grad != nullptr) return {params_[i].grad, params_[i].count};
  return {arena_.data() + offsets_[i], params_[i].count};
}

void GradSync::markReady(size_t i) {
  if (i >= params_.size()) {
    fail(ErrorCode::kInvalidArgument,
         "GradSync (rank {}): markReady({}) but only {} parameters are registered", comm_.rank(), i,
         params_.size());
  }
  if (!stepStarted_) {
    stepStarted_ = true;
    stepSyncs_ = syncEnabled_;
  }
  if (marked_[i]) {
    fail(ErrorCode::kInvalidArgument,
         "GradSync (rank {}): the gradient of parameter {} was marked ready twice in one step",
         comm_.rank(), i);
  }
  marked_[i] = true;
  ++markedCount_;
  if (!stepSyncs_) return;
  if (params_[i].grad != nullptr && params_[i].count > 0) {
    std::memcpy(&arena_[offsets_[i]], params_[i].grad, params_[i].count * sizeof(float));
  }
  if (--buckets_[bucketOf_[i]].unmarked == 0) launchReadyBuckets();
}

void GradSync::launchReadyBuckets() {
  size_t first = nextLaunch_;
  while (nextLaunch_ < buckets_.size() && buckets_[nextLaunch_].unmarked == 0) {
    stepLaunchOrder_.push_back(nextLaunch_++);
  }
  if (first == nextLaunch_) return;
  if (comm_.size() == 1) {
    // The average over one rank is the gradient itself: skip the worker round trip, which
    // costs more than the step's arithmetic on a small model.
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t b = first; b < nextLaunch_; ++b) {
      ++stats_.allReduces;
      stats_.bytes += buckets_[b].count * sizeof(float);
    }
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t b = first; b < nextLaunch_; ++b) queue_.push_back(b);
    launched_ += nextLaunch_ - first;
  }
  workAvailable_.notify_one();
}

void GradSync::workerLoop() {
  raiseWorkerPriority();
  Timeline* const timeline = Timeline::active();
  if (timeline) timeline->nameThisThread("GradSync worker");
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    workAvailable_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_ and nothing left to run
    const size_t b = queue_.front();
    queue_.pop_front();
    const bool failed = error_ != nullptr;
    lock.unlock();
    Interval interval{};
    std::exception_ptr error;
    if (!failed) {
      Bucket& bucket = buckets_[b];
      float* data = arena_.data() + bucket.offset;
      interval.start = Clock::now();
      try {
        comm_.allReduce(data, data, bucket.count, DataType::kFloat32, ReduceOp::kAvg);
      } catch (...) {
        error = std::current_exception();
      }
      interval.end = Clock::now();
      if (timeline) {
        // The communicator's allreduce span nests inside this one (same thread).
        TimelineArgs args;
        args.bytes = static_cast<int64_t>(bucket.count * sizeof(float));
        args.index = static_cast<int64_t>(b);
        timeline->span("bucket all-reduce", "ddp", nanosOf(interval.start), nanosOf(interval.end),
                       args);
      }
    }
    lock.lock();
    if (!failed) {
      intervals_.push_back(interval);
      if (error) {
        error_ = error;
      } else {
        ++stats_.allReduces;
        stats_.bytes += buckets_[b].count * sizeof(float);
      }
    }
    ++completed_;
    workDone_.notify_all();
  }
}

void GradSync::waitForLaunched(std::unique_lock<std::mutex>& lock) {
  workDone_.wait(lock, [this] { return completed_ == launched_; });
}

void GradSync::resetStep() {
  std::fill(marked_.begin(), marked_.end(), false);
  markedCount_ = 0;
  for (Bucket& b : buckets_) b.unmarked = b.params.size();
  nextLaunch_ = 0;
  stepStarted_ = false;
}

void GradSync::finish() {
  const Clock::time_point entered = Clock::now();
  const bool syncs = stepStarted_ ? stepSyncs_ : syncEnabled_;
  std::vector<size_t> unmarked;
  if (markedCount_ != params_.size()) {
    for (size_t i = 0; i < params_.size(); ++i) {
      if (!marked_[i]) unmarked.push_back(i);
    }
  }
  std::unique_lock<std::mutex> lock(mu_);
  waitForLaunched(lock);
  const Clock::time_point done = Clock::now();
  // Account this step's all-reduces: the part before `entered` overlapped the caller's
  // work (backward); the rest, and any queueing, the caller waited for.
  for (const Interval& iv : intervals_) {
    stats_.allReduceSeconds += std::chrono::duration<double>(iv.end - iv.start).count();
    const Clock::time_point hiddenEnd = std::min(iv.end, entered);
    if (hiddenEnd > iv.start) {
      stats_.hiddenSeconds += std::chrono::duration<double>(hiddenEnd - iv.start).count();
    }
  }
  intervals_.clear();
  if (syncs) {
    stats_.finishWaitSeconds += std::chrono::duration<double>(done - entered).count();
    ++stats_.steps;
  }
  launched_ = completed_ = 0;
  const std::exception_ptr error = error_;
  lock.unlock();

  const size_t launchedBuckets = nextLaunch_;
  resetStep();
  if (syncs) launchOrder_.swap(stepLaunchOrder_);  // a no_sync step launches nothing
  stepLaunchOrder_.clear();
  if (!unmarked.empty()) {
    std::string list;
    for (size_t k = 0; k < unmarked.size() && k < 16; ++k) {
      list += (k ? ", " : "") + std::to_string(unmarked[k]);
    }
    if (unmarked.size() > 16) list += ", ...";
    fail(ErrorCode::kInvalidArgument,
         "GradSync (rank {}): finish() but the gradient of parameter {} was never marked ready "
         "({} unmarked: {}); {} of {} buckets had been launched",
         comm_.rank(), unmarked.front(), unmarked.size(), list, launchedBuckets, buckets_.size());
  }
  if (error) std::rethrow_exception(error);
  if (!syncs) return;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (params_[i].grad != nullptr && params_[i].count > 0) {
      std::memcpy(params_[i].grad, &arena_[offsets_[i]], params_[i].count * sizeof(float));
    }
  }
}

GradSyncStats GradSync::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void GradSync::resetStats() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_ = GradSyncStats{};
}

}  // namespace gyre
