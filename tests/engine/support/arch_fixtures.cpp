#include "support/arch_fixtures.h"

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

namespace longscope::test {

namespace {

const std::string k_dir = LONGSCOPE_TEST_DATA "/arch";

// Little-endian float32 values written as hexadecimal bytes.
std::vector<float> from_hex(const std::string &hex)
{
    std::vector<uint8_t> bytes(hex.size() / 2);
    for (size_t i = 0; i < bytes.size(); ++i)
        bytes[i] = uint8_t(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
    std::vector<float> f(bytes.size() / 4);
    std::memcpy(f.data(), bytes.data(), f.size() * 4);
    return f;
}

} // namespace

std::string arch_fixture_path(const std::string &family, const std::string &format)
{
    return k_dir + "/" + family + (format == "hf" ? "/hf" : "/model.gguf");
}

ArchReference load_arch_reference(const std::string &family)
{
    ArchReference r;
    std::ifstream in(k_dir + "/" + family + "/reference.json");
    if (!in)
        return r;
    const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
    if (j.is_discarded())
        return r;
    for (const nlohmann::json &s : j["sequences"])
        r.seqs.push_back({s["tokens"].get<std::vector<int32_t>>(), from_hex(s["logits"].get<std::string>())});
    r.prompt = j["greedy"]["prompt"].get<std::vector<int32_t>>();
    r.continuation = j["greedy"]["continuation"].get<std::vector<int32_t>>();
    r.n_vocab = j["n_vocab"].get<int>();
    return r;
}

} // namespace longscope::test
