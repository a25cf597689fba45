// IDX reader: round trips through plain and gzip files written here, and a clear error
// naming the file for each way a file can be missing or malformed.
#include "tools/train/idx_reader.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "base/error.h"

namespace gyre::train {
namespace {

namespace fs = std::filesystem;

std::vector<uint8_t> idxBytes(const std::vector<uint32_t>& dims, const std::vector<uint8_t>& data,
                              uint8_t type = 0x08) {
  std::vector<uint8_t> b = {0, 0, type, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims) {
    for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<uint8_t>(d >> s));
  }
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

class IdxReaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("gyre_idx_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string writePlain(const std::string& name, const std::vector<uint8_t>& bytes) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()),
               static_cast<std::streamsize>(bytes.size()));
    return path;
  }
  std::string writeGzip(const std::string& name, const std::vector<uint8_t>& bytes) {
    const std::string path = (dir_ / name).string();
    gzFile f = gzopen(path.c_str(), "wb");
    EXPECT_NE(f, nullptr);
    EXPECT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
              static_cast<int>(bytes.size()));
    gzclose(f);
    return path;
  }
  // The message must name the file; returns it for further checks.
  std::string errorFor(const std::string& path) {
    try {
      readIdx(path);
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
      return e.what();
    }
    ADD_FAILURE() << "no error for " << path;
    return "";
  }

  fs::path dir_;
};

TEST_F(IdxReaderTest, ReadsPlainAndGzip) {
  const std::vector<uint8_t> data = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 255};
  for (bool gz : {false, true}) {
    const auto bytes = idxBytes({2, 3, 2}, data);
    const std::string path = gz ? writeGzip("a.gz", bytes) : writePlain("a", bytes);
    const IdxArray a = readIdx(path);
    EXPECT_EQ(a.dims, (std::vector<size_t>{2, 3, 2}));
    EXPECT_EQ(a.data, data);
  }
}

TEST_F(IdxReaderTest, MissingFileNamesIt) {
  const std::string msg = errorFor((dir_ / "nope.gz").string());
  EXPECT_NE(msg.find("cannot open"), std::string::npos) << msg;
}

TEST_F(IdxReaderTest, MalformedFilesNameTheProblem) {
  EXPECT_NE(errorFor(writePlain("short", {0, 0})).find("no header"), std::string::npos);
  EXPECT_NE(errorFor(writePlain("magic", {1, 2, 8, 1, 0, 0, 0, 1, 0})).find("not an IDX file"),
            std::string::npos);
  EXPECT_NE(errorFor(writePlain("type", idxBytes({1}, {0, 0, 0, 0}, 0x0d))).find("element type"),
            std::string::npos);
  EXPECT_NE(errorFor(writePlain("hdr", {0, 0, 8, 3, 0, 0})).find("truncated IDX header"),
            std::string::npos);
  EXPECT_NE(errorFor(writeGzip("len.gz", idxBytes({4, 2}, {1, 2, 3}))).find("needs 8"),
            std::string::npos);
}

TEST_F(IdxReaderTest, TruncatedGzipIsAnError) {
  std::vector<uint8_t> data(5000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 7919 % 251);
  const std::string full = writeGzip("full.gz", idxBytes({5000}, data));
  std::ifstream in(full, std::ios::binary);
  std::vector<uint8_t> gz((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  gz.resize(gz.size() / 2);
  const std::string msg = errorFor(writePlain("cut.gz", gz));
  EXPECT_NE(msg.find("cannot read"), std::string::npos) << msg;
}

TEST_F(IdxReaderTest, LoadsAnImageSplitScaledToUnitRange) {
  std::vector<uint8_t> pixels(3 * 2 * 2);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>(i * 20);
  pixels[11] = 255;
  writeGzip("train-images-idx3-ubyte.gz", idxBytes({3, 2, 2}, pixels));
  writePlain("train-labels-idx1-ubyte", idxBytes({3}, {9, 0, 4}));  // plain fallback
  const ImageSet set = loadImageSplit(dir_.string(), "train", 10);
  EXPECT_EQ(set.count, 3u);
  EXPECT_EQ(set.features, 4u);
  EXPECT_EQ(set.labels, (std::vector<uint8_t>{9, 0, 4}));
  EXPECT_FLOAT_EQ(set.pixels[1], 20.0f / 255.0f);
  EXPECT_EQ(set.pixels[11], 1.0f);
  EXPECT_EQ(set.pixels[0], 0.0f);

  const ImageSet two = loadImageSplit(dir_.string(), "train", 10, 2);
  EXPECT_EQ(two.count, 2u);
  EXPECT_EQ(two.pixels.size(), 8u);

  try {
    loadImageSplit(dir_.string(), "train", 5);  // label 9 is out of range
    ADD_FAILURE() << "no error for a label >= classes";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("train-labels-idx1-ubyte"), std::string::npos);
  }
  try {
    loadImageSplit(dir_.string(), "t10k", 10);
    ADD_FAILURE() << "no error for a missing split";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("t10k-images-idx3-ubyte.gz"), std::string::npos);
  }
}

TEST_F(IdxReaderTest, MismatchedCountsAreAnError) {
  writeGzip("x-images-idx3-ubyte.gz", idxBytes({2, 1, 1}, {1, 2}));
  writeGzip("x-labels-idx1-ubyte.gz", idxBytes({3}, {1, 2, 3}));
  EXPECT_THROW(loadImageSplit(dir_.string(), "x", 10), Error);
}

TEST(IdxReaderFashionMnist, ReadsTheInstalledDatasetWhenPresent) {
  const std::string dir = "/usr/share/datasets/fashion-mnist";
  if (!fs::exists(dir + "/t10k-images-idx3-ubyte.gz")) GTEST_SKIP() << "no " << dir;
  const ImageSet test = loadImageSplit(dir, "t10k", 10);
  EXPECT_EQ(test.count, 10000u);
  EXPECT_EQ(test.features, 784u);
}

}  // namespace
}  // namespace gyre::train
