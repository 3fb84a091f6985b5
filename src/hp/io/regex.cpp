// Parser (pattern → AST → linked node program) and backtracking matcher; see regex.h.
#include "hp/io/regex.h"

#include <algorithm>
#include <bitset>
#include <cctype>
#include <limits>

#include "hp/core/error.h"
#include "hp/io/unicode.h"

namespace hp::io::detail {

namespace {

constexpr uint32_t kUnbounded = std::numeric_limits<uint32_t>::max();
// Counted repeats of groups are unrolled; more copies than this is not a tokenizer pattern.
constexpr uint32_t kMaxUnroll = 1000;

// A set of code points: the union of `ranges`, the property bits `props` and the `subs` sets,
// intersected with every `ands` set, then complemented when `negate`.
struct CharSet {
  std::vector<std::pair<char32_t, char32_t>> ranges;
  uint16_t props = 0;
  std::vector<CharSet> subs, ands;
  bool negate = false;
  std::bitset<128> ascii;  // contains() for ASCII, filled by finalize()

  bool slow_contains(char32_t c) const {
    bool in = (props && (char_props(c) & props));
    for (size_t i = 0; !in && i < ranges.size(); ++i)
      in = c >= ranges[i].first && c <= ranges[i].second;
    for (size_t i = 0; !in && i < subs.size(); ++i) in = subs[i].contains(c);
    for (size_t i = 0; in && i < ands.size(); ++i) in = ands[i].contains(c);
    return in != negate;
  }
  bool contains(char32_t c) const { return c < 128 ? ascii[c] : slow_contains(c); }
  void finalize() {
    for (CharSet& s : subs) s.finalize();
    for (CharSet& s : ands) s.finalize();
    for (char32_t c = 0; c < 128; ++c) ascii[c] = slow_contains(c);
  }
};

struct Ast {
  enum Kind { kSeq, kAlt, kSet, kRepeat, kLook, kBegin, kEnd } kind = kSeq;
  Ast() = default;
  explicit Ast(Kind k) : kind(k) {}
  std::vector<Ast> kids;
  CharSet set;
  uint32_t min = 0, max = 0;
  bool greedy = true, negate = false;
};

}  // namespace

struct RegexNode {
  enum Kind : uint8_t { kSet, kRepeatSet, kAlt, kLoop, kLook, kBegin, kEnd, kAccept, kLookAccept };
  Kind kind;
  explicit RegexNode(Kind k) : kind(k) {}
  bool greedy = true, negate = false;
  int next = -1, body = -1, set = -1;
  uint32_t min = 0, max = 0;
  std::vector<int> alts;
  size_t loop_slot = 0;
};

struct RegexProgram {
  std::string pattern;
  std::vector<RegexNode> nodes;
  std::vector<CharSet> sets;
  int start = 0;
  size_t loops = 0;
};

namespace {

class Parser {
 public:
  explicit Parser(std::string_view pattern) : pattern_(pattern) {
    if (size_t bad = decode_utf8(pattern, cps_); bad != std::string_view::npos)
      HP_THROW(ValueError, "regex", "pattern is not valid UTF-8 at byte ", bad);
  }

  Ast parse() {
    Ast a = parse_alt();
    if (pos_ < cps_.size()) fail("unmatched ')'");
    return a;
  }

 private:
  [[noreturn]] void fail(std::string_view what) const {
    HP_THROW(ValueError, "regex", what, " at offset ", pos_, " of \"", pattern_, "\"");
  }
  bool at_end() const { return pos_ >= cps_.size(); }
  char32_t peek(size_t k = 0) const { return pos_ + k < cps_.size() ? cps_[pos_ + k] : 0; }
  bool eat(char32_t c) {
    if (peek() != c || at_end()) return false;
    ++pos_;
    return true;
  }
  char32_t next() {
    if (at_end()) fail("unexpected end of pattern");
    return cps_[pos_++];
  }

