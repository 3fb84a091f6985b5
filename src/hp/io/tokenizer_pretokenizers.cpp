// tokenizer.json "pre_tokenizer": ByteLevel, Split, Digits, Metaspace, Whitespace,
// WhitespaceSplit, Punctuation, BertPreTokenizer and Sequence, as the `tokenizers` package runs
// them (NormalizedString::split with its five delimiter behaviours).
#include <functional>

#include "hp/core/error.h"
#include "hp/io/json.h"
#include "hp/io/tokenizer_impl.h"
#include "hp/io/unicode.h"

namespace hp::io::detail {

namespace {

enum class Behavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };

// [b, e) in code points of a piece; `match`: a delimiter.
struct Span {
  size_t b, e;
  bool match;
};

// The `tokenizers` SplitDelimiterBehavior applied to spans that cover the piece in order.
std::vector<Span> apply_behavior(const std::vector<Span>& in, Behavior behavior) {
  std::vector<Span> out;
  switch (behavior) {
    case Behavior::isolated:
      return in;
    case Behavior::removed:
      for (const Span& s : in)
        if (!s.match) out.push_back(s);
      return out;
    case Behavior::merged_with_previous: {
      bool prev_match = false;
      for (const Span& s : in) {
        if (s.match && !prev_match && !out.empty())
          out.back().e = s.e;
        else
          out.push_back({s.b, s.e, false});
        prev_match = s.match;
      }
      return out;
    }
    case Behavior::merged_with_next: {
      bool prev_match = false;
      for (size_t i = in.size(); i-- > 0;) {
        const Span& s = in[i];
        if (s.match && !prev_match && !out.empty())
          out.back().b = s.b;
        else
          out.push_back({s.b, s.e, false});
        prev_match = s.match;
      }
      return {out.rbegin(), out.rend()};
    }
    case Behavior::contiguous: {
      bool prev_match = false;
      for (const Span& s : in) {
        if (s.match == prev_match && !out.empty())
          out.back().e = s.e;
        else
          out.push_back({s.b, s.e, false});
        prev_match = s.match;
      }
      return out;
    }
  }
  return out;
}

Behavior load_behavior(const Json& node) {
  std::string b = node.as_string();
  if (b == "Removed") return Behavior::removed;
  if (b == "Isolated") return Behavior::isolated;
  if (b == "MergedWithPrevious") return Behavior::merged_with_previous;
  if (b == "MergedWithNext") return Behavior::merged_with_next;
  if (b == "Contiguous") return Behavior::contiguous;
  node.fail("unknown split behavior \"" + b +
            "\" (Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous)");
}

// Splits every piece: `find` lists the delimiter matches of a piece's code points.
using FindFn =
    std::function<void(const std::vector<char32_t>&, std::vector<std::pair<size_t, size_t>>&)>;

void split_pieces(std::vector<Piece>& pieces, const FindFn& find, Behavior behavior, bool invert) {
  std::vector<Piece> out;
  std::vector<char32_t> cps;
  std::vector<uint32_t> offsets;
  std::vector<std::pair<size_t, size_t>> matches;
  std::vector<Span> spans;
  for (Piece& p : pieces) {
    decode_utf8(p.text, cps, &offsets);
    matches.clear();
    find(cps, matches);
    spans.clear();
    size_t done = 0;
    for (auto [b, e] : matches) {
      if (done < b) spans.push_back({done, b, invert});
      spans.push_back({b, e, !invert});
      done = e;
    }
    if (done < cps.size()) spans.push_back({done, cps.size(), invert});
    for (const Span& s : apply_behavior(spans, behavior)) {
      if (s.b == s.e) continue;
      out.push_back(
          {p.text.substr(offsets[s.b], offsets[s.e] - offsets[s.b]), p.at_start && s.b == 0});
    }
  }
  pieces.swap(out);
}

// Each code point satisfying `pred` is one delimiter match.
FindFn char_matches(std::function<bool(char32_t)> pred) {
  return [pred = std::move(pred)](const std::vector<char32_t>& cps,
                                  std::vector<std::pair<size_t, size_t>>& out) {
    for (size_t i = 0; i < cps.size(); ++i)
      if (pred(cps[i])) out.emplace_back(i, i + 1);
  };
}

FindFn regex_matches(Regex re) {
  return [re = std::move(re)](const std::vector<char32_t>& cps,
                              std::vector<std::pair<size_t, size_t>>& out) {
    re.find_all(cps.data(), cps.size(), out);
  };
}

class SplitBy final : public PreTokenizer {
 public:
  SplitBy(FindFn find, Behavior behavior, bool invert)
      : find_(std::move(find)), behavior_(behavior), invert_(invert) {}
  void split(std::vector<Piece>& pieces) const override {
    split_pieces(pieces, find_, behavior_, invert_);
  }

