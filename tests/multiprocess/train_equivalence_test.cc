// Data-parallel training is the same computation as one process with the global batch:
//  - N = 2 and 4 ranks with per-rank batch B end with the weights of 1 rank with batch N*B
//    over the same sample order (float tolerance: only the summation order differs);
//  - all ranks hold bitwise-identical weights and momentum after every step;
//  - 2 epochs, or 1 epoch + checkpoint + resume + 1 epoch, give identical bits.
// Synthetic data keeps it hermetic and fast: 400 samples of 784 features, labels from a
// fixed random linear rule, the default 784-512-256-10 model.
//
// Checks inside ranks throw (spawn() reports the rank); results leave the ranks only
// through checkpoint files, so the tests hold whether ranks are threads or processes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "base/error.h"
#include "base/types.h"
#include "ring/spawn.h"
#include "tools/train/checkpoint.h"
#include "tools/train/trainer.h"

namespace gyre::train {
namespace {

namespace fs = std::filesystem;

void require(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

ImageSet syntheticSet(size_t count, uint64_t seed) {
  std::mt19937_64 engine(seed);
  ImageSet set;
  set.count = count;
  set.features = 784;
  std::vector<float> rule(784 * 10);
  std::mt19937_64 ruleEngine(1234);  // the same rule for train and test
  for (float& w : rule) w = static_cast<float>(ruleEngine() % 2001) / 1000.0f - 1.0f;
  for (size_t i = 0; i < count; ++i) {
    float score[10] = {};
    for (size_t f = 0; f < 784; ++f) {
      const float v = static_cast<float>(engine() % 256) / 255.0f;
      set.pixels.push_back(v);
      for (size_t c = 0; c < 10; ++c) score[c] += v * rule[f * 10 + c];
    }
    set.labels.push_back(static_cast<uint8_t>(std::max_element(score, score + 10) - score));
  }
  return set;
}

uint64_t stateHash(const Trainer& t) {
  uint64_t h = fnv1a64(nullptr, 0);
  for (size_t p = 0; p < t.model().numParams(); ++p) {
    h = fnv1a64(t.model().param(p).data(), t.model().param(p).size_bytes(), h);
    h = fnv1a64(t.optimizer().buffer(p).data(), t.optimizer().buffer(p).size_bytes(), h);
  }
  return h;
}

// Throws unless every rank's weights and momentum have the same bits as this rank's.
void requireRanksIdentical(Trainer& t, size_t step) {
  const uint64_t mine = stateHash(t);
  uint64_t lo = mine, hi = mine;
  t.comm().allReduce(&lo, &lo, 1, DataType::kUint64, ReduceOp::kMin);
  t.comm().allReduce(&hi, &hi, 1, DataType::kUint64, ReduceOp::kMax);
  require(
      lo == mine && hi == mine,
      fmt::format("rank {}: weights differ between ranks after step {}", t.comm().rank(), step));
}

class TrainEquivalenceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    train_ = new ImageSet(syntheticSet(400, 1));
    test_ = new ImageSet(syntheticSet(100, 2));
  }
  static void TearDownTestSuite() {
    delete train_;
    delete test_;
  }
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("gyre_train_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  static TrainConfig config(size_t batch) {
    TrainConfig c;
    c.batch = batch;
    // Several buckets and row blocks, so the tests cover the overlapped path.
    c.bucketMb = 0.25;
    c.blockRows = 64;
    return c;
  }

  // Trains `epochs` epochs on `ranks` ranks (resuming from `resume` if not empty), checks
  // the ranks agree after every step, and has rank 0 save a checkpoint to `out`.
  void train(int ranks, size_t batch, size_t epochs, const std::string& out,
             const std::string& resume = "") {
    const ImageSet& trainSet = *train_;
    const ImageSet& testSet = *test_;
    const TrainConfig c = config(batch);
    ASSERT_NO_THROW(spawn(ranks, [&](Communicator& comm) {
      Trainer t(comm, c, trainSet, testSet);
      if (!resume.empty()) t.resumeFrom(resume);
      t.afterStep = [&t](size_t step) { requireRanksIdentical(t, step); };
      requireRanksIdentical(t, 0);
      while (t.epochsDone() < epochs) {
        const EpochStats e = t.runEpoch().value();
        require(std::isfinite(e.trainLoss), "loss is not finite");
        require(e.samples == trainSet.count, "every sample once per epoch");
      }
      t.saveTo(out);
    }));
  }

