// Ring broadcast from a root, written in the primitives: the root sends each slice to
// its right neighbour, every rank but the last copies it out and forwards it, the
// rank left of the root only receives. Slices are pipelined, so after the first slice
// reaches the end of the ring every hop carries data at once: time ~ S/B + (n-2) slices.
// An empty slice from the last rank back to the root closes the ring, so that ranks
// that disagree on the root fail with a mismatch instead of delivering wrong data.
#pragma once

#include "collectives/primitives.h"

namespace gyre {

// The same along any chain: `pos` is this rank's place on it counted from the root (0),
// ctx's left and right its chain neighbours (the last one's right is the root).
void chainBroadcast(const PrimitiveContext& ctx, int pos, int size, const CollectiveCall& call,
                    void* buffer);

// call.count elements of call.dtype in `buffer`, from call.root to every rank.
void ringBroadcast(const PrimitiveContext& ctx, int rank, int size, const CollectiveCall& call,
                   void* buffer);

}  // namespace gyre
