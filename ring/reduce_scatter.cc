#include "ring/reduce_scatter.h"

#include "base/error.h"

namespace gyre {

void ringReduceScatter(const PrimitiveContext&, int, int, const CollectiveCall&, const void*,
                       void*) {
  fail(ErrorCode::kInternal, "reducescatter is not implemented yet");
}

}  // namespace gyre
