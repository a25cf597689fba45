#include "tools/train/trainer.h"

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "base/error.h"
#include "base/timeline.h"
#include "base/types.h"

namespace gyre::train {

namespace {

constexpr size_t kEvalChunk = 1000;  // test images per forward, as the peer

using Clock = std::chrono::steady_clock;

// The timeline's clock (CLOCK_MONOTONIC, base/timeline.h) in nanoseconds.
int64_t monotonicNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

double secondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Rank 0's integers on every rank: the others contribute zeros to a sum (exact).
void broadcastWords(Communicator& comm, std::vector<uint64_t>& words) {
  if (comm.size() == 1) return;
  if (comm.rank() != 0) std::fill(words.begin(), words.end(), 0);
  comm.allReduce(words.data(), words.data(), words.size(), DataType::kUint64, ReduceOp::kSum);
}

}  // namespace

void useOneBlasThread() {
#ifdef GYRE_HAVE_OPENBLAS
  openblas_set_num_threads(1);
#endif
}

Trainer::Trainer(Communicator& comm, const TrainConfig& config, const ImageSet& train,
                 const ImageSet& test, bool joining)
    : comm_(&comm),
      config_(config),
      train_(train),
      test_(test),
      model_(config.widths, config.seed, config.blockRows),
      sgd_(
          [&] {
            std::vector<size_t> counts;
            for (size_t i = 0; i < model_.numParams(); ++i)
              counts.push_back(model_.param(i).size());
            return counts;
          }(),
          config.lr, config.momentum),
      sampler_(train.count, comm.size(), comm.rank(), /*shuffle=*/true, config.seed,
               /*dropLast=*/false) {
  useOneBlasThread();
  if (config.batch == 0) fail(ErrorCode::kInvalidArgument, "batch size must be positive");
  if (train.features != model_.inputs() || test.features != model_.inputs()) {
    fail(ErrorCode::kInvalidArgument, "the data has {} features per sample, the model {} inputs",
         train.features, model_.inputs());
  }
  batchX_.resize(config.batch * model_.inputs());
  batchY_.resize(config.batch);
  dlogits_.resize(config.batch * model_.classes());
  buildSync(/*broadcastWeights=*/!joining);
}

void Trainer::buildSync(bool broadcastWeights) {
  // One GradSync entry per gradient block, gradients living in its arena (no copies);
  // the values pointers let it broadcast rank 0's initial weights.
  std::vector<GradSyncParam> entries;
  for (const GradBlock& b : model_.gradBlocks()) {
    entries.push_back({broadcastWeights ? model_.param(b.param).data() + b.begin : nullptr, nullptr,
                       b.end - b.begin});
  }
  GradSyncOptions options;
  options.bucketCapBytes = static_cast<size_t>(config_.bucketMb * (1 << 20));
  if (options.bucketCapBytes == 0) options.bucketCapBytes = 1;
  options.firstBucketCapBytes = std::min(options.firstBucketCapBytes, options.bucketCapBytes);
  dropSync();
  sync_ = std::make_unique<GradSync>(*comm_, std::move(entries), options);

  blockOfParam_.assign(model_.numParams(), 0);
  for (size_t k = model_.gradBlocks().size(); k-- > 0;) {
    blockOfParam_[model_.gradBlocks()[k].param] = k;
  }
  for (size_t p = 0; p < model_.numParams(); ++p) {
    float* first = sync_->gradient(blockOfParam_[p]).data();
    for (size_t k = blockOfParam_[p];
         k < model_.gradBlocks().size() && model_.gradBlocks()[k].param == p; ++k) {
      if (sync_->gradient(k).data() != first + model_.gradBlocks()[k].begin) {
        fail(ErrorCode::kInternal, "GradSync views of parameter {} are not contiguous", p);
      }
    }
    model_.bindGradient(p, {first, model_.param(p).size()});
  }
}

Trainer::~Trainer() = default;

void Trainer::resumeFrom(const std::string& path, bool warnOnNewSettings) {
  Checkpoint c;
  std::string error;
  // ok, epochsDone, samplerSeed, samplerEpoch
  std::vector<uint64_t> meta(4, 0);
  if (comm_->rank() == 0) {
    try {
      c = loadCheckpoint(path);
      if (c.widths.size() != config_.widths.size() ||
          !std::equal(c.widths.begin(), c.widths.end(), config_.widths.begin())) {
        fail(ErrorCode::kInvalidArgument, "checkpoint {} holds another model (widths differ)",
             path);
      }
      for (size_t p = 0; p < model_.numParams(); ++p) {
        if (c.params.size() != model_.numParams() || c.params[p].size() != model_.param(p).size() ||
            c.momentumBuffers[p].size() != model_.param(p).size()) {
          fail(ErrorCode::kInvalidArgument, "checkpoint {}: tensor {} has the wrong size", path, p);
        }
      }
      meta = {1, c.epochsDone, c.samplerSeed, c.samplerEpoch};
    } catch (const Error& e) {
      error = e.what();
    }
  }
  // Every rank learns whether rank 0 succeeded before anyone waits on the weights.
  broadcastWords(*comm_, meta);
  if (meta[0] != 1) {
    if (comm_->rank() == 0) fail(ErrorCode::kInvalidArgument, "{}", error);
    fail(ErrorCode::kRemoteError, "rank {}: rank 0 could not load checkpoint {}", comm_->rank(),
         path);
  }
  if (comm_->rank() == 0) {
    for (size_t p = 0; p < model_.numParams(); ++p) {
      std::copy(c.params[p].begin(), c.params[p].end(), model_.param(p).begin());
      std::copy(c.momentumBuffers[p].begin(), c.momentumBuffers[p].end(), sgd_.buffer(p).begin());
    }
    if (warnOnNewSettings &&
        (c.worldSize != static_cast<uint64_t>(comm_->size()) || c.batch != config_.batch ||
         c.lr != config_.lr || c.momentum != config_.momentum)) {
      std::fprintf(stderr,
                   "gyre-train: warning: checkpoint %s was made with world %llu batch %llu lr %g "
                   "momentum %g; continuing with world %d batch %zu lr %g momentum %g\n",
                   path.c_str(), static_cast<unsigned long long>(c.worldSize),
                   static_cast<unsigned long long>(c.batch), c.lr, c.momentum, comm_->size(),
                   config_.batch, config_.lr, config_.momentum);
    }
  }
  for (size_t p = 0; p < model_.numParams(); ++p) {
    broadcastFromRankZero(*comm_, model_.param(p));
    broadcastFromRankZero(*comm_, sgd_.buffer(p));
  }
  epochsDone_ = meta[1];
  sampler_.restore({meta[2], meta[3]});
}

void Trainer::saveTo(const std::string& path) const {
  if (comm_->rank() != 0) return;
  Checkpoint c;
  c.epochsDone = epochsDone_;
  c.samplerSeed = sampler_.state().seed;
  c.samplerEpoch = epochsDone_;
  c.worldSize = static_cast<uint64_t>(comm_->size());
  c.batch = config_.batch;
  c.lr = config_.lr;
  c.momentum = config_.momentum;
  c.seed = config_.seed;
  c.widths.assign(config_.widths.begin(), config_.widths.end());
  for (size_t p = 0; p < model_.numParams(); ++p) {
    c.params.emplace_back(model_.param(p).begin(), model_.param(p).end());
    c.momentumBuffers.emplace_back(sgd_.buffer(p).begin(), sgd_.buffer(p).end());
  }
  saveCheckpoint(path, c);
}

std::optional<EpochStats> Trainer::runEpoch() {
  for (;;) {
    try {
      return continueEpoch();
    } catch (const Error& e) {
      if (elastic_ == nullptr) throw;
      changeWorld(elastic_->shrinkAfter(e));  // rethrows what names no peer
      if (!inEpoch_ && epochsDone_ >= config_.epochs) return std::nullopt;
    }
  }
}

void Trainer::endRun() {
  for (;;) {
    try {
      if (elastic_ != nullptr) {
        if (std::unique_ptr<Communicator> next = elastic_->growIfWaiting())
          changeWorld(std::move(next));
        checkReplicasAgree();
      }
      comm_->barrier();
      return;
    } catch (const Error& e) {
      if (elastic_ == nullptr) throw;
      changeWorld(elastic_->shrinkAfter(e));
    }
  }
}

void Trainer::beginEpoch() {
  sampler_.setEpoch(epochsDone_);
  sync_->resetStats();
  comm_->barrier();
  epochList_ = sampler_.epochList();
  consumed_ = 0;
  stepInEpoch_ = 0;
  lossSum_ = 0;
  correct_ = 0;
  counted_ = 0;
  epochStart_ = Clock::now();
  inEpoch_ = true;
}

void Trainer::trainStep() {
  const size_t features = model_.inputs(), classes = model_.classes();
  const auto world = static_cast<size_t>(comm_->size());
  const auto rank = static_cast<size_t>(comm_->rank());
  // The step's slice of the epoch list; this rank's entries are at rank, rank+world, ...
  // (the list's rest is a multiple of the world, so every rank gets the same number).
  const size_t slice = std::min(config_.batch * world, epochList_.size() - consumed_);
  const size_t n = slice / world;
  // GYRE_TIMELINE: the step's parts as spans on this thread (forward, backward, the wait
  // in finish, the optimizer), beside GradSync's bucket all-reduces on its worker.
  Timeline* const timeline = Timeline::active();
  if (timeline && progress_ == 0) timeline->nameThisThread("training");
  const auto mark = [timeline](const char* name, int64_t& since, int64_t index) {
    if (!timeline) return;
    const int64_t now = monotonicNanos();
    TimelineArgs args;
    args.index = index;
    timeline->span(name, "train", since, now, args);
    since = now;
  };
  int64_t stepStart = timeline ? monotonicNanos() : 0;
  int64_t since = stepStart;
  for (size_t i = 0; i < n; ++i) {
    const size_t s = epochList_[consumed_ + rank + world * i];
    std::memcpy(&batchX_[i * features], &train_.pixels[s * features], features * sizeof(float));
    batchY_[i] = train_.labels[s];
  }
  const float* logits = model_.forward(batchX_.data(), n);
  const LossResult loss = softmaxCrossEntropy(logits, batchY_.data(), n, classes, dlogits_.data());
  const auto index = static_cast<int64_t>(stepInEpoch_);
  mark("forward", since, index);
  const auto ready = [this](size_t block) { sync_->markReady(block); };
  model_.backward(batchX_.data(), n, dlogits_.data(), /*accumulate=*/false, ready);
  mark("backward", since, index);
  sync_->finish();  // throws when an all-reduce failed: nothing of the step is applied
  mark("finish (wait for all-reduces)", since, index);
  for (size_t p = 0; p < model_.numParams(); ++p) sgd_.step(p, model_.param(p), model_.grad(p));
  mark("optimizer", since, index);
  mark("step", stepStart, index);
  lossSum_ += loss.loss * static_cast<double>(n);
  correct_ += loss.correct;
  counted_ += n;
  consumed_ += slice;
  ++stepInEpoch_;
  ++progress_;
}

EpochStats Trainer::continueEpoch() {
  if (!inEpoch_) beginEpoch();
  while (consumed_ < epochList_.size()) {
    trainStep();
    if (afterStep) afterStep(stepInEpoch_ - 1);
    if (elastic_ != nullptr) {
      if (std::unique_ptr<Communicator> next = elastic_->growIfWaiting())
        changeWorld(std::move(next));
    }
  }
  comm_->barrier();
  const double trainS = secondsSince(epochStart_);

  const GradSyncStats sync = sync_->stats();
  double totals[6] = {lossSum_,
                      static_cast<double>(correct_),
                      static_cast<double>(counted_),
                      sync.allReduceSeconds,
                      sync.hiddenSeconds,
                      sync.finishWaitSeconds};
  comm_->allReduce(totals, totals, 6, DataType::kFloat64, ReduceOp::kSum);
  EpochStats e;
  e.epoch = epochsDone_ + 1;
  e.trainLoss = totals[0] / totals[2];
  e.trainAcc = totals[1] / totals[2];
  e.samples = static_cast<size_t>(totals[2]);
  e.trainS = trainS;
  e.samplesPerS = totals[2] / trainS;
  const double world = comm_->size();
  e.commS = totals[3] / world;
  e.hiddenS = totals[4] / world;
  e.waitS = totals[5] / world;
  e.testAcc = evaluate();
  e.epochS = secondsSince(epochStart_);
  ++epochsDone_;
  ++progress_;
  inEpoch_ = false;
  return e;
}

void Trainer::dropSync() {
  model_.unbindGradients();  // they live in the GradSync's arena, freed with it
  sync_.reset();             // its worker is the only other user of the communicator
}

void Trainer::changeWorld(std::unique_ptr<Communicator> next) {
  dropSync();  // before the previous communicator goes
  comm_ = &elastic_->adopt(std::move(next));
  buildSync(/*broadcastWeights=*/false);
  agreeOnState();
}

void Trainer::joinRunning() { agreeOnState(); }

void Trainer::checkReplicasAgree() {
  // FNV-1a over the bytes of every parameter and momentum buffer.
  uint64_t hash = 0xcbf29ce484222325ull;
  const auto add = [&hash](std::span<const float> values) {
    const auto* bytes = reinterpret_cast<const unsigned char*>(values.data());
    for (size_t i = 0; i < values.size_bytes(); ++i) hash = (hash ^ bytes[i]) * 0x100000001b3ull;
  };
  for (size_t p = 0; p < model_.numParams(); ++p) {
    add(model_.param(p));
    add(sgd_.buffer(p));
  }
  uint64_t range[2] = {hash, ~hash};  // the smallest and (complemented) the largest hash
  comm_->allReduce(range, range, 2, DataType::kUint64, ReduceOp::kMin);
  if (range[0] != ~range[1]) {
    fail(ErrorCode::kInternal,
         "rank {}: after the changes of world the ranks' parameters differ (hash {:016x} here, "
         "{:016x} to {:016x} across the {} ranks): a bug in gyre-train's recovery, please "
         "report it",
         comm_->rank(), hash, range[0], ~range[1], comm_->size());
  }
  replicaHash_ = hash;
}

void Trainer::agreeOnState() {
  static_assert(sizeof(size_t) == sizeof(uint64_t), "the epoch list is sent as uint64");
  const int world = comm_->size(), rank = comm_->rank();
  // The rank furthest ahead, the lowest of them if several.
  uint64_t furthest = progress_;
  comm_->allReduce(&furthest, &furthest, 1, DataType::kUint64, ReduceOp::kMax);
  int64_t root = progress_ == furthest ? rank : world;
  comm_->allReduce(&root, &root, 1, DataType::kInt64, ReduceOp::kMin);
  const int from = static_cast<int>(root);
  uint64_t where[6] = {epochsDone_,  inEpoch_ ? 1u : 0u, consumed_,
                       stepInEpoch_, progress_,          epochList_.size()};
  comm_->broadcast(where, 6, DataType::kUint64, from);
  epochsDone_ = where[0];
  inEpoch_ = where[1] == 1;
  consumed_ = where[2];
  stepInEpoch_ = where[3];
  progress_ = where[4];
  epochList_.resize(where[5]);
  if (!epochList_.empty())
    comm_->broadcast(epochList_.data(), epochList_.size(), DataType::kUint64, from);
  for (size_t p = 0; p < model_.numParams(); ++p) {
    comm_->broadcast(model_.param(p).data(), model_.param(p).size(), DataType::kFloat32, from);
    comm_->broadcast(sgd_.buffer(p).data(), sgd_.buffer(p).size(), DataType::kFloat32, from);
  }
  // The sampler of the coming epochs, and the rest of this one padded for the new world.
  uint64_t samplerSeed = sampler_.state().seed;  // a resumed checkpoint's, else --seed
  comm_->broadcast(&samplerSeed, 1, DataType::kUint64, from);
  sampler_ = DistributedSampler(train_.count, world, rank, /*shuffle=*/true, samplerSeed,
                                /*dropLast=*/false);
  sampler_.restore({samplerSeed, epochsDone_});
  if (inEpoch_ && consumed_ < epochList_.size()) {
    const size_t rest = epochList_.size() - consumed_;
    const size_t padded = (rest + static_cast<size_t>(world) - 1) / static_cast<size_t>(world) *
                          static_cast<size_t>(world);
    for (size_t i = rest; i < padded; ++i) epochList_.push_back(epochList_[consumed_ + i % rest]);
  }
}

double Trainer::evaluate() {
  const size_t features = model_.inputs(), classes = model_.classes();
  std::vector<size_t> shard;
  for (size_t i = static_cast<size_t>(comm_->rank()); i < test_.count;
       i += static_cast<size_t>(comm_->size())) {
    shard.push_back(i);
  }
  std::vector<float> x(kEvalChunk * features);
  std::vector<uint8_t> y(kEvalChunk);
  double counts[2] = {0, static_cast<double>(shard.size())};
  for (size_t start = 0; start < shard.size(); start += kEvalChunk) {
    const size_t n = std::min(kEvalChunk, shard.size() - start);
    for (size_t i = 0; i < n; ++i) {
      std::memcpy(&x[i * features], &test_.pixels[shard[start + i] * features],
                  features * sizeof(float));
      y[i] = test_.labels[shard[start + i]];
    }
    counts[0] +=
        static_cast<double>(countCorrect(model_.forward(x.data(), n), y.data(), n, classes));
  }
  comm_->allReduce(counts, counts, 2, DataType::kFloat64, ReduceOp::kSum);
  return counts[1] > 0 ? counts[0] / counts[1] : 0.0;
}

}  // namespace gyre::train
