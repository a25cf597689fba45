// IpcPeers: the ranks of one host sharing device memory through CUDA IPC, for the device
// collectives that run on the caller's stream (cuda/ipc_collectives.h).
//
// What it is: each rank allocates one device region (flag words, two staging slots for the
// collectives and one for point to point, each
// of slotBytes) and exports it (cudaIpcGetMemHandle); open() exchanges the handles over
// the host communicator and maps every peer's region (cudaIpcOpenMemHandle), so a rank's
// stream can read a peer's staging slots and write the peer's flag words. Cross-process
// order is by those words only: a rank's stream writes "round e is at step k" into each
// peer's region (cuStreamWriteValue32) and waits on its own region for the peers'
// (cuStreamWaitValue32, a cyclic >= as CU_STREAM_WAIT_VALUE_GEQ): the host thread never
// waits. Rounds (one per staging slot's worth of data) are numbered on every rank alike.
//
// Contract:
// - open() is collective over `host`, and gives every rank the same answer: an IpcPeers,
//   or null with the reason in *why (IPC not wanted, stream memory operations missing,
//   ranks on several hosts, a failed export or open on some rank). Nothing is left
//   mapped or allocated on null.
// - Rounds: nextRound() numbers a round (from 1); slot(round) is the staging slot it uses
//   (the two alternate, so a rank may run one round ahead of the slowest peer).
// - begin(stream) / end(stream) bracket one collective: begin makes `stream` wait for the
//   previous collective (of any stream) to end, so that collectives run in call order on
//   every rank; synchronize() blocks until the last one ended on the device.
// - Failures: a monitor thread watches the peers' processes (pidfd) and a word in a host
//   page every rank shares (abort() on any rank sets it). On a peer's exit or an abort it
//   reports once through onFailure, and from then on keeps writing release values into
//   every flag word its own streams wait on, so that no stream waits forever (their
//   results are unspecified). A peer that lives but never makes the call is waited for,
//   as NCCL does, until abort().
// - Destruction is collective: it waits for the device, unmaps the peers' regions,
//   meets the others over `host` (so no rank frees memory a peer still reads), and frees
//   its own. A failed host barrier (peer lost, aborted) is ignored.
// - Point to point: each region holds a third slot, the sender's; a chunk's sender copies
//   it there and signals kSent to the receiver only, whose stream copies it out and
//   signals kTaken back. The sender's next chunk (to any peer) first waits for that
//   kTaken, so one chunk per rank may be in flight without its receiver.
// Threads: the enqueueing calls from one thread at a time; abort() from any.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/error.h"

struct CUstream_st;
struct CUevent_st;

namespace gyre {

class Communicator;

class IpcPeers {
 public:
  // kReady, kReduced: the rounds of the collectives (signalled to every peer).
  // kSent, kTaken: point to point, per pair: the sender's p2p slot holds its chunk k /
  // the receiver has copied chunk k out of it.
  enum Step { kReady = 0, kReduced = 1, kSent = 2, kTaken = 3, kSteps = 4 };
  using FailureFn = std::function<void(ErrorCode code, const std::string& message)>;
  // The driver's cuStreamWaitValue32 / cuStreamWriteValue32 (StreamRelease found them).
  struct MemOps {
    void* wait = nullptr;
    void* write = nullptr;
  };

  // notWanted: "" to use IPC, else why this rank does not want it (still collective).
  static std::unique_ptr<IpcPeers> open(Communicator& host, int device, size_t slotBytes,
                                        MemOps memOps, const std::string& notWanted,
                                        FailureFn onFailure, std::string* why);
  ~IpcPeers();
  IpcPeers(const IpcPeers&) = delete;
  IpcPeers& operator=(const IpcPeers&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  size_t slotBytes() const { return slotBytes_; }

  uint32_t nextRound() { return round_.fetch_add(1) + 1; }
  static int slot(uint32_t round) { return static_cast<int>(round & 1u); }
  // Staging slot `s` of rank `owner` (this process's mapping of it).
  char* stage(int owner, int s) const;
  // The third slot, for point to point only: the chunk this rank sends (one at a time).
  char* p2pStage(int owner) const { return stage(owner, 2); }

  // Point-to-point chunk numbers, per pair, from 1: both sides count the same chunks when
  // their calls match. nextSent(peer) numbers the next chunk sent to peer, nextReceived
  // the next one received from it.
  uint32_t nextSent(int peer);
  uint32_t nextReceived(int peer);
  // The chunk this rank sent last and its peer (peer -1: none): the p2p slot is free again
  // once that peer has signalled kTaken for it.
  std::pair<int, uint32_t> lastSent() const { return lastSent_; }

  // On `stream`: write `round` into every peer's word for (step, from this rank).
  // Returns a CUDA/driver error code (0 = success) and the failing call in *call.
  int signalPeers(CUstream_st* stream, Step step, uint32_t round, const char** call);
  // On `stream`: write `value` into peer `to`'s word for (step, from this rank).
  int signalPeer(CUstream_st* stream, Step step, int to, uint32_t value, const char** call);
  // On `stream`: wait until peer `from` has signalled `step` for `round`.
  int waitPeer(CUstream_st* stream, Step step, int from, uint32_t round, const char** call);

  int begin(CUstream_st* stream, const char** call);
  int end(CUstream_st* stream, const char** call);
  int synchronize(const char** call);

  void abort();

 private:
  IpcPeers(Communicator& host, int device, size_t slotBytes, MemOps memOps, FailureFn onFailure);
  bool setUp(const std::string& notWanted, std::string* why);
  void tearDown() noexcept;
  char* flagWord(int owner, Step step, int from) const;
  void monitorMain();
  void releaseAll();

  Communicator& host_;
  const int device_;
  const int rank_;
  const int size_;
  const size_t slotBytes_;
  const MemOps memOps_;
  const FailureFn onFailure_;
  size_t flagBytes_ = 0;  // the flag words' part of each region

  std::vector<char*> regions_;  // per rank: its region (own: allocated, peers: mapped)
  std::vector<int> pids_;
  std::vector<int> pidfds_;
  std::atomic<uint32_t>* shared_ = nullptr;  // the host page's abort word: 0, or rank + 1
  int sharedFd_ = -1;
  int stopFd_ = -1;  // eventfd: the monitor ends
  CUstream_st* releaseStream_ = nullptr;
  CUevent_st* ended_ = nullptr;  // the last collective's end
  std::atomic<uint32_t> round_{0};
  std::vector<uint32_t> sent_, received_;  // per peer: p2p chunks numbered so far
  std::pair<int, uint32_t> lastSent_{-1, 0};
  std::atomic<uint32_t> p2pMax_{0};  // the largest p2p chunk number, for releaseAll
  std::atomic<bool> localAbort_{false};
  std::atomic<bool> failed_{false};
  bool tornDown_ = false;
  std::thread monitor_;
};

}  // namespace gyre
