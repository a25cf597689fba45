#include "ring/tree_allreduce.h"

#include "base/error.h"

namespace gyre {

void treeAllReduce(const PrimitiveContext&, const PeerPipes&, int, int, const CollectiveCall&,
                   const void*, void*) {
  fail(ErrorCode::kInternal, "tree all-reduce is not implemented yet");
}

}  // namespace gyre