  Ast parse_alt() {
    Ast alt{Ast::kAlt};
    alt.kids.push_back(parse_seq());
    while (eat('|')) alt.kids.push_back(parse_seq());
    return alt.kids.size() == 1 ? std::move(alt.kids[0]) : alt;
  }

  Ast parse_seq() {
    Ast seq{Ast::kSeq};
    while (!at_end() && peek() != '|' && peek() != ')') {
      Ast atom;
      if (!parse_atom(atom)) continue;  // an inline flag group
      parse_quantifier(atom);
      seq.kids.push_back(std::move(atom));
    }
    return seq;
  }

  // False for an atom that matches nothing (an inline flag change).
  bool parse_atom(Ast& out) {
    char32_t c = next();
    switch (c) {
      case '(':
        return parse_group(out);
      case '[':
        out = Ast{Ast::kSet};
        out.set = parse_class();
        return true;
      case '.':
        out = Ast{Ast::kSet};
        out.set.ranges.push_back({'\n', '\n'});
        out.set.negate = true;
        return true;
      case '^':
      case '$':
        fail("line anchors (^, $) are not supported (use \\A, \\z)");
      case '*':
      case '+':
      case '?':
        fail("nothing to repeat");
      case '\\': {
        char32_t e = peek();
        if (e == 'A' || e == 'z' || e == 'Z') {
          ++pos_;
          out = Ast{e == 'A' ? Ast::kBegin : Ast::kEnd};
          return true;
        }
        out = Ast{Ast::kSet};
        if (!parse_class_escape(out.set)) add_literal(out.set, parse_char_escape());
        return true;
      }
      default:
        out = Ast{Ast::kSet};
        add_literal(out.set, c);
        return true;
    }
  }

  bool parse_group(Ast& out) {
    bool saved_icase = icase_;
    bool look = false, negate = false;
    if (eat('?')) {
      char32_t c = next();
      if (c == ':') {
      } else if (c == '=' || c == '!') {
        look = true;
        negate = c == '!';
      } else if (c == '<' && (peek() == '=' || peek() == '!')) {
        fail("look-behind is not supported");
      } else if (c == 'P' || c == '<') {
        if (c == 'P' && !eat('<')) fail("unsupported group");
        while (!at_end() && peek() != '>') ++pos_;  // named group: the name is not needed
        if (!eat('>')) fail("unterminated group name");
      } else if (c == 'i' || c == '-') {
        // (?i) (?-i) (?i:...) (?-i:...)
        icase_ = c == 'i';
        if (c == '-' && !eat('i')) fail("unsupported inline flag (only i)");
        if (eat(')')) return false;  // (?i): applies to the rest of the enclosing group
        if (!eat(':')) fail("unsupported inline flag (only i)");
      } else {
        fail("unsupported group syntax");
      }
    }
    Ast inner = parse_alt();
    if (!eat(')')) fail("missing ')'");
    icase_ = saved_icase;
    if (look) {
      out = Ast{Ast::kLook};
      out.negate = negate;
      out.kids.push_back(std::move(inner));
    } else {
      out = std::move(inner);
    }
    return true;
  }

  void parse_quantifier(Ast& atom) {
    uint32_t lo = 0, hi = kUnbounded;
    char32_t c = peek();
    if (c == '*' || c == '+' || c == '?') {
      ++pos_;
      lo = c == '+' ? 1 : 0;
      hi = c == '?' ? 1 : kUnbounded;
    } else if (c != '{' || !parse_braces(lo, hi)) {
      return;
    }
    if (atom.kind == Ast::kLook || atom.kind == Ast::kBegin || atom.kind == Ast::kEnd)
      fail("quantifier on an assertion");
    bool greedy = !eat('?');
    if (peek() == '+') fail("possessive quantifiers are not supported");
    if (peek() == '*' || peek() == '+' || (peek() == '?' && greedy)) fail("nested quantifier");
    Ast rep{Ast::kRepeat};
    rep.min = lo, rep.max = hi, rep.greedy = greedy;
    rep.kids.push_back(std::move(atom));
    atom = std::move(rep);
  }

