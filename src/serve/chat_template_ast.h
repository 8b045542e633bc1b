// Syntax tree of a compiled chat template (internal to src/serve/chat_template*).
//
// Nodes are plain structs owned by their parent through unique_ptr; a Program is immutable after
// parsing and may be rendered from many threads at once. Each node kind uses only the fields its
// comment names.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "serve/chat_template_value.h"

namespace gyre::jinja {

enum class ExprKind {
  kLiteral,  // literal
  kName,     // name
  kList,     // operands: items
  kTuple,    // operands: items
  kDict,     // operands: key0, value0, key1, value1, ...
  kGetAttr,  // operands[0].name (dot access)
  kGetItem,  // operands[0][operands[1]]
  kSlice,    // operands[0][operands[1]:operands[2]:operands[3]] (null for omitted parts)
  kCall,     // operands[0](args)
  kFilter,   // operands[0] | name(args); operands[0] is null in filter blocks and set blocks
  kTest,     // operands[0] is [not] name(args); negated
  kNot,      // not operands[0]
  kNeg,      // -operands[0]
  kPos,      // +operands[0]
  kBinary,   // operands[0] binary_op operands[1]
  kAnd,      // operands[0] and operands[1]
  kOr,       // operands[0] or operands[1]
  kCompare,  // operands[0] compare_ops[0] operands[1] compare_ops[1] operands[2] ... (chained)
  kCond,     // operands[0] if operands[1] else operands[2] (operands[2] null: undefined)
};

enum class BinaryOp { kAdd, kSub, kMul, kDiv, kFloorDiv, kMod, kPow, kConcat };
enum class CompareOp { kEq, kNe, kLt, kLe, kGt, kGe, kIn, kNotIn };

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

// One argument of a call, filter or test: positional (name empty), keyword, *list or **dict.
struct Arg {
  enum class Spread { kNone, kList, kDict };
  std::string name;
  ExprPtr value;
  Spread spread = Spread::kNone;
};

struct Expr {
  ExprKind kind = ExprKind::kLiteral;
  int line = 0;
  int depth = 1;  // 1 + the largest depth of operands and arguments (bounded by the parser)
  Value literal;
  std::string name;
  BinaryOp binary_op = BinaryOp::kAdd;
  std::vector<CompareOp> compare_ops;
  bool negated = false;
  std::vector<ExprPtr> operands;
  std::vector<Arg> args;
};

// The left side of a set or the variables of a for loop.
struct Target {
  enum class Kind { kName, kTuple, kAttribute };
  Kind kind = Kind::kName;
  std::vector<std::string> names;  // kName: one name; kTuple: the names; kAttribute: {object, attribute}
};

// A macro or call-block parameter.
struct Param {
  std::string name;
  ExprPtr default_value;  // null: required
};

enum class StmtKind {
  kText,         // text
  kOutput,       // {{ expr }}
  kIf,           // branches (cond, body) ..., else_body
  kFor,          // for target in expr [if cond]: body, else_body; uses_loop
  kSet,          // set target = expr
  kSetBlock,     // set target[0] | filters: body
  kMacro,        // macro name(params): body
  kCallBlock,    // call(params) expr: body
  kFilterBlock,  // filter filters: body
  kBlock,        // body in the current scope ({% generation %})
  kBreak,
  kContinue,
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Branch {
  ExprPtr cond;
  Body body;
};

struct Stmt {
  StmtKind kind = StmtKind::kText;
  int line = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr cond;
  std::vector<Branch> branches;
  Body body;
  Body else_body;
  Target target;
  std::vector<ExprPtr> filters;  // kFilter nodes with a null operand
  std::string name;
  std::vector<Param> params;
  bool uses_loop = false;  // kFor: the body or filter refers to `loop`
};

struct Program {
  Body body;
};

}  // namespace gyre::jinja
