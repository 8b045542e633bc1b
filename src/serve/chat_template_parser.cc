// Parser of the chat template engine. Sections: token helpers, statements (body, if, for, set,
// macro, call, filter), expressions (in precedence order, lowest first), and the `loop` scan.
#include "serve/chat_template_parser.h"

#include <algorithm>
#include <initializer_list>
#include <string_view>

namespace gyre::jinja {
namespace {

// Nested expressions and blocks deeper than this are rejected, so that parsing and evaluation
// (both recursive) stay well within the stack: kMaxNesting bounds the parser's recursion,
// kMaxExprDepth the depth of an expression tree (left-associative chains such as 1+1+...+1 grow
// trees without recursion).
constexpr int kMaxNesting = 128;
constexpr int kMaxExprDepth = 256;

ExprPtr MakeExpr(ExprKind kind, int line) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->line = line;
  return e;
}

ExprPtr MakeUnary(ExprKind kind, int line, ExprPtr operand) {
  ExprPtr e = MakeExpr(kind, line);
  e->operands.push_back(std::move(operand));
  return e;
}

ExprPtr MakeBinary(ExprKind kind, int line, ExprPtr a, ExprPtr b) {
  ExprPtr e = MakeExpr(kind, line);
  e->operands.push_back(std::move(a));
  e->operands.push_back(std::move(b));
  return e;
}

// Tests that take one argument, which may follow the test name without parentheses
// (`x is divisibleby 3`, `x is sameas none`).
bool TestTakesArgument(std::string_view name) {
  static constexpr std::string_view kNames[] = {"divisibleby", "equalto",     "eq",       "ne",     "lt", "le", "gt",
                                                "ge",          "greaterthan", "lessthan", "sameas", "in", "==", "!="};
  return std::find(std::begin(kNames), std::end(kNames), name) != std::end(kNames);
}

bool ExprUsesName(const Expr* e, std::string_view name);

bool BodyUsesName(const Body& body, std::string_view name) {
  for (const StmtPtr& s : body) {
    if (ExprUsesName(s->expr.get(), name) || ExprUsesName(s->cond.get(), name)) return true;
    for (const Branch& b : s->branches) {
      if (ExprUsesName(b.cond.get(), name) || BodyUsesName(b.body, name)) return true;
    }
    for (const ExprPtr& f : s->filters) {
      if (ExprUsesName(f.get(), name)) return true;
    }
    for (const Param& p : s->params) {
      if (ExprUsesName(p.default_value.get(), name)) return true;
    }
    if (BodyUsesName(s->body, name) || BodyUsesName(s->else_body, name)) return true;
  }
  return false;
}

bool ExprUsesName(const Expr* e, std::string_view name) {
  if (e == nullptr) return false;
  if (e->kind == ExprKind::kName && e->name == name) return true;
  for (const ExprPtr& o : e->operands) {
    if (ExprUsesName(o.get(), name)) return true;
  }
  for (const Arg& a : e->args) {
    if (ExprUsesName(a.value.get(), name)) return true;
  }
  return false;
}

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

  Result<std::unique_ptr<Program>> Run() {
    auto program = std::make_unique<Program>();
    std::string end;
    GYRE_RETURN_IF_ERROR(ParseBody({}, &program->body, &end));
    return program;
  }

 private:
  // Increments the nesting depth for its lifetime.
  class Nest {
   public:
    explicit Nest(int* depth) : depth_(depth) { ++*depth_; }
    ~Nest() { --*depth_; }
    bool too_deep() const { return *depth_ > kMaxNesting; }

   private:
    int* depth_;
  };

