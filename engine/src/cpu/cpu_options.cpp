// The text forms of the CPU options (longscope/cpu_options.h). set_cpu_options is in
// kernel_table.cpp, beside the table it rebuilds.
#include "longscope/cpu_options.h"

#include <charconv>

namespace longscope {

std::optional<SimdLevel> parse_simd_level(std::string_view text)
{
    if (text == "avx512")
        return SimdLevel::Avx512;
    if (text == "avx2")
        return SimdLevel::Avx2;
    if (text == "portable")
        return SimdLevel::Portable;
    return std::nullopt;
}

std::optional<QuantMatmulPath> parse_quant_matmul_path(std::string_view text)
{
    if (text == "integer")
        return QuantMatmulPath::Integer;
    if (text == "bf16")
        return QuantMatmulPath::Bf16;
    if (text == "dequantize")
        return QuantMatmulPath::Dequantize;
    if (text == "amx")
        return QuantMatmulPath::Amx;
    return std::nullopt;
}

CpuOptions cpu_options_from_switches(const std::function<const char *(const char *name)> &lookup)
{
    auto value = [&](const char *name) -> std::string_view {
        const char *v = lookup ? lookup(name) : nullptr;
        return v ? v : "";
    };
    CpuOptions o;
    o.kernels = parse_simd_level(value("LONGSCOPE_SIMD")).value_or(SimdLevel::Auto);
    o.quant_matmul = parse_quant_matmul_path(value("LONGSCOPE_QUANT_MATMUL")).value_or(QuantMatmulPath::Auto);
    o.pack_weights = value("LONGSCOPE_PACK") != "0";
    o.copy_weights = value("LONGSCOPE_COPY_WEIGHTS") != "0";
    o.amx = value("LONGSCOPE_AMX") != "0";
    o.amx_attention = value("LONGSCOPE_AMX_ATTENTION") != "0";
    o.k_act_span = value("LONGSCOPE_ACT_SPAN") != "32";
    o.decode_thread_tuning = value("LONGSCOPE_THREAD_TUNING") != "0";
    const std::string_view prefetch = value("LONGSCOPE_PREFETCH");
    o.decode_prefetch = prefetch != "0";
    if (const auto colon = prefetch.find(':'); colon != std::string_view::npos) {
        const auto bytes = [](std::string_view text) {
            int v = 0;
            const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
            return ec == std::errc() && end == text.data() + text.size() && v >= 64 && v <= 65536 ? v : 0;
        };
        o.decode_prefetch_near = bytes(prefetch.substr(0, colon));
        o.decode_prefetch_far = bytes(prefetch.substr(colon + 1));
    }
    return o;
}

} // namespace longscope
