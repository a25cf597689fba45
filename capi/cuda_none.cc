// capi/gyre_cuda.h in a library built without the device path (no CUDA toolkit, no fake
// runtime): the functions exist, so that callers link and ask at run time, and each one
// says how to get them.
#include "capi/gyre_cuda.h"
#include "capi/handles.h"

namespace {

constexpr const char* kWithoutCuda =
    "gyre was built without CUDA: configure with -DGYRE_WITH_CUDA=ON and a CUDA toolkit";

gyreResult_t withoutCuda(const char* fn) {
  return gyre::capi::record(nullptr, gyreSystemError, fn, kWithoutCuda);
}

}  // namespace

gyreResult_t gyreCudaCommCreate(gyreComm_t*, int, gyreCudaComm_t* cudaComm) {
  if (cudaComm != nullptr) *cudaComm = nullptr;
  return withoutCuda("gyreCudaCommCreate");
}
gyreResult_t gyreCudaCommDestroy(gyreCudaComm_t comm) {
  return comm == nullptr ? gyreSuccess : withoutCuda("gyreCudaCommDestroy");
}
gyreResult_t gyreCudaCommAbort(gyreCudaComm_t) { return withoutCuda("gyreCudaCommAbort"); }
gyreResult_t gyreCudaCommSynchronize(gyreCudaComm_t) {
  return withoutCuda("gyreCudaCommSynchronize");
}
gyreResult_t gyreCudaCommUsesDeviceIpc(gyreCudaComm_t, int*) {
  return withoutCuda("gyreCudaCommUsesDeviceIpc");
}
gyreResult_t gyreCudaAllReduce(const void*, void*, size_t, gyreDataType_t, gyreRedOp_t,
                               gyreCudaComm_t, gyreCudaStream_t) {
  return withoutCuda("gyreCudaAllReduce");
}
gyreResult_t gyreCudaBroadcast(const void*, void*, size_t, gyreDataType_t, int, gyreCudaComm_t,
                               gyreCudaStream_t) {
  return withoutCuda("gyreCudaBroadcast");
}
gyreResult_t gyreCudaReduce(const void*, void*, size_t, gyreDataType_t, gyreRedOp_t, int,
                            gyreCudaComm_t, gyreCudaStream_t) {
  return withoutCuda("gyreCudaReduce");
}
gyreResult_t gyreCudaAllGather(const void*, void*, size_t, gyreDataType_t, gyreCudaComm_t,
                               gyreCudaStream_t) {
  return withoutCuda("gyreCudaAllGather");
}
gyreResult_t gyreCudaReduceScatter(const void*, void*, size_t, gyreDataType_t, gyreRedOp_t,
                                   gyreCudaComm_t, gyreCudaStream_t) {
  return withoutCuda("gyreCudaReduceScatter");
}
gyreResult_t gyreCudaAllToAll(const void*, void*, size_t, gyreDataType_t, gyreCudaComm_t,
                              gyreCudaStream_t) {
  return withoutCuda("gyreCudaAllToAll");
}
gyreResult_t gyreCudaAllToAllv(const void*, const size_t[], const size_t[], void*, const size_t[],
                               const size_t[], gyreDataType_t, gyreCudaComm_t, gyreCudaStream_t) {
  return withoutCuda("gyreCudaAllToAllv");
}
gyreResult_t gyreCudaSend(const void*, size_t, gyreDataType_t, int, gyreCudaComm_t,
                          gyreCudaStream_t) {
  return withoutCuda("gyreCudaSend");
}
gyreResult_t gyreCudaRecv(void*, size_t, gyreDataType_t, int, gyreCudaComm_t, gyreCudaStream_t) {
  return withoutCuda("gyreCudaRecv");
}
gyreResult_t gyreCudaSendRecv(const void*, size_t, int, void*, size_t, int, gyreDataType_t,
                              gyreCudaComm_t, gyreCudaStream_t) {
  return withoutCuda("gyreCudaSendRecv");
}
gyreResult_t gyreCudaBarrier(gyreCudaComm_t, gyreCudaStream_t) {
  return withoutCuda("gyreCudaBarrier");
}
