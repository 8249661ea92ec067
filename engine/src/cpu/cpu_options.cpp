// The text forms of the CPU options (longscope/cpu_options.h). set_cpu_options is in
// kernel_table.cpp, beside the table it rebuilds.
#include "longscope/cpu_options.h"

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
    o.decode_prefetch = value("LONGSCOPE_PREFETCH") != "0";
    return o;
}

} // namespace longscope
