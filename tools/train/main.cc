// gyre-train: data-parallel MLP training on Fashion-MNIST over gyre, the counterpart of a
// PyTorch DDP script on the same model and data (same defaults, same progress line and JSON).
//
//   gyrerun -n 4 gyre-train --epochs 5
//   gyre-train --epochs 1 --max-samples 2000                  (one process: a world of one)
//   mpirun -np 2 gyre-train --checkpoint c.bin; srun -n 4 gyre-train
//   gyre-train --eval --checkpoint c.bin                     (test accuracy of a checkpoint)
//
// Rank and world come from the launcher (gyrerun, torchrun, mpirun or srun; see
// base/launch_env.h); without one the process is a world of one. Rank 0 prints one line
// per epoch to stdout, writes --json and --checkpoint. --eval loads the checkpoint and
// prints its test accuracy, at any world size. Exit status: 0 on success, 2 for bad
// arguments or data, 1 for any other failure.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "base/error.h"
#include "base/launch_env.h"
#include "base/version.h"
#include "ring/communicator.h"
#include "store/tcp_store.h"
#include "tools/train/progress.h"
#include "tools/train/trainer.h"

namespace {

using gyre::train::EpochStats;
using gyre::train::TrainConfig;

struct Args {
  TrainConfig train;
  std::string data = "/usr/share/datasets/fashion-mnist";
  std::string json;
  std::string checkpoint;
  bool resume = false;
  bool eval = false;
  size_t maxSamples = 0;
  std::string progress = "auto";  // auto (bar on a terminal, else lines), bar, lines, none
  double progressEvery = 10;      // seconds between lines
};

// The trainer's defaults for gradient buckets. DDP's 25 MiB (first 1 MiB) puts this whole
// 2 MiB model in one bucket that can only start after the last gradient, so nothing of the
// all-reduce overlaps backward; smaller buckets over row blocks of the weights let the
// bottom layer's gradient leave in pieces while the rest of it is computed.
constexpr double kDefaultBucketMb = 0.25;
constexpr size_t kDefaultBlockRows = 64;

constexpr const char* kUsage =
    "usage: gyre-train [--epochs N] [--batch N] [--lr X] [--momentum X] [--hidden W,W]\n"
    "                  [--seed N] [--data DIR] [--json FILE] [--checkpoint FILE] [--resume]\n"
    "                  [--bucket-mb X] [--block-rows N] [--max-samples N] [--eval]\n"
    "                  [--progress auto|bar|lines|none]\n"
    "Data-parallel MLP training on Fashion-MNIST; rank and world size come from the\n"
    "launcher (gyrerun, torchrun, mpirun or srun), e.g. gyrerun -n 4 gyre-train; without\n"
    "one, gyre-train runs alone.\n"
    "  --epochs N        total epochs (a resumed run continues up to N) [5]\n"
    "  --batch N         batch size per rank [64]\n"
    "  --lr X            SGD learning rate [0.05]\n"
    "  --momentum X      SGD momentum [0.9]\n"
    "  --hidden W,W      hidden layer widths [512,256]\n"
    "  --seed N          initialisation and sampler seed [0]\n"
    "  --data DIR        directory of the IDX files [/usr/share/datasets/fashion-mnist]\n"
    "  --json FILE       write the results as JSON (rank 0)\n"
    "  --checkpoint FILE rank 0 saves weights, optimizer and sampler state after each epoch\n"
    "  --resume          continue from --checkpoint FILE\n"
    "  --eval            only evaluate --checkpoint FILE on the test set (any world size)\n"
    "  --bucket-mb X     gradient bucket cap in MiB, first bucket min(1, X) [0.25]\n"
    "  --block-rows N    weight gradient rows per block, 0 = whole weights [64]\n"
    "  --max-samples N   use only the first N training and test samples [all]\n"
    "  --progress MODE   rank 0's progress on stderr: a bar with samples/s and ETA (bar),\n"
    "                    a plain line every --progress-every seconds (lines), none, or\n"
    "                    auto: bar on a terminal, else lines [auto]\n"
    "  --progress-every S  seconds between progress lines [10]\n"
    "  --version         print gyre-train's version and commit and exit\n"
    "Under gyrerun --elastic a rank that fails does not end the run: the others go on\n"
    "without it from the step that failed, and gyrerun's restart of it rejoins them\n"
    "(docs/elastic.md).\n";

[[noreturn]] void usageError(const std::string& message) {
  std::fprintf(stderr, "gyre-train: %s\n%s", message.c_str(), kUsage);
  std::exit(2);
}

template <typename T>
T parseNumber(const std::string& flag, const std::string& text) {
  try {
    size_t used = 0;
    T value;
    if constexpr (std::is_floating_point_v<T>) {
      value = static_cast<T>(std::stod(text, &used));
    } else {
      if (!text.empty() && text[0] == '-') throw std::invalid_argument("negative");
      value = static_cast<T>(std::stoull(text, &used));
    }
    if (used != text.size()) throw std::invalid_argument("trailing");
    return value;
  } catch (const std::exception&) {
    usageError(fmt::format("{} needs a number, got '{}'", flag, text));
  }
}

Args parseArgs(int argc, char** argv) {
  Args a;
  a.train.bucketMb = kDefaultBucketMb;
  a.train.blockRows = kDefaultBlockRows;
  std::vector<size_t> hidden = {512, 256};
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i], value;
    const size_t eq = flag.find('=');
    if (flag.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
    }
    if (flag == "--help" || flag == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    if (flag == "--version") {
      std::printf("%s\n", gyre::versionLine("gyre-train").c_str());
      std::exit(0);
    }
    if (flag == "--resume" || flag == "--eval") {
      (flag == "--eval" ? a.eval : a.resume) = true;
      continue;
    }
    static const char* const kValued[] = {
        "--epochs",     "--batch",      "--lr",          "--momentum",      "--seed",
        "--bucket-mb",  "--block-rows", "--max-samples", "--data",          "--json",
        "--checkpoint", "--hidden",     "--progress",    "--progress-every"};
    if (std::find(std::begin(kValued), std::end(kValued), flag) == std::end(kValued)) {
      usageError("unknown argument '" + flag + "'");
    }
    if (eq == std::string::npos) {
      if (i + 1 >= argc) usageError(flag + " needs a value");
      value = argv[++i];
    }
    if (flag == "--epochs")
      a.train.epochs = parseNumber<size_t>(flag, value);
    else if (flag == "--batch")
      a.train.batch = parseNumber<size_t>(flag, value);
    else if (flag == "--lr")
      a.train.lr = parseNumber<float>(flag, value);
    else if (flag == "--momentum")
      a.train.momentum = parseNumber<float>(flag, value);
    else if (flag == "--seed")
      a.train.seed = parseNumber<uint64_t>(flag, value);
    else if (flag == "--bucket-mb")
      a.train.bucketMb = parseNumber<double>(flag, value);
    else if (flag == "--block-rows")
      a.train.blockRows = parseNumber<size_t>(flag, value);
    else if (flag == "--max-samples")
      a.maxSamples = parseNumber<size_t>(flag, value);
    else if (flag == "--data")
      a.data = value;
    else if (flag == "--json")
      a.json = value;
    else if (flag == "--checkpoint")
      a.checkpoint = value;
    else if (flag == "--progress") {
      if (value != "auto" && value != "bar" && value != "lines" && value != "none") {
        usageError("--progress wants auto, bar, lines or none, got '" + value + "'");
      }
      a.progress = value;
    } else if (flag == "--progress-every") {
      a.progressEvery = parseNumber<double>(flag, value);
      if (!(a.progressEvery > 0)) usageError("--progress-every must be positive");
    } else if (flag == "--hidden") {
      hidden.clear();
      size_t pos = 0;
      while (pos <= value.size()) {
        const size_t comma = std::min(value.find(',', pos), value.size());
        hidden.push_back(parseNumber<size_t>(flag, value.substr(pos, comma - pos)));
        pos = comma + 1;
      }
    } else {
      usageError("unknown argument '" + flag + "'");
    }
  }
  if (a.train.epochs == 0 || a.train.batch == 0)
    usageError("--epochs and --batch must be positive");
  if (!(a.train.bucketMb > 0)) usageError("--bucket-mb must be positive");
  for (size_t h : hidden) {
    if (h == 0) usageError("--hidden widths must be positive");
  }
  if (a.resume && a.checkpoint.empty()) usageError("--resume needs --checkpoint FILE");
  if (a.eval && a.checkpoint.empty()) usageError("--eval needs --checkpoint FILE");
  if (a.eval && a.resume) usageError("--eval and --resume exclude each other");
  a.train.widths = {784};
  a.train.widths.insert(a.train.widths.end(), hidden.begin(), hidden.end());
  a.train.widths.push_back(10);
  return a;
}

