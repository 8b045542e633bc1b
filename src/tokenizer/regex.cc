#include "tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "tokenizer/unicode.h"

namespace gyre::tok {
namespace {

std::string Pcre2Message(int code) {
  PCRE2_UCHAR buf[256];
  if (pcre2_get_error_message(code, buf, sizeof(buf)) < 0) return "error " + std::to_string(code);
  return reinterpret_cast<const char*>(buf);
}

struct MatchDataDeleter {
  void operator()(pcre2_match_data* md) const { pcre2_match_data_free(md); }
};

}  // namespace

// Oniguruma's Unicode `\s`: U+0009..U+000D, U+0085 and the Z categories (Zs, Zl, Zp). PCRE2's
// differs: it lacks U+0085 and adds U+180E.
constexpr char kOnigSpace[] =
    "\\x{9}-\\x{D}\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}"
    "\\x{205F}\\x{3000}";

// Oniguruma's Unicode `\w` (PCRE2's lacks marks). Inside a bracket class Oniguruma's `\w`
// leaves out Other_Number (measured against HF: "²" is in `[^\w\s]` but also matches `\w`).
constexpr char kOnigWord[] = "\\p{L}\\p{M}\\p{N}\\p{Pc}";
constexpr char kOnigClassWord[] = "\\p{L}\\p{M}\\p{Nd}\\p{Nl}\\p{Pc}";

std::string TranslateOnigPattern(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 16);
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[++i];
      if (e == 's') {
        out += in_class ? std::string(kOnigSpace) : "[" + std::string(kOnigSpace) + "]";
      } else if (e == 'S' && !in_class) {
        out += "[^" + std::string(kOnigSpace) + "]";
      } else if (e == 'w') {
        out += in_class ? std::string(kOnigClassWord) : "[" + std::string(kOnigWord) + "]";
      } else if (e == 'W' && !in_class) {
        out += "[^" + std::string(kOnigWord) + "]";
      } else if (e == 'h') {  // Ruby: hex digit (PCRE2: horizontal space)
        out += in_class ? "0-9a-fA-F" : "[0-9a-fA-F]";
      } else if (e == 'H' && !in_class) {
        out += "[^0-9a-fA-F]";
      } else {
        out += c;
        out += e;
      }
      continue;
    }
    if (!in_class) {
      out += c;
      if (c == '[') {
        in_class = true;
        // A ']' right after '[' or '[^' is a literal.
        if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
        if (i + 1 < p.size() && p[i + 1] == ']') {
          out += "\\]";
          ++i;
        }
      }
      continue;
    }
    if (c == '[' && i + 1 < p.size() && p[i + 1] == ':') {  // POSIX class such as [:alpha:]
      const size_t end = p.find(":]", i + 2);
      if (end != std::string_view::npos) {
        out.append(p.substr(i, end + 2 - i));
        i = end + 1;
        continue;
      }
    }
    if (c == ']') in_class = false;
    out += c;
  }
  return out;
}

Result<std::unique_ptr<Regex>> Regex::Build(std::string_view pattern, uint32_t options) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_compile_context* cctx = pcre2_compile_context_create(nullptr);
  if (cctx == nullptr) return Status::ResourceExhausted("regex: out of memory");
  pcre2_set_newline(cctx, PCRE2_NEWLINE_LF);
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   options, &error, &offset, cctx);
  pcre2_compile_context_free(cctx);
  if (code == nullptr) {
    return Status::InvalidArgument("invalid regex at offset " + std::to_string(offset) + ": " +
                                   Pcre2Message(error));
  }
  // NOTE: JIT is an optimization only; when it is unavailable pcre2_match interprets.
  (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  pcre2_match_context* mctx = pcre2_match_context_create(nullptr);
  if (mctx == nullptr) {
    pcre2_code_free(code);
    return Status::ResourceExhausted("regex: out of memory");
  }
  return std::unique_ptr<Regex>(new Regex(code, mctx));
}

Result<std::unique_ptr<Regex>> Regex::Compile(std::string_view pattern) {
  const std::string translated = TranslateOnigPattern(pattern);
  return Build(translated, PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE | PCRE2_NEVER_BACKSLASH_C);
}

Result<std::unique_ptr<Regex>> Regex::Literal(std::string_view text) {
  return Build(text, PCRE2_UTF | PCRE2_LITERAL);
}

Regex::~Regex() {
  pcre2_match_context_free(mctx_);
  pcre2_code_free(code_);
}

Status Regex::FindAll(std::string_view text, std::vector<MatchRange>* matches) const {
  matches->clear();
  std::unique_ptr<pcre2_match_data, MatchDataDeleter> md(
      pcre2_match_data_create_from_pattern(code_, nullptr));
  if (md == nullptr) return Status::ResourceExhausted("regex: out of memory");
  static const char kEmpty[1] = {0};
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.empty() ? kEmpty : text.data());
  uint32_t options = PCRE2_NO_UTF_CHECK;
  size_t search_from = 0;
  bool have_match = false;
  size_t last_match_end = 0;
  while (search_from <= text.size()) {
    const int rc = pcre2_match(code_, subject, text.size(), search_from, options, md.get(), mctx_);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT && (options & PCRE2_NO_JIT) == 0) {
      options |= PCRE2_NO_JIT;  // the interpreter keeps its backtracking state on the heap
      continue;
    }
    if (rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_DEPTHLIMIT ||
        rc == PCRE2_ERROR_HEAPLIMIT || rc == PCRE2_ERROR_NOMEMORY ||
        rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      return Status::ResourceExhausted("regex match: " + Pcre2Message(rc));
    }
    if (rc < 0) return Status::Internal("regex match: " + Pcre2Message(rc));
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(md.get());
    const size_t begin = ovector[0], end = ovector[1];
    if (begin > end || end > text.size() || begin < search_from) {
      return Status::Internal("regex match: match outside the subject");
    }
    if (begin == end && have_match && last_match_end == end) {
      // onig's find_iter: no empty match right after the previous match; move one char on.
      if (search_from >= text.size()) break;
      search_from += NextUtf8(text, search_from).len;
      continue;
    }
    matches->emplace_back(begin, end);
    search_from = end;
    have_match = true;
    last_match_end = end;
  }
  return Status::Ok();
}

}  // namespace gyre::tok
