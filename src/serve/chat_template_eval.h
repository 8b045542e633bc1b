// Evaluator of the chat template engine (internal to src/serve/chat_template*); implemented in
// chat_template_eval.cc and chat_template_operators.cc.
//
// One Evaluator renders one Program once: it owns the scopes of that render, counts evaluation
// steps against the limits, and is not thread-safe (each Render builds its own).
//
// Scoping follows jinja2: the template body is one scope (the context's variables sit in a parent
// scope); each for-loop iteration, macro call and call/filter/set block body gets a child scope;
// `if` bodies do not. A set inside a loop therefore does not outlive its iteration; namespaces are
// the way to carry state out, as in Python.
#pragma once

#include <cstdint>
#include <ctime>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "serve/chat_template_ast.h"
#include "serve/chat_template_value.h"

namespace gyre::jinja {

class Evaluator;

// Arguments of a call: positional, then keyword in call order. `caller` is the body of a
// {% call %} block (undefined otherwise).
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  Value caller;

  // Takes the argument at `position` or named `name` (positional wins); null if absent.
  const Value* Get(size_t position, std::string_view name) const;
};

// A function value: a macro, a global such as range(), or a bound method.
class Callable {
 public:
  virtual ~Callable() = default;
  // `line` is the line of the call, for error messages.
  virtual Result<Value> Call(Evaluator& ev, CallArgs args, int line) const = 0;
};

// Limits of one render; exceeding one is a ResourceExhausted error.
struct EvalLimits {
  size_t max_output_bytes = 0;  // the output and every string value
  int64_t max_steps = 0;        // evaluated nodes plus loop iterations
  int max_call_depth = 0;       // nested macro calls
  size_t max_list_length = 0;   // range() and list/string repetition
  size_t max_stack_bytes = 0;   // stack used by recursion (nested blocks, expressions, macros)
};

class Evaluator {
 public:
  Evaluator(const EvalLimits& limits, StringifyStyle style, const std::tm& now)
      : limits_(limits), style_(style), now_(now) {}
  Evaluator(const Evaluator&) = delete;
  Evaluator& operator=(const Evaluator&) = delete;

  // Renders `program` with `context` (the variables, a dict) into *out.
  Status Render(const Program& program, const Dict& context, std::string* out);

  // --- For builtins ---------------------------------------------------------------------------
  Result<Value> CallValue(const Value& fn, CallArgs args, int line);
  // InvalidArgument "chat template line N: message".
  Status Error(int line, const std::string& message) const;
  // Accounts for building a string of `bytes`: ResourceExhausted unless it fits the output limit
  // or if the steps it costs (one per 64 bytes) exceed the step limit.
  Status CheckSize(size_t bytes, int line);
  // Counts `n` steps; ResourceExhausted past the limit.
  Status Step(int line, int64_t n = 1);
  std::string Str(const Value& v) const { return Stringify(v, style_); }
  const EvalLimits& limits() const { return limits_; }
  const std::tm& now() const { return now_; }
  // Keeps `ns` (a namespace value) until the render ends, then empties it: a namespace that holds
  // itself would otherwise never be freed.
  void TrackNamespace(const Value& ns) { namespaces_.push_back(ns); }

  ~Evaluator();

 private:
  struct Scope {
    Scope* parent = nullptr;
    Dict vars;
  };
  friend class MacroCallable;
  enum class Flow { kNormal, kBreak, kContinue };

  Scope* NewScope(Scope* parent);
  Value Lookup(Scope* scope, const std::string& name) const;

  Result<Flow> Exec(const Body& body, Scope* scope, std::string* out);
  Result<Flow> ExecStmt(const Stmt& s, Scope* scope, std::string* out);
  Status ExecOutput(const Stmt& s, Scope* scope, std::string* out);
  Status ExecCaptureBlock(const Stmt& s, Scope* scope, std::string* out);
  Status ExecCallBlock(const Stmt& s, Scope* scope, std::string* out);
  Result<Flow> ExecIf(const Stmt& s, Scope* scope, std::string* out);
  Result<Flow> ExecFor(const Stmt& s, Scope* scope, std::string* out);
  Status ExecSet(const Stmt& s, Scope* scope);
  Status Assign(const Target& target, const Value& value, Scope* scope, int line);
  // Renders `body` in a child scope of `scope` and returns the text.
  Result<std::string> Capture(const Body& body, Scope* scope);
  Result<Value> ApplyFilters(const std::vector<ExprPtr>& filters, Value value, Scope* scope);
  Status Append(std::string_view text, int line, std::string* out);
  Status TooDeep(int line) const;
  bool StackExhausted() const;

  Result<Value> Eval(const Expr& e, Scope* scope);
  Result<Value> EvalList(const Expr& e, Scope* scope);
  Result<Value> EvalDict(const Expr& e, Scope* scope);
  Result<Value> EvalAccess(const Expr& e, Scope* scope);
  Result<Value> EvalFilterOrTest(const Expr& e, Scope* scope);
  Result<Value> EvalUnary(const Expr& e, Scope* scope);
  Result<Value> EvalBinaryExpr(const Expr& e, Scope* scope);
  Result<Value> EvalLogic(const Expr& e, Scope* scope);
  Result<Value> EvalCompareChain(const Expr& e, Scope* scope);
  Result<Value> EvalCond(const Expr& e, Scope* scope);
  Result<Value> EvalGetAttr(const Value& object, const std::string& name, int line);
  Result<Value> EvalGetItem(const Value& object, const Value& key, int line);
  Result<Value> EvalSlice(const Expr& e, Scope* scope);
  Result<Value> EvalCall(const Expr& e, Scope* scope);
  Result<CallArgs> EvalArgs(const std::vector<Arg>& args, Scope* scope, int line);
  Result<Value> EvalBinary(BinaryOp op, const Value& a, const Value& b, int line);
  Result<bool> EvalCompare(CompareOp op, const Value& a, const Value& b, int line);
  Result<Value> CallMacro(const Stmt& macro, Scope* closure, CallArgs args, int line);

  const EvalLimits limits_;
  const StringifyStyle style_;
  const std::tm now_;
  // Frees the scopes made since `mark` unless a closure (which may hold one of them) was made
  // since `closures_before`, so that long loops do not accumulate scopes.
  void ReleaseScopes(size_t mark, int64_t closures_before);

  std::deque<Scope> scopes_;   // the live scopes of this render; stable addresses
  int64_t closures_made_ = 0;  // macros and call-block callers created so far
  int64_t steps_ = 0;
  int call_depth_ = 0;
  uintptr_t stack_base_ = 0;  // the stack position when Render started
  std::vector<Value> namespaces_;
};

}  // namespace gyre::jinja
