// StallInspector: what a rank knows while one of its collectives waits, what it tells
// its neighbours about it, and whom it blames when the wait times out.
//
// Why more than "the peer I wait for": on a ring, when rank s stops (SIGSTOP, a hung
// GPU, a straggler that never calls the collective), every other rank ends up waiting,
// each for its own left neighbour, and each would time out naming that neighbour: only
// rank s+1 would be right. So a waiting rank publishes what it waits for (PeerStatus
// kWaiting, through the pipes' status channel) and adopts the suspect of the peer it
// waits for when that peer waits too; the suspects converge, hop by hop, on the rank
// at the end of the chain of waits, the one that reports no wait of its own. Every rank
// then blames s, as Horovod's stall inspector would name the rank that has not arrived.
//
// - Beacon: once a wait has slept beaconAfter (min(1 s, timeout/4, stallWarn/2)), the
//   inspector publishes kWaiting {suspect, hops} to every pipe of the communicator, and
//   again whenever the suspect changes; kResumed as soon as a slice moves again. A chain
//   that comes back to this rank (every rank waits: a lost message) is cut: the suspect
//   is then the peer itself.
// - Stall report: once per collective, when a wait has lasted stallWarn (GYRE_STALL_WARN),
//   one WARN line: the call, how long, the peer awaited, bytes moved, and the suspect.
// - Blame: after a wait timed out, blame() gives the suspect and the story behind it.
//
// It also counts the bytes a collective has moved, for every error message, and mirrors
// them into the flight recorder's live counters (collectives/flight_recorder.h) so that a
// dump taken mid-collective shows them; with GYRE_TRACE_DIR set, the stall report also
// dumps the recorder.
//
// Threads: used only by the thread that runs the communicator's collectives (it is the
// WaitObserver of their waits; pipes call it from inside a wait).
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "base/timeline.h"
#include "collectives/collective.h"
#include "collectives/flight_recorder.h"
#include "transport/pipe.h"

namespace gyre {

class StallInspector final : public WaitObserver {
 public:
  StallInspector(int rank, int size, std::chrono::milliseconds stallWarn,
                 std::chrono::milliseconds timeout);

  // The pipes statuses are published on (every pipe of the communicator).
  void attach(std::vector<SendPipe*> send, std::vector<RecvPipe*> recv);
  // A pair connected after creation (ring/lazy_connector.h): watched from now on.
  void attachMore(SendPipe* send, RecvPipe* recv);

  // The recorder whose live byte counts this inspector keeps (null: none), and the
  // directory its stall reports dump it to ("" for none).
  void record(FlightRecorder* recorder, std::string dumpDir) {
    recorder_ = recorder;
    live_ = recorder ? recorder->live() : nullptr;
    dumpDir_ = std::move(dumpDir);
  }

  // Brackets one collective on this rank. With GYRE_TIMELINE set, end() writes its span
  // (base/timeline.h) and phase() the spans of the schedule's phases nested in it.
  void begin(const CollectiveCall& call);
  void end();
  void phase(const char* name) {
    if (timeline_ && name != phaseName_) nextPhase(name);
  }

  // Reported by the primitives: the peer of the pipe operation under way, and each
  // slice moved (which ends a published wait).
  void at(int peer) { peer_ = peer; }
  void sent(size_t bytes) {
    sent_ += bytes;
    if (live_) live_->sent.store(sent_, std::memory_order_relaxed);
    if (published_) resume();
  }
  void received(size_t bytes) {
    received_ += bytes;
    if (live_) live_->received.store(received_, std::memory_order_relaxed);
    if (published_) resume();
  }

  int peer() const { return peer_; }
  size_t bytesSent() const { return sent_; }
  size_t bytesReceived() const { return received_; }

  struct Blame {
    int suspect = -1;
    std::string story;  // why: what the awaited peer reported, if anything
  };
  // Whom the wait that just timed out points at.
  Blame blame() const;

  void waiting(int peer, const char* what, std::chrono::steady_clock::time_point since,
               const PeerStatus* status) override;

 private:
  void resume();
  void nextPhase(const char* name);
  void publish(const PeerStatus& status);
  // The suspect and chain length given the awaited peer and what it reported.
  std::pair<int, int> chain(int peer, const PeerStatus* status) const;

  const int rank_;
  const int size_;
  const std::chrono::milliseconds stallWarn_;
  const std::chrono::milliseconds beaconAfter_;
  std::vector<SendPipe*> sendPipes_;
  std::vector<RecvPipe*> recvPipes_;
  CollectiveCall call_;
  size_t sent_ = 0;
  size_t received_ = 0;
  int peer_ = -1;
  const char* what_ = "a slice";
  std::optional<PeerStatus> peerStatus_;  // what the awaited peer last reported
  bool published_ = false;                // a kWaiting of ours is out
  int publishedSuspect_ = -1;
  int publishedHops_ = 0;
  bool reported_ = false;  // the stall report of this collective is logged
  FlightRecorder* recorder_ = nullptr;
  FlightRecorder::Live* live_ = nullptr;
  std::string dumpDir_;
  Timeline* const timeline_;
  int64_t spanStart_ = 0, phaseStart_ = 0;
  const char* phaseName_ = nullptr;
};

}  // namespace gyre
