/* version_check: what a C program compiled against capi/gyre.h sees of gyre's version.
 * Prints "GYRE_VERSION_STRING GYRE_VERSION_CODE gyreGetVersion" on one line, and exits 1
 * when gyreGetVersion fails or accepts NULL. Run by tests/version_test.sh. */
#include <stdio.h>

#include "capi/gyre.h"

int main(void) {
  int version = -1;
  if (gyreGetVersion(&version) != gyreSuccess) {
    fprintf(stderr, "version_check: gyreGetVersion: %s\n", gyreGetLastError(NULL));
    return 1;
  }
  if (gyreGetVersion(NULL) != gyreInvalidArgument) {
    fprintf(stderr, "version_check: gyreGetVersion(NULL) was not gyreInvalidArgument\n");
    return 1;
  }
  printf("%s %d %d\n", GYRE_VERSION_STRING, GYRE_VERSION_CODE, version);
  return 0;
}
