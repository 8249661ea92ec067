#include "longscope/types.h"

namespace longscope {

std::optional<DTypeTraits> dtype_traits(uint32_t id)
{
    // Block layouts as GGUF files store them (ggml's block sizes).
    switch (id) {
    case 0: return DTypeTraits{"F32", 1, 4};
    case 1: return DTypeTraits{"F16", 1, 2};
    case 2: return DTypeTraits{"Q4_0", 32, 18};
    case 3: return DTypeTraits{"Q4_1", 32, 20};
    case 6: return DTypeTraits{"Q5_0", 32, 22};
    case 7: return DTypeTraits{"Q5_1", 32, 24};
    case 8: return DTypeTraits{"Q8_0", 32, 34};
    case 9: return DTypeTraits{"Q8_1", 32, 36};
    case 10: return DTypeTraits{"Q2_K", 256, 84};
    case 11: return DTypeTraits{"Q3_K", 256, 110};
    case 12: return DTypeTraits{"Q4_K", 256, 144};
    case 13: return DTypeTraits{"Q5_K", 256, 176};
    case 14: return DTypeTraits{"Q6_K", 256, 210};
    case 15: return DTypeTraits{"Q8_K", 256, 292};
    case 20: return DTypeTraits{"IQ4_NL", 32, 18};
    case 23: return DTypeTraits{"IQ4_XS", 256, 136};
    case 24: return DTypeTraits{"I8", 1, 1};
    case 25: return DTypeTraits{"I16", 1, 2};
    case 26: return DTypeTraits{"I32", 1, 4};
    case 27: return DTypeTraits{"I64", 1, 8};
    case 28: return DTypeTraits{"F64", 1, 8};
    case 30: return DTypeTraits{"BF16", 1, 2};
    default: return std::nullopt;
    }
}

std::string_view dtype_name(DType t)
{
    auto traits = dtype_traits(static_cast<uint32_t>(t));
    return traits ? traits->name : std::string_view("unknown");
}

bool dtype_supported(DType t)
{
    switch (t) {
    case DType::F32:
    case DType::F16:
    case DType::BF16:
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
    case DType::IQ4_NL:
    case DType::IQ4_XS: return true;
    default: return false;
    }
}

} // namespace longscope