  // --- Token helpers --------------------------------------------------------------------------
  const Token& Peek(size_t k = 0) const { return t_[std::min(pos_ + k, t_.size() - 1)]; }
  const Token& Next() {
    const Token& t = t_[pos_];
    if (pos_ + 1 < t_.size()) ++pos_;
    return t;
  }
  bool IsOp(std::string_view op, size_t k = 0) const {
    const Token& t = Peek(k);
    return t.kind == TokenKind::kOperator && t.text == op;
  }
  bool IsName(std::string_view name, size_t k = 0) const {
    const Token& t = Peek(k);
    return t.kind == TokenKind::kName && t.text == name;
  }
  bool SkipOp(std::string_view op) {
    if (!IsOp(op)) return false;
    Next();
    return true;
  }
  bool SkipName(std::string_view name) {
    if (!IsName(name)) return false;
    Next();
    return true;
  }
  static std::string Describe(const Token& t) {
    switch (t.kind) {
      case TokenKind::kText:
        return "template text";
      case TokenKind::kBlockBegin:
        return "'{%'";
      case TokenKind::kBlockEnd:
        return "'%}'";
      case TokenKind::kVarBegin:
        return "'{{'";
      case TokenKind::kVarEnd:
        return "'}}'";
      case TokenKind::kString:
        return "string literal";
      case TokenKind::kInt:
      case TokenKind::kFloat:
        return "number";
      case TokenKind::kEof:
        return "end of template";
      default:
        return "'" + t.text + "'";
    }
  }
  Status Error(const Token& t, const std::string& message) const {
    return Status::InvalidArgument("chat template syntax error at line " + std::to_string(t.line) + ", column " +
                                   std::to_string(t.column) + ": " + message);
  }
  Status Unexpected(const std::string& expected) const {
    return Error(Peek(), "expected " + expected + ", got " + Describe(Peek()));
  }
  Status ExpectOp(std::string_view op) {
    if (!SkipOp(op)) return Unexpected("'" + std::string(op) + "'");
    return Status::Ok();
  }
  Status ExpectBlockEnd() {
    if (Peek().kind != TokenKind::kBlockEnd) return Unexpected("'%}'");
    Next();
    return Status::Ok();
  }
  Result<std::string> ExpectName() {
    if (Peek().kind != TokenKind::kName) return Unexpected("a name");
    return Next().text;
  }
  Status TooDeep() const { return Error(Peek(), "template is nested too deeply"); }
  // Sets e->depth from its children; an error past kMaxExprDepth.
  Result<ExprPtr> Seal(ExprPtr e) const {
    int d = 0;
    for (const ExprPtr& o : e->operands) {
      if (o) d = std::max(d, o->depth);
    }
    for (const Arg& a : e->args) d = std::max(d, a.value->depth);
    e->depth = d + 1;
    if (e->depth > kMaxExprDepth) return Error(Peek(), "expression is nested too deeply");
    return e;
  }

  // --- Statements -----------------------------------------------------------------------------
  Status ParseBody(std::initializer_list<std::string_view> end_tags, Body* out, std::string* end_tag);
  Status ParseStatement(Body* out);
  Status ParseIf(Stmt* s);
  Status ParseFor(Stmt* s);
  Status ParseSet(Stmt* s);
  Status ParseMacro(Stmt* s);
  Status ParseCallBlock(Stmt* s);
  Status ParseFilterBlock(Stmt* s);
  Result<Target> ParseAssignTarget(bool allow_attribute);
  Result<std::vector<Param>> ParseParams();
  Status ParseBlockBody(std::string_view end, Body* out) {
    std::string found;
    GYRE_RETURN_IF_ERROR(ParseBody({end}, out, &found));
    return ExpectBlockEnd();
  }

  // --- Expressions ----------------------------------------------------------------------------
  Result<ExprPtr> ParseTuple(bool with_condexpr = true);
  Result<ExprPtr> ParseExpression(bool with_condexpr = true);
  Result<ExprPtr> ParseCondExpr();
  Result<ExprPtr> ParseOr();
  Result<ExprPtr> ParseAnd();
  Result<ExprPtr> ParseNot();
  Result<ExprPtr> ParseCompare();
  Result<ExprPtr> ParseMath1();
  Result<ExprPtr> ParseConcat();
  Result<ExprPtr> ParseMath2();
  Result<ExprPtr> ParsePow();
  Result<ExprPtr> ParseUnary(bool with_filter);
  Result<ExprPtr> ParsePrimary();
  Result<ExprPtr> ParsePostfix(ExprPtr node);
  Result<ExprPtr> ParseSubscript(ExprPtr object, int line);
  Result<ExprPtr> ParseFilterExpr(ExprPtr node);
  Result<ExprPtr> ParseFilterCall(ExprPtr operand);
  Result<ExprPtr> ParseTest(ExprPtr operand);
  Result<std::vector<Arg>> ParseCallArgs();
  bool IsTupleEnd() const {
    const Token& t = Peek();
    return t.kind == TokenKind::kVarEnd || t.kind == TokenKind::kBlockEnd || t.kind == TokenKind::kEof || IsOp(")") ||
           IsOp("]") || IsOp("}") || IsName("if") || IsName("recursive");
  }

