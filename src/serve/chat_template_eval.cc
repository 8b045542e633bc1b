// Evaluator of the chat template engine. Sections: callables (macros, call-block callers, bound
// methods, loop.cycle), render/scopes/errors, statements, expressions (access, calls). The
// operators are in chat_template_operators.cc.
#include "serve/chat_template_eval.h"

#include <cmath>
#include <limits>

#include "serve/chat_template_builtins.h"

namespace gyre::jinja {

const Value* CallArgs::Get(size_t position, std::string_view name) const {
  if (position < positional.size()) return &positional[position];
  for (const auto& [key, value] : keyword) {
    if (key == name) return &value;
  }
  return nullptr;
}

// --- Callables ----------------------------------------------------------------------------------

class MacroCallable : public Callable {
 public:
  MacroCallable(const Stmt* macro, Evaluator::Scope* closure) : macro_(macro), closure_(closure) {}
  Result<Value> Call(Evaluator& ev, CallArgs args, int line) const override {
    return ev.CallMacro(*macro_, closure_, std::move(args), line);
  }

 private:
  const Stmt* macro_;          // kMacro or kCallBlock; owned by the Program
  Evaluator::Scope* closure_;  // owned by the Evaluator that made this callable
};

namespace {

class BoundMethod : public Callable {
 public:
  BoundMethod(Value object, std::string name) : object_(std::move(object)), name_(std::move(name)) {}
  Result<Value> Call(Evaluator& ev, CallArgs args, int line) const override {
    bool found = false;
    return CallMethod(ev, object_, name_, std::move(args), line, &found);
  }

 private:
  Value object_;
  std::string name_;
};

// loop.cycle(a, b, ...): the argument at the loop index modulo the argument count.
class LoopCycle : public Callable {
 public:
  explicit LoopCycle(int64_t index) : index_(index) {}
  Result<Value> Call(Evaluator& ev, CallArgs args, int line) const override {
    if (args.positional.empty()) return ev.Error(line, "loop.cycle() needs at least one argument");
    return args.positional[static_cast<size_t>(index_) % args.positional.size()];
  }

