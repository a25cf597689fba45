// The trainer's checkpoint file: everything a resumed run needs to continue exactly as if
// it had not stopped (weights, momentum buffers, epochs done, sampler state), plus the
// configuration it was made with, so a resume can refuse an incompatible model.
//
// Format (version 1), little-endian as on every machine gyre runs on:
//   "GYRECKPT" | u32 version | u32 flags (0) | u64 epochsDone | u64 samplerSeed |
//   u64 samplerEpoch | u64 worldSize | u64 batch | f32 lr | f32 momentum | u64 seed |
//   u64 nWidths | u64 widths[nWidths] | u64 nTensors | per tensor: u64 count, f32[count]
//   (the parameters in model order, then the momentum buffers in the same order) |
//   u64 FNV-1a-64 of every preceding byte.
// saveCheckpoint writes FILE.tmp and renames it over FILE, so a crash mid-write leaves
// the previous checkpoint intact. loadCheckpoint throws gyre::Error naming the file for a
// missing, truncated, corrupt (checksum) or foreign (magic, version) file.
// Functions only: safe from any thread on distinct files.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gyre::train {

struct Checkpoint {
  uint64_t epochsDone = 0;
  uint64_t samplerSeed = 0;
  uint64_t samplerEpoch = 0;  // the epoch the sampler will be set to next
  uint64_t worldSize = 0;
  uint64_t batch = 0;
  float lr = 0;
  float momentum = 0;
  uint64_t seed = 0;
  std::vector<uint64_t> widths;
  std::vector<std::vector<float>> params;
  std::vector<std::vector<float>> momentumBuffers;
};

void saveCheckpoint(const std::string& path, const Checkpoint& checkpoint);
Checkpoint loadCheckpoint(const std::string& path);

// FNV-1a 64-bit: a cheap checksum for files and a fingerprint of weights in tests.
uint64_t fnv1a64(const void* data, size_t bytes, uint64_t hash = 0xcbf29ce484222325ULL);

}  // namespace gyre::train
