// gyre::train::ElasticWorld: the communicator of a gyre-train run under gyrerun --elastic,
// which changes when a rank fails (shrink) or a restarted one comes back (grow).
//
// Contract: it owns the current communicator. After an operation on it failed,
// shrinkAfter() makes the survivors' communicator (the rank the failure named excluded;
// ShrinkMode::kAbort, so the failed one's pending operations end first), or rethrows the
// failure when it names no peer (this rank's own error: nothing to exclude). Between
// steps, growIfWaiting() asks the ranks (one small all-reduce) how many newcomers wait
// and, if any, makes the grown communicator. Either result becomes current only through
// adopt(), which destroys the previous one: the caller first stops everything that uses
// it (the Trainer destroys its GradSync). One failure at a time: a rank that fails while
// the survivors shrink ends the run with that error (shrink names it).
//
// Messages: each change is reported on stderr by the new communicator's rank 0, with
// how long it took ("gyre-train: rank 2 failed (...): 3 ranks go on (shrink 41 ms)").
// Threads: the training thread only.
#pragma once

#include <memory>

#include "base/error.h"
#include "ring/communicator.h"

namespace gyre::train {

class ElasticWorld {
 public:
  explicit ElasticWorld(std::unique_ptr<Communicator> comm);

  Communicator& comm() { return *comm_; }

  std::unique_ptr<Communicator> shrinkAfter(const Error& failure);
  std::unique_ptr<Communicator> growIfWaiting();
  Communicator& adopt(std::unique_ptr<Communicator> next);

  // Changes so far (for the run's summary).
  int shrinks() const { return shrinks_; }
  int grows() const { return grows_; }

 private:
  std::unique_ptr<Communicator> comm_;
  int shrinks_ = 0, grows_ = 0;
};

}  // namespace gyre::train
