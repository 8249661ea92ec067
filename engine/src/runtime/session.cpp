#include "longscope/engine.h"

#include "cpu/cpu_forward.h"
#include "longscope/errors.h"

#include <chrono>
#include <thread>

namespace longscope {

Session::Session(const Model &model, const SessionOptions &options) : m_model(model)
{
    if (options.n_ctx < 0)
        throw InvalidArgument("context limit must be positive, got " + std::to_string(options.n_ctx));
    if (options.n_threads < 0 || options.n_threads > 1024)
        throw InvalidArgument("thread count must be between 1 and 1024, got " +
                              std::to_string(options.n_threads));
    // The trained context is the default, not a ceiling: a larger limit is allowed. The
    // default is capped so that a model trained on 128K tokens does not reserve a huge cache
    // nobody asked for.
    m_n_ctx = options.n_ctx > 0 ? options.n_ctx : std::min(model.hparams().n_ctx_train, k_default_ctx_cap);
    if (m_n_ctx > (1 << 24))
        throw InvalidArgument("context limit " + std::to_string(m_n_ctx) + " is too large");
    int threads = options.n_threads;
    if (threads == 0)
        threads = std::max(1, int(std::thread::hardware_concurrency()));
    m_forward = std::make_unique<CpuForward>(model, m_n_ctx, threads);
}

Session::~Session() = default;

int Session::n_past() const { return int(m_history.size()); }
int Session::n_threads() const { return m_forward->n_threads(); }

void Session::reset() { m_history.clear(); }

std::span<const float> Session::eval(std::span<const int32_t> tokens, bool all_logits)
{
    if (tokens.empty())
        throw InvalidArgument("nothing to evaluate: the token list is empty");
    const int n_vocab = m_model.hparams().n_vocab;
    for (int32_t id : tokens)
        if (id < 0 || id >= n_vocab)
            throw InvalidArgument("token id " + std::to_string(id) + " is outside the vocabulary of " +
                                  std::to_string(n_vocab));
    if (int64_t(m_history.size()) + int64_t(tokens.size()) > m_n_ctx)
        throw ContextOverflow(std::to_string(m_history.size() + tokens.size()) +
                              " tokens do not fit in the context limit of " + std::to_string(m_n_ctx) +
                              " (raise it with --ctx)");
    auto logits = m_forward->eval(tokens, n_past(), all_logits);
    m_history.insert(m_history.end(), tokens.begin(), tokens.end());
    return logits;
}

double GenerateResult::prefill_tokens_per_second() const
{
    return prefill_seconds > 0 ? n_prompt / prefill_seconds : 0.0;
}

double GenerateResult::decode_tokens_per_second() const
{
    // The first generated token comes from the prefill logits; later ones each cost a step.
    const size_t steps = tokens.empty() ? 0 : tokens.size() - 1;
    return decode_seconds > 0 ? double(steps) / decode_seconds : 0.0;
}

GenerateResult generate(Session &session, const GenerateRequest &request, const TokenCallback &on_token)
{
    if (request.prompt.empty())
        throw InvalidArgument("the prompt is empty");
    if (request.max_new_tokens < 0)
        throw InvalidArgument("the number of tokens to generate must not be negative");
    request.sampling.validate();
    if (int64_t(request.prompt.size()) > session.n_ctx())
        throw ContextOverflow("the prompt has " + std::to_string(request.prompt.size()) +
                              " tokens, more than the context limit of " +
                              std::to_string(session.n_ctx()) + " (raise it with --ctx)");

    using clock = std::chrono::steady_clock;
    GenerateResult result;
    result.n_prompt = int(request.prompt.size());
    session.reset();
    Sampler sampler(request.sampling);
    TokenTextStream text(session.model().tokenizer());
    // A generated BOS ends the text too: models trained on concatenated documents (such as
    // the llama2.c stories) mark the start of the next document with BOS, never with EOS.
    const int32_t eos = session.model().tokenizer().eos_id();
    const int32_t bos = session.model().tokenizer().bos_id();

    auto t0 = clock::now();
    auto logits_span = session.eval(request.prompt);
    std::vector<float> logits(logits_span.begin(), logits_span.end());
    result.prefill_seconds = std::chrono::duration<double>(clock::now() - t0).count();

    auto t1 = clock::now();
    for (int i = 0; i < request.max_new_tokens; ++i) {
        const int32_t id = sampler.sample(logits, session.history());
        if (request.stop_at_eos && (id == eos || (bos >= 0 && id == bos))) {
            result.stop = StopReason::EndOfSequence;
            break;
        }
        result.tokens.push_back(id);
        std::string piece = text.push(id);
        result.text += piece;
        if (on_token && !on_token(id, piece)) {
            result.stop = StopReason::Cancelled;
            break;
        }
        if (i + 1 == request.max_new_tokens)
            break; // the last token needs no forward pass
        if (session.n_past() >= session.n_ctx()) {
            result.stop = StopReason::ContextFull;
            break;
        }
        auto next = session.eval(std::span<const int32_t>(&id, 1));
        logits.assign(next.begin(), next.end());
    }
    std::string tail = text.flush();
    if (!tail.empty()) {
        result.text += tail;
        if (on_token && result.stop != StopReason::Cancelled)
            on_token(-1, tail);
    }
    result.decode_seconds = std::chrono::duration<double>(clock::now() - t1).count();
    return result;
}

} // namespace longscope
