// ChatTemplate: compiles with the lexer and parser, renders with the evaluator.
#include "serve/chat_template.h"

#include <exception>

#include "serve/chat_template_ast.h"
#include "serve/chat_template_eval.h"
#include "serve/chat_template_lexer.h"
#include "serve/chat_template_parser.h"

namespace gyre {

ChatTemplate::ChatTemplate(std::unique_ptr<const jinja::Program> program) : program_(std::move(program)) {}

ChatTemplate::~ChatTemplate() = default;

Result<std::unique_ptr<ChatTemplate>> ChatTemplate::Compile(std::string_view source) {
  GYRE_ASSIGN_OR_RETURN(std::vector<jinja::Token> tokens, jinja::Tokenize(source, jinja::LexOptions{}));
  GYRE_ASSIGN_OR_RETURN(std::unique_ptr<jinja::Program> program, jinja::Parse(std::move(tokens)));
  return std::unique_ptr<ChatTemplate>(new ChatTemplate(std::move(program)));
}

Result<std::string> ChatTemplate::Render(const nlohmann::ordered_json& context, const RenderOptions& options) const {
  if (!context.is_object()) return Status::InvalidArgument("chat template context must be a JSON object");
  GYRE_ASSIGN_OR_RETURN(jinja::Value vars, jinja::ValueFromJson(context, options.max_context_depth));

  std::tm now{};
  if (options.now.has_value()) {
    now = *options.now;
  } else {
    std::time_t t = std::time(nullptr);
    localtime_r(&t, &now);
  }
  jinja::EvalLimits limits;
  limits.max_output_bytes = options.max_output_bytes;
  limits.max_steps = options.max_steps;
  limits.max_call_depth = options.max_call_depth;
  limits.max_list_length = options.max_list_length;
  limits.max_stack_bytes = options.max_stack_bytes;
  jinja::Evaluator evaluator(
      limits, options.python_str ? jinja::StringifyStyle::kPython : jinja::StringifyStyle::kHuggingFace, now);
  std::string out;
  GYRE_RETURN_IF_ERROR(evaluator.Render(*program_, vars.as_dict(), &out));
  return out;
}

Result<std::string> ChatTemplate::Render(const nlohmann::ordered_json& context) const {
  return Render(context, RenderOptions{});
}

Result<std::string> ChatTemplate::Render(const nlohmann::json& context) const {
  // NOTE: the conversion is a dump and parse because nlohmann offers no direct one; it cannot
  // fail for a valid json value, but is wrapped so that no exception escapes.
  nlohmann::ordered_json ordered;
  try {
    ordered = nlohmann::ordered_json::parse(context.dump());
  } catch (const std::exception& e) {
    return Status::InvalidArgument(std::string("chat template context: ") + e.what());
  }
  return Render(ordered, RenderOptions{});
}

}  // namespace gyre
