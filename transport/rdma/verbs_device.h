// RdmaDevice: one opened RDMA device port (context, protection domain, the GID this rank
// uses), shared by every rdma pipe of a communicator; MemoryRegion: registered memory.
//
// Selection: the first port, in libibverbs' device order, that GYRE_IB_HCA allows and
// that is ACTIVE. On Ethernet (RoCE) ports the GID is GYRE_IB_GID_INDEX, or else the
// first RoCE v2 entry holding an IPv4-mapped address (what routes over IP), or else
// the first RoCE v2 entry; InfiniBand ports address by LID and use GID 0.
//
// Asynchronous events (the context's async fd, read with ibv_get_async_event): the pipes
// poll the fd while they sleep and call readAsyncEvents(), which takes what is pending
// without blocking and keeps the fatal ones: the device failed (IBV_EVENT_DEVICE_FATAL),
// this port went down (IBV_EVENT_PORT_ERR), one QP or CQ broke (QP_FATAL, QP_REQ_ERR,
// QP_ACCESS_ERR, CQ_ERR). failure(qp, cq) says why that pipe is unusable (sticky: a port
// that comes back does not revive pipes that already failed). (soft-RoCE in Linux 6.1
// sends PORT_ERR when its netdev goes down, but nothing when the device is deleted: rxe
// cannot disassociate user contexts, so `rdma link delete` waits until they close.)
//
// Ownership: RdmaDevice is held by shared_ptr by every pipe and MemoryRegion that uses
// it, so it is closed after the last of them. Thread-safe after open (verbs objects are;
// the event state has its own lock, and failure() costs one atomic load until an event).
// Errors: open() returns nullptr with the reason when no port is usable (no device, none
// allowed by the filter, none active, no GID); registration failures throw naming the
// memlock limit to raise.
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "transport/transport_options.h"

namespace gyre {

class RdmaDevice {
 public:
  static std::shared_ptr<RdmaDevice> open(const TransportOptions& options, std::string* whyNot);
  ~RdmaDevice();
  RdmaDevice(const RdmaDevice&) = delete;
  RdmaDevice& operator=(const RdmaDevice&) = delete;

  ibv_context* context() const { return ctx_; }
  ibv_pd* pd() const { return pd_; }
  int port() const { return port_; }
  int gidIndex() const { return gidIndex_; }
  const ibv_gid& gid() const { return gid_; }
  uint16_t lid() const { return lid_; }
  bool ethernet() const { return ethernet_; }
  ibv_mtu activeMtu() const { return mtu_; }
  const std::string& name() const { return name_; }
  // "rxe0 port 1 GID 1 (RoCE v2)": for logs.
  const std::string& description() const { return description_; }

  int asyncFd() const { return ctx_->async_fd; }  // non-blocking
  void readAsyncEvents();
  // Why the pipe on `qp` / `cq` cannot go on (a fatal event on the device, the port or
  // these objects), or empty.
  std::string failure(const ibv_qp* qp, const ibv_cq* cq) const;

 private:
  RdmaDevice() = default;
  mutable std::mutex eventMu_;
  std::atomic<bool> anyFailure_{false};
  std::string deviceFailure_;                        // under eventMu_
  std::map<const void*, std::string> objectFailure_;  // QP or CQ -> why; under eventMu_
  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
  int port_ = 1;
  int gidIndex_ = 0;
  ibv_gid gid_{};
  uint16_t lid_ = 0;
  bool ethernet_ = false;
  ibv_mtu mtu_ = IBV_MTU_1024;
  std::string name_;
  std::string description_;
};

// Page-aligned memory of `bytes`, zeroed and registered with `access`. `what` names it in
// errors ("receive slots for peer rank 3").
class MemoryRegion {
 public:
  MemoryRegion(std::shared_ptr<RdmaDevice> device, size_t bytes, int access, const std::string& what);
  ~MemoryRegion();
  MemoryRegion(const MemoryRegion&) = delete;
  MemoryRegion& operator=(const MemoryRegion&) = delete;

  std::byte* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  uint32_t lkey() const { return mr_->lkey; }
  uint32_t rkey() const { return mr_->rkey; }
  uint64_t address() const { return reinterpret_cast<uint64_t>(data_); }

 private:
  std::shared_ptr<RdmaDevice> device_;
  std::byte* data_ = nullptr;
  size_t bytes_ = 0;
  ibv_mr* mr_ = nullptr;
};

// The message for a failed ibv_reg_mr (errno `err`): for ENOMEM/EPERM/EAGAIN it names
// RLIMIT_MEMLOCK's current value and how to raise it.
std::string registrationFailure(int err, size_t bytes, const std::string& what);

}  // namespace gyre
