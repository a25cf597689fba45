// AllReduceAlgo: the all-reduce algorithms, as GYRE_ALGO names them and as the schedules
// run them, with their GYRE_ALGO spellings. On its own (no settings) for the code that
// only names an algorithm: the Tag, the flight recorder, the stall report.
#pragma once

#include <cstdint>
#include <string>

#include "base/export.h"

namespace gyre {

// kAuto is only a setting (the cost model of collectives/algorithm_choice.h picks); a
// chosen algorithm never is. The value travels in every slice's Tag (0 there: no
// algorithm), so append only.
enum class AllReduceAlgo : uint8_t { kAuto = 0, kRing = 1, kTree = 2, kRecursiveDoubling = 3,
                                    kHierarchical = 4 };
// Every AllReduceAlgo with its GYRE_ALGO spelling (algoName, parseAlgo, algoChoices).
struct AlgoSpelling {
  AllReduceAlgo algo;
  const char* name;
};
inline constexpr AlgoSpelling kAlgoSpellings[] = {
    {AllReduceAlgo::kAuto, "auto"}, {AllReduceAlgo::kRing, "ring"}, {AllReduceAlgo::kTree, "tree"},
    {AllReduceAlgo::kRecursiveDoubling, "rd"}, {AllReduceAlgo::kHierarchical, "hier"}};

// The GYRE_ALGO spelling of `algo`: "auto", "ring", "tree", "rd", "hier"; and back (false for any
// other text).
GYRE_API const char* algoName(AllReduceAlgo algo);
GYRE_API bool parseAlgo(const std::string& text, AllReduceAlgo& algo);
// The spellings as an error lists them: "auto, ring, tree, rd or hier".
GYRE_API std::string algoChoices();

}  // namespace gyre
