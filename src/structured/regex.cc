// Regex subset → AST → Thompson NFA → DFA (subset construction over byte classes) → trimmed
// ByteDfa. Sections: AST and parser; NFA; subset construction and trimming.
#include "structured/regex.h"

#include <algorithm>
#include <bitset>
#include <map>
#include <string>
#include <vector>

namespace gyre::structured {

namespace {

// ---- AST and parser ------------------------------------------------------------------------------

using ByteSet = std::bitset<256>;
constexpr int kInf = -1;
constexpr int kMaxRepeat = 1000;
constexpr int kMaxDepth = 200;
constexpr size_t kMaxNfaStates = 400000;

struct Node {
  enum Kind { kEmpty, kSet, kCat, kAlt, kRep } kind = kEmpty;
  ByteSet set;             // kSet
  std::vector<int> kids;   // kCat, kAlt, kRep (one)
  int min = 0, max = 0;    // kRep; max kInf = unbounded
};

class Parser {
 public:
  explicit Parser(std::string_view p) : p_(p) {}

  Result<int> Parse() {
    if (!p_.empty() && p_[0] == '^') ++i_;
    GYRE_ASSIGN_OR_RETURN(int root, Alternation(0));
    if (i_ < p_.size()) return Err(p_[i_] == ')' ? "unbalanced ')'" : "unexpected character");
    return root;
  }
  std::vector<Node>& nodes() { return nodes_; }

