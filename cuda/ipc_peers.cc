#include "cuda/ipc_peers.h"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <functional>

#include "base/log.h"
#include "ring/communicator.h"

namespace gyre {
namespace {

using DriverMemOpFn = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

constexpr size_t kFlagStride = 64;      // one flag word per 64 bytes
constexpr uint32_t kReleaseAhead = 1u << 30;  // released words stay >= every round waited on
constexpr int kMonitorPollMs = 50;

// What every rank tells the others at open().
struct PeerInfo {
  uint64_t host;      // hash of the host name and boot id
  int32_t pid;
  int32_t sharedFd;   // rank 0: the memfd of the shared host page
  uint32_t ok;        // this rank could allocate and export
  uint32_t pad;
  char handle[64];    // cudaIpcMemHandle_t of its region
  char reason[192];   // why not, when !ok
};
static_assert(sizeof(cudaIpcMemHandle_t) == 64);

uint64_t hostIdentity() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  const std::string key = std::string(name) + "/" + boot;
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : key) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::string cudaText(cudaError_t err) {
  cudaGetLastError();
  return fmt::format("{} ({})", cudaGetErrorString(err), cudaGetErrorName(err));
}

CUdeviceptr devicePointer(const char* p) {
  return static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(p));
}

}  // namespace

IpcPeers::IpcPeers(Communicator& host, int device, size_t slotBytes, MemOps memOps,
                   FailureFn onFailure)
    : host_(host),
      device_(device),
      rank_(host.rank()),
      size_(host.size()),
      slotBytes_(slotBytes),
      memOps_(memOps),
      onFailure_(std::move(onFailure)),
      regions_(static_cast<size_t>(host.size()), nullptr),
      pids_(static_cast<size_t>(host.size()), 0),
      pidfds_(static_cast<size_t>(host.size()), -1),
      sent_(static_cast<size_t>(host.size()), 0),
      received_(static_cast<size_t>(host.size()), 0) {
  flagBytes_ = (kSteps * static_cast<size_t>(size_) * kFlagStride + 4095) / 4096 * 4096;
}

std::unique_ptr<IpcPeers> IpcPeers::open(Communicator& host, int device, size_t slotBytes,
                                         MemOps memOps, const std::string& notWanted,
                                         FailureFn onFailure, std::string* why) {
  std::unique_ptr<IpcPeers> peers(new IpcPeers(host, device, slotBytes, memOps, std::move(onFailure)));
  if (!peers->setUp(notWanted, why)) {
    peers->tearDown();
    return nullptr;
  }
  return peers;
}

