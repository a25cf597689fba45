// StreamRelease: makes a CUDA stream wait, on the GPU, until the library's worker thread
// releases a sequence number, so that the caller's thread never blocks.
//
// Contract:
// - The constructor allocates a 4-byte device flag (0) and, when `preferMemOps`, looks up
//   cuStreamWaitValue32 / cuStreamWriteValue32 at run time (nothing links libcuda, so
//   programs start without a driver) and tries both on `copyStream`. Where that fails,
//   streams wait through a host function instead (usesMemOps() is then false). Throws
//   gyre::Error(kSystemError) naming the CUDA call when the flag cannot be made.
// - holdUntil(stream, seq): enqueues on `stream` a wait until `seq` is released (a cyclic
//   32-bit comparison, as CU_STREAM_WAIT_VALUE_GEQ; seq counts from 1). Returns at once.
// - release(seq): the worker's side. With stream memory operations, a flag write is
//   enqueued on copyStream, so waiting streams go on once copyStream's earlier work (the
//   result's copies) is done. Without, the calling (worker) thread waits for copyStream,
//   then wakes the host functions. Never throws: a stream left waiting would hang its
//   program, so every collective, failed or not, must end in release().
// - waitReleased(seq) blocks the calling thread until release(seq) has run.
// - Destruction: the device must be idle (nothing may still wait on the flag).
// Threads: holdUntil from one thread, release from another, waitReleased from any.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>

struct CUstream_st;
struct CUevent_st;

namespace gyre {

class StreamRelease {
 public:
  StreamRelease(CUstream_st* copyStream, bool preferMemOps, int rank);
  ~StreamRelease();
  StreamRelease(const StreamRelease&) = delete;
  StreamRelease& operator=(const StreamRelease&) = delete;

  bool usesMemOps() const { return waitValue_ != nullptr; }
  // The driver's cuStreamWaitValue32 / cuStreamWriteValue32 when usesMemOps(), else null.
  void* waitValueFn() const { return waitValue_; }
  void* writeValueFn() const { return writeValue_; }
  // Returns the CUDA error code (0 = success) and the call that failed in `call`.
  int holdUntil(CUstream_st* stream, uint32_t seq, const char** call);
  void release(uint32_t seq);
  void waitReleased(uint32_t seq);

 private:
  struct Waiter {
    StreamRelease* self;
    uint32_t seq;
  };
  static void hostWait(void* arg);
  unsigned long long flagAddress() const;
  void findMemOps();

  CUstream_st* const copyStream_;
  const int rank_;
  uint32_t* flag_ = nullptr;  // device memory: the last released sequence number
  CUevent_st* copied_ = nullptr;
  void* waitValue_ = nullptr;  // the driver's functions; null: host functions
  void* writeValue_ = nullptr;

  std::mutex mu_;
  std::condition_variable cv_;
  uint32_t released_ = 0;
};

// Cyclic "a >= b" on 32-bit sequence numbers, as CU_STREAM_WAIT_VALUE_GEQ compares.
inline bool seqReached(uint32_t a, uint32_t b) { return static_cast<int32_t>(a - b) >= 0; }

}  // namespace gyre