  static ImageSet* train_;
  static ImageSet* test_;
  fs::path dir_;
};

ImageSet* TrainEquivalenceTest::train_ = nullptr;
ImageSet* TrainEquivalenceTest::test_ = nullptr;

void expectClose(const Checkpoint& a, const Checkpoint& b, float tolerance) {
  ASSERT_EQ(a.params.size(), b.params.size());
  float worst = 0;
  for (size_t p = 0; p < a.params.size(); ++p) {
    for (size_t k = 0; k < a.params[p].size(); ++k) {
      const float diff = std::fabs(a.params[p][k] - b.params[p][k]);
      worst = std::max(worst, diff);
      ASSERT_LE(diff, tolerance * (1.0f + std::fabs(b.params[p][k])))
          << "parameter " << p << " element " << k;
    }
  }
  ::testing::Test::RecordProperty("max_abs_diff", fmt::format("{:g}", worst));
}

TEST_F(TrainEquivalenceTest, TwoRanksMatchOneRankWithTheGlobalBatch) {
  train(1, 32, 2, path("one.ckpt"));
  train(2, 16, 2, path("two.ckpt"));
  const Checkpoint one = loadCheckpoint(path("one.ckpt"));
  const Checkpoint two = loadCheckpoint(path("two.ckpt"));
  // 400 samples: 12 full batches and one of 16 (8 per rank) per epoch.
  expectClose(one, two, 2e-5f);
  // And training moved the weights away from the initial ones.
  const Mlp init({784, 512, 256, 10}, 0);
  EXPECT_NE(one.params[0], std::vector<float>(init.param(0).begin(), init.param(0).end()));
}

TEST_F(TrainEquivalenceTest, FourRanksMatchOneRankWithTheGlobalBatch) {
  train(1, 64, 2, path("one.ckpt"));
  train(4, 16, 2, path("four.ckpt"));
  expectClose(loadCheckpoint(path("one.ckpt")), loadCheckpoint(path("four.ckpt")), 2e-5f);
}

TEST_F(TrainEquivalenceTest, ResumeContinuesExactly) {
  train(2, 16, 2, path("straight.ckpt"));
  train(2, 16, 1, path("half.ckpt"));
  train(2, 16, 2, path("resumed.ckpt"), path("half.ckpt"));
  const Checkpoint straight = loadCheckpoint(path("straight.ckpt"));
  const Checkpoint resumed = loadCheckpoint(path("resumed.ckpt"));
  EXPECT_EQ(straight.epochsDone, 2u);
  EXPECT_EQ(resumed.epochsDone, 2u);
  EXPECT_EQ(straight.samplerEpoch, resumed.samplerEpoch);
  EXPECT_EQ(straight.params, resumed.params);  // bit for bit (no NaNs in a trained model)
  EXPECT_EQ(straight.momentumBuffers, resumed.momentumBuffers);
  // The first half really differs from the end state.
  EXPECT_NE(loadCheckpoint(path("half.ckpt")).params, straight.params);
}

TEST_F(TrainEquivalenceTest, ResumeFromAMissingCheckpointFailsOnEveryRank) {
  const std::string missing = path("missing.ckpt");
  const ImageSet& trainSet = *train_;
  const ImageSet& testSet = *test_;
  ASSERT_NO_THROW(spawn(2, [&](Communicator& comm) {
    Trainer t(comm, config(16), trainSet, testSet);
    try {
      t.resumeFrom(missing);
    } catch (const Error& e) {
      const std::string msg = e.what();
      require(msg.find(missing) != std::string::npos, "message names the file: " + msg);
      require(comm.rank() == 0 || msg.find("rank 0") != std::string::npos,
              "message names rank 0: " + msg);
      return;
    }
    throw std::runtime_error("resume from a missing file did not fail");
  }));
}

TEST(CheckpointTest, RoundTripsAndRejectsCorruption) {
  const fs::path dir = fs::temp_directory_path() / ("gyre_ckpt_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string file = (dir / "c.ckpt").string();
  Checkpoint c;
  c.epochsDone = 3;
  c.samplerSeed = 7;
  c.samplerEpoch = 3;
  c.worldSize = 4;
  c.batch = 64;
  c.lr = 0.05f;
  c.momentum = 0.9f;
  c.widths = {4, 3, 2};
  c.params = {{1, 2, 3}, {-0.0f, 5}};
  c.momentumBuffers = {{0.5f, 0, 0}, {1e-30f, 2}};
  saveCheckpoint(file, c);
  const Checkpoint d = loadCheckpoint(file);
  EXPECT_EQ(d.epochsDone, 3u);
  EXPECT_EQ(d.widths, c.widths);
  EXPECT_EQ(d.params, c.params);
  EXPECT_EQ(d.momentumBuffers, c.momentumBuffers);
  EXPECT_EQ(d.lr, 0.05f);
  EXPECT_FALSE(fs::exists(file + ".tmp"));

  // Flip one byte in the payload: the checksum catches it; cut the file: the same.
  std::string bytes;
  {
    std::ifstream in(file, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  std::string flipped = bytes;
  flipped[flipped.size() / 2] ^= 1;
  std::ofstream(file, std::ios::binary) << flipped;
  EXPECT_THROW(loadCheckpoint(file), Error);
  std::ofstream(file, std::ios::binary) << bytes.substr(0, bytes.size() - 5);
  EXPECT_THROW(loadCheckpoint(file), Error);
  std::ofstream(file, std::ios::binary) << "not a checkpoint at all";
  try {
    loadCheckpoint(file);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(file), std::string::npos);
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace gyre::train
