// gyre-bench --csv and --json (bench/result_files.h): real runs under gyrerun whose files
// must hold exactly the table's rows (field for field, as printed), the JSON parsed by
// Python's json module (a parser that is not ours) with its header; and the errors: a
// path rank 0 cannot write stops every rank with exit status 2 naming the path, and the
// options that print no table refuse the flags.
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gyre_bench_harness.h"

namespace {

using namespace gyre_bench_test;

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::string> splitCsv(const std::string& line) {
  std::vector<std::string> f;
  std::string cur;
  for (char c : line) {
    if (c == ',') {
      f.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  f.push_back(cur);
  return f;
}

std::string tempPath(const std::string& name) {
  return ::testing::TempDir() + "gyre-results-" + std::to_string(::getpid()) + "-" + name;
}

// The table row as the CSV would write it (N/A: empty).
std::string csvOf(const Row& r, const std::string& collective, int ranks,
                  const std::string& transport, const std::string& algorithm) {
  std::string s = collective + "," + std::to_string(ranks) + "," + transport + "," + algorithm +
                  "," + std::to_string(r.size) + "," + std::to_string(r.count) + "," + r.type +
                  "," + r.redop + "," + std::to_string(r.root);
  for (int g = 0; g < 2; ++g) {
    for (const std::string* v : {&r.time[g], &r.algbw[g], &r.busbw[g], &r.wrong[g]}) {
      s += "," + (*v == "N/A" ? std::string() : *v);
    }
  }
  return s;
}

TEST_F(GyreBenchTest, CsvAndJsonHoldTheTableRows) {
  const std::string csv = tempPath("a.csv");
  const std::string json = tempPath("a.json");
  RunResult r = runShell("timeout -k 5 120 env GYRE_TRANSPORT=tcp " + binary("gyrerun") + " -n 4 " +
                         binary("gyre-bench") + " -b 8 -e 1M -f 4 -n 3 -w 1 --csv " + csv +
                         " --json " + json);
  ASSERT_EQ(r.exitCode, 0) << r.out << r.err;
  const std::vector<Row> rows = parseRows(r.out);
  ASSERT_EQ(rows.size(), 9u) << r.out;  // 8 B, 32 B, ... 512 KiB

  // CSV: a header, then the rows in table order, every field the printed string.
  std::istringstream in(readFile(csv));
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  EXPECT_EQ(line,
            "collective,ranks,transport,algorithm,size,count,type,redop,root,oop_time_us,"
            "oop_algbw,oop_busbw,oop_wrong,ip_time_us,ip_algbw,ip_busbw,ip_wrong");
  for (const Row& row : rows) {
    ASSERT_TRUE(std::getline(in, line)) << "fewer CSV rows than table rows";
    std::vector<std::string> f = splitCsv(line);
    ASSERT_EQ(f.size(), 17u) << line;
    EXPECT_TRUE(f[3] == "ring" || f[3] == "tree" || f[3] == "rd") << line;
    EXPECT_EQ(line, csvOf(row, "all_reduce", 4, "tcp", f[3]));
  }
  EXPECT_FALSE(std::getline(in, line)) << "extra CSV line: " << line;

  // JSON, parsed by Python: the header, then each row printed as the table prints it.
  const std::string script =
      "import json,sys\n"
      "d=json.load(open(sys.argv[1]))\n"
      "print(d['schema'],d['version'],d['ranks'],d['transport'],d['algorithm'],"
      "d['collectives'],len(d['rank_hosts']),d['host']==d['rank_hosts'][0],"
      "d['date'][:2],d['date'][-1],'--json' in d['command'])\n"
      "for r in d['rows']:\n"
      "  g=[r['out_of_place'],r['in_place']]\n"
      "  print(r['collective'],r['algorithm'] in ('ring','tree','rd'),r['size'],r['count'],"
      "r['type'],r['redop'],r['root'],"
      "' '.join('%.2f %.3f %.3f %d'%(x['time_us'],x['algbw'],x['busbw'],x['wrong']) for x in g))\n";
  const std::string scriptPath = tempPath("read.py");
  std::ofstream(scriptPath) << script;
  RunResult p = runShell("/usr/bin/python3 " + scriptPath + " " + json);
  ASSERT_EQ(p.exitCode, 0) << p.err << readFile(json);
  std::istringstream jin(p.out);
  ASSERT_TRUE(std::getline(jin, line));
  EXPECT_EQ(line, "gyre-bench-results 1 4 tcp auto ['all_reduce'] 4 True 20 Z True");
  for (const Row& row : rows) {
    ASSERT_TRUE(std::getline(jin, line)) << "fewer JSON rows than table rows";
    std::string expected = "all_reduce True " + std::to_string(row.size) + " " +
                           std::to_string(row.count) + " " + row.type + " " + row.redop + " " +
                           std::to_string(row.root);
    for (int g = 0; g < 2; ++g) {
      expected += (g ? " " : " ") + row.time[g] + " " + row.algbw[g] + " " + row.busbw[g] + " " +
                  row.wrong[g];
    }
    EXPECT_EQ(line, expected);
  }
  EXPECT_FALSE(std::getline(jin, line)) << "extra JSON row: " << line;
  for (const std::string& f : {csv, json, scriptPath}) ::unlink(f.c_str());
}

// A collective without an in-place group (alltoall) and -c 0: empty CSV fields, JSON null.
TEST_F(GyreBenchTest, MissingGroupsAndUncheckedRowsAreEmpty) {
  const std::string csv = tempPath("b.csv");
  const std::string json = tempPath("b.json");
  RunResult r = runBench(2, "alltoall -b 64 -e 64 -n 1 -w 0 -c 0 --csv " + csv + " --json " + json);
  ASSERT_EQ(r.exitCode, 0) << r.out << r.err;
  std::istringstream in(readFile(csv));
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  ASSERT_TRUE(std::getline(in, line));
  std::vector<std::string> f = splitCsv(line);
  ASSERT_EQ(f.size(), 17u) << line;
  EXPECT_EQ(f[0], "alltoall");
  EXPECT_EQ(f[3], "");  // no algorithm column for collectives other than all_reduce
  EXPECT_NE(f[9], "");
  EXPECT_EQ(f[12], "");  // -c 0
  for (int i = 13; i < 17; ++i) EXPECT_EQ(f[i], "") << i;
  const std::string text = readFile(json);
  EXPECT_NE(text.find("\"in_place\": null"), std::string::npos) << text;
  EXPECT_NE(text.find("\"wrong\": null"), std::string::npos) << text;
  EXPECT_NE(text.find("\"algorithm\": null"), std::string::npos) << text;
  RunResult p =
      runShell("/usr/bin/python3 -c 'import json,sys; json.load(open(sys.argv[1]))' " + json);
  EXPECT_EQ(p.exitCode, 0) << p.err << text;
  ::unlink(csv.c_str());
  ::unlink(json.c_str());
}

TEST_F(GyreBenchTest, UnwritableResultFileStopsEveryRank) {
  RunResult r = runBench(3, "-b 8 -e 8 --json /nonexistent-dir/x.json", 60);
  EXPECT_EQ(r.exitCode, 1) << r.out << r.err;  // gyrerun: some rank failed
  EXPECT_NE(r.err.find("--json /nonexistent-dir/x.json: cannot write: No such file or directory"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("failed: exit code 2"), std::string::npos) << r.err;
  EXPECT_EQ(parseRows(r.out).size(), 0u) << r.out;
}

TEST_F(GyreBenchTest, ResultFilesNeedATable) {
  for (const char* args : {"--calibrate --csv x.csv", "--compare-algos --json x.json",
                           "--csv same --json same", "--csv="}) {
    RunResult r = runShell("timeout -k 5 30 " + binary("gyre-bench") + " " + args);
    EXPECT_EQ(r.exitCode, 2) << args << "\n" << r.err;
    EXPECT_NE(r.err.find("usage: gyre-bench"), std::string::npos) << args;
  }
}

}  // namespace
