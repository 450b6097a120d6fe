// src/cli/translate_cmd.cc — `tfm translate`: sources on stdin, one a line; predictions on stdout
// in the same order. Input is processed in chunks so arbitrarily long streams need bounded memory, and
// a chunk is translated as soon as no more input is at hand, so a program that writes a line and waits
// for its translation gets it.
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>

#include "commands.h"
#include "tfm/data/vocab.h"
#include "tfm/inference.h"
#include "tfm/models/model_dir.h"
#include "tfm/models/sampling.h"
#include "tfm/threads.h"

namespace tfm::cli {
namespace {

// The lines of standard input, read with read(2) into a buffer of its own, so that the reader knows
// whether the next line can be had without waiting (std::cin cannot say what the stdio buffer under it holds).
class StdinLines {
 public:
  // utf8: the lines are read as UTF-8 (data::reads_utf8 of the source tokenization), so UTF-16 input is refused;
  // else (byte, gpt2-bpe sources) any bytes are lines.
  explicit StdinLines(bool utf8) : utf8_(utf8) {}
  // The next line, without its '\n' and a '\r' before it (and the first without a byte order mark,
  // data::kUtf8Bom); false at the end of input. A last line without a newline is a line; the empty text
  // after a final newline is not. Read as UTF-8, UTF-16 input (data::utf16_text, from the bytes read when the
  // first line is taken) throws std::invalid_argument saying so, as a data file's reader does, not a line of
  // NULs or of invalid UTF-8.
  bool next(std::string& line) {
    for (;;) {
      const size_t nl = buf_.find('\n', scanned_);
      if (nl != std::string::npos) {
        take(line, nl);
        pos_ = scanned_ = nl + 1;
        return true;
      }
      scanned_ = buf_.size();
      if (eof_) {
        if (pos_ == buf_.size()) return false;
        take(line, buf_.size());
        pos_ = buf_.size();
        return true;
      }
      read_more();
    }
  }
  // True when next() would return without blocking: a whole line is buffered, the input has ended, or
  // stdin has bytes (or its end) ready now. A partial line and an idle writer: false.
  bool ready() const {
    if (eof_ || buf_.find('\n', pos_) != std::string::npos) return true;
    pollfd p{STDIN_FILENO, POLLIN, 0};
    return ::poll(&p, 1, 0) != 0;  // an error (< 0) too: the next read reports it
  }

