// The feedback-layer subcommands of `gyre`: verify ops, analyze, bench ceilings|op|model,
// diff. Each prints a short human summary, or one JSON object with --json; exit 0 on success /
// pass, 1 on failure, 2 on usage errors.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace gyre::cli {

// Registers the subcommands on `app`; when one of them is selected after parsing, `*runner`
// holds the function that runs it.
void AddFeedbackCommands(CLI::App& app, std::function<int()>* runner);

}  // namespace gyre::cli