 private:
  int64_t index_;
};

std::string UndefinedMessage(const Value& v) {
  if (v.is_undefined() && !v.undefined_name().empty()) return "'" + v.undefined_name() + "' is undefined";
  return "value is undefined";
}

}  // namespace

// --- Render, scopes, errors ---------------------------------------------------------------------

namespace {

// How deeply a value stored in a variable may nest (a loop can wrap a list in itself again and
// again; destroying or printing such a value recurses).
constexpr int kMaxValueDepth = 512;

uintptr_t StackPosition() { return reinterpret_cast<uintptr_t>(__builtin_frame_address(0)); }

}  // namespace

// NOTE: Recursion (nested blocks and expressions, times nested macro calls) is bounded by the
// stack it actually uses rather than by a count of frames, because frame sizes differ several
// times between optimized and sanitizer builds. The stack grows downward on every target we build.
bool Evaluator::StackExhausted() const { return stack_base_ - StackPosition() > limits_.max_stack_bytes; }

Evaluator::~Evaluator() {
  for (const Value& ns : namespaces_) ns.as_namespace().attrs = Dict();
}

Status Evaluator::Render(const Program& program, const Dict& context, std::string* out) {
  stack_base_ = StackPosition();
  Scope* globals = NewScope(nullptr);
  globals->vars = context;
  Scope* top = NewScope(globals);
  GYRE_ASSIGN_OR_RETURN(Flow flow, Exec(program.body, top, out));
  (void)flow;
  return Status::Ok();
}

Evaluator::Scope* Evaluator::NewScope(Scope* parent) {
  scopes_.emplace_back();
  scopes_.back().parent = parent;
  return &scopes_.back();
}

void Evaluator::ReleaseScopes(size_t mark, int64_t closures_before) {
  if (closures_before == closures_made_ && scopes_.size() > mark) scopes_.resize(mark);
}

Value Evaluator::Lookup(Scope* scope, const std::string& name) const {
  for (Scope* s = scope; s != nullptr; s = s->parent) {
    if (const Value* v = s->vars.Find(name)) return *v;
  }
  Value global = LookupGlobal(name);
  if (!global.is_undefined()) return global;
  return Value::Undefined(name);
}

Status Evaluator::Error(int line, const std::string& message) const {
  return Status::InvalidArgument("chat template line " + std::to_string(line) + ": " + message);
}

Status Evaluator::CheckSize(size_t bytes, int line) {
  if (bytes > limits_.max_output_bytes) {
    return Status::ResourceExhausted("chat template line " + std::to_string(line) + ": output exceeds " +
                                     std::to_string(limits_.max_output_bytes) + " bytes");
  }
  return Step(line, static_cast<int64_t>(bytes / 64));
}

Status Evaluator::Step(int line, int64_t n) {
  steps_ += n;
  if (steps_ <= limits_.max_steps) return Status::Ok();
  return Status::ResourceExhausted("chat template line " + std::to_string(line) + ": render exceeds " +
                                   std::to_string(limits_.max_steps) + " evaluation steps");
}

Status Evaluator::Append(std::string_view text, int line, std::string* out) {
  if (out->size() + text.size() > limits_.max_output_bytes) return CheckSize(out->size() + text.size(), line);
  GYRE_RETURN_IF_ERROR(Step(line, static_cast<int64_t>(text.size() / 64)));
  out->append(text);
  return Status::Ok();
}

// --- Statements ---------------------------------------------------------------------------------

Result<Evaluator::Flow> Evaluator::Exec(const Body& body, Scope* scope, std::string* out) {
  for (const StmtPtr& s : body) {
    GYRE_ASSIGN_OR_RETURN(Flow flow, ExecStmt(*s, scope, out));
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

// NOTE: like Eval, ExecStmt only dispatches, to keep the frames on the recursive path small.
Result<Evaluator::Flow> Evaluator::ExecStmt(const Stmt& s, Scope* scope, std::string* out) {
  GYRE_RETURN_IF_ERROR(Step(s.line));
  if (StackExhausted()) return TooDeep(s.line);
  switch (s.kind) {
    case StmtKind::kText:
      GYRE_RETURN_IF_ERROR(Append(s.text, s.line, out));
      return Flow::kNormal;
    case StmtKind::kOutput:
      GYRE_RETURN_IF_ERROR(ExecOutput(s, scope, out));
      return Flow::kNormal;
    case StmtKind::kIf:
      return ExecIf(s, scope, out);
    case StmtKind::kFor:
      return ExecFor(s, scope, out);
    case StmtKind::kSet:
      GYRE_RETURN_IF_ERROR(ExecSet(s, scope));
      return Flow::kNormal;
    case StmtKind::kSetBlock:
    case StmtKind::kFilterBlock:
      GYRE_RETURN_IF_ERROR(ExecCaptureBlock(s, scope, out));
      return Flow::kNormal;
    case StmtKind::kMacro:
      ++closures_made_;
      scope->vars.Set(s.name, Value::MakeCallable(std::make_shared<MacroCallable>(&s, scope)));
      return Flow::kNormal;
    case StmtKind::kCallBlock:
      GYRE_RETURN_IF_ERROR(ExecCallBlock(s, scope, out));
      return Flow::kNormal;
    case StmtKind::kBlock:
      return Exec(s.body, scope, out);
    case StmtKind::kBreak:
      return Flow::kBreak;
    case StmtKind::kContinue:
      return Flow::kContinue;
  }
  return Flow::kNormal;
}

Status Evaluator::ExecOutput(const Stmt& s, Scope* scope, std::string* out) {
  GYRE_ASSIGN_OR_RETURN(Value v, Eval(*s.expr, scope));
  if (v.is_string()) return Append(v.as_string(), s.line, out);
  return Append(Str(v), s.line, out);
}

// {% set x | filters %}...{% endset %} and {% filter filters %}...{% endfilter %}.
Status Evaluator::ExecCaptureBlock(const Stmt& s, Scope* scope, std::string* out) {
  GYRE_ASSIGN_OR_RETURN(std::string text, Capture(s.body, scope));
  GYRE_ASSIGN_OR_RETURN(Value v, ApplyFilters(s.filters, Value::String(std::move(text)), scope));
  if (s.kind == StmtKind::kSetBlock) return Assign(s.target, v, scope, s.line);
  return Append(Str(v), s.line, out);
}

Status Evaluator::ExecCallBlock(const Stmt& s, Scope* scope, std::string* out) {
  const Expr& call = *s.expr;
  GYRE_ASSIGN_OR_RETURN(Value fn, Eval(*call.operands[0], scope));
  GYRE_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(call.args, scope, s.line));
  ++closures_made_;
  args.caller = Value::MakeCallable(std::make_shared<MacroCallable>(&s, scope));
  GYRE_ASSIGN_OR_RETURN(Value v, CallValue(fn, std::move(args), s.line));
  return Append(Str(v), s.line, out);
}

Result<Evaluator::Flow> Evaluator::ExecIf(const Stmt& s, Scope* scope, std::string* out) {
  for (const Branch& b : s.branches) {
    GYRE_ASSIGN_OR_RETURN(Value cond, Eval(*b.cond, scope));
    if (cond.Truthy()) return Exec(b.body, scope, out);
  }
  return Exec(s.else_body, scope, out);
}

Result<Evaluator::Flow> Evaluator::ExecFor(const Stmt& s, Scope* scope, std::string* out) {
  GYRE_ASSIGN_OR_RETURN(Value iterable, Eval(*s.expr, scope));
  List candidates;
  switch (iterable.kind()) {
    case ValueKind::kList:
      candidates = iterable.as_list();
      break;
    case ValueKind::kDict:
      for (const auto& entry : iterable.as_dict()) candidates.push_back(entry.first);
      break;
    case ValueKind::kString: {
      const std::string& str = iterable.as_string();
      for (auto [offset, len] : Utf8Chars(str)) candidates.push_back(Value::String(str.substr(offset, len)));
      break;
    }
    case ValueKind::kUndefined:
      break;  // like jinja2, iterating an undefined value iterates nothing
    default:
      return Error(s.line, std::string("'") + KindName(iterable.kind()) + "' object is not iterable");
  }

  // The loop filter (`for x in xs if cond`) is applied before the loop, so loop.length counts
  // only the selected items.
  List items;
  if (s.cond) {
    for (Value& item : candidates) {
      size_t mark = scopes_.size();
      int64_t closures = closures_made_;
      Scope* test_scope = NewScope(scope);
      GYRE_RETURN_IF_ERROR(Assign(s.target, item, test_scope, s.line));
      GYRE_ASSIGN_OR_RETURN(Value keep, Eval(*s.cond, test_scope));
      ReleaseScopes(mark, closures);
      if (keep.Truthy()) items.push_back(std::move(item));
    }
  } else {
    items = std::move(candidates);
  }

  if (items.empty()) {
    size_t mark = scopes_.size();
    int64_t closures = closures_made_;
    GYRE_ASSIGN_OR_RETURN(Flow flow, Exec(s.else_body, NewScope(scope), out));
    ReleaseScopes(mark, closures);
    return flow;
  }
  const auto n = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < n; ++i) {
    GYRE_RETURN_IF_ERROR(Step(s.line));
    size_t mark = scopes_.size();
    int64_t closures = closures_made_;
    Scope* iteration = NewScope(scope);
    if (s.uses_loop) {
      Dict loop;
      loop.Set("index", Value::Int(i + 1));
      loop.Set("index0", Value::Int(i));
      loop.Set("revindex", Value::Int(n - i));
      loop.Set("revindex0", Value::Int(n - i - 1));
      loop.Set("first", Value::Bool(i == 0));
      loop.Set("last", Value::Bool(i == n - 1));
      loop.Set("length", Value::Int(n));
      loop.Set("previtem", i > 0 ? items[static_cast<size_t>(i - 1)] : Value::Undefined("previtem"));
      loop.Set("nextitem", i + 1 < n ? items[static_cast<size_t>(i + 1)] : Value::Undefined("nextitem"));
      loop.Set("depth", Value::Int(1));
      loop.Set("depth0", Value::Int(0));
      loop.Set("cycle", Value::MakeCallable(std::make_shared<LoopCycle>(i)));
      iteration->vars.Set("loop", Value::MakeDict(std::move(loop)));
    }
    GYRE_RETURN_IF_ERROR(Assign(s.target, items[static_cast<size_t>(i)], iteration, s.line));
    GYRE_ASSIGN_OR_RETURN(Flow flow, Exec(s.body, iteration, out));
    ReleaseScopes(mark, closures);
    if (flow == Flow::kBreak) break;
  }
  return Flow::kNormal;
}

Status Evaluator::ExecSet(const Stmt& s, Scope* scope) {
  GYRE_ASSIGN_OR_RETURN(Value v, Eval(*s.expr, scope));
  return Assign(s.target, v, scope, s.line);
}

Status Evaluator::TooDeep(int line) const {
  return Status::ResourceExhausted("chat template line " + std::to_string(line) + ": evaluation needs more than " +
                                   std::to_string(limits_.max_stack_bytes) + " bytes of stack");
}

Status Evaluator::Assign(const Target& target, const Value& value, Scope* scope, int line) {
  if (value.depth() > kMaxValueDepth) {
    return Status::ResourceExhausted("chat template line " + std::to_string(line) + ": value nests deeper than " +
                                     std::to_string(kMaxValueDepth));
  }
  switch (target.kind) {
    case Target::Kind::kName:
      scope->vars.Set(target.names[0], value);
      return Status::Ok();
    case Target::Kind::kTuple: {
      List parts;
      if (value.is_list()) {
        parts = value.as_list();
      } else if (value.is_string()) {
        for (auto [offset, len] : Utf8Chars(value.as_string())) {
          parts.push_back(Value::String(value.as_string().substr(offset, len)));
        }
      } else {
        return Error(line, std::string("cannot unpack non-iterable ") + KindName(value.kind()));
      }
      if (parts.size() != target.names.size()) {
        return Error(line,
                     parts.size() < target.names.size() ? "not enough values to unpack" : "too many values to unpack");
      }
      for (size_t i = 0; i < parts.size(); ++i) scope->vars.Set(target.names[i], parts[i]);
      return Status::Ok();
    }
    case Target::Kind::kAttribute: {
      Value object = Lookup(scope, target.names[0]);
      if (!object.is_namespace()) {
        return Error(line, "cannot assign attribute '" + target.names[1] + "' on non-namespace object '" +
                               target.names[0] + "'");
      }
      object.as_namespace().attrs.Set(target.names[1], value);
      return Status::Ok();
    }
  }
  return Status::Ok();
}

Result<std::string> Evaluator::Capture(const Body& body, Scope* scope) {
  size_t mark = scopes_.size();
  int64_t closures = closures_made_;
  std::string text;
  GYRE_ASSIGN_OR_RETURN(Flow flow, Exec(body, NewScope(scope), &text));
  (void)flow;
  ReleaseScopes(mark, closures);
  return text;
}

Result<Value> Evaluator::ApplyFilters(const std::vector<ExprPtr>& filters, Value value, Scope* scope) {
  for (const ExprPtr& f : filters) {
    GYRE_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(f->args, scope, f->line));
    GYRE_ASSIGN_OR_RETURN(value, ApplyFilter(*this, f->name, value, std::move(args), f->line));
  }
  return value;
}

