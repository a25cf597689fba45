#include "collectives/algorithm_choice.h"

namespace gyre {

const LinkCost& linkCost(bool shm) { return shm ? kTuning.shm : kTuning.tcp; }

double predictMicros(AllReduceAlgo algo, size_t bytes, int size, const LinkCost& cost) {
  return allReduceRow(algo).predictOneHost(bytes, size, cost);
}

AllReduceAlgo chooseAllReduce(const CollectiveOptions& options, size_t bytes, int size, bool shm) {
  const LinkCost& cost = linkCost(shm);
  const AllReducePlace place{bytes, size, options.smallestSlotBytes()};
  return pickAllReduce(options.algo, place, [&](const AllReduceRow& row) {
    return row.predictOneHost(bytes, size, cost);
  });
}

}  // namespace gyre
