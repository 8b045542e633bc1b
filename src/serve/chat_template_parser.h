// Parser of the chat template engine (internal to src/serve/chat_template*).
//
// Builds a Program from the tokens of chat_template_lexer.h with jinja2's grammar and operator
// precedence (lowest first): `x if c else y`, or, and, not, comparisons and `in` (chained),
// + and -, ~, * / // %, **, unary - and +, then postfix access, calls, filters and tests.
// Statements: if/elif/else, for (with loop filter and else), set (also `ns.attr` targets,
// tuples and block sets), macro, call, filter, break/continue, generation.
#pragma once

#include <memory>
#include <vector>

#include "core/status.h"
#include "serve/chat_template_ast.h"
#include "serve/chat_template_lexer.h"

namespace gyre::jinja {

// Returns the program, or InvalidArgument "chat template syntax error at line L, column C: ..."
// for a syntax error, an unknown tag, break/continue outside a loop, or nesting deeper than an
// internal limit (which keeps parsing, evaluation and destruction within the stack). Filter and
// test names are not checked here; unknown ones fail when evaluated.
Result<std::unique_ptr<Program>> Parse(std::vector<Token> tokens);

}  // namespace gyre::jinja
