// Byte-pair-encoding model of a Hugging Face tokenizer (internal to io/).
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace hp::io::detail {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

class BpeModel {
 public:
  // `merges` are (left, right) token strings in priority order; every token and every merged
  // result must be in `vocab` (checked by the caller, which can name the JSON key).
  BpeModel(TokenMap vocab, const std::vector<std::pair<std::string, std::string>>& merges,
           std::optional<std::string> unk_token, bool fuse_unk, bool ignore_merges);

  // Appends the ids of one pre-tokenized word (already byte-level mapped).
  void tokenize(std::string_view word, std::vector<int32_t>& out) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  // nullptr when no token has this id.
  const std::string* id_to_token(int32_t id) const;
  // Largest id + 1.
  int32_t size() const { return static_cast<int32_t>(id_to_token_.size()); }

 private:
  struct Merge {
    int32_t rank;
    int32_t new_id;
  };
  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  void merge_word(std::string_view word, std::vector<int32_t>& out) const;

  TokenMap vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> has_id_;
  std::unordered_map<uint64_t, Merge> merges_;
  std::optional<int32_t> unk_id_;
  bool fuse_unk_;
  bool ignore_merges_;

  // Word → ids. Real text repeats words heavily; bounded like the Hugging Face cache (entries are
  // only added while there is room, so no eviction policy is needed).
  static constexpr size_t kCacheCapacity = 10000;
  static constexpr size_t kMaxCachedWordBytes = 256;
  mutable std::shared_mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> cache_;
};

}  // namespace hp::io::detail
