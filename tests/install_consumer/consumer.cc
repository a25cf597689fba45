// What a program using an installed gyre does: two ranks (gyre::spawn forks them), an
// all-reduce checked exactly, an async one, and a bad argument whose gyre::Error is
// caught here, outside the library (with libgyre.so: the exported typeinfo at work), and
// the library's version against the installed header's. Prints one line and exits 0 when
// every check passed.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/version.h"
#include "ring/communicator.h"
#include "ring/spawn.h"

namespace {

void check(bool ok, const std::string& what) {
  if (!ok) throw gyre::Error(gyre::ErrorCode::kInternal, "consumer check failed: " + what);
}

void ranks(gyre::Communicator& comm) {
  check(comm.size() == 2, "size");
  // Rank r contributes (r + 1) * (i % 7): every sum is a small integer, exact in float.
  std::vector<float> data(100000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = float((comm.rank() + 1) * (i % 7));
  comm.allReduce(data.data(), data.data(), data.size(), gyre::DataType::kFloat32,
                 gyre::ReduceOp::kSum);
  for (size_t i = 0; i < data.size(); ++i) check(data[i] == float(3 * (i % 7)), "allReduce");

  std::vector<int64_t> counts(1000, comm.rank() + 1), total(1000, -1);
  gyre::Work work = comm.allReduceAsync(counts.data(), total.data(), counts.size(),
                                        gyre::DataType::kInt64, gyre::ReduceOp::kMax);
  work.wait();
  for (int64_t v : total) check(v == 2, "allReduceAsync max");

  try {
    comm.broadcast(data.data(), 1, gyre::DataType::kFloat32, /*root=*/5);
    check(false, "broadcast from root 5 of 2 was accepted");
  } catch (const gyre::Error& e) {
    check(e.code() == gyre::ErrorCode::kInvalidArgument, "error code");
    check(std::string(e.what()).find("root 5") != std::string::npos, e.what());
  }
  comm.barrier();  // the communicator is still usable after the rejected call
}

}  // namespace

int main() {
  static_assert(GYRE_VERSION_CODE == GYRE_VERSION_MAJOR * 10000 + GYRE_VERSION_MINOR * 100 +
                                         GYRE_VERSION_PATCH);
  try {
    check(std::strcmp(gyre::version(), GYRE_VERSION_STRING) == 0,
          std::string("gyre::version() is ") + gyre::version() + ", the header " +
              GYRE_VERSION_STRING);
    check(*gyre::versionCommit() != '\0', "gyre::versionCommit() is empty");
    gyre::spawn(2, ranks);
  } catch (const gyre::Error& e) {
    std::fprintf(stderr, "consumer: %s\n", e.what());
    return 1;
  }
  std::printf("consumer: gyre %s (commit %s), 2 ranks, allReduce sum and async max exact, bad "
              "root rejected\n", gyre::version(), gyre::versionCommit());
  return 0;
}