 private:
  Status Err(const std::string& what) const {
    return Status::InvalidArgument("regex: " + what + " at offset " + std::to_string(i_));
  }
  int Add(Node n) {
    nodes_.push_back(std::move(n));
    return static_cast<int>(nodes_.size() - 1);
  }
  int Set(const ByteSet& s) {
    Node n;
    n.kind = Node::kSet;
    n.set = s;
    return Add(std::move(n));
  }
  int Seq(const std::string& bytes) {
    Node n;
    n.kind = Node::kCat;
    for (unsigned char c : bytes) {
      ByteSet s;
      s.set(c);
      n.kids.push_back(Set(s));
    }
    return Add(std::move(n));
  }
  static ByteSet Range(int lo, int hi) {
    ByteSet s;
    for (int b = lo; b <= hi; ++b) s.set(b);
    return s;
  }
  // Any valid UTF-8 character of 2..4 bytes.
  int MultiByteChar() {
    Node alt;
    alt.kind = Node::kAlt;
    const ByteSet cont = Range(0x80, 0xBF);
    auto seq = [&](std::vector<ByteSet> parts) {
      Node c;
      c.kind = Node::kCat;
      for (const ByteSet& s : parts) c.kids.push_back(Set(s));
      alt.kids.push_back(Add(std::move(c)));
    };
    seq({Range(0xC2, 0xDF), cont});
    seq({Range(0xE0, 0xE0), Range(0xA0, 0xBF), cont});
    seq({Range(0xE1, 0xEC), cont, cont});
    seq({Range(0xED, 0xED), Range(0x80, 0x9F), cont});
    seq({Range(0xEE, 0xEF), cont, cont});
    seq({Range(0xF0, 0xF0), Range(0x90, 0xBF), cont, cont});
    seq({Range(0xF1, 0xF3), cont, cont, cont});
    seq({Range(0xF4, 0xF4), Range(0x80, 0x8F), cont, cont});
    return Add(std::move(alt));
  }
  // An ASCII set, plus every multi-byte character when `with_multibyte`.
  int CharClass(const ByteSet& ascii, bool with_multibyte) {
    if (!with_multibyte) return Set(ascii);
    Node alt;
    alt.kind = Node::kAlt;
    if (ascii.any()) alt.kids.push_back(Set(ascii));
    alt.kids.push_back(MultiByteChar());
    return Add(std::move(alt));
  }
  static ByteSet Ascii() { return Range(0, 0x7F); }
  static ByteSet ClassSet(char c) {
    ByteSet s;
    switch (c) {
      case 'd': s = Range('0', '9'); break;
      case 'w': s = Range('0', '9') | Range('a', 'z') | Range('A', 'Z'); s.set('_'); break;
      case 's': for (char w : {' ', '\t', '\n', '\r', '\f', '\v'}) s.set(static_cast<unsigned char>(w)); break;
    }
    return s;
  }
  static std::string Utf8(uint32_t cp) {
    std::string o;
    if (cp < 0x80) {
      o += static_cast<char>(cp);
    } else if (cp < 0x800) {
      o += static_cast<char>(0xC0 | (cp >> 6));
      o += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      o += static_cast<char>(0xE0 | (cp >> 12));
      o += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      o += static_cast<char>(0x80 | (cp & 0x3F));
    }
    return o;
  }
  Result<uint32_t> Hex(int digits) {
    uint32_t v = 0;
    for (int k = 0; k < digits; ++k, ++i_) {
      if (i_ >= p_.size() || !std::isxdigit(static_cast<unsigned char>(p_[i_]))) return Err("bad hex escape");
      const char c = p_[i_];
      v = v * 16 + (std::isdigit(static_cast<unsigned char>(c)) ? c - '0' : (std::tolower(c) - 'a' + 10));
    }
    return v;
  }
  // After a backslash: the escaped byte (as a one-character string) or a class. `cls` is set for
  // \d \w \s (negated: upper case).
  struct Escape {
    std::string bytes;
    bool is_class = false, negated = false;
    ByteSet set;
  };
  Result<Escape> ParseEscape() {
    if (i_ >= p_.size()) return Err("trailing backslash");
    const char c = p_[i_++];
    Escape e;
    switch (c) {
      case 'n': e.bytes = "\n"; return e;
      case 'r': e.bytes = "\r"; return e;
      case 't': e.bytes = "\t"; return e;
      case 'f': e.bytes = "\f"; return e;
      case 'v': e.bytes = "\v"; return e;
      case '0': e.bytes = std::string(1, '\0'); return e;
      case 'd': case 'w': case 's': case 'D': case 'W': case 'S':
        e.is_class = true;
        e.negated = std::isupper(static_cast<unsigned char>(c));
        e.set = ClassSet(static_cast<char>(std::tolower(c)));
        return e;
      case 'x': {
        GYRE_ASSIGN_OR_RETURN(uint32_t v, Hex(2));
        if (v >= 0x80) return Err("\\x escape above 0x7f (write the character itself)");
        e.bytes = std::string(1, static_cast<char>(v));
        return e;
      }
      case 'u': {
        GYRE_ASSIGN_OR_RETURN(uint32_t v, Hex(4));
        if (v >= 0xD800 && v <= 0xDFFF) return Err("\\u escape of a surrogate");
        e.bytes = Utf8(v);
        return e;
      }
    }
    if (std::isalnum(static_cast<unsigned char>(c)))
      return Err(std::string("unsupported escape \\") + c + " (back references, \\b, \\p are not supported)");
    e.bytes = std::string(1, c);
    return e;
  }
  Result<int> Bracket() {  // after '['
    bool neg = false;
    if (i_ < p_.size() && p_[i_] == '^') {
      neg = true;
      ++i_;
    }
    ByteSet s;
    bool first = true;
    while (true) {
      if (i_ >= p_.size()) return Err("unterminated '['");
      unsigned char c = static_cast<unsigned char>(p_[i_]);
      if (c == ']' && !first) {
        ++i_;
        break;
      }
      first = false;
      if (c == '[' && i_ + 1 < p_.size() && p_[i_ + 1] == ':') return Err("POSIX classes [:name:] are not supported");
      int lo;
      ++i_;
      if (c == '\\') {
        GYRE_ASSIGN_OR_RETURN(Escape e, ParseEscape());
        if (e.is_class) {
          if (e.negated) return Err("negated class escapes inside [] are not supported");
          s |= e.set;
          continue;
        }
        if (e.bytes.size() != 1) return Err("non-ASCII member in a bracket class");
        lo = static_cast<unsigned char>(e.bytes[0]);
      } else {
        if (c >= 0x80) return Err("non-ASCII member in a bracket class");
        lo = c;
      }
      int hi = lo;
      if (i_ + 1 < p_.size() && p_[i_] == '-' && p_[i_ + 1] != ']') {
        ++i_;
        unsigned char d = static_cast<unsigned char>(p_[i_++]);
        if (d == '\\') {
          GYRE_ASSIGN_OR_RETURN(Escape e, ParseEscape());
          if (e.is_class || e.bytes.size() != 1) return Err("bad range end in a bracket class");
          d = static_cast<unsigned char>(e.bytes[0]);
        }
        if (d >= 0x80) return Err("non-ASCII member in a bracket class");
        hi = d;
        if (hi < lo) return Err("reversed range in a bracket class");
      }
      for (int b = lo; b <= hi; ++b) s.set(b);
    }
    return neg ? CharClass(Ascii() & ~s, true) : Set(s);
  }
  Result<int> Atom(int depth) {
    const char c = p_[i_];
    if (c == '(') {
      ++i_;
      if (i_ < p_.size() && p_[i_] == '?') {
        if (i_ + 1 < p_.size() && p_[i_ + 1] == ':') {
          i_ += 2;
        } else {
          return Err("(? groups other than (?: (lookaround, named groups, flags) are not supported");
        }
      }
      GYRE_ASSIGN_OR_RETURN(int inner, Alternation(depth + 1));
      if (i_ >= p_.size() || p_[i_] != ')') return Err("missing ')'");
      ++i_;
      return inner;
    }
    if (c == '[') {
      ++i_;
      return Bracket();
    }
    if (c == '.') {
      ++i_;
      ByteSet s = Ascii();
      s.reset('\n');
      return CharClass(s, true);
    }
    if (c == '\\') {
      ++i_;
      GYRE_ASSIGN_OR_RETURN(Escape e, ParseEscape());
      if (e.is_class) return e.negated ? CharClass(Ascii() & ~e.set, true) : Set(e.set);
      return Seq(e.bytes);
    }
    if (c == '^' || c == '$') return Err("anchors are only supported at the ends of the pattern");
    if (c == '*' || c == '+' || c == '?' || c == '{') return Err("nothing to repeat");
    // A literal UTF-8 character (its continuation bytes follow it).
    size_t n = 1;
    const unsigned char u = static_cast<unsigned char>(c);
    if (u >= 0xF0) n = 4; else if (u >= 0xE0) n = 3; else if (u >= 0xC0) n = 2;
    if (i_ + n > p_.size()) return Err("truncated UTF-8 character");
    const std::string bytes(p_.substr(i_, n));
    i_ += n;
    return Seq(bytes);
  }
  Result<int> Number() {
    if (i_ >= p_.size() || !std::isdigit(static_cast<unsigned char>(p_[i_]))) return Err("expected a number in {}");
    int v = 0;
    while (i_ < p_.size() && std::isdigit(static_cast<unsigned char>(p_[i_]))) {
      v = v * 10 + (p_[i_++] - '0');
      if (v > kMaxRepeat) return Err("repetition bound above " + std::to_string(kMaxRepeat));
    }
    return v;
  }
  Result<int> Quantified(int depth) {
    GYRE_ASSIGN_OR_RETURN(int atom, Atom(depth));
    while (i_ < p_.size()) {
      const char c = p_[i_];
      int mn, mx;
      if (c == '*') { mn = 0; mx = kInf; ++i_; }
      else if (c == '+') { mn = 1; mx = kInf; ++i_; }
      else if (c == '?') { mn = 0; mx = 1; ++i_; }
      else if (c == '{') {
        ++i_;
        GYRE_ASSIGN_OR_RETURN(mn, Number());
        mx = mn;
        if (i_ < p_.size() && p_[i_] == ',') {
          ++i_;
          if (i_ < p_.size() && p_[i_] == '}') {
            mx = kInf;
          } else {
            GYRE_ASSIGN_OR_RETURN(mx, Number());
            if (mx < mn) return Err("{n,m} with m < n");
          }
        }
        if (i_ >= p_.size() || p_[i_] != '}') return Err("missing '}'");
        ++i_;
      } else {
        break;
      }
      if (i_ < p_.size() && (p_[i_] == '?' || p_[i_] == '+')) return Err("lazy and possessive quantifiers are not supported");
      Node r;
      r.kind = Node::kRep;
      r.kids = {atom};
      r.min = mn;
      r.max = mx;
      atom = Add(std::move(r));
    }
    return atom;
  }
  Result<int> Concatenation(int depth) {
    Node cat;
    cat.kind = Node::kCat;
    while (i_ < p_.size() && p_[i_] != '|' && p_[i_] != ')') {
      if (p_[i_] == '$' && i_ + 1 == p_.size()) {
        ++i_;
        break;
      }
      GYRE_ASSIGN_OR_RETURN(int q, Quantified(depth));
      cat.kids.push_back(q);
    }
    return Add(std::move(cat));
  }
  Result<int> Alternation(int depth) {
    if (depth > kMaxDepth) return Err("groups nested deeper than " + std::to_string(kMaxDepth));
    Node alt;
    alt.kind = Node::kAlt;
    GYRE_ASSIGN_OR_RETURN(int first, Concatenation(depth));
    alt.kids.push_back(first);
    while (i_ < p_.size() && p_[i_] == '|') {
      ++i_;
      GYRE_ASSIGN_OR_RETURN(int next, Concatenation(depth));
      alt.kids.push_back(next);
    }
    if (alt.kids.size() == 1) return first;
    return Add(std::move(alt));
  }

