// Tokenizer of the chat template engine (internal to src/serve/chat_template*).
//
// Splits a Jinja source into text and tag tokens, applying whitespace control the way jinja2 does
// with the settings transformers uses for chat templates: a single trailing newline of the source
// is dropped, `{%-`/`-%}` (and the `{{`/`{#` forms) strip whitespace next to the tag, lstrip_blocks
// removes spaces and tabs before a block or comment tag at the start of a line, and trim_blocks
// removes the first newline after a block or comment tag. `{%+`/`+%}` turn lstrip/trim off for one
// tag. Comments produce no tokens; `{% raw %}...{% endraw %}` produces one text token.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace gyre::jinja {

enum class TokenKind {
  kText,        // literal template text (text)
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kVarBegin,    // {{
  kVarEnd,      // }}
  kName,        // identifier (text)
  kString,      // string literal, escapes resolved (text)
  kInt,         // integer literal (int_value)
  kFloat,       // float literal (float_value)
  kOperator,    // operator or punctuation such as "+", "//", "(", "|" (text)
  kEof,
};

struct Token {
  TokenKind kind = TokenKind::kEof;
  std::string text;
  int64_t int_value = 0;
  double float_value = 0;
  int line = 1;    // 1-based position in the source
  int column = 1;  // 1-based byte column
};

struct LexOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
};

// Returns the tokens of `source`, ending with kEof. InvalidArgument ("line L, column C: ...") for
// an unterminated tag, comment or string, or a character that starts no token.
Result<std::vector<Token>> Tokenize(std::string_view source, const LexOptions& options);

}  // namespace gyre::jinja
