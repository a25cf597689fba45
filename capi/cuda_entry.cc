// The C API's device entry points (capi/gyre_cuda.h) over gyre::CudaCommunicator: the C
// enums checked, out-of-place broadcast as a copy on the stream, reduce as an all-reduce
// (docs/api.md, "Device buffers"). Built where the cuda layer is (a CUDA toolkit, or the
// fake runtime of test builds); cuda_none.cc stands in for it elsewhere.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <limits>
#include <memory>
#include <string>

#include "base/error.h"
#include "capi/gyre_cuda.h"
#include "capi/handles.h"
#include "cuda/cuda_communicator.h"
#include "cuda/device_call_checks.h"

struct gyreCudaComm {
  std::unique_ptr<gyre::CudaCommunicator> comm;
  // The non-root ranks' result of gyreCudaReduce (an all-reduce there): one buffer, grown
  // on demand. Reusing it is safe because the communicator's collectives run one after
  // another in call order on either path.
  void* scratch = nullptr;
  size_t scratchBytes = 0;
};

using gyre::CudaCommunicator;
using gyre::DataType;
using gyre::ErrorCode;
using gyre::fail;
using gyre::ReduceOp;
using gyre::capi::guarded;
using gyre::capi::needOut;
using gyre::capi::raw;

namespace {

CudaCommunicator& need(gyreCudaComm* comm) {
  if (comm == nullptr || !comm->comm) fail(ErrorCode::kInvalidArgument, "comm is NULL");
  return *comm->comm;
}

// The host API's checks (capi/handles.h), naming this communicator's rank.
DataType toDataType(int value, const CudaCommunicator& c) {
  return gyre::capi::toDataType(value, c.rank());
}
ReduceOp toReduceOp(int value, const CudaCommunicator& c) {
  return gyre::capi::toReduceOp(value, c.rank());
}

void checkRoot(int root, const CudaCommunicator& c, const char* what) {
  if (root < 0 || root >= c.size()) {
    fail(ErrorCode::kInvalidArgument, "rank {}: device {}: root {} is not a rank of {}", c.rank(),
         what, root, c.size());
  }
}

size_t bytesOf(size_t count, DataType dtype, const CudaCommunicator& c, const char* what) {
  if (count > std::numeric_limits<size_t>::max() / 2 / gyre::dtypeSize(dtype)) {
    fail(ErrorCode::kInvalidArgument, "rank {}: device {}: count {} is too large", c.rank(), what,
         count);
  }
  return count * gyre::dtypeSize(dtype);
}

// Runs `body` with the communicator's device current, and restores the caller's.
template <typename Body>
void onDevice(const CudaCommunicator& c, const char* what, Body&& body) {
  int previous = -1;
  gyre::checkCudaCall(cudaGetDevice(&previous), "cudaGetDevice", what, c.rank());
  gyre::checkCudaCall(cudaSetDevice(c.device()), "cudaSetDevice", what, c.rank());
  try {
    body();
  } catch (...) {
    cudaSetDevice(previous);
    throw;
  }
  cudaSetDevice(previous);
}

// A device buffer of at least `bytes` for the non-root ranks of a reduce. Growing it
// waits for the collectives enqueued so far, which may still write the old one.
void* scratch(gyreCudaComm* comm, size_t bytes) {
  if (bytes <= comm->scratchBytes) return comm->scratch;
  CudaCommunicator& c = *comm->comm;
  size_t grown = std::max<size_t>(bytes, 2 * comm->scratchBytes);
  if (comm->scratch != nullptr) {
    c.synchronize();
    onDevice(c, "reduce", [&] {
      gyre::checkCudaCall(cudaFree(comm->scratch), "cudaFree", "device reduce", c.rank());
    });
    comm->scratch = nullptr;
    comm->scratchBytes = 0;
  }
  onDevice(c, "reduce", [&] {
    void* p = nullptr;
    gyre::checkCudaCall(cudaMalloc(&p, grown), "cudaMalloc (the reduce's scratch buffer)",
                        "device reduce", c.rank());
    comm->scratch = p;
  });
  comm->scratchBytes = grown;
  return comm->scratch;
}

}  // namespace

