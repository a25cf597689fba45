// gyrerun as a drop-in for torchrun and python -m torch.distributed.launch: the real
// binary running scripts written for either (a Python one parsing --local_rank, one
// reading LOCAL_RANK), torchrun's flags in both spellings and both value forms, the
// environment torchrun gives its workers, --max-restarts restarting the whole group (the
// restarts are counted from what the ranks saw), and the errors for what gyre cannot do.
// Every command runs under `timeout`.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "run_shell.h"

namespace {

using gyre::testing::binary;
using gyre::testing::RunResult;
using gyre::testing::runShell;

RunResult gyrerun(const std::string& args, const std::string& env = "OMP_NUM_THREADS=1") {
  return runShell(env + " timeout -k 5 60 " + binary("gyrerun") + " " + args);
}

std::multiset<std::string> lineSet(const std::string& text) {
  std::multiset<std::string> result;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) result.insert(line);
  return result;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

bool havePython() { return std::system("python3 -c pass >/dev/null 2>&1") == 0; }

// A script as torch.distributed.launch users wrote them: --local_rank on the command line.
std::string writeScript(const std::string& name, const std::string& text) {
  std::string path = "/tmp/gyre_compat_" + std::to_string(::getpid()) + "_" + name;
  FILE* f = std::fopen(path.c_str(), "w");
  EXPECT_NE(f, nullptr);
  std::fputs(text.c_str(), f);
  std::fclose(f);
  return path;
}

const char kLocalRankArgScript[] =
    "import argparse, os\n"
    "p = argparse.ArgumentParser()\n"
    "p.add_argument('--local_rank', '--local-rank', type=int, required=True)\n"
    "p.add_argument('word')\n"
    "a = p.parse_args()\n"
    "print('arg', a.word, a.local_rank, os.environ['RANK'], os.environ['WORLD_SIZE'])\n";

const char kLocalRankEnvScript[] =
    "import os, sys\n"
    "assert not any(x.startswith('--local') for x in sys.argv), sys.argv\n"
    "print('env', sys.argv[1], os.environ['LOCAL_RANK'], os.environ['RANK'],\n"
    "      os.environ['LOCAL_WORLD_SIZE'])\n";

TEST(GyrerunTorchCompat, ScriptReadingLocalRankArgumentUnderTorchLaunchMode) {
  if (!havePython()) GTEST_SKIP() << "no python3";
  const std::string script = writeScript("arg.py", kLocalRankArgScript);
  for (const char* flags : {"--torch-launch --nproc_per_node=3", "--torch_launch --nproc-per-node 3"}) {
    RunResult r = gyrerun(std::string(flags) + " " + script + " hi");
    EXPECT_EQ(r.exitCode, 0) << flags << ": " << r.err;
    EXPECT_EQ(lineSet(r.out),
              (std::multiset<std::string>{"arg hi 0 0 3", "arg hi 1 1 3", "arg hi 2 2 3"}))
        << flags;
  }
  ::unlink(script.c_str());
}

TEST(GyrerunTorchCompat, ScriptReadingLocalRankFromTheEnvironment) {
  if (!havePython()) GTEST_SKIP() << "no python3";
  const std::string script = writeScript("env.py", kLocalRankEnvScript);
  // torchrun style (no flag), and the old launcher with --use_env / --use-env.
  for (const char* flags : {"--nproc_per_node 2", "--torch-launch --use_env --nproc_per_node=2",
                            "--torch-launch --use-env -n 2"}) {
    RunResult r = gyrerun(std::string(flags) + " " + script + " hi");
    EXPECT_EQ(r.exitCode, 0) << flags << ": " << r.err;
    EXPECT_EQ(lineSet(r.out), (std::multiset<std::string>{"env hi 0 0 2", "env hi 1 1 2"}))
        << flags;
  }
  // A module, as `torchrun -m pkg.mod`.
  RunResult r = gyrerun("-n 2 -m json.tool --help");
  EXPECT_EQ(r.exitCode, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "usage")) << r.out;
  ::unlink(script.c_str());
}

TEST(GyrerunTorchCompat, TorchrunWorkerEnvironment) {
  RunResult r = gyrerun(
      "--nnodes=2:2 --node_rank 1 --nproc_per_node=2 --rdzv_backend=c10d "
      "--rdzv-endpoint 10.9.8.7:4321 --rdzv_id=job42 --role trainer --monitor_interval=0.5 "
      "--max-restarts 3 sh -c 'echo $RANK $WORLD_SIZE $GROUP_RANK $ROLE_RANK $ROLE_WORLD_SIZE "
      "$ROLE_NAME $MASTER_ADDR $MASTER_PORT $TORCHELASTIC_RUN_ID $TORCHELASTIC_RESTART_COUNT "
      "$TORCHELASTIC_MAX_RESTARTS $TORCHELASTIC_USE_AGENT_STORE'");
  EXPECT_EQ(r.exitCode, 0) << r.err;
  EXPECT_EQ(lineSet(r.out),
            (std::multiset<std::string>{"2 4 1 2 4 trainer 10.9.8.7 4321 job42 0 3 False",
                                        "3 4 1 3 4 trainer 10.9.8.7 4321 job42 0 3 False"}));
  // Default rendezvous port, as torchrun's.
  r = gyrerun("--rdzv_endpoint=node0 -n 1 sh -c 'echo $MASTER_ADDR $MASTER_PORT'");
  EXPECT_EQ(r.out, "node0 29400\n") << r.err;
}

