// longscope-cli bench: a grid of runs over batch sizes, prompt lengths, KV modes and
// attention settings, printed in the shape of the published KV-cache tables.
#include "args.h"
#include "commands.h"
#include "model_path.h"

#include "longscope/engine.h"
#include "longscope/errors.h"
#include "longscope/hardware.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

namespace longscope::cli {

namespace {

std::vector<std::string> split_list(const std::string &s)
{
    std::vector<std::string> out;
    std::stringstream ss(s);
    for (std::string item; std::getline(ss, item, ',');)
        if (!item.empty())
            out.push_back(item);
    return out;
}

std::vector<int> int_list(const Args &a, const std::string &name, const std::string &fallback, int max)
{
    std::vector<int> out;
    for (const std::string &item : split_list(a.value(name).value_or(fallback))) {
        char *end = nullptr;
        long v = std::strtol(item.c_str(), &end, 10);
        if (*end != '\0' || v < 1 || v > max)
            throw UsageError(name + " takes positive integers separated by commas, got '" + item + "'");
        out.push_back(int(v));
    }
    if (out.empty())
        throw UsageError(name + " is empty");
    return out;
}

struct Row {
    int batch = 0, input = 0, new_tokens = 0;
    double bytes_per_token = 0, roofline_fraction = 0, prefill_gflop_s = 0, prefill_roofline_fraction = 0;
    // Prefill's operations: the matrix products', and attention's (scores and values, half
    // each), with the families they run on and the prefill's time.
    double product_flops = 0, attention_flops = 0, prefill_seconds = 0;
    AttentionFamilies attention_families;
    // --paired-probe: the median over decode steps of the step's read rate over the probe's read
    // right after it, and the median of those reads.
    double paired_roofline_fraction = 0, paired_bandwidth = 0;
    // The mean CPU thread count of the decode steps (the decode thread tuner's choice).
    double decode_threads = 0;
    std::string kv, attn;
    bool causal_flash = false;
    double prefill_tok_s = 0, decode_tok_s = 0, throughput = 0;
    uint64_t kv_reserved = 0, peak_kv_resident = 0, peak_scratch = 0, peak_total = 0, kv_copied = 0, rss = 0;
    uint64_t device_used = 0; // CUDA: device memory in use after the last step
};

// Deterministic prompt ids: ordinary tokens (skipping the first 3 special ids), varied.
std::vector<int32_t> synthetic_prompt(const Model &m, int n, int salt)
{
    std::vector<int32_t> ids;
    ids.push_back(m.tokenizer().bos_id() >= 0 ? m.tokenizer().bos_id() : 1);
    uint64_t x = 0x9e3779b97f4a7c15ull * uint64_t(salt + 1);
    const int n_vocab = m.tokenizer().n_vocab();
    while (int(ids.size()) < n) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        ids.push_back(int32_t(3 + x % uint64_t(std::max(1, n_vocab - 3))));
    }
    return ids;
}

// The type most of the model's tensors have: the one its matrix products run on.
std::string main_weight_type(const ModelInfo &info)
{
    std::string best;
    size_t most = 0;
    for (const auto &[type, count] : info.tensor_types)
        if (count > most) {
            most = count;
            best = type;
        }
    return best;
}

double median(std::vector<double> v)
{
    if (v.empty())
        return 0;
    std::sort(v.begin(), v.end());
    const size_t h = v.size() / 2;
    return v.size() % 2 ? v[h] : (v[h - 1] + v[h]) / 2;
}

std::string mib(uint64_t b)
{
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2f", b / 1048576.0);
    return buf;
}

} // namespace

