// IDX reader: the file format of MNIST and Fashion-MNIST (big-endian header: two zero
// bytes, a type byte, a dimension count, one uint32 per dimension, then the data).
//
// Contract: readIdx() returns an unsigned-byte (type 0x08) IDX file's shape and bytes,
// gzip-compressed or plain (zlib reads both). Any problem throws gyre::Error naming the
// file: missing or unreadable (kSystemError), not IDX, another element type, a data
// length that disagrees with the header, a corrupt or truncated gzip stream
// (kInvalidArgument). loadImageSplit() reads an images/labels pair as the trainer uses
// it: pixels scaled to [0, 1] as float32, labels checked against the class count.
// Functions only, no shared state: safe from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace gyre::train {

struct IdxArray {
  std::vector<size_t> dims;   // e.g. {60000, 28, 28}
  std::vector<uint8_t> data;  // product(dims) bytes, row-major
};

IdxArray readIdx(const std::string& path);

// Samples as the trainer sees them: `count` rows of `features` floats in [0, 1].
struct ImageSet {
  size_t count = 0;
  size_t features = 0;
  std::vector<float> pixels;    // count * features
  std::vector<uint8_t> labels;  // count, each < numClasses
};

// Reads DIR/PREFIX-images-idx3-ubyte.gz and DIR/PREFIX-labels-idx1-ubyte.gz (or the
// same names without .gz when only those exist), e.g. prefix "train" or "t10k".
// Keeps the first maxSamples samples (0: all).
ImageSet loadImageSplit(const std::string& dir, const std::string& prefix, size_t numClasses,
                        size_t maxSamples = 0);

}  // namespace gyre::train