  // {n} {n,} {n,m} at pos_, consumed (a '{' not of that form is a literal, as in Oniguruma and
  // Rust, and consumes nothing).
  bool parse_braces(uint32_t& lo, uint32_t& hi) {
    size_t p = pos_ + 1;
    auto number = [&](uint32_t& v) {
      size_t start = p;
      uint64_t x = 0;
      while (p < cps_.size() && cps_[p] >= '0' && cps_[p] <= '9' && x < kUnbounded)
        x = x * 10 + (cps_[p++] - '0');
      v = static_cast<uint32_t>(std::min<uint64_t>(x, kUnbounded - 1));
      return p > start;
    };
    if (!number(lo)) return false;
    hi = lo;
    if (p < cps_.size() && cps_[p] == ',') {
      ++p;
      if (!number(hi)) hi = kUnbounded;
    }
    if (p >= cps_.size() || cps_[p] != '}') return false;
    pos_ = p + 1;
    if (hi < lo) fail("repeat range {n,m} with m < n");
    return true;
  }

  // After '[': the class up to its ']'.
  CharSet parse_class() {
    bool negate = eat('^');
    CharSet set = parse_class_items(true);
    if (!negate) return set;
    CharSet outer;  // the complement applies after any && intersection
    outer.subs.push_back(std::move(set));
    outer.negate = true;
    return outer;
  }

  // Class items up to this class's ']', which is consumed; "&&" intersects the items before it
  // with the rest of the class. A ']' first in the class is a literal.
  CharSet parse_class_items(bool first) {
    CharSet set;
    for (;;) {
      if (at_end()) fail("missing ']'");
      char32_t c = next();
      if (c == ']' && !first) return set;
      first = false;
      if (c == '&' && peek() == '&') {
        ++pos_;
        CharSet both;
        both.subs.push_back(std::move(set));
        both.ands.push_back(parse_class_items(false));
        return both;
      }
      if (c == '[') {
        set.subs.push_back(parse_class());
        continue;
      }
      char32_t lo = c;
      if (c == '\\') {
        if (parse_class_escape(set)) continue;
        lo = parse_char_escape();
      }
      if (peek() == '-' && peek(1) != ']' && pos_ + 1 < cps_.size()) {
        ++pos_;
        char32_t hi = next();
        if (hi == '\\') hi = parse_char_escape();
        if (hi < lo) fail("class range out of order");
        add_range(set, lo, hi);
      } else {
        add_literal(set, lo);
      }
    }
  }

  // After '\': \s \S \d \D \w \W \p{..} \P{..} added to `set`; false (nothing consumed) for any
  // other escape.
  bool parse_class_escape(CharSet& set) {
    char32_t e = peek();
    CharSet sub;
    switch (e) {
      case 's':
      case 'S':
        sub.props = kPropSpace;
        break;
      case 'd':
      case 'D':
        sub.props = kPropNd;
        break;
      case 'w':
      case 'W':
        // Oniguruma's \w as probed in the tokenizers package: Alphabetic (L, Nl, the circled
        // letters), M, Nd, Pc, and the Latin-1 superscripts and fractions.
        sub.props = kPropL | kPropM | kPropNd | kPropNl | kPropPc | kPropAlphaSym;
        sub.ranges = {{0xB2, 0xB3}, {0xB9, 0xB9}, {0xBC, 0xBE}};
        break;
      case 'p':
      case 'P':
        ++pos_;
        sub = parse_property();
        sub.negate = sub.negate != (e == 'P');
        set.subs.push_back(std::move(sub));
        return true;
      default:
        return false;
    }
    ++pos_;
    sub.negate = e == 'S' || e == 'D' || e == 'W';
    set.subs.push_back(std::move(sub));
    return true;
  }

