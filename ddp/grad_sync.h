// gyre::GradSync: data-parallel gradient synchronisation, what PyTorch DDP's Reducer
// does for a trainer: gradients packed into buckets, each bucket all-reduced (averaged)
// as soon as backward has produced all of it, overlapping communication with the rest of
// backward.
//
// Parameters and buckets. The caller registers its parameters in parameter order (the
// order of the model's parameters(), as DDP). Buckets are formed as DDP forms them, in
// reverse parameter order (the order backward produces gradients): parameters are added
// to the current bucket until its size reaches the cap, the first bucket's cap being
// firstBucketCapBytes (DDP: 1 MiB), the others bucketCapBytes (DDP: 25 MiB); a bucket may
// exceed its cap by its last parameter. All gradients live in one arena allocated once,
// laid out in parameter order, so every bucket is one contiguous range of it and is
// all-reduced in place as one flat buffer. A parameter registered without a gradient
// pointer has its gradient *in* the arena (DDP's gradient_as_bucket_view: backward writes
// into gradient(i), no copies); consecutive such parameters are back to back, so a caller
// may register one tensor as several pieces. A parameter registered with a gradient
// pointer is copied into the arena by markReady() and the average copied back by finish().
//
// One step: markReady(i) for every parameter (any order, each once), then finish(). When
// the last gradient of a bucket is marked, the bucket is ready; ready buckets are launched
// strictly in bucket order (a bucket that is ready early waits for the ones before it), so
// every rank issues the same all-reduces in the same order whatever order backward marks
// gradients in. An all-reduce is ReduceOp::kAvg: the division by the world size is fused
// into the reduction (a world of one has nothing to average and issues none). finish()
// waits for every bucket and leaves the averaged gradients in gradient(i). A gradient
// marked twice in a step, or finish() before every gradient was marked, throws
// gyre::Error(kInvalidArgument) naming the parameter index; buckets already launched are
// completed first. A failed all-reduce is rethrown by finish() (the communicator's error
// names the rank, the peer and the collective), and by every later finish().
//
// no_sync: while a NoSync guard lives (or setSyncEnabled(false)), steps do no
// communication: markReady/finish only check the marks, so gradients accumulate locally
// (the caller adds into them); the first synchronised step then averages the sums.
//
// Threads: markReady(), finish() and the rest are called from one thread (the training
// thread). GradSync owns one worker thread that runs the bucket all-reduces in launch
// order; it is the only thread that uses the communicator from the first markReady() of a
// step until finish() returns, so the caller must not call the communicator in between
// (communicators forbid concurrent calls). Parameters are broadcast from rank 0 at
// construction on the caller's thread. The destructor joins the worker; the
// communicator must outlive the GradSync. The worker raises its scheduling priority as
// the communicator's Options.syncPriority says (GYRE_SYNC_PRIORITY; by default SCHED_FIFO
// where permitted, else nice -10): with more ranks than cores it must preempt backward
// compute to overlap with it (docs/training.md has the hidden fractions).
// workerPriority() says what it got.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "ring/communicator.h"

namespace gyre {

struct GradSyncOptions {
  size_t bucketCapBytes = size_t{25} << 20;      // DDP's bucket_cap_mb = 25
  size_t firstBucketCapBytes = size_t{1} << 20;  // DDP's _DEFAULT_FIRST_BUCKET_BYTES
};

// One registered parameter: `count` float32 values on the host.
struct GradSyncParam {
  float* value = nullptr;  // broadcast from rank 0 at construction (null: not broadcast)
  float* grad = nullptr;   // null: the gradient lives in the bucket arena (no copies)
  size_t count = 0;
};

// Time spent in gradient all-reduces since construction or resetStats().
struct GradSyncStats {
  size_t steps = 0;              // synchronised steps (finish() calls outside no_sync)
  size_t allReduces = 0;         // bucket all-reduces completed
  size_t bytes = 0;              // bytes all-reduced
  double allReduceSeconds = 0;   // worker time inside allReduce
  double hiddenSeconds = 0;      // of it, while the caller had not yet called finish()
  double finishWaitSeconds = 0;  // caller time blocked in finish(): the exposed part
  // hiddenSeconds / allReduceSeconds (0 when nothing was all-reduced).
  double fractionHidden() const {
    return allReduceSeconds > 0 ? hiddenSeconds / allReduceSeconds : 0.0;
  }
};

// DDP's bucket assignment: parameters in reverse order, `counts` float32 elements each.
// Returns buckets in launch order, each listing parameter indices in the order added.
std::vector<std::vector<size_t>> assignBuckets(const std::vector<size_t>& counts,
                                               size_t firstBucketCapBytes, size_t bucketCapBytes);

// data := rank 0's data on every rank, bit for bit (Communicator::broadcast; it moves
// the data once around the ring, where the earlier all-reduce stand-in moved it twice).
void broadcastFromRankZero(Communicator& comm, std::span<float> data);

// Broadcasts every buffer from rank 0 (DDP does this for the module's state at
// construction, so all ranks start from the same weights).
void broadcastParameters(Communicator& comm, const std::vector<std::span<float>>& params);

class GradSync {
 public:
  GradSync(Communicator& comm, std::vector<GradSyncParam> params, GradSyncOptions options = {});
  ~GradSync();
  GradSync(const GradSync&) = delete;
  GradSync& operator=(const GradSync&) = delete;

