// ChatTemplate: renders a HuggingFace chat template (tokenizer_config.json "chat_template") into
// the prompt text for a conversation.
//
// The engine implements the Jinja subset real chat templates use: if/elif/else, for (loop
// variables, `else`, inline `if` filter, break/continue), set (including `ns.attr` and block
// sets), macros with defaults, call blocks, filter blocks, raw blocks, generation blocks,
// comments and whitespace control, with transformers' settings trim_blocks=True and
// lstrip_blocks=True; Python's operators, slicing, tests and the common filters; string and dict
// methods; and the globals raise_exception, namespace, range, dict and strftime_now.
//
// Semantics follow Python jinja2 as transformers configures it, except where @huggingface/jinja
// (which generated the goldens in src/serve/testdata/chat_templates/) prints differently:
//   - `{{ none }}` prints "" (Python: "None"); booleans print "true"/"false" (Python: "True"),
//     lists and dicts print as JSON (Python: repr). RenderOptions::python_str restores Python.
//   - An attribute or item of an undefined value is undefined (Python raises), so
//     `a.b.c is defined` needs no guards. Printing, iterating, `|length`, `|default` and `is
//     defined` treat undefined as jinja2 does; calling it, or a method on it, is an error.
//   - `+` concatenates when either side is a string (Python raises).
//   - tojson is transformers' json.dumps(ensure_ascii=False) (not jinja2's HTML-safe one); floats
//     print as Python does (1.0, 1e-05), which @huggingface/jinja cannot (JavaScript numbers).
// Where @huggingface/jinja has no behaviour (it raises) or a JavaScript artefact (UTF-16 lengths,
// `-7 % 3`, strip() ignoring its argument, loop bodies sharing one scope), Python's is used.
//
// Thread safety: a compiled ChatTemplate is immutable; Render may be called from any number of
// threads at once.
#pragma once

#include <cstdint>
#include <ctime>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"

namespace gyre {
namespace jinja {
struct Program;
}  // namespace jinja

class ChatTemplate {
 public:
  // Bounds on one render. A template that exceeds one fails with ResourceExhausted, so that no
  // template (or request) can make a render loop forever, recurse without end or exhaust memory.
  struct RenderOptions {
    // The time strftime_now() formats; nullopt means the current local time.
    std::optional<std::tm> now;
    // Print none/booleans/containers as Python does ("None", "True", "{'a': 1}").
    bool python_str = false;
    // Caps the output and every string value built while rendering.
    size_t max_output_bytes = size_t{16} << 20;
    // Caps evaluated expressions and statements plus loop iterations.
    int64_t max_steps = 50'000'000;
    // Caps nested macro calls.
    int max_call_depth = 64;
    // Caps lists made by range() and repetition.
    size_t max_list_length = size_t{1} << 20;
    // Caps the nesting of the context's JSON.
    int max_context_depth = 128;
    // Caps the stack a render uses for recursion (nested blocks and expressions, macro calls).
    // REQUIRES: the calling thread has this much stack to spare, plus about 64 KiB.
    size_t max_stack_bytes = size_t{1} << 20;
  };

  ~ChatTemplate();
  ChatTemplate(const ChatTemplate&) = delete;
  ChatTemplate& operator=(const ChatTemplate&) = delete;

  // Parses the template. InvalidArgument "chat template syntax error at line L, column C: ..." on
  // syntax errors, unknown tags, break/continue outside a loop, and blocks or expressions nested
  // more deeply than the engine supports (128 levels). Unknown filters and tests are reported when
  // reached, as in jinja2 3, so that templates with another engine's extensions in unused
  // branches still compile.
  static Result<std::unique_ptr<ChatTemplate>> Compile(std::string_view source);

  // Renders with `context`, a JSON object whose keys become template variables: messages, tools,
  // add_generation_prompt, bos_token, eos_token and any extra kwargs such as enable_thinking.
  // Object key order is kept, which tojson output depends on; pass an ordered_json for it.
  // Errors:
  //   InvalidArgument with exactly the message for raise_exception(message);
  //   InvalidArgument "chat template line N: ..." for a runtime error (a type error, calling an
  //     undefined value, an unknown filter, a bad filter argument, division by zero, ...);
  //   InvalidArgument for a context that is not an object or nests deeper than
  //     options.max_context_depth;
  //   ResourceExhausted when a limit of `options` is exceeded.
  Result<std::string> Render(const nlohmann::ordered_json& context, const RenderOptions& options) const;
  Result<std::string> Render(const nlohmann::ordered_json& context) const;
  // The same with default options for an unordered nlohmann::json, whose object keys are in sorted
  // order. NOTE: a braced initializer list matches both overloads; build the json first.
  Result<std::string> Render(const nlohmann::json& context) const;

 private:
  explicit ChatTemplate(std::unique_ptr<const jinja::Program> program);

  std::unique_ptr<const jinja::Program> program_;
};

}  // namespace gyre
