// Needle in a haystack: a fact hidden at a depth of a long prompt and asked about at its end,
// over a grid of prompt lengths x needle depths. Each cell reports how likely the model finds
// the answer (its tokens teacher-forced after the question) and whether greedy decoding
// retrieves it. Two haystacks: the passkey task (a number in repeated filler sentences, as
// llama.cpp's passkey example lays it out) and a fact sentence inserted into a book.
#pragma once

#include "longscope/engine.h"

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace longscope {

class Tokenizer;

enum class NeedleTask {
    Passkey, // "The pass key is 12345" in filler text; asked "What is the pass key?"
    Book,    // "The lighthouse keeper's cat is called Juniper." in a book; asked the name
};

std::string_view to_string(NeedleTask task); // "passkey", "book"
std::optional<NeedleTask> parse_needle_task(std::string_view s);

// The most cells (lengths x depths) one grid may have.
inline constexpr int k_max_needle_cells = 4096;

// The text of one needle: the sentence hidden, the question at the end, the answer expected.
struct NeedleText {
    std::string needle;
    std::string question;
    std::string answer; // what follows the question: " 48271", " Juniper"
};

struct NeedleOptions {
    NeedleTask task = NeedleTask::Passkey;
    // Prompt lengths in tokens: BOS, haystack, needle, question and the answer together.
    std::vector<int> lengths;
    // Where the needle starts in the haystack: 0 its start, 1 its end. Snapped to the nearest
    // sentence boundary (a filler sentence; in a book, a token ending in . ! ? or a newline,
    // within 64 tokens).
    std::vector<double> depths;
    int trials = 1;      // needles per cell, each with its own answer
    uint64_t seed = 1;   // the needle of trial t is a function of the seed and t: every cell of
                         // one trial hides the same needle
    // NeedleTask::Book: the book's tokens (no BOS); the haystack is its first tokens.
    std::vector<int32_t> book;
    // A needle of one's own instead of the task's (the same in every trial); its answer must
    // not be empty.
    std::optional<NeedleText> text;
    int batch = 256;     // prompt tokens per evaluation step
    int n_threads = 0;
    Settings settings;   // context_limit is set to the longest length
    // After each evaluation step: tokens evaluated so far and the total; false cancels (the
    // result then holds the trials finished).
    std::function<bool(int64_t done, int64_t total)> progress;
    MetricsCallback metrics;
};

// The needle for `key` (any number: the passkey is 10000 + key % 90000; the book's fact names
// one of a list of names).
NeedleText needle_text(NeedleTask task, uint64_t key);

struct NeedlePrompt {
    std::vector<int32_t> prompt; // BOS (when the model adds it), haystack with the needle, question
    std::vector<int32_t> answer; // the answer's tokens, right after the prompt
    int haystack_begin = 0;      // prompt indices: the haystack spans [begin, end) with the needle
    int haystack_end = 0;
    int needle_begin = 0;        // prompt index of the needle's first token
    int needle_length = 0;
    double depth = 0;            // where the needle landed: haystack tokens before it / all of them
    NeedleText text;
};

// The prompt of one trial of one cell (prompt + answer is exactly `length` tokens). Throws
// InvalidArgument when the length cannot hold the needle, question and answer, or the book
// is too short.
NeedlePrompt build_needle_prompt(const Tokenizer &tokenizer, const NeedleOptions &options, int length, double depth,
                                 int trial);

struct NeedleCell {
    int length = 0;
    double depth = 0;        // as asked
    double actual_depth = 0; // where the needles landed (mean over the trials)
    int trials = 0;          // trials scored (fewer than asked when cancelled)
    double answer_tokens = 0; // mean over the trials
    // Teacher-forced: log p(answer) = sum over the answer's tokens of log p(token | prompt and
    // the answer's tokens before it), in nats; the mean over the trials.
    double log_prob = 0;
    // The answer's probability: exp(log p(answer)), the product of its tokens' probabilities;
    // the mean over the trials. In [0, 1]; this is what the heatmaps colour.
    double probability = 0;
    // log p(answer) / answer tokens (mean over the trials): the per-token view.
    double mean_token_log_prob = 0;
    // Trials in which greedy decoding after the question yields the answer: the most likely
    // token at every answer position is the answer's.
    int retrieved = 0;
};

struct NeedleResult {
    int n_ctx = 0;   // the session's context (the longest length)
    int n_ctx_train = 0;
    bool cancelled = false;
    // lengths-major: cells[i * depths.size() + j] is lengths[i] x depths[j].
    std::vector<NeedleCell> cells;
};

// Throws InvalidArgument with one line naming what is wrong: no lengths or depths, a depth
// outside 0..1, a length too short for the needle, question and answer (with its token count),
// a book shorter than the longest haystack, more than k_max_needle_cells cells, more trials
// than 1000, a longest length whose KV cache cannot fit in the memory left.
void validate_needle_options(const Model &model, const NeedleOptions &options);

// Runs the grid on a session of its own. Validates first (above).
NeedleResult needle_grid(const Model &model, const NeedleOptions &options);

} // namespace longscope
