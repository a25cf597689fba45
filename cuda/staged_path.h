// StagedPath: CudaCommunicator's collectives staged through pinned host memory, run by a
// worker thread of its own on the host Communicator (cuda/cuda_communicator.h).
//
// Contract:
// - Each call enqueues: `stream` records a ready event and waits for the call's release
//   (StreamRelease); the worker waits for the event, moves the buffers through the pinned
//   slots on its copy stream, round by round, runs the host collective on each round
//   (stagedRounds in staged_path.cc) and releases `stream`. Arguments are checked by the
//   caller (cuda/device_call_checks.h); a slot too small for one round throws
//   gyre::Error(kInvalidArgument) from the call.
// - A failure on the worker goes to StagedFailures::record, naming the call; the stream
//   is still released. Once StagedFailures::failed(), later calls fail with kAborted.
// - Threads: the calls from one thread; the worker runs them in order. stop() (and the
//   destructor) finishes the queued calls first; destruction waits for the device.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/error.h"
#include "base/types.h"
#include "cuda/cuda_communicator.h"

struct CUevent_st;

namespace gyre {

class Communicator;
class StreamRelease;

// Where the worker's failures go: the communicator's record of its first failure.
class StagedFailures {
 public:
  virtual ~StagedFailures() = default;
  virtual bool failed() const = 0;
  virtual std::string firstError() = 0;
  virtual void record(ErrorCode code, const std::string& message) = 0;
};

class StagedPath {
 public:
  // Allocates the copy stream, the pinned slots, the ready events and the release on
  // `device` (current in the calling thread); throws kSystemError naming the CUDA call.
  StagedPath(Communicator& host, const CudaOptions& options, int device, StagedFailures& failures);
  ~StagedPath();
  StagedPath(const StagedPath&) = delete;
  StagedPath& operator=(const StagedPath&) = delete;

  void start();  // the worker thread
  void stop();   // finishes the queued calls, joins the worker
  StreamRelease& release() { return *release_; }
  size_t slotCount() const { return slots_.size(); }

  // `seq` numbers the call (StreamRelease's sequence), `what` names it in errors.
  void allReduce(const void* sendbuf, void* recvbuf, size_t count, DataType dtype, ReduceOp op,
                 uint32_t seq, const std::string& what, CUstream_st* stream);
  void allGather(const void* sendbuf, void* recvbuf, size_t count, DataType dtype, uint32_t seq,
                 const std::string& what, CUstream_st* stream);
  void reduceScatter(const void* sendbuf, void* recvbuf, size_t count, DataType dtype, ReduceOp op,
                     uint32_t seq, const std::string& what, CUstream_st* stream);
  void broadcast(void* buffer, size_t count, DataType dtype, int root, uint32_t seq,
                 const std::string& what, CUstream_st* stream);
  void allToAll(const void* sendbuf, void* recvbuf, size_t count, DataType dtype, uint32_t seq,
                const std::string& what, CUstream_st* stream);
  // Counts and displacements in elements, size() entries each; `local`: this rank's
  // largest block (the rounds are the largest of any rank's).
  void allToAllv(const void* sendbuf, std::vector<size_t> sendCounts, std::vector<size_t> sendDispls,
                 void* recvbuf, std::vector<size_t> recvCounts, std::vector<size_t> recvDispls,
                 size_t local, DataType dtype, uint32_t seq, const std::string& what,
                 CUstream_st* stream);
  // A peer of -1 (or a count of 0) leaves that direction out.
  void sendRecv(const void* sendbuf, size_t sendCount, int sendPeer, void* recvbuf,
                size_t recvCount, int recvPeer, DataType dtype, uint32_t seq,
                const std::string& what, CUstream_st* stream);
  void barrier(uint32_t seq, const std::string& what, CUstream_st* stream);

  // Blocks until call `seq` and everything before it is released and copied back.
  void synchronize(uint32_t seq);

 private:
  struct Slot {
    void* host = nullptr;          // pinned, sliceBytes
    CUevent_st* landed = nullptr;  // its device-to-host copy is complete
  };
  struct Call {
    uint32_t seq = 0;
    size_t ring = 0;            // index into the ready events
    std::string what;           // names the call in errors
    std::function<void()> run;  // on the worker
  };

  void enqueue(uint32_t seq, const std::string& what, CUstream_st* stream, std::function<void()> run);
  void workerMain();
  void freeRingEntry();
  void destroyResources() noexcept;
  size_t perRound(const std::string& what, size_t unit) const;
  template <typename In, typename Host, typename Out>
  void stagedRounds(size_t total, size_t per, const char* landed, const std::string& what, In in,
                    Host host, Out out);
  void copy(void* dst, const void* src, size_t bytes, int kind, const char* call,
            const std::string& what);
  void d2h(void* dst, const void* src, size_t bytes, const std::string& what);
  void h2d(void* dst, const void* src, size_t bytes, const std::string& what);
  void d2hBlocks(char* slot, size_t slotStride, const char* src, size_t srcStride, size_t bytes,
                 const std::string& what);
  void h2dBlocks(char* dst, size_t dstStride, const char* slot, size_t slotStride, size_t bytes,
                 const std::string& what);

  Communicator& host_;  // the worker's alone after construction
  const CudaOptions options_;
  const int rank_;
  const size_t size_;
  const int device_;
  StagedFailures& failures_;
  CUstream_st* copyStream_ = nullptr;
  std::vector<Slot> slots_;
  std::vector<CUevent_st*> ready_;  // per ring entry: the caller's stream reached the call
  std::unique_ptr<StreamRelease> release_;

  std::mutex mu_;  // guards what follows
  std::condition_variable workCv_, spaceCv_;
  std::vector<Call> ring_;
  size_t head_ = 0, tail_ = 0;  // ring_[head_..tail_) waits for the worker
  bool stop_ = false;
  std::thread worker_;
};

}  // namespace gyre
