#include "bench/mpi_bootstrap.h"

#include "base/launch_env.h"

#ifdef GYRE_HAVE_MPI
#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "base/error.h"
#include "ring/host_identity.h"
#include "store/tcp_store.h"
#endif

namespace gyre::bench {

#ifndef GYRE_HAVE_MPI

bool builtWithMpi() { return false; }
std::unique_ptr<Communicator> communicatorFromMpi(const Options&) { return nullptr; }

#else

namespace {

void check(int rc, const char* call) {
  if (rc != MPI_SUCCESS) fail(ErrorCode::kSystemError, "{} failed (MPI error {})", call, rc);
}

// Rank 0's store address and port, or its error, in one broadcastable record.
struct StoreRecord {
  int port = 0;  // 0: rank 0 failed, `text` says why
  char text[1024] = {0};
};

}  // namespace

bool builtWithMpi() { return true; }

std::unique_ptr<Communicator> communicatorFromMpi(const Options& options) {
  const LaunchEnv launch = launchEnvFromProcess();
  if (launch.launcher != Launcher::kOpenMpi) return nullptr;
  check(MPI_Init(nullptr, nullptr), "MPI_Init");
  int rank = 0, size = 0;
  check(MPI_Comm_rank(MPI_COMM_WORLD, &rank), "MPI_Comm_rank");
  check(MPI_Comm_size(MPI_COMM_WORLD, &size), "MPI_Comm_size");
  std::shared_ptr<TcpStore> store;
  StoreRecord record;
  if (rank == 0) {
    try {
      // The interface this host reaches mpirun's host through (its own address when rank 0
      // runs there), so the other ranks, which mpirun reaches too, can reach it.
      const std::string host = launch.masterAddrFrom == "MASTER_ADDR"
                                   ? launch.masterAddr
                                   : listenAddress(options.socketIfname, launch.masterAddr);
      store = TcpStore::serve(host, 0, options.timeout, options.token);
      record.port = store->port();
      std::snprintf(record.text, sizeof(record.text), "%s", host.c_str());
    } catch (const Error& e) {
      std::snprintf(record.text, sizeof(record.text), "%s", e.what());
    }
  }
  check(MPI_Bcast(&record, sizeof(record), MPI_BYTE, 0, MPI_COMM_WORLD), "MPI_Bcast");
  check(MPI_Finalize(), "MPI_Finalize");
  if (record.port == 0) {
    fail(ErrorCode::kSystemError, "rank 0 could not start the bootstrap store: {}", record.text);
  }
  const std::string host = record.text;
  if (rank != 0) store = TcpStore::connect(host, static_cast<uint16_t>(record.port), options.timeout,
                                          options.token, rank);
  return Communicator::create(std::move(store), rank, size, options, host);
}

#endif

}  // namespace gyre::bench