bool IpcPeers::setUp(const std::string& notWanted, std::string* why) {
  // ---- This rank: its region, exported; rank 0 also the shared host page.
  PeerInfo mine{};
  mine.host = hostIdentity();
  mine.pid = static_cast<int32_t>(::getpid());
  mine.sharedFd = -1;
  mine.ok = 1;
  std::string reason;
  cudaError_t err = cudaSuccess;
  if (!notWanted.empty()) {
    reason = notWanted;
  } else if (memOps_.wait == nullptr || memOps_.write == nullptr) {
    reason = "stream memory operations (cuStreamWaitValue32) are unavailable";
  } else if ((err = cudaMalloc(reinterpret_cast<void**>(&regions_[rank_]),
                               flagBytes_ + 3 * slotBytes_)) != cudaSuccess) {
    regions_[rank_] = nullptr;
    reason = "cudaMalloc of the IPC staging region: " + cudaText(err);
  } else if ((err = cudaMemset(regions_[rank_], 0, flagBytes_)) != cudaSuccess ||
             (err = cudaStreamSynchronize(nullptr)) != cudaSuccess) {
    reason = "clearing the IPC flags: " + cudaText(err);
  } else if ((err = cudaIpcGetMemHandle(reinterpret_cast<cudaIpcMemHandle_t*>(mine.handle),
                                        regions_[rank_])) != cudaSuccess) {
    reason = "cudaIpcGetMemHandle: " + cudaText(err);
  } else if ((err = cudaStreamCreateWithFlags(&releaseStream_, cudaStreamNonBlocking)) !=
                 cudaSuccess ||
             (err = cudaEventCreateWithFlags(&ended_, cudaEventDisableTiming)) != cudaSuccess) {
    reason = "creating the release stream and event: " + cudaText(err);
  } else if (rank_ == 0) {
    sharedFd_ = static_cast<int>(::syscall(SYS_memfd_create, "gyre-cuda-ipc", MFD_CLOEXEC));
    void* page = MAP_FAILED;
    if (sharedFd_ >= 0 && ::ftruncate(sharedFd_, 4096) == 0) {
      page = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, sharedFd_, 0);
    }
    if (page == MAP_FAILED) {
      reason = fmt::format("the shared abort page: {}", std::strerror(errno));
    } else {
      shared_ = new (page) std::atomic<uint32_t>(0);
      mine.sharedFd = sharedFd_;
    }
  }
  if (!reason.empty()) {
    mine.ok = 0;
    std::snprintf(mine.reason, sizeof mine.reason, "%s", reason.c_str());
  }

  std::vector<PeerInfo> all(static_cast<size_t>(size_));
  host_.allGather(&mine, all.data(), sizeof(PeerInfo), DataType::kUint8);
  for (int r = 0; r < size_; ++r) {
    if (all[r].ok == 0) {
      *why = fmt::format("rank {}: {}", r, std::string(all[r].reason, strnlen(all[r].reason, sizeof all[r].reason)));
      return false;
    }
    if (all[r].host != all[0].host) {
      *why = fmt::format("ranks {} and 0 are on different hosts", r);
      return false;
    }
    pids_[r] = all[r].pid;
  }

  // ---- The peers' regions and the shared page, mapped here.
  for (int p = 0; p < size_ && reason.empty(); ++p) {
    if (p == rank_) continue;
    cudaIpcMemHandle_t h;
    std::memcpy(&h, all[p].handle, sizeof h);
    void* mapped = nullptr;
    err = cudaIpcOpenMemHandle(&mapped, h, cudaIpcMemLazyEnablePeerAccess);
    if (err != cudaSuccess) {
      reason = fmt::format("cudaIpcOpenMemHandle of rank {}'s region: {}", p, cudaText(err));
    } else {
      regions_[p] = static_cast<char*>(mapped);
    }
  }
  if (reason.empty() && rank_ != 0) {
    const std::string path = fmt::format("/proc/{}/fd/{}", all[0].pid, all[0].sharedFd);
    sharedFd_ = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    void* page = sharedFd_ < 0 ? MAP_FAILED
                               : ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, sharedFd_, 0);
    if (page == MAP_FAILED) {
      reason = fmt::format("opening rank 0's shared page {}: {}", path, std::strerror(errno));
    } else {
      shared_ = static_cast<std::atomic<uint32_t>*>(page);
    }
  }
  uint32_t ok = reason.empty() ? 1 : 0;
  if (!reason.empty()) log(LogLevel::kWarn, rank_, "device IPC: {}", reason);
  host_.allReduce(&ok, &ok, 1, DataType::kUint32, ReduceOp::kMin);
  if (ok == 0) {
    *why = reason.empty() ? std::string("another rank could not map its peers' memory (its log says why)")
                          : "rank " + std::to_string(rank_) + ": " + reason;
    return false;
  }
  for (int p = 0; p < size_; ++p) {
    if (p != rank_) pidfds_[p] = static_cast<int>(::syscall(SYS_pidfd_open, pids_[p], 0));
  }
  stopFd_ = ::eventfd(0, EFD_CLOEXEC);
  monitor_ = std::thread([this] { monitorMain(); });
  return true;
}

// Idempotent: open() calls it on a failed set-up, and the destructor again.
void IpcPeers::tearDown() noexcept {
  if (tornDown_) return;
  tornDown_ = true;
  if (monitor_.joinable()) {
    const uint64_t one = 1;
    if (::write(stopFd_, &one, sizeof one) < 0) {
      // The monitor also ends at its next poll once the fd is gone; nothing else to do.
    }
    monitor_.join();
  }
  // Nothing of ours may still touch a peer's memory when we unmap it, nor theirs ours
  // when we free it: the device first, then the host barrier.
  cudaDeviceSynchronize();
  for (int p = 0; p < size_; ++p) {
    if (p != rank_ && regions_[p] != nullptr) cudaIpcCloseMemHandle(regions_[p]);
  }
  try {
    uint32_t dummy = 0;
    host_.allReduce(&dummy, &dummy, 1, DataType::kUint32, ReduceOp::kMax);
  } catch (const std::exception& e) {
    log(LogLevel::kInfo, rank_, "device IPC teardown: the closing barrier failed ({}); freeing "
        "the staging region anyway", e.what());
  }
  if (regions_[rank_] != nullptr) cudaFree(regions_[rank_]);
  if (ended_ != nullptr) cudaEventDestroy(ended_);
  if (releaseStream_ != nullptr) cudaStreamDestroy(releaseStream_);
  cudaGetLastError();
  if (shared_ != nullptr) ::munmap(shared_, 4096);
  for (int fd : pidfds_) {
    if (fd >= 0) ::close(fd);
  }
  if (sharedFd_ >= 0) ::close(sharedFd_);
  if (stopFd_ >= 0) ::close(stopFd_);
}

IpcPeers::~IpcPeers() { tearDown(); }

char* IpcPeers::stage(int owner, int s) const {
  return regions_[owner] + flagBytes_ + static_cast<size_t>(s) * slotBytes_;
}

char* IpcPeers::flagWord(int owner, Step step, int from) const {
  return regions_[owner] + (static_cast<size_t>(step) * size_ + from) * kFlagStride;
}

int IpcPeers::signalPeers(CUstream_st* stream, Step step, uint32_t round, const char** call) {
  *call = "cuStreamWriteValue32";
  const auto write = reinterpret_cast<DriverMemOpFn>(memOps_.write);
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    // The default flags order the stream's earlier writes (the data) before the word.
    const CUresult r = write(stream, devicePointer(flagWord(p, step, rank_)), round,
                             CU_STREAM_WRITE_VALUE_DEFAULT);
    if (r != CUDA_SUCCESS) return static_cast<int>(r);
  }
  return 0;
}

