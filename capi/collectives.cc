// The C API's collectives and point-to-point calls (capi/gyre.h), blocking and async.
// Each operation is one internal function (request == nullptr: the blocking form) behind
// its two entry points; argument checks are gyre::Communicator's, plus the C enum ranges.
#include <cstring>
#include <limits>

#include "capi/gyre.h"
#include "capi/handles.h"

using gyre::ErrorCode;
using gyre::fail;
using gyre::capi::issue;
using gyre::capi::raw;
using gyre::capi::requestMissing;
using gyre::capi::toDataType;
using gyre::capi::toReduceOp;

namespace {

// NCCL's out-of-place broadcast: the root's data moves to recvbuff, which is broadcast.
gyreResult_t broadcast(const void* sendbuff, void* recvbuff, size_t count, int datatype, int root,
                       gyreComm* comm, gyreRequest_t* request, const char* fn) {
  return issue(comm, request, fn, [&](gyre::Communicator& c, bool async) {
    gyre::DataType dtype = toDataType(datatype, c);
    if (c.rank() == root && count > 0 && sendbuff != recvbuff) {
      if (sendbuff == nullptr || recvbuff == nullptr) {
        fail(ErrorCode::kInvalidArgument, "rank {}: broadcast root: null {} with count {}",
             c.rank(), sendbuff ? "recvbuff" : "sendbuff", count);
      }
      if (count > std::numeric_limits<size_t>::max() / gyre::dtypeSize(dtype)) {
        fail(ErrorCode::kInvalidArgument, "rank {}: broadcast: count {} is too large", c.rank(),
             count);
      }
      // Earlier async operations may still read or write either buffer.
      try {
        comm->lastAsync.wait();
      } catch (const gyre::Error&) {
        // That failure aborted the communicator; the broadcast below reports it.
      }
      std::memmove(recvbuff, sendbuff, count * gyre::dtypeSize(dtype));
    }
    if (async) return c.broadcastAsync(recvbuff, count, dtype, root);
    c.broadcast(recvbuff, count, dtype, root);
    return gyre::Work();
  });
}

gyreResult_t allReduce(const void* sendbuff, void* recvbuff, size_t count, int datatype, int op,
                       gyreComm* comm, gyreRequest_t* request, const char* fn) {
  return issue(comm, request, fn, [&](gyre::Communicator& c, bool async) {
    auto dtype = toDataType(datatype, c);
    auto rop = toReduceOp(op, c);
    if (async) return c.allReduceAsync(sendbuff, recvbuff, count, dtype, rop);
    c.allReduce(sendbuff, recvbuff, count, dtype, rop);
    return gyre::Work();
  });
}

gyreResult_t reduce(const void* sendbuff, void* recvbuff, size_t count, int datatype, int op,
                    int root, gyreComm* comm, gyreRequest_t* request, const char* fn) {
  return issue(comm, request, fn, [&](gyre::Communicator& c, bool async) {
    auto dtype = toDataType(datatype, c);
    auto rop = toReduceOp(op, c);
    if (async) return c.reduceAsync(sendbuff, recvbuff, count, dtype, rop, root);
    c.reduce(sendbuff, recvbuff, count, dtype, rop, root);
    return gyre::Work();
  });
}

gyreResult_t allGather(const void* sendbuff, void* recvbuff, size_t sendcount, int datatype,
                       gyreComm* comm, gyreRequest_t* request, const char* fn) {
  return issue(comm, request, fn, [&](gyre::Communicator& c, bool async) {
    auto dtype = toDataType(datatype, c);
    if (async) return c.allGatherAsync(sendbuff, recvbuff, sendcount, dtype);
    c.allGather(sendbuff, recvbuff, sendcount, dtype);
    return gyre::Work();
  });
}

gyreResult_t reduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, int datatype,
                           int op, gyreComm* comm, gyreRequest_t* request, const char* fn) {
  return issue(comm, request, fn, [&](gyre::Communicator& c, bool async) {
    auto dtype = toDataType(datatype, c);
    auto rop = toReduceOp(op, c);
    if (async) return c.reduceScatterAsync(sendbuff, recvbuff, recvcount, dtype, rop);
    c.reduceScatter(sendbuff, recvbuff, recvcount, dtype, rop);
    return gyre::Work();
  });
}

gyreResult_t allToAll(const void* sendbuff, void* recvbuff, size_t count, int datatype,
                      gyreComm* comm, gyreRequest_t* request, const char* fn) {
  return issue(comm, request, fn, [&](gyre::Communicator& c, bool async) {
    auto dtype = toDataType(datatype, c);
    if (async) return c.allToAllAsync(sendbuff, recvbuff, count, dtype);
    c.allToAll(sendbuff, recvbuff, count, dtype);
    return gyre::Work();
  });
}