  std::vector<Token> t_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

Status Parser::ParseBody(std::initializer_list<std::string_view> end_tags, Body* out, std::string* end_tag) {
  Nest nest(&depth_);
  if (nest.too_deep()) return TooDeep();
  while (true) {
    const Token& tok = Peek();
    switch (tok.kind) {
      case TokenKind::kEof: {
        if (end_tags.size() == 0) return Status::Ok();
        return Error(tok, "unexpected end of template, expected {% " + std::string(*end_tags.begin()) + " %}");
      }
      case TokenKind::kText: {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kText;
        s->line = tok.line;
        s->text = Next().text;
        out->push_back(std::move(s));
        break;
      }
      case TokenKind::kVarBegin: {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kOutput;
        s->line = Next().line;
        GYRE_ASSIGN_OR_RETURN(s->expr, ParseTuple());
        if (Peek().kind != TokenKind::kVarEnd) return Unexpected("'}}'");
        Next();
        out->push_back(std::move(s));
        break;
      }
      case TokenKind::kBlockBegin: {
        const Token& name = Peek(1);
        if (name.kind != TokenKind::kName) {
          Next();
          return Unexpected("a tag name");
        }
        if (std::find(end_tags.begin(), end_tags.end(), name.text) != end_tags.end()) {
          Next();
          *end_tag = Next().text;
          return Status::Ok();
        }
        Next();
        GYRE_RETURN_IF_ERROR(ParseStatement(out));
        break;
      }
      default:
        return Error(tok, "unexpected " + Describe(tok));
    }
  }
}

Status Parser::ParseStatement(Body* out) {
  const Token& tag = Peek();
  std::string name = Next().text;
  auto s = std::make_unique<Stmt>();
  s->line = tag.line;
  if (name == "if") {
    GYRE_RETURN_IF_ERROR(ParseIf(s.get()));
  } else if (name == "for") {
    GYRE_RETURN_IF_ERROR(ParseFor(s.get()));
  } else if (name == "set") {
    GYRE_RETURN_IF_ERROR(ParseSet(s.get()));
  } else if (name == "macro") {
    GYRE_RETURN_IF_ERROR(ParseMacro(s.get()));
  } else if (name == "call") {
    GYRE_RETURN_IF_ERROR(ParseCallBlock(s.get()));
  } else if (name == "filter") {
    GYRE_RETURN_IF_ERROR(ParseFilterBlock(s.get()));
  } else if (name == "break" || name == "continue") {
    if (loop_depth_ == 0) return Error(tag, "'" + name + "' outside of a loop");
    s->kind = name == "break" ? StmtKind::kBreak : StmtKind::kContinue;
    GYRE_RETURN_IF_ERROR(ExpectBlockEnd());
  } else if (name == "generation") {
    // transformers' {% generation %} marks assistant text for masks; it renders its body as is.
    s->kind = StmtKind::kBlock;
    GYRE_RETURN_IF_ERROR(ExpectBlockEnd());
    GYRE_RETURN_IF_ERROR(ParseBlockBody("endgeneration", &s->body));
  } else {
    return Error(tag, "unknown or unexpected tag '" + name + "'");
  }
  out->push_back(std::move(s));
  return Status::Ok();
}

Status Parser::ParseIf(Stmt* s) {
  s->kind = StmtKind::kIf;
  while (true) {
    Branch branch;
    GYRE_ASSIGN_OR_RETURN(branch.cond, ParseTuple());
    GYRE_RETURN_IF_ERROR(ExpectBlockEnd());
    std::string end;
    GYRE_RETURN_IF_ERROR(ParseBody({"elif", "else", "endif"}, &branch.body, &end));
    s->branches.push_back(std::move(branch));
    if (end == "elif") continue;
    GYRE_RETURN_IF_ERROR(ExpectBlockEnd());
    if (end == "else") return ParseBlockBody("endif", &s->else_body);
    return Status::Ok();
  }
}

Status Parser::ParseFor(Stmt* s) {
  s->kind = StmtKind::kFor;
  GYRE_ASSIGN_OR_RETURN(s->target, ParseAssignTarget(/*allow_attribute=*/false));
  if (!SkipName("in")) return Unexpected("'in'");
  GYRE_ASSIGN_OR_RETURN(s->expr, ParseTuple(/*with_condexpr=*/false));
  if (SkipName("if")) {
    GYRE_ASSIGN_OR_RETURN(s->cond, ParseExpression());
  }
  if (IsName("recursive")) return Error(Peek(), "recursive loops are not supported");
  GYRE_RETURN_IF_ERROR(ExpectBlockEnd());
  std::string end;
  ++loop_depth_;
  Status st = ParseBody({"else", "endfor"}, &s->body, &end);
  --loop_depth_;
  GYRE_RETURN_IF_ERROR(st);
  GYRE_RETURN_IF_ERROR(ExpectBlockEnd());
  if (end == "else") GYRE_RETURN_IF_ERROR(ParseBlockBody("endfor", &s->else_body));
  s->uses_loop = BodyUsesName(s->body, "loop") || ExprUsesName(s->cond.get(), "loop");
  return Status::Ok();
}

Result<Target> Parser::ParseAssignTarget(bool allow_attribute) {
  Target target;
  bool parens = SkipOp("(");
  GYRE_ASSIGN_OR_RETURN(std::string first, ExpectName());
  target.names.push_back(first);
  if (!parens && allow_attribute && SkipOp(".")) {
    GYRE_ASSIGN_OR_RETURN(std::string attr, ExpectName());
    target.kind = Target::Kind::kAttribute;
    target.names.push_back(attr);
    return target;
  }
  while (SkipOp(",")) {
    target.kind = Target::Kind::kTuple;
    if (Peek().kind != TokenKind::kName || IsName("in")) break;
    target.names.push_back(Next().text);
  }
  if (parens) {
    target.kind = Target::Kind::kTuple;
    GYRE_RETURN_IF_ERROR(ExpectOp(")"));
  }
  return target;
}

Status Parser::ParseSet(Stmt* s) {
  GYRE_ASSIGN_OR_RETURN(s->target, ParseAssignTarget(/*allow_attribute=*/true));
  if (SkipOp("=")) {
    s->kind = StmtKind::kSet;
    GYRE_ASSIGN_OR_RETURN(s->expr, ParseTuple());
    return ExpectBlockEnd();
  }
  if (s->target.kind != Target::Kind::kName) return Unexpected("'='");
  s->kind = StmtKind::kSetBlock;
  while (SkipOp("|")) {
    GYRE_ASSIGN_OR_RETURN(ExprPtr f, ParseFilterCall(nullptr));
    s->filters.push_back(std::move(f));
  }
  GYRE_RETURN_IF_ERROR(ExpectBlockEnd());
  // break/continue cannot leave a captured block.
  int saved = loop_depth_;
  loop_depth_ = 0;
  Status st = ParseBlockBody("endset", &s->body);
  loop_depth_ = saved;
  return st;
}

Result<std::vector<Param>> Parser::ParseParams() {
  std::vector<Param> params;
  GYRE_RETURN_IF_ERROR(ExpectOp("("));
  while (!IsOp(")")) {
    Param p;
    GYRE_ASSIGN_OR_RETURN(p.name, ExpectName());
    for (const Param& other : params) {
      if (other.name == p.name) return Error(Peek(), "duplicate parameter '" + p.name + "'");
    }
    if (SkipOp("=")) {
      GYRE_ASSIGN_OR_RETURN(p.default_value, ParseExpression());
    } else if (!params.empty() && params.back().default_value) {
      return Error(Peek(), "non-default parameter '" + p.name + "' follows a default parameter");
    }
    params.push_back(std::move(p));
    if (!SkipOp(",")) break;
  }
  GYRE_RETURN_IF_ERROR(ExpectOp(")"));
  return params;
}

Status Parser::ParseMacro(Stmt* s) {
  s->kind = StmtKind::kMacro;
  GYRE_ASSIGN_OR_RETURN(s->name, ExpectName());
  GYRE_ASSIGN_OR_RETURN(s->params, ParseParams());
  GYRE_RETURN_IF_ERROR(ExpectBlockEnd());
  int saved = loop_depth_;
  loop_depth_ = 0;
  Status st = ParseBlockBody("endmacro", &s->body);
  loop_depth_ = saved;
  return st;
}

Status Parser::ParseCallBlock(Stmt* s) {
  s->kind = StmtKind::kCallBlock;
  if (IsOp("(")) {
    GYRE_ASSIGN_OR_RETURN(s->params, ParseParams());
  }
  const Token& at = Peek();
  GYRE_ASSIGN_OR_RETURN(s->expr, ParseExpression());
  if (s->expr->kind != ExprKind::kCall) return Error(at, "{% call %} needs a macro call");
  GYRE_RETURN_IF_ERROR(ExpectBlockEnd());
  int saved = loop_depth_;
  loop_depth_ = 0;
  Status st = ParseBlockBody("endcall", &s->body);
  loop_depth_ = saved;
  return st;
}

Status Parser::ParseFilterBlock(Stmt* s) {
  s->kind = StmtKind::kFilterBlock;
  do {
    GYRE_ASSIGN_OR_RETURN(ExprPtr f, ParseFilterCall(nullptr));
    s->filters.push_back(std::move(f));
  } while (SkipOp("|"));
  GYRE_RETURN_IF_ERROR(ExpectBlockEnd());
  // break/continue cannot leave a captured block.
  int saved = loop_depth_;
  loop_depth_ = 0;
  Status st = ParseBlockBody("endfilter", &s->body);
  loop_depth_ = saved;
  return st;
}

// --- Expressions ------------------------------------------------------------------------------

Result<ExprPtr> Parser::ParseTuple(bool with_condexpr) {
  int line = Peek().line;
  GYRE_ASSIGN_OR_RETURN(ExprPtr first, ParseExpression(with_condexpr));
  if (!IsOp(",")) return first;
  ExprPtr tuple = MakeExpr(ExprKind::kTuple, line);
  tuple->operands.push_back(std::move(first));
  while (SkipOp(",")) {
    if (IsTupleEnd()) break;
    GYRE_ASSIGN_OR_RETURN(ExprPtr item, ParseExpression(with_condexpr));
    tuple->operands.push_back(std::move(item));
  }
  return Seal(std::move(tuple));
}

Result<ExprPtr> Parser::ParseExpression(bool with_condexpr) {
  Nest nest(&depth_);
  if (nest.too_deep()) return TooDeep();
  return with_condexpr ? ParseCondExpr() : ParseOr();
}

Result<ExprPtr> Parser::ParseCondExpr() {
  GYRE_ASSIGN_OR_RETURN(ExprPtr expr, ParseOr());
  while (IsName("if")) {
    int line = Next().line;
    GYRE_ASSIGN_OR_RETURN(ExprPtr test, ParseOr());
    ExprPtr otherwise;
    if (SkipName("else")) {
      Nest nest(&depth_);
      if (nest.too_deep()) return TooDeep();
      GYRE_ASSIGN_OR_RETURN(otherwise, ParseCondExpr());
    }
    ExprPtr cond = MakeExpr(ExprKind::kCond, line);
    cond->operands.push_back(std::move(expr));
    cond->operands.push_back(std::move(test));
    cond->operands.push_back(std::move(otherwise));
    GYRE_ASSIGN_OR_RETURN(expr, Seal(std::move(cond)));
  }
  return expr;
}

Result<ExprPtr> Parser::ParseOr() {
  GYRE_ASSIGN_OR_RETURN(ExprPtr left, ParseAnd());
  while (IsName("or")) {
    int line = Next().line;
    GYRE_ASSIGN_OR_RETURN(ExprPtr right, ParseAnd());
    GYRE_ASSIGN_OR_RETURN(left, Seal(MakeBinary(ExprKind::kOr, line, std::move(left), std::move(right))));
  }
  return left;
}

Result<ExprPtr> Parser::ParseAnd() {
  GYRE_ASSIGN_OR_RETURN(ExprPtr left, ParseNot());
  while (IsName("and")) {
    int line = Next().line;
    GYRE_ASSIGN_OR_RETURN(ExprPtr right, ParseNot());
    GYRE_ASSIGN_OR_RETURN(left, Seal(MakeBinary(ExprKind::kAnd, line, std::move(left), std::move(right))));
  }
  return left;
}

Result<ExprPtr> Parser::ParseNot() {
  if (IsName("not")) {
    int line = Next().line;
    Nest nest(&depth_);
    if (nest.too_deep()) return TooDeep();
    GYRE_ASSIGN_OR_RETURN(ExprPtr operand, ParseNot());
    return Seal(MakeUnary(ExprKind::kNot, line, std::move(operand)));
  }
  return ParseCompare();
}

Result<ExprPtr> Parser::ParseCompare() {
  int line = Peek().line;
  GYRE_ASSIGN_OR_RETURN(ExprPtr first, ParseMath1());
  ExprPtr cmp;
  while (true) {
    CompareOp op;
    if (IsOp("=="))
      op = CompareOp::kEq;
    else if (IsOp("!="))
      op = CompareOp::kNe;
    else if (IsOp("<"))
      op = CompareOp::kLt;
    else if (IsOp("<="))
      op = CompareOp::kLe;
    else if (IsOp(">"))
      op = CompareOp::kGt;
    else if (IsOp(">="))
      op = CompareOp::kGe;
    else if (IsName("in"))
      op = CompareOp::kIn;
    else if (IsName("not") && IsName("in", 1))
      op = CompareOp::kNotIn;
    else
      break;
    if (op == CompareOp::kNotIn) Next();
    Next();
    if (!cmp) {
      cmp = MakeExpr(ExprKind::kCompare, line);
      cmp->operands.push_back(std::move(first));
    }
    GYRE_ASSIGN_OR_RETURN(ExprPtr operand, ParseMath1());
    cmp->compare_ops.push_back(op);
    cmp->operands.push_back(std::move(operand));
  }
  if (!cmp) return first;
  return Seal(std::move(cmp));
}

Result<ExprPtr> Parser::ParseMath1() {
  GYRE_ASSIGN_OR_RETURN(ExprPtr left, ParseConcat());
  while (IsOp("+") || IsOp("-")) {
    const Token& op = Next();
    GYRE_ASSIGN_OR_RETURN(ExprPtr right, ParseConcat());
    GYRE_ASSIGN_OR_RETURN(left, Seal(MakeBinary(ExprKind::kBinary, op.line, std::move(left), std::move(right))));
    left->binary_op = op.text == "+" ? BinaryOp::kAdd : BinaryOp::kSub;
  }
  return left;
}

Result<ExprPtr> Parser::ParseConcat() {
  GYRE_ASSIGN_OR_RETURN(ExprPtr left, ParseMath2());
  while (IsOp("~")) {
    int line = Next().line;
    GYRE_ASSIGN_OR_RETURN(ExprPtr right, ParseMath2());
    GYRE_ASSIGN_OR_RETURN(left, Seal(MakeBinary(ExprKind::kBinary, line, std::move(left), std::move(right))));
    left->binary_op = BinaryOp::kConcat;
  }
  return left;
}

Result<ExprPtr> Parser::ParseMath2() {
  GYRE_ASSIGN_OR_RETURN(ExprPtr left, ParsePow());
  while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
    const Token& op = Next();
    GYRE_ASSIGN_OR_RETURN(ExprPtr right, ParsePow());
    GYRE_ASSIGN_OR_RETURN(left, Seal(MakeBinary(ExprKind::kBinary, op.line, std::move(left), std::move(right))));
    left->binary_op = op.text == "*"    ? BinaryOp::kMul
                      : op.text == "/"  ? BinaryOp::kDiv
                      : op.text == "//" ? BinaryOp::kFloorDiv
                                        : BinaryOp::kMod;
  }
  return left;
}

