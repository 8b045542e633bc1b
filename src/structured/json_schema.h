// JSON Schema (a documented subset) → a regex (structured/regex.h) that matches exactly the
// compact JSON texts gyre lets the model write for the schema. Every such text parses and
// validates against the schema; the converse does not hold (fixed key order, bounded nesting and
// number lengths, one optional space after ':' and ',').
//
// Supported keywords (docs/serve.md "Structured output"):
//  - type: "object" | "array" | "string" | "integer" | "number" | "boolean" | "null", or a list
//    of them (any of);
//  - object: properties (emitted in the order the schema object iterates them: alphabetical),
//    required, additionalProperties (false, true or absent: only the listed properties are ever
//    written); an object without properties is any JSON object (nesting bounded, below);
//  - array: items, minItems, maxItems (prefixItems is refused);
//  - string: minLength, maxLength (in characters; an escape counts as one);
//  - enum, const (any JSON values), anyOf;
//  - annotations with no effect on validity: title, description, $schema, $id, default, examples,
//    $comment, strict.
// Refused with InvalidArgument naming the keyword: everything else (pattern, format, minimum,
// maximum, $ref, $defs, oneOf, allOf, not, if/then/else, patternProperties, ...).
//
// Bounds: integers have at most 18 digits (they fit int64), numbers at most 18 integer digits, 16
// fraction digits and a 2-digit exponent (they fit a double); free-form JSON (json_object, `{}` schemas, objects without properties)
// nests at most kFreeJsonDepth containers deep and its strings are unbounded.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace gyre::structured {

inline constexpr int kFreeJsonDepth = 3;

// The regex for `schema`. InvalidArgument naming the unsupported keyword (or bad value) otherwise.
Result<std::string> JsonSchemaRegex(const nlohmann::json& schema);

// The regex for any JSON object (response_format json_object).
std::string JsonObjectRegex();

}  // namespace gyre::structured
