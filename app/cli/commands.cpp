#include "commands.h"

#include "args.h"
#include "model_path.h"

#include "longscope/backend.h"
#include "longscope/chat.h"
#include "longscope/engine.h"
#include "longscope/errors.h"
#include "longscope/generator.h"
#include "longscope/gguf.h"
#include "longscope/model_description.h"
#include "longscope/tokenizer.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

namespace longscope::cli {

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

namespace {

std::string model_path(const Args &a, const char *argv0)
{
    std::string path = a.value("--model").value_or("");
    if (path.empty())
        path = default_model_path(argv0);
    return path;
}

// for_cpu: prepare the weights for the CPU kernels (false when the session runs on CUDA).
std::unique_ptr<Model> load_model(const Args &a, const char *argv0, bool for_cpu = true)
{
    return Model::load(model_path(a, argv0), {}, for_cpu);
}

// A GGUF file with a vocabulary and no tensors (as llama.cpp ships for its tokenizer tests).
bool is_vocabulary_only(const std::string &path)
{
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec))
        return false;
    const auto g = GgufFile::open(path);
    return g->tensors().empty() && g->find("tokenizer.ggml.tokens") != nullptr;
}

// The tokenizer's part of `info`: kind, pre-tokenizer, BOS/EOS and the end-of-generation set.
void add_tokenizer_info(const Tokenizer &tok, nlohmann::json &j)
{
    j["tokenizer_kind"] = std::string(tok.kind_name());
    j["tokenizer_vocab_size"] = tok.n_vocab();
    if (!tok.pre_tokenizer().empty())
        j["pre_tokenizer"] = tok.pre_tokenizer();
    j["bos_token_id"] = tok.bos_id();
    j["eos_token_id"] = tok.eos_id();
    j["add_bos"] = tok.add_bos_default();
    nlohmann::json eog = nlohmann::json::array();
    for (int32_t id : tok.end_of_generation_ids())
        eog.push_back({{"id", id}, {"text", tok.piece(id)}});
    j["end_of_generation"] = eog;
}

// The tokenizer's lines of `info` (the texts are the engine's, as the app shows them).
std::string tokenizer_lines(const Tokenizer &tok)
{
    std::ostringstream o;
    o << "tokenizer:        " << describe_tokenizer(tok) << ", " << tok.n_vocab() << " tokens, bos "
      << describe_token(tok, tok.bos_id()) << ", eos " << describe_token(tok, tok.eos_id())
      << (tok.add_bos_default() ? ", BOS added to prompts" : "") << "\n"
      << "end of generation: " << describe_end_of_generation(tok) << "\n";
    return o.str();
}

int print_vocabulary_only_info(const std::string &path, bool as_json)
{
    const auto tok = Tokenizer::load(path);
    nlohmann::json j;
    j["path"] = path;
    j["format"] = "gguf";
    j["vocabulary_only"] = true;
    add_tokenizer_info(*tok, j);
    if (as_json)
        std::cout << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    else
        std::cout << "path:             " << path << "\n"
                  << "format:           gguf, vocabulary only (no tensors)\n"
                  << tokenizer_lines(*tok);
    return 0;
}

} // namespace

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

namespace {

// The long-context options every command that runs the model takes.
const std::vector<OptionSpec> k_settings_options = {
    {{"--alpha"}}, {{"--rope-scaling"}}, {{"--rope-factor"}}, {{"--rope-orig-ctx"}},
    {{"--kv-before-rope"}, false}, {{"--attn"}}, {{"--causal-flash"}, false},
    {{"--kv"}}, {{"--overflow"}}, {{"--sinks"}}, {{"--shift-discard"}}, {{"--backend"}}, {{"--kv-type-k"}},
    {{"--kv-type-v"}}};

} // namespace

KvType kv_type_from_args(const Args &a, const std::string &option)
{
    const auto v = a.value(option);
    if (!v)
        return KvType::F32;
    const auto t = parse_kv_type(*v);
    if (!t)
        throw UsageError(option + " must be f32, f16, q8_0 or q4_0, got '" + *v + "'");
    return *t;
}

