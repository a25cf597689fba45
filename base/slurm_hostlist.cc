#include "base/slurm_hostlist.h"

#include <cctype>

#include "base/error.h"

namespace gyre {
namespace {

// Splits at the commas that are not inside brackets.
std::vector<std::string> splitTopLevel(const std::string& text, const char* what) {
  std::vector<std::string> parts;
  std::string current;
  int depth = 0;
  for (char c : text) {
    if (c == '[') ++depth;
    if (c == ']' && --depth < 0) {
      fail(ErrorCode::kInvalidArgument, "{}='{}': ']' without '['", what, text);
    }
    if (c == ',' && depth == 0) {
      parts.push_back(current);
      current.clear();
    } else {
      current += c;
    }
  }
  if (depth != 0) fail(ErrorCode::kInvalidArgument, "{}='{}': '[' without ']'", what, text);
  parts.push_back(current);
  for (const std::string& p : parts) {
    if (p.empty()) fail(ErrorCode::kInvalidArgument, "{}='{}': an empty host name", what, text);
  }
  return parts;
}

bool allDigits(const std::string& s) {
  if (s.empty() || s.size() > 18) return false;
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// "01-03,7" -> 01 02 03 7 (each number as wide as the range's low end is written).
std::vector<std::string> expandRanges(const std::string& body, const std::string& text,
                                      const char* what, size_t limit) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= body.size()) {
    size_t comma = body.find(',', start);
    std::string item = body.substr(start, comma == std::string::npos ? comma : comma - start);
    size_t dash = item.find('-');
    std::string lo = item.substr(0, dash);
    std::string hi = dash == std::string::npos ? lo : item.substr(dash + 1);
    if (!allDigits(lo) || !allDigits(hi) || std::stoll(hi) < std::stoll(lo)) {
      fail(ErrorCode::kInvalidArgument, "{}='{}': '[{}]' is not a list of numbers and ranges",
           what, text, body);
    }
    const long long a = std::stoll(lo), b = std::stoll(hi);
    if (static_cast<unsigned long long>(b - a) >= limit - out.size()) {
      fail(ErrorCode::kInvalidArgument, "{}='{}' names more than {} hosts", what, text, limit);
    }
    for (long long v = a; v <= b; ++v) {
      std::string digits = std::to_string(v);
      if (digits.size() < lo.size()) digits.insert(0, lo.size() - digits.size(), '0');
      out.push_back(std::move(digits));
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

// One top-level name with any number of bracket groups.
void expandName(const std::string& name, const std::string& text, const char* what, size_t limit,
                std::vector<std::string>& out) {
  std::vector<std::string> partial{""};
  size_t i = 0;
  while (i < name.size()) {
    size_t open = name.find('[', i);
    std::string literal = name.substr(i, open == std::string::npos ? open : open - i);
    for (std::string& p : partial) p += literal;
    if (open == std::string::npos) break;
    size_t close = name.find(']', open);
    std::vector<std::string> numbers =
        expandRanges(name.substr(open + 1, close - open - 1), text, what, limit);
    if (partial.size() * numbers.size() > limit - out.size()) {
      fail(ErrorCode::kInvalidArgument, "{}='{}' names more than {} hosts", what, text, limit);
    }
    std::vector<std::string> next;
    next.reserve(partial.size() * numbers.size());
    for (const std::string& p : partial) {
      for (const std::string& n : numbers) next.push_back(p + n);
    }
    partial = std::move(next);
    i = close + 1;
  }
  out.insert(out.end(), partial.begin(), partial.end());
}

}  // namespace

std::vector<std::string> expandHostlist(const std::string& text, const char* what, size_t limit) {
  std::vector<std::string> hosts;
  if (text.empty()) return hosts;
  for (const std::string& name : splitTopLevel(text, what)) {
    expandName(name, text, what, limit, hosts);
  }
  return hosts;
}

std::string firstHost(const std::string& text, const char* what) {
  std::vector<std::string> names = splitTopLevel(text, what);
  // Only the first name's first value of each group: expand that name with a limit of 1
  // per group by cutting every group at its first comma or dash.
  std::string first;
  const std::string& name = names.front();
  size_t i = 0;
  while (i < name.size()) {
    size_t open = name.find('[', i);
    first += name.substr(i, open == std::string::npos ? open : open - i);
    if (open == std::string::npos) break;
    size_t close = name.find(']', open);
    first += expandRanges(name.substr(open + 1, close - open - 1), text, what, 1 << 20).front();
    i = close + 1;
  }
  return first;
}

std::vector<int> expandTasksPerNode(const std::string& text, const char* what) {
  std::vector<int> counts;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    std::string item = text.substr(start, comma == std::string::npos ? comma : comma - start);
    std::string count = item, repeat = "1";
    size_t paren = item.find("(x");
    if (paren != std::string::npos && item.back() == ')') {
      count = item.substr(0, paren);
      repeat = item.substr(paren + 2, item.size() - paren - 3);
    }
    if (!allDigits(count) || !allDigits(repeat) || std::stoll(repeat) > (1 << 20) ||
        std::stoll(count) > (1 << 20)) {
      fail(ErrorCode::kInvalidArgument, "{}='{}' is not a task count list like 2(x3),1", what,
           text);
    }
    counts.insert(counts.end(), static_cast<size_t>(std::stoll(repeat)),
                  static_cast<int>(std::stoll(count)));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return counts;
}

}  // namespace gyre
