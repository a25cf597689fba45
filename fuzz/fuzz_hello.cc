// libFuzzer target: the data-connection handshake (transport/wire.h, checkHello).
// Property: whatever the bytes, no crash and no read past them; an accepted Hello is
// exactly what the listener expects.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "transport/wire.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  gyre::HelloExpectation expect;
  expect.commId = 42;
  expect.receiver = 1;
  expect.worldSize = 4;
  gyre::Hello out;
  if (!gyre::checkHello(data, size, expect, &out)) {
    if (size != sizeof(gyre::Hello) || out.commId != expect.commId ||
        out.receiver != expect.receiver || out.sender < 0 || out.sender >= expect.worldSize ||
        out.flags != expect.flags) {
      std::abort();
    }
  }
  return 0;
}
