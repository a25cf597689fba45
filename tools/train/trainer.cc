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
                 const ImageSet& test)
    : comm_(comm),
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
  // One GradSync entry per gradient block, gradients living in its arena (no copies);
  // the values pointers let it broadcast rank 0's initial weights.
  std::vector<GradSyncParam> entries;
  for (const GradBlock& b : model_.gradBlocks()) {
    entries.push_back({model_.param(b.param).data() + b.begin, nullptr, b.end - b.begin});
  }
  GradSyncOptions options;
  options.bucketCapBytes = static_cast<size_t>(config.bucketMb * (1 << 20));
  if (options.bucketCapBytes == 0) options.bucketCapBytes = 1;
  options.firstBucketCapBytes = std::min(options.firstBucketCapBytes, options.bucketCapBytes);
  sync_ = std::make_unique<GradSync>(comm_, std::move(entries), options);

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
  if (comm_.rank() == 0) {
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
  broadcastWords(comm_, meta);
  if (meta[0] != 1) {
    if (comm_.rank() == 0) fail(ErrorCode::kInvalidArgument, "{}", error);
    fail(ErrorCode::kRemoteError, "rank {}: rank 0 could not load checkpoint {}", comm_.rank(),
         path);
  }
  if (comm_.rank() == 0) {
    for (size_t p = 0; p < model_.numParams(); ++p) {
      std::copy(c.params[p].begin(), c.params[p].end(), model_.param(p).begin());
      std::copy(c.momentumBuffers[p].begin(), c.momentumBuffers[p].end(), sgd_.buffer(p).begin());
    }
    if (warnOnNewSettings &&
        (c.worldSize != static_cast<uint64_t>(comm_.size()) || c.batch != config_.batch ||
         c.lr != config_.lr || c.momentum != config_.momentum)) {
      std::fprintf(stderr,
                   "gyre-train: warning: checkpoint %s was made with world %llu batch %llu lr %g "
                   "momentum %g; continuing with world %d batch %zu lr %g momentum %g\n",
                   path.c_str(), static_cast<unsigned long long>(c.worldSize),
                   static_cast<unsigned long long>(c.batch), c.lr, c.momentum, comm_.size(),
                   config_.batch, config_.lr, config_.momentum);
    }
  }
  for (size_t p = 0; p < model_.numParams(); ++p) {
    broadcastFromRankZero(comm_, model_.param(p));
    broadcastFromRankZero(comm_, sgd_.buffer(p));
  }
  epochsDone_ = meta[1];
  sampler_.restore({meta[2], meta[3]});
}

void Trainer::saveTo(const std::string& path) const {
  if (comm_.rank() != 0) return;
  Checkpoint c;
  c.epochsDone = epochsDone_;
  c.samplerSeed = sampler_.state().seed;
  c.samplerEpoch = epochsDone_;
  c.worldSize = static_cast<uint64_t>(comm_.size());
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

EpochStats Trainer::runEpoch() {
  const size_t features = model_.inputs(), classes = model_.classes();
  const size_t batch = config_.batch;
  sampler_.setEpoch(epochsDone_);
  sync_->resetStats();
  double lossSum = 0;
  size_t correct = 0;
  batchX_.resize(batch * features);
  batchY_.resize(batch);
  dlogits_.resize(batch * classes);
  const auto ready = [this](size_t block) { sync_->markReady(block); };

  comm_.barrier();
  const Clock::time_point t0 = Clock::now();
  const std::vector<size_t> order = sampler_.indices();
  // GYRE_TIMELINE: the step's parts as spans on this thread (forward, backward, the wait
  // in finish, the optimizer), beside GradSync's bucket all-reduces on its worker.
  Timeline* const timeline = Timeline::active();
  if (timeline && epochsDone_ == 0) timeline->nameThisThread("training");
  const auto mark = [timeline](const char* name, int64_t& since, int64_t index) {
    if (!timeline) return;
    const int64_t now = monotonicNanos();
    TimelineArgs args;
    args.index = index;
    timeline->span(name, "train", since, now, args);
    since = now;
  };
  size_t step = 0;
  for (size_t start = 0; start < order.size(); start += batch, ++step) {
    const size_t n = std::min(batch, order.size() - start);
    int64_t stepStart = timeline ? monotonicNanos() : 0;
    int64_t since = stepStart;
    for (size_t i = 0; i < n; ++i) {
      const size_t s = order[start + i];
      std::memcpy(&batchX_[i * features], &train_.pixels[s * features], features * sizeof(float));
      batchY_[i] = train_.labels[s];
    }
    const float* logits = model_.forward(batchX_.data(), n);
    const LossResult loss =
        softmaxCrossEntropy(logits, batchY_.data(), n, classes, dlogits_.data());
    const auto index = static_cast<int64_t>(step);
    mark("forward", since, index);
    model_.backward(batchX_.data(), n, dlogits_.data(), /*accumulate=*/false, ready);
    mark("backward", since, index);
    sync_->finish();
    mark("finish (wait for all-reduces)", since, index);
    for (size_t p = 0; p < model_.numParams(); ++p) sgd_.step(p, model_.param(p), model_.grad(p));
    mark("optimizer", since, index);
    mark("step", stepStart, index);
    lossSum += loss.loss * static_cast<double>(n);
    correct += loss.correct;
    if (afterStep) afterStep(step);
  }
  comm_.barrier();
  const double trainS = secondsSince(t0);
  ++epochsDone_;

  const GradSyncStats sync = sync_->stats();
  double totals[6] = {lossSum,
                      static_cast<double>(correct),
                      static_cast<double>(order.size()),
                      sync.allReduceSeconds,
                      sync.hiddenSeconds,
                      sync.finishWaitSeconds};
  comm_.allReduce(totals, totals, 6, DataType::kFloat64, ReduceOp::kSum);
  EpochStats e;
  e.epoch = epochsDone_;
  e.trainLoss = totals[0] / totals[2];
  e.trainAcc = totals[1] / totals[2];
  e.samples = static_cast<size_t>(totals[2]);
  e.trainS = trainS;
  e.samplesPerS = totals[2] / trainS;
  const double world = comm_.size();
  e.commS = totals[3] / world;
  e.hiddenS = totals[4] / world;
  e.waitS = totals[5] / world;
  e.testAcc = evaluate();
  e.epochS = secondsSince(t0);
  return e;
}

double Trainer::evaluate() {
  const size_t features = model_.inputs(), classes = model_.classes();
  std::vector<size_t> shard;
  for (size_t i = static_cast<size_t>(comm_.rank()); i < test_.count;
       i += static_cast<size_t>(comm_.size())) {
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
  comm_.allReduce(counts, counts, 2, DataType::kFloat64, ReduceOp::kSum);
  return counts[1] > 0 ? counts[0] / counts[1] : 0.0;
}

}  // namespace gyre::train
