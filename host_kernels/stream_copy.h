// streamCopy: memcpy whose stores bypass the cache (non-temporal), for the final write
// of a large collective's result into user memory.
//
// Why: a store to a line not in cache first reads the line from memory (write-allocate),
// so a plain copy into a cold destination moves 3 bytes through DRAM per byte copied;
// non-temporal stores move 2. A large all-reduce is bound by memory bandwidth on hosts
// with few cores, and its result is too large to stay in cache anyway. For a result that
// fits in cache they are slower (the reader then finds it in DRAM): callers decide by
// size (collectives/primitives.h).
//
// Contract: dst[0, bytes) = src[0, bytes), any alignment, any length (0 included); the
// buffers must not overlap. On x86-64 the body uses SSE2 streaming stores (baseline
// x86-64, no dispatch needed) with plain stores for the unaligned head and tail, and ends
// with a store fence, so the bytes are ordered before any later store of the calling
// thread (a release that publishes them to another thread). Elsewhere it is memcpy.
// Thread-safe, no state. Throws nothing. With bytes == 0 nothing is touched and null
// pointers are allowed; with bytes > 0 they are undefined.
#pragma once

#include <cstddef>

namespace gyre {

void streamCopy(void* dst, const void* src, size_t bytes);

}  // namespace gyre