// A JSON string literal (paths may hold quotes or backslashes).
std::string jsonString(const std::string& text) {
  std::string out = "\"";
  for (char ch : text) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (static_cast<unsigned char>(ch) < 0x20) {
      out += fmt::format("\\u{:04x}", static_cast<unsigned>(ch));
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

std::string joinWidths(const std::vector<size_t>& widths) {
  std::string s;
  for (size_t i = 1; i + 1 < widths.size(); ++i)
    s += (i > 1 ? "," : "") + std::to_string(widths[i]);
  return s;
}

void writeJson(const Args& a, int world, const std::vector<EpochStats>& epochs, size_t buckets) {
  double meanSps = 0;
  for (const EpochStats& e : epochs) meanSps += e.samplesPerS / static_cast<double>(epochs.size());
  std::string rows;
  for (const EpochStats& e : epochs) {
    rows += fmt::format(
        "{}    {{\"epoch\": {}, \"train_loss\": {}, \"train_acc\": {}, \"test_acc\": {}, "
        "\"samples\": {}, \"samples_per_s\": {}, \"train_s\": {}, \"epoch_s\": {}, "
        "\"comm_s\": {}, \"comm_hidden_s\": {}, \"comm_wait_s\": {}, \"hidden_fraction\": {}}}",
        rows.empty() ? "" : ",\n", e.epoch, e.trainLoss, e.trainAcc, e.testAcc, e.samples,
        e.samplesPerS, e.trainS, e.epochS, e.commS, e.hiddenS, e.waitS, e.hiddenFraction());
  }
  const TrainConfig& c = a.train;
  const std::string text = fmt::format(
      "{{\n  \"benchmark\": \"gyre_train\",\n  \"world_size\": {},\n  \"threads_per_rank\": 1,\n"
      "  \"config\": {{\"epochs\": {}, \"batch_per_rank\": {}, \"global_batch\": {}, \"lr\": {}, "
      "\"momentum\": {}, \"hidden\": [{}], \"seed\": {}, \"data\": {}, \"bucket_mb\": {}, "
      "\"block_rows\": {}, \"buckets\": {}, \"max_samples\": {}}},\n"
      "  \"epochs\": [\n{}\n  ],\n  \"final\": {{\"test_acc\": {}, \"samples_per_s\": {}}}\n}}\n",
      world, c.epochs, c.batch, c.batch * static_cast<size_t>(world), c.lr, c.momentum,
      joinWidths(c.widths), c.seed, jsonString(a.data), c.bucketMb, c.blockRows, buckets,
      a.maxSamples, rows, epochs.empty() ? 0.0 : epochs.back().testAcc, meanSps);
  std::ofstream out(a.json);
  out << text;
  if (!out) throw gyre::Error(gyre::ErrorCode::kSystemError, "cannot write " + a.json);
}

// The job this process belongs to: the launcher's (torchrun, gyrerun, mpirun, srun), or a
// world of one with a private store on a free loopback port, so that several lone runs
// on one machine never meet.
std::unique_ptr<gyre::Communicator> joinJob() {
  const gyre::LaunchEnv launch = gyre::launchEnvFromProcess();
  if (launch.launcher != gyre::Launcher::kNone) return gyre::Communicator::fromEnvironment();
  if (!launch.note.empty()) std::fprintf(stderr, "gyre-train: warning: %s\n", launch.note.c_str());
  const gyre::Options options = gyre::Options::fromEnvironment();
  auto store = gyre::TcpStore::serve("127.0.0.1", 0, options.timeout, options.token);
  return gyre::Communicator::create(std::move(store), 0, 1, options, "127.0.0.1");
}

// --eval: the checkpoint's test accuracy, each rank counting its shard of the test set.
int evaluateCheckpoint(const Args& a, gyre::train::Trainer& trainer, int world, size_t tests) {
  trainer.resumeFrom(a.checkpoint, /*warnOnNewSettings=*/false);
  const double accuracy = trainer.evaluate();
  if (trainer.comm().rank() == 0) {
    fmt::print("# gyre-train eval world {} checkpoint {} epochs_done {} test {} test_acc {:.4f}\n",
               world, a.checkpoint, trainer.epochsDone(), tests, accuracy);
    std::fflush(stdout);
  }
  trainer.comm().barrier();
  return 0;
}

// Rank 0's progress on stderr (every other rank: none); tools/train/progress.h.
gyre::train::Progress makeProgress(const Args& a) {
  using gyre::train::Progress;
  const gyre::LaunchEnv launch = gyre::launchEnvFromProcess();
  const bool rankZero = launch.launcher == gyre::Launcher::kNone || launch.rank == 0;
  Progress::Mode mode = Progress::modeFor(rankZero && a.progress != "none", stderr);
  if (mode != Progress::Mode::kNone && a.progress == "bar") mode = Progress::Mode::kBar;
  if (mode != Progress::Mode::kNone && a.progress == "lines") mode = Progress::Mode::kLines;
  return Progress(mode, stderr,
                  std::chrono::milliseconds(static_cast<long long>(a.progressEvery * 1000)));
}

int run(const Args& a) {
  gyre::train::Progress progress = makeProgress(a);
  gyre::train::ImageSet train, test;
  try {  // before the rendezvous, as the peer: a data problem is reported, not a hang
    progress.say("loading data from " + a.data);
    train = gyre::train::loadImageSplit(a.data, "train", 10, a.maxSamples);
    test = gyre::train::loadImageSplit(a.data, "t10k", 10, a.maxSamples);
  } catch (const gyre::Error& e) {
    const int rank = gyre::launcherRank();
    std::fprintf(stderr, "gyre-train: error: rank %s: %s\n",
                 rank >= 0 ? std::to_string(rank).c_str() : "0", e.what());
    return 2;
  }
  {
    const gyre::LaunchEnv launch = gyre::launchEnvFromProcess();
    progress.say(launch.launcher == gyre::Launcher::kNone
                     ? fmt::format("{} train and {} test images; no launcher: a world of one",
                                   train.count, test.count)
                     : fmt::format("{} train and {} test images; joining {} ranks (rank 0's store "
                                   "at {}:{})",
                                   train.count, test.count, launch.size, launch.masterAddr,
                                   launch.masterPort));
  }
  // gyrerun --elastic: the world changes when a rank fails or a restarted one comes back
  // (tools/train/elastic.h); a restarted rank (a newcomer) joins the running ranks.
  const gyre::LaunchEnv launch = gyre::launchEnvFromProcess();
  gyre::train::ElasticWorld elastic(joinJob());
  const bool newcomer = launch.newcomer;
  gyre::Communicator& first = elastic.comm();
  progress.say(newcomer ? fmt::format("joined the running ranks as rank {} of {}", first.rank(),
                                      first.size())
                        : fmt::format("{} ranks joined; rank 0's weights to every rank",
                                      first.size()));
  gyre::train::Trainer trainer(first, a.train, train, test, /*joining=*/newcomer);
  if (a.eval) return evaluateCheckpoint(a, trainer, first.size(), test.count);
  if (launch.elastic) trainer.setElastic(&elastic);
  if (newcomer) {
    trainer.joinRunning();
  } else if (a.resume) {
    trainer.resumeFrom(a.checkpoint);
  }
  const int world = first.size();
  if (trainer.comm().rank() == 0 && !newcomer) {
    fmt::print(
        "# gyre-train world {} epochs {} batch {} lr {} momentum {} hidden {} seed {} "
        "threads 1 train {} test {} buckets {} bucket_mb {} block_rows {} sync_priority {}{}\n",
        world, a.train.epochs, a.train.batch, a.train.lr, a.train.momentum,
        joinWidths(a.train.widths), a.train.seed, train.count, test.count,
        trainer.gradSync().numBuckets(), a.train.bucketMb, a.train.blockRows,
        trainer.gradSync().workerPriority(), a.resume ? fmt::format(" resumed_at_epoch {}", trainer.epochsDone()) : "");
    std::fflush(stdout);
  }
  std::vector<EpochStats> epochs;
  // DistributedSampler's shard: the train set padded to a multiple of the world.
  const size_t shard = (train.count + static_cast<size_t>(world) - 1) / static_cast<size_t>(world);
  const size_t steps = (shard + a.train.batch - 1) / a.train.batch;
  trainer.afterStep = [&progress](size_t step) { progress.step(step + 1); };
  while (trainer.epochsDone() < a.train.epochs) {
    progress.startEpoch(trainer.epochsDone() + 1, a.train.epochs, steps,
                        a.train.batch * static_cast<size_t>(world));
    const std::optional<EpochStats> ran = trainer.runEpoch();
    progress.clear();
    if (!ran) break;  // elastic: the others had finished every epoch
    const EpochStats& e = *ran;
    epochs.push_back(e);
    if (!a.checkpoint.empty()) trainer.saveTo(a.checkpoint);
    if (trainer.comm().rank() == 0) {
      fmt::print(
          "epoch {} loss {:.4f} train_acc {:.4f} test_acc {:.4f} samples_per_s {:.1f} "
          "train_s {:.3f} epoch_s {:.3f} comm_s {:.3f} hidden {:.2f}\n",
          e.epoch, e.trainLoss, e.trainAcc, e.testAcc, e.samplesPerS, e.trainS, e.epochS, e.commS,
          e.hiddenFraction());
      std::fflush(stdout);
    }
  }
  const int rank = trainer.comm().rank();
  if (rank == 0 && epochs.empty()) {
    fmt::print("# nothing to do: the checkpoint is at epoch {} of {}\n", trainer.epochsDone(),
               a.train.epochs);
  }
  if (rank == 0 && !epochs.empty()) {
    double meanSps = 0;
    for (const EpochStats& e : epochs)
      meanSps += e.samplesPerS / static_cast<double>(epochs.size());
    fmt::print("# final test_acc {:.4f} samples_per_s {:.1f}\n", epochs.back().testAcc, meanSps);
    std::fflush(stdout);
    if (!a.json.empty()) writeJson(a, trainer.comm().size(), epochs, trainer.gradSync().numBuckets());
  }
  trainer.endRun();  // no rank leaves while another may still need it
  if (launch.elastic && trainer.comm().rank() == 0) {
    fmt::print("# elastic: {} shrink(s), {} grow(s); {} ranks at the end, their parameters and "
               "momentum identical (hash {:016x})\n",
               elastic.shrinks(), elastic.grows(), trainer.comm().size(), trainer.replicaHash());
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parseArgs(argc, argv);
  try {
    return run(args);
  } catch (const std::exception& e) {
    // gyre's errors name the rank once a communicator exists; before it, the launcher's.
    const int rank = gyre::launcherRank();
    if (rank >= 0 && !gyre::namesItsRank(e.what())) {  // not named twice
      std::fprintf(stderr, "gyre-train: error: rank %d: %s\n", rank, e.what());
    } else {
      std::fprintf(stderr, "gyre-train: error: %s\n", e.what());
    }
    return 1;
  }
}