gyreResult_t gyreCudaCommCreate(gyreComm_t* hostComm, int device, gyreCudaComm_t* cudaComm) {
  if (cudaComm != nullptr) *cudaComm = nullptr;
  gyre::capi::ErrorSlot* slot = hostComm ? gyre::capi::slotOf(*hostComm) : nullptr;
  return guarded(slot, "gyreCudaCommCreate", [&] {
    needOut(hostComm, "hostComm");
    needOut(cudaComm, "cudaComm");
    gyreComm* host = *hostComm;
    gyre::Communicator& c = gyre::capi::need(host);
    // What can be checked before the host communicator is handed over, so that these
    // failures leave it usable.
    int devices = 0;
    gyre::checkCudaCall(cudaGetDeviceCount(&devices), "cudaGetDeviceCount",
                        "creating the device communicator", c.rank());
    if (device < -1 || device >= devices) {
      fail(ErrorCode::kInvalidArgument,
           "rank {}: device {} does not exist ({} CUDA devices; -1: the current one)", c.rank(),
           device, devices);
    }
    if (device == -1) {
      int current = -1;
      gyre::checkCudaCall(cudaGetDevice(&current), "cudaGetDevice",
                          "creating the device communicator", c.rank());
    }
    auto out = std::make_unique<gyreCudaComm>();
    gyre::CudaOptions options;
    options.device = device;
    const int rank = c.rank();
    try {
      out->comm = CudaCommunicator::create(std::move(host->comm), options);
    } catch (const gyre::Error& e) {
      fail(e.code(), "{} (rank {}: hostComm was handed over and is gone: gyreCommDestroy it)",
           e.what(), rank);
    }
    delete host;
    *hostComm = nullptr;
    *cudaComm = out.release();
  });
}

gyreResult_t gyreCudaCommDestroy(gyreCudaComm_t comm) {
  return guarded(nullptr, "gyreCudaCommDestroy", [&] {
    if (comm == nullptr) return;
    std::unique_ptr<gyreCudaComm> owned(comm);
    const int device = owned->comm ? owned->comm->device() : -1;
    const int rank = owned->comm ? owned->comm->rank() : -1;
    owned->comm.reset();  // finishes the queued collectives, then waits for the device
    if (owned->scratch != nullptr) {
      int previous = -1;
      cudaGetDevice(&previous);
      cudaSetDevice(device);
      const cudaError_t err = cudaFree(owned->scratch);
      cudaSetDevice(previous);
      gyre::checkCudaCall(err, "cudaFree", "the reduce's scratch buffer", rank);
    }
  });
}

gyreResult_t gyreCudaCommAbort(gyreCudaComm_t comm) {
  return guarded(nullptr, "gyreCudaCommAbort", [&] { need(comm).abort(); });
}

gyreResult_t gyreCudaCommSynchronize(gyreCudaComm_t comm) {
  return guarded(nullptr, "gyreCudaCommSynchronize", [&] { need(comm).synchronize(); });
}

gyreResult_t gyreCudaCommUsesDeviceIpc(gyreCudaComm_t comm, int* usesIpc) {
  return guarded(nullptr, "gyreCudaCommUsesDeviceIpc", [&] {
    CudaCommunicator& c = need(comm);
    needOut(usesIpc, "usesIpc");
    *usesIpc = c.usesDeviceIpc() ? 1 : 0;
  });
}

gyreResult_t gyreCudaAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                               gyreDataType_t datatype, gyreRedOp_t op, gyreCudaComm_t comm,
                               gyreCudaStream_t stream) {
  return guarded(nullptr, "gyreCudaAllReduce", [&] {
    CudaCommunicator& c = need(comm);
    const DataType dtype = toDataType(raw(datatype), c);
    const ReduceOp rop = toReduceOp(raw(op), c);
    c.allReduce(sendbuff, recvbuff, count, dtype, rop, stream);
  });
}

gyreResult_t gyreCudaBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                               gyreDataType_t datatype, int root, gyreCudaComm_t comm,
                               gyreCudaStream_t stream) {
  return guarded(nullptr, "gyreCudaBroadcast", [&] {
    CudaCommunicator& c = need(comm);
    const DataType dtype = toDataType(raw(datatype), c);
    checkRoot(root, c, "broadcast");
    const size_t bytes = bytesOf(count, dtype, c, "broadcast");
    if (c.rank() == root && count > 0 && sendbuff != recvbuff) {
      // NCCL's out-of-place root: its data moves to recvbuff on `stream`, which is then
      // broadcast in place. Checked first, so that a refused call enqueues nothing.
      const std::string what = fmt::format("device broadcast (root, count {})", count);
      if (sendbuff == nullptr || recvbuff == nullptr) {
        fail(ErrorCode::kInvalidArgument, "rank {}: {}: null {}", c.rank(), what,
             sendbuff ? "recvbuff" : "sendbuff");
      }
      gyre::checkDevicePointer(sendbuff, "sendbuff", what, c.rank(), c.device());
      gyre::checkDevicePointer(recvbuff, "recvbuff", what, c.rank(), c.device());
      gyre::checkCudaCall(cudaMemcpyAsync(recvbuff, sendbuff, bytes, cudaMemcpyDefault, stream),
                          "cudaMemcpyAsync", what, c.rank());
    }
    c.broadcast(recvbuff, count, dtype, root, stream);
  });
}

