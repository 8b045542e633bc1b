// A nesting limit for JSON text, checked before it is parsed.
//
// nlohmann::json parses iteratively but destroys, copies and dumps values recursively, so a
// 120 KB body of 60,000 nested '[' overflows the stack after a successful parse. Every JSON that
// comes from outside (HTTP bodies, config.json, tokenizer files, safetensors headers, CLI input)
// is scanned with CheckJsonDepth first: one linear pass that skips string contents.
// Thread safety: pure function.
#pragma once

#include <string_view>

#include "core/status.h"

namespace gyre {

// Deeper than anything a model file or an API request needs (HF configs nest < 10 levels).
inline constexpr int kMaxJsonDepth = 128;

// InvalidArgument naming `what` when arrays/objects nest deeper than `max_depth`. Malformed JSON
// is not detected here (the parser that follows reports it).
Status CheckJsonDepth(std::string_view text, std::string_view what, int max_depth = kMaxJsonDepth);

}  // namespace gyre
