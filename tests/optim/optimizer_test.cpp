// AdamW and Muon against tools/make_optim_fixtures.py (torch.optim.AdamW + a spec Muon), plus the
// state dict round trip and error messages.
#include "hp/optim/optimizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "error_of.h"
#include "hp/io/json.h"
#include "test_dir.h"

namespace hp::optim {
namespace {

std::vector<double> doubles(const io::Json& j) {
  std::vector<double> v;
  for (const auto& e : j.elements()) v.push_back(e.as_double());
  return v;
}

Shape shape_of(const io::Json& j) {
  Shape s;
  for (const auto& e : j.elements()) s.push_back(e.as_int());
  return s;
}

OptimizerOptions fixture_options(const io::Json& root, const io::Json& sc) {
  OptimizerOptions o;
  o.adamw.beta1 = root["adamw"]["betas"].at(0).as_double();
  o.adamw.beta2 = root["adamw"]["betas"].at(1).as_double();
  o.adamw.eps = root["adamw"].get_double("eps");
  o.adamw.weight_decay = root["adamw"].get_double("weight_decay");
  o.muon.momentum = root["muon"].get_double("momentum");
  o.muon.ns_steps = static_cast<int>(root["muon"].get_int("ns_steps"));
  o.muon.weight_decay = root["muon"].get_double("weight_decay");
  o.muon.nesterov = sc.get_bool("nesterov");
  o.muon.update_scale = muon_scale_from_name(sc.get_string("update_scale"));
  o.groups.push_back({"embeddings", {"embed*"}, Algorithm::adamw, 1.0, std::nullopt});
  o.default_algorithm = Algorithm::auto_select;
  return o;
}

void expect_close(const Tensor& t, const std::vector<double>& want, double tol,
                  const std::string& what) {
  auto got = t.to_vector();
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol * (1 + std::fabs(want[i]))) << what << " [" << i << "]";
}

TEST(Optimizer, MatchesTorchAdamWAndSpecMuon) {
  auto root = io::read_json_file(std::string(HP_TEST_DIR) + "/fixtures/optim_reference.json");
  for (const auto& sc : root["scenarios"].elements()) {
    std::vector<NamedTensor> params;
    for (const auto& [name, shape] : sc["shapes"].items())
      params.emplace_back(name, from_vector(doubles(sc["init"][name]), shape_of(shape)));
    Optimizer opt(params, fixture_options(root, sc));
    for (const auto& e : opt.entries()) {
      bool muon = e.fqn == "layers.0.w" || e.fqn == "layers.0.v" || e.fqn == "experts.w";
      EXPECT_EQ(e.algorithm, muon ? Algorithm::muon : Algorithm::adamw) << e.fqn;
    }
    int step = 0;
    for (const auto& st : sc["steps"].elements()) {
      opt.zero_grad();
      for (auto& [name, p] : params) {
        auto g = st["grads"][name];
        if (!g.is_null()) p.set_grad(from_vector(doubles(g), p.shape()));
      }
      opt.step(st.get_double("lr"));
      const std::string where = sc.get_string("update_scale") + " step " + std::to_string(step++);
      for (auto& [name, p] : params)
        expect_close(p, doubles(st["params"][name]), 2e-5, where + " " + name);
      auto sd = opt.state_dict();
      std::map<std::string, Tensor> by_key(sd.begin(), sd.end());
      size_t expected_keys = 0;
      for (const auto& [fqn, s] : st["state"].items()) {
        for (const auto& [k, v] : s.items()) {
          ++expected_keys;
          const std::string key = "state." + fqn + "." + k;
          ASSERT_TRUE(by_key.count(key)) << key;
          if (k == "step")
            EXPECT_EQ(by_key[key].item(), v.as_double()) << key;
          else
            expect_close(by_key[key], doubles(v), 2e-5, where + " " + key);
        }
      }
      EXPECT_EQ(sd.size(), expected_keys);
    }
  }
}

TEST(Optimizer, StateDictRoundTripResumesIdentically) {
  auto make = [] {
    std::vector<NamedTensor> p = {{"w", from_vector({1, 2, 3, 4, 5, 6}, {2, 3})},
                                  {"b", from_vector({0.5, -0.5}, {2})}};
    return p;
  };
  OptimizerOptions o;
  o.default_algorithm = Algorithm::auto_select;
  auto pa = make(), pb = make();
  Optimizer a(pa, o);
  auto set_grads = [](std::vector<NamedTensor>& p, double s) {
    p[0].second.set_grad(from_vector({s, -s, 2 * s, 0.1, 0.2, -0.3}, {2, 3}));
    p[1].second.set_grad(from_vector({s, 1}, {2}));
  };
  set_grads(pa, 1.0);
  a.step(0.1);
  // b resumes from a's parameters and state, then both take the same second step.
  for (size_t i = 0; i < pa.size(); ++i) pb[i].second.copy_from(pa[i].second);
  Optimizer b(pb, o);
  b.load_state_dict(a.state_dict());
  set_grads(pa, 0.3);
  set_grads(pb, 0.3);
  a.step(0.05);
  b.step(0.05);
  for (size_t i = 0; i < pa.size(); ++i)
    EXPECT_EQ(pa[i].second.to_vector(), pb[i].second.to_vector()) << pa[i].first;
  auto sa = a.state_dict(), sb = b.state_dict();
  ASSERT_EQ(sa.size(), 5u);  // w: step + momentum_buffer; b: step + exp_avg + exp_avg_sq
  for (size_t i = 0; i < sa.size(); ++i) {
    EXPECT_EQ(sa[i].first, sb[i].first);
    EXPECT_EQ(sa[i].second.to_vector(), sb[i].second.to_vector()) << sa[i].first;
  }
}

using hp::testing::error_of;

TEST(Optimizer, ErrorsNameTheParameterAndKey) {
  OptimizerOptions o;
  o.groups.push_back({"", {"*.bias"}, Algorithm::muon, 1.0, std::nullopt});
  std::vector<NamedTensor> p = {{"l.bias", zeros({3})}};
  EXPECT_EQ(error_of([&] { Optimizer(p, o); }),
            "[optim] l.bias: muon (group groups[0]) needs a matrix, got [3] f32; route it to adamw "
            "with a group glob");
  EXPECT_EQ(error_of([&] {
              Optimizer({{"w", zeros({2}, DType::bf16)}}, {});
            }),
            "[optim] w: parameters must be contiguous f32 master weights, got [2] bf16");
  Optimizer opt({{"w", zeros({2, 2})}}, {});
  EXPECT_EQ(error_of([&] {
              opt.load_state_dict({{"state.x.exp_avg", zeros({2, 2})}});
            }),
            "[optim] load_state_dict: state.x.exp_avg: no parameter named 'x'");
  EXPECT_EQ(error_of([&] {
              opt.load_state_dict({{"state.w.exp_avg", zeros({4})}});
            }),
            "[optim] load_state_dict: state.w.exp_avg: shape [4] f32 does not match parameter "
            "[2, 2] f32");
  EXPECT_EQ(error_of([&] {
              opt.load_state_dict({{"state.w.momentum_buffer", zeros({2, 2})}});
            }),
            "[optim] load_state_dict: state.w.momentum_buffer: no state 'momentum_buffer' for "
            "adamw parameter w");
  EXPECT_EQ(error_of([&] {
              opt.load_state_dict({{"state.w.exp_avg", zeros({2, 2})}});
            }),
            "[optim] load_state_dict: state.w: incomplete (1 of 3 entries: step plus the adamw "
            "buffers)");
}

TEST(GlobMatch, StarsAndQuestionMarks) {
  EXPECT_TRUE(glob_match("*", ""));
  EXPECT_TRUE(glob_match("layers.*.mlp.*", "layers.10.mlp.up_proj.weight"));
  EXPECT_TRUE(glob_match("*.bias", "a.b.bias"));
  EXPECT_FALSE(glob_match("*.bias", "a.bias_x"));
  EXPECT_TRUE(glob_match("layers.?.w", "layers.3.w"));
  EXPECT_FALSE(glob_match("layers.?.w", "layers.13.w"));
  EXPECT_TRUE(glob_match("*embed*", "model.embed_tokens.weight"));
  EXPECT_FALSE(glob_match("lm_head", "lm_head.weight"));
}

}  // namespace
}  // namespace hp::optim
