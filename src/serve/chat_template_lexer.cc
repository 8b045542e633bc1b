// Tokenizer of the chat template engine. Sections: position bookkeeping, whitespace helpers,
// literals (numbers, strings), the tag lexer, and Tokenize (text mode, comments, raw blocks).
#include "serve/chat_template_lexer.h"

#include <algorithm>
#include <cstdlib>
#include <limits>

#include "serve/chat_template_value.h"

namespace gyre::jinja {
namespace {

// Unicode whitespace as JavaScript's String.prototype.trim sees it (what @huggingface/jinja uses
// for `{%-` / `-%}`), for the character of `len` bytes at `s[i]`.
bool IsUnicodeSpace(std::string_view s, size_t i, size_t len) {
  uint32_t cp = DecodeUtf8Char(s, i, len);
  if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D);
  return cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000 || cp == 0xFEFF;
}

size_t Utf8Len(unsigned char c) {
  return c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 1;
}

// Removes trailing Unicode whitespace from `text`.
void RStripSpace(std::string* text) {
  std::vector<std::pair<size_t, size_t>> chars = Utf8Chars(*text);
  size_t keep = text->size();
  for (auto it = chars.rbegin(); it != chars.rend(); ++it) {
    if (!IsUnicodeSpace(*text, it->first, it->second)) break;
    keep = it->first;
  }
  text->resize(keep);
}

class Lexer {
 public:
  Lexer(std::string_view src, const LexOptions& options) : src_(src), options_(options) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  Result<std::vector<Token>> Run();

 private:
  // --- Positions ---------------------------------------------------------------------------
  void Locate(size_t offset, Token* t) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    size_t line = static_cast<size_t>(it - line_starts_.begin());
    t->line = static_cast<int>(line);
    t->column = static_cast<int>(offset - line_starts_[line - 1] + 1);
  }
  Status Error(size_t offset, const std::string& message) const {
    Token t;
    Locate(offset, &t);
    return Status::InvalidArgument("chat template syntax error at line " + std::to_string(t.line) + ", column " +
                                   std::to_string(t.column) + ": " + message);
  }
  void Push(TokenKind kind, size_t offset, std::string text = {}) {
    Token t;
    t.kind = kind;
    t.text = std::move(text);
    Locate(offset, &t);
    tokens_.push_back(std::move(t));
  }

  // --- Whitespace helpers ------------------------------------------------------------------
  bool StartsWith(size_t pos, std::string_view s) const { return src_.substr(pos, s.size()) == s; }
  void SkipUnicodeSpace() {
    while (pos_ < src_.size()) {
      size_t len = std::min(Utf8Len(static_cast<unsigned char>(src_[pos_])), src_.size() - pos_);
      if (!IsUnicodeSpace(src_, pos_, len)) break;
      pos_ += len;
    }
  }
  void SkipTagSpace() {
    while (pos_ < src_.size() && (src_[pos_] == ' ' || src_[pos_] == '\t' || src_[pos_] == '\n' || src_[pos_] == '\r' ||
                                  src_[pos_] == '\f' || src_[pos_] == '\v')) {
      ++pos_;
    }
  }
  // After a block or comment tag: `-` strips all following whitespace; otherwise trim_blocks
  // drops one newline unless the tag ended with `+`.
  void AfterBlockEnd(char modifier) {
    if (modifier == '-') {
      SkipUnicodeSpace();
    } else if (modifier != '+' && options_.trim_blocks && pos_ < src_.size() && src_[pos_] == '\n') {
      ++pos_;
    }
  }

  // --- Literals -------------------------------------------------------------------------------
  Status LexNumber();
  Status LexString();

  // --- Tags -----------------------------------------------------------------------------------
  Status LexTag(bool is_block);
  // If a `{% raw %}` tag starts at `tag_start`, consumes the raw block and returns true.
  Result<bool> LexRaw(size_t tag_start, std::string* pending_text);
  // Matches `{%[-+]? *word *[-+]?%}` at `pos`; returns its length (0 if none) and modifiers.
  size_t MatchSimpleTag(size_t pos, std::string_view word, char* open_mod, char* close_mod) const;
  void EmitText(std::string text, size_t start, char tag_char, char modifier);

  std::string_view src_;
  LexOptions options_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
  size_t pos_ = 0;
};

Status Lexer::LexNumber() {
  size_t start = pos_;
  bool after_dot = !tokens_.empty() && tokens_.back().kind == TokenKind::kOperator && tokens_.back().text == ".";
  auto digits = [&] {
    while (pos_ < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_')) ++pos_;
  };
  digits();
  bool is_float = false;
  if (!after_dot && pos_ + 1 < src_.size() && src_[pos_] == '.' &&
      std::isdigit(static_cast<unsigned char>(src_[pos_ + 1]))) {
    ++pos_;
    digits();
    is_float = true;
  }
  if (!after_dot && pos_ < src_.size() && (src_[pos_] == 'e' || src_[pos_] == 'E')) {
    size_t p = pos_ + 1;
    if (p < src_.size() && (src_[p] == '+' || src_[p] == '-')) ++p;
    if (p < src_.size() && std::isdigit(static_cast<unsigned char>(src_[p]))) {
      pos_ = p;
      digits();
      is_float = true;
    }
  }
  std::string text;
  for (size_t i = start; i < pos_; ++i) {
    if (src_[i] != '_') text.push_back(src_[i]);
  }
  Push(is_float ? TokenKind::kFloat : TokenKind::kInt, start, text);
  if (is_float) {
    tokens_.back().float_value = std::strtod(text.c_str(), nullptr);
    return Status::Ok();
  }
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno == ERANGE) return Error(start, "integer literal " + text + " is too large");
  tokens_.back().int_value = v;
  return Status::Ok();
}

