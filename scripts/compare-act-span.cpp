// What quantizing the activations of K-type products with one scale per 256 values (the
// default under the VNNI kernels, cpu_options.h k_act_span) costs in accuracy against one scale
// per 32, measured two ways:
//
//   ops:   a Q4_K matrix (2048 inputs, 512 rows, Gaussian weights) times activations, Gaussian
//          and with a few large channels as real models' hidden states have (values 20-60 times
//          the rest); the errors of the two spans against the same weights with float
//          activations, beside the error the weights' own Q4_K rounding makes.
//   model: a model's logits over a text, with the products on float activations (the
//          dequantizing path) as the reference and the integer path at either span: relative
//          RMS error of the logits, mean KL divergence of the next-token distributions, and how
//          often the top token agrees. With REF (the file the model was quantized from) the
//          reference is REF's logits, and the model's own float-activation logits are listed too:
//          the error its weights' quantization makes, beside which the spans' add theirs.
//
// Build (from the repository root, after the project's build):
//   g++ -O2 -std=c++20 -Iengine/src -Iengine/include scripts/compare-act-span.cpp \
//       build/engine/liblongscope_engine.a -lsentencepiece -lpcre2-8 -ldl -lpthread -o /tmp/cas
// Run: /tmp/cas ops
//      /tmp/cas model MODEL.gguf TEXT_FILE [TOKENS [REF.gguf]]
#include "cpu/ops.h"
#include "cpu/qdot.h"
#include "cpu/quant.h"
#include "cpu/thread_pool.h"
#include "longscope/cpu_options.h"
#include "longscope/engine.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

using namespace longscope;

