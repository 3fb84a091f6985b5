// libFuzzer target for the chat template engine (data/jinja.h): any text either parses and renders
// (a fixed conversation, with the message tracking the loss mask uses) or fails with an hp::Error;
// never a crash, hang, stack overflow or out-of-bounds access (ASan/UBSan enforce it). Templates
// are data: a tokenizer_config.json from anywhere.
//
//   ./build-fuzz/hp_chat_template_fuzz -max_total_time=60 corpus/ tests/fuzz/chat_template_seeds/
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "hp/core/error.h"
#include "hp/data/jinja.h"

namespace {

using hp::data::jinja::Dict;
using hp::data::jinja::Value;

Value message(const char* role, const char* content) {
  Dict d;
  d.set("role", Value::string(role));
  d.set("content", Value::string(content));
  return Value::make_dict(std::move(d));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Value messages = Value::make_list(
      {message("system", "Be brief."), message("user", "Hi {{ x }}"),
       message("assistant", "<think>\nhm\n</think>\n\nHello!"), message("user", "é \xF0\x9F\x98\x80"),
       message("assistant", "  bye  ")});
  try {
    const hp::data::jinja::Template t(std::string_view(reinterpret_cast<const char*>(data), size),
                                      "fuzz");
    Dict ctx;
    ctx.set("messages", messages);
    ctx.set("add_generation_prompt", Value::boolean(size % 2 == 0));
    ctx.set("bos_token", Value::string("<s>"));
    ctx.set("eos_token", Value::string("</s>"));
    const auto r = t.render(ctx, messages);
    for (const auto& [b, e] : r.generation)
      if (b > e || e > r.text.size()) __builtin_trap();
    for (const auto& [b, e] : r.tracked)
      if (b > e || e > r.text.size()) __builtin_trap();
  } catch (const hp::Error&) {
  }
  return 0;
}