 private:
  FindFn find_;
  Behavior behavior_;
  bool invert_;
};

constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class ByteLevel final : public PreTokenizer {
 public:
  ByteLevel(bool add_prefix_space, bool use_regex)
      : add_prefix_space_(add_prefix_space), use_regex_(use_regex) {}
  void split(std::vector<Piece>& pieces) const override {
    if (add_prefix_space_)
      for (Piece& p : pieces)
        if (p.text.empty() || p.text[0] != ' ') p.text.insert(0, 1, ' ');
    if (use_regex_) split_pieces(pieces, gpt2_, Behavior::isolated, false);
    std::string mapped;
    for (Piece& p : pieces) {
      mapped.clear();
      append_byte_level(mapped, p.text);
      p.text.swap(mapped);
    }
  }

 private:
  bool add_prefix_space_, use_regex_;
  FindFn gpt2_ = regex_matches(Regex(kGpt2Pattern));
};

// Spaces become `replacement` (default "▁"), which is prepended per prepend_scheme; with `split`,
// each replacement starts a new word.
class Metaspace final : public PreTokenizer {
 public:
  enum class Prepend { always, first, never };
  Metaspace(char32_t replacement, Prepend prepend, bool split)
      : replacement_(replacement), prepend_(prepend), split_(split) {
    append_utf8(rep_, replacement);
  }
  void split(std::vector<Piece>& pieces) const override {
    for (Piece& p : pieces) {
      std::string t;
      for (char c : p.text) {
        if (c == ' ')
          t += rep_;
        else
          t += c;
      }
      bool starts = t.compare(0, rep_.size(), rep_) == 0;
      if (!starts && (prepend_ == Prepend::always || (prepend_ == Prepend::first && p.at_start)))
        t.insert(0, rep_);
      p.text = std::move(t);
    }
    if (split_) {
      char32_t r = replacement_;
      split_pieces(pieces, char_matches([r](char32_t c) { return c == r; }),
                   Behavior::merged_with_next, false);
    }
  }

 private:
  char32_t replacement_;
  Prepend prepend_;
  bool split_;
  std::string rep_;
};

class Sequence final : public PreTokenizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<PreTokenizer>> steps) : steps_(std::move(steps)) {}
  void split(std::vector<Piece>& pieces) const override {
    for (const auto& s : steps_) s->split(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

bool is_punctuation(char32_t c) {
  return (c < 128 && std::ispunct(static_cast<int>(c))) || (char_props(c) & kPropP);
}

}  // namespace

std::unique_ptr<PreTokenizer> make_regex_split(const std::string& pattern) {
  // Only the matches are kept, as tiktoken's find_iter loop does.
  return std::make_unique<SplitBy>(regex_matches(Regex(pattern)), Behavior::removed, true);
}

std::unique_ptr<PreTokenizer> load_pre_tokenizer(const Json& node) {
  if (node.is_null()) return nullptr;
  std::string type = node.get_string("type");
  if (type == "ByteLevel")
    return std::make_unique<ByteLevel>(node.get_bool_or("add_prefix_space", true),
                                       node.get_bool_or("use_regex", true));
  if (type == "Split")
    return std::make_unique<SplitBy>(regex_matches(load_pattern(node.at("pattern"))),
                                     load_behavior(node.at("behavior")),
                                     node.get_bool_or("invert", false));
  if (type == "Digits") {
    auto digit = char_matches([](char32_t c) { return is_number(c); });
    return std::make_unique<SplitBy>(
        digit,
        node.get_bool_or("individual_digits", false) ? Behavior::isolated : Behavior::contiguous,
        false);
  }
  if (type == "Metaspace") {
    std::string rep = node.get_string_or("replacement", "\xE2\x96\x81");
    std::vector<char32_t> cps;
    decode_utf8(rep, cps);
    if (cps.size() != 1)
      node.at("replacement")
          .fail("Metaspace replacement must be one character, got \"" + rep + "\"");
    Metaspace::Prepend prepend = node.get_bool_or("add_prefix_space", true)
                                     ? Metaspace::Prepend::always
                                     : Metaspace::Prepend::never;
    if (auto s = node.find("prepend_scheme"); s && !s->is_null()) {
      std::string scheme = s->as_string();
      if (scheme == "always")
        prepend = Metaspace::Prepend::always;
      else if (scheme == "first")
        prepend = Metaspace::Prepend::first;
      else if (scheme == "never")
        prepend = Metaspace::Prepend::never;
      else
        s->fail("unknown prepend_scheme \"" + scheme + "\" (always, first, never)");
    }
    return std::make_unique<Metaspace>(cps[0], prepend, node.get_bool_or("split", true));
  }
  if (type == "Whitespace")
    return std::make_unique<SplitBy>(regex_matches(Regex(R"(\w+|[^\w\s]+)")), Behavior::removed,
                                     true);
  if (type == "WhitespaceSplit")
    return std::make_unique<SplitBy>(char_matches(is_space), Behavior::removed, false);
  if (type == "Punctuation") {
    Behavior b = Behavior::isolated;
    if (auto n = node.find("behavior"); n && !n->is_null()) b = load_behavior(*n);
    return std::make_unique<SplitBy>(char_matches(is_punctuation), b, false);
  }
  if (type == "BertPreTokenizer") {
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    steps.push_back(std::make_unique<SplitBy>(char_matches(is_space), Behavior::removed, false));
    steps.push_back(
        std::make_unique<SplitBy>(char_matches(is_punctuation), Behavior::isolated, false));
    return std::make_unique<Sequence>(std::move(steps));
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    for (const Json& n : node.at("pretokenizers").elements())
      if (auto step = load_pre_tokenizer(n)) steps.push_back(std::move(step));
    return std::make_unique<Sequence>(std::move(steps));
  }
  node.at("type").fail("unsupported pre_tokenizer type \"" + type +
                       "\" (hp implements ByteLevel, Split, Digits, Metaspace, Whitespace, "
                       "WhitespaceSplit, Punctuation, BertPreTokenizer, Sequence)");
}

}  // namespace hp::io::detail