Result<ExprPtr> Parser::ParsePow() {
  GYRE_ASSIGN_OR_RETURN(ExprPtr left, ParseUnary(true));
  while (IsOp("**")) {
    int line = Next().line;
    GYRE_ASSIGN_OR_RETURN(ExprPtr right, ParseUnary(true));
    GYRE_ASSIGN_OR_RETURN(left, Seal(MakeBinary(ExprKind::kBinary, line, std::move(left), std::move(right))));
    left->binary_op = BinaryOp::kPow;
  }
  return left;
}

Result<ExprPtr> Parser::ParseUnary(bool with_filter) {
  Nest nest(&depth_);
  if (nest.too_deep()) return TooDeep();
  ExprPtr node;
  if (IsOp("-") || IsOp("+")) {
    const Token& op = Next();
    ExprKind kind = op.text == "-" ? ExprKind::kNeg : ExprKind::kPos;
    int line = op.line;
    GYRE_ASSIGN_OR_RETURN(ExprPtr operand, ParseUnary(false));
    GYRE_ASSIGN_OR_RETURN(node, Seal(MakeUnary(kind, line, std::move(operand))));
  } else {
    GYRE_ASSIGN_OR_RETURN(node, ParsePrimary());
  }
  GYRE_ASSIGN_OR_RETURN(node, ParsePostfix(std::move(node)));
  if (with_filter) {
    GYRE_ASSIGN_OR_RETURN(node, ParseFilterExpr(std::move(node)));
  }
  return node;
}

