// The grammar of forced tool calls (tool_choice "required" or a named function): a regex
// (structured/regex.h) that matches exactly the GLM tool-call markup gyre lets the model write
// when it must call a tool, for constrained decoding. The markup is the one GlmToolParser reads
// (serve/glm_tool_parser.h):
//
//   <tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>...</tool_call>
//
// with an optional newline after NAME and after each closing tag (GLM-4.5/4.6 write them; the
// GLM-5 template does not). What the regex allows, per tool:
//  - NAME is the tool's name, exactly;
//  - with `parameters.properties`, the keys are those properties, each at most once, in the order
//    the schema object iterates them (alphabetical, as structured/json_schema.h orders object
//    keys), the `required` ones always present;
//  - with parameters but no properties, any keys (non-empty, no '<' or newline) in any number;
//    without parameters (OpenAI: a function that takes none), no arguments;
//  - a value whose schema is a string (type "string", or a list holding it, or no type) is raw
//    text with no "</" and not ending in '<', since the markup writes strings as they are; a
//    string enum is one of its values; every other value is compact JSON for its schema
//    (structured::JsonSchemaRegex, so a schema keyword it refuses refuses the request).
// "required": one call or more, of any tool, one after the other (the engine stops at EOS);
// named: exactly one call of that tool. Nothing before the first call (no content, no reasoning).
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"
#include "serve/openai_protocol.h"

namespace gyre::serve {

// `tools`: validated tools (serve/openai_messages.h CheckTools), non-empty. `only` empty: any
// tool, one call or more; else exactly one call of the tool named `only` (which must be one of
// them). InvalidArgument naming `tools[i].function.parameters...` for a schema the JSON regex
// refuses.
Result<std::string> GlmToolCallsRegex(const Json& tools, std::string_view only);

}  // namespace gyre::serve
