#include "hp/io/bpe.h"

#include <algorithm>
#include <queue>

#include "hp/core/error.h"

namespace hp::io::detail {

BpeModel::BpeModel(TokenMap vocab, const std::vector<std::pair<std::string, std::string>>& merges,
                   BpeOptions options)
    : vocab_(std::move(vocab)), options_(std::move(options)) {
  int32_t max_id = -1;
  for (const auto& [tok, id] : vocab_) max_id = std::max(max_id, id);
  id_to_token_.resize(static_cast<size_t>(max_id + 1));
  has_id_.resize(id_to_token_.size());
  for (const auto& [tok, id] : vocab_) {
    id_to_token_[id] = tok;
    has_id_[id] = true;
  }
  for (size_t r = 0; r < merges.size(); ++r) {
    const auto& [a, b] = merges[r];
    auto ia = vocab_.find(a), ib = vocab_.find(b), inew = vocab_.find(a + b);
    HP_CHECK(ia != vocab_.end() && ib != vocab_.end() && inew != vocab_.end());
    // Like the reference implementation, a repeated pair keeps its last rank.
    merges_[pair_key(ia->second, ib->second)] = Merge{static_cast<int32_t>(r), inew->second};
  }
  if (options_.unk_token) {
    auto it = vocab_.find(*options_.unk_token);
    HP_CHECK(it != vocab_.end(), "unk_token not in vocab");
    unk_id_ = it->second;
  }
  for (int b = 0; b < 256; ++b) {
    static const char kHex[] = "0123456789ABCDEF";
    const char name[] = {'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>', 0};
    auto id = token_to_id(name);
    byte_ids_[b] = id ? *id : -1;
  }
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size() || !has_id_[id]) return nullptr;
  return &id_to_token_[id];
}

void BpeModel::tokenize(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (options_.ignore_merges) {
    if (auto id = token_to_id(word)) {
      out.push_back(*id);
      return;
    }
  }
  bool cacheable = word.size() <= kMaxCachedWordBytes;
  if (cacheable) {
    std::shared_lock lock(cache_mutex_);
    auto it = cache_.find(word);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  size_t start = out.size();
  merge_word(word, out);
  if (cacheable) {
    std::unique_lock lock(cache_mutex_);
    if (cache_.size() < kCacheCapacity)
      cache_.emplace(std::string(word), std::vector<int32_t>(out.begin() + start, out.end()));
  }
}

// The reference algorithm: a min-heap of candidate merges ordered by (rank, position); stale
// entries (a side already merged away) are skipped when popped.
void BpeModel::merge_word(std::string_view word, std::vector<int32_t>& out) const {
  struct Symbol {
    int32_t id;
    int32_t prev, next;
    bool alive;
  };
  std::vector<Symbol> syms;
  syms.reserve(word.size());
  auto add = [&](int32_t id) {
    int32_t n = static_cast<int32_t>(syms.size());
    syms.push_back(Symbol{id, n - 1, n + 1, true});
  };
  // As the reference: a run of unknown characters is held back (fused into one unk when
  // fuse_unk) until a known character or the end; byte-fallback tokens do not end the run.
  std::optional<int32_t> pending_unk;
  auto flush_unk = [&] {
    if (pending_unk) add(*pending_unk);
    pending_unk.reset();
  };
  for (size_t i = 0; i < word.size();) {
    size_t len = 1;
    auto b = static_cast<unsigned char>(word[i]);
    if (b >= 0xF0)
      len = 4;
    else if (b >= 0xE0)
      len = 3;
    else if (b >= 0xC0)
      len = 2;
    len = std::min(len, word.size() - i);
    std::string_view ch = word.substr(i, len);
    i += len;
    if (auto id = token_to_id(ch)) {
      flush_unk();
      add(*id);
      continue;
    }
    if (options_.byte_fallback && std::all_of(ch.begin(), ch.end(), [&](char c) {
          return byte_ids_[static_cast<unsigned char>(c)] >= 0;
        })) {
      for (char c : ch) add(byte_ids_[static_cast<unsigned char>(c)]);
      continue;
    }
    if (!unk_id_) continue;  // no unk token: the character is dropped, as in the reference
    if (!(pending_unk && options_.fuse_unk)) {
      flush_unk();
      pending_unk = unk_id_;
    }
  }
  flush_unk();
  if (syms.empty()) return;
  syms.back().next = -1;

  struct Candidate {
    int32_t rank, pos, new_id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto push = [&](int32_t pos) {
    int32_t next = syms[pos].next;
    if (next < 0) return;
    auto it = merges_.find(pair_key(syms[pos].id, syms[next].id));
    if (it != merges_.end()) heap.push(Candidate{it->second.rank, pos, it->second.new_id});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(syms.size()); ++i) push(i);

  while (!heap.empty()) {
    Candidate c = heap.top();
    heap.pop();
    Symbol& left = syms[c.pos];
    if (!left.alive || left.next < 0) continue;
    auto it = merges_.find(pair_key(left.id, syms[left.next].id));
    if (it == merges_.end() || it->second.new_id != c.new_id) continue;
    Symbol& right = syms[left.next];
    left.id = c.new_id;
    left.next = right.next;
    right.alive = false;
    if (right.next >= 0) syms[right.next].prev = c.pos;
    if (left.prev >= 0) push(left.prev);
    push(c.pos);
  }
  for (int32_t i = 0; i >= 0; i = syms[i].next) out.push_back(syms[i].id);
}

}  // namespace hp::io::detail
