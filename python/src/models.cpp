// hyperparallel.Model (a CausalLM loaded from a Hugging Face directory) and
// hyperparallel.Tokenizer: the library functions `hp forward`, `hp generate` and `hp tokenize` call
// (tools/hp/model.cpp, tools/hp/tokenize.cpp), so results are those of the CLI bit for bit.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "hp/core/error.h"
#include "hp/io/tokenizer.h"
#include "hp/models/generate.h"
#include "hp/models/hf/registry.h"
#include "hp/models/hf/weights.h"
#include "hp/ops/ops.h"

namespace hp::python {

namespace {

using models::CausalLM;

// ids [T] or [B, T] of an integer dtype, every id inside the vocabulary (checked before any
// compute, as `hp forward` does: the embedding would otherwise be asked for a row it lacks).
Tensor checked_ids(const CausalLM& model, const Tensor& ids, const char* what) {
  if (ids.dim() != 1 && ids.dim() != 2)
    HP_THROW(ValueError, "python", what, ": token ids must be [T] or [B, T], got ",
             shape_str(ids.shape()));
  if (ids.dtype() != DType::i64 && ids.dtype() != DType::i32)
    HP_THROW(ValueError, "python", what, ": token ids must be i32 or i64, got ",
             dtype_name(ids.dtype()));
  const int64_t vocab = model.config().vocab_size;
  const std::vector<double> v = ids.to_vector();
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i] < 0 || v[i] >= static_cast<double>(vocab))
      HP_THROW(ValueError, "python", what, ": token id ", static_cast<int64_t>(v[i]), " (position ",
               i, ") is outside the vocabulary [0, ", vocab, ")");
  return ids.dim() == 1 ? unsqueeze(ids, 0) : ids;
}

// A batch of one row comes back without its batch dimension when the ids had none.
Tensor drop_batch(const Tensor& out, const Tensor& ids) {
  return ids.dim() == 1 ? select(out, 0, 0) : out;
}

nb::dict config_dict(const models::ModelConfig& c) {
  nb::dict d;
  d["architecture"] = c.architecture;
  d["model_type"] = c.model_type;
  d["vocab_size"] = c.vocab_size;
  d["hidden_size"] = c.hidden_size;
  d["intermediate_size"] = c.intermediate_size;
  d["num_hidden_layers"] = c.num_hidden_layers;
  d["num_attention_heads"] = c.num_attention_heads;
  d["num_key_value_heads"] = c.num_key_value_heads;
  d["head_dim"] = c.head_dim;
  d["eos_token_ids"] = c.eos_token_ids;
  d["dtype"] = std::string(dtype_name(c.dtype));
  return d;
}

void bind_model(nb::module_& m) {
  nb::class_<CausalLM>(m, "Model")
      .def_static(
          "from_pretrained",
          [](const std::string& dir, const std::string& dtype) {
            nb::gil_scoped_release release;
            return models::load_model(dir, dtype_arg(dtype));
          },
          nb::arg("path"), nb::arg("dtype") = "f32")
      .def_prop_ro("config", [](const CausalLM& model) { return config_dict(model.config()); })
      .def(
          "forward",
          [](CausalLM& model, const Tensor& ids) {
            const Tensor rows = checked_ids(model, ids, "forward");
            nb::gil_scoped_release release;
            return drop_batch(model.forward(rows), ids);
          },
          nb::arg("ids"), "ids [T] → logits [T, vocab]; ids [B, T] → [B, T, vocab]")
      .def(
          "loss",
          [](CausalLM& model, const Tensor& ids, std::optional<Tensor> labels) {
            const Tensor rows = checked_ids(model, ids, "loss");
            const Tensor lab =
                labels ? (labels->dim() == 1 ? unsqueeze(*labels, 0) : *labels) : Tensor();
            nb::gil_scoped_release release;
            return model.loss(rows, lab);
          },
          nb::arg("ids"), nb::arg("labels") = nb::none())
      .def(
          "generate",
          [](CausalLM& model, const std::vector<int64_t>& prompt, int64_t max_new_tokens,
             std::optional<double> temperature, std::optional<double> top_p, uint64_t seed,
             std::optional<std::vector<int64_t>> stop_ids) {
            models::GenerateOptions opt;
            opt.max_new_tokens = max_new_tokens;
            opt.greedy = !temperature && !top_p;
            if (temperature) opt.temperature = *temperature;
            if (top_p) opt.top_p = *top_p;
            opt.seed = seed;
            opt.stop_ids = stop_ids ? *stop_ids : model.config().eos_token_ids;
            checked_ids(model, from_data(prompt, {static_cast<int64_t>(prompt.size())}),
                        "generate");
            nb::gil_scoped_release release;
            return models::generate(model, prompt, opt);
          },
          nb::arg("prompt"), nb::arg("max_new_tokens") = 32, nb::arg("temperature") = nb::none(),
          nb::arg("top_p") = nb::none(), nb::arg("seed") = 0, nb::arg("stop_ids") = nb::none(),
          "The new token ids after `prompt` (greedy unless temperature / top_p is given).")
      .def("named_parameters", &CausalLM::named_parameters)
      .def("parameters", &CausalLM::parameters)
      .def("num_parameters", &CausalLM::num_parameters)
      .def(
          "save_pretrained",
          [](const CausalLM& model, const std::string& dir, const std::string& tokenizer_dir,
             int64_t max_shard_bytes) {
            nb::gil_scoped_release release;
            models::save_pretrained(model, dir, max_shard_bytes, tokenizer_dir);
          },
          nb::arg("path"), nb::arg("tokenizer_dir") = "",
          nb::arg("max_shard_bytes") = int64_t(5) << 30);
}

void bind_tokenizer(nb::module_& m) {
  using io::Tokenizer;
  nb::class_<Tokenizer>(m, "Tokenizer")
      .def_static("from_file", &Tokenizer::from_file, nb::arg("path"))
      .def(
          "encode",
          [](const Tokenizer& t, const std::string& text, bool add_special) {
            return t.encode(text, add_special);
          },
          nb::arg("text"), nb::arg("add_special_tokens") = true)
      .def(
          "encode_batch",
          [](const Tokenizer& t, const std::vector<std::string>& texts, bool add_special) {
            nb::gil_scoped_release release;
            std::vector<std::vector<int32_t>> out;
            out.reserve(texts.size());
            for (const auto& s : texts) out.push_back(t.encode(s, add_special));
            return out;
          },
          nb::arg("texts"), nb::arg("add_special_tokens") = true)
      .def(
          "decode",
          [](const Tokenizer& t, const std::vector<int32_t>& ids, bool skip) {
            return t.decode(ids, skip);
          },
          nb::arg("ids"), nb::arg("skip_special_tokens") = false)
      .def(
          "decode_batch",
          [](const Tokenizer& t, const std::vector<std::vector<int32_t>>& batch, bool skip) {
            std::vector<std::string> out;
            out.reserve(batch.size());
            for (const auto& ids : batch) out.push_back(t.decode(ids, skip));
            return out;
          },
          nb::arg("ids"), nb::arg("skip_special_tokens") = false)
      .def_prop_ro("vocab_size", &Tokenizer::vocab_size)
      .def("token_to_id", &Tokenizer::token_to_id, nb::arg("token"))
      .def("id_to_token", &Tokenizer::id_to_token, nb::arg("id"))
      .def("is_special", &Tokenizer::is_special, nb::arg("id"));
}

}  // namespace

void bind_models(nb::module_& m) {
  bind_model(m);
  bind_tokenizer(m);
}

}  // namespace hp::python
