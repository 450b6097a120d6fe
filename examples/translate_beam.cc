// examples/translate_beam.cc — greedy decoding and beam search side by side, through the public API.
//
//   translate_beam [OUT_DIR]       (default: a fresh directory under the system temp dir)
//
// Trains a small encoder-decoder (arch "seq2seq": nn.Transformer with bos/eos) on the built-in
// reverse task for a few seconds, reloads it, then decodes a few unseen sources twice:
//   greedy      tfm::decode_hypotheses(model, sources)                  (DecodeOptions{}: beam 1)
//   beam 4      tfm::decode_hypotheses(model, sources, {.beam = 4})
// and prints each prediction with its log-probability and its score (log-probability divided by the
// length, eos included). A briefly trained model is still unsure, which is where beam search can
// find a better-scoring answer than greedy.
//
// It also checks the decoder's promises and exits non-zero when one is broken:
//   * tfm::decode (ids only) returns the same tokens as decode_hypotheses;
//   * beam 1 is greedy decoding (same tokens, same scores);
//   * decoding without the key/value cache gives the same tokens as with it;
//   * every log-probability is ≤ 0 and score = logprob / length (length_penalty 1).
#include <tfm/data/tasks.h>
#include <tfm/models/decode.h>
#include <tfm/models/model_dir.h>
#include <tfm/train/config.h>
#include <tfm/train/trainer.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>
#include <vector>

namespace {

std::string join_ids(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) {
    if (!s.empty()) s += ' ';
    s += std::to_string(id);
  }
  return s;
}

int failures = 0;
void check(bool ok, const std::string& what) {
  if (!ok) {
    std::fprintf(stderr, "FAIL: %s\n", what.c_str());
    ++failures;
  }
}

