// longscope-cli perplexity and passkey: where a setting stops understanding long text, and
// whether it still finds a needle hidden in it.
#include "args.h"
#include "commands.h"
#include "model_path.h"

#include "longscope/engine.h"
#include "longscope/errors.h"
#include "longscope/needle.h"
#include "longscope/perplexity.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
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
            throw UsageError(name + " takes numbers" +
                             (std::isfinite(lo) ? " from " + std::to_string(int64_t(lo)) + " to " + std::to_string(int64_t(hi)) : "") +
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
                                {{"--stream"}, false},
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
    o.stream = a.flag("--stream");
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
        if (!r.stopped.empty())
            j["stopped"] = r.stopped;
        for (const PositionBucket &b : r.curve)
            j["curve"].push_back({{"begin", b.begin}, {"end", b.end}, {"count", b.count},
                                  {"mean_nll", b.mean_nll}, {"perplexity", b.perplexity()}});
        std::cout << j.dump(2) << "\n";
        return 0;
    }
    std::printf("scored %lld tokens in %d window%s: mean NLL %.4f nats, perplexity %.3f (%s %d)\n",
                (long long)r.n_scored, r.windows, r.windows == 1 ? "" : "s", r.mean_nll, r.perplexity(), edge_name,
                edge);
    if (!r.stopped.empty())
        std::printf("the stream stopped there: %s\n", r.stopped.c_str());
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
                                {{"--book"}},
                                {{"--needle"}},
                                {{"--question"}},
                                {{"--answer"}},
                                {{"--batch"}},
                                {{"-t", "--threads"}},
                                {{"--csv"}, false},
                                {{"--json"}, false}}));
    if (!a.positional().empty())
        throw UsageError("unexpected argument '" + a.positional().front() + "'");
    if (a.flag("--csv") && a.flag("--json"))
        throw UsageError("--csv and --json are exclusive");
    NeedleOptions o;
    o.settings = settings_from_args(a);
    auto model = load(a, argv0, o.settings);
    const int ctx = a.get_int("--ctx", 2, 1 << 24).value_or(std::min(model->hparams().n_ctx_train, k_default_ctx_cap));
    for (double v : double_list(a.value("--lengths").value_or(std::to_string(ctx)), "--lengths", 1, 1 << 24)) {
        if (v != std::floor(v))
            throw UsageError("--lengths takes whole numbers of tokens, got '" + (std::ostringstream() << v).str() + "'");
        o.lengths.push_back(int(v));
    }
    // Depths are checked by the engine, which names the one outside 0..1.
    o.depths = double_list(a.value("--depths").value_or("0,0.25,0.5,0.75,1"), "--depths", -HUGE_VAL, HUGE_VAL);
    o.trials = a.get_int("--trials", 1, 1000).value_or(1);
    o.seed = a.get_u64("--seed").value_or(1);
    o.batch = a.get_int("--batch", 1, 1 << 20).value_or(256);
    o.n_threads = a.get_int("--threads", 1, 1024).value_or(0);
    if (auto book = a.value("--book")) {
        o.task = NeedleTask::Book;
        o.book = model->tokenizer().encode(read_file(*book), false);
    }
    const auto needle = a.value("--needle"), question = a.value("--question"), answer = a.value("--answer");
    if (needle || question || answer) {
        if (!needle || !question || !answer || answer->empty())
            throw UsageError("--needle, --question and --answer go together (the answer not empty)");
        o.text = NeedleText{*needle, *question, *answer};
    }
    const int n_ctx_train = model->hparams().n_ctx_train;
    o.progress = [](int64_t done, int64_t total) {
        std::fprintf(stderr, "\r[longscope] evaluated %lld of %lld tokens", (long long)done, (long long)total);
        return true;
    };
    const NeedleResult r = needle_grid(*model, o);
    std::fprintf(stderr, "\n");

    const char *task = to_string(o.task).data();
    if (a.flag("--csv")) {
        std::printf("task,length,depth,actual_depth,trials,answer_tokens,log_prob,probability,mean_token_log_prob,"
                    "retrieved,beyond_trained\n");
        for (const NeedleCell &c : r.cells)
            std::printf("%s,%d,%g,%.6f,%d,%g,%.6f,%.6g,%.6f,%d,%d\n", task, c.length, c.depth, c.actual_depth, c.trials,
                        c.answer_tokens, c.log_prob, c.probability, c.mean_token_log_prob, c.retrieved,
                        c.length > n_ctx_train ? 1 : 0);
        return 0;
    }
    if (a.flag("--json")) {
        nlohmann::json rows = nlohmann::json::array();
        for (const NeedleCell &c : r.cells)
            rows.push_back({{"task", task}, {"length", c.length}, {"depth", c.depth},
                            {"actual_depth", c.actual_depth}, {"trials", c.trials},
                            {"answer_tokens", c.answer_tokens}, {"log_prob", c.log_prob},
                            {"probability", c.probability}, {"mean_token_log_prob", c.mean_token_log_prob},
                            {"retrieved", c.retrieved}});
        std::cout << nlohmann::json{{"n_ctx_train", n_ctx_train}, {"cells", rows}}.dump(2) << "\n";
        return 0;
    }
    std::printf("%s needle, %d trial%s per cell (trained context %d). Each cell: the probability of the answer "
                "(the product of its tokens' probabilities, teacher-forced after the question; mean over the "
                "trials), then how many trials greedy decoding retrieved.\n",
                task, o.trials, o.trials == 1 ? "" : "s", n_ctx_train);
    std::printf("| length |");
    for (double d : o.depths)
        std::printf(" depth %g |", d);
    std::printf("\n|---|");
    for (size_t j = 0; j < o.depths.size(); ++j)
        std::printf("---|");
    std::printf("\n");
    for (size_t i = 0; i < o.lengths.size(); ++i) {
        // * marks lengths past the trained context.
        std::printf("| %d%s |", o.lengths[i], o.lengths[i] > n_ctx_train ? " *" : "");
        for (size_t j = 0; j < o.depths.size(); ++j) {
            const NeedleCell &c = r.cells[i * o.depths.size() + j];
            std::printf(" %.3g (%d/%d) |", c.probability, c.retrieved, c.trials);
        }
        std::printf("\n");
    }
    return 0;
}

} // namespace longscope::cli
