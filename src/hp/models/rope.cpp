#include "hp/models/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "hp/ops/ops.h"

namespace hp::models {

namespace {

double f32(double x) {
  return static_cast<double>(static_cast<float>(x));
}

// base^(-2i/dim), i < dim/2, in f32 like `1.0 / base ** (arange(0, dim, 2).float() / dim)`.
std::vector<double> default_inv_freq(double base, int64_t dim) {
  std::vector<double> f(static_cast<size_t>(dim / 2));
  for (size_t i = 0; i < f.size(); ++i) {
    const float e = static_cast<float>(2 * i) / static_cast<float>(dim);
    f[i] = f32(1.0 / f32(std::pow(static_cast<float>(base), e)));
  }
  return f;
}

double yarn_mscale(double scale, double mscale) {
  return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

}  // namespace

RopeFrequencies rope_frequencies(const ModelConfig& c, int64_t dim, int64_t seq_len) {
  const RopeScaling& r = c.rope_scaling;
  RopeFrequencies out;
  const double base = c.rope_theta;
  if (r.type == "default") {
    out.inv_freq = default_inv_freq(base, dim);
  } else if (r.type == "linear") {
    out.inv_freq = default_inv_freq(base, dim);
    for (double& f : out.inv_freq) f = f32(f / r.factor);
  } else if (r.type == "dynamic") {
    const auto max_pos = static_cast<double>(c.max_position_embeddings);
    const double len = std::max(static_cast<double>(seq_len), max_pos);
    const double d = static_cast<double>(dim);
    const double b = base * std::pow(r.factor * len / max_pos - (r.factor - 1), d / (d - 2));
    out.inv_freq = default_inv_freq(b, dim);
  } else if (r.type == "llama3") {
    out.inv_freq = default_inv_freq(base, dim);
    const auto old_ctx = static_cast<double>(r.original_max_position_embeddings);
    const double low_wavelen = old_ctx / r.low_freq_factor;
    const double high_wavelen = old_ctx / r.high_freq_factor;
    for (double& f : out.inv_freq) {
      const double wl = 2 * std::numbers::pi / f;  // wavelength
      if (wl > low_wavelen) {
        f = f32(f / r.factor);
      } else if (wl >= high_wavelen) {
        // Medium frequencies: interpolate between scaled and unscaled.
        const double smooth =
            (old_ctx / wl - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
        f = f32((1 - smooth) * f / r.factor + smooth * f);
      }
    }
  } else if (r.type == "yarn") {
    const double factor = r.factor;
    if (r.attention_factor)
      out.attention_factor = *r.attention_factor;
    else if (r.mscale != 0 && r.mscale_all_dim != 0)
      out.attention_factor = yarn_mscale(factor, r.mscale) / yarn_mscale(factor, r.mscale_all_dim);
    else
      out.attention_factor = yarn_mscale(factor, 1.0);
    const auto d = static_cast<double>(dim);
    const auto orig = static_cast<double>(r.original_max_position_embeddings);
    auto correction_dim = [&](double rotations) {
      return d * std::log(orig / (rotations * 2 * std::numbers::pi)) / (2 * std::log(base));
    };
    double low = correction_dim(r.beta_fast), high = correction_dim(r.beta_slow);
    if (r.truncate) {
      low = std::floor(low);
      high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, d - 1);
    if (low == high) high += 0.001;
    const std::vector<double> extra = default_inv_freq(base, dim);
    out.inv_freq.resize(extra.size());
    for (size_t i = 0; i < extra.size(); ++i) {
      const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
      const double extrapolation = 1 - ramp;
      const double inter = f32(extra[i] / factor);
      out.inv_freq[i] = f32(inter * (1 - extrapolation) + extra[i] * extrapolation);
    }
  }
  return out;
}

std::pair<Tensor, Tensor> RotaryTables::get(int64_t start, int64_t len, DType dt) {
  const int64_t end = start + len;
  // Dynamic NTK changes every frequency once the sequence outgrows max_position_embeddings.
  const bool dynamic =
      config_.rope_scaling.type == "dynamic" && end > config_.max_position_embeddings;
  if (end > cached_len_ || dt != cached_dtype_ || dynamic) {
    const int64_t n = std::max<int64_t>(end, 64);
    const RopeFrequencies f = rope_frequencies(config_, dim_, end);
    auto [c, s] = rope_cos_sin_from_inv_freq(f.inv_freq, 0, n, f.attention_factor, dt);
    cos_ = c;
    sin_ = s;
    cached_len_ = dynamic ? 0 : n;
    cached_dtype_ = dt;
  }
  return {narrow(cos_, 0, start, len), narrow(sin_, 0, start, len)};
}

Tensor rotate_trailing(const Tensor& x, const Tensor& cos, const Tensor& sin, bool interleaved,
                       int64_t seq_dim) {
  const int64_t d = x.size(-1), r = 2 * cos.size(-1);
  HP_CHECK(r <= d, "rotate_trailing: rope dim ", r, " > head dim ", d);
  if (r == d) return rotary_embedding(x, cos, sin, interleaved, seq_dim);
  auto parts = split(x, {d - r, r}, -1);
  return cat({parts[0], rotary_embedding(parts[1], cos, sin, interleaved, seq_dim)}, -1);
}

}  // namespace hp::models