// Same tokens for every source.
bool same_tokens(const std::vector<tfm::Hypothesis>& a, const std::vector<tfm::Hypothesis>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].tokens != b[i].tokens) return false;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 2) {
    std::fprintf(stderr, "usage: %s [OUT_DIR]\n", argv[0]);
    return 2;
  }
  std::string out_dir;
  if (argc == 2) {
    out_dir = argv[1];
  } else {
    const auto stamp = std::chrono::steady_clock::now().time_since_epoch().count();
    out_dir = (std::filesystem::temp_directory_path() / ("tfm_translate_beam_" + std::to_string(stamp))).string();
  }

  try {
    // ---- a small seq2seq model, trained briefly ------------------------------------------------------
    // Encoder + decoder: the target is generated token by token.
    tfm::train::TrainConfig config = tfm::train::task_preset(tfm::data::Task::REVERSE, tfm::Arch::SEQ2SEQ);
    config.task_train_size = 2000;
    config.task_valid_size = 50;
    config.model.d_model = 32;
    config.model.nhead = 4;
    config.model.num_encoder_layers = 1;
    config.model.num_decoder_layers = 1;
    config.model.dim_feedforward = 64;
    config.max_steps = 150;
    config.eval_every = 150;  // one evaluation (and checkpoint) at the end
    config.lr = 3e-3f;
    config.warmup = 10;
    config.batch.batch_size = 64;
    config.seed = 3;
    config.out_dir = out_dir;
    const tfm::train::TrainResult result = tfm::train::run_training(config);
    std::printf("trained %lld steps in %.1f s, last training loss %.3f\n", static_cast<long long>(result.steps),
                result.seconds, result.history.empty() ? -1.0 : result.history.back().train_loss);

    const tfm::TrainedModel loaded = tfm::load_model_dir(out_dir);
    const tfm::Model& model = *loaded.model;

    // ---- decode a few unseen sources -----------------------------------------------------------------
    const auto examples = tfm::data::make_task_set(tfm::data::Task::REVERSE, /*seed=*/5, tfm::data::Split::TEST, 6);
    std::vector<std::vector<int32_t>> sources;
    for (const auto& ex : examples) sources.push_back(ex.src);

    tfm::DecodeOptions greedy_opt;  // beam 1, length_penalty 1, key/value cache on
    tfm::DecodeOptions beam_opt;
    beam_opt.beam = 4;
    const std::vector<tfm::Hypothesis> greedy = tfm::decode_hypotheses(model, sources, greedy_opt);
    const std::vector<tfm::Hypothesis> beam = tfm::decode_hypotheses(model, sources, beam_opt);

    int beam_better = 0, greedy_exact = 0, beam_exact = 0;
    for (size_t i = 0; i < sources.size(); ++i) {
      const tfm::Hypothesis& g = greedy[i];
      const tfm::Hypothesis& b = beam[i];
      greedy_exact += g.tokens == examples[i].tgt ? 1 : 0;
      beam_exact += b.tokens == examples[i].tgt ? 1 : 0;
      beam_better += b.score > g.score ? 1 : 0;
      std::printf("source    %s\n", join_ids(sources[i]).c_str());
      std::printf("  greedy  %-40s logprob %8.4f  score %8.4f\n", join_ids(g.tokens).c_str(), g.logprob, g.score);
      std::printf("  beam 4  %-40s logprob %8.4f  score %8.4f%s\n", join_ids(b.tokens).c_str(), b.logprob, b.score,
                  b.tokens != g.tokens ? "  (differs)" : "");
    }
    std::printf("exact reversals: greedy %d/%zu, beam %d/%zu; beam scored higher on %d\n", greedy_exact,
                sources.size(), beam_exact, sources.size(), beam_better);

    // ---- consistency checks --------------------------------------------------------------------------
    // decode() is decode_hypotheses() without the scores.
    const std::vector<std::vector<int32_t>> ids = tfm::decode(model, sources, beam_opt);
    for (size_t i = 0; i < sources.size(); ++i)
      check(ids[i] == beam[i].tokens, "decode and decode_hypotheses disagree on source " + std::to_string(i));

    // Beam 1 is greedy: the same search with one row per source.
    tfm::DecodeOptions beam1 = greedy_opt;
    beam1.beam = 1;
    const std::vector<tfm::Hypothesis> one = tfm::decode_hypotheses(model, sources, beam1);
    check(same_tokens(one, greedy), "beam 1 differs from greedy");
    for (size_t i = 0; i < sources.size(); ++i)
      check(one[i].score == greedy[i].score, "beam 1 score differs from greedy on source " + std::to_string(i));

    // The key/value cache is an optimisation only: the same tokens without it.
    for (tfm::DecodeOptions o : {greedy_opt, beam_opt}) {
      o.use_cache = false;
      check(same_tokens(tfm::decode_hypotheses(model, sources, o), o.beam == 1 ? greedy : beam),
            "decoding without the cache changes the tokens (beam " + std::to_string(o.beam) + ")");
    }

    // score = logprob / length with length_penalty 1; length counts the eos, which every hypothesis is
    // scored with: its own, or, cut at the limit of 2·S + 10 tokens, one charged there (the model's max_len
    // leaves room for it). The two are computed in float from the same sum, so they agree to a few float
    // roundings (1e-5 relative is ~100 ulp).
    for (const auto* set : {&greedy, &beam})
      for (size_t i = 0; i < sources.size(); ++i) {
        const tfm::Hypothesis& h = (*set)[i];
        const double length = static_cast<double>(h.tokens.size() + 1);
        check(h.logprob <= 0.0f, "positive log-probability on source " + std::to_string(i));
        check(std::fabs(h.score - h.logprob / length) <= 1e-5 * std::fabs(h.logprob) + 1e-7,
              "score is not logprob / length on source " + std::to_string(i));
      }

    if (argc == 1) std::filesystem::remove_all(out_dir);
    if (failures > 0) {
      std::fprintf(stderr, "%d consistency check(s) failed\n", failures);
      return 1;
    }
    std::printf("all consistency checks passed\n");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