Result<Value> Evaluator::CallMacro(const Stmt& macro, Scope* closure, CallArgs args, int line) {
  if (call_depth_ >= limits_.max_call_depth) {
    return Status::ResourceExhausted("chat template line " + std::to_string(line) + ": macro calls nest deeper than " +
                                     std::to_string(limits_.max_call_depth));
  }
  ++call_depth_;
  size_t mark = scopes_.size();
  int64_t closures = closures_made_;
  Scope* scope = NewScope(closure);
  Dict kwargs;
  for (auto& [key, value] : args.keyword) kwargs.Set(key, std::move(value));
  Status status;
  for (size_t i = 0; i < macro.params.size() && status.ok(); ++i) {
    const Param& p = macro.params[i];
    if (i < args.positional.size()) {
      scope->vars.Set(p.name, args.positional[i]);
    } else if (Value* v = kwargs.Find(p.name)) {
      scope->vars.Set(p.name, *v);
      Dict rest;
      for (const auto& [key, value] : kwargs) {
        if (!(key.is_string() && key.as_string() == p.name)) rest.Set(key, value);
      }
      kwargs = std::move(rest);
    } else if (p.default_value) {
      Result<Value> d = Eval(*p.default_value, scope);
      if (d.ok()) {
        scope->vars.Set(p.name, std::move(d).value());
      } else {
        status = d.error();
      }
    } else {
      scope->vars.Set(p.name, Value::Undefined(p.name));
    }
  }
  List varargs;
  for (size_t i = macro.params.size(); i < args.positional.size(); ++i) varargs.push_back(args.positional[i]);
  scope->vars.Set("varargs", Value::MakeList(std::move(varargs)));
  scope->vars.Set("kwargs", Value::MakeDict(std::move(kwargs)));
  if (!args.caller.is_undefined()) scope->vars.Set("caller", args.caller);
  std::string text;
  if (status.ok()) {
    Result<Flow> flow = Exec(macro.body, scope, &text);
    if (!flow.ok()) status = flow.error();
  }
  ReleaseScopes(mark, closures);
  --call_depth_;
  if (!status.ok()) return status;
  return Value::String(std::move(text));
}

