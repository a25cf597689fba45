#include "collectives/allreduce_algo.h"

#include <iterator>

namespace gyre {

bool parseAlgo(const std::string& text, AllReduceAlgo& algo) {
  for (const AlgoSpelling& k : kAlgoSpellings) {
    if (text == k.name) {
      algo = k.algo;
      return true;
    }
  }
  return false;
}

const char* algoName(AllReduceAlgo algo) {
  for (const AlgoSpelling& k : kAlgoSpellings) {
    if (k.algo == algo) return k.name;
  }
  return "unknown";
}

std::string algoChoices() {
  std::string list;
  const size_t n = std::size(kAlgoSpellings);
  for (size_t i = 0; i < n; ++i) {
    list += i == 0 ? "" : (i + 1 == n ? " or " : ", ");
    list += kAlgoSpellings[i].name;
  }
  return list;
}

}  // namespace gyre