TEST(GyrerunTorchCompat, StandaloneAndProcessCounts) {
  RunResult r = gyrerun(
      "--standalone --nnodes 4 --nproc-per-node=cpu sh -c 'echo $WORLD_SIZE $GROUP_WORLD_SIZE "
      "$MASTER_ADDR $TORCHELASTIC_RUN_ID'");
  EXPECT_EQ(r.exitCode, 0) << r.err;
  const long cpus = std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN));
  std::multiset<std::string> lines = lineSet(r.out);
  ASSERT_GE(lines.size(), 1u);
  EXPECT_LE(lines.size(), static_cast<size_t>(cpus));
  // One run id for all, a uuid4, not torchrun's "none".
  std::string first = *lines.begin();
  EXPECT_EQ(lines.count(first), lines.size()) << r.out;
  EXPECT_TRUE(contains(first, std::to_string(lines.size()) + " 1 127.0.0.1 ")) << first;
  EXPECT_EQ(first.size() - first.rfind(' ') - 1, 36u) << first;
  r = gyrerun("--nproc_per_node auto sh -c 'echo $LOCAL_WORLD_SIZE'");
  EXPECT_EQ(r.exitCode, 0) << r.err;
  EXPECT_FALSE(r.out.empty());
  r = gyrerun("--nproc_per_node=gpu true", "CUDA_VISIBLE_DEVICES=");
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_TRUE(contains(r.err, "no GPU")) << r.err;
}

TEST(GyrerunTorchCompat, OmpNumThreadsDefaultsToOneWithTorchrunsNotice) {
  RunResult r = gyrerun("-n 2 sh -c 'echo $OMP_NUM_THREADS'", "env -u OMP_NUM_THREADS");
  EXPECT_EQ(r.exitCode, 0) << r.err;
  EXPECT_EQ(r.out, "1\n1\n");
  EXPECT_TRUE(contains(r.err, "Setting OMP_NUM_THREADS environment variable for each process to "
                              "be 1 in default"))
      << r.err;
  // The user's value is kept, silently; one rank per node gets none.
  r = gyrerun("-n 2 sh -c 'echo $OMP_NUM_THREADS'", "OMP_NUM_THREADS=3");
  EXPECT_EQ(r.out, "3\n3\n");
  EXPECT_EQ(r.err, "");
  r = gyrerun("-n 1 sh -c 'echo x$OMP_NUM_THREADS'", "env -u OMP_NUM_THREADS");
  EXPECT_EQ(r.out, "x\n");
  EXPECT_EQ(r.err, "");
}

TEST(GyrerunTorchCompat, MaxRestartsRestartsTheWholeGroupThenFails) {
  // Rank 1 always fails; rank 0 would run on. Each start is one line per rank.
  RunResult r = gyrerun(
      "--max_restarts=2 --grace 0.2 -n 2 sh -c 'echo start $RANK $TORCHELASTIC_RESTART_COUNT; "
      "if [ $RANK = 1 ]; then exit 3; fi; sleep 30'");
  EXPECT_EQ(r.exitCode, 1) << r.err;
  EXPECT_EQ(lineSet(r.out), (std::multiset<std::string>{"start 0 0", "start 1 0", "start 0 1",
                                                        "start 1 1", "start 0 2", "start 1 2"}));
  EXPECT_TRUE(contains(r.err, "restarting the local group (restart 1 of at most 2)")) << r.err;
  EXPECT_TRUE(contains(r.err, "restarting the local group (restart 2 of at most 2)")) << r.err;
  EXPECT_FALSE(contains(r.err, "restart 3")) << r.err;
  EXPECT_LT(r.seconds, 20) << "rank 0 must be stopped after each failure, not waited for";
  // A group that recovers ends with 0: rank 1 fails only on the first start.
  r = gyrerun(
      "--max-restarts 2 -n 2 sh -c 'if [ $RANK = 1 ] && [ $TORCHELASTIC_RESTART_COUNT = 0 ]; "
      "then exit 3; fi; echo ok $RANK $TORCHELASTIC_RESTART_COUNT'");
  EXPECT_EQ(r.exitCode, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "ok 1 1")) << r.out;
}

TEST(GyrerunTorchCompat, WhatGyreCannotDoIsRejectedClearly) {
  RunResult r = gyrerun("--nnodes=1:4 -n 1 true");
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_TRUE(contains(r.err, "elastic")) << r.err;
  r = gyrerun("--rdzv_backend=etcd -n 1 true");
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_TRUE(contains(r.err, "use c10d or static")) << r.err;
  r = gyrerun("--rdzv_backend=c10d --nnodes 2 -n 1 true");
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_TRUE(contains(r.err, "--node-rank")) << r.err;
  r = gyrerun("--no-python -m x -n 1 true");
  EXPECT_EQ(r.exitCode, 2);
  r = gyrerun("--nproc_per_node=lots true");
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_TRUE(contains(r.err, "auto, cpu or gpu")) << r.err;
}

}  // namespace
