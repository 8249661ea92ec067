#include "commands.h"

#include "args.h"
#include "model_path.h"

#include "longscope/engine.h"
#include "longscope/errors.h"

#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

namespace longscope::cli {

namespace {

std::string read_text_file(const std::string &path)
{
    std::ifstream in(path, std::ios::binary);
    if (!in)
        throw IoError(path + ": cannot open");
    std::ostringstream ss;
    ss << in.rdbuf();
    if (in.bad())
        throw IoError(path + ": read error");
    return ss.str();
}

std::unique_ptr<Model> load_model(const Args &a, const char *argv0)
{
    std::string path = a.value("--model").value_or("");
    if (path.empty())
        path = default_model_path(argv0);
    return Model::load(path);
}

std::string prompt_text(const Args &a, bool allow_positional)
{
    auto p = a.value("--prompt");
    auto f = a.value("--file");
    size_t sources = (p ? 1 : 0) + (f ? 1 : 0) + (allow_positional && !a.positional().empty() ? 1 : 0);
    if (sources == 0)
        throw UsageError(allow_positional ? "give the text to tokenize, or -f FILE"
                                          : "give a prompt with -p TEXT or -f FILE");
    if (sources > 1)
        throw UsageError("give the text only once (-p TEXT, -f FILE or a positional TEXT)");
    if (allow_positional && a.positional().size() > 1)
        throw UsageError("give the text as one argument (quote it)");
    if (!allow_positional && !a.positional().empty())
        throw UsageError("unexpected argument '" + a.positional().front() + "'");
    if (p)
        return *p;
    if (f)
        return read_text_file(*f);
    return a.positional().front();
}

const char *stop_name(StopReason r)
{
    switch (r) {
    case StopReason::MaxTokens: return "max_tokens";
    case StopReason::EndOfSequence: return "eos";
    case StopReason::ContextFull: return "context_full";
    case StopReason::Cancelled: return "cancelled";
    }
    return "unknown";
}

} // namespace

int cmd_generate(const std::vector<std::string> &argv, const char *argv0)
{
    Args a(argv, {{{"-m", "--model"}},
                  {{"-p", "--prompt"}},
                  {{"-f", "--file"}},
                  {{"-n", "--n-predict"}},
                  {{"--temp"}},
                  {{"--top-k"}},
                  {{"--top-p"}},
                  {{"--repeat-penalty"}},
                  {{"--seed"}},
                  {{"-t", "--threads"}},
                  {{"-c", "--ctx"}},
                  {{"--json"}, false}});
    const std::string text = prompt_text(a, false);
    if (text.empty())
        throw UsageError("the prompt is empty");

    GenerateRequest req;
    req.max_new_tokens = a.get_int("--n-predict", 0, 1 << 24).value_or(128);
    req.sampling.temperature = float(a.get_double("--temp", 0, 100).value_or(0.8));
    req.sampling.top_k = a.get_int("--top-k", 0, 1 << 24).value_or(40);
    req.sampling.top_p = float(a.get_double("--top-p", 1e-6, 1).value_or(0.95));
    req.sampling.repeat_penalty = float(a.get_double("--repeat-penalty", 1e-3, 100).value_or(1.0));
    if (auto s = a.get_u64("--seed"))
        req.sampling.seed = *s;
    else
        req.sampling.seed = std::random_device{}();
    SessionOptions so;
    so.n_ctx = a.get_int("--ctx", 1, 1 << 24).value_or(0);
    so.n_threads = a.get_int("--threads", 1, 1024).value_or(0);
    const bool json_out = a.flag("--json");

    auto model = load_model(a, argv0);
    req.prompt = model->tokenizer().encode(text, model->tokenizer().add_bos_default());
    Session session(*model, so);
    if (int64_t(req.prompt.size()) > session.n_ctx())
        throw ContextOverflow("the prompt is " + std::to_string(req.prompt.size()) +
                              " tokens, longer than the context limit of " +
                              std::to_string(session.n_ctx()) + " (raise it with --ctx)");

    auto result = generate(session, req, [&](int32_t, std::string_view piece) {
        if (!json_out && !piece.empty()) {
            std::fwrite(piece.data(), 1, piece.size(), stdout);
            std::fflush(stdout);
        }
        return true;
    });

    if (json_out) {
        nlohmann::json j;
        j["text"] = result.text;
        j["tokens"] = result.tokens;
        j["n_prompt_tokens"] = result.n_prompt;
        j["n_generated_tokens"] = result.tokens.size();
        j["prefill_tokens_per_second"] = result.prefill_tokens_per_second();
        j["decode_tokens_per_second"] = result.decode_tokens_per_second();
        j["stop_reason"] = stop_name(result.stop);
        j["seed"] = req.sampling.seed;
        j["model"] = model->info().path;
        std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    }
    std::fprintf(stderr,
                 "\n[longscope] model %s | prompt %d tokens, prefill %.1f tok/s | generated %zu "
                 "tokens, decode %.1f tok/s | stop: %s | seed %llu | threads %d | ctx %d\n",
                 model->info().name.c_str(), result.n_prompt, result.prefill_tokens_per_second(),
                 result.tokens.size(), result.decode_tokens_per_second(), stop_name(result.stop),
                 static_cast<unsigned long long>(req.sampling.seed), session.n_threads(), session.n_ctx());
    return 0;
}

int cmd_tokenize(const std::vector<std::string> &argv, const char *argv0)
{
    Args a(argv, {{{"-m", "--model"}}, {{"-f", "--file"}}, {{"--bos"}, false}});
    const std::string text = prompt_text(a, true);
    auto model = load_model(a, argv0);
    auto ids = model->tokenizer().encode(text, a.flag("--bos"));
    std::string line;
    for (size_t i = 0; i < ids.size(); ++i) {
        if (i)
            line += ' ';
        line += std::to_string(ids[i]);
    }
    std::cout << line << "\n";
    return 0;
}

int cmd_info(const std::vector<std::string> &argv, const char *argv0)
{
    Args a(argv, {{{"-m", "--model"}}, {{"--json"}, false}});
    if (!a.positional().empty())
        throw UsageError("unexpected argument '" + a.positional().front() + "'");
    auto model = load_model(a, argv0);
    const HParams &hp = model->hparams();
    const ModelInfo &in = model->info();
    const Tokenizer &tok = model->tokenizer();
    nlohmann::json j;
    j["path"] = in.path;
    j["name"] = in.name;
    j["format"] = in.format == ModelFormat::Gguf ? "gguf" : "huggingface";
    if (in.format == ModelFormat::Gguf)
        j["gguf_version"] = in.gguf_version;
    j["architecture"] = hp.architecture;
    j["file_bytes"] = in.file_bytes;
    j["weight_bytes"] = in.weight_bytes;
    j["tensor_count"] = in.tensor_count;
    j["tensor_types"] = in.tensor_types;
    j["vocab_size"] = hp.n_vocab;
    j["tokenizer_vocab_size"] = tok.n_vocab();
    j["bos_token_id"] = tok.bos_id();
    j["eos_token_id"] = tok.eos_id();
    j["embedding_length"] = hp.n_embd;
    j["block_count"] = hp.n_layer;
    j["feed_forward_length"] = hp.n_ff;
    j["head_count"] = hp.n_head;
    j["head_count_kv"] = hp.n_head_kv;
    j["head_dim"] = hp.head_dim();
    j["rope_dimension_count"] = hp.n_rot;
    j["rope_freq_base"] = hp.rope_base;
    j["rope_layout"] = hp.rope_style == RopeStyle::Interleaved ? "interleaved" : "rotate_half";
    j["rope_scaling"] = hp.rope_scaling == RopeScalingType::None     ? "none"
                        : hp.rope_scaling == RopeScalingType::Linear ? "linear"
                                                                     : "dynamic";
    j["rope_scaling_factor"] = hp.rope_scaling_factor;
    j["context_length"] = hp.n_ctx_train;
    j["rms_norm_eps"] = hp.rms_eps;
    j["tied_embeddings"] = hp.tied_embeddings;
    if (a.flag("--json")) {
        std::cout << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
        return 0;
    }
    auto mib = [](uint64_t b) { return std::to_string(b / 1048576.0).substr(0, 6) + " MiB"; };
    std::ostringstream o;
    o << "model:            " << in.name << "\n"
      << "path:             " << in.path << "\n"
      << "format:           " << j["format"].get<std::string>();
    if (in.format == ModelFormat::Gguf)
        o << " v" << in.gguf_version;
    o << "\n"
      << "architecture:     " << hp.architecture << "\n"
      << "file size:        " << in.file_bytes << " bytes (" << mib(in.file_bytes) << ")\n"
      << "weights used:     " << in.weight_bytes << " bytes\n"
      << "tensors:          " << in.tensor_count << " (";
    bool first = true;
    for (const auto &[type, count] : in.tensor_types) {
        o << (first ? "" : ", ") << type << ": " << count;
        first = false;
    }
    o << ")\n"
      << "vocabulary:       " << hp.n_vocab << " (tokenizer " << tok.n_vocab() << ", bos "
      << tok.bos_id() << ", eos " << tok.eos_id() << ")\n"
      << "context (trained): " << hp.n_ctx_train << "\n"
      << "embedding:        " << hp.n_embd << "\n"
      << "layers:           " << hp.n_layer << "\n"
      << "heads:            " << hp.n_head << " query, " << hp.n_head_kv << " key/value, head size "
      << hp.head_dim() << "\n"
      << "feed-forward:     " << hp.n_ff << "\n"
      << "rope:             base " << hp.rope_base << ", " << hp.n_rot << " dims, "
      << j["rope_layout"].get<std::string>() << ", scaling " << j["rope_scaling"].get<std::string>();
    if (hp.rope_scaling != RopeScalingType::None)
        o << " x" << hp.rope_scaling_factor;
    o << "\n"
      << "rms norm eps:     " << hp.rms_eps << "\n"
      << "tied embeddings:  " << (hp.tied_embeddings ? "yes" : "no") << "\n";
    std::cout << o.str();
    return 0;
}

} // namespace longscope::cli
