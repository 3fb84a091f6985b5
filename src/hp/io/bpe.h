// Tokenizer models (internal to io/): the Hugging Face BPE of tokenizer.json, and the interface
// the tiktoken model (tokenizer_tiktoken.cpp) shares with it.
#pragma once

#include <array>
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

class Model {
 public:
  virtual ~Model() = default;
  // Appends the ids of one pre-tokenized word.
  virtual void tokenize(std::string_view word, std::vector<int32_t>& out) const = 0;
  virtual std::optional<int32_t> token_to_id(std::string_view token) const = 0;
  // nullptr when no token has this id.
  virtual const std::string* id_to_token(int32_t id) const = 0;
  // Largest id + 1.
  virtual int32_t size() const = 0;
};

struct BpeOptions {
  std::optional<std::string> unk_token;
  bool fuse_unk = false;
  bool ignore_merges = false;
  // Characters missing from the vocab become their UTF-8 bytes as "<0xHH>" tokens.
  bool byte_fallback = false;
};

class BpeModel final : public Model {
 public:
  // `merges` are (left, right) token strings in priority order; every token and every merged
  // result must be in `vocab` (checked by the caller, which can name the JSON key).
  BpeModel(TokenMap vocab, const std::vector<std::pair<std::string, std::string>>& merges,
           BpeOptions options);

  void tokenize(std::string_view word, std::vector<int32_t>& out) const override;
  std::optional<int32_t> token_to_id(std::string_view token) const override;
  const std::string* id_to_token(int32_t id) const override;
  int32_t size() const override { return static_cast<int32_t>(id_to_token_.size()); }

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
  BpeOptions options_;
  std::array<int32_t, 256> byte_ids_;  // "<0xHH>" ids for byte_fallback, -1 when absent

  // Word → ids. Real text repeats words heavily; bounded like the Hugging Face cache (entries are
  // only added while there is room, so no eviction policy is needed).
  static constexpr size_t kCacheCapacity = 10000;
  static constexpr size_t kMaxCachedWordBytes = 256;
  mutable std::shared_mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> cache_;
};

}  // namespace hp::io::detail
