// The data path allocates nothing: after the first call, repeated all-reduces of any
// size make no heap allocation on any rank (the peers' harness shows what a per-call
// allocation of 32 MiB and more costs on these machines: mmap, page faults, munmap).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <vector>

#include "ring/communicator.h"
#include "ring/spawn.h"
#include "test_values.h"

namespace {
std::atomic<long> gAllocations{0};
}  // namespace

// Counting replacements of the global allocation functions, for this program only. They
// pair malloc with free themselves; GCC, inlining a delete into code that called the
// standard new, warns that free meets new's pointer.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
void* operator new(size_t n) {
  gAllocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t n) { return operator new(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }

namespace gyre {
namespace {

void expectNoAllocations(TransportKind transport) {
  SpawnOptions o;
  o.options.timeout = std::chrono::seconds(60);
  o.options.transport = transport;
  o.options.slotBytes = 64 * 1024;
  spawn(4, [](Communicator& comm) {
    std::vector<float> a(3 << 20, 1.0f), b(3 << 20);
    for (size_t count : {size_t{2}, size_t{1} << 10, size_t{3} << 20}) {
      comm.allReduce(a.data(), b.data(), count, DataType::kFloat32, ReduceOp::kSum);
    }
    const long before = gAllocations.load();
    for (int i = 0; i < 20; ++i) {
      for (size_t count : {size_t{2}, size_t{1} << 10, size_t{3} << 20}) {
        comm.allReduce(a.data(), b.data(), count, DataType::kFloat32, ReduceOp::kSum);
        comm.allReduce(b.data(), b.data(), count, DataType::kFloat32, ReduceOp::kAvg);
      }
    }
    // No rank may exit (and disconnect from rank 0's store thread, which allocates
    // then) before every rank has read its counter.
    comm.barrier();
    const long made = gAllocations.load() - before;
    comm.barrier();
    testing::check(made == 0, "rank {}: {} heap allocations in 120 all-reduces", comm.rank(),
                   made);
  }, o);
}

TEST(Allocation, NonePerCallOverTcp) { expectNoAllocations(TransportKind::kTcp); }
TEST(Allocation, NonePerCallOverShm) { expectNoAllocations(TransportKind::kShm); }

}  // namespace
}  // namespace gyre
