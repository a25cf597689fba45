#include "transport/rdma/queue_pair.h"

#include <fcntl.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <random>

#include <fmt/format.h>

#include "base/error.h"

namespace gyre {

std::string QpEndpoint::encode() const {
  static const char* hex = "0123456789abcdef";
  const auto* p = reinterpret_cast<const uint8_t*>(this);
  std::string s;
  for (size_t i = 0; i < sizeof(*this); ++i) {
    s += hex[p[i] >> 4];
    s += hex[p[i] & 15];
  }
  return s;
}

QpEndpoint QpEndpoint::decode(const std::string& text, int peer) {
  QpEndpoint e;
  if (text.size() != 2 * sizeof(e)) {
    fail(ErrorCode::kRemoteError, "peer rank {} published a malformed rdma endpoint ({} chars)",
         peer, text.size());
  }
  auto nibble = [&](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    fail(ErrorCode::kRemoteError, "peer rank {} published a malformed rdma endpoint", peer);
  };
  auto* p = reinterpret_cast<uint8_t*>(&e);
  for (size_t i = 0; i < sizeof(e); ++i) p[i] = nibble(text[2 * i]) << 4 | nibble(text[2 * i + 1]);
  if (e.magic != kMagic) {
    fail(ErrorCode::kRemoteError, "peer rank {} published an rdma endpoint with a wrong magic", peer);
  }
  return e;
}

QueuePair::QueuePair(std::shared_ptr<RdmaDevice> device, int peer, int sendDepth, int recvDepth)
    : device_(std::move(device)), peer_(peer) {
  ibv_context* ctx = device_->context();
  channel_ = ibv_create_comp_channel(ctx);
  if (!channel_) failSystem(errno, fmt::format("ibv_create_comp_channel (peer rank {})", peer));
  int flags = ::fcntl(channel_->fd, F_GETFL);
  ::fcntl(channel_->fd, F_SETFL, flags | O_NONBLOCK);
  cq_ = ibv_create_cq(ctx, sendDepth + recvDepth, nullptr, channel_, 0);
  if (!cq_) failSystem(errno, fmt::format("ibv_create_cq (peer rank {})", peer));
  ibv_qp_init_attr init{};
  init.send_cq = cq_;
  init.recv_cq = cq_;
  init.qp_type = IBV_QPT_RC;
  init.cap.max_send_wr = static_cast<uint32_t>(sendDepth);
  init.cap.max_recv_wr = static_cast<uint32_t>(recvDepth);
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  qp_ = ibv_create_qp(device_->pd(), &init);
  if (!qp_) failSystem(errno, fmt::format("ibv_create_qp (peer rank {})", peer));
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = static_cast<uint8_t>(device_->port());
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
  if (int rc = ibv_modify_qp(qp_, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) {
    failSystem(rc, fmt::format("ibv_modify_qp to INIT (peer rank {})", peer));
  }
  psn_ = std::random_device{}() & 0xffffff;
}

QueuePair::~QueuePair() {
  if (qp_) ibv_destroy_qp(qp_);
  if (cq_) {
    // Events taken with ibv_get_cq_event are acknowledged at once, so none is owed here.
    ibv_destroy_cq(cq_);
  }
  if (channel_) ibv_destroy_comp_channel(channel_);
}

QpEndpoint QueuePair::endpoint() const {
  QpEndpoint e;
  e.qpn = qp_->qp_num;
  e.psn = psn_;
  e.lid = device_->lid();
  e.mtu = static_cast<uint8_t>(device_->activeMtu());
  e.ethernet = device_->ethernet() ? 1 : 0;
  std::memcpy(e.gid, device_->gid().raw, 16);
  return e;
}

void QueuePair::connect(const QpEndpoint& remote) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = static_cast<ibv_mtu>(std::min<int>(remote.mtu, device_->activeMtu()));
  a.dest_qp_num = remote.qpn;
  a.rq_psn = remote.psn;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.dlid = remote.lid;
  a.ah_attr.sl = 0;
  a.ah_attr.src_path_bits = 0;
  a.ah_attr.port_num = static_cast<uint8_t>(device_->port());
  if (remote.ethernet || device_->ethernet()) {
    a.ah_attr.is_global = 1;
    std::memcpy(a.ah_attr.grh.dgid.raw, remote.gid, 16);
    a.ah_attr.grh.sgid_index = static_cast<uint8_t>(device_->gidIndex());
    a.ah_attr.grh.hop_limit = 64;
  }
  if (int rc = ibv_modify_qp(qp_, &a,
                             IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                 IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) {
    failSystem(rc, fmt::format("ibv_modify_qp to RTR (peer rank {}, {} -> remote QP {})", peer_,
                               device_->description(), remote.qpn));
  }
  ibv_qp_attr s{};
  s.qp_state = IBV_QPS_RTS;
  s.timeout = 14;    // 4.096 us * 2^14 = 67 ms per try (rc_pingpong, perftest); a lost packet
                     // stalls the QP this long, and a dead peer is found by the socket first
  s.retry_cnt = 7;
  s.rnr_retry = 7;   // receives are pre-posted; RNR can only be transient
  s.sq_psn = psn_;
  s.max_rd_atomic = 1;
  if (int rc = ibv_modify_qp(qp_, &s,
                             IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                 IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC)) {
    failSystem(rc, fmt::format("ibv_modify_qp to RTS (peer rank {})", peer_));
  }
}

int QueuePair::poll(ibv_wc* wc, int n) {
  int got = ibv_poll_cq(cq_, n, wc);
  if (got < 0) fail(ErrorCode::kSystemError, "ibv_poll_cq failed (peer rank {})", peer_);
  return got;
}

void QueuePair::sleep(int fd, std::chrono::steady_clock::time_point until) {
  using namespace std::chrono;
  if (!armed_) {
    if (ibv_req_notify_cq(cq_, 0) != 0) {
      fail(ErrorCode::kSystemError, "ibv_req_notify_cq failed (peer rank {})", peer_);
    }
    armed_ = true;
    // A completion that came before the arm raised no event: the caller re-polls first.
    return;
  }
  auto left = duration_cast<milliseconds>(until - steady_clock::now()).count();
  int ms = static_cast<int>(std::clamp<long long>(left, 0, 10));
  pollfd p[3] = {{channel_->fd, POLLIN, 0}, {device_->asyncFd(), POLLIN, 0}, {fd, POLLIN, 0}};
  ::poll(p, fd >= 0 ? 3 : 2, ms);
  if (p[1].revents & POLLIN) {
    device_->readAsyncEvents();
  } else if (p[1].revents & (POLLERR | POLLHUP | POLLNVAL)) {
    channelClosed_ = true;  // as below: the device went away without a fatal event read first
  }
  if (p[0].revents & POLLIN) {
    ibv_cq* cq = nullptr;
    void* cqCtx = nullptr;
    if (ibv_get_cq_event(channel_, &cq, &cqCtx) == 0) {
      ibv_ack_cq_events(cq, 1);
      armed_ = false;
    }
  } else if (p[0].revents & (POLLERR | POLLHUP | POLLNVAL)) {
    // The kernel closed the channel (device removal): it would now wake every poll at once.
    channelClosed_ = true;
  }
}

std::string QueuePair::failure() const {
  if (channelClosed_) {
    return fmt::format("the kernel closed the completion or async event channel of {} (the "
                       "device went away)",
                       device_->description());
  }
  return device_->failure(qp_, cq_);
}

void QueuePair::forceError() {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_ERR;
  ibv_modify_qp(qp_, &a, IBV_QP_STATE);
}

void QueuePair::postRecv(uint64_t wrId) {
  ibv_recv_wr wr{};
  wr.wr_id = wrId;
  wr.sg_list = nullptr;
  wr.num_sge = 0;
  ibv_recv_wr* bad = nullptr;
  if (int rc = ibv_post_recv(qp_, &wr, &bad)) {
    failSystem(rc, fmt::format("ibv_post_recv (peer rank {}): the queue pair is in the error state",
                               peer_));
  }
}

}  // namespace gyre
