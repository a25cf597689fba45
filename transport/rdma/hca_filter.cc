#include "transport/rdma/hca_filter.h"

#include <cctype>

#include "base/error.h"

namespace gyre {

HcaFilter HcaFilter::parse(const std::string& spec) {
  HcaFilter f;
  f.spec_ = spec;
  std::string rest = spec;
  if (!rest.empty() && rest[0] == '^') {
    f.exclude_ = true;
    rest.erase(0, 1);
  }
  if (!rest.empty() && rest[0] == '=') {
    f.exact_ = true;
    rest.erase(0, 1);
  }
  if (rest.empty()) {
    if (f.exclude_ || f.exact_) {
      fail(ErrorCode::kInvalidArgument, "GYRE_IB_HCA='{}': no device named after '^' or '='",
           spec);
    }
    return f;
  }
  size_t start = 0;
  while (start <= rest.size()) {
    size_t comma = rest.find(',', start);
    if (comma == std::string::npos) comma = rest.size();
    std::string item = rest.substr(start, comma - start);
    Entry e;
    auto colon = item.find(':');
    e.name = item.substr(0, colon);
    if (e.name.empty()) {
      fail(ErrorCode::kInvalidArgument,
           "GYRE_IB_HCA='{}': empty device name (use e.g. mlx5_0:1,mlx5_1)", spec);
    }
    if (colon != std::string::npos) {
      std::string port = item.substr(colon + 1);
      bool digits = !port.empty() && port.size() < 4;
      for (char c : port) digits = digits && std::isdigit(static_cast<unsigned char>(c));
      if (!digits || std::stoi(port) < 1) {
        fail(ErrorCode::kInvalidArgument, "GYRE_IB_HCA='{}': port '{}' of {} is not a number >= 1",
             spec, port, e.name);
      }
      e.port = std::stoi(port);
    }
    f.entries_.push_back(e);
    start = comma + 1;
  }
  return f;
}

bool HcaFilter::matches(const Entry& e, const std::string& name, int port) const {
  bool nameOk = exact_ ? name == e.name : name.compare(0, e.name.size(), e.name) == 0;
  return nameOk && (e.port < 0 || e.port == port);
}

bool HcaFilter::allows(const std::string& name, int port) const {
  if (entries_.empty()) return true;
  bool listed = false;
  for (const Entry& e : entries_) listed = listed || matches(e, name, port);
  return exclude_ ? !listed : listed;
}

}  // namespace gyre