  // After \p: {Name}, {^Name} or a one-letter name.
  CharSet parse_property() {
    std::string name;
    CharSet set;
    if (eat('{')) {
      if (eat('^')) set.negate = true;
      while (!at_end() && peek() != '}') {
        char32_t c = next();
        if (c != ' ' && c != '_' && c != '-') name += static_cast<char>(c < 128 ? c : '?');
      }
      if (!eat('}')) fail("missing '}' after \\p{");
    } else {
      name = static_cast<char>(next());
    }
    struct Named {
      const char* short_name;
      const char* long_name;
      uint16_t props;
    };
    static const Named kNames[] = {
        {"L", "Letter", kPropL},
        {"Lu", "UppercaseLetter", kPropLu},
        {"Ll", "LowercaseLetter", kPropLl},
        {"Lt", "TitlecaseLetter", kPropLt},
        {"Lm", "ModifierLetter", kPropLm},
        {"Lo", "OtherLetter", kPropLo},
        {"M", "Mark", kPropM},
        {"N", "Number", kPropN},
        {"Nd", "DecimalNumber", kPropNd},
        {"Nl", "LetterNumber", kPropNl},
        {"No", "OtherNumber", kPropNo},
        {"P", "Punctuation", kPropP},
        {"Pc", "ConnectorPunctuation", kPropPc},
        {"S", "Symbol", kPropS},
        {"Han", "Hani", kPropHan},
    };
    for (const Named& n : kNames) {
      if (name == n.short_name || name == n.long_name) {
        set.props = n.props;
        return set;
      }
    }
    fail("unsupported property \\p{" + name + "}");
  }

  char32_t hex_digits(size_t min_len, size_t max_len) {
    uint32_t v = 0;
    size_t k = 0;
    for (; k < max_len && std::isxdigit(static_cast<int>(peek() < 128 ? peek() : 0)); ++k) {
      char32_t d = next();
      v = v * 16 + static_cast<uint32_t>(d <= '9' ? d - '0' : (d | 0x20) - 'a' + 10);
    }
    if (k < min_len || v > 0x10FFFF) fail("bad hex escape");
    return v;
  }

  // After '\': a character escape, consumed.
  char32_t parse_char_escape() {
    char32_t e = next();
    switch (e) {
      case 'n':
        return '\n';
      case 'r':
        return '\r';
      case 't':
        return '\t';
      case 'f':
        return '\f';
      case 'v':
        return '\v';
      case 'a':
        return 7;
      case 'e':
        return 27;
      case '0':
        return 0;
      case 'u':
        return hex_digits(4, 4);
      case 'x':
        if (eat('{')) {
          char32_t v = hex_digits(1, 8);
          if (!eat('}')) fail("missing '}' in \\x{...}");
          return v;
        }
        return hex_digits(1, 2);
      default:
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9'))
          fail(std::string("unsupported escape \\") + static_cast<char>(e));
        return e;  // escaped punctuation or a non-ASCII character stands for itself
    }
  }

  // Simple case folding of the characters the tokenizer patterns spell under (?i): ASCII letters,
  // plus the two non-ASCII characters that fold to them (U+017F long s, U+212A Kelvin sign).
  void add_literal(CharSet& set, char32_t c) { add_range(set, c, c); }
  void add_range(CharSet& set, char32_t lo, char32_t hi) {
    set.ranges.push_back({lo, hi});
    if (!icase_) return;
    for (char32_t a : {char32_t('a'), char32_t('A')}) {
      char32_t l = std::max(lo, a), h = std::min(hi, char32_t(a + 25));
      if (l <= h) set.ranges.push_back({l ^ 0x20, h ^ 0x20});
    }
    auto covers = [&](char32_t x) {
      return (lo <= x && x <= hi) || (lo <= (x ^ 0x20) && (x ^ 0x20) <= hi);
    };
    if (covers('s')) set.ranges.push_back({0x17F, 0x17F});
    if (covers('k')) set.ranges.push_back({0x212A, 0x212A});
  }

