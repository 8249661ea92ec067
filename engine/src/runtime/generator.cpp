#include "longscope/generator.h"

#include "longscope/engine.h"
#include "longscope/errors.h"
#include "runtime/rope_base.h"
#include "runtime/stop_scanner.h"

#include <algorithm>
#include <chrono>
#include <limits>

namespace longscope {

double GenerateResult::prefill_tokens_per_second() const
{
    return prefill_seconds > 0 ? (n_prompt - n_cached) / prefill_seconds : 0.0;
}

double GenerateResult::decode_tokens_per_second() const
{
    // The first generated token comes from the prefill logits; later ones each cost a step.
    const size_t steps = tokens.empty() ? 0 : tokens.size() - 1;
    return decode_seconds > 0 ? double(steps) / decode_seconds : 0.0;
}

// ---------------------------------------------------------------------------------------------

SequenceDecoder::SequenceDecoder(const Tokenizer &tokenizer, const GenerateRequest &request, TokenCallback on_token)
    : m_sampler(request.sampling), m_text(tokenizer), m_stops(std::make_unique<StopScanner>(request.stop)),
      m_on_token(std::move(on_token)), m_cancelled(request.cancelled), m_id(request.id),
      m_max_new_tokens(request.max_new_tokens), m_keep_reply(request.keep_reply_in_context)
{
    if (request.end_tokens) {
        m_end_tokens = *request.end_tokens;
    } else if (request.stop_at_eos) {
        // The tokenizer's end-of-generation set (EOS, end of turn, ...). A generated BOS ends
        // the text too: models trained on concatenated documents (such as the llama2.c
        // stories) mark the start of the next document with BOS, never EOS.
        const auto eog = tokenizer.end_of_generation_ids();
        m_end_tokens.assign(eog.begin(), eog.end());
        if (tokenizer.bos_id() >= 0)
            m_end_tokens.push_back(tokenizer.bos_id());
    }
    m_done = m_max_new_tokens <= 0;
}

SequenceDecoder::~SequenceDecoder() = default;

void SequenceDecoder::end(StopReason reason)
{
    m_result.stop = reason;
    m_done = true;
}

void SequenceDecoder::deliver(int32_t id, const std::string &text)
{
    if (m_on_token && !m_refused && !m_on_token(id, text))
        m_refused = true;
}

bool SequenceDecoder::step(std::span<float> logits, std::span<const int32_t> history, int n_past, int n_ctx)
{
    if (m_done)
        return false;
    if (m_cancelled && m_cancelled(m_id)) {
        end(StopReason::Cancelled);
        return false;
    }
    if (int(m_result.tokens.size()) >= m_max_new_tokens) {
        end(StopReason::MaxTokens);
        return false;
    }
    // The reply is to stay in the context: a token that cannot be evaluated is not sampled.
    if (m_keep_reply && n_past >= n_ctx) {
        end(StopReason::ContextFull);
        return false;
    }
    const int32_t id = m_sampler.sample(logits, history);
    if (std::find(m_end_tokens.begin(), m_end_tokens.end(), id) != m_end_tokens.end()) {
        end(StopReason::EndOfSequence);
        return false;
    }
    m_result.tokens.push_back(id);
    const std::string released = m_stops->push(m_text.push(id));
    m_result.text += released;
    deliver(id, released);
    if (m_stops->stopped()) {
        end(StopReason::StopString);
        return false;
    }
    if (m_refused) {
        end(StopReason::Cancelled);
        return false;
    }
    // Without the reply kept, the last token needs no forward pass.
    if (!m_keep_reply && int(m_result.tokens.size()) >= m_max_new_tokens) {
        end(StopReason::MaxTokens);
        return false;
    }
    if (n_past >= n_ctx) {
        end(StopReason::ContextFull);
        return false;
    }
    m_next = id;
    return true;
}

GenerateResult SequenceDecoder::finish()
{
    const std::string tail = m_text.flush();
    std::string out;
    if (!m_stops->stopped()) {
        out = m_stops->push(tail);
        if (m_stops->stopped()) {
            if (m_result.stop != StopReason::Cancelled)
                m_result.stop = StopReason::StopString;
        } else {
            out += m_stops->finish();
        }
    }
    if (!out.empty()) {
        m_result.text += out;
        deliver(-1, out);
    }
    m_done = true;
    return std::move(m_result);
}

// ---------------------------------------------------------------------------------------------

void CancelRegistry::open(uint64_t id)
{
    std::lock_guard<std::mutex> lk(m_mutex);
    m_open[id] = false;
}

void CancelRegistry::close(uint64_t id)
{
    std::lock_guard<std::mutex> lk(m_mutex);
    m_open.erase(id);
}

bool CancelRegistry::cancel(uint64_t id)
{
    std::lock_guard<std::mutex> lk(m_mutex);
    auto it = m_open.find(id);
    if (it == m_open.end())
        return false;
    it->second = true;
    return true;
}

bool CancelRegistry::cancelled(uint64_t id) const
{
    std::lock_guard<std::mutex> lk(m_mutex);
    auto it = m_open.find(id);
    return it != m_open.end() && it->second;
}

// ---------------------------------------------------------------------------------------------

namespace {

// Whether the cached rows computed under `then` equal what `now` computes: the settings that
// change the numbers of a forward pass (the cache mode and the limit only move rows).
bool same_forward_pass(const Settings &now, const Settings &then)
{
    return now.rope.ntk_alpha == then.rope.ntk_alpha && now.rope.ntk_auto == then.rope.ntk_auto &&
           now.rope.scaling == then.rope.scaling && now.rope.scaling_factor == then.rope.scaling_factor &&
           now.rope.scaling_orig_ctx == then.rope.scaling_orig_ctx &&
           now.rope.store_kv_before_rope == then.rope.store_kv_before_rope &&
           now.attention.memory_efficient == then.attention.memory_efficient &&
           now.attention.causal_flash == then.attention.causal_flash && now.backend == then.backend &&
           now.kv_type_k == then.kv_type_k && now.kv_type_v == then.kv_type_v;
}

} // namespace

int reusable_prefix(const Session &session, std::span<const int32_t> prompt)
{
    const std::vector<int32_t> &history = session.history();
    if (history.empty() || prompt.size() < 2)
        return 0;
    const Settings &now = session.settings();
    const Settings &then = session.last_metrics().settings;
    if (!same_forward_pass(now, then))
        return 0;
    // Memory-efficient attention sums a row's keys in another order when it is one of a few
    // queries (a decode step: the keys split among workers) than inside a prompt chunk, and
    // the chunks of a reused tail start elsewhere than a fresh prompt's: rows and logits would
    // differ in the last bits (about 4e-6 on the bundled model). The CUDA backend's products
    // are not known to be independent of the number of tokens either.
    if (now.attention.memory_efficient || now.backend != ComputeBackend::Cpu)
        return 0;
    // Every step's RoPE base follows its sequence length under NTK alpha auto and dynamic
    // scaling: a row cached at another length was computed with another base (its key
    // rotation, and through attention every later layer's rows, keys cached before RoPE or
    // not). Reuse only when the base is the same at every length the context can have had.
    const HParams &hp = session.model().hparams();
    if (rope_follows_length(hp, now.rope)) {
        const int widest = std::max({session.n_ctx(), then.context_limit, int(history.size())});
        const RopeInEffect a = rope_in_effect(hp, now.rope, 1), b = rope_in_effect(hp, now.rope, widest);
        if (a.base != b.base || a.factors != b.factors)
            return 0;
    }
    const size_t limit = std::min({history.size(), prompt.size() - 1, size_t(session.exact_prefix())});
    size_t n = 0;
    while (n < limit && history[n] == prompt[n])
        ++n;
    return int(n);
}

GenerateResult generate(Session &session, const GenerateRequest &request, const TokenCallback &on_token)
{
    if (request.prompt.empty() && !request.continue_context)
        throw InvalidArgument("the prompt is empty");
    if (request.max_new_tokens < 0)
        throw InvalidArgument("the number of tokens to generate must not be negative");
    request.sampling.validate();
    const int64_t kept = request.continue_context ? session.n_past() : 0;
    if (kept + int64_t(request.prompt.size()) == 0)
        throw InvalidArgument("nothing to continue: the context is empty");
    // Under the shift policy the session makes room itself: nothing overflows.
    const auto shifting = [&] { return session.settings().overflow == OverflowPolicy::Shift; };
    if (!shifting() && kept + int64_t(request.prompt.size()) > session.n_ctx())
        throw ContextOverflow(request.continue_context
                                  ? "the context holds " + std::to_string(kept) + " tokens; " +
                                        std::to_string(request.prompt.size()) + " more do not fit in its limit of " +
                                        std::to_string(session.n_ctx()) + " (raise the context limit)"
                                  : "the prompt has " + std::to_string(request.prompt.size()) +
                                        " tokens, more than the context limit of " +
                                        std::to_string(session.n_ctx()) + " (raise the context limit)");

    // Settings that arrived meanwhile apply before the context is looked at: they decide
    // whether its prefix can be kept.
    if (request.before_step)
        request.before_step();

    const bool have_logits = request.continue_context && request.prompt.empty() && !request.context_logits.empty();
    if (have_logits && int64_t(request.context_logits.size()) != session.model().hparams().n_vocab)
        throw InvalidArgument("the context's logits hold " + std::to_string(request.context_logits.size()) +
                              " values, not one per vocabulary entry (" +
                              std::to_string(session.model().hparams().n_vocab) + ")");

    // What the context keeps, and what is evaluated.
    std::vector<int32_t> todo;
    int n_prompt = 0, n_cached = 0;
    if (request.continue_context) {
        n_cached = session.n_past();
        todo = request.prompt;
        if (todo.empty() && !have_logits) {
            // The logits of the last context token are evaluated again.
            todo.push_back(session.history().back());
            session.truncate(--n_cached);
        }
        n_prompt = n_cached + int(todo.size());
    } else {
        n_cached = request.reuse_prefix ? reusable_prefix(session, request.prompt) : 0;
        if (n_cached == 0)
            session.reset();
        else
            session.truncate(n_cached);
        todo.assign(request.prompt.begin() + n_cached, request.prompt.end());
        n_prompt = int(request.prompt.size());
    }

    using clock = std::chrono::steady_clock;
    SequenceDecoder decoder(session.model().tokenizer(), request, on_token);
    const auto t0 = clock::now();
    std::vector<float> logits;
    if (have_logits) {
        logits = request.context_logits;
    } else {
        const std::span<const float> first = session.eval(todo);
        logits.assign(first.begin(), first.end());
    }
    const double prefill_seconds = std::chrono::duration<double>(clock::now() - t0).count();

    const auto t1 = clock::now();
    // Sampling adjusts the logits in place; a caller that keeps the reply in the context gets
    // the last ones as evaluated, so sampling runs on a copy.
    std::vector<float> sampled;
    auto step = [&] {
        const int room = shifting() ? std::numeric_limits<int>::max() : session.n_ctx();
        if (!request.keep_reply_in_context)
            return decoder.step(logits, session.history(), session.n_past(), room);
        sampled = logits;
        return decoder.step(sampled, session.history(), session.n_past(), room);
    };
    while (step()) {
        if (request.before_step)
            request.before_step();
        const int32_t id = decoder.next_token();
        const std::span<const float> next = session.eval(std::span<const int32_t>(&id, 1));
        logits.assign(next.begin(), next.end());
    }
    GenerateResult result = decoder.finish();
    if (request.keep_reply_in_context)
        result.context_logits = std::move(logits);
    result.decode_seconds = std::chrono::duration<double>(clock::now() - t1).count();
    result.prefill_seconds = prefill_seconds;
    result.n_prompt = n_prompt;
    result.n_cached = n_cached;
    return result;
}

} // namespace longscope
