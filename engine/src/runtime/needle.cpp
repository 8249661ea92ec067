#include "longscope/needle.h"

#include "core/system_memory.h"
#include "longscope/errors.h"
#include "longscope/tokenizer.h"
#include "runtime/token_scores.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace longscope {

namespace {

constexpr int k_max_trials = 1000;
constexpr int k_max_length = 1 << 24;
// How far a needle may move to land on a sentence boundary of a book.
constexpr int k_book_snap = 64;

// llama.cpp's passkey layout (examples/passkey): an instruction, filler, the key, the question.
constexpr std::string_view k_intro = "There is an important info hidden inside a lot of irrelevant text. Find it and "
                                     "memorize it. I will quiz you about the important information there.\n";
constexpr std::string_view k_filler =
    "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.\n";
constexpr std::string_view k_names[] = {"Juniper", "Marigold", "Biscuit", "Pepper", "Thistle",
                                        "Clementine", "Waffles", "Sorrel", "Bramble", "Nutmeg"};

uint64_t mix(uint64_t x)
{
    // splitmix64's finaliser.
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

// Every cell of one trial hides the same needle: the cells differ only in length and depth.
uint64_t trial_key(uint64_t seed, int trial) { return mix(mix(seed) ^ uint64_t(trial)); }

bool ends_sentence(const Tokenizer &tok, int32_t id)
{
    const std::string &b = tok.token_bytes(id);
    return !b.empty() && (b.back() == '.' || b.back() == '!' || b.back() == '?' || b.back() == '\n');
}

// The parts of a prompt that do not depend on the length or depth.
struct NeedleParts {
    std::vector<int32_t> head;     // BOS and the passkey's instruction
    std::vector<int32_t> needle;
    std::vector<int32_t> question;
    std::vector<int32_t> answer;
    std::vector<int32_t> filler;   // the passkey's filler sentence
    NeedleText text;
    int fixed() const { return int(head.size() + needle.size() + question.size() + answer.size()); }
};

NeedleParts needle_parts(const Tokenizer &tok, const NeedleOptions &o, int trial)
{
    const NeedleTask task = o.task;
    NeedleParts p;
    p.text = o.text ? *o.text : needle_text(task, trial_key(o.seed, trial));
    if (tok.add_bos_default() && tok.bos_id() >= 0)
        p.head.push_back(tok.bos_id());
    if (task == NeedleTask::Passkey) {
        const auto intro = tok.encode(k_intro, false);
        p.head.insert(p.head.end(), intro.begin(), intro.end());
        p.filler = tok.encode(k_filler, false);
    }
    p.needle = tok.encode(p.text.needle, false);
    // The answer is what the question and answer tokenize to beyond the question alone, so
    // prompt + answer reads as one text.
    p.question = tok.encode(p.text.question, false);
    const auto qa = tok.encode(p.text.question + p.text.answer, false);
    if (qa.size() > p.question.size() && std::equal(p.question.begin(), p.question.end(), qa.begin()))
        p.answer.assign(qa.begin() + std::ptrdiff_t(p.question.size()), qa.end());
    else
        p.answer = tok.encode(p.text.answer, false);
    if (p.answer.empty())
        throw InvalidArgument("the needle's answer \"" + p.text.answer + "\" has no tokens");
    return p;
}

// "0.5", "1.5", "-0.25": as short as the number allows.
std::string number(double v)
{
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    return buf;
}

std::string outside(double depth) { return "the needle depth " + number(depth) + " is outside 0..1"; }

std::string too_short(int length, int fixed)
{
    return "the length " + std::to_string(length) + " is too short: the needle, question and answer take " +
           std::to_string(fixed) + " tokens and the haystack needs at least 1";
}

} // namespace

std::string_view to_string(NeedleTask task) { return task == NeedleTask::Book ? "book" : "passkey"; }

std::optional<NeedleTask> parse_needle_task(std::string_view s)
{
    if (s == "passkey")
        return NeedleTask::Passkey;
    if (s == "book")
        return NeedleTask::Book;
    return std::nullopt;
}

NeedleText needle_text(NeedleTask task, uint64_t key)
{
    if (task == NeedleTask::Passkey) {
        const std::string k = std::to_string(10000 + key % 90000);
        return {"The pass key is " + k + ". Remember it. " + k + " is the pass key.\n",
                "What is the pass key? The pass key is", " " + k};
    }
    const std::string name(k_names[key % std::size(k_names)]);
    return {"The lighthouse keeper's cat is called " + name + ".",
            "What is the lighthouse keeper's cat called? The cat is called", " " + name};
}

NeedlePrompt build_needle_prompt(const Tokenizer &tok, const NeedleOptions &o, int length, double depth, int trial)
{
    if (!(depth >= 0.0 && depth <= 1.0))
        throw InvalidArgument(outside(depth));
    const NeedleParts p = needle_parts(tok, o, trial);
    const int hay = length - p.fixed();
    if (hay < 1)
        throw InvalidArgument(too_short(length, p.fixed()));

    // The haystack's tokens and where a sentence ends (the needle goes at a boundary).
    std::vector<int32_t> source;
    std::function<bool(int)> boundary;
    int snap = 0;
    if (o.task == NeedleTask::Passkey) {
        const int unit = int(p.filler.size());
        if (unit < 1)
            throw InvalidArgument("the filler text has no tokens");
        source.reserve(size_t(hay));
        while (int(source.size()) < hay)
            source.insert(source.end(), p.filler.begin(),
                          p.filler.begin() + std::min<std::ptrdiff_t>(unit, hay - std::ptrdiff_t(source.size())));
        boundary = [unit](int j) { return j % unit == 0; };
        snap = unit;
    } else {
        if (int(o.book.size()) < hay)
            throw InvalidArgument("the book has " + std::to_string(o.book.size()) + " tokens; a prompt of " +
                                  std::to_string(length) + " needs " + std::to_string(hay) + " of them");
        source.assign(o.book.begin(), o.book.begin() + hay);
        boundary = [&](int j) { return ends_sentence(tok, source[size_t(j - 1)]); };
        snap = k_book_snap;
    }
    const int target = int(std::lround(depth * hay));
    int at = target;
    for (int d = 0; d <= snap; ++d) {
        const auto ok = [&](int j) { return j >= 0 && j <= hay && (j == 0 || j == hay || boundary(j)); };
        if (ok(target - d)) {
            at = target - d;
            break;
        }
        if (ok(target + d)) {
            at = target + d;
            break;
        }
    }

    NeedlePrompt out;
    out.text = p.text;
    out.prompt = p.head;
    out.prompt.reserve(size_t(length));
    out.haystack_begin = int(out.prompt.size());
    out.prompt.insert(out.prompt.end(), source.begin(), source.begin() + at);
    out.needle_begin = int(out.prompt.size());
    out.needle_length = int(p.needle.size());
    out.prompt.insert(out.prompt.end(), p.needle.begin(), p.needle.end());
    out.prompt.insert(out.prompt.end(), source.begin() + at, source.end());
    out.haystack_end = int(out.prompt.size());
    out.prompt.insert(out.prompt.end(), p.question.begin(), p.question.end());
    out.answer = p.answer;
    out.depth = double(at) / double(hay);
    return out;
}

void validate_needle_options(const Model &model, const NeedleOptions &o)
{
    if (o.lengths.empty())
        throw InvalidArgument("the needle grid has no lengths");
    if (o.depths.empty())
        throw InvalidArgument("the needle grid has no depths");
    for (double d : o.depths)
        if (!(d >= 0.0 && d <= 1.0))
            throw InvalidArgument(outside(d));
    if (o.trials < 1 || o.trials > k_max_trials)
        throw InvalidArgument("the trials per cell must be 1.." + std::to_string(k_max_trials) + ", got " +
                              std::to_string(o.trials));
    if (o.batch < 1)
        throw InvalidArgument("the batch size must be positive");
    const size_t cells = o.lengths.size() * o.depths.size();
    if (cells > size_t(k_max_needle_cells))
        throw InvalidArgument("the needle grid has " + std::to_string(cells) + " cells, more than " +
                              std::to_string(k_max_needle_cells));
    const auto [shortest, longest] = std::minmax_element(o.lengths.begin(), o.lengths.end());
    if (*shortest < 1 || *longest > k_max_length)
        throw InvalidArgument("a needle length must be 1.." + std::to_string(k_max_length) + " tokens, got " +
                              std::to_string(*shortest < 1 ? *shortest : *longest));
    const Tokenizer &tok = model.tokenizer();
    for (int t = 0; t < o.trials; ++t) {
        const NeedleParts p = needle_parts(tok, o, t);
        if (*shortest - p.fixed() < 1)
            throw InvalidArgument(too_short(*shortest, p.fixed()));
        if (o.task == NeedleTask::Book && int(o.book.size()) < *longest - p.fixed())
            throw InvalidArgument("the book has " + std::to_string(o.book.size()) + " tokens; a prompt of " +
                                  std::to_string(*longest) + " needs " + std::to_string(*longest - p.fixed()) +
                                  " of them");
    }
    // The KV cache of the longest prompt (F16 keys and values, every layer) against what the
    // process can still commit.
    const HParams &hp = model.hparams();
    const double kv_bytes = 2.0 * 2.0 * double(hp.n_layer) * double(hp.n_embd_kv()) * double(*longest);
    const uint64_t left = available_memory_bytes();
    if (left != UINT64_MAX && kv_bytes > double(left)) {
        constexpr double mib = 1024.0 * 1024.0;
        throw InvalidArgument("the longest needle length, " + std::to_string(*longest) + " tokens, needs " +
                              std::to_string(int64_t(kv_bytes / mib)) + " MiB of KV cache, more than the " +
                              std::to_string(int64_t(double(left) / mib)) + " MiB of memory left");
    }
}

NeedleResult needle_grid(const Model &model, const NeedleOptions &o)
{
    validate_needle_options(model, o);
    const Tokenizer &tok = model.tokenizer();
    const int longest = *std::max_element(o.lengths.begin(), o.lengths.end());
    SessionOptions so;
    so.n_threads = o.n_threads;
    so.settings = o.settings;
    so.settings.context_limit = longest;
    Session session(model, so);
    if (o.metrics)
        session.set_metrics_callback(o.metrics);

    NeedleResult r;
    r.n_ctx = session.n_ctx();
    r.n_ctx_train = model.hparams().n_ctx_train;
    int64_t total = 0, done = 0;
    for (int len : o.lengths)
        total += int64_t(len - 1) * int64_t(o.depths.size()) * o.trials;
    const size_t v = size_t(model.hparams().n_vocab);
    std::vector<float> last(v);
    for (int len : o.lengths)
        for (double depth : o.depths)
            r.cells.push_back(NeedleCell{len, depth});

    for (int t = 0; t < o.trials && !r.cancelled; ++t)
        for (NeedleCell &cell : r.cells) {
            const NeedlePrompt p = build_needle_prompt(tok, o, cell.length, cell.depth, t);
            session.reset();
            for (size_t pos = 0; pos < p.prompt.size() && !r.cancelled; pos += size_t(o.batch)) {
                const size_t n = std::min(size_t(o.batch), p.prompt.size() - pos);
                const auto logits = session.eval(std::span<const int32_t>(p.prompt.data() + pos, n), false);
                std::copy(logits.begin(), logits.end(), last.begin());
                done += int64_t(n);
                if (o.progress && !o.progress(done, total))
                    r.cancelled = true;
            }
            if (r.cancelled)
                break;
            // Teacher forcing: the logits after the question predict the answer's first token,
            // those after each answer token the next.
            double lp = token_log_prob(last, p.answer[0]);
            bool greedy = greedy_token(last) == p.answer[0];
            if (p.answer.size() > 1) {
                const auto logits = session.eval(std::span<const int32_t>(p.answer).first(p.answer.size() - 1), true);
                for (size_t k = 0; k + 1 < p.answer.size(); ++k) {
                    const auto row = logits.subspan(k * v, v);
                    lp += token_log_prob(row, p.answer[k + 1]);
                    greedy = greedy && greedy_token(row) == p.answer[k + 1];
                }
                done += int64_t(p.answer.size() - 1);
            }
            // Running means over the trials.
            const double n = double(++cell.trials);
            cell.log_prob += (lp - cell.log_prob) / n;
            cell.probability += (std::exp(lp) - cell.probability) / n;
            cell.mean_token_log_prob += (lp / double(p.answer.size()) - cell.mean_token_log_prob) / n;
            cell.actual_depth += (p.depth - cell.actual_depth) / n;
            cell.answer_tokens += (double(p.answer.size()) - cell.answer_tokens) / n;
            cell.retrieved += greedy ? 1 : 0;
        }
    return r;
}

} // namespace longscope