  std::string_view pattern_;
  std::vector<char32_t> cps_;
  size_t pos_ = 0;
  bool icase_ = false;
};

// AST → nodes; each node continues at `next` on success.
class Emitter {
 public:
  explicit Emitter(RegexProgram& p) : p_(p) {}

  int add(RegexNode n) {
    p_.nodes.push_back(std::move(n));
    return static_cast<int>(p_.nodes.size()) - 1;
  }

  int emit(Ast& a, int next) {
    switch (a.kind) {
      case Ast::kSet: {
        RegexNode n{RegexNode::kSet};
        n.set = add_set(a.set);
        n.next = next;
        return add(std::move(n));
      }
      case Ast::kSeq:
        for (size_t i = a.kids.size(); i-- > 0;) next = emit(a.kids[i], next);
        return next;
      case Ast::kAlt: {
        RegexNode n{RegexNode::kAlt};
        for (Ast& k : a.kids) n.alts.push_back(emit(k, next));
        return add(std::move(n));
      }
      case Ast::kLook: {
        int accept = add(RegexNode{RegexNode::kLookAccept});
        RegexNode n{RegexNode::kLook};
        n.negate = a.negate;
        n.body = emit(a.kids[0], accept);
        n.next = next;
        return add(std::move(n));
      }
      case Ast::kBegin:
      case Ast::kEnd: {
        RegexNode n{a.kind == Ast::kBegin ? RegexNode::kBegin : RegexNode::kEnd};
        n.next = next;
        return add(std::move(n));
      }
      case Ast::kRepeat:
        return emit_repeat(a, next);
    }
    return next;
  }

 private:
  // Copies: a repeated group emits its body (and so its sets) more than once.
  int add_set(const CharSet& s) {
    p_.sets.push_back(s);
    p_.sets.back().finalize();
    return static_cast<int>(p_.sets.size()) - 1;
  }

  int emit_repeat(Ast& a, int next) {
    Ast& body = a.kids[0];
    if (body.kind == Ast::kSet) {
      RegexNode n{RegexNode::kRepeatSet};
      n.set = add_set(body.set);
      n.min = a.min, n.max = a.max, n.greedy = a.greedy, n.next = next;
      return add(std::move(n));
    }
    if (a.min > kMaxUnroll || (a.max != kUnbounded && a.max - a.min > kMaxUnroll))
      HP_THROW(ValueError, "regex", "repeat count over ", kMaxUnroll, " in \"", p_.pattern, "\"");
    int tail;
    if (a.max == kUnbounded) {
      // loop: body then back here, or leave.
      int loop = add(RegexNode{RegexNode::kLoop});
      int body_start = emit(body, loop);
      RegexNode& n = p_.nodes[static_cast<size_t>(loop)];
      n.body = body_start, n.next = next, n.greedy = a.greedy, n.loop_slot = p_.loops++;
      tail = loop;
    } else {
      // x{0,k} as nested optionals (x(x(x)?)?)?.
      tail = next;
      for (uint32_t i = a.min; i < a.max; ++i) {
        int taken = emit(body, tail);
        RegexNode n{RegexNode::kAlt};
        n.alts = a.greedy ? std::vector<int>{taken, next} : std::vector<int>{next, taken};
        tail = add(std::move(n));
      }
    }
    for (uint32_t i = 0; i < a.min; ++i) tail = emit(body, tail);
    return tail;
  }

  RegexProgram& p_;
};

class Matcher {
 public:
  Matcher(const RegexProgram& p, const char32_t* s, size_t n)
      : p_(p), s_(s), n_(n), loop_pos_(p.loops, std::string::npos) {}

  // Match starting exactly at `pos`; on success end() is where it ended.
  bool match_at(size_t pos) { return run(p_.start, pos); }
  size_t end() const { return end_; }