 private:
  void take(std::string& line, size_t end) {
    if (first_ && utf8_)  // buf_ starts at the stream's start
      if (const std::string u16 = data::utf16_text(buf_); !u16.empty())
        throw std::invalid_argument("standard input: " + u16);
    line.assign(buf_, pos_, end - pos_);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (first_ && line.rfind(data::kUtf8Bom, 0) == 0) line.erase(0, data::kUtf8Bom.size());
    first_ = false;
  }
  void read_more() {
    buf_.erase(0, pos_);  // the lines already returned
    scanned_ -= pos_;
    pos_ = 0;
    char tmp[1 << 16];
    for (;;) {
      const ssize_t n = ::read(STDIN_FILENO, tmp, sizeof tmp);
      if (n > 0) {
        buf_.append(tmp, static_cast<size_t>(n));
        return;
      }
      if (n == 0) {
        eof_ = true;
        return;
      }
      if (errno != EINTR) throw std::runtime_error(std::string("reading standard input: ") + std::strerror(errno));
    }
  }
  std::string buf_;
  size_t pos_ = 0;      // start of the first line not returned
  size_t scanned_ = 0;  // ≥ pos_; buf_[pos_, scanned_) holds no newline
  bool eof_ = false;
  bool first_ = true;  // the next line taken is the stream's first
  bool utf8_;
};

}  // namespace

void register_translate(CLI::App& app, Runner& run) {
  auto* cmd = app.add_subcommand("translate", "Predict targets for sources read from stdin, one a line");
  cmd->footer(
      "Examples:\n"
      "  echo '3 1 4 1 5' | tfm translate --model runs/reverse\n"
      "  tfm translate --model runs/mt --beam 4 < sources.txt > predictions.txt\n"
      "  tfm translate --model runs/mt --dtype bf16 < sources.txt   # bfloat16 matmuls, docs/bf16.md\n"
      "  tfm translate --model runs/mt-int8 < sources.txt   # a quantized directory runs int8, docs/int8.md\n"
      "  tfm translate --model runs/mt --sample --top-p 0.9 --seed 7 < sources.txt\n"
      "  tfm translate --model runs/spell --max-len 200 < numbers.txt   # outputs longer than 2·source + 10\n"
      "With --sample, input line i draws its tokens from its own random stream (seed, i), so the output\n"
      "does not depend on --batch-size or --threads.\n"
      "Lines are translated as soon as no more input is at hand (or 64·--batch-size lines are waiting), so\n"
      "a program may write a line and wait for its translation. When outputs stop at the length limit\n"
      "without an end token, a note on stderr says how many (--max-len raises the limit).");
  struct Opts {  // the defaults are the library's
    std::string model;
    DecodeOptions decode;
    double temperature = DecodeOptions{}.sampling.temperature;  // read as a double, then float32_option's float
    int64_t batch_size = kDecodeBatchSize;
    int threads = 0;
    std::string dtype;  // empty: the directory's (model_dtype)
    bool no_mmap = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--model", o->model, "trained model directory")->required();
  cmd->add_option("--beam", o->decode.beam, "beam size (1 = greedy)")->capture_default_str();
  cmd->add_option("--max-len", o->decode.max_len, MAX_LEN_HELP)->capture_default_str();
  cmd->add_option("--batch-size", o->batch_size, "sources decoded together")->capture_default_str();
  cmd->add_option("--threads", o->threads, std::string("threads (default ") + tfm::kThreadsZero + ")");
  cmd->add_option("--dtype", o->dtype, MODEL_DTYPE_HELP)->type_name(choices_type<Precision>());
  cmd->add_flag("--no-mmap", o->no_mmap, NO_MMAP_HELP);
  cmd->add_flag("--sample", o->decode.sample, "sample each token instead of searching (needs --beam 1)");
  auto* temperature =
      cmd->add_option("--temperature", o->temperature, "with --sample: softmax temperature (0 = greedy)")
          ->capture_default_str();
  auto* top_k =
      cmd->add_option("--top-k", o->decode.sampling.top_k, "with --sample: keep the K likeliest tokens (0 = all)")
          ->capture_default_str();
  auto* top_p = cmd->add_option("--top-p", o->decode.sampling.top_p,
                                "with --sample: keep the likeliest tokens of total probability ≥ P")
                    ->capture_default_str();
  auto* seed = cmd->add_option("--seed", o->decode.seed, "with --sample: random seed")
                   ->check(kNonNegative)
                   ->capture_default_str();
  cmd->callback([o, &run, temperature, top_k, top_p, seed] {
    for (const auto* opt : {temperature, top_k, top_p, seed})
      if (opt->count() > 0 && !o->decode.sample) throw CLI::ValidationError(opt->get_name(), "needs --sample");
    run = [o] {
      apply_threads(o->threads);
      DecodeOptions decode = o->decode;
      decode.sampling.temperature = float32_option(o->temperature, "--temperature");
      check_decode_options(decode);  // before the model is loaded
      if (o->batch_size < 1) throw std::invalid_argument("--batch-size must be ≥ 1");
      if (!o->dtype.empty()) dtype_name(o->dtype);  // a bad name fails before the load
      const TrainedModel m = load_model_dir(o->model, weights_load(o->no_mmap));
      const InferenceMode scope(model_dtype(o->dtype, m));  // weights packed once for the stream
      flush_notes();
      require_data(m, DataKind::PAIRS, "sample from it with tfm generate");
      check_decode_options(m, decode);  // before any input is read
      const size_t chunk = static_cast<size_t>(o->batch_size) * 64;
      std::vector<std::string> lines;
      std::string line;
      int64_t done = 0, truncated = 0, unknown = 0;
      const auto flush = [&] {
        int64_t cut = 0;
        // `done` places the chunk in the stream: line numbers in errors and the sampling streams.
        const auto write = [](const std::vector<std::string>& out) {
          for (const auto& s : out) std::fwrite(s.data(), 1, s.size(), stdout), std::fputc('\n', stdout);
        };
        try {
          write(translate_lines(m, lines, decode, o->batch_size, static_cast<uint64_t>(done), &cut, &unknown));
        } catch (const BadInputLine& e) {  // the lines before it are printed, then the error ends the run
          write(e.translated);
          check_stdout();
          throw;
        }
        check_stdout();  // a full disk stops the run here, not after the rest of the input
        done += static_cast<int64_t>(lines.size());
        truncated += cut;
        lines.clear();
      };
      StdinLines in(data::reads_utf8(m.src_tokenizer.kind()));
      for (;;) {
        if (!lines.empty() && !in.ready()) flush();  // the writer may be waiting for these
        if (!in.next(line)) break;
        lines.push_back(line);
        if (lines.size() == chunk) flush();
      }
      if (!lines.empty()) flush();
      if (const std::string note = unknown_note(unknown); !note.empty()) std::fprintf(stderr, "tfm: note: %s\n", note.c_str());
      note_truncated(truncated, done, decode.max_len, m);
      return 0;
    };
  });
}

}  // namespace tfm::cli
