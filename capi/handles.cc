#include "capi/handles.h"

namespace gyre::capi {

static_assert(gyreInvalidArgument == static_cast<int>(ErrorCode::kInvalidArgument));
static_assert(gyreTimeout == static_cast<int>(ErrorCode::kTimeout));
static_assert(gyreRemoteError == static_cast<int>(ErrorCode::kRemoteError));
static_assert(gyreMismatch == static_cast<int>(ErrorCode::kMismatch));
static_assert(gyreAborted == static_cast<int>(ErrorCode::kAborted));
static_assert(gyreSystemError == static_cast<int>(ErrorCode::kSystemError));
static_assert(gyreInternalError == static_cast<int>(ErrorCode::kInternal));
static_assert(gyreInt8 == static_cast<int>(DataType::kInt8));
static_assert(gyreUint8 == static_cast<int>(DataType::kUint8));
static_assert(gyreInt32 == static_cast<int>(DataType::kInt32));
static_assert(gyreUint32 == static_cast<int>(DataType::kUint32));
static_assert(gyreInt64 == static_cast<int>(DataType::kInt64));
static_assert(gyreUint64 == static_cast<int>(DataType::kUint64));
static_assert(gyreFloat16 == static_cast<int>(DataType::kFloat16));
static_assert(gyreBfloat16 == static_cast<int>(DataType::kBFloat16));
static_assert(gyreFloat32 == static_cast<int>(DataType::kFloat32));
static_assert(gyreFloat64 == static_cast<int>(DataType::kFloat64));
static_assert(gyreNumTypes == kNumDataTypes);
static_assert(gyreSum == static_cast<int>(ReduceOp::kSum));
static_assert(gyreProd == static_cast<int>(ReduceOp::kProd));
static_assert(gyreMin == static_cast<int>(ReduceOp::kMin));
static_assert(gyreMax == static_cast<int>(ReduceOp::kMax));
static_assert(gyreAvg == static_cast<int>(ReduceOp::kAvg));
static_assert(gyreNumOps == kNumReduceOps);

namespace {
thread_local std::string threadLastError;  // every failure of this thread
}  // namespace

gyreResult_t record(ErrorSlot* slot, gyreResult_t code, const char* fn, const char* what) {
  try {
    std::string message = fmt::format("{}: {}", fn, what);
    if (slot) {
      std::lock_guard<std::mutex> lock(slot->mu);
      slot->message = message;
    }
    threadLastError = std::move(message);
  } catch (...) {
    // Out of memory while recording: the code still tells what happened.
  }
  return code;
}

std::string lastError(ErrorSlot* slot) {
  if (slot == nullptr) return threadLastError;
  std::lock_guard<std::mutex> lock(slot->mu);
  return slot->message;
}

gyreResult_t toResult(ErrorCode code) {
  int value = static_cast<int>(code);
  return value > 0 && value <= gyreInternalError ? static_cast<gyreResult_t>(value)
                                                 : gyreInternalError;
}

Communicator& need(gyreComm* comm) {
  if (comm == nullptr) fail(ErrorCode::kInvalidArgument, "comm is NULL");
  if (!comm->comm) {
    fail(ErrorCode::kInvalidArgument, "comm was handed to gyreCudaCommCreate, which failed after "
         "taking it over: only gyreCommDestroy applies to it");
  }
  return *comm->comm;
}

DataType toDataType(int value, int rank) {
  if (value < 0 || value >= kNumDataTypes) {
    fail(ErrorCode::kInvalidArgument, "rank {}: unknown datatype {} (valid: 0..{})", rank, value,
         kNumDataTypes - 1);
  }
  return static_cast<DataType>(value);
}

ReduceOp toReduceOp(int value, int rank) {
  if (value < 0 || value >= kNumReduceOps) {
    fail(ErrorCode::kInvalidArgument, "rank {}: unknown reduction op {} (valid: 0..{})", rank,
         value, kNumReduceOps - 1);
  }
  return static_cast<ReduceOp>(value);
}

gyreComm* wrap(std::unique_ptr<Communicator> comm) {
  auto* out = new gyreComm;
  out->comm = std::move(comm);
  return out;
}

bool requestMissing(gyreComm* comm, gyreRequest_t* request, const char* fn) {
  if (request != nullptr) return false;
  std::string what = comm != nullptr && comm->comm
                         ? fmt::format("rank {}: request is NULL", comm->comm->rank())
                         : std::string("request is NULL");
  record(slotOf(comm), gyreInvalidArgument, fn, what.c_str());
  return true;
}

}  // namespace gyre::capi
