// longscope-cli perplexity and passkey: where a setting stops understanding long text.
#include "args.h"
#include "commands.h"
#include "model_path.h"

#include "longscope/engine.h"
#include "longscope/errors.h"
#include "longscope/perplexity.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

namespace longscope::cli {

namespace {

std::string read_file(const std::string &path)
{
    std::ifstream in(path, std::ios::binary);
    if (!in)
        throw IoError(path + ": cannot open");
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

std::vector<double> double_list(const std::string &s, const std::string &name, double lo, double hi)
{
    std::vector<double> out;
    std::stringstream ss(s);
    for (std::string item; std::getline(ss, item, ',');) {
        char *end = nullptr;
        double v = std::strtod(item.c_str(), &end);
        if (item.empty() || *end != '\0' || !std::isfinite(v) || v < lo || v > hi)
            throw UsageError(name + " takes numbers between " + std::to_string(lo) + " and " + std::to_string(hi) +
                             " separated by commas, got '" + item + "'");
        out.push_back(v);
    }
    if (out.empty())
        throw UsageError(name + " is empty");
    return out;
}

// Loaded for the backend the options ask for (for CUDA the matrices stay in the file mapping).
std::unique_ptr<Model> load(const Args &a, const char *argv0, const Settings &settings)
{
    std::string path = a.value("--model").value_or("");
    if (path.empty())
        path = default_model_path(argv0);
    return Model::load(path, {}, settings.backend != ComputeBackend::Cuda);
}

} // namespace

int cmd_perplexity(const std::vector<std::string> &argv, const char *argv0)
{
    if (wants_remote(argv))
        return cmd_perplexity_remote(argv);
    Args a(argv, with_settings({{{"-m", "--model"}},
                                {{"-f", "--file"}},
                                {{"-c", "--ctx"}},
                                {{"--stride"}},
                                {{"--batch"}},
                                {{"--bucket"}},
                                {{"--max-tokens"}},
                                {{"-t", "--threads"}},
                                {{"--csv"}},
                                {{"--json"}, false}}));
    auto file = a.value("--file");
    if (!file)
        throw UsageError("give the text to score with -f FILE");
    if (!a.positional().empty())
        throw UsageError("unexpected argument '" + a.positional().front() + "'");
    PerplexityOptions o;
    o.settings = settings_from_args(a);
    o.ctx = a.get_int("--ctx", 2, 1 << 24).value_or(0);
    o.stride = a.get_int("--stride", 1, 1 << 24).value_or(0);
    o.batch = a.get_int("--batch", 1, 1 << 20).value_or(256);
    o.bucket = a.get_int("--bucket", 1, 1 << 20).value_or(64);
    o.n_threads = a.get_int("--threads", 1, 1024).value_or(0);
    const int max_tokens = a.get_int("--max-tokens", 2, 1 << 30).value_or(0);
    const std::string text = read_file(*file);
    auto model = load(a, argv0, o.settings);
    auto ids = model->tokenizer().encode(text, false);
    if (max_tokens > 0 && int(ids.size()) > max_tokens)
        ids.resize(size_t(max_tokens));
    o.progress = [](int64_t done, int64_t total) {
        std::fprintf(stderr, "\r[longscope] scored %lld of %lld tokens", (long long)done, (long long)total);
        return true;
    };
    PerplexityResult r = perplexity(*model, ids, o);
    std::fprintf(stderr, "\n");
    return report_perplexity(a, r, model->hparams().n_ctx_train, "trained context", "n_ctx_train");
}

int report_perplexity(const Args &a, const PerplexityResult &r, int edge, const char *edge_name, const char *edge_key)
{
    if (auto csv = a.value("--csv")) {
        std::ofstream out(*csv, std::ios::binary | std::ios::trunc);
        if (!out)
            throw IoError(*csv + ": cannot write");
        out << "position_begin,position_end,count,mean_nll,perplexity\n";
        for (const PositionBucket &b : r.curve)
            out << b.begin << ',' << b.end << ',' << b.count << ',' << b.mean_nll << ',' << b.perplexity() << '\n';
    }
    if (a.flag("--json")) {
        nlohmann::json j;
        j["n_scored"] = r.n_scored;
        j["windows"] = r.windows;
        j["mean_nll"] = r.mean_nll;
        j["perplexity"] = r.perplexity();
        j[edge_key] = edge;
        for (const PositionBucket &b : r.curve)
            j["curve"].push_back({{"begin", b.begin}, {"end", b.end}, {"count", b.count},
                                  {"mean_nll", b.mean_nll}, {"perplexity", b.perplexity()}});
        std::cout << j.dump(2) << "\n";
        return 0;
    }
    std::printf("scored %lld tokens in %d window%s: mean NLL %.4f nats, perplexity %.3f (%s %d)\n",
                (long long)r.n_scored, r.windows, r.windows == 1 ? "" : "s", r.mean_nll, r.perplexity(), edge_name,
                edge);
    std::printf("| positions | tokens | mean NLL | perplexity |\n|---|---|---|---|\n");
    bool marked = false;
    for (const PositionBucket &b : r.curve) {
        // * marks the first bucket reaching past the edge (the trained context).
        const bool past = edge > 0 && !marked && b.end > edge;
        marked = marked || past;
        std::printf("| %d-%d%s | %lld | %.4f | %.3f |\n", b.begin, b.end - 1, past ? " *" : "", (long long)b.count,
                    b.mean_nll, b.perplexity());
    }
    return 0;
}

int cmd_passkey(const std::vector<std::string> &argv, const char *argv0)
{
    Args a(argv, with_settings({{{"-m", "--model"}},
                                {{"-c", "--ctx"}},
                                {{"--lengths"}},
                                {{"--depths"}},
                                {{"--trials"}},
                                {{"--seed"}},
                                {{"-t", "--threads"}},
                                {{"--json"}, false}}));
    if (!a.positional().empty())
        throw UsageError("unexpected argument '" + a.positional().front() + "'");
    const Settings settings = settings_from_args(a);
    auto model = load(a, argv0, settings);
    const int ctx = a.get_int("--ctx", 64, 1 << 24).value_or(std::min(model->hparams().n_ctx_train, k_default_ctx_cap));
    std::vector<int> lengths;
    for (double v : double_list(a.value("--lengths").value_or(std::to_string(ctx)), "--lengths", 64, ctx))
        lengths.push_back(int(v));
    const std::vector<double> depths = double_list(a.value("--depths").value_or("0,0.25,0.5,0.75,1"), "--depths", 0, 1);
    const int trials = a.get_int("--trials", 1, 1000).value_or(5);
    std::mt19937_64 rng(a.get_u64("--seed").value_or(1));
    SessionOptions so;
    so.n_threads = a.get_int("--threads", 1, 1024).value_or(0);
    so.settings = settings;
    so.settings.context_limit = ctx;
    Session session(*model, so);
    const Tokenizer &tok = model->tokenizer();

    // llama.cpp's passkey layout: an instruction, filler, the key at a depth, more filler,
    // then the question; the answer is read greedily.
    const std::string intro = "There is an important info hidden inside a lot of irrelevant text. Find it and "
                              "memorize it. I will quiz you about the important information there.\n";
    const std::string filler = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.\n";
    const std::string question = "What is the pass key? The pass key is";
    const auto filler_ids = tok.encode(filler, false);

    nlohmann::json rows = nlohmann::json::array();
    std::printf("| length | depth | correct | accuracy |\n|---|---|---|---|\n");
    for (int len : lengths)
        for (double depth : depths) {
            int correct = 0;
            for (int t = 0; t < trials; ++t) {
                const int key = int(rng() % 90000) + 10000;
                const std::string key_text = "The pass key is " + std::to_string(key) + ". Remember it. " +
                                             std::to_string(key) + " is the pass key.\n";
                const auto head = tok.encode(intro, tok.add_bos_default());
                const auto key_ids = tok.encode(key_text, false);
                const auto q_ids = tok.encode(question, false);
                const int room = len - int(head.size() + key_ids.size() + q_ids.size()) - 8;
                const int n_fill = std::max(0, room / int(std::max<size_t>(1, filler_ids.size())));
                const int before = int(std::lround(depth * n_fill));
                std::vector<int32_t> prompt = head;
                for (int i = 0; i < n_fill; ++i) {
                    if (i == before)
                        prompt.insert(prompt.end(), key_ids.begin(), key_ids.end());
                    prompt.insert(prompt.end(), filler_ids.begin(), filler_ids.end());
                }
                if (before >= n_fill)
                    prompt.insert(prompt.end(), key_ids.begin(), key_ids.end());
                prompt.insert(prompt.end(), q_ids.begin(), q_ids.end());
                GenerateRequest req;
                req.prompt = prompt;
                req.max_new_tokens = 8;
                req.sampling.temperature = 0;
                GenerateResult res = generate(session, req);
                if (res.text.find(std::to_string(key)) != std::string::npos)
                    ++correct;
            }
            std::printf("| %d | %.2f | %d/%d | %.0f%% |\n", len, depth, correct, trials, 100.0 * correct / trials);
            rows.push_back({{"length", len}, {"depth", depth}, {"correct", correct}, {"trials", trials}});
        }
    if (a.flag("--json"))
        std::cout << rows.dump(2) << "\n";
    return 0;
}

} // namespace longscope::cli