uint32_t IpcPeers::nextSent(int peer) {
  const uint32_t k = ++sent_[peer];
  lastSent_ = {peer, k};
  if (k > p2pMax_.load()) p2pMax_.store(k);
  return k;
}

uint32_t IpcPeers::nextReceived(int peer) {
  const uint32_t k = ++received_[peer];
  if (k > p2pMax_.load()) p2pMax_.store(k);
  return k;
}

int IpcPeers::signalPeer(CUstream_st* stream, Step step, int to, uint32_t value, const char** call) {
  *call = "cuStreamWriteValue32";
  const auto write = reinterpret_cast<DriverMemOpFn>(memOps_.write);
  return static_cast<int>(write(stream, devicePointer(flagWord(to, step, rank_)), value,
                                CU_STREAM_WRITE_VALUE_DEFAULT));
}

int IpcPeers::waitPeer(CUstream_st* stream, Step step, int from, uint32_t round, const char** call) {
  *call = "cuStreamWaitValue32";
  const auto wait = reinterpret_cast<DriverMemOpFn>(memOps_.wait);
  return static_cast<int>(
      wait(stream, devicePointer(flagWord(rank_, step, from)), round, CU_STREAM_WAIT_VALUE_GEQ));
}

int IpcPeers::begin(CUstream_st* stream, const char** call) {
  *call = "cudaStreamWaitEvent";
  return cudaStreamWaitEvent(stream, ended_, 0);
}

int IpcPeers::end(CUstream_st* stream, const char** call) {
  *call = "cudaEventRecord";
  return cudaEventRecord(ended_, stream);
}

int IpcPeers::synchronize(const char** call) {
  *call = "cudaEventSynchronize";
  return cudaEventSynchronize(ended_);
}

void IpcPeers::abort() {
  localAbort_.store(true);
  if (shared_ != nullptr) {
    uint32_t none = 0;
    shared_->compare_exchange_strong(none, static_cast<uint32_t>(rank_ + 1));
  }
}

// Every word this rank's streams wait on, set past every round enqueued so far. Peers
// still running may write lower values after it, so the monitor repeats it while failed.
void IpcPeers::releaseAll() {
  const auto write = reinterpret_cast<DriverMemOpFn>(memOps_.write);
  const uint32_t value = std::max(round_.load(), p2pMax_.load()) + kReleaseAhead;
  for (int s = 0; s < kSteps; ++s) {
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      write(releaseStream_, devicePointer(flagWord(rank_, static_cast<Step>(s), p)), value,
            CU_STREAM_WRITE_VALUE_DEFAULT);
    }
  }
}

void IpcPeers::monitorMain() {
  if (cudaSetDevice(device_) != cudaSuccess) cudaGetLastError();
  for (;;) {
    std::vector<pollfd> fds{{stopFd_, POLLIN, 0}};
    std::vector<int> ranksOf{-1};
    if (!failed_.load()) {
      for (int p = 0; p < size_; ++p) {
        if (pidfds_[p] >= 0) {
          fds.push_back({pidfds_[p], POLLIN, 0});
          ranksOf.push_back(p);
        }
      }
    }
    const int n = ::poll(fds.data(), fds.size(), kMonitorPollMs);
    if (n > 0 && (fds[0].revents & POLLIN) != 0) return;
    if (!failed_.load()) {
      std::string what;
      ErrorCode code = ErrorCode::kAborted;
      for (size_t i = 1; n > 0 && i < fds.size() && what.empty(); ++i) {
        if (fds[i].revents != 0) {
          code = ErrorCode::kRemoteError;
          what = fmt::format("rank {}: peer rank {} (pid {}) exited during device collectives",
                             rank_, ranksOf[i], pids_[ranksOf[i]]);
        }
      }
      for (int p = 0; p < size_ && what.empty(); ++p) {
        // Without pidfd_open (an older kernel): whether the process is still there.
        if (p != rank_ && pidfds_[p] < 0 && ::kill(pids_[p], 0) != 0 && errno == ESRCH) {
          code = ErrorCode::kRemoteError;
          what = fmt::format("rank {}: peer rank {} (pid {}) exited during device collectives",
                             rank_, p, pids_[p]);
        }
      }
      const uint32_t by = shared_->load();
      if (what.empty() && localAbort_.load()) {
        what = fmt::format("rank {}: the communicator was aborted", rank_);
      } else if (what.empty() && by != 0) {
        what = fmt::format("rank {}: rank {} aborted the device collectives", rank_, by - 1);
      }
      if (!what.empty()) {
        failed_.store(true);
        // The others stop waiting for this rank too.
        uint32_t none = 0;
        shared_->compare_exchange_strong(none, static_cast<uint32_t>(rank_ + 1));
        onFailure_(code, what);
      }
    }
    if (failed_.load()) releaseAll();
  }
}

}  // namespace gyre
