// Chat / SFT data: conversations (`{"messages": [{"role": ..., "content": ...}, ...]}`, one per
// JSONL line) rendered by the model's chat template into token ids and a loss mask that is 1 on
// the assistant's tokens only.
//
// Rendering is transformers' apply_chat_template(messages, tokenize=False) (jinja.h), with the
// template, bos_token and eos_token of a tokenizer_config.json. Which characters are trained:
//  - a template with `{% generation %}` blocks: what they write (HF's return_assistant_tokens_mask);
//  - otherwise: what the template writes while its `for` loop is at an assistant message, minus
//    the generation prompt at its start (what add_generation_prompt appends, e.g.
//    "<|im_start|>assistant\n"): the reply and its end-of-turn token ("<|im_end|>\n", "<|eot_id|>",
//    "<｜end▁of▁sentence｜>", "</s>"), not the header. Everything else (system, user, tool turns,
//    headers, BOS) is context only.
// The rendered text is encoded piece by piece (trained / not trained) by the dataset's
// DocumentEncoder, so a token never straddles the boundary; the pieces meet at special tokens or
// turn headers, where the templates of the supported families put them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hp/data/jinja.h"
#include "hp/io/json.h"

namespace hp::data {

class DocumentEncoder;

// Roles a message may have.
inline constexpr const char* kChatRoles[] = {"system", "user", "assistant", "tool"};

class ChatTemplate {
 public:
  // `chat_template` (a string, or the "default" of a list of {name, template}), bos_token and
  // eos_token (strings or {"content": ...}) of a tokenizer_config.json; a file ending in .jinja is
  // the template itself (no special tokens). IoError("[data] ...") naming the file when it is
  // missing, is not JSON or has no chat_template; ValueError("[chat] FILE:LINE: ...") for a
  // template this engine cannot parse.
  static ChatTemplate load(const std::string& path);
  ChatTemplate(std::string_view source, std::string name, std::string bos_token,
               std::string eos_token);

  // apply_chat_template(messages, tokenize=False, add_generation_prompt=...).
  std::string render(const jinja::Value& messages, bool add_generation_prompt = false) const;
  // The rendering of a whole conversation as consecutive pieces, each trained or not (above).
  std::vector<std::pair<std::string, bool>> pieces(const jinja::Value& messages) const;
  // What add_generation_prompt appends after a user turn ("" when the template adds nothing).
  const std::string& generation_prompt() const { return generation_prompt_; }
  const std::string& name() const { return tmpl_.name(); }

 private:
  jinja::RenderResult run(const jinja::Value& messages, bool add_generation_prompt,
                          bool track) const;

  jinja::Template tmpl_;
  std::string bos_, eos_, generation_prompt_;
};

// The conversation of one JSONL record: its member `field` (an array of messages). ValueError
// ("[data] WHERE: ...", WHERE = FILE:LINE) when the field is missing or not an array, a message is
// not an object, its role is missing or not one of kChatRoles, or its content is not a string.
// Other members of a message (reasoning_content, ...) are passed to the template as they are.
jinja::Value parse_conversation(const io::Json& record, const std::string& field,
                                const std::string& where);

// One JSONL line of chat data: the conversation in its member `field`. ValueError("[data] WHERE:
// ...") for a line that is not JSON (with the parser's reason), not an object, or as
// parse_conversation.
jinja::Value parse_chat_line(std::string_view line, const std::string& field,
                             const std::string& where);

// The chat template file of a chat dataset: `chat_template` if given, else the
// tokenizer_config.json beside `tokenizer`. ValueError naming the keys when neither is given.
std::string chat_template_path(const std::string& chat_template, const std::string& tokenizer);

// Appends one conversation's ids, then the separator, to `ids`, and one mask byte per id to
// `mask` (1 = trained; the separator is 0). Errors name `where`.
void encode_conversation(const ChatTemplate& tmpl, const DocumentEncoder& encoder,
                         const jinja::Value& messages, const std::string& where,
                         std::vector<int32_t>& ids, std::vector<uint8_t>& mask);

}  // namespace hp::data