// --- Expressions --------------------------------------------------------------------------------

// NOTE: Eval only dispatches; each kind is evaluated in its own function so that the frame on the
// recursive path holds only that kind's locals (sanitizer builds would otherwise reserve every
// case's locals in every frame).
Result<Value> Evaluator::Eval(const Expr& e, Scope* scope) {
  GYRE_RETURN_IF_ERROR(Step(e.line));
  if (StackExhausted()) return TooDeep(e.line);
  switch (e.kind) {
    case ExprKind::kLiteral:
      return e.literal;
    case ExprKind::kName:
      return Lookup(scope, e.name);
    case ExprKind::kList:
    case ExprKind::kTuple:
      return EvalList(e, scope);
    case ExprKind::kDict:
      return EvalDict(e, scope);
    case ExprKind::kGetAttr:
    case ExprKind::kGetItem:
      return EvalAccess(e, scope);
    case ExprKind::kSlice:
      return EvalSlice(e, scope);
    case ExprKind::kCall:
      return EvalCall(e, scope);
    case ExprKind::kFilter:
    case ExprKind::kTest:
      return EvalFilterOrTest(e, scope);
    case ExprKind::kNot:
    case ExprKind::kNeg:
    case ExprKind::kPos:
      return EvalUnary(e, scope);
    case ExprKind::kBinary:
      return EvalBinaryExpr(e, scope);
    case ExprKind::kAnd:
    case ExprKind::kOr:
      return EvalLogic(e, scope);
    case ExprKind::kCompare:
      return EvalCompareChain(e, scope);
    case ExprKind::kCond:
      return EvalCond(e, scope);
  }
  return Value::Undefined();
}