Settings settings_from_args(const Args &a)
{
    Settings s;
    if (auto alpha = a.value("--alpha")) {
        if (*alpha == "auto") {
            s.rope.ntk_auto = true;
        } else {
            s.rope.ntk_alpha = float(a.get_double("--alpha", 1.0, 1e6).value());
        }
    }
    if (auto method = a.value("--rope-scaling")) {
        s.rope.scaling = parse_rope_scaling(*method);
        if (!s.rope.scaling)
            throw UsageError("--rope-scaling must be none, linear, ntk, dynamic, yarn, llama3 or longrope, got '" +
                             *method + "'");
    }
    if (a.value("--rope-factor"))
        s.rope.scaling_factor = float(a.get_double("--rope-factor", 1.0, 1e6).value());
    if (a.value("--rope-orig-ctx"))
        s.rope.scaling_orig_ctx = a.get_int("--rope-orig-ctx", 1, 1 << 24).value();
    s.rope.store_kv_before_rope = a.flag("--kv-before-rope");
    if (auto attn = a.value("--attn")) {
        if (*attn == "mem-efficient")
            s.attention.memory_efficient = true;
        else if (*attn != "naive")
            throw UsageError("--attn must be naive or mem-efficient, got '" + *attn + "'");
    }
    s.attention.causal_flash = a.flag("--causal-flash");
    if (auto kv = a.value("--kv")) {
        auto m = parse_kv_mode(*kv);
        if (!m)
            throw UsageError("--kv must be none, concat, static or vmm, got '" + *kv + "'");
        s.kv_mode = *m;
    }
    s.kv_type_k = kv_type_from_args(a, "--kv-type-k");
    s.kv_type_v = kv_type_from_args(a, "--kv-type-v");
    if (auto o = a.value("--overflow")) {
        auto p = parse_overflow(*o);
        if (!p || *p == OverflowPolicy::DropOldestTurns)
            throw UsageError("--overflow must be error, head-tail or shift, got '" + *o + "'");
        s.overflow = *p;
    }
    if (a.value("--sinks"))
        s.sink_tokens = a.get_int("--sinks", 0, 1 << 24).value();
    if (a.value("--shift-discard"))
        s.shift_discard = a.get_int("--shift-discard", 1, 1 << 24).value();
    if (auto b = a.value("--backend")) {
        auto backend = parse_backend(*b);
        if (!backend)
            throw UsageError("--backend must be cpu or cuda, got '" + *b + "'");
        s.backend = *backend;
    }
    return s;
}

std::vector<OptionSpec> with_settings(std::vector<OptionSpec> specs)
{
    specs.insert(specs.end(), k_settings_options.begin(), k_settings_options.end());
    return specs;
}

namespace {

const char *stop_name(StopReason r)
{
    switch (r) {
    case StopReason::MaxTokens: return "max_tokens";
    case StopReason::EndOfSequence: return "eos";
    case StopReason::ContextFull: return "context_full";
    case StopReason::Cancelled: return "cancelled";
    case StopReason::StopString: return "stop_string";
    }
    return "unknown";
}

} // namespace

namespace {

// The chat options shared by `template` and `generate --chat`.
ChatRenderOptions chat_options(const Args &a)
{
    ChatRenderOptions o;
    o.add_generation_prompt = !a.flag("--no-generation-prompt");
    if (auto t = a.value("--template"))
        o.template_text = read_text_file(*t);
    if (auto t = a.value("--tools"))
        o.tools_json = read_text_file(*t);
    if (auto f = a.value("--format")) {
        const auto names = builtin_chat_formats();
        if (std::find(names.begin(), names.end(), *f) == names.end()) {
            std::string all;
            for (const auto &n : names)
                all += (all.empty() ? "" : ", ") + n;
            throw UsageError("--format: unknown chat format '" + *f + "' (one of " + all + ")");
        }
        o.format = *f;
    }
    return o;
}

std::vector<ChatMessage> chat_messages(const std::string &path)
{
    try {
        return parse_chat_messages(read_text_file(path));
    } catch (const InvalidArgument &e) {
        throw InvalidArgument(path + ": " + e.what());
    }
}

const std::vector<OptionSpec> chat_specs{
    {{"--template"}}, {{"--tools"}}, {{"--format"}}, {{"--no-generation-prompt"}, false}};

void print_chat_note(const std::string &format, const std::string &note)
{
    std::fprintf(stderr, "[longscope] chat format: %s%s%s\n", format == "model" ? "the model's own template" : format.c_str(),
                 note.empty() ? "" : " - ", note.c_str());
}

} // namespace

