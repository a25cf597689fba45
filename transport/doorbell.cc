#include "transport/doorbell.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <climits>

namespace gyre {

void Doorbell::ring(bool shared) {
  seq.fetch_add(1, std::memory_order_seq_cst);
  if (sleepers.load(std::memory_order_seq_cst) != 0) {
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&seq), shared ? FUTEX_WAKE : FUTEX_WAKE_PRIVATE,
            INT_MAX, nullptr, nullptr, 0);
  }
}

void Doorbell::sleep(uint32_t expected, const WaitContext& ctx, bool shared) {
  using namespace std::chrono;
  auto left = ctx.deadline - steady_clock::now();
  auto slice = std::clamp<steady_clock::duration>(left, nanoseconds(0), milliseconds(10));
  struct timespec ts;
  ts.tv_sec = duration_cast<seconds>(slice).count();
  ts.tv_nsec = duration_cast<nanoseconds>(slice).count() % 1000000000;
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&seq), shared ? FUTEX_WAIT : FUTEX_WAIT_PRIVATE,
          expected, &ts, nullptr, 0);
}

}  // namespace gyre