gyreResult_t allToAllv(const void* sendbuff, const size_t* sendcounts, const size_t* sdispls,
                       void* recvbuff, const size_t* recvcounts, const size_t* rdispls,
                       int datatype, gyreComm* comm, gyreRequest_t* request, const char* fn) {
  return issue(comm, request, fn, [&](gyre::Communicator& c, bool async) {
    auto dtype = toDataType(datatype, c);
    if (async) {
      return c.allToAllvAsync(sendbuff, sendcounts, sdispls, recvbuff, recvcounts, rdispls, dtype);
    }
    c.allToAllv(sendbuff, sendcounts, sdispls, recvbuff, recvcounts, rdispls, dtype);
    return gyre::Work();
  });
}

gyreResult_t send(const void* sendbuff, size_t count, int datatype, int peer, gyreComm* comm,
                  gyreRequest_t* request, const char* fn) {
  return issue(comm, request, fn, [&](gyre::Communicator& c, bool async) {
    auto dtype = toDataType(datatype, c);
    if (async) return c.sendAsync(sendbuff, count, dtype, peer);
    c.send(sendbuff, count, dtype, peer);
    return gyre::Work();
  });
}

gyreResult_t recv(void* recvbuff, size_t count, int datatype, int peer, gyreComm* comm,
                  gyreRequest_t* request, const char* fn) {
  return issue(comm, request, fn, [&](gyre::Communicator& c, bool async) {
    auto dtype = toDataType(datatype, c);
    if (async) return c.recvAsync(recvbuff, count, dtype, peer);
    c.recv(recvbuff, count, dtype, peer);
    return gyre::Work();
  });
}

gyreResult_t barrier(gyreComm* comm, gyreRequest_t* request, const char* fn) {
  return issue(comm, request, fn, [&](gyre::Communicator& c, bool async) {
    if (async) return c.barrierAsync();
    c.barrier();
    return gyre::Work();
  });
}

}  // namespace

extern "C" {

gyreResult_t gyreAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           gyreDataType_t datatype, gyreRedOp_t op, gyreComm_t comm) {
  return allReduce(sendbuff, recvbuff, count, raw(datatype), raw(op), comm, nullptr,
                   "gyreAllReduce");
}

gyreResult_t gyreAllReduceAsync(const void* sendbuff, void* recvbuff, size_t count,
                                gyreDataType_t datatype, gyreRedOp_t op, gyreComm_t comm,
                                gyreRequest_t* request) {
  const char* fn = "gyreAllReduceAsync";
  if (requestMissing(comm, request, fn)) return gyreInvalidArgument;
  return allReduce(sendbuff, recvbuff, count, raw(datatype), raw(op), comm, request, fn);
}

gyreResult_t gyreBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                           gyreDataType_t datatype, int root, gyreComm_t comm) {
  return broadcast(sendbuff, recvbuff, count, raw(datatype), root, comm, nullptr, "gyreBroadcast");
}

gyreResult_t gyreBroadcastAsync(const void* sendbuff, void* recvbuff, size_t count,
                                gyreDataType_t datatype, int root, gyreComm_t comm,
                                gyreRequest_t* request) {
  const char* fn = "gyreBroadcastAsync";
  if (requestMissing(comm, request, fn)) return gyreInvalidArgument;
  return broadcast(sendbuff, recvbuff, count, raw(datatype), root, comm, request, fn);
}

gyreResult_t gyreReduce(const void* sendbuff, void* recvbuff, size_t count, gyreDataType_t datatype,
                        gyreRedOp_t op, int root, gyreComm_t comm) {
  return reduce(sendbuff, recvbuff, count, raw(datatype), raw(op), root, comm, nullptr,
                "gyreReduce");
}

gyreResult_t gyreReduceAsync(const void* sendbuff, void* recvbuff, size_t count,
                             gyreDataType_t datatype, gyreRedOp_t op, int root, gyreComm_t comm,
                             gyreRequest_t* request) {
  const char* fn = "gyreReduceAsync";
  if (requestMissing(comm, request, fn)) return gyreInvalidArgument;
  return reduce(sendbuff, recvbuff, count, raw(datatype), raw(op), root, comm, request, fn);
}

gyreResult_t gyreAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                           gyreDataType_t datatype, gyreComm_t comm) {
  return allGather(sendbuff, recvbuff, sendcount, raw(datatype), comm, nullptr, "gyreAllGather");
}

gyreResult_t gyreAllGatherAsync(const void* sendbuff, void* recvbuff, size_t sendcount,
                                gyreDataType_t datatype, gyreComm_t comm, gyreRequest_t* request) {
  const char* fn = "gyreAllGatherAsync";
  if (requestMissing(comm, request, fn)) return gyreInvalidArgument;
  return allGather(sendbuff, recvbuff, sendcount, raw(datatype), comm, request, fn);
}