Result<Value> Evaluator::EvalList(const Expr& e, Scope* scope) {
  List items;
  items.reserve(e.operands.size());
  for (const ExprPtr& o : e.operands) {
    GYRE_ASSIGN_OR_RETURN(Value v, Eval(*o, scope));
    items.push_back(std::move(v));
  }
  return Value::MakeList(std::move(items));
}

Result<Value> Evaluator::EvalDict(const Expr& e, Scope* scope) {
  Dict dict;
  for (size_t i = 0; i + 1 < e.operands.size(); i += 2) {
    GYRE_ASSIGN_OR_RETURN(Value key, Eval(*e.operands[i], scope));
    GYRE_ASSIGN_OR_RETURN(Value value, Eval(*e.operands[i + 1], scope));
    dict.Set(std::move(key), std::move(value));
  }
  return Value::MakeDict(std::move(dict));
}

Result<Value> Evaluator::EvalAccess(const Expr& e, Scope* scope) {
  GYRE_ASSIGN_OR_RETURN(Value object, Eval(*e.operands[0], scope));
  if (e.kind == ExprKind::kGetAttr) return EvalGetAttr(object, e.name, e.line);
  GYRE_ASSIGN_OR_RETURN(Value key, Eval(*e.operands[1], scope));
  return EvalGetItem(object, key, e.line);
}