Status Lexer::LexString() {
  size_t start = pos_;
  char quote = src_[pos_++];
  std::string value;
  auto hex = [&](size_t n, uint32_t* out) {
    if (pos_ + n > src_.size()) return false;
    uint32_t v = 0;
    for (size_t k = 0; k < n; ++k) {
      char c = src_[pos_ + k];
      int d = std::isdigit(static_cast<unsigned char>(c)) ? c - '0'
              : (c >= 'a' && c <= 'f')                    ? c - 'a' + 10
              : (c >= 'A' && c <= 'F')                    ? c - 'A' + 10
                                                          : -1;
      if (d < 0) return false;
      v = v * 16 + static_cast<uint32_t>(d);
    }
    pos_ += n;
    *out = v;
    return true;
  };
  while (true) {
    if (pos_ >= src_.size()) return Error(start, "unterminated string literal");
    char c = src_[pos_++];
    if (c == quote) break;
    if (c != '\\') {
      value.push_back(c);
      continue;
    }
    if (pos_ >= src_.size()) return Error(start, "unterminated string literal");
    char e = src_[pos_++];
    uint32_t cp = 0;
    switch (e) {
      case 'n':
        value.push_back('\n');
        break;
      case 't':
        value.push_back('\t');
        break;
      case 'r':
        value.push_back('\r');
        break;
      case 'b':
        value.push_back('\b');
        break;
      case 'f':
        value.push_back('\f');
        break;
      case 'v':
        value.push_back('\v');
        break;
      case 'a':
        value.push_back('\a');
        break;
      case '0':
        value.push_back('\0');
        break;
      case '\\':
        value.push_back('\\');
        break;
      case '\'':
        value.push_back('\'');
        break;
      case '"':
        value.push_back('"');
        break;
      case '\n':
        break;  // line continuation
      case 'x':
      case 'u':
      case 'U':
        if (!hex(e == 'x' ? 2 : e == 'u' ? 4 : 8, &cp) || cp > 0x10FFFF) {
          return Error(pos_ - 2, std::string("invalid \\") + e + " escape in string literal");
        }
        AppendUtf8(cp, &value);
        break;
      default:  // Python keeps unknown escapes verbatim
        value.push_back('\\');
        value.push_back(e);
    }
  }
  Push(TokenKind::kString, start, std::move(value));
  return Status::Ok();
}

Status Lexer::LexTag(bool is_block) {
  int brace_depth = 0;
  while (true) {
    SkipTagSpace();
    if (pos_ >= src_.size()) {
      return Error(
          pos_, is_block ? "unexpected end of template, expected '%}'" : "unexpected end of template, expected '}}'");
    }
    // The end of the tag.
    char mod = (src_[pos_] == '-' || src_[pos_] == '+') ? src_[pos_] : 0;
    size_t after_mod = pos_ + (mod ? 1 : 0);
    if (is_block && StartsWith(after_mod, "%}")) {
      Push(TokenKind::kBlockEnd, pos_);
      pos_ = after_mod + 2;
      AfterBlockEnd(mod);
      return Status::Ok();
    }
    if (!is_block && brace_depth == 0 && mod != '+' && StartsWith(after_mod, "}}")) {
      Push(TokenKind::kVarEnd, pos_);
      pos_ = after_mod + 2;
      if (mod == '-') SkipUnicodeSpace();
      return Status::Ok();
    }
    char c = src_[pos_];
    if (std::isdigit(static_cast<unsigned char>(c))) {
      GYRE_RETURN_IF_ERROR(LexNumber());
      continue;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t start = pos_;
      while (pos_ < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_')) ++pos_;
      Push(TokenKind::kName, start, std::string(src_.substr(start, pos_ - start)));
      continue;
    }
    if (c == '\'' || c == '"') {
      GYRE_RETURN_IF_ERROR(LexString());
      continue;
    }
    static constexpr std::string_view kTwoChar[] = {"**", "//", "==", "!=", "<=", ">="};
    std::string op;
    for (std::string_view two : kTwoChar) {
      if (StartsWith(pos_, two)) op = std::string(two);
    }
    if (op.empty() && std::string_view("+-*/%~<>=()[]{}.,:|").find(c) != std::string_view::npos) op = std::string(1, c);
    if (op.empty()) return Error(pos_, std::string("unexpected character '") + c + "'");
    if (op == "{") ++brace_depth;
    if (op == "}") --brace_depth;
    Push(TokenKind::kOperator, pos_, op);
    pos_ += op.size();
  }
}

size_t Lexer::MatchSimpleTag(size_t pos, std::string_view word, char* open_mod, char* close_mod) const {
  if (!StartsWith(pos, "{%")) return 0;
  size_t p = pos + 2;
  *open_mod = (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) ? src_[p] : 0;
  if (*open_mod) ++p;
  while (p < src_.size() && (src_[p] == ' ' || src_[p] == '\t' || src_[p] == '\n' || src_[p] == '\r')) ++p;
  if (!StartsWith(p, word)) return 0;
  p += word.size();
  if (p < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[p])) || src_[p] == '_')) return 0;
  while (p < src_.size() && (src_[p] == ' ' || src_[p] == '\t' || src_[p] == '\n' || src_[p] == '\r')) ++p;
  *close_mod = (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) ? src_[p] : 0;
  if (*close_mod) ++p;
  if (!StartsWith(p, "%}")) return 0;
  return p + 2 - pos;
}