gyreResult_t gyreReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                               gyreDataType_t datatype, gyreRedOp_t op, gyreComm_t comm) {
  return reduceScatter(sendbuff, recvbuff, recvcount, raw(datatype), raw(op), comm, nullptr,
                       "gyreReduceScatter");
}

gyreResult_t gyreReduceScatterAsync(const void* sendbuff, void* recvbuff, size_t recvcount,
                                    gyreDataType_t datatype, gyreRedOp_t op, gyreComm_t comm,
                                    gyreRequest_t* request) {
  const char* fn = "gyreReduceScatterAsync";
  if (requestMissing(comm, request, fn)) return gyreInvalidArgument;
  return reduceScatter(sendbuff, recvbuff, recvcount, raw(datatype), raw(op), comm, request, fn);
}

gyreResult_t gyreAllToAll(const void* sendbuff, void* recvbuff, size_t count,
                          gyreDataType_t datatype, gyreComm_t comm) {
  return allToAll(sendbuff, recvbuff, count, raw(datatype), comm, nullptr, "gyreAllToAll");
}

gyreResult_t gyreAllToAllAsync(const void* sendbuff, void* recvbuff, size_t count,
                               gyreDataType_t datatype, gyreComm_t comm, gyreRequest_t* request) {
  const char* fn = "gyreAllToAllAsync";
  if (requestMissing(comm, request, fn)) return gyreInvalidArgument;
  return allToAll(sendbuff, recvbuff, count, raw(datatype), comm, request, fn);
}

gyreResult_t gyreAllToAllv(const void* sendbuff, const size_t sendcounts[], const size_t sdispls[],
                           void* recvbuff, const size_t recvcounts[], const size_t rdispls[],
                           gyreDataType_t datatype, gyreComm_t comm) {
  return allToAllv(sendbuff, sendcounts, sdispls, recvbuff, recvcounts, rdispls, raw(datatype),
                   comm, nullptr, "gyreAllToAllv");
}

gyreResult_t gyreAllToAllvAsync(const void* sendbuff, const size_t sendcounts[],
                                const size_t sdispls[], void* recvbuff, const size_t recvcounts[],
                                const size_t rdispls[], gyreDataType_t datatype, gyreComm_t comm,
                                gyreRequest_t* request) {
  const char* fn = "gyreAllToAllvAsync";
  if (requestMissing(comm, request, fn)) return gyreInvalidArgument;
  return allToAllv(sendbuff, sendcounts, sdispls, recvbuff, recvcounts, rdispls, raw(datatype),
                   comm, request, fn);
}

gyreResult_t gyreSend(const void* sendbuff, size_t count, gyreDataType_t datatype, int peer,
                      gyreComm_t comm) {
  return send(sendbuff, count, raw(datatype), peer, comm, nullptr, "gyreSend");
}

gyreResult_t gyreSendAsync(const void* sendbuff, size_t count, gyreDataType_t datatype, int peer,
                           gyreComm_t comm, gyreRequest_t* request) {
  const char* fn = "gyreSendAsync";
  if (requestMissing(comm, request, fn)) return gyreInvalidArgument;
  return send(sendbuff, count, raw(datatype), peer, comm, request, fn);
}

gyreResult_t gyreRecv(void* recvbuff, size_t count, gyreDataType_t datatype, int peer,
                      gyreComm_t comm) {
  return recv(recvbuff, count, raw(datatype), peer, comm, nullptr, "gyreRecv");
}

gyreResult_t gyreRecvAsync(void* recvbuff, size_t count, gyreDataType_t datatype, int peer,
                           gyreComm_t comm, gyreRequest_t* request) {
  const char* fn = "gyreRecvAsync";
  if (requestMissing(comm, request, fn)) return gyreInvalidArgument;
  return recv(recvbuff, count, raw(datatype), peer, comm, request, fn);
}

gyreResult_t gyreSendRecv(const void* sendbuff, size_t sendcount, int sendpeer, void* recvbuff,
                          size_t recvcount, int recvpeer, gyreDataType_t datatype,
                          gyreComm_t comm) {
  return issue(comm, nullptr, "gyreSendRecv", [&](gyre::Communicator& c, bool) {
    c.sendRecv(sendbuff, sendcount, sendpeer, recvbuff, recvcount, recvpeer,
               toDataType(raw(datatype), c));
    return gyre::Work();
  });
}

gyreResult_t gyreBarrier(gyreComm_t comm) { return barrier(comm, nullptr, "gyreBarrier"); }

gyreResult_t gyreBarrierAsync(gyreComm_t comm, gyreRequest_t* request) {
  const char* fn = "gyreBarrierAsync";
  if (requestMissing(comm, request, fn)) return gyreInvalidArgument;
  return barrier(comm, request, fn);
}

}  // extern "C"