Result<Value> Evaluator::EvalFilterOrTest(const Expr& e, Scope* scope) {
  GYRE_ASSIGN_OR_RETURN(Value operand, Eval(*e.operands[0], scope));
  GYRE_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e.args, scope, e.line));
  if (e.kind == ExprKind::kFilter) return ApplyFilter(*this, e.name, operand, std::move(args), e.line);
  GYRE_ASSIGN_OR_RETURN(bool r, ApplyTest(*this, e.name, operand, std::move(args), e.line));
  return Value::Bool(r != e.negated);
}

Result<Value> Evaluator::EvalUnary(const Expr& e, Scope* scope) {
  GYRE_ASSIGN_OR_RETURN(Value v, Eval(*e.operands[0], scope));
  if (e.kind == ExprKind::kNot) return Value::Bool(!v.Truthy());
  bool neg = e.kind == ExprKind::kNeg;
  if (v.is_float()) return Value::Float(neg ? -v.as_float() : v.as_float());
  if (v.is_int() || v.is_bool()) {
    int64_t i = v.is_int() ? v.as_int() : (v.as_bool() ? 1 : 0);
    if (neg && i == std::numeric_limits<int64_t>::min()) return Error(e.line, "integer overflow");
    return Value::Int(neg ? -i : i);
  }
  return Error(e.line,
               std::string("bad operand type for unary ") + (neg ? "-" : "+") + ": '" + KindName(v.kind()) + "'");
}

Result<Value> Evaluator::EvalBinaryExpr(const Expr& e, Scope* scope) {
  GYRE_ASSIGN_OR_RETURN(Value a, Eval(*e.operands[0], scope));
  GYRE_ASSIGN_OR_RETURN(Value b, Eval(*e.operands[1], scope));
  return EvalBinary(e.binary_op, a, b, e.line);
}

Result<Value> Evaluator::EvalLogic(const Expr& e, Scope* scope) {
  GYRE_ASSIGN_OR_RETURN(Value a, Eval(*e.operands[0], scope));
  if (a.Truthy() == (e.kind == ExprKind::kOr)) return a;
  return Eval(*e.operands[1], scope);
}

Result<Value> Evaluator::EvalCompareChain(const Expr& e, Scope* scope) {
  GYRE_ASSIGN_OR_RETURN(Value left, Eval(*e.operands[0], scope));
  for (size_t i = 0; i < e.compare_ops.size(); ++i) {
    GYRE_ASSIGN_OR_RETURN(Value right, Eval(*e.operands[i + 1], scope));
    GYRE_ASSIGN_OR_RETURN(bool r, EvalCompare(e.compare_ops[i], left, right, e.line));
    if (!r) return Value::Bool(false);
    left = std::move(right);
  }
  return Value::Bool(true);
}

