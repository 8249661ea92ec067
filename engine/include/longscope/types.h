// Element types of weight tensors, with the GGUF type ids (ggml_type) they correspond to.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace longscope {

enum class DType : uint32_t {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q5_0 = 6,
    Q5_1 = 7,
    Q8_0 = 8,
    Q8_1 = 9,
    Q2_K = 10,
    Q3_K = 11,
    Q4_K = 12,
    Q5_K = 13,
    Q6_K = 14,
    Q8_K = 15,
    IQ4_NL = 20,
    IQ4_XS = 23,
    I8 = 24,
    I16 = 25,
    I32 = 26,
    I64 = 27,
    F64 = 28,
    BF16 = 30,
};

struct DTypeTraits {
    std::string_view name;
    uint32_t block_elems; // elements per block (1 for plain types)
    uint32_t block_bytes; // bytes per block
};

// Traits of a known type, or nullopt for an id this engine does not know at all.
std::optional<DTypeTraits> dtype_traits(uint32_t ggml_type_id);

std::string_view dtype_name(DType t);

// Whether the CPU backend can compute with weights of this type.
bool dtype_supported(DType t);

} // namespace longscope
