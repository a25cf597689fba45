// gyre::train::Trainer: data-parallel training of the MLP on one rank of a communicator,
// the loop of a PyTorch DDP training script (DistributedSampler, DDP's bucketed gradient
// all-reduce, SGD with momentum) written against gyre.
//
// Per epoch: the DistributedSampler is set to the epoch; after a barrier the rank walks its
// shard in batches of `batch` (the last one partial), and for each: gather, forward,
// softmax cross-entropy (mean over the batch), backward from the top layer down marking
// each gradient block ready in GradSync (so its bucket's all-reduce overlaps the backward
// of the layers below), GradSync::finish (averaged gradients), SGD with momentum. A barrier
// ends the timed part. Train loss/accuracy are all-reduced sample-weighted, test accuracy is
// counted on the strided shard rank::world of the test set and all-reduced, as the peer does.
//
// All ranks start from rank 0's weights (GradSync broadcasts them at construction); with
// equal data and averaged gradients they stay bitwise identical. A checkpoint is written by
// rank 0; a resume is read by rank 0 and broadcast, so only rank 0 needs the file.
//
// Elastic (setElastic, under gyrerun --elastic): the communicator may change between
// and during steps. The rank visits its share of the epoch list step by step: step k of
// world W takes the slice [consumed, consumed + batch*W) of the epoch list, the rank the
// entries at offsets rank, rank+W, ... (exactly DistributedSampler's shard order while
// the world does not change). When an operation fails, the survivors shrink, and when
// newcomers wait (checked after every step), the ranks grow; after either, every rank
// takes the state of the rank furthest ahead (its parameters, momentum, epoch and
// position in the epoch list: a step is applied by a rank only once its all-reduces
// completed, and a rank can be at most one step ahead of another), the rest of the
// epoch list is padded to a multiple of the new world (as DistributedSampler pads), and
// the step that failed is done again by the new world. A failed step is never half
// applied. The epoch's train loss and accuracy then count the samples the final members
// saw. A newcomer (a rank gyrerun restarted) constructs its Trainer with
// `joining` = true and calls joinRunning() before its first epoch.
//
// Threads: one Trainer per rank, driven by one thread; it owns the GradSync (whose worker
// thread is the only other user of the communicator, during backward).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ring/communicator.h"
#include "ddp/distributed_sampler.h"
#include "ddp/grad_sync.h"
#include "tools/train/checkpoint.h"
#include "tools/train/elastic.h"
#include "tools/train/idx_reader.h"
#include "tools/train/mlp.h"
#include "tools/train/sgd.h"

namespace gyre::train {

struct TrainConfig {
  std::vector<size_t> widths = {784, 512, 256, 10};
  size_t epochs = 5;
  size_t batch = 64;  // per rank
  float lr = 0.05f;
  float momentum = 0.9f;
  uint64_t seed = 0;
  // Gradient buckets: DDP's rule (see ddp/grad_sync.h) with this cap; the first bucket's
  // cap is min(1 MiB, this).
  double bucketMb = 25;
  // Weight gradients are produced and registered in blocks of this many rows (0: whole),
  // so the bottom layer's large gradient can leave in pieces while the rest of it is
  // still being computed.
  size_t blockRows = 0;
};

struct EpochStats {
  size_t epoch = 0;  // 1-based, as printed
  double trainLoss = 0, trainAcc = 0, testAcc = 0;
  size_t samples = 0;  // global samples processed, padding included
  double samplesPerS = 0, trainS = 0, epochS = 0;
  // Gradient all-reduce time per rank (mean over ranks), the part of it that overlapped
  // backward, and the time the training thread waited in finish().
  double commS = 0, hiddenS = 0, waitS = 0;
  double hiddenFraction() const { return commS > 0 ? hiddenS / commS : 0.0; }
};

class Trainer {
 public:
  // `train` and `test` must outlive the Trainer. Collective: rank 0's initial weights
  // are broadcast, unless `joining` (a newcomer: joinRunning() brings the state).
  Trainer(Communicator& comm, const TrainConfig& config, const ImageSet& train,
          const ImageSet& test, bool joining = false);
  ~Trainer();