// Emits the text before a tag that starts with `{` + `tag_char` (+ `modifier`), applying `-`
// stripping and lstrip_blocks.
void Lexer::EmitText(std::string text, size_t start, char tag_char, char modifier) {
  if (modifier == '-') {
    RStripSpace(&text);
  } else if (options_.lstrip_blocks && modifier != '+' && (tag_char == '%' || tag_char == '#')) {
    size_t nl = text.find_last_of('\n');
    bool at_line_start = nl != std::string::npos || start == 0 || src_[start - 1] == '\n';
    size_t tail = nl == std::string::npos ? 0 : nl + 1;
    if (at_line_start && text.find_first_not_of(" \t", tail) == std::string::npos) text.resize(tail);
  }
  if (!text.empty()) Push(TokenKind::kText, start, std::move(text));
}

Result<bool> Lexer::LexRaw(size_t tag_start, std::string* pending_text) {
  char open_mod = 0, close_mod = 0;
  size_t len = MatchSimpleTag(tag_start, "raw", &open_mod, &close_mod);
  if (len == 0) return false;
  EmitText(std::move(*pending_text), pos_, '%', open_mod);
  size_t body_start = tag_start + len;
  pos_ = body_start;
  AfterBlockEnd(close_mod);
  body_start = pos_;
  for (size_t p = src_.find("{%", body_start); p != std::string_view::npos; p = src_.find("{%", p + 1)) {
    char end_open = 0, end_close = 0;
    size_t end_len = MatchSimpleTag(p, "endraw", &end_open, &end_close);
    if (end_len == 0) continue;
    std::string body(src_.substr(body_start, p - body_start));
    EmitText(std::move(body), body_start, '%', end_open);
    pos_ = p + end_len;
    AfterBlockEnd(end_close);
    return true;
  }
  return Error(tag_start, "unterminated {% raw %} block");
}

Result<std::vector<Token>> Lexer::Run() {
  while (pos_ < src_.size()) {
    // Text mode: everything up to the next `{{`, `{%` or `{#`.
    size_t tag = pos_;
    while (true) {
      tag = src_.find('{', tag);
      if (tag == std::string_view::npos || tag + 1 >= src_.size()) {
        tag = std::string_view::npos;
        break;
      }
      char next = src_[tag + 1];
      if (next == '{' || next == '%' || next == '#') break;
      ++tag;
    }
    if (tag == std::string_view::npos) {
      Push(TokenKind::kText, pos_, std::string(src_.substr(pos_)));
      break;
    }
    std::string text(src_.substr(pos_, tag - pos_));
    char tag_char = src_[tag + 1];
    char modifier = (tag + 2 < src_.size() && (src_[tag + 2] == '-' || src_[tag + 2] == '+')) ? src_[tag + 2] : 0;
    if (tag_char == '%') {
      GYRE_ASSIGN_OR_RETURN(bool was_raw, LexRaw(tag, &text));
      if (was_raw) continue;
    }
    EmitText(std::move(text), pos_, tag_char, modifier);
    pos_ = tag + 2 + (modifier ? 1 : 0);
    if (tag_char == '#') {
      size_t end = src_.find("#}", pos_);
      if (end == std::string_view::npos) return Error(tag, "unterminated comment");
      char close_mod = (end > pos_ && (src_[end - 1] == '-' || src_[end - 1] == '+')) ? src_[end - 1] : 0;
      pos_ = end + 2;
      AfterBlockEnd(close_mod);
      continue;
    }
    bool is_block = tag_char == '%';
    Push(is_block ? TokenKind::kBlockBegin : TokenKind::kVarBegin, tag);
    GYRE_RETURN_IF_ERROR(LexTag(is_block));
  }
  Push(TokenKind::kEof, src_.size());
  return std::move(tokens_);
}

}  // namespace

Result<std::vector<Token>> Tokenize(std::string_view source, const LexOptions& options) {
  // Like jinja2's keep_trailing_newline=False: one trailing newline is not part of the template.
  if (!source.empty() && source.back() == '\n') source.remove_suffix(1);
  Lexer lexer(source, options);
  return lexer.Run();
}

}  // namespace gyre::jinja
