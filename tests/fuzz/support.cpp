#include "support.h"

#include "support/model_files.h" // tests/engine/support: safetensors_bytes

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <unistd.h>
#include <vector>

namespace fs = std::filesystem;

namespace longscope::fuzz {

namespace {

void write_file(const std::string &path, const char *data, size_t size)
{
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(data, std::streamsize(size));
    check(bool(out), "cannot write a scratch file");
}

// `rows` x `cols` little F32 values, different per tensor so no two weights are equal.
std::string f32_matrix(int64_t rows, int64_t cols, float seed)
{
    std::vector<float> v(size_t(rows * cols));
    for (size_t i = 0; i < v.size(); ++i)
        v[i] = seed + 0.001f * float(i % 97);
    return std::string(reinterpret_cast<const char *>(v.data()), v.size() * sizeof(float));
}

} // namespace

const std::string &scratch_dir()
{
    // Never destroyed: the exit handler that removes the folder runs after static destructors.
    static const std::string *dir = [] {
        // In memory where the system has a tmpfs for it: inputs are written and read back
        // hundreds of times a second, which a disk's file system turns into journal work.
        std::error_code ec;
        const fs::path base = fs::is_directory("/dev/shm", ec) && access("/dev/shm", W_OK | X_OK) == 0
                                  ? fs::path("/dev/shm")
                                  : fs::temp_directory_path();
        auto *path = new std::string((base / "longscope-fuzz-XXXXXX").string());
        check(mkdtemp(path->data()) != nullptr, "cannot create a scratch folder");
        std::atexit([] {
            std::error_code ec;
            fs::remove_all(scratch_dir(), ec);
        });
        return path;
    }();
    return *dir;
}

std::string write_scratch(const std::string &name, const uint8_t *data, size_t size)
{
    const std::string path = scratch_dir() + "/" + name;
    write_file(path, reinterpret_cast<const char *>(data), size);
    return path;
}

std::string write_scratch(const std::string &name, const std::string &bytes)
{
    return write_scratch(name, reinterpret_cast<const uint8_t *>(bytes.data()), bytes.size());
}

std::string test_data(const std::string &relative_path)
{
    std::ifstream in(std::string(LONGSCOPE_TEST_DATA) + "/" + relative_path, std::ios::binary);
    check(bool(in), "cannot read a file of tests/data");
    return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string tiny_hf_config()
{
    return R"({"model_type": "llama", "hidden_size": 8, "intermediate_size": 16,
 "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
 "vocab_size": 512, "max_position_embeddings": 64, "rms_norm_eps": 1e-05,
 "rope_theta": 10000.0, "rope_scaling": null, "tie_word_embeddings": true})";
}

const std::string &tiny_hf_dir()
{
    static const std::string dir = [] {
        const std::string d = scratch_dir() + "/hf";
        fs::create_directories(d);
        // Shapes in PyTorch order ([out, in]) for the config above: head size 4, one KV head.
        const std::string p = "model.layers.0.";
        const std::vector<test::StTensor> tensors = {
            {"model.embed_tokens.weight", "F32", {512, 8}, f32_matrix(512, 8, 0.01f)},
            {"model.norm.weight", "F32", {8}, f32_matrix(1, 8, 1.0f)},
            {p + "input_layernorm.weight", "F32", {8}, f32_matrix(1, 8, 1.0f)},
            {p + "post_attention_layernorm.weight", "F32", {8}, f32_matrix(1, 8, 1.0f)},
            {p + "self_attn.q_proj.weight", "F32", {8, 8}, f32_matrix(8, 8, 0.02f)},
            {p + "self_attn.k_proj.weight", "F32", {4, 8}, f32_matrix(4, 8, 0.03f)},
            {p + "self_attn.v_proj.weight", "F32", {4, 8}, f32_matrix(4, 8, 0.04f)},
            {p + "self_attn.o_proj.weight", "F32", {8, 8}, f32_matrix(8, 8, 0.05f)},
            {p + "mlp.gate_proj.weight", "F32", {16, 8}, f32_matrix(16, 8, 0.06f)},
            {p + "mlp.up_proj.weight", "F32", {16, 8}, f32_matrix(16, 8, 0.07f)},
            {p + "mlp.down_proj.weight", "F32", {8, 16}, f32_matrix(8, 16, 0.08f)},
        };
        const std::string st = test::safetensors_bytes(tensors);
        write_file(d + "/model.safetensors", st.data(), st.size());
        const std::string cfg = tiny_hf_config();
        write_file(d + "/config.json", cfg.data(), cfg.size());
        const std::string tok = test_data("stories260K/tok512.model");
        write_file(d + "/tokenizer.model", tok.data(), tok.size());
        const std::string tok_cfg = test_data("stories260K/hf/tokenizer_config.json");
        write_file(d + "/tokenizer_config.json", tok_cfg.data(), tok_cfg.size());
        return d;
    }();
    return dir;
}

void check(bool ok, const char *what)
{
    if (ok)
        return;
    std::fprintf(stderr, "fuzz invariant broken: %s\n", what);
    std::abort();
}

} // namespace longscope::fuzz
