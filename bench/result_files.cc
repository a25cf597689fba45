#include "bench/result_files.h"

#include <cerrno>
#include <cstring>
#include <ctime>

#include <fmt/format.h>

#include "base/error.h"
#include "base/version.h"

namespace gyre::bench {

namespace {

std::string jsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string jsonStrings(const std::vector<std::string>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + jsonString(v[i]);
  return out + "]";
}

// A CSV field: every value gyre-bench writes is a name or a number, so quoting is only
// a guard for a host name with a comma.
std::string csvField(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::FILE* openForWriting(const std::string& path, const char* flag) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    fail(ErrorCode::kInvalidArgument, "{} {}: cannot write: {}", flag, path, std::strerror(errno));
  }
  return f;
}

}  // namespace

GroupText formatGroup(double seconds, double algBw, double busBw, bool checked,
                      unsigned long long wrong) {
  GroupText g;
  g.present = true;
  g.time = fmt::format("{:.2f}", seconds * 1e6);
  g.algbw = fmt::format("{:.3f}", algBw);
  g.busbw = fmt::format("{:.3f}", busBw);
  g.wrong = checked ? std::to_string(wrong) : "N/A";
  return g;
}

std::string utcNow() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

ResultFiles::ResultFiles(const std::string& csvPath, const std::string& jsonPath)
    : jsonPath_(jsonPath) {
  if (!csvPath.empty()) {
    csv_.reset(openForWriting(csvPath, "--csv"));
    std::fputs(
        "collective,ranks,transport,algorithm,size,count,type,redop,root,oop_time_us,oop_algbw,"
        "oop_busbw,oop_wrong,ip_time_us,ip_algbw,ip_busbw,ip_wrong\n",
        csv_.get());
    std::fflush(csv_.get());
  }
  if (!jsonPath.empty()) json_.reset(openForWriting(jsonPath, "--json"));
}

ResultFiles::~ResultFiles() = default;

void ResultFiles::add(const ResultRow& row) {
  if (json_) rows_.push_back(row);
  if (!csv_) return;
  std::string line =
      fmt::format("{},{},{},{},{},{},{},{},{}", csvField(row.collective), header_.ranks,
                  csvField(header_.transport), csvField(row.algorithm), row.bytes, row.elements,
                  csvField(row.type), csvField(row.redop), row.root);
  for (const GroupText& g : row.group) {
    if (!g.present) {
      line += ",,,,";
      continue;
    }
    line += fmt::format(",{},{},{},{}", g.time, g.algbw, g.busbw, g.wrong == "N/A" ? "" : g.wrong);
  }
  line += "\n";
  std::fputs(line.c_str(), csv_.get());
  std::fflush(csv_.get());
}

void ResultFiles::finish() {
  if (csv_ && std::fflush(csv_.get()) != 0) {
    fail(ErrorCode::kSystemError, "--csv: writing failed: {}", std::strerror(errno));
  }
  csv_.reset();
  if (!json_) return;
  const RunHeader& h = header_;
  std::string out = "{\n";
  out += "  \"schema\": \"gyre-bench-results\",\n  \"version\": 1,\n";
  out += fmt::format("  \"command\": {},\n  \"date\": {},\n  \"host\": {},\n",
                     jsonString(h.command), jsonString(h.date), jsonString(h.host));
  out += fmt::format("  \"gyre_version\": {},\n  \"gyre_commit\": {},\n",
                     jsonString(version()), jsonString(versionCommit()));
  out +=
      fmt::format("  \"rank_hosts\": {},\n  \"ranks\": {},\n", jsonStrings(h.rankHosts), h.ranks);
  out += fmt::format("  \"transport\": {},\n  \"algorithm\": {},\n", jsonString(h.transport),
                     jsonString(h.algorithm));
  out += fmt::format("  \"slots\": {},\n  \"slot_bytes\": {},\n  \"nsocks\": {},\n", h.slots,
                     h.slotBytes, h.nsocks);
  out += fmt::format("  \"tcp_congestion\": {},\n", jsonString(h.tcpCongestion));
  out += fmt::format("  \"launcher\": {},\n  \"bootstrap\": {},\n", jsonString(h.launcher),
                     jsonString(h.bootstrap));
  out += fmt::format("  \"collectives\": {},\n", jsonStrings(h.collectives));
  out += fmt::format("  \"iters\": {},\n  \"warmup\": {},\n  \"check\": {},\n", h.iters, h.warmup,
                     h.check ? "true" : "false");
  out += "  \"rows\": [";
  for (size_t i = 0; i < rows_.size(); ++i) {
    const ResultRow& r = rows_[i];
    out += i ? ",\n    " : "\n    ";
    out += fmt::format(
        "{{\"collective\": {}, \"algorithm\": {}, \"size\": {}, \"count\": {}, \"type\": {}, "
        "\"redop\": {}, \"root\": {}",
        jsonString(r.collective), r.algorithm.empty() ? "null" : jsonString(r.algorithm), r.bytes,
        r.elements, jsonString(r.type), jsonString(r.redop), r.root);
    const char* names[2] = {"out_of_place", "in_place"};
    for (int g = 0; g < 2; ++g) {
      const GroupText& t = r.group[g];
      if (!t.present) {
        out += fmt::format(", \"{}\": null", names[g]);
        continue;
      }
      out +=
          fmt::format(", \"{}\": {{\"time_us\": {}, \"algbw\": {}, \"busbw\": {}, \"wrong\": {}}}",
                      names[g], t.time, t.algbw, t.busbw, t.wrong == "N/A" ? "null" : t.wrong);
    }
    out += "}";
  }
  out += rows_.empty() ? "]\n}\n" : "\n  ]\n}\n";
  if (std::fputs(out.c_str(), json_.get()) < 0 || std::fflush(json_.get()) != 0) {
    fail(ErrorCode::kSystemError, "--json {}: writing failed: {}", jsonPath_, std::strerror(errno));
  }
  json_.reset();
}

}  // namespace gyre::bench