Result<ExprPtr> Parser::ParsePrimary() {
  const Token& tok = Peek();
  int line = tok.line;
  switch (tok.kind) {
    case TokenKind::kName: {
      std::string name = Next().text;
      ExprPtr e = MakeExpr(ExprKind::kLiteral, line);
      if (name == "true" || name == "True") {
        e->literal = Value::Bool(true);
      } else if (name == "false" || name == "False") {
        e->literal = Value::Bool(false);
      } else if (name == "none" || name == "None") {
        e->literal = Value::None();
      } else {
        e->kind = ExprKind::kName;
        e->name = std::move(name);
      }
      return e;
    }
    case TokenKind::kString: {
      std::string s = Next().text;
      while (Peek().kind == TokenKind::kString) s += Next().text;
      ExprPtr e = MakeExpr(ExprKind::kLiteral, line);
      e->literal = Value::String(std::move(s));
      return e;
    }
    case TokenKind::kInt:
    case TokenKind::kFloat: {
      const Token& n = Next();
      ExprPtr e = MakeExpr(ExprKind::kLiteral, line);
      e->literal = n.kind == TokenKind::kInt ? Value::Int(n.int_value) : Value::Float(n.float_value);
      return e;
    }
    case TokenKind::kOperator: {
      if (SkipOp("(")) {
        if (SkipOp(")")) return MakeExpr(ExprKind::kTuple, line);
        GYRE_ASSIGN_OR_RETURN(ExprPtr inner, ParseTuple());
        GYRE_RETURN_IF_ERROR(ExpectOp(")"));
        return inner;
      }
      if (SkipOp("[")) {
        ExprPtr list = MakeExpr(ExprKind::kList, line);
        while (!IsOp("]")) {
          GYRE_ASSIGN_OR_RETURN(ExprPtr item, ParseExpression());
          list->operands.push_back(std::move(item));
          if (!SkipOp(",")) break;
        }
        GYRE_RETURN_IF_ERROR(ExpectOp("]"));
        return Seal(std::move(list));
      }
      if (SkipOp("{")) {
        ExprPtr dict = MakeExpr(ExprKind::kDict, line);
        while (!IsOp("}")) {
          GYRE_ASSIGN_OR_RETURN(ExprPtr key, ParseExpression());
          GYRE_RETURN_IF_ERROR(ExpectOp(":"));
          GYRE_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
          dict->operands.push_back(std::move(key));
          dict->operands.push_back(std::move(value));
          if (!SkipOp(",")) break;
        }
        GYRE_RETURN_IF_ERROR(ExpectOp("}"));
        return Seal(std::move(dict));
      }
      break;
    }
    default:
      break;
  }
  return Error(tok, "unexpected " + Describe(tok));
}

