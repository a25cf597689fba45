// HcaFilter: which RDMA devices and ports a rank may use, in NCCL_IB_HCA's syntax
// (GYRE_IB_HCA).
//
//   ""                   every device, every port
//   "mlx5_0:1,mlx5_1"    devices whose name starts with mlx5_0 (port 1 only) or mlx5_1
//   "^mlx5_1"            every device except those starting with mlx5_1
//   "=rxe0"              exactly rxe0 (no prefix match); "^=rxe0" every device but rxe0
//
// Contract: pure, no verbs calls, so it is tested without a device. parse() throws
// gyre::Error(kInvalidArgument) naming GYRE_IB_HCA for a malformed entry (empty name,
// non-numeric port). Immutable after parse: thread-safe.
#pragma once

#include <string>
#include <vector>

namespace gyre {

class HcaFilter {
 public:
  static HcaFilter parse(const std::string& spec);

  // Whether port `port` (1-based) of device `name` may be used.
  bool allows(const std::string& name, int port) const;
  const std::string& spec() const { return spec_; }

 private:
  struct Entry {
    std::string name;
    int port = -1;  // -1: any port
  };
  bool matches(const Entry& e, const std::string& name, int port) const;

  std::string spec_;
  bool exclude_ = false;
  bool exact_ = false;
  std::vector<Entry> entries_;
};

}  // namespace gyre
