#include "collectives/collective.h"

#include <fmt/format.h>

#include "collectives/allreduce_algo.h"
#include "collectives/collective_table.h"

namespace gyre {

const char* collectiveName(CollectiveKind kind) {
  const CollectiveRow* row = findCollectiveRow(kind);
  return row ? row->name : "unknown-collective";
}

Tag CollectiveCall::tag() const {
  Tag t;
  t.count = count;
  t.seq = seq;
  t.root = root;
  t.coll = static_cast<uint8_t>(kind);
  t.dtype = static_cast<uint8_t>(dtype);
  t.op = static_cast<uint8_t>(op);
  t.algo = algo;
  return t;
}

std::string describe(const CollectiveCall& c) {
  const std::string algo =
      c.algo == 0 ? std::string()
                  : fmt::format(" [{}]", algoName(static_cast<AllReduceAlgo>(c.algo)));
  if (c.kind == CollectiveKind::kBarrier) return fmt::format("barrier #{}{}", c.seq, algo);
  const CollectiveRow* row = findCollectiveRow(c.kind);
  const bool reduces = row && row->reduces;
  std::string s =
      !reduces
          ? fmt::format("{} #{} ({}, count {}", collectiveName(c.kind), c.seq,
                        dtypeName(c.dtype), c.count)
          : fmt::format("{} #{} ({} {}, count {}", collectiveName(c.kind), c.seq,
                        dtypeName(c.dtype), opName(c.op), c.count);
  if (c.kind == CollectiveKind::kSendRecv) {
    if (c.root >= 0) s += fmt::format(", from rank {}", c.root);
  } else if (c.root >= 0) {
    s += fmt::format(", root {}", c.root);
  }
  return s + ")" + algo;
}

std::string describe(const Tag& t) {
  CollectiveCall c;
  c.kind = static_cast<CollectiveKind>(t.coll);
  c.dtype = static_cast<DataType>(t.dtype);
  c.op = static_cast<ReduceOp>(t.op);
  c.count = t.count;
  c.root = t.root;
  c.seq = t.seq;
  c.algo = t.algo;
  return describe(c);
}

}  // namespace gyre
