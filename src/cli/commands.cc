#include "cli/commands.h"

#include <cstdio>

namespace gyre::cli {
int Main(int argc, char** argv) {
  std::fprintf(stderr, "gyre: not built yet\n");
  return 2;
}
}  // namespace gyre::cli
