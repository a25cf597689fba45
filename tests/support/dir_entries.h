// entriesIn(dir): how many entries a directory holds (dot files aside), e.g.
// /proc/self/fd (this process's descriptors, the reading one included) or /proc/self/task.
#pragma once

#include <dirent.h>

namespace gyre::testing {

inline int entriesIn(const char* dir) {
  int n = 0;
  if (DIR* d = ::opendir(dir)) {
    while (dirent* e = ::readdir(d)) {
      if (e->d_name[0] != '.') ++n;
    }
    ::closedir(d);
  }
  return n;
}

}  // namespace gyre::testing
