#include "longscope/metrics.h"

#include <cstdio>
#include <unistd.h>

namespace longscope {

std::string_view to_string(StepPhase p) { return p == StepPhase::Prefill ? "prefill" : "decode"; }

std::string metrics_csv_header()
{
    return "step,phase,n_tokens,position,seconds,tokens_per_second,ntk_alpha,ntk_auto,rope_base,"
           "kv_mode,kv_before_rope,memory_efficient,causal_flash,context_limit,weights,kv_reserved,"
           "kv_resident,scratch,total,peak_kv_reserved,peak_kv_resident,peak_scratch,peak_total,"
           "process_rss,kv_bytes_copied,attention_tiles_skipped,backend,device_used,device_free,kv_type_k,kv_type_v,threads";
}

std::string metrics_csv_row(const StepMetrics &m)
{
    const MemoryLedger &l = m.memory;
    const Settings &s = m.settings;
    char buf[1024];
    std::snprintf(buf, sizeof buf,
                  "%lld,%s,%d,%d,%.6f,%.3f,%.6g,%d,%.8g,%s,%d,%d,%d,%d,%llu,%llu,%llu,%llu,%llu,%llu,"
                  "%llu,%llu,%llu,%llu,%llu,%lld,%s,%llu,%llu,%s,%s,%d",
                  static_cast<long long>(m.step), to_string(m.phase).data(), m.n_tokens, m.position,
                  m.seconds, m.tokens_per_second, m.ntk_alpha, s.rope.ntk_auto ? 1 : 0, m.rope_base,
                  to_string(s.kv_mode).data(), s.rope.store_kv_before_rope ? 1 : 0,
                  s.attention.memory_efficient ? 1 : 0, s.attention.causal_flash ? 1 : 0,
                  s.context_limit, (unsigned long long)l.weights, (unsigned long long)l.kv_reserved,
                  (unsigned long long)l.kv_resident, (unsigned long long)l.scratch,
                  (unsigned long long)l.total, (unsigned long long)l.peak_kv_reserved,
                  (unsigned long long)l.peak_kv_resident, (unsigned long long)l.peak_scratch,
                  (unsigned long long)l.peak_total, (unsigned long long)l.process_rss,
                  (unsigned long long)l.kv_bytes_copied, static_cast<long long>(m.attention_tiles_skipped), to_string(s.backend).data(),
                  (unsigned long long)l.device_used, (unsigned long long)l.device_free, to_string(s.kv_type_k).data(),
                  to_string(s.kv_type_v).data(), m.threads);
    return buf;
}

uint64_t process_rss_bytes()
{
    FILE *f = std::fopen("/proc/self/statm", "r");
    if (!f)
        return 0;
    unsigned long long size = 0, resident = 0;
    const int got = std::fscanf(f, "%llu %llu", &size, &resident);
    std::fclose(f);
    if (got != 2)
        return 0;
    return uint64_t(resident) * uint64_t(sysconf(_SC_PAGESIZE));
}

} // namespace longscope