  std::string_view p_;
  size_t i_ = 0;
  std::vector<Node> nodes_;
};

// ---- NFA -----------------------------------------------------------------------------------------

struct Nfa {
  std::vector<std::vector<int>> eps;
  std::vector<std::pair<int, int>> edge;  // per state: (set index or -1, target)
  std::vector<ByteSet> sets;
  int accept = -1;
  bool too_big = false;

  int NewState() {
    if (eps.size() >= kMaxNfaStates) too_big = true;
    eps.emplace_back();
    edge.emplace_back(-1, -1);
    return static_cast<int>(eps.size() - 1);
  }
  // Builds `node` from state `in`; returns its end state. Iterative over kCat children; recursion
  // depth is bounded by the parser's group depth.
  int Build(const std::vector<Node>& nodes, int node, int in) {
    if (too_big) return in;
    const Node& n = nodes[node];
    switch (n.kind) {
      case Node::kEmpty: return in;
      case Node::kSet: {
        const int out = NewState();
        sets.push_back(n.set);
        edge[in] = {static_cast<int>(sets.size() - 1), out};
        // An edge leaves `in`; a state has at most one, so route through a fresh state if taken.
        return out;
      }
      case Node::kCat: {
        int cur = in;
        for (int k : n.kids) cur = Build(nodes, k, cur);
        return cur;
      }
      case Node::kAlt: {
        const int out = NewState();
        for (int k : n.kids) {
          const int s = NewState();
          eps[in].push_back(s);
          const int e = Build(nodes, k, s);
          eps[e].push_back(out);
        }
        return out;
      }
      case Node::kRep: {
        int cur = in;
        for (int r = 0; r < n.min && !too_big; ++r) cur = Fresh(nodes, n.kids[0], cur);
        if (n.max == kInf) {
          const int loop = NewState();
          eps[cur].push_back(loop);
          const int e = Fresh(nodes, n.kids[0], loop);
          eps[e].push_back(loop);
          return loop;
        }
        for (int r = n.min; r < n.max && !too_big; ++r) {
          const int skip = NewState();
          eps[cur].push_back(skip);
          const int e = Fresh(nodes, n.kids[0], cur);
          eps[e].push_back(skip);
          cur = skip;
        }
        return cur;
      }
    }
    return in;
  }
  // Builds `node` from a fresh state reached from `in` by epsilon (so `in` keeps no set edge).
  int Fresh(const std::vector<Node>& nodes, int node, int in) {
    const int s = NewState();
    eps[in].push_back(s);
    return Build(nodes, node, s);
  }
};

// ---- subset construction ------------------------------------------------------------------------

void Closure(const Nfa& nfa, std::vector<int>* set, std::vector<uint32_t>* mark, uint32_t stamp) {
  std::vector<int> stack(set->begin(), set->end());
  for (int s : *set) (*mark)[s] = stamp;
  while (!stack.empty()) {
    const int s = stack.back();
    stack.pop_back();
    for (int t : nfa.eps[s]) {
      if ((*mark)[t] == stamp) continue;
      (*mark)[t] = stamp;
      set->push_back(t);
      stack.push_back(t);
    }
  }
  std::sort(set->begin(), set->end());
}

}  // namespace

Result<ByteDfa> CompileRegex(std::string_view pattern, int max_states) {
  Parser parser(pattern);
  GYRE_ASSIGN_OR_RETURN(int root, parser.Parse());
  Nfa nfa;
  const int start = nfa.NewState();
  nfa.accept = nfa.Build(parser.nodes(), root, start);
  if (nfa.too_big) return Status::InvalidArgument("regex: the pattern is too large (more than " +
                                                  std::to_string(kMaxNfaStates) + " automaton states before determinisation)");
  // Byte classes: bytes that every set treats alike.
  std::vector<uint64_t> sig(256, 0);
  for (size_t k = 0; k < nfa.sets.size(); ++k)
    for (int b = 0; b < 256; ++b)
      if (nfa.sets[k][b]) sig[b] = (sig[b] ^ (k + 1)) * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
  std::map<uint64_t, int> class_of_sig;
  std::vector<int> byte_class(256);
  std::vector<int> rep;  // a byte of each class
  for (int b = 0; b < 256; ++b) {
    auto [it, fresh] = class_of_sig.emplace(sig[b], static_cast<int>(rep.size()));
    if (fresh) rep.push_back(b);
    byte_class[b] = it->second;
  }
  std::vector<uint32_t> mark(nfa.eps.size(), 0);
  uint32_t stamp = 0;
  std::map<std::vector<int>, int> ids;
  std::vector<std::vector<int>> states;
  std::vector<int32_t> next;  // [states * classes]
  const size_t C = rep.size();
  std::vector<int> init = {start};
  Closure(nfa, &init, &mark, ++stamp);
  ids.emplace(init, 0);
  states.push_back(init);
  for (size_t d = 0; d < states.size(); ++d) {
    next.resize((d + 1) * C, ByteDfa::kDead);
    for (size_t c = 0; c < C; ++c) {
      std::vector<int> to;
      ++stamp;
      for (int s : states[d]) {
        const auto [set, target] = nfa.edge[s];
        if (set >= 0 && nfa.sets[set][rep[c]] && mark[target] != stamp) {
          mark[target] = stamp;
          to.push_back(target);
        }
      }
      if (to.empty()) continue;
      Closure(nfa, &to, &mark, ++stamp);
      auto [it, fresh] = ids.emplace(to, static_cast<int>(states.size()));
      if (fresh) {
        if (static_cast<int>(states.size()) >= max_states)
          return Status::InvalidArgument("regex: the automaton would need more than " + std::to_string(max_states) +
                                         " states (simplify the pattern or the schema)");
        states.push_back(std::move(to));
      }
      next[d * C + c] = it->second;
    }
  }
  // Trim: keep the states from which an accepting state is reachable.
  const size_t S = states.size();
  std::vector<uint8_t> live(S, 0);
  for (size_t d = 0; d < S; ++d) live[d] = std::binary_search(states[d].begin(), states[d].end(), nfa.accept);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t d = 0; d < S; ++d) {
      if (live[d]) continue;
      for (size_t c = 0; c < C; ++c) {
        const int32_t t = next[d * C + c];
        if (t != ByteDfa::kDead && live[t]) {
          live[d] = 1;
          changed = true;
          break;
        }
      }
    }
  }
  if (!live[0]) return Status::InvalidArgument("regex: the pattern matches no string");
  std::vector<int32_t> renum(S, ByteDfa::kDead);
  int32_t n = 0;
  for (size_t d = 0; d < S; ++d)
    if (live[d]) renum[d] = n++;
  std::vector<int32_t> out(static_cast<size_t>(n) * 256, ByteDfa::kDead);
  std::vector<uint8_t> acc(n, 0);
  for (size_t d = 0; d < S; ++d) {
    if (!live[d]) continue;
    acc[renum[d]] = std::binary_search(states[d].begin(), states[d].end(), nfa.accept);
    for (int b = 0; b < 256; ++b) {
      const int32_t t = next[d * C + byte_class[b]];
      out[static_cast<size_t>(renum[d]) * 256 + b] = t == ByteDfa::kDead ? ByteDfa::kDead : renum[t];
    }
  }
  return ByteDfa(std::move(out), std::move(acc));
}

std::string RegexQuote(std::string_view text) {
  std::string o;
  for (char c : text) {
    if (std::string_view("\\.^$|?*+()[]{}/-").find(c) != std::string_view::npos) {
      o += '\\';
      o += c;
    } else if (c == '\n') {
      o += "\\n";
    } else if (c == '\r') {
      o += "\\r";
    } else if (c == '\t') {
      o += "\\t";
    } else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7F) {
      static const char* kHex = "0123456789abcdef";
      o += "\\x";
      o += kHex[(c >> 4) & 0xF];
      o += kHex[c & 0xF];
    } else {
      o += c;
    }
  }
  return o;
}

}  // namespace gyre::structured
