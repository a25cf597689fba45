// resolveLaunchEnv over hand-made environments (the real launchers run in
// launchers_test.cc): which launcher wins, what each gives for rank, size, local rank
// and size, the master address and port and where they came from, and the errors for
// malformed or partial variables. Also Slurm's hostlist and tasks-per-node syntax.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "base/error.h"
#include "base/launch_env.h"
#include "base/slurm_hostlist.h"

namespace gyre {
namespace {

using Vars = std::map<std::string, std::string>;

LaunchEnv resolve(const Vars& vars) {
  return resolveLaunchEnv([&](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

std::string errorOf(const Vars& vars) {
  try {
    resolve(vars);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

using List = std::vector<std::string>;

TEST(SlurmHostlist, ExpandsRangesGroupsAndPadding) {
  EXPECT_EQ(expandHostlist("node[01-04,07]", "L"),
            (List{"node01", "node02", "node03", "node04", "node07"}));
  EXPECT_EQ(expandHostlist("a,b[1-2],c", "L"), (List{"a", "b1", "b2", "c"}));
  EXPECT_EQ(expandHostlist("r[1-2]n[08-10]", "L"),
            (List{"r1n08", "r1n09", "r1n10", "r2n08", "r2n09", "r2n10"}));
  EXPECT_EQ(expandHostlist("gpu[9-10]-ib", "L"), (List{"gpu9-ib", "gpu10-ib"}));
  EXPECT_EQ(expandHostlist("login", "L"), (List{"login"}));
  EXPECT_EQ(expandHostlist("", "L"), List{});
  EXPECT_EQ(firstHost("node[07-09],gpu1", "L"), "node07");
  EXPECT_EQ(firstHost("r[3,1]n[2-4]", "L"), "r3n2");
  EXPECT_EQ(firstHost("vm", "L"), "vm");
}

TEST(SlurmHostlist, RejectsMalformedLists) {
  for (const char* bad : {"node[1-", "node1]", "node[a-b]", "node[3-1]", "a,,b", "node[]",
                          "n[1-2"}) {
    try {
      expandHostlist(bad, "SLURM_JOB_NODELIST");
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("SLURM_JOB_NODELIST"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(expandHostlist("n[0-99999999]", "L", 1000), Error);
}

TEST(SlurmHostlist, TasksPerNode) {
  EXPECT_EQ(expandTasksPerNode("2(x3),1", "T"), (std::vector<int>{2, 2, 2, 1}));
  EXPECT_EQ(expandTasksPerNode("4", "T"), (std::vector<int>{4}));
  EXPECT_THROW(expandTasksPerNode("2(x", "T"), Error);
  EXPECT_THROW(expandTasksPerNode("x", "T"), Error);
}

TEST(LaunchEnv, NothingSetIsNoLauncherWithTorchDefaults) {
  LaunchEnv e = resolve({});
  EXPECT_EQ(e.launcher, Launcher::kNone);
  EXPECT_EQ(e.rank, -1);
  EXPECT_EQ(e.masterAddr, "127.0.0.1");
  EXPECT_EQ(e.masterPort, 29500);
}

TEST(LaunchEnv, Torchrun) {
  LaunchEnv e = resolve({{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"},
                         {"LOCAL_WORLD_SIZE", "4"}, {"MASTER_ADDR", "10.1.2.3"},
                         {"MASTER_PORT", "1234"}});
  EXPECT_EQ(e.launcher, Launcher::kTorchrun);
  EXPECT_EQ(e.rank, 5);
  EXPECT_EQ(e.size, 8);
  EXPECT_EQ(e.localRank, 1);
  EXPECT_EQ(e.localSize, 4);
  EXPECT_EQ(e.masterAddr, "10.1.2.3");
  EXPECT_EQ(e.masterPort, 1234);
  EXPECT_EQ(e.masterAddrFrom, "MASTER_ADDR");
}

// gyrerun --elastic's two flags: off unless 1, and a value other than 0 or 1 names itself.
TEST(LaunchEnv, ElasticFlagsFromGyrerun) {
  const Vars base = {{"RANK", "1"}, {"WORLD_SIZE", "4"}};
  LaunchEnv plain = resolve(base);
  EXPECT_FALSE(plain.elastic);
  EXPECT_FALSE(plain.newcomer);
  Vars restarted = base;
  restarted["GYRE_ELASTIC"] = "1";
  restarted["GYRE_ELASTIC_NEWCOMER"] = "1";
  LaunchEnv e = resolve(restarted);
  EXPECT_TRUE(e.elastic);
  EXPECT_TRUE(e.newcomer);
  restarted["GYRE_ELASTIC_NEWCOMER"] = "0";
  EXPECT_FALSE(resolve(restarted).newcomer);
  restarted["GYRE_ELASTIC_NEWCOMER"] = "yes";
  const std::string what = errorOf(restarted);
  EXPECT_NE(what.find("GYRE_ELASTIC_NEWCOMER='yes'"), std::string::npos) << what;
  EXPECT_NE(what.find("gyrerun --elastic"), std::string::npos) << what;
}

TEST(LaunchEnv, TorchrunWinsOverMpiAndSlurm) {
  LaunchEnv e = resolve({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_RANK", "0"},
                         {"OMPI_COMM_WORLD_SIZE", "1"}, {"SLURM_PROCID", "3"},
                         {"SLURM_NTASKS", "4"}});
  EXPECT_EQ(e.launcher, Launcher::kTorchrun);
  EXPECT_EQ(e.rank, 1);
  // mpirun inside a Slurm allocation: Open MPI's numbering, not the allocation's.
  e = resolve({{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "3"},
               {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}});
  EXPECT_EQ(e.launcher, Launcher::kOpenMpi);
  EXPECT_EQ(e.rank, 2);
  EXPECT_EQ(e.size, 3);
}

TEST(LaunchEnv, OpenMpiFindsMpirunsHostAndDerivesThePort) {
  Vars v{{"OMPI_COMM_WORLD_RANK", "3"},
         {"OMPI_COMM_WORLD_SIZE", "4"},
         {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
         {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
         {"OMPI_MCA_orte_hnp_uri",
          "1261895680.0;tcp://127.0.0.1,10.213.0.1,172.17.0.1:46631;tcp6://[fd00::2]:45813"}};
  LaunchEnv e = resolve(v);
  EXPECT_EQ(e.launcher, Launcher::kOpenMpi);
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.size, 4);
  EXPECT_EQ(e.localRank, 1);
  EXPECT_EQ(e.localSize, 2);
  EXPECT_EQ(e.masterAddr, "10.213.0.1");
  EXPECT_EQ(e.masterAddrFrom, "OMPI_MCA_orte_hnp_uri");
  EXPECT_EQ(e.masterPort, 10000 + (1261895680ull >> 16) % 20000);
  // MASTER_ADDR and MASTER_PORT still win.
  v["MASTER_ADDR"] = "node7";
  v["MASTER_PORT"] = "4000";
  e = resolve(v);
  EXPECT_EQ(e.masterAddr, "node7");
  EXPECT_EQ(e.masterPort, 4000);
  // Only IPv6 and loopback: IPv6 before loopback.
  e = resolve({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"},
               {"OMPI_MCA_orte_hnp_uri", "5.0;tcp://127.0.0.1:1;tcp6://[fd00::2]:2"}});
  EXPECT_EQ(e.masterAddr, "fd00::2");
}

TEST(LaunchEnv, OpenMpiOnSeveralNodesWithoutAnAddressSaysWhatToSet) {
  std::string what = errorOf({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"},
                              {"OMPI_MCA_orte_num_nodes", "2"}});
  EXPECT_NE(what.find("MASTER_ADDR"), std::string::npos) << what;
  // One node without a URI: loopback is right.
  LaunchEnv e = resolve({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}});
  EXPECT_EQ(e.masterAddr, "127.0.0.1");
}

TEST(LaunchEnv, Slurm) {
  Vars v{{"SLURM_PROCID", "5"},       {"SLURM_NTASKS", "99"}, {"SLURM_STEP_ID", "0"},
         {"SLURM_STEP_NUM_TASKS", "7"}, {"SLURM_LOCALID", "2"},
         {"SLURM_NODEID", "1"},       {"SLURM_STEP_TASKS_PER_NODE", "4,3"},
         {"SLURM_JOB_ID", "123456"},  {"SLURM_STEP_NODELIST", "gpu[07-08]"},
         {"SLURM_JOB_NODELIST", "gpu[01-08]"}};
  LaunchEnv e = resolve(v);
  EXPECT_EQ(e.launcher, Launcher::kSlurm);
  EXPECT_EQ(e.rank, 5);
  EXPECT_EQ(e.size, 7);
  EXPECT_EQ(e.localRank, 2);
  EXPECT_EQ(e.localSize, 3);
  EXPECT_EQ(e.masterAddr, "gpu07");
  EXPECT_EQ(e.masterPort, 15000 + 3456);
  EXPECT_NE(e.describe().find("Slurm rank 5 of 7 (local 2 of 3)"), std::string::npos)
      << e.describe();
  v.erase("SLURM_STEP_NODELIST");
  v.erase("SLURM_STEP_NUM_TASKS");
  v.erase("SLURM_STEP_TASKS_PER_NODE");
  v["SLURM_TASKS_PER_NODE"] = "2(x3)";
  v["SLURM_PROCID"] = "4";
  v["SLURM_LOCALID"] = "0";
  e = resolve(v);
  EXPECT_EQ(e.size, 99);
  EXPECT_EQ(e.localSize, 2);
  EXPECT_EQ(e.masterAddr, "gpu01");
}

TEST(LaunchEnv, ASlurmBatchScriptIsNoTaskOfTheJob) {
  // sbatch -n 4 runs the script once, with SLURM_PROCID=0 and SLURM_NTASKS=4 but no step.
  LaunchEnv e = resolve({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}, {"SLURM_JOB_ID", "7"}});
  EXPECT_EQ(e.launcher, Launcher::kNone);
  EXPECT_NE(e.note.find("srun"), std::string::npos) << e.note;
  e = resolve({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "4"}, {"SLURM_STEP_ID", "0"}});
  EXPECT_EQ(e.launcher, Launcher::kSlurm);
  EXPECT_EQ(e.rank, 1);
}

TEST(LaunchEnv, MalformedAndPartialValuesNameTheVariable) {
  std::string what = errorOf({{"RANK", "1"}});
  EXPECT_NE(what.find("WORLD_SIZE"), std::string::npos) << what;
  what = errorOf({{"RANK", "x"}, {"WORLD_SIZE", "2"}});
  EXPECT_NE(what.find("RANK='x'"), std::string::npos) << what;
  what = errorOf({{"RANK", "2"}, {"WORLD_SIZE", "2"}});
  EXPECT_NE(what.find("not below"), std::string::npos) << what;
  what = errorOf({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "-1"}});
  EXPECT_NE(what.find("OMPI_COMM_WORLD_SIZE"), std::string::npos) << what;
  EXPECT_NE(what.find("Open MPI"), std::string::npos) << what;
  what = errorOf({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_PORT", "70000"}});
  EXPECT_NE(what.find("MASTER_PORT"), std::string::npos) << what;
  what = errorOf({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_STEP_ID", "3"},
                  {"SLURM_STEP_NODELIST", "node[1-"}});
  EXPECT_NE(what.find("SLURM_STEP_NODELIST"), std::string::npos) << what;
}

}  // namespace
}  // namespace gyre

namespace gyre {
namespace {

TEST(LaunchEnv, NamesItsRankOnlyForARankPrefix) {
  EXPECT_TRUE(namesItsRank("rank 0: GYRE_ALGO='x'"));
  EXPECT_TRUE(namesItsRank("rank 12: allreduce #3 failed"));
  EXPECT_FALSE(namesItsRank("rank 0 does not run on mpirun's host"));
  EXPECT_FALSE(namesItsRank("rank ?: x"));
  EXPECT_FALSE(namesItsRank("rank 3:x"));
  EXPECT_FALSE(namesItsRank("ranks 0-3: x"));
  EXPECT_FALSE(namesItsRank(""));
}

}  // namespace
}  // namespace gyre

// ---- Where the store is served (resolveStoreLocation) ------------------------------------

namespace gyre {
namespace {

StoreLocation locate(const Vars& vars, const std::string& host, int port) {
  return resolveStoreLocation(
      [&](const char* name) -> const char* {
        auto it = vars.find(name);
        return it == vars.end() ? nullptr : it->second.c_str();
      },
      host, port);
}

const Vars kTorchrunRank{{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "10.0.0.1"},
                         {"MASTER_PORT", "29500"}};

Vars with(Vars vars, const Vars& more) {
  for (const auto& [name, value] : more) vars[name] = value;
  return vars;
}

TEST(StoreLocation, RankZeroServesAtTheLaunchersEndpointByDefault) {
  StoreLocation where = locate(kTorchrunRank, "10.0.0.1", 29500);
  EXPECT_EQ(where.server, StoreServer::kRankZero);
  EXPECT_EQ(where.host, "10.0.0.1");
  EXPECT_EQ(where.port, 29500);
  EXPECT_EQ(where.from, "MASTER_ADDR:MASTER_PORT");
  EXPECT_EQ(where.prefix, "");
  // gyrerun --no-agent-store and torchrun's c10d rendezvous say False.
  where = locate(with(kTorchrunRank, {{"TORCHELASTIC_USE_AGENT_STORE", "False"}}), "10.0.0.1",
                 29500);
  EXPECT_EQ(where.server, StoreServer::kRankZero);
  EXPECT_EQ(where.port, 29500);
}

TEST(StoreLocation, GyrerunsAgentStoreMakesEveryRankAClientUnderTheAttemptsPrefix) {
  const Vars agent = with(kTorchrunRank, {{"GYRE_AGENT_STORE", "10.0.0.1:41234"},
                                          {"TORCHELASTIC_USE_AGENT_STORE", "False"},
                                          {"TORCHELASTIC_RESTART_COUNT", "2"}});
  for (const char* rank : {"0", "1"}) {
    StoreLocation where = locate(with(agent, {{"RANK", rank}}), "10.0.0.1", 29500);
    EXPECT_EQ(where.server, StoreServer::kAgent);
    EXPECT_EQ(where.host, "10.0.0.1");
    EXPECT_EQ(where.port, 41234);
    EXPECT_EQ(where.from, "GYRE_AGENT_STORE");
    EXPECT_EQ(where.prefix, "/worker/attempt_2");
  }
  // No restart count (a launcher other than gyrerun): the first attempt's prefix.
  Vars first = agent;
  first.erase("TORCHELASTIC_RESTART_COUNT");
  EXPECT_EQ(locate(first, "10.0.0.1", 29500).prefix, "/worker/attempt_0");
  // IPv6, bracketed.
  StoreLocation v6 =
      locate(with(agent, {{"GYRE_AGENT_STORE", "[fd00::1]:5000"}}), "10.0.0.1", 29500);
  EXPECT_EQ(v6.host, "fd00::1");
  EXPECT_EQ(v6.port, 5000);
}

TEST(StoreLocation, TorchrunsOwnAgentStoreMovesRankZerosStoreOnePortUp) {
  const Vars torchrun = with(kTorchrunRank, {{"TORCHELASTIC_USE_AGENT_STORE", "True"}});
  StoreLocation where = locate(torchrun, "10.0.0.1", 29500);
  EXPECT_EQ(where.server, StoreServer::kRankZeroBesideAgent);
  EXPECT_EQ(where.host, "10.0.0.1");
  EXPECT_EQ(where.port, 29501);
  EXPECT_NE(where.from.find("MASTER_PORT+1"), std::string::npos) << where.from;
  EXPECT_NE(where.from.find("TORCHELASTIC_USE_AGENT_STORE=True"), std::string::npos) << where.from;
  try {
    locate(with(torchrun, {{"MASTER_PORT", "65535"}}), "10.0.0.1", 65535);
    ADD_FAILURE() << "no error for MASTER_PORT=65535";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--master-port"), std::string::npos) << e.what();
  }
}

TEST(StoreLocation, AnEndpointOtherThanTheLaunchersIsNeverRedirected) {
  const Vars both = with(kTorchrunRank, {{"GYRE_AGENT_STORE", "10.0.0.1:41234"},
                                         {"TORCHELASTIC_USE_AGENT_STORE", "True"}});
  for (auto [host, port] : {std::pair<std::string, int>{"127.0.0.1", 29500}, {"10.0.0.1", 29600}}) {
    StoreLocation where = locate(both, host, port);
    EXPECT_EQ(where.server, StoreServer::kRankZero) << host << ":" << port;
    EXPECT_EQ(where.host, host);
    EXPECT_EQ(where.port, port);
  }
}

TEST(StoreLocation, MalformedValuesNameTheVariable) {
  for (const char* bad : {"10.0.0.1", "10.0.0.1:", ":80", "10.0.0.1:0", "10.0.0.1:70000",
                          "fd00::1:80", "[fd00::1:80", "host:x"}) {
    try {
      locate(with(kTorchrunRank, {{"GYRE_AGENT_STORE", bad}}), "10.0.0.1", 29500);
      ADD_FAILURE() << "no error for GYRE_AGENT_STORE=" << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find(std::string("GYRE_AGENT_STORE='") + bad + "'"),
                std::string::npos)
          << e.what();
    }
  }
  try {
    locate(with(kTorchrunRank, {{"GYRE_AGENT_STORE", "h:1"}, {"TORCHELASTIC_RESTART_COUNT", "-1"}}),
           "10.0.0.1", 29500);
    ADD_FAILURE() << "no error for TORCHELASTIC_RESTART_COUNT=-1";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("TORCHELASTIC_RESTART_COUNT='-1'"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace gyre