Result<ExprPtr> Parser::ParsePostfix(ExprPtr node) {
  while (true) {
    int line = Peek().line;
    if (SkipOp(".")) {
      const Token& attr = Next();
      if (attr.kind == TokenKind::kName) {
        ExprPtr e = MakeUnary(ExprKind::kGetAttr, line, std::move(node));
        e->name = attr.text;
        GYRE_ASSIGN_OR_RETURN(node, Seal(std::move(e)));
      } else if (attr.kind == TokenKind::kInt) {
        ExprPtr index = MakeExpr(ExprKind::kLiteral, line);
        index->literal = Value::Int(attr.int_value);
        GYRE_ASSIGN_OR_RETURN(node, Seal(MakeBinary(ExprKind::kGetItem, line, std::move(node), std::move(index))));
      } else {
        return Error(attr, "expected an attribute name after '.', got " + Describe(attr));
      }
    } else if (SkipOp("[")) {
      GYRE_ASSIGN_OR_RETURN(node, ParseSubscript(std::move(node), line));
    } else if (IsOp("(")) {
      ExprPtr call = MakeUnary(ExprKind::kCall, line, std::move(node));
      GYRE_ASSIGN_OR_RETURN(call->args, ParseCallArgs());
      GYRE_ASSIGN_OR_RETURN(node, Seal(std::move(call)));
    } else {
      return node;
    }
  }
}

