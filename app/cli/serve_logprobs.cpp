#include "serve_logprobs.h"

#include "longscope/model.h"
#include "longscope/tokenizer.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace longscope::cli {

namespace {

// log sum exp of the logits, in double.
double log_normalizer(std::span<const float> logits)
{
    double m = -INFINITY;
    for (float x : logits)
        m = std::max(m, double(x));
    double sum = 0;
    for (float x : logits)
        sum += std::exp(double(x) - m);
    return m + std::log(sum);
}

} // namespace

std::vector<api::TokenLogprob> score_tokens(Session &session, std::span<const int32_t> tokens, int top_n, int step)
{
    const Tokenizer &tok = session.model().tokenizer();
    const size_t n_vocab = size_t(session.model().hparams().n_vocab);
    // The model's vocabulary may be padded past the tokenizer's: those ids spell nothing.
    auto text_of = [&](int32_t id) { return id < tok.n_vocab() ? tok.token_bytes(id) : std::string(); };
    std::vector<api::TokenLogprob> out(tokens.size());
    for (size_t i = 0; i < tokens.size(); ++i)
        out[i].text = text_of(tokens[i]);
    session.reset();
    std::vector<int32_t> order;
    for (size_t pos = 0; pos < tokens.size(); pos += size_t(step)) {
        const size_t len = std::min(size_t(step), tokens.size() - pos);
        const std::span<const float> logits = session.eval(tokens.subspan(pos, len), true);
        for (size_t k = 0; k < len; ++k) {
            const size_t next = pos + k + 1; // the logits at pos + k predict this token
            if (next >= tokens.size())
                break;
            const std::span<const float> row = logits.subspan(k * n_vocab, n_vocab);
            const double norm = log_normalizer(row);
            out[next].logprob = double(row[size_t(tokens[next])]) - norm;
            if (top_n <= 0)
                continue;
            order.resize(n_vocab);
            std::iota(order.begin(), order.end(), 0);
            const size_t n = std::min(size_t(top_n), n_vocab);
            std::partial_sort(order.begin(), order.begin() + std::ptrdiff_t(n), order.end(),
                              [&](int32_t a, int32_t b) { return row[size_t(a)] > row[size_t(b)]; });
            for (size_t t = 0; t < n; ++t)
                out[next].top.emplace_back(text_of(order[t]), double(row[size_t(order[t])]) - norm);
        }
    }
    return out;
}

} // namespace longscope::cli