int cmd_bench(const std::vector<std::string> &argv, const char *argv0)
{
    Args a(argv, {{{"-m", "--model"}},
                  {{"--batch"}},
                  {{"--input"}},
                  {{"--new"}},
                  {{"--kv"}},
                  {{"--attn"}},
                  {{"--causal-flash"}, false},
                  {{"--kv-before-rope"}, false},
                  {{"--kv-type-k"}},
                  {{"--kv-type-v"}},
                  {{"-t", "--threads"}},
                  {{"-c", "--ctx"}},
                  {{"--csv"}, false},
                  {{"--no-probe"}, false},
                  {{"--paired-probe"}, false},
                  {{"--backend"}},
                  {{"--json"}, false}});
    if (!a.positional().empty())
        throw UsageError("unexpected argument '" + a.positional().front() + "'");
    const std::vector<int> batches = int_list(a, "--batch", "1", 256);
    const std::vector<int> inputs = int_list(a, "--input", "128,512", 1 << 24);
    const std::vector<int> news = int_list(a, "--new", "64", 1 << 24);
    std::vector<KvMode> modes;
    for (const std::string &k : split_list(a.value("--kv").value_or("none,concat,static,vmm"))) {
        auto m = parse_kv_mode(k);
        if (!m)
            throw UsageError("--kv takes none, concat, static, vmm separated by commas, got '" + k + "'");
        modes.push_back(*m);
    }
    std::vector<bool> attns;
    for (const std::string &k : split_list(a.value("--attn").value_or("naive,mem-efficient"))) {
        if (k != "naive" && k != "mem-efficient")
            throw UsageError("--attn takes naive and/or mem-efficient, got '" + k + "'");
        attns.push_back(k == "mem-efficient");
    }
    ComputeBackend backend = ComputeBackend::Cpu;
    if (auto b = a.value("--backend")) {
        auto parsed = parse_backend(*b);
        if (!parsed)
            throw UsageError("--backend must be cpu or cuda, got '" + *b + "'");
        backend = *parsed;
    }
    if (backend == ComputeBackend::Cuda)
        for (int b : batches)
            if (b != 1)
                throw UsageError("--backend cuda runs batch size 1 only (--batch 1)");
    const KvType type_k = kv_type_from_args(a, "--kv-type-k"), type_v = kv_type_from_args(a, "--kv-type-v");
    const int threads = a.get_int("--threads", 1, 1024).value_or(0);
    const int ctx_opt = a.get_int("--ctx", 1, 1 << 24).value_or(0);

    std::string path = a.value("--model").value_or("");
    if (path.empty())
        path = default_model_path(argv0);
    auto model = Model::load(path, {}, backend != ComputeBackend::Cuda);
    const int n_threads = threads > 0 ? threads : std::max(1, int(std::thread::hardware_concurrency()));
    // The decode ceiling: memory read bandwidth measured here, with the same threads, before
    // the runs and again after them; the higher of the two is the roofline (the machine's
    // bandwidth moves while other work shares it, and the ceiling is what it gave at best).
    const bool probe = !a.flag("--no-probe");
    // Each decode step against a read of the probe right after it: on a shared machine the
    // bandwidth changes within seconds, and the best of a few probes before and after the runs
    // can meet a fast moment that the steps did not (the probe's buffer evicts the caches
    // between steps, which a model much larger than the last-level cache does every step).
    const bool paired = a.flag("--paired-probe");
    if (paired && !probe)
        throw UsageError("--paired-probe needs the probe (drop --no-probe)");
    if (paired && backend == ComputeBackend::Cuda)
        throw UsageError("--paired-probe measures the CPU's decode (--backend cpu)");
    double bandwidth = probe ? measure_read_bandwidth(n_threads) : 0.0;
    // The prefill ceiling the same way: the peak rates of the instructions prefill's matrix
    // products and its attention run on, with the same threads, before and after; the higher
    // counts. Attention's scores and values run on float multiply-adds, integer dot products
    // or AMX tiles whatever the weights, so each part is set against its own instruction.
    const HParams &hp = model->hparams();
    const ComputeFamily family = prefill_compute_family(main_weight_type(model->info()));
    const auto attention_families_of = [&](bool mem_eff) {
        return prefill_attention_families(type_k, a.flag("--kv-before-rope"), mem_eff, hp.head_dim());
    };
    std::map<ComputeFamily, double> peaks{{family, 0.0}};
    for (bool mem_eff : attns) {
        const AttentionFamilies af = attention_families_of(mem_eff);
        peaks.emplace(af.scores, 0.0);
        peaks.emplace(af.values, 0.0);
    }
    const auto measure_peaks = [&] {
        for (auto &[f, peak] : peaks)
            peak = std::max(peak, measure_compute_peak(n_threads, f));
    };
    if (probe)
        measure_peaks();
    const DecodeCost cost = model->decode_cost();
    const double matmul_params = cost.matmul_params, streamed = cost.streamed_bytes, embd_row = cost.embd_row_bytes;
    check_kv_types(Settings{.kv_type_k = type_k, .kv_type_v = type_v, .backend = backend}, hp.head_dim());
    const double kv_bytes_per_position =
        double(hp.n_layer) * double(kv_type_row_bytes(type_k, hp.n_embd_kv()) + kv_type_row_bytes(type_v, hp.n_embd_kv()));
    const std::string kv_types = std::string(to_string(type_k)) + "/" + std::string(to_string(type_v));
    std::unique_ptr<ReadBandwidthProbe> paired_probe;
    if (paired)
        paired_probe = std::make_unique<ReadBandwidthProbe>(n_threads, 256ull << 20);

    std::vector<Row> rows;
    for (int b : batches)
        for (int in : inputs)
            for (int nw : news)
                for (KvMode mode : modes)
                    for (bool mem_eff : attns) {
                        SessionOptions so;
                        so.n_threads = threads;
                        so.n_ctx = ctx_opt > 0 ? ctx_opt : in + nw;
                        so.settings.kv_mode = mode;
                        so.settings.attention.memory_efficient = mem_eff;
                        so.settings.attention.causal_flash = a.flag("--causal-flash");
                        so.settings.rope.store_kv_before_rope = a.flag("--kv-before-rope");
                        so.settings.kv_type_k = type_k;
                        so.settings.kv_type_v = type_v;
                        std::vector<GenerateRequest> reqs(static_cast<size_t>(b));
                        for (int i = 0; i < b; ++i) {
                            reqs[size_t(i)].prompt = synthetic_prompt(*model, in, i);
                            reqs[size_t(i)].max_new_tokens = nw;
                            reqs[size_t(i)].sampling.temperature = 0;
                            reqs[size_t(i)].stop_at_eos = false;
                        }
                        so.settings.backend = backend;
                        MemoryLedger last;
                        std::vector<GenerateResult> results;
                        std::vector<double> step_fractions, step_bandwidths;
                        double probe_seconds = 0; // the paired probe's reads, taken out of decode's time
                        double decode_steps = 0, decode_thread_sum = 0;
                        if (backend == ComputeBackend::Cuda) {
                            // One sequence in a session on the device.
                            Session session(*model, so);
                            session.set_metrics_callback([&](const StepMetrics &m) { last = m.memory; });
                            results.push_back(generate(session, reqs.front()));
                            if (!session.backend_note().empty())
                                throw BackendError(session.backend_note());
                        } else {
                            results = generate_batch(*model, so, reqs, {}, [&](const StepMetrics &m) {
                                last = m.memory;
                                if (m.phase == StepPhase::Decode) {
                                    decode_steps += 1;
                                    decode_thread_sum += m.threads;
                                }
                                if (!paired || m.phase != StepPhase::Decode || m.seconds <= 0)
                                    return;
                                const auto t0 = std::chrono::steady_clock::now();
                                const double bw = paired_probe->read();
                                probe_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
                                // The weights once, and per sequence its embedding row and its
                                // cache at the mean context (as bytes_per_token below).
                                const double bytes = streamed + m.n_tokens * (embd_row + kv_bytes_per_position *
                                                                                             (in + nw / 2.0));
                                step_fractions.push_back(bytes / m.seconds / bw);
                                step_bandwidths.push_back(bw);
                            });
                        }
                        Row r;
                        r.batch = b;
                        r.input = in;
                        r.new_tokens = nw;
                        r.kv = std::string(to_string(mode));
                        r.attn = mem_eff ? "mem-efficient" : "naive";
                        r.causal_flash = so.settings.attention.causal_flash;
                        size_t generated = 0;
                        for (const auto &res : results)
                            generated += res.tokens.size();
                        GenerateResult &f = results.front();
                        f.decode_seconds = std::max(0.0, f.decode_seconds - probe_seconds);
                        r.prefill_tok_s = f.prefill_seconds > 0 ? double(b) * in / f.prefill_seconds : 0;
                        const double steps = double(generated) - b; // first tokens come from prefill
                        r.decode_tok_s = f.decode_seconds > 0 ? steps / f.decode_seconds : 0;
                        const double total_s = f.prefill_seconds + f.decode_seconds;
                        r.throughput = total_s > 0 ? generated / total_s : 0;
                        r.kv_reserved = last.peak_kv_reserved;
                        r.peak_kv_resident = last.peak_kv_resident;
                        r.peak_scratch = last.peak_scratch;
                        r.peak_total = last.peak_total;
                        r.kv_copied = last.kv_bytes_copied;
                        r.rss = last.process_rss;
                        r.device_used = last.device_used;
                        // Decode reads the streamed weights once per step (shared by the batch),
                        // its token's embedding row and each sequence's cache, on average
                        // in + new/2 positions long.
                        r.bytes_per_token = streamed / b + embd_row +
                                            kv_bytes_per_position * (in + nw / 2.0);
                        // Prefill: 2 flops per weight per token, plus attention over in/2 keys on
                        // average; the output matrix, and the last layer's attention, output
                        // projection and feed-forward, only for each sequence's last token, the
                        // one row whose logits a prompt keeps (the forward pass skips the others).
                        const double kept = cost.output_params + cost.last_layer_kept_params;
                        r.product_flops = double(b) * in * 2 * (matmul_params - kept) + double(b) * 2 * kept;
                        r.attention_flops = double(b) * 4.0 * hp.n_embd *
                                            (std::max(0, hp.n_layer - 1) * in * (in / 2.0) + double(in));
                        r.attention_families = attention_families_of(mem_eff);
                        r.prefill_seconds = f.prefill_seconds;
                        const double flops = r.product_flops + r.attention_flops;
                        r.prefill_gflop_s = f.prefill_seconds > 0 ? flops / f.prefill_seconds / 1e9 : 0;
                        r.paired_roofline_fraction = median(step_fractions);
                        r.paired_bandwidth = median(step_bandwidths);
                        r.decode_threads = decode_steps > 0 ? decode_thread_sum / decode_steps : 0;
                        rows.push_back(r);
                    }

    // The time prefill's operations would take at the peaks of the instructions they run on,
    // over the time they took: the products at theirs, attention's scores and values at theirs.
    const auto ideal_seconds = [&](const Row &r) {
        const double p = peaks.at(family), s = peaks.at(r.attention_families.scores),
                     v = peaks.at(r.attention_families.values);
        return p > 0 && s > 0 && v > 0 ? r.product_flops / p + r.attention_flops / 2 / s + r.attention_flops / 2 / v : 0.0;
    };
    // The rate attention's operations could reach at best (their half on each peak).
    const auto attention_peak = [&](const Row &r) {
        const double s = peaks.at(r.attention_families.scores), v = peaks.at(r.attention_families.values);
        return s > 0 && v > 0 ? 2 / (1 / s + 1 / v) : 0.0;
    };
    const auto attention_instruction = [](const Row &r) {
        const std::string s = compute_family_name(r.attention_families.scores),
                          v = compute_family_name(r.attention_families.values);
        return s == v ? s : s + " (scores), " + v + " (values)";
    };
    if (probe) {
        bandwidth = std::max(bandwidth, measure_read_bandwidth(n_threads));
        measure_peaks();
        for (Row &r : rows) {
            r.roofline_fraction = r.decode_tok_s / (bandwidth / r.bytes_per_token);
            r.prefill_roofline_fraction = r.prefill_seconds > 0 ? ideal_seconds(r) / r.prefill_seconds : 0;
        }
    }
    const double compute_peak = peaks.at(family);

    if (a.flag("--json")) {
        nlohmann::json out = nlohmann::json::array();
        for (const Row &r : rows)
            out.push_back({{"batch_size", r.batch}, {"input_tokens", r.input}, {"new_tokens", r.new_tokens},
                           {"kv_mode", r.kv}, {"kv_type_k", std::string(to_string(type_k))},
                           {"kv_type_v", std::string(to_string(type_v))}, {"attention", r.attn}, {"causal_flash", r.causal_flash},
                           {"prefill_tok_s", r.prefill_tok_s}, {"decode_tok_s", r.decode_tok_s},
                           {"throughput_tok_s", r.throughput}, {"kv_reserved_bytes", r.kv_reserved},
                           {"bytes_per_token", r.bytes_per_token}, {"bandwidth_gb_s", bandwidth / 1e9},
                           {"roofline_fraction", r.roofline_fraction}, {"prefill_gflop_s", r.prefill_gflop_s},
                           {"compute_peak_gflop_s", compute_peak / 1e9}, {"compute_instruction", compute_family_name(family)},
                           {"attention_peak_gflop_s", attention_peak(r) / 1e9},
                           {"attention_instruction", attention_instruction(r)},
                           {"prefill_roofline_fraction", r.prefill_roofline_fraction},
                           {"paired_roofline_fraction", r.paired_roofline_fraction},
                           {"paired_bandwidth_gb_s", r.paired_bandwidth / 1e9},
                           {"threads", n_threads}, {"decode_threads", r.decode_threads},
                           {"cpu_kernels", cpu_kernel_name()},
                           {"peak_kv_resident_bytes", r.peak_kv_resident}, {"peak_scratch_bytes", r.peak_scratch},
                           {"peak_total_bytes", r.peak_total}, {"kv_bytes_copied", r.kv_copied},
                           {"process_rss_bytes", r.rss}, {"backend", std::string(to_string(backend))},
                           {"device_used_bytes", r.device_used}});
        std::cout << out.dump(2) << "\n";
        return 0;
    }
    if (a.flag("--csv")) {
        std::cout << "batch_size,input_tokens,new_tokens,kv_mode,kv_type_k,kv_type_v,attention,causal_flash,prefill_tok_s,"
                     "decode_tok_s,throughput_tok_s,kv_reserved_bytes,peak_kv_resident_bytes,"
                     "peak_scratch_bytes,peak_total_bytes,kv_bytes_copied,process_rss_bytes,bytes_per_token,"
                     "bandwidth_gb_s,roofline_fraction,prefill_gflop_s,compute_peak_gflop_s,prefill_roofline_fraction,"
                     "paired_roofline_fraction,paired_bandwidth_gb_s,attention_peak_gflop_s\n";
        for (const Row &r : rows)
            std::printf("%d,%d,%d,%s,%s,%s,%s,%d,%.2f,%.2f,%.2f,%llu,%llu,%llu,%llu,%llu,%llu,%.0f,%.2f,%.4f,%.2f,%.2f,%.4f,%.4f,%.2f,%.2f\n",
                        r.batch, r.input, r.new_tokens, r.kv.c_str(), to_string(type_k).data(), to_string(type_v).data(),
                        r.attn.c_str(), r.causal_flash ? 1 : 0, r.prefill_tok_s,
                        r.decode_tok_s, r.throughput, (unsigned long long)r.kv_reserved,
                        (unsigned long long)r.peak_kv_resident, (unsigned long long)r.peak_scratch,
                        (unsigned long long)r.peak_total, (unsigned long long)r.kv_copied,
                        (unsigned long long)r.rss, r.bytes_per_token, bandwidth / 1e9, r.roofline_fraction,
                        r.prefill_gflop_s, compute_peak / 1e9, r.prefill_roofline_fraction,
                        r.paired_roofline_fraction, r.paired_bandwidth / 1e9, attention_peak(r) / 1e9);
        return 0;
    }
    std::string types;
    for (const auto &[type, count] : model->info().tensor_types)
        types += (types.empty() ? "" : ", ") + type + " x" + std::to_string(count);
    std::string attention_peaks;
    for (const Row &r : rows) {
        char line[256];
        std::snprintf(line, sizeof line, "%.1f GFLOP/s (%s)", attention_peak(r) / 1e9, attention_instruction(r).c_str());
        if (attention_peaks.find(line) == std::string::npos)
            attention_peaks += (attention_peaks.empty() ? "" : "; ") + std::string(line);
    }
    std::printf("model %s (tensors %s; %s MiB), %d threads, %s kernels, read bandwidth %.1f GB/s, "
                "compute peak %.1f GFLOP/s (%s), attention's %s\n",
                model->info().name.c_str(), types.c_str(), mib(model->info().weight_bytes).c_str(), n_threads,
                cpu_kernel_name().c_str(), bandwidth / 1e9, compute_peak / 1e9, compute_family_name(family).c_str(),
                attention_peaks.c_str());
    std::printf("KV cache: keys %s, values %s (%s per position)\n", to_string(type_k).data(),
                to_string(type_v).data(), (std::to_string(int64_t(kv_bytes_per_position)) + " bytes").c_str());
    if (backend == ComputeBackend::Cuda)
        std::printf("backend cuda: the forward pass on the GPU (roofline and GFLOP/s columns are CPU figures)\n");
    std::printf("| batch | input | new | kv | attention | prefill tok/s | prefill GFLOP/s | prefill roofline | "
                "decode tok/s | roofline | throughput tok/s | KV reserved MiB | KV peak MiB | scratch peak MiB | peak total MiB | "
                "KV copied MiB |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (const Row &r : rows)
        std::printf("| %d | %d | %d | %s | %s%s | %.1f | %.2f | %.0f%% | %.1f | %.0f%% | %.1f | %s | %s | %s | %s | %s |\n",
                    r.batch, r.input, r.new_tokens, r.kv.c_str(), r.attn.c_str(), r.causal_flash ? "+causal" : "",
                    r.prefill_tok_s, r.prefill_gflop_s, 100 * r.prefill_roofline_fraction, r.decode_tok_s, 100 * r.roofline_fraction, r.throughput,
                    mib(r.kv_reserved).c_str(), mib(r.peak_kv_resident).c_str(), mib(r.peak_scratch).c_str(),
                    mib(r.peak_total).c_str(), mib(r.kv_copied).c_str());
    if (paired)
        for (const Row &r : rows)
            std::printf("paired probe (batch %d, input %d): decode steps at a median %.0f%% of the read bandwidth "
                        "measured right after each (median %.1f GB/s)\n",
                        r.batch, r.input, 100 * r.paired_roofline_fraction, r.paired_bandwidth / 1e9);
    return 0;
}

} // namespace longscope::cli
