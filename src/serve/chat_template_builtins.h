// Built-in filters, tests, methods and globals of the chat template engine (internal to
// src/serve/chat_template*). They follow Python jinja2 3.1 and transformers (tojson, strftime_now,
// raise_exception), with the output conventions of @huggingface/jinja (see chat_template.h).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"
#include "serve/chat_template_eval.h"
#include "serve/chat_template_value.h"

namespace gyre::jinja {

bool IsKnownFilter(std::string_view name);
bool IsKnownTest(std::string_view name);

// Applies filter `name` to `operand`. InvalidArgument (with `line`) for an unknown filter, bad
// arguments or an operand of the wrong type.
Result<Value> ApplyFilter(Evaluator& ev, std::string_view name, const Value& operand, CallArgs args, int line);

// Applies test `name` (`operand is name(args)`).
Result<bool> ApplyTest(Evaluator& ev, std::string_view name, const Value& operand, CallArgs args, int line);

// Calls method `name` of a string, dict or list (`"a,b".split(",")`, `d.items()`). Sets
// *found = false (and returns undefined) when `object` has no such method.
Result<Value> CallMethod(Evaluator& ev, const Value& object, std::string_view name, CallArgs args, int line,
                         bool* found);
// Python's printf-style `fmt % args`: `args` is a list (positional), a dict (for %(name)s) or a
// single value. Supports the flags -+ 0#, width, precision and the types s r d i u f F e E g G x X
// o c and %%.
Result<Value> PercentFormat(Evaluator& ev, const std::string& fmt, const Value& args, int line);

// Whether CallMethod knows `name` for `object`'s type (attribute access then yields a bound method).
bool HasMethod(const Value& object, std::string_view name);

// The global functions (range, namespace, dict, raise_exception, strftime_now); undefined for
// other names.
Value LookupGlobal(std::string_view name);

// --- String helpers shared by filters and methods (chat_template_methods.cc) ---------------------

// Python str.isspace() for one code point.
bool IsPySpace(uint32_t cp);
// Python str.upper()/lower() with simple (one-to-one) Unicode case mappings.
std::string ToUpper(std::string_view s);
std::string ToLower(std::string_view s);
// Python str.capitalize(): first character upper case, the rest lower case.
std::string Capitalize(std::string_view s);
// Python str.strip/lstrip/rstrip; `chars` null strips whitespace.
std::string PyStrip(std::string_view s, const std::string* chars, bool left, bool right);
// The text a filter that needs a string (|string, |upper, ~, ...) uses: none is "None" as in Python
// (@huggingface/jinja raises there), everything else prints as `{{ }}` prints it.
std::string CoerceString(const Evaluator& ev, const Value& v);

}  // namespace gyre::jinja