Result<ExprPtr> Parser::ParseSubscript(ExprPtr object, int line) {
  ExprPtr parts[3];
  bool is_slice = false;
  if (!IsOp(":")) {
    GYRE_ASSIGN_OR_RETURN(parts[0], ParseExpression());
  }
  if (SkipOp(":")) {
    is_slice = true;
    if (!IsOp("]") && !IsOp(":")) {
      GYRE_ASSIGN_OR_RETURN(parts[1], ParseExpression());
    }
    if (SkipOp(":") && !IsOp("]")) {
      GYRE_ASSIGN_OR_RETURN(parts[2], ParseExpression());
    }
  }
  GYRE_RETURN_IF_ERROR(ExpectOp("]"));
  if (!is_slice) return Seal(MakeBinary(ExprKind::kGetItem, line, std::move(object), std::move(parts[0])));
  ExprPtr slice = MakeUnary(ExprKind::kSlice, line, std::move(object));
  for (ExprPtr& p : parts) slice->operands.push_back(std::move(p));
  return Seal(std::move(slice));
}

Result<ExprPtr> Parser::ParseFilterExpr(ExprPtr node) {
  while (true) {
    if (SkipOp("|")) {
      GYRE_ASSIGN_OR_RETURN(node, ParseFilterCall(std::move(node)));
    } else if (IsName("is")) {
      GYRE_ASSIGN_OR_RETURN(node, ParseTest(std::move(node)));
    } else if (IsOp("(")) {
      int line = Peek().line;
      ExprPtr call = MakeUnary(ExprKind::kCall, line, std::move(node));
      GYRE_ASSIGN_OR_RETURN(call->args, ParseCallArgs());
      GYRE_ASSIGN_OR_RETURN(node, Seal(std::move(call)));
    } else {
      return node;
    }
  }
}

