// Python's binary operators and comparisons for the chat template evaluator: arithmetic with
// Python's int/float rules (floor division and modulo round toward negative infinity, int
// overflow is an error), string and list concatenation and repetition, printf-style `%`, and
// ==, <, in and their relatives.
#include <cmath>
#include <limits>

#include "serve/chat_template_builtins.h"
#include "serve/chat_template_eval.h"

namespace gyre::jinja {
namespace {

bool CheckedMul(int64_t a, int64_t b, int64_t* out) { return !__builtin_mul_overflow(a, b, out); }

}  // namespace

Result<Value> Evaluator::EvalBinary(BinaryOp op, const Value& a, const Value& b, int line) {
  auto unsupported = [&](const char* sym) {
    return Error(line, std::string("unsupported operand type(s) for ") + sym + ": '" + KindName(a.kind()) + "' and '" +
                           KindName(b.kind()) + "'");
  };
  auto as_int = [](const Value& v) { return v.is_int() ? v.as_int() : (v.as_bool() ? 1 : 0); };
  const bool ints = (a.is_int() || a.is_bool()) && (b.is_int() || b.is_bool());
  const bool nums = a.is_number() && b.is_number();
  switch (op) {
    case BinaryOp::kConcat: {
      std::string s = CoerceString(*this, a) + CoerceString(*this, b);
      GYRE_RETURN_IF_ERROR(CheckSize(s.size(), line));
      return Value::String(std::move(s));
    }
    case BinaryOp::kAdd: {
      int64_t r;
      if (ints) {
        if (__builtin_add_overflow(as_int(a), as_int(b), &r)) return Error(line, "integer overflow");
        return Value::Int(r);
      }
      if (nums) return Value::Float(a.ToDouble() + b.ToDouble());
      if (a.is_list() && b.is_list()) {
        List items = a.as_list();
        items.insert(items.end(), b.as_list().begin(), b.as_list().end());
        if (items.size() > limits_.max_list_length) {
          return Status::ResourceExhausted("chat template line " + std::to_string(line) + ": list too long");
        }
        GYRE_RETURN_IF_ERROR(Step(line, static_cast<int64_t>(items.size())));
        return Value::MakeList(std::move(items));
      }
      // Like @huggingface/jinja, `+` concatenates as soon as one side is a string.
      if ((a.is_string() || b.is_string()) && !a.is_undefined() && !b.is_undefined()) {
        std::string s = Str(a) + Str(b);
        GYRE_RETURN_IF_ERROR(CheckSize(s.size(), line));
        return Value::String(std::move(s));
      }
      return unsupported("+");
    }
    case BinaryOp::kSub: {
      int64_t r;
      if (ints) {
        if (__builtin_sub_overflow(as_int(a), as_int(b), &r)) return Error(line, "integer overflow");
        return Value::Int(r);
      }
      if (nums) return Value::Float(a.ToDouble() - b.ToDouble());
      return unsupported("-");
    }
    case BinaryOp::kMul: {
      int64_t r;
      if (ints) {
        if (!CheckedMul(as_int(a), as_int(b), &r)) return Error(line, "integer overflow");
        return Value::Int(r);
      }
      if (nums) return Value::Float(a.ToDouble() * b.ToDouble());
      const Value* seq = (a.is_string() || a.is_list()) ? &a : (b.is_string() || b.is_list()) ? &b : nullptr;
      const Value* count = seq == &a ? &b : &a;
      if (seq == nullptr || !(count->is_int() || count->is_bool())) return unsupported("*");
      int64_t times = std::max<int64_t>(0, as_int(*count));
      if (seq->is_string()) {
        uint64_t total = static_cast<uint64_t>(seq->as_string().size()) * static_cast<uint64_t>(times);
        if (!seq->as_string().empty() && total / seq->as_string().size() != static_cast<uint64_t>(times)) {
          return CheckSize(std::numeric_limits<size_t>::max(), line);
        }
        GYRE_RETURN_IF_ERROR(CheckSize(total, line));
        std::string s;
        s.reserve(total);
        for (int64_t i = 0; i < times; ++i) s += seq->as_string();
        return Value::String(std::move(s));
      }
      uint64_t total = static_cast<uint64_t>(seq->as_list().size()) * static_cast<uint64_t>(times);
      if (times > 0 && total / static_cast<uint64_t>(times) != seq->as_list().size()) total = UINT64_MAX;
      if (total > limits_.max_list_length)
        return Status::ResourceExhausted("chat template line " + std::to_string(line) + ": list too long");
      GYRE_RETURN_IF_ERROR(Step(line, static_cast<int64_t>(total)));
      List items;
      for (int64_t i = 0; i < times; ++i) items.insert(items.end(), seq->as_list().begin(), seq->as_list().end());
      return Value::MakeList(std::move(items));
    }
    case BinaryOp::kDiv:
      if (!nums) return unsupported("/");
      if (b.ToDouble() == 0.0) return Error(line, "division by zero");
      return Value::Float(a.ToDouble() / b.ToDouble());
    case BinaryOp::kFloorDiv:
    case BinaryOp::kMod: {
      if (op == BinaryOp::kMod && a.is_string()) return PercentFormat(*this, a.as_string(), b, line);
      if (!nums) return unsupported(op == BinaryOp::kMod ? "%" : "//");
      if (b.ToDouble() == 0.0) return Error(line, op == BinaryOp::kMod ? "modulo by zero" : "division by zero");
      if (ints) {
        int64_t x = as_int(a), y = as_int(b);
        if (x == std::numeric_limits<int64_t>::min() && y == -1) {
          if (op == BinaryOp::kMod) return Value::Int(0);
          return Error(line, "integer overflow");
        }
        int64_t q = x / y, m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) {  // Python floors toward negative infinity
          --q;
          m += y;
        }
        return Value::Int(op == BinaryOp::kMod ? m : q);
      }
      double x = a.ToDouble(), y = b.ToDouble();
      double m = std::fmod(x, y);
      if (m != 0 && ((m < 0) != (y < 0))) m += y;
      if (op == BinaryOp::kMod) return Value::Float(m);
      return Value::Float(std::floor(x / y));
    }
    case BinaryOp::kPow: {
      if (!nums) return unsupported("**");
      if (ints && as_int(b) >= 0) {
        int64_t base = as_int(a), exp = as_int(b), r = 1;
        while (exp > 0) {
          if ((exp & 1) && !CheckedMul(r, base, &r)) return Error(line, "integer overflow");
          exp >>= 1;
          if (exp > 0 && !CheckedMul(base, base, &base)) return Error(line, "integer overflow");
        }
        return Value::Int(r);
      }
      double x = a.ToDouble(), y = b.ToDouble();
      if (x == 0.0 && y < 0) return Error(line, "0.0 cannot be raised to a negative power");
      double r = std::pow(x, y);
      if (std::isnan(r)) return Error(line, "power result is not a real number");
      return Value::Float(r);
    }
  }
  return unsupported("?");
}