  size_t numParams() const { return params_.size(); }
  // Where parameter i's gradient is read from and its average left: the arena view, or
  // the caller's buffer for a parameter registered with one.
  std::span<float> gradient(size_t i);

  size_t numBuckets() const { return buckets_.size(); }
  // Parameter indices of bucket b, in the order they were added (reverse parameter order).
  const std::vector<size_t>& bucketParams(size_t b) const { return buckets_[b].params; }
  size_t bucketBytes(size_t b) const { return buckets_[b].count * sizeof(float); }

  void markReady(size_t i);
  void finish();

  // RAII no_sync: steps inside its lifetime accumulate locally and do not communicate.
  class NoSync {
   public:
    explicit NoSync(GradSync& sync) : sync_(sync), previous_(sync.syncEnabled()) {
      sync_.setSyncEnabled(false);
    }
    ~NoSync() { sync_.setSyncEnabled(previous_); }
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    GradSync& sync_;
    bool previous_;
  };
  // Takes effect from the next step: a step's mode is fixed by its first markReady().
  void setSyncEnabled(bool enabled) { syncEnabled_ = enabled; }
  bool syncEnabled() const { return syncEnabled_; }

  // Buckets in the order the last synchronised step launched them (for tests and logs).
  const std::vector<size_t>& lastLaunchOrder() const { return launchOrder_; }

  // What the worker thread got: "realtime" (SCHED_FIFO 1), "nice" (nice -10) or "normal";
  // waits (bounded, 5 s) for the worker to have set it.
  const char* workerPriority() const;

  GradSyncStats stats() const;
  void resetStats();

 private:
  using Clock = std::chrono::steady_clock;
  struct Bucket {
    std::vector<size_t> params;
    size_t offset = 0;  // in the arena, floats
    size_t count = 0;
    size_t unmarked = 0;  // this step
  };
  struct Interval {
    Clock::time_point start, end;
  };

  void workerLoop();
  void raiseWorkerPriority();
  static constexpr int kWorkerNice = -10;
  std::atomic<const char*> workerPriority_{nullptr};
  void launchReadyBuckets();
  // Waits until the worker has finished every launched bucket.
  void waitForLaunched(std::unique_lock<std::mutex>& lock);
  void resetStep();

  Communicator& comm_;
  std::vector<GradSyncParam> params_;
  std::vector<size_t> offsets_;   // per parameter, in the arena
  std::vector<size_t> bucketOf_;  // per parameter
  std::vector<Bucket> buckets_;
  std::vector<float> arena_;
  std::vector<bool> marked_;
  size_t markedCount_ = 0;
  size_t nextLaunch_ = 0;
  bool syncEnabled_ = true;
  bool stepStarted_ = false;
  bool stepSyncs_ = true;  // the mode of the step in progress
  std::vector<size_t> stepLaunchOrder_, launchOrder_;

  // Shared with the worker, under mu_.
  mutable std::mutex mu_;
  std::condition_variable workAvailable_, workDone_;
  std::deque<size_t> queue_;
  size_t launched_ = 0, completed_ = 0;  // this step
  std::vector<Interval> intervals_;      // this step's all-reduces
  std::exception_ptr error_;
  bool stop_ = false;
  GradSyncStats stats_;

  std::thread worker_;
};

}  // namespace gyre