  // From now on failures of the communicator and waiting newcomers change the world
  // (above); `world` owns the communicator this Trainer was made with and must outlive it.
  void setElastic(ElasticWorld* world) { elastic_ = world; }
  // A newcomer's first collective: takes the running ranks' state (they call the same
  // after their grow). Then runEpoch() goes on where they are.
  void joinRunning();

  // Collective. Rank 0 reads `path`; everything is broadcast. Throws gyre::Error on every
  // rank if rank 0 cannot load it or it does not fit the model. Rank 0 warns when the
  // world, batch or optimizer settings differ from the checkpoint's (training goes on
  // with other settings) unless `warnOnNewSettings` is false (evaluation).
  void resumeFrom(const std::string& path, bool warnOnNewSettings = true);
  // Collective in effect (call on all ranks); only rank 0 writes.
  void saveTo(const std::string& path) const;

  // Runs the next epoch; collective. Elastic: after a change of world it goes on from
  // the state the ranks agreed on, which may be a later epoch than the call began (its
  // stats are returned), or no epoch at all when every one is done (nullopt).
  std::optional<EpochStats> runEpoch();
  // Collective: the run's last call (a barrier, so that no rank leaves while another may
  // still need it). Elastic: newcomers still waiting are taken in first, so that they
  // end with the others, every rank's parameters and momentum are checked to be
  // bitwise equal (kInternal naming the hashes if not), and a failure here shrinks and
  // tries again.
  void endRun();
  // The hash endRun() found equal on every rank (FNV-1a of parameters and momentum);
  // 0 before an elastic endRun().
  uint64_t replicaHash() const { return replicaHash_; }
  size_t epochsDone() const { return epochsDone_; }

  // Collective: the model's accuracy on the test set, each rank counting its strided
  // shard (rank::world), the counts all-reduced; the same at every world size.
  double evaluate();

  const Mlp& model() const { return model_; }
  const SgdMomentum& optimizer() const { return sgd_; }
  const GradSync& gradSync() const { return *sync_; }
  Communicator& comm() { return *comm_; }

  // Called after every optimizer step with the step's index in the epoch (tests use it to
  // compare ranks); it may use the communicator.
  std::function<void(size_t step)> afterStep;

 private:
  // The epoch's steps from where the rank is (elastic: again after a change).
  EpochStats continueEpoch();
  void beginEpoch();
  // One optimizer step over the next slice of the epoch list.
  void trainStep();
  // Builds the GradSync over comm_ and binds the model's gradients to its arena.
  void buildSync(bool broadcastWeights);
  // Ends the GradSync, the model's gradients moved out of its arena first.
  void dropSync();
  // Elastic: makes `next` the communicator and agrees on the state (joinRunning's part).
  void changeWorld(std::unique_ptr<Communicator> next);
  void agreeOnState();
  void checkReplicasAgree();

  Communicator* comm_;
  TrainConfig config_;
  const ImageSet& train_;
  const ImageSet& test_;
  Mlp model_;
  SgdMomentum sgd_;
  std::unique_ptr<GradSync> sync_;
  DistributedSampler sampler_;
  size_t epochsDone_ = 0;
  ElasticWorld* elastic_ = nullptr;
  uint64_t replicaHash_ = 0;
  // Where the rank is: inEpoch_ between beginEpoch and the epoch's end; the epoch list
  // (padded as DistributedSampler pads, again after a change of world) and how much of
  // it the steps so far consumed; progress_ counts completed steps and epochs (the rank
  // furthest ahead has the largest).
  bool inEpoch_ = false;
  std::vector<size_t> epochList_;
  size_t consumed_ = 0;
  size_t stepInEpoch_ = 0;
  uint64_t progress_ = 0;
  // This rank's part of the epoch's statistics.
  double lossSum_ = 0;
  size_t correct_ = 0, counted_ = 0;
  std::chrono::steady_clock::time_point epochStart_;
  std::vector<size_t> blockOfParam_;  // first gradient block of each parameter
  std::vector<float> batchX_, dlogits_;
  std::vector<uint8_t> batchY_;
};

// Sets the BLAS to one thread (the peer does the same; ranks share the cores).
void useOneBlasThread();

}  // namespace gyre::train