Result<ExprPtr> Parser::ParseFilterCall(ExprPtr operand) {
  const Token& at = Peek();
  GYRE_ASSIGN_OR_RETURN(std::string name, ExpectName());
  ExprPtr f = MakeUnary(ExprKind::kFilter, at.line, std::move(operand));
  f->name = std::move(name);
  if (IsOp("(")) {
    GYRE_ASSIGN_OR_RETURN(f->args, ParseCallArgs());
  }
  return Seal(std::move(f));
}

Result<ExprPtr> Parser::ParseTest(ExprPtr operand) {
  int line = Next().line;  // is
  bool negated = SkipName("not");
  const Token& at = Peek();
  std::string name;
  if (at.kind == TokenKind::kName) {
    name = Next().text;
  } else if (IsOp("==") || IsOp("!=") || IsOp("<") || IsOp(">") || IsOp("<=") || IsOp(">=")) {
    name = Next().text;
  } else {
    return Unexpected("a test name");
  }
  ExprPtr t = MakeUnary(ExprKind::kTest, line, std::move(operand));
  t->name = std::move(name);
  t->negated = negated;
  if (IsOp("(")) {
    GYRE_ASSIGN_OR_RETURN(t->args, ParseCallArgs());
  } else if (TestTakesArgument(t->name)) {
    const Token& next = Peek();
    bool starts_operand = next.kind == TokenKind::kString || next.kind == TokenKind::kInt ||
                          next.kind == TokenKind::kFloat || IsOp("[") || IsOp("{") || IsOp("-") ||
                          (next.kind == TokenKind::kName && !IsName("else") && !IsName("or") && !IsName("and") &&
                           !IsName("if") && !IsName("is"));
    if (starts_operand) {
      Arg arg;
      GYRE_ASSIGN_OR_RETURN(arg.value, ParseUnary(/*with_filter=*/false));
      t->args.push_back(std::move(arg));
    }
  }
  return Seal(std::move(t));
}

Result<std::vector<Arg>> Parser::ParseCallArgs() {
  std::vector<Arg> args;
  GYRE_RETURN_IF_ERROR(ExpectOp("("));
  while (!IsOp(")")) {
    Arg arg;
    if (SkipOp("*")) {
      arg.spread = Arg::Spread::kList;
    } else if (SkipOp("**")) {
      arg.spread = Arg::Spread::kDict;
    } else if (Peek().kind == TokenKind::kName && IsOp("=", 1)) {
      arg.name = Next().text;
      Next();
    }
    GYRE_ASSIGN_OR_RETURN(arg.value, ParseExpression());
    args.push_back(std::move(arg));
    if (!SkipOp(",")) break;
  }
  GYRE_RETURN_IF_ERROR(ExpectOp(")"));
  return args;
}

}  // namespace

Result<std::unique_ptr<Program>> Parse(std::vector<Token> tokens) {
  Parser parser(std::move(tokens));
  return parser.Run();
}

}  // namespace gyre::jinja