Result<Value> Evaluator::EvalCond(const Expr& e, Scope* scope) {
  GYRE_ASSIGN_OR_RETURN(Value test, Eval(*e.operands[1], scope));
  if (test.Truthy()) return Eval(*e.operands[0], scope);
  if (e.operands[2]) return Eval(*e.operands[2], scope);
  return Value::Undefined();
}

Result<Value> Evaluator::EvalGetAttr(const Value& object, const std::string& name, int line) {
  switch (object.kind()) {
    case ValueKind::kDict:
      if (const Value* v = object.as_dict().Find(name)) return *v;
      break;
    case ValueKind::kNamespace:
      if (const Value* v = object.as_namespace().attrs.Find(name)) return *v;
      return Value::Undefined(name);
    case ValueKind::kUndefined:
      // Like @huggingface/jinja (and jinja2's ChainableUndefined): an attribute of an undefined
      // value is undefined, so `a.b.c is defined` works without guards.
      return Value::Undefined(object.undefined_name().empty() ? name : object.undefined_name());
    default:
      break;
  }
  if (HasMethod(object, name)) return Value::MakeCallable(std::make_shared<BoundMethod>(object, name));
  return Value::Undefined(name);
}

Result<Value> Evaluator::EvalGetItem(const Value& object, const Value& key, int line) {
  switch (object.kind()) {
    case ValueKind::kDict:
      if (const Value* v = object.as_dict().Find(key)) return *v;
      return Value::Undefined(KeyString(key));
    case ValueKind::kNamespace:
      if (key.is_string()) return EvalGetAttr(object, key.as_string(), line);
      return Value::Undefined();
    case ValueKind::kList:
    case ValueKind::kString: {
      if (key.is_string()) return EvalGetAttr(object, key.as_string(), line);
      if (!key.is_int() && !key.is_bool()) {
        return Error(line, std::string("indices must be integers, not ") + KindName(key.kind()));
      }
      int64_t index = key.is_int() ? key.as_int() : (key.as_bool() ? 1 : 0);
      if (object.is_list()) {
        const List& list = object.as_list();
        const auto n = static_cast<int64_t>(list.size());
        if (index < 0) index += n;
        if (index < 0 || index >= n) return Value::Undefined();
        return list[static_cast<size_t>(index)];
      }
      const std::string& s = object.as_string();
      auto chars = Utf8Chars(s);
      const auto n = static_cast<int64_t>(chars.size());
      if (index < 0) index += n;
      if (index < 0 || index >= n) return Value::Undefined();
      auto [offset, len] = chars[static_cast<size_t>(index)];
      return Value::String(s.substr(offset, len));
    }
    case ValueKind::kUndefined:
      return Value::Undefined(object.undefined_name());
    default:
      return Value::Undefined();
  }
}

Result<Value> Evaluator::EvalSlice(const Expr& e, Scope* scope) {
  GYRE_ASSIGN_OR_RETURN(Value object, Eval(*e.operands[0], scope));
  int64_t bounds[3] = {0, 0, 1};
  bool given[3] = {false, false, false};
  for (int k = 0; k < 3; ++k) {
    if (!e.operands[k + 1]) continue;
    GYRE_ASSIGN_OR_RETURN(Value v, Eval(*e.operands[k + 1], scope));
    if (v.is_none() || v.is_undefined()) continue;
    if (!v.is_int()) return Error(e.line, "slice indices must be integers or none");
    bounds[k] = v.as_int();
    given[k] = true;
  }
  int64_t step = bounds[2];
  if (step == 0) return Error(e.line, "slice step cannot be zero");
  if (object.is_undefined()) return Error(e.line, UndefinedMessage(object));
  if (!object.is_list() && !object.is_string()) {
    return Error(e.line, std::string("'") + KindName(object.kind()) + "' object is not subscriptable");
  }
  std::vector<std::pair<size_t, size_t>> chars;
  int64_t n;
  if (object.is_list()) {
    n = static_cast<int64_t>(object.as_list().size());
  } else {
    chars = Utf8Chars(object.as_string());
    n = static_cast<int64_t>(chars.size());
  }
  // Python's PySlice_AdjustIndices.
  auto adjust = [&](int64_t v, int64_t lo, int64_t hi) {
    if (v < 0) v += n;
    return v < lo ? lo : v > hi ? hi : v;
  };
  int64_t start, stop;
  if (step > 0) {
    start = given[0] ? adjust(bounds[0], 0, n) : 0;
    stop = given[1] ? adjust(bounds[1], 0, n) : n;
  } else {
    start = given[0] ? adjust(bounds[0], -1, n - 1) : n - 1;
    stop = given[1] ? adjust(bounds[1], -1, n - 1) : -1;
  }
  List items;
  std::string text;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (object.is_list()) {
      items.push_back(object.as_list()[static_cast<size_t>(i)]);
    } else {
      auto [offset, len] = chars[static_cast<size_t>(i)];
      text.append(object.as_string(), offset, len);
    }
  }
  if (object.is_list()) return Value::MakeList(std::move(items));
  return Value::String(std::move(text));
}