 private:
  bool run(int ni, size_t pos) {
    for (;;) {
      const RegexNode& nd = p_.nodes[static_cast<size_t>(ni)];
      switch (nd.kind) {
        case RegexNode::kAccept:
          end_ = pos;
          return true;
        case RegexNode::kLookAccept:
          return true;
        case RegexNode::kSet:
          if (pos >= n_ || !p_.sets[static_cast<size_t>(nd.set)].contains(s_[pos])) return false;
          ++pos;
          ni = nd.next;
          continue;
        case RegexNode::kRepeatSet: {
          const CharSet& cs = p_.sets[static_cast<size_t>(nd.set)];
          size_t limit = std::min<size_t>(nd.max, n_ - pos);
          if (nd.greedy) {
            size_t k = 0;
            while (k < limit && cs.contains(s_[pos + k])) ++k;
            if (k < nd.min) return false;
            for (size_t j = k; j > nd.min; --j)
              if (run(nd.next, pos + j)) return true;
            pos += nd.min;
            ni = nd.next;
            continue;
          }
          for (size_t j = 0;; ++j) {
            if (j >= nd.min && run(nd.next, pos + j)) return true;
            if (j >= limit || !cs.contains(s_[pos + j])) return false;
          }
        }
        case RegexNode::kAlt:
          for (size_t i = 0; i + 1 < nd.alts.size(); ++i)
            if (run(nd.alts[i], pos)) return true;
          ni = nd.alts.back();
          continue;
        case RegexNode::kLoop: {
          // An iteration that consumed nothing ends the loop (no infinite empty repetition).
          size_t saved = loop_pos_[nd.loop_slot];
          if (saved == pos) {
            ni = nd.next;
            continue;
          }
          loop_pos_[nd.loop_slot] = pos;
          bool ok = nd.greedy ? run(nd.body, pos) || run(nd.next, pos)
                              : run(nd.next, pos) || run(nd.body, pos);
          loop_pos_[nd.loop_slot] = saved;
          return ok;
        }
        case RegexNode::kLook: {
          size_t saved_end = end_;
          bool found = run(nd.body, pos);
          end_ = saved_end;
          if (found == nd.negate) return false;
          ni = nd.next;
          continue;
        }
        case RegexNode::kBegin:
          if (pos != 0) return false;
          ni = nd.next;
          continue;
        case RegexNode::kEnd:
          if (pos != n_) return false;
          ni = nd.next;
          continue;
      }
    }
  }

  const RegexProgram& p_;
  const char32_t* s_;
  size_t n_;
  size_t end_ = 0;
  std::vector<size_t> loop_pos_;
};

}  // namespace

Regex::Regex(std::string_view pattern) {
  auto p = std::make_shared<RegexProgram>();
  p->pattern = std::string(pattern);
  Ast ast = Parser(pattern).parse();
  Emitter e(*p);
  int accept = e.add(RegexNode{RegexNode::kAccept});
  p->start = e.emit(ast, accept);
  prog_ = std::move(p);
}

const std::string& Regex::pattern() const {
  return prog_->pattern;
}

void Regex::find_all(const char32_t* cps, size_t n,
                     std::vector<std::pair<size_t, size_t>>& out) const {
  Matcher m(*prog_, cps, n);
  for (size_t pos = 0; pos < n;) {
    if (m.match_at(pos) && m.end() > pos) {
      out.emplace_back(pos, m.end());
      pos = m.end();
    } else {
      ++pos;
    }
  }
}

bool Regex::replace_all(std::string& text, std::string_view with) const {
  std::vector<char32_t> cps;
  std::vector<uint32_t> offsets;  // byte offset of each code point, and of the end
  decode_utf8(text, cps, &offsets);
  std::vector<std::pair<size_t, size_t>> matches;
  find_all(cps.data(), cps.size(), matches);
  if (matches.empty()) return false;
  std::string out;
  size_t done = 0;
  for (auto [b, e] : matches) {
    out.append(text, done, offsets[b] - done);
    out += with;
    done = offsets[e];
  }
  out.append(text, done);
  text = std::move(out);
  return true;
}

std::string regex_escape(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

}  // namespace hp::io::detail
