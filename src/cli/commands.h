// The `gyre` command line: subcommands generate, forward, tokenize, inspect.
#pragma once

namespace gyre::cli {
// Runs the CLI; returns the process exit code (0 ok, 1 runtime failure, 2 usage error).
int Main(int argc, char** argv);
}  // namespace gyre::cli