int cmd_template(const std::vector<std::string> &argv, const char *argv0)
{
    std::vector<OptionSpec> specs{{{"-m", "--model"}}, {{"--messages"}}};
    specs.insert(specs.end(), chat_specs.begin(), chat_specs.end());
    Args a(argv, specs);
    if (!a.positional().empty())
        throw UsageError("unexpected argument '" + a.positional().front() + "'");
    const auto path = a.value("--messages");
    if (!path)
        throw UsageError("template needs --messages FILE.json");
    const std::vector<ChatMessage> messages = chat_messages(*path);
    const ChatRenderOptions options = chat_options(a);
    auto model = load_model(a, argv0);
    const RenderedChat r = render_chat(*model, messages, options);
    print_chat_note(r.format, r.note);
    std::fwrite(r.text.data(), 1, r.text.size(), stdout);
    return 0;
}

int cmd_generate(const std::vector<std::string> &argv, const char *argv0)
{
    if (wants_remote(argv))
        return cmd_generate_remote(argv);
    Args a(argv, with_settings({{{"-m", "--model"}},
                                {{"-p", "--prompt"}},
                                {{"-f", "--file"}},
                                {{"--batch-file"}},
                                {{"-n", "--n-predict"}},
                                {{"--temp"}},
                                {{"--top-k"}},
                                {{"--top-p"}},
                                {{"--repeat-penalty"}},
                                {{"--seed"}},
                                {{"-t", "--threads"}},
                                {{"-c", "--ctx"}},
                                {{"--metrics"}},
                                {{"--chat"}},
                                {{"--template"}},
                                {{"--tools"}},
                                {{"--format"}},
                                {{"--no-generation-prompt"}, false},
                                {{"--json"}, false}}));
    std::vector<std::string> texts;
    std::vector<ChatMessage> chat;
    if (auto cf = a.value("--chat")) {
        if (a.value("--prompt") || a.value("--file") || a.value("--batch-file") || !a.positional().empty())
            throw UsageError("--chat replaces -p, -f and --batch-file");
        chat = chat_messages(*cf);
    } else if (auto bf = a.value("--batch-file")) {
        if (a.value("--prompt") || a.value("--file") || !a.positional().empty())
            throw UsageError("--batch-file replaces -p and -f");
        std::istringstream lines(read_text_file(*bf));
        for (std::string line; std::getline(lines, line);) {
            if (!line.empty() && line.back() == '\r')
                line.pop_back();
            if (!line.empty())
                texts.push_back(line);
        }
        if (texts.empty())
            throw UsageError(*bf + " holds no prompt (one per line)");
    } else {
        texts.push_back(prompt_text(a, false));
        if (texts.front().empty())
            throw UsageError("the prompt is empty");
    }

    GenerateRequest base_req;
    base_req.max_new_tokens = a.get_int("--n-predict", 0, 1 << 24).value_or(128);
    base_req.sampling.temperature = float(a.get_double("--temp", 0, 100).value_or(0.8));
    base_req.sampling.top_k = a.get_int("--top-k", 0, 1 << 24).value_or(40);
    base_req.sampling.top_p = float(a.get_double("--top-p", 1e-6, 1).value_or(0.95));
    base_req.sampling.repeat_penalty = float(a.get_double("--repeat-penalty", 1e-3, 100).value_or(1.0));
    if (auto s = a.get_u64("--seed"))
        base_req.sampling.seed = *s;
    else
        base_req.sampling.seed = std::random_device{}();
    SessionOptions so;
    so.n_ctx = a.get_int("--ctx", 1, 1 << 24).value_or(0);
    so.n_threads = a.get_int("--threads", 1, 1024).value_or(0);
    so.settings = settings_from_args(a);
    const bool json_out = a.flag("--json");
    std::unique_ptr<std::ofstream> metrics;
    if (auto mf = a.value("--metrics")) {
        metrics = std::make_unique<std::ofstream>(*mf, std::ios::binary | std::ios::trunc);
        if (!*metrics)
            throw IoError(*mf + ": cannot write the metrics file");
        *metrics << metrics_csv_header() << "\n";
    }

    auto model = load_model(a, argv0, so.settings.backend != ComputeBackend::Cuda);
    Session session(*model, so);
    if (metrics)
        session.set_metrics_callback([&](const StepMetrics &m) { *metrics << metrics_csv_row(m) << "\n"; });

    std::vector<GenerateRequest> reqs;
    if (!chat.empty()) {
        GenerateRequest r = base_req;
        const int reserve = std::min(r.max_new_tokens, session.n_ctx() / 2);
        const ChatPrompt p = build_chat_prompt(*model, chat, session.n_ctx(), reserve, so.settings.overflow, true,
                                               chat_options(a));
        print_chat_note(p.format, p.note);
        if (p.dropped_turns || p.truncated)
            std::fprintf(stderr, "[longscope] chat cut to fit: %d oldest messages dropped%s\n", p.dropped_turns,
                         p.truncated ? ", then head-tail" : "");
        r.prompt = p.tokens;
        reqs.push_back(std::move(r));
    }
    for (const std::string &text : texts) {
        GenerateRequest r = base_req;
        auto ids = model->tokenizer().encode(text, model->tokenizer().add_bos_default());
        r.prompt = fit_prompt(ids, session.n_ctx(), std::min(r.max_new_tokens, session.n_ctx() / 2),
                              so.settings.overflow);
        if (r.prompt.size() < ids.size())
            std::fprintf(stderr, "[longscope] prompt of %zu tokens cut to its first and last %zu (head-tail)\n",
                         ids.size(), r.prompt.size());
        reqs.push_back(std::move(r));
    }

    const bool batch = a.value("--batch-file").has_value();
    std::vector<GenerateResult> results;
    if (batch) {
        results = generate_batch(*model, so, reqs);
    } else {
        results.push_back(generate(session, reqs.front(), [&](int32_t, std::string_view piece) {
            if (!json_out && !piece.empty()) {
                std::fwrite(piece.data(), 1, piece.size(), stdout);
                std::fflush(stdout);
            }
            return true;
        }));
    }

    auto to_json = [&](const GenerateResult &result) {
        nlohmann::json j;
        j["text"] = result.text;
        j["tokens"] = result.tokens;
        j["n_prompt_tokens"] = result.n_prompt;
        j["n_generated_tokens"] = result.tokens.size();
        j["prefill_tokens_per_second"] = result.prefill_tokens_per_second();
        j["decode_tokens_per_second"] = result.decode_tokens_per_second();
        j["stop_reason"] = stop_name(result.stop);
        j["seed"] = base_req.sampling.seed;
        j["model"] = model->info().path;
        return j;
    };
    if (json_out) {
        nlohmann::json out;
        if (batch) {
            out = nlohmann::json::array();
            for (const auto &r : results)
                out.push_back(to_json(r));
        } else {
            out = to_json(results.front());
        }
        std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    } else if (batch) {
        // One completion per line: newlines inside a completion are written as \n.
        for (const auto &r : results) {
            std::string line;
            for (char c : r.text)
                line += c == '\n' ? std::string("\\n") : c == '\\' ? std::string("\\\\") : std::string(1, c);
            std::cout << line << "\n";
        }
    }
    if (!session.backend_note().empty())
        std::fprintf(stderr, "\n[longscope] %s\n", session.backend_note().c_str());
    const GenerateResult &first = results.front();
    std::fprintf(stderr,
                 "\n[longscope] model %s | %zu sequence%s | prompt %d tokens, prefill %.1f tok/s | generated %zu "
                 "tokens, decode %.1f tok/s | stop: %s | seed %llu | threads %d | ctx %d | kv %s\n",
                 model->info().name.c_str(), results.size(), results.size() == 1 ? "" : "s", first.n_prompt,
                 first.prefill_tokens_per_second(), first.tokens.size(), first.decode_tokens_per_second(),
                 stop_name(first.stop), static_cast<unsigned long long>(base_req.sampling.seed),
                 session.n_threads(), session.n_ctx(), std::string(to_string(so.settings.kv_mode)).c_str());
    return 0;
}

