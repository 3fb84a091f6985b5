// Chat template lexing (jinja.h): the template cut into text and tags with jinja2's whitespace
// rules under trim_blocks and lstrip_blocks (as transformers compiles chat templates), and a tag's
// expression cut into tokens.
#include <cctype>
#include <string>

#include "hp/core/error.h"
#include "hp/data/jinja_ast.h"

namespace hp::data::jinja::detail {

namespace {

int line_at(std::string_view s, size_t pos) {
  int line = 1;
  for (size_t i = 0; i < pos && i < s.size(); ++i) line += s[i] == '\n';
  return line;
}

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

}  // namespace

// Splits the template into text and tags and applies the whitespace rules.
std::vector<Piece> lex(std::string_view s, const std::string& name) {
  std::vector<Piece> out;
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t tag = s.find('{', pos);
    while (tag != std::string_view::npos && tag + 1 < s.size() && s[tag + 1] != '{' &&
           s[tag + 1] != '%' && s[tag + 1] != '#')
      tag = s.find('{', tag + 1);
    if (tag != std::string_view::npos && tag + 1 >= s.size()) tag = std::string_view::npos;
    const size_t text_end = tag == std::string_view::npos ? s.size() : tag;
    if (text_end > pos) {
      Piece t;
      t.src = std::string(s.substr(pos, text_end - pos));
      t.begin = pos;
      t.line = line_at(s, pos);
      out.push_back(std::move(t));
    }
    if (tag == std::string_view::npos) break;
    Piece p;
    p.line = line_at(s, tag);
    const char open = s[tag + 1];
    p.kind = open == '{' ? Piece::Kind::var : open == '%' ? Piece::Kind::block : Piece::Kind::comment;
    size_t i = tag + 2;
    if (i < s.size() && s[i] == '-') p.strip_before = true, ++i;
    else if (i < s.size() && s[i] == '+') p.keep_before = true, ++i;
    const char close = p.kind == Piece::Kind::var ? '}' : p.kind == Piece::Kind::block ? '%' : '#';
    size_t end = std::string_view::npos;
    char quote = 0;
    for (size_t j = i; j + 1 < s.size(); ++j) {
      const char c = s[j];
      if (quote) {
        if (c == '\\') ++j;
        else if (c == quote) quote = 0;
      } else if ((c == '\'' || c == '"') && p.kind != Piece::Kind::comment) {
        quote = c;
      } else if (c == close && s[j + 1] == '}') {
        end = j;
        break;
      }
    }
    if (end == std::string_view::npos)
      HP_THROW(ValueError, "chat", name, ":", p.line, ": unclosed '{", open, "' tag");
    size_t src_end = end;
    if (src_end > i && s[src_end - 1] == '-') p.strip_after = true, --src_end;
    else if (src_end > i && s[src_end - 1] == '+') --src_end;
    p.src = std::string(s.substr(i, src_end - i));
    out.push_back(std::move(p));
    pos = end + 2;
  }
  // Whitespace: `-` strips all of it on that side; a block or comment tag drops the newline after
  // it (trim_blocks) and the spaces and tabs before it on its line (lstrip_blocks).
  for (size_t k = 0; k < out.size(); ++k) {
    Piece& t = out[k];
    if (t.kind != Piece::Kind::text) continue;
    const Piece* prev = k > 0 ? &out[k - 1] : nullptr;
    const Piece* next = k + 1 < out.size() ? &out[k + 1] : nullptr;
    size_t b = 0, e = t.src.size();
    if (prev && prev->strip_after) {
      while (b < e && is_ws(t.src[b])) ++b;
    } else if (prev && prev->kind != Piece::Kind::var) {
      if (t.src.compare(0, 1, "\n") == 0) b = 1;
      else if (t.src.compare(0, 2, "\r\n") == 0) b = 2;
    }
    if (next && next->strip_before) {
      while (e > b && is_ws(t.src[e - 1])) --e;
    } else if (next && next->kind != Piece::Kind::var && !next->keep_before) {
      size_t ls = e;
      while (ls > b && (t.src[ls - 1] == ' ' || t.src[ls - 1] == '\t')) --ls;
      // Only when nothing but spaces and tabs precedes the tag on its line.
      const bool at_line_start =
          ls > b ? t.src[ls - 1] == '\n' : (b > 0 ? t.src[b - 1] == '\n' : t.begin == 0);
      if (at_line_start) e = ls;
    }
    t.src = t.src.substr(b, e - b);
  }
  return out;
}

std::vector<Token> tokenize(const std::string& s, int line, const std::string& name) {
std::vector<Token> toks_;
auto fail = [&](const std::string& what) { HP_THROW(ValueError, "chat", name, ":", line, ": ", what); };
  size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (is_ws(c)) {
      ++i;
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i;
      while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      toks_.push_back({Token::Kind::name, s.substr(i, j - i)});
      i = j;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t j = i;
      bool real = false;
      while (j < s.size() && (std::isdigit(static_cast<unsigned char>(s[j])) || s[j] == '_' ||
                              (s[j] == '.' && !real && j + 1 < s.size() &&
                               std::isdigit(static_cast<unsigned char>(s[j + 1])))))
        real |= s[j++] == '.';
      std::string num;
      for (size_t k = i; k < j; ++k)
        if (s[k] != '_') num += s[k];
      toks_.push_back({real ? Token::Kind::number : Token::Kind::integer, num});
      i = j;
    } else if (c == '\'' || c == '"') {
      std::string v;
      size_t j = i + 1;
      for (; j < s.size() && s[j] != c; ++j) {
        if (s[j] != '\\' || j + 1 >= s.size()) {
          v += s[j];
          continue;
        }
        const char e = s[++j];
        switch (e) {
          case 'n': v += '\n'; break;
          case 't': v += '\t'; break;
          case 'r': v += '\r'; break;
          case '0': v += '\0'; break;
          case '\\': case '\'': case '"': v += e; break;
          default: v += '\\'; v += e;  // Python keeps unknown escapes as written
        }
      }
      if (j >= s.size()) fail("unterminated string");
      toks_.push_back({Token::Kind::string, v});
      i = j + 1;
    } else {
      static const char* kOps[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%",
                                   "~", "<", ">", "(", ")", "[", "]", "{", "}", ",", ".", ":",
                                   "|", "="};
      bool found = false;
      for (const char* o : kOps) {
        const size_t n = std::char_traits<char>::length(o);
        if (s.compare(i, n, o) == 0) {
          toks_.push_back({Token::Kind::op, o});
          i += n;
          found = true;
          break;
        }
      }
      if (!found) fail(std::string("unexpected character '") + c + "'");
    }
  }
  toks_.push_back({Token::Kind::end, "end of tag"});
return toks_;
}

}  // namespace hp::data::jinja::detail
