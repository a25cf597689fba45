// checkAllReduce: one exact all-reduce check shared by the multi-process tests that run
// all-reduce on particular topologies (stream_out_test, hierarchical_allreduce_test,
// netns_hierarchical_test). It runs comm.allReduce on testing::inputBuffer and checks,
// failing through testing::check with a message that names the rank, the algorithm the
// call ran, the dtype, op, count and form:
// - the result equals testing::expectedBuffer bit for bit;
// - out of place: nothing written past recvbuf, and sendbuf left as it was;
// - every rank holds the same bits (a checksum min/max over the ranks).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "ring/communicator.h"
#include "test_values.h"

namespace gyre::testing {

inline void checkAllReduce(Communicator& comm, DataType t, ReduceOp op, size_t count,
                           bool inPlace) {
  const size_t bytes = count * dtypeSize(t);
  std::vector<std::byte> input = inputBuffer(t, op, comm.rank(), count);
  std::vector<std::byte> output(bytes + 1, std::byte{0x5a});
  void* recv = inPlace ? input.data() : output.data();
  comm.allReduce(input.data(), recv, count, t, op);
  const std::vector<std::byte> expected = expectedBuffer(t, op, comm.size(), count);
  const std::string what = fmt::format("rank {}/{} ({}): {} {} count {} {}", comm.rank(),
                                       comm.size(), comm.allReduceAlgorithm(bytes), dtypeName(t),
                                       opName(op), count, inPlace ? "in place" : "out of place");
  check(sameBytes(recv, expected.data(), bytes), "{}: wrong result", what);
  if (!inPlace) {
    check(output[bytes] == std::byte{0x5a}, "{}: wrote past the end of recvbuf", what);
    const std::vector<std::byte> again = inputBuffer(t, op, comm.rank(), count);
    check(sameBytes(input.data(), again.data(), bytes), "{}: sendbuf was modified", what);
  }
  uint64_t sum = checksum(recv, bytes), lo = sum, hi = sum;
  comm.allReduce(&lo, &lo, 1, DataType::kUint64, ReduceOp::kMin);
  comm.allReduce(&hi, &hi, 1, DataType::kUint64, ReduceOp::kMax);
  check(lo == hi, "{}: ranks hold different bits", what);
}

}  // namespace gyre::testing