Result<CallArgs> Evaluator::EvalArgs(const std::vector<Arg>& args, Scope* scope, int line) {
  CallArgs out;
  for (const Arg& a : args) {
    GYRE_ASSIGN_OR_RETURN(Value v, Eval(*a.value, scope));
    switch (a.spread) {
      case Arg::Spread::kNone:
        if (a.name.empty()) {
          out.positional.push_back(std::move(v));
        } else {
          out.keyword.emplace_back(a.name, std::move(v));
        }
        break;
      case Arg::Spread::kList:
        if (!v.is_list()) return Error(line, "argument after * must be a list");
        for (const Value& item : v.as_list()) out.positional.push_back(item);
        break;
      case Arg::Spread::kDict:
        if (!v.is_dict()) return Error(line, "argument after ** must be a mapping");
        for (const auto& [key, item] : v.as_dict()) {
          if (!key.is_string()) return Error(line, "keywords must be strings");
          out.keyword.emplace_back(key.as_string(), item);
        }
        break;
    }
  }
  return out;
}

Result<Value> Evaluator::EvalCall(const Expr& e, Scope* scope) {
  const Expr& callee = *e.operands[0];
  if (callee.kind == ExprKind::kGetAttr) {
    // object.method(args): call methods directly rather than through a bound method value.
    GYRE_ASSIGN_OR_RETURN(Value object, Eval(*callee.operands[0], scope));
    GYRE_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e.args, scope, e.line));
    // A dict method wins over a key of the same name (`schema.items()` with an "items" key), as in
    // Python; plain attribute access prefers the key (see EvalGetAttr).
    const Value* member = nullptr;
    if (object.is_dict() && !HasMethod(object, callee.name)) member = object.as_dict().Find(callee.name);
    if (object.is_namespace()) member = object.as_namespace().attrs.Find(callee.name);
    if (member != nullptr) return CallValue(*member, std::move(args), e.line);
    if (object.is_undefined()) return Error(e.line, UndefinedMessage(object));
    bool found = false;
    GYRE_ASSIGN_OR_RETURN(Value result, CallMethod(*this, object, callee.name, std::move(args), e.line, &found));
    if (found) return result;
    return Error(e.line,
                 std::string("'") + KindName(object.kind()) + "' object has no attribute '" + callee.name + "'");
  }
  GYRE_ASSIGN_OR_RETURN(Value fn, Eval(callee, scope));
  GYRE_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e.args, scope, e.line));
  return CallValue(fn, std::move(args), e.line);
}

Result<Value> Evaluator::CallValue(const Value& fn, CallArgs args, int line) {
  if (fn.is_callable()) return fn.as_callable().Call(*this, std::move(args), line);
  if (fn.is_undefined()) return Error(line, UndefinedMessage(fn));
  return Error(line, std::string("'") + KindName(fn.kind()) + "' object is not callable");
}

}  // namespace gyre::jinja