int cmd_tokenize(const std::vector<std::string> &argv, const char *argv0)
{
    Args a(argv, {{{"-m", "--model"}}, {{"-f", "--file"}}, {{"--bos"}, false}, {{"--special"}, false}});
    const std::string text = prompt_text(a, true);
    // Only the tokenizer: a vocabulary-only GGUF is enough.
    const auto tok = Tokenizer::load(model_path(a, argv0));
    auto ids = tok->encode(text, a.flag("--bos"), a.flag("--special"));
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
    Args a(argv, {{{"-m", "--model"}}, {{"--json"}, false}, {{"--backends"}, false}});
    if (!a.positional().empty())
        throw UsageError("unexpected argument '" + a.positional().front() + "'");
    if (a.flag("--backends")) {
        // Which backends this installation can use, and why not where it cannot.
        const auto backends = probe_backends();
        if (a.flag("--json")) {
            nlohmann::json out = nlohmann::json::array();
            for (const BackendStatus &b : backends) {
                nlohmann::json j{{"name", b.name}, {"available", b.available}, {"detail", b.detail}, {"library", b.library}};
                for (const DeviceInfo &d : b.devices)
                    j["devices"].push_back({{"name", d.name}, {"total_memory", d.total_memory},
                                            {"free_memory", d.free_memory},
                                            {"compute_capability", std::to_string(d.compute_major) + "." +
                                                                       std::to_string(d.compute_minor)}});
                out.push_back(j);
            }
            std::cout << out.dump(2) << "\n";
        } else {
            for (const BackendStatus &b : backends)
                std::cout << b.name << ": " << (b.available ? "available" : "unavailable") << " - " << b.detail << "\n";
        }
        return 0;
    }
    if (const std::string path = model_path(a, argv0); is_vocabulary_only(path))
        return print_vocabulary_only_info(path, a.flag("--json"));
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
    j["cpu_copy_bytes"] = in.cpu_copy_bytes;
    j["packed_matrices"] = in.packed_matrices;
    j["vocab_size"] = hp.n_vocab;
    add_tokenizer_info(tok, j);
    j["embedding_length"] = hp.n_embd;
    j["block_count"] = hp.n_layer;
    j["feed_forward_length"] = hp.n_ff;
    j["head_count"] = hp.n_head;
    j["head_count_kv"] = hp.n_head_kv;
    j["head_dim"] = hp.head_dim();
    j["rope_dimension_count"] = hp.n_rot;
    j["rope_freq_base"] = hp.rope_base;
    j["rope_layout"] = hp.rope_style == RopeStyle::Interleaved ? "interleaved" : "rotate_half";
    j["rope_scaling"] = std::string(to_string(hp.rope.type));
    j["rope_scaling_factor"] = hp.rope_scaling_factor;
    if (hp.rope.orig_ctx > 0)
        j["rope_original_context"] = hp.rope.orig_ctx;
    j["family"] = std::string(to_string(hp.family));
    if (hp.sliding_window > 0)
        j["sliding_window"] = hp.sliding_window;
    if (hp.attn_softcap > 0)
        j["attn_logit_softcapping"] = hp.attn_softcap;
    if (hp.final_softcap > 0)
        j["final_logit_softcapping"] = hp.final_softcap;
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
      << "family:           " << describe_family(hp) << "\n"
      << "file size:        " << in.file_bytes << " bytes (" << mib(in.file_bytes) << ")\n"
      << "weights used:     " << in.weight_bytes << " bytes\n"
      << "CPU weights:      "
      << (in.cpu_copy_bytes ? "copied into memory (" + mib(in.cpu_copy_bytes) + ", asked for in 2 MiB pages), " +
                                  std::to_string(in.packed_matrices) + " matrices packed for the CPU kernels"
                            : std::string("read in place from the file mapping"))
      << "\n"
      << "tensors:          " << in.tensor_count << " (";
    bool first = true;
    for (const auto &[type, count] : in.tensor_types) {
        o << (first ? "" : ", ") << type << ": " << count;
        first = false;
    }
    o << ")\n"
      << "vocabulary:       " << hp.n_vocab << " (tokenizer " << tok.n_vocab() << ", bos "
      << tok.bos_id() << ", eos " << tok.eos_id() << ")\n"
      << tokenizer_lines(tok)
      << "context (trained): " << hp.n_ctx_train << "\n"
      << "embedding:        " << hp.n_embd << "\n"
      << "layers:           " << hp.n_layer << "\n"
      << "heads:            " << hp.n_head << " query, " << hp.n_head_kv << " key/value, head size "
      << hp.head_dim() << "\n"
      << "feed-forward:     " << hp.n_ff << "\n"
      << "rope:             base " << hp.rope_base << ", " << hp.n_rot << " dims, "
      << j["rope_layout"].get<std::string>() << ", scaling " << describe_rope_scaling(hp);
    if (hp.sliding_window > 0)
        o << "\n"
          << "sliding window:   " << hp.sliding_window << " tokens"
          << (hp.rope_base_swa > 0 ? ", RoPE base " : "");
    if (hp.sliding_window > 0 && hp.rope_base_swa > 0)
        o << hp.rope_base_swa;
    if (hp.attn_softcap > 0 || hp.final_softcap > 0)
        o << "\n"
          << "soft-capping:     attention " << hp.attn_softcap << ", logits " << hp.final_softcap;
    o << "\n"
      << "rms norm eps:     " << hp.rms_eps << "\n"
      << "tied embeddings:  " << (hp.tied_embeddings ? "yes" : "no") << "\n";
    std::cout << o.str();
    return 0;
}

} // namespace longscope::cli
