#include "longscope/perplexity.h"

#include "longscope/errors.h"
#include "runtime/token_scores.h"

#include <algorithm>
#include <cmath>

namespace longscope {

double PositionBucket::perplexity() const { return std::exp(mean_nll); }
double PerplexityResult::perplexity() const { return std::exp(mean_nll); }

namespace {

// Adds one scored token.
void score(PerplexityResult &r, double &sum, std::span<const float> logits, int32_t target, int position)
{
    const double nll = -token_log_prob(logits, target);
    r.positions.push_back(position);
    r.nll.push_back(float(nll));
    sum += nll;
    ++r.n_scored;
}

// Windows of ctx tokens, each from an empty context (see perplexity.h).
double score_windows(Session &session, const Model &model, std::span<const int32_t> tokens,
                     const PerplexityOptions &o, PerplexityResult &r)
{
    const int bos = model.tokenizer().bos_id();
    const int ctx = session.n_ctx();
    // Each window is BOS + up to ctx - 1 text tokens; the stride counts text tokens.
    const int per_window = ctx - (bos >= 0 ? 1 : 0);
    const int stride = o.stride > 0 ? o.stride : per_window;
    if (stride > per_window)
        throw InvalidArgument("the stride " + std::to_string(stride) + " is longer than the " +
                              std::to_string(per_window) + " text tokens of a window");

    // Text token i is scored once, in the first window where it is new.
    const int64_t n = int64_t(tokens.size());
    int64_t total = 0;
    for (int64_t start = 0, scored_to = 0; scored_to < n; start += stride) {
        const int64_t end = std::min(n, start + per_window);
        total += end - std::max(scored_to, start);
        scored_to = end;
        if (end == n)
            break;
    }

    double sum = 0;
    const size_t v = size_t(model.hparams().n_vocab);
    int64_t scored_to = 0; // text tokens [0, scored_to) are scored
    for (int64_t start = 0; scored_to < n && !r.cancelled; start += stride) {
        const int64_t end = std::min(n, start + per_window);
        std::vector<int32_t> window;
        if (bos >= 0)
            window.push_back(bos);
        window.insert(window.end(), tokens.begin() + start, tokens.begin() + end);
        const int offset = bos >= 0 ? 1 : 0; // window index of text token `start`
        const int64_t first_new = std::max(scored_to, start);
        session.reset();
        // Step through the window `batch` tokens at a time (auto alpha follows the length
        // so far); logits at window index j predict window index j + 1.
        for (size_t pos = 0; pos < window.size() && !r.cancelled; pos += size_t(o.batch)) {
            const size_t len = std::min(size_t(o.batch), window.size() - pos);
            auto logits = session.eval(std::span<const int32_t>(window.data() + pos, len), true);
            for (size_t k = 0; k < len; ++k) {
                const size_t j = pos + k;          // window index of the context's last token
                if (j + 1 >= window.size())
                    break;
                const int64_t text_index = start + int64_t(j + 1) - offset;
                if (text_index < first_new)
                    continue;
                score(r, sum, logits.subspan(k * v, v), window[j + 1], int(j + 1));
            }
            if (o.progress && !o.progress(r.n_scored, total))
                r.cancelled = true;
        }
        ++r.windows;
        scored_to = end;
    }
    return sum;
}

// The text as one stream (see PerplexityOptions::stream).
double score_stream(Session &session, const Model &model, std::span<const int32_t> tokens,
                    const PerplexityOptions &o, PerplexityResult &r)
{
    std::vector<int32_t> seq;
    if (const int bos = model.tokenizer().bos_id(); bos >= 0)
        seq.push_back(bos);
    seq.insert(seq.end(), tokens.begin(), tokens.end());
    const int64_t total = int64_t(seq.size()) - 1; // seq[j + 1] is predicted after seq[j]
    const size_t v = size_t(model.hparams().n_vocab);
    double sum = 0;
    r.windows = 1;
    for (int64_t pos = 0; pos < total && !r.cancelled;) {
        // A step never spans a shift, so its tokens end up as the context's last `len`: at a
        // full context one token goes in (the shift comes first), else what fits.
        const int room = session.n_ctx() - session.n_past();
        const size_t len = size_t(std::min<int64_t>({o.batch, total - pos, std::max(1, room)}));
        std::span<const float> logits;
        try {
            logits = session.eval(std::span<const int32_t>(seq.data() + pos, len), true);
        } catch (const ContextOverflow &e) {
            r.stopped = e.what();
            break;
        }
        const int first = session.n_past() - int(len); // context index of the step's first token
        for (size_t k = 0; k < len; ++k)
            score(r, sum, logits.subspan(k * v, v), seq[size_t(pos) + k + 1], first + int(k) + 1);
        pos += int64_t(len);
        if (o.progress && !o.progress(r.n_scored, total))
            r.cancelled = true;
    }
    return sum;
}

// Mean NLL per bucket of `bucket` keys, key(i) in [0, max_key] for scored token i; empty
// buckets are left out, the last one ends at max_key + 1.
template <class Key>
std::vector<PositionBucket> bucket_nll(const std::vector<float> &nll, Key key, int64_t max_key, int bucket)
{
    const size_t n_buckets = size_t(max_key / bucket + 1);
    std::vector<double> sum(n_buckets, 0.0);
    std::vector<int64_t> count(n_buckets, 0);
    for (size_t i = 0; i < nll.size(); ++i) {
        const size_t b = size_t(key(i) / bucket);
        sum[b] += nll[i];
        ++count[b];
    }
    std::vector<PositionBucket> out;
    for (size_t b = 0; b < n_buckets; ++b) {
        if (!count[b])
            continue;
        PositionBucket pb;
        pb.begin = int(int64_t(b) * bucket);
        pb.end = int(std::min<int64_t>(max_key + 1, int64_t(b + 1) * bucket));
        pb.count = count[b];
        pb.mean_nll = sum[b] / double(pb.count);
        out.push_back(pb);
    }
    return out;
}

} // namespace

PerplexityResult perplexity(const Model &model, std::span<const int32_t> tokens, const PerplexityOptions &o)
{
    SessionOptions so;
    so.n_threads = o.n_threads;
    so.settings = o.settings;
    so.settings.context_limit = o.ctx;
    Session session(model, so);
    if (o.metrics)
        session.set_metrics_callback(o.metrics);
    const int ctx = session.n_ctx();
    if (ctx < 2)
        throw InvalidArgument("the perplexity window must hold at least 2 tokens");
    if (o.batch < 1 || o.bucket < 1)
        throw InvalidArgument("batch and bucket sizes must be positive");
    if (tokens.size() < 2)
        throw InvalidArgument("the text is too short to score (fewer than 2 tokens)");

    PerplexityResult r;
    const bool stream = o.stream || o.settings.overflow == OverflowPolicy::Shift;
    const double sum = stream ? score_stream(session, model, tokens, o, r) : score_windows(session, model, tokens, o, r);
    r.mean_nll = r.n_scored ? sum / double(r.n_scored) : 0;

    // The curve: mean NLL by position bucket. A streamed token can have a full context
    // before it (position ctx); in a window at most ctx - 1 tokens.
    const int max_pos = stream ? ctx : ctx - 1;
    r.curve = bucket_nll(r.nll, [&](size_t i) { return int64_t(r.positions[i]); }, max_pos, o.bucket);
    // Every text token is scored once, in order, from the first (the second without a BOS to
    // predict it from).
    const int64_t first = model.tokenizer().bos_id() >= 0 ? 0 : 1;
    r.text_curve = bucket_nll(r.nll, [first](size_t i) { return first + int64_t(i); }, int64_t(tokens.size()) - 1, o.bucket);
    return r;
}

} // namespace longscope