namespace {

double rms(const std::vector<double> &v)
{
    double s = 0;
    for (double x : v)
        s += x * x;
    return std::sqrt(s / double(v.size()));
}

void set_options(QuantMatmulPath path, bool k_span)
{
    CpuOptions o = cpu_options();
    o.quant_matmul = path;
    o.k_act_span = k_span;
    set_cpu_options(o);
}

int ops()
{
    const int64_t n_in = 2048, n_out = 512, n_tokens = 64;
    std::mt19937 rng(7);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> w(size_t(n_in * n_out));
    for (float &v : w)
        v = nd(rng) * 0.02f;
    const size_t rb = row_bytes(DType::Q4_K, n_in);
    std::vector<uint8_t> q(rb * size_t(n_out));
    std::vector<float> wq(w.size());
    for (int64_t r = 0; r < n_out; ++r) {
        quantize_row(DType::Q4_K, w.data() + r * n_in, q.data() + size_t(r) * rb, n_in);
        dequantize_row(DType::Q4_K, q.data() + size_t(r) * rb, wq.data() + r * n_in, n_in);
    }
    WeightView view;
    view.type = DType::Q4_K;
    view.shape = {n_in, n_out};
    view.data = q.data();
    view.nbytes = q.size();
    ThreadPool pool(2);
    std::printf("%-28s %12s %12s %12s %12s\n", "activations", "weights", "span 32", "span 256", "256 / 32");
    for (int outliers : {0, 4, 16}) {
        std::vector<float> x(size_t(n_in * n_tokens));
        for (float &v : x)
            v = nd(rng);
        // Channels spread over the row (so that a span of 256 holds at most a few), the same in
        // every token, as the massive activations of trained models are.
        for (int k = 0; k < outliers; ++k) {
            const int64_t c = (k * 509 + 97) % n_in;
            const float scale = 20.0f + 40.0f * float(k % 5) / 4.0f;
            for (int64_t t = 0; t < n_tokens; ++t)
                x[size_t(t * n_in + c)] *= scale;
        }
        std::vector<double> e_w, e_32, e_256, ref_all;
        std::vector<float> y32(size_t(n_out * n_tokens)), y256(y32.size());
        set_options(QuantMatmulPath::Integer, false);
        matmul(pool, view, x.data(), y32.data(), n_tokens);
        set_options(QuantMatmulPath::Integer, true);
        matmul(pool, view, x.data(), y256.data(), n_tokens);
        for (int64_t t = 0; t < n_tokens; ++t)
            for (int64_t o = 0; o < n_out; ++o) {
                double exact = 0, wexact = 0;
                for (int64_t i = 0; i < n_in; ++i) {
                    exact += double(w[size_t(o * n_in + i)]) * x[size_t(t * n_in + i)];
                    wexact += double(wq[size_t(o * n_in + i)]) * x[size_t(t * n_in + i)];
                }
                ref_all.push_back(exact);
                e_w.push_back(wexact - exact);
                e_32.push_back(double(y32[size_t(t * n_out + o)]) - wexact);
                e_256.push_back(double(y256[size_t(t * n_out + o)]) - wexact);
            }
        const double r = rms(ref_all);
        const std::string name = outliers ? std::to_string(outliers) + " large channels" : "Gaussian";
        std::printf("%-28s %12.3e %12.3e %12.3e %12.2f\n", name.c_str(), rms(e_w) / r, rms(e_32) / r,
                    rms(e_256) / r, rms(e_256) / rms(e_32));
    }
    std::printf("(RMS error over RMS of the exact product; weights: Q4_K's rounding with float activations;\n"
                " spans: the activations' rounding on top of it, against the Q4_K weights with float activations)\n");
    return 0;
}

std::vector<float> logits_with(const std::string &path, const std::vector<int32_t> &tokens, QuantMatmulPath p,
                               bool k_span, int &n_vocab)
{
    set_options(p, k_span);
    auto model = Model::load(path);
    SessionOptions so;
    so.n_ctx = int(tokens.size()) + 8;
    Session s(*model, so);
    const auto l = s.eval(tokens, true);
    n_vocab = int(l.size() / tokens.size());
    return {l.begin(), l.end()};
}

int model(const std::string &path, const std::string &text_path, int n, const std::string &ref_path)
{
    std::ifstream f(text_path);
    std::stringstream ss;
    ss << f.rdbuf();
    std::vector<int32_t> tokens;
    {
        auto m = Model::load(path);
        tokens = m->tokenizer().encode(ss.str(), true);
    }
    if (int(tokens.size()) > n)
        tokens.resize(size_t(n));
    int nv = 0;
    const std::vector<float> ref = logits_with(ref_path.empty() ? path : ref_path, tokens, QuantMatmulPath::Dequantize,
                                               false, nv);
    for (int k = 0; k < 3; ++k) {
        const bool k_span = k == 2;
        if (k == 0 && ref_path.empty())
            continue;
        const std::vector<float> got =
            logits_with(path, tokens, k == 0 ? QuantMatmulPath::Dequantize : QuantMatmulPath::Integer, k_span, nv);
        double se = 0, sr = 0, kl = 0;
        int top = 0;
        for (size_t t = 0; t < tokens.size(); ++t) {
            const float *r = ref.data() + t * size_t(nv), *g = got.data() + t * size_t(nv);
            double mr = -1e30, mg = -1e30;
            int ar = 0, ag = 0;
            for (int v = 0; v < nv; ++v) {
                se += (double(g[v]) - r[v]) * (double(g[v]) - r[v]);
                sr += double(r[v]) * r[v];
                if (r[v] > mr) { mr = r[v]; ar = v; }
                if (g[v] > mg) { mg = g[v]; ag = v; }
            }
            top += ar == ag;
            double zr = 0, zg = 0;
            for (int v = 0; v < nv; ++v) {
                zr += std::exp(double(r[v]) - mr);
                zg += std::exp(double(g[v]) - mg);
            }
            for (int v = 0; v < nv; ++v) {
                const double lr = double(r[v]) - mr - std::log(zr), lg = double(g[v]) - mg - std::log(zg);
                kl += std::exp(lr) * (lr - lg);
            }
        }
        std::printf("%-22s logits relative RMS error %.3e, mean KL %.3e nats, top token agrees %d / %zu\n",
                    k == 0 ? "float activations:" : k_span ? "span 256:" : "span 32:", std::sqrt(se / sr),
                    kl / double(tokens.size()), top, tokens.size());
    }
    return 0;
}

} // namespace

int main(int argc, char **argv)
{
    if (argc >= 2 && std::strcmp(argv[1], "ops") == 0)
        return ops();
    if (argc >= 4 && std::strcmp(argv[1], "model") == 0)
        return model(argv[2], argv[3], argc >= 5 ? std::atoi(argv[4]) : 512, argc >= 6 ? argv[5] : "");
    std::fprintf(stderr, "usage: %s ops | model MODEL TEXT [TOKENS [REF]]\n", argv[0]);
    return 2;
}