Result<bool> Evaluator::EvalCompare(CompareOp op, const Value& a, const Value& b, int line) {
  switch (op) {
    case CompareOp::kEq:
      return ValuesEqual(a, b);
    case CompareOp::kNe:
      return !ValuesEqual(a, b);
    case CompareOp::kIn:
    case CompareOp::kNotIn: {
      bool found = false;
      switch (b.kind()) {
        case ValueKind::kString:
          if (!a.is_string()) {
            return Error(line, std::string("'in <string>' requires string as left operand, not ") + KindName(a.kind()));
          }
          found = b.as_string().find(a.as_string()) != std::string::npos;
          break;
        case ValueKind::kList:
          for (const Value& item : b.as_list()) {
            if (ValuesEqual(a, item)) {
              found = true;
              break;
            }
          }
          break;
        case ValueKind::kDict:
          found = b.as_dict().Find(a) != nullptr;
          break;
        case ValueKind::kNamespace:
          found = a.is_string() && b.as_namespace().attrs.Find(a.as_string()) != nullptr;
          break;
        case ValueKind::kUndefined:
          break;
        default:
          return Error(line, std::string("argument of type '") + KindName(b.kind()) + "' is not iterable");
      }
      return found == (op == CompareOp::kIn);
    }
    default: {
      Result<int> c = CompareValues(a, b);
      if (!c.ok()) return Error(line, c.error().message());
      switch (op) {
        case CompareOp::kLt:
          return *c < 0;
        case CompareOp::kLe:
          return *c <= 0;
        case CompareOp::kGt:
          return *c > 0;
        default:
          return *c >= 0;
      }
    }
  }
}

}  // namespace gyre::jinja
