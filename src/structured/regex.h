// A regex subset compiled to a ByteDfa that matches whole outputs (the pattern is anchored at
// both ends; a leading ^ and a trailing $ are accepted and mean nothing more).
//
// Supported (docs/serve.md "Structured output"): literals (any UTF-8 text), escapes \\ \. \* etc.,
// \n \r \t \f \v \0, \xHH (a byte < 0x80), \uHHHH (one code point), classes \d \w \s \D \W \S,
// `.` (any UTF-8 character but \n), bracket classes [a-z_] and [^...] with ASCII members (a
// negated class matches any UTF-8 character outside it), groups ( ) and (?: ), alternation |,
// and the greedy quantifiers * + ? {n} {n,} {n,m} (bounds <= 1000).
// Refused with InvalidArgument naming the construct: lazy or possessive quantifiers, back
// references, lookaround, named groups, flags, anchors inside the pattern, \b \B, non-ASCII
// members of a bracket class, and a pattern whose automaton would exceed `max_states`.
#pragma once

#include <string_view>

#include "core/status.h"
#include "structured/byte_dfa.h"

namespace gyre::structured {

inline constexpr int kDefaultMaxStates = 20000;

Result<ByteDfa> CompileRegex(std::string_view pattern, int max_states = kDefaultMaxStates);

// `text` as a regex that matches exactly it (every metacharacter escaped).
std::string RegexQuote(std::string_view text);

}  // namespace gyre::structured
