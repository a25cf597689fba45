#include "transport/rdma/verbs_device.h"

#include <fcntl.h>
#include <sys/resource.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "base/error.h"
#include "transport/rdma/hca_filter.h"

namespace gyre {
namespace {

bool ipv4Mapped(const ibv_gid& g) {
  static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return std::memcmp(g.raw, prefix, sizeof(prefix)) == 0;
}

// The GID entry to use on an Ethernet port, or -1.
int pickGid(ibv_context* ctx, int port, int tableLen, std::string* why) {
  int firstV2 = -1;
  for (int i = 0; i < tableLen; ++i) {
    ibv_gid_entry e{};
    if (ibv_query_gid_ex(ctx, port, i, &e, 0) != 0) continue;
    if (e.gid_type != IBV_GID_TYPE_ROCE_V2) continue;
    ibv_gid g;
    std::memcpy(g.raw, e.gid.raw, sizeof(g.raw));
    if (ipv4Mapped(g)) return i;
    if (firstV2 < 0) firstV2 = i;
  }
  if (firstV2 < 0) *why = "no RoCE v2 GID (give the netdev an IP address, or set GYRE_IB_GID_INDEX)";
  return firstV2;
}

}  // namespace

std::shared_ptr<RdmaDevice> RdmaDevice::open(const TransportOptions& options, std::string* whyNot) {
  HcaFilter filter = HcaFilter::parse(options.ibHca);
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (!list || n == 0) {
    if (list) ibv_free_device_list(list);
    *whyNot = "no RDMA device found (ibv_get_device_list is empty: no HCA, or its driver and "
              "ibverbs-providers are not installed)";
    return nullptr;
  }
  std::vector<std::string> seen;
  std::shared_ptr<RdmaDevice> chosen;
  for (int d = 0; d < n && !chosen; ++d) {
    std::string name = ibv_get_device_name(list[d]);
    ibv_context* ctx = ibv_open_device(list[d]);
    if (!ctx) {
      seen.push_back(fmt::format("{} (cannot open: {})", name, std::strerror(errno)));
      continue;
    }
    ibv_device_attr dattr{};
    int ports = ibv_query_device(ctx, &dattr) == 0 ? dattr.phys_port_cnt : 0;
    for (int port = 1; port <= ports && !chosen; ++port) {
      if (!filter.allows(name, port)) {
        seen.push_back(fmt::format("{}:{} (not in GYRE_IB_HCA='{}')", name, port, filter.spec()));
        continue;
      }
      ibv_port_attr pattr{};
      if (ibv_query_port(ctx, port, &pattr) != 0 || pattr.state != IBV_PORT_ACTIVE) {
        seen.push_back(fmt::format("{}:{} (port not active)", name, port));
        continue;
      }
      bool eth = pattr.link_layer == IBV_LINK_LAYER_ETHERNET;
      int gidIndex = 0;
      std::string why;
      if (options.ibGidIndex >= 0) {
        gidIndex = options.ibGidIndex;
        if (gidIndex >= pattr.gid_tbl_len) {
          seen.push_back(fmt::format("{}:{} (GYRE_IB_GID_INDEX={} but the GID table has {})", name,
                                     port, gidIndex, pattr.gid_tbl_len));
          continue;
        }
      } else if (eth) {
        gidIndex = pickGid(ctx, port, pattr.gid_tbl_len, &why);
        if (gidIndex < 0) {
          seen.push_back(fmt::format("{}:{} ({})", name, port, why));
          continue;
        }
      }
      ibv_gid gid{};
      if (ibv_query_gid(ctx, port, gidIndex, &gid) != 0) {
        seen.push_back(fmt::format("{}:{} (cannot read GID {})", name, port, gidIndex));
        continue;
      }
      // Events are read while the pipes sleep, never waited for here.
      ::fcntl(ctx->async_fd, F_SETFL, ::fcntl(ctx->async_fd, F_GETFL) | O_NONBLOCK);
      ibv_pd* pd = ibv_alloc_pd(ctx);
      if (!pd) {
        seen.push_back(fmt::format("{} (ibv_alloc_pd: {})", name, std::strerror(errno)));
        break;
      }
      chosen.reset(new RdmaDevice());
      chosen->ctx_ = ctx;
      chosen->pd_ = pd;
      chosen->port_ = port;
      chosen->gidIndex_ = gidIndex;
      chosen->gid_ = gid;
      chosen->lid_ = pattr.lid;
      chosen->ethernet_ = eth;
      chosen->mtu_ = pattr.active_mtu;
      chosen->name_ = name;
      chosen->description_ =
          fmt::format("{} port {} {}", name, port,
                      eth ? fmt::format("GID {} (RoCE)", gidIndex) : fmt::format("LID {}", pattr.lid));
    }
    if (!chosen) ibv_close_device(ctx);
  }
  ibv_free_device_list(list);
  if (!chosen) {
    std::string all;
    for (auto& s : seen) all += (all.empty() ? "" : ", ") + s;
    *whyNot = fmt::format("no usable RDMA port: {}", all);
  }
  return chosen;
}

RdmaDevice::~RdmaDevice() {
  if (pd_) ibv_dealloc_pd(pd_);
  if (ctx_) ibv_close_device(ctx_);
}

void RdmaDevice::readAsyncEvents() {
  std::lock_guard<std::mutex> lock(eventMu_);
  ibv_async_event e;
  while (ibv_get_async_event(ctx_, &e) == 0) {  // fails with EAGAIN once none is pending
    const char* name = ibv_event_type_str(e.event_type);
    switch (e.event_type) {
      case IBV_EVENT_DEVICE_FATAL:
        if (deviceFailure_.empty()) {
          deviceFailure_ = fmt::format(
              "this rank's rdma device {} reported {} (the device was removed, or its driver "
              "or firmware failed)",
              description_, name);
        }
        break;
      case IBV_EVENT_PORT_ERR:
        if (static_cast<int>(e.element.port_num) == port_ && deviceFailure_.empty()) {
          deviceFailure_ = fmt::format(
              "this rank's rdma port went down: {} reported {} (the link is down; on RoCE, "
              "the network device under it)",
              description_, name);
        }
        break;
      case IBV_EVENT_QP_FATAL:
      case IBV_EVENT_QP_REQ_ERR:
      case IBV_EVENT_QP_ACCESS_ERR:
        objectFailure_.emplace(e.element.qp, fmt::format("the queue pair went to the error "
                                                         "state ({} on {})",
                                                         name, description_));
        break;
      case IBV_EVENT_CQ_ERR:
        objectFailure_.emplace(e.element.cq, fmt::format("the completion queue failed ({} on {})",
                                                         name, description_));
        break;
      default:  // informational: port active, GID change, communication established, ...
        break;
    }
    ibv_ack_async_event(&e);
  }
  anyFailure_.store(!deviceFailure_.empty() || !objectFailure_.empty(), std::memory_order_release);
}

std::string RdmaDevice::failure(const ibv_qp* qp, const ibv_cq* cq) const {
  if (!anyFailure_.load(std::memory_order_acquire)) return {};
  std::lock_guard<std::mutex> lock(eventMu_);
  if (!deviceFailure_.empty()) return deviceFailure_;
  for (const void* object : {static_cast<const void*>(qp), static_cast<const void*>(cq)}) {
    auto it = objectFailure_.find(object);
    if (it != objectFailure_.end()) return it->second;
  }
  return {};
}

std::string registrationFailure(int err, size_t bytes, const std::string& what) {
  std::string msg = fmt::format("ibv_reg_mr of {} bytes for {} failed: {}", bytes, what,
                                std::strerror(err));
  if (err == ENOMEM || err == EPERM || err == EAGAIN) {
    rlimit lim{};
    getrlimit(RLIMIT_MEMLOCK, &lim);
    std::string cur = lim.rlim_cur == RLIM_INFINITY ? "unlimited" : fmt::format("{} bytes", lim.rlim_cur);
    msg += fmt::format(
        " (the locked-memory limit RLIMIT_MEMLOCK is {}: raise it with `ulimit -l unlimited`, "
        "LimitMEMLOCK=infinity in a systemd unit, docker run --ulimit memlock=-1, or "
        "/etc/security/limits.conf; or lower GYRE_SLOTS / GYRE_SLOT_BYTES)",
        cur);
  }
  return msg;
}

MemoryRegion::MemoryRegion(std::shared_ptr<RdmaDevice> device, size_t bytes, int access,
                           const std::string& what)
    : device_(std::move(device)), bytes_(bytes) {
  const size_t rounded = (bytes + 4095) / 4096 * 4096;
  data_ = static_cast<std::byte*>(std::aligned_alloc(4096, rounded));
  if (!data_) fail(ErrorCode::kSystemError, "cannot allocate {} bytes for {}", rounded, what);
  std::memset(data_, 0, rounded);
  mr_ = ibv_reg_mr(device_->pd(), data_, rounded, access);
  if (!mr_) {
    int err = errno;
    std::free(data_);
    data_ = nullptr;
    fail(ErrorCode::kSystemError, "{}", registrationFailure(err, rounded, what));
  }
}

MemoryRegion::~MemoryRegion() {
  if (mr_) ibv_dereg_mr(mr_);
  std::free(data_);
}

}  // namespace gyre