gyreResult_t gyreCudaReduce(const void* sendbuff, void* recvbuff, size_t count,
                            gyreDataType_t datatype, gyreRedOp_t op, int root,
                            gyreCudaComm_t comm, gyreCudaStream_t stream) {
  return guarded(nullptr, "gyreCudaReduce", [&] {
    CudaCommunicator& c = need(comm);
    const DataType dtype = toDataType(raw(datatype), c);
    const ReduceOp rop = toReduceOp(raw(op), c);
    checkRoot(root, c, "reduce");
    const size_t bytes = bytesOf(count, dtype, c, "reduce");
    if (count > 0 && (sendbuff == nullptr || (c.rank() == root && recvbuff == nullptr))) {
      fail(ErrorCode::kInvalidArgument, "rank {}: device reduce (count {}, root {}): null {}",
           c.rank(), count, root, sendbuff ? "recvbuff" : "sendbuff");
    }
    // An all-reduce whose result the other ranks leave in a scratch buffer: the device
    // path has no rooted reduction (docs/api.md, "Device buffers").
    void* out = recvbuff;
    if (c.rank() != root && count > 0) {
      gyre::checkDevicePointer(sendbuff, "sendbuff",
                               fmt::format("device reduce (count {}, root {})", count, root),
                               c.rank(), c.device());
      out = scratch(comm, bytes);
    }
    c.allReduce(sendbuff, out, count, dtype, rop, stream);
  });
}

gyreResult_t gyreCudaAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                               gyreDataType_t datatype, gyreCudaComm_t comm,
                               gyreCudaStream_t stream) {
  return guarded(nullptr, "gyreCudaAllGather", [&] {
    CudaCommunicator& c = need(comm);
    const DataType dtype = toDataType(raw(datatype), c);
    c.allGather(sendbuff, recvbuff, sendcount, dtype, stream);
  });
}

gyreResult_t gyreCudaReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                   gyreDataType_t datatype, gyreRedOp_t op, gyreCudaComm_t comm,
                                   gyreCudaStream_t stream) {
  return guarded(nullptr, "gyreCudaReduceScatter", [&] {
    CudaCommunicator& c = need(comm);
    const DataType dtype = toDataType(raw(datatype), c);
    const ReduceOp rop = toReduceOp(raw(op), c);
    c.reduceScatter(sendbuff, recvbuff, recvcount, dtype, rop, stream);
  });
}

gyreResult_t gyreCudaAllToAll(const void* sendbuff, void* recvbuff, size_t count,
                              gyreDataType_t datatype, gyreCudaComm_t comm,
                              gyreCudaStream_t stream) {
  return guarded(nullptr, "gyreCudaAllToAll", [&] {
    CudaCommunicator& c = need(comm);
    const DataType dtype = toDataType(raw(datatype), c);
    c.allToAll(sendbuff, recvbuff, count, dtype, stream);
  });
}

gyreResult_t gyreCudaAllToAllv(const void* sendbuff, const size_t sendcounts[],
                               const size_t sdispls[], void* recvbuff, const size_t recvcounts[],
                               const size_t rdispls[], gyreDataType_t datatype,
                               gyreCudaComm_t comm, gyreCudaStream_t stream) {
  return guarded(nullptr, "gyreCudaAllToAllv", [&] {
    CudaCommunicator& c = need(comm);
    const DataType dtype = toDataType(raw(datatype), c);
    c.allToAllv(sendbuff, sendcounts, sdispls, recvbuff, recvcounts, rdispls, dtype, stream);
  });
}

gyreResult_t gyreCudaSend(const void* sendbuff, size_t count, gyreDataType_t datatype, int peer,
                          gyreCudaComm_t comm, gyreCudaStream_t stream) {
  return guarded(nullptr, "gyreCudaSend", [&] {
    CudaCommunicator& c = need(comm);
    const DataType dtype = toDataType(raw(datatype), c);
    c.send(sendbuff, count, dtype, peer, stream);
  });
}

gyreResult_t gyreCudaRecv(void* recvbuff, size_t count, gyreDataType_t datatype, int peer,
                          gyreCudaComm_t comm, gyreCudaStream_t stream) {
  return guarded(nullptr, "gyreCudaRecv", [&] {
    CudaCommunicator& c = need(comm);
    const DataType dtype = toDataType(raw(datatype), c);
    c.recv(recvbuff, count, dtype, peer, stream);
  });
}

gyreResult_t gyreCudaSendRecv(const void* sendbuff, size_t sendcount, int sendpeer,
                              void* recvbuff, size_t recvcount, int recvpeer,
                              gyreDataType_t datatype, gyreCudaComm_t comm,
                              gyreCudaStream_t stream) {
  return guarded(nullptr, "gyreCudaSendRecv", [&] {
    CudaCommunicator& c = need(comm);
    const DataType dtype = toDataType(raw(datatype), c);
    c.sendRecv(sendbuff, sendcount, sendpeer, recvbuff, recvcount, recvpeer, dtype, stream);
  });
}

gyreResult_t gyreCudaBarrier(gyreCudaComm_t comm, gyreCudaStream_t stream) {
  return guarded(nullptr, "gyreCudaBarrier", [&] { need(comm).barrier(stream); });
}
