#include "greedy_trace.h"

#include "longscope/sampler.h"

#include <span>

namespace longscope::test {

Trace run_greedy(const Model &m, const std::vector<int32_t> &prompt, int n_new, const Settings &s, int n_ctx,
                 const std::function<void(Session &, int)> &between, const std::vector<int32_t> &forced)
{
    SessionOptions o;
    o.n_ctx = n_ctx;
    o.n_threads = 2;
    o.settings = s;
    Session session(m, o);
    Trace t;
    session.set_metrics_callback([&](const StepMetrics &sm) { t.metrics.push_back(sm); });
    auto l = session.eval(prompt);
    t.logits.emplace_back(l.begin(), l.end());
    for (int i = 0; i < n_new; ++i) {
        const int32_t id = i < int(forced.size()) ? forced[size_t(i)] : argmax(t.logits.back());
        t.tokens.push_back(id);
        if (between)
            between(session, i);
        auto next = session.eval(std::span<const int32_t>(&id, 1));
        t.logits.emplace_back(next.begin(), next.end());
    }
    t.note = session.backend_note();
    return t;
}

} // namespace longscope::test
