// Every architecture family against Hugging Face transformers: tiny random-weight models made
// and run by scripts/gen-arch-fixtures.py (tests/data/arch/<family>/), loaded here from their
// HF directory and from the GGUF of the same weights. Logits of every position of a 40-token
// sequence (past the sliding windows and LongRoPE's original context) and a 12-token one must
// be within k_tol of transformers' and pick the same token; a 32-token greedy continuation
// must be the same tokens. Then the RoPE methods chosen through Settings on a model whose file
// has no scaling must reproduce the file's own method, and the refusals name what is missing.
#include "support/arch_fixtures.h"

#include "longscope/engine.h"
#include "longscope/errors.h"
#include "longscope/generator.h"
#include "longscope/model.h"
#include "longscope/quantize.h"

#include <QTemporaryDir>
#include <QtTest>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

using namespace longscope;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

using test::k_arch_families;
using RefSequence = test::ArchRefSequence;
using Reference = test::ArchReference;

const std::string k_dir = LONGSCOPE_TEST_DATA "/arch";
// F32 weights throughout: the engine and transformers differ only in the order of float
// sums and in the transcendental functions; logits are of order 1-10.
constexpr double k_tol = 2e-4;

Reference load_reference(const std::string &family)
{
    Reference r = test::load_arch_reference(family);
    if (r.n_vocab == 0)
        qFatal("tests/data/arch/%s/reference.json cannot be read", family.c_str());
    return r;
}

int argmax(std::span<const float> v)
{
    return int(std::max_element(v.begin(), v.end()) - v.begin());
}

// Largest difference of the engine's logits of every position from the reference; fails on
// a differing argmax.
double compare_logits(const Model &m, const RefSequence &ref, int n_vocab, const Settings &settings = {})
{
    Session s(m, {128, 2, settings});
    const std::span<const float> got = s.eval(ref.tokens, /*all_logits=*/true);
    if (got.size() != ref.logits.size())
        return INFINITY;
    double worst = 0;
    for (size_t t = 0; t < ref.tokens.size(); ++t) {
        const auto g = got.subspan(t * size_t(n_vocab), size_t(n_vocab));
        const auto r = std::span<const float>(ref.logits).subspan(t * size_t(n_vocab), size_t(n_vocab));
        for (int v = 0; v < n_vocab; ++v)
            worst = std::max(worst, double(std::fabs(g[size_t(v)] - r[size_t(v)])));
        if (argmax(g) != argmax(r))
            return INFINITY;
    }
    return worst;
}

// Plain attention with an explicit mask, with causality from positions, and memory-efficient
// (tiled) attention with either (Gemma's sliding-window and soft-capped layers included).
std::array<Settings, 4> attention_settings()
{
    std::array<Settings, 4> s{};
    s[1].attention.causal_flash = true;
    s[2].attention.memory_efficient = true;
    s[2].attention.causal_flash = true;
    s[3].attention.memory_efficient = true;
    return s;
}

std::vector<int32_t> greedy(const Model &m, const std::vector<int32_t> &prompt, int n)
{
    Session s(m, {128, 2});
    std::vector<int32_t> out;
    std::span<const float> l = s.eval(prompt);
    for (int i = 0; i < n; ++i) {
        const int32_t next = argmax(l);
        out.push_back(next);
        l = s.eval(std::span<const int32_t>(&next, 1));
    }
    return out;
}

// A copy of a family's HF directory with config.json patched.
std::string hf_variant(const QTemporaryDir &tmp, const std::string &family, const json &patch)
{
    const fs::path dir = fs::path(tmp.path().toStdString()) / family;
    fs::create_directories(dir);
    for (const auto &e : fs::directory_iterator(k_dir + "/" + family + "/hf"))
        fs::copy_file(e.path(), dir / e.path().filename(), fs::copy_options::overwrite_existing);
    std::ifstream in(dir / "config.json");
    json cfg = json::parse(in);
    cfg.merge_patch(patch);
    std::ofstream(dir / "config.json") << cfg.dump(2);
    return dir.string();
}

std::string load_error(const std::string &path)
{
    try {
        Model::load(path);
    } catch (const Error &e) {
        return e.what();
    }
    return {};
}

} // namespace

class TestArchitectures : public QObject {
    Q_OBJECT

private slots:
    void logits_match_transformers_data()
    {
        QTest::addColumn<QString>("family");
        QTest::addColumn<QString>("format");
        for (const char *f : k_arch_families)
            for (const char *fmt : {"hf", "gguf"})
                QTest::newRow((std::string(f) + "/" + fmt).c_str()) << QString(f) << QString(fmt);
    }

    void logits_match_transformers()
    {
        QFETCH(QString, family);
        QFETCH(QString, format);
        const std::string fam = family.toStdString();
        const std::string path = k_dir + "/" + fam + (format == "hf" ? "/hf" : "/model.gguf");
        const auto m = Model::load(path);
        QCOMPARE(std::string(to_string(m->hparams().family)), fam);
        const Reference ref = load_reference(fam);
        QCOMPARE(m->hparams().n_vocab, ref.n_vocab);
        for (const RefSequence &seq : ref.seqs) {
            for (const Settings &st : attention_settings()) {
                const double d = compare_logits(*m, seq, ref.n_vocab, st);
                qInfo("%s %s, %zu tokens: max |logit - transformers| = %.3g", fam.c_str(), qPrintable(format),
                      seq.tokens.size(), d);
                QVERIFY2(d <= k_tol, qPrintable(QString("max difference %1 > %2").arg(d).arg(k_tol)));
            }
        }
    }

    // A prompt's own logits come from its last row alone: the last layer runs attention's
    // output, the output projection and the feed-forward for that row only. It must still be
    // transformers' last row, with every attention setting.
    void last_row_alone_matches_transformers_data() { logits_match_transformers_data(); }

    void last_row_alone_matches_transformers()
    {
        QFETCH(QString, family);
        QFETCH(QString, format);
        const std::string fam = family.toStdString();
        const auto m = Model::load(k_dir + "/" + fam + (format == "hf" ? "/hf" : "/model.gguf"));
        const Reference ref = load_reference(fam);
        const size_t nv = size_t(ref.n_vocab);
        for (const RefSequence &seq : ref.seqs) {
            const auto want = std::span<const float>(seq.logits).subspan((seq.tokens.size() - 1) * nv, nv);
            for (const Settings &st : attention_settings()) {
                Session s(*m, {128, 2, st});
                const std::span<const float> got = s.eval(seq.tokens);
                QCOMPARE(got.size(), nv);
                double worst = 0;
                for (size_t v = 0; v < nv; ++v)
                    worst = std::max(worst, double(std::fabs(got[v] - want[v])));
                QVERIFY2(worst <= k_tol, qPrintable(QString("max difference %1 > %2").arg(worst).arg(k_tol)));
                QCOMPARE(std::max_element(got.begin(), got.end()) - got.begin(),
                         std::max_element(want.begin(), want.end()) - want.begin());
            }
        }
    }

    void greedy_continuation_matches_data() { logits_match_transformers_data(); }

    void greedy_continuation_matches()
    {
        QFETCH(QString, family);
        QFETCH(QString, format);
        const std::string fam = family.toStdString();
        const auto m = Model::load(k_dir + "/" + fam + (format == "hf" ? "/hf" : "/model.gguf"));
        const Reference ref = load_reference(fam);
        QCOMPARE(greedy(*m, ref.prompt, int(ref.continuation.size())), ref.continuation);
    }

    // The generator and batched generation give the same greedy text (phi3: across the LongRoPE
    // switch, where the context is evaluated again with the long factors).
    void generators_match_data() { logits_match_transformers_data(); }

    void generators_match()
    {
        QFETCH(QString, family);
        QFETCH(QString, format);
        const std::string fam = family.toStdString();
        const auto m = Model::load(k_dir + "/" + fam + (format == "hf" ? "/hf" : "/model.gguf"));
        const Reference ref = load_reference(fam);
        GenerateRequest req;
        req.prompt = ref.prompt;
        req.max_new_tokens = int(ref.continuation.size());
        req.sampling.temperature = 0;
        req.end_tokens = std::vector<int32_t>{};
        Session s(*m, {128, 2});
        QCOMPARE(generate(s, req).tokens, ref.continuation);
        const std::vector<GenerateResult> batch = generate_batch(*m, {128, 2}, {req, req});
        QCOMPARE(batch.size(), size_t(2));
        QCOMPARE(batch[0].tokens, ref.continuation);
        QCOMPARE(batch[1].tokens, ref.continuation);
    }

    // A method chosen in the settings on a file without scaling reproduces the method the
    // fixture's file carries (and transformers ran).
    void rope_method_from_settings_data()
    {
        QTest::addColumn<QString>("family");
        QTest::addColumn<int>("method");
        QTest::addColumn<float>("factor");
        QTest::addColumn<int>("orig_ctx");
        QTest::newRow("llama3") << "llama" << int(RopeScalingType::Llama3) << 8.0f << 32;
        QTest::newRow("yarn") << "qwen2" << int(RopeScalingType::Yarn) << 4.0f << 32;
        QTest::newRow("linear") << "gemma3" << int(RopeScalingType::Linear) << 2.0f << 0;
    }

    void rope_method_from_settings()
    {
        QFETCH(QString, family);
        QFETCH(int, method);
        QFETCH(float, factor);
        QFETCH(int, orig_ctx);
        QTemporaryDir tmp;
        const std::string fam = family.toStdString();
        const auto m = Model::load(hf_variant(tmp, fam, {{"rope_scaling", nullptr}}));
        QCOMPARE(m->hparams().rope.type, RopeScalingType::None);
        const Reference ref = load_reference(fam);
        const RefSequence &seq = ref.seqs.front();
        // Without the method the logits are off: the method matters on this sequence.
        QVERIFY(compare_logits(*m, seq, ref.n_vocab) > 10 * k_tol);
        Settings st;
        st.rope.scaling = RopeScalingType(method);
        st.rope.scaling_factor = factor;
        st.rope.scaling_orig_ctx = orig_ctx;
        const double d = compare_logits(*m, seq, ref.n_vocab, st);
        qInfo("%s with %s chosen in the settings: max difference %.3g", fam.c_str(),
              std::string(to_string(RopeScalingType(method))).c_str(), d);
        QVERIFY(d <= k_tol);
        // And "none" in the settings turns the file's own method off.
        const auto own = Model::load(k_dir + "/" + fam + "/hf");
        Settings none;
        none.rope.scaling = RopeScalingType::None;
        QVERIFY(compare_logits(*own, seq, ref.n_vocab, none) > 10 * k_tol);
    }

    // "ntk" chosen as the method is the NTK-aware base of a fixed alpha (tst_techniques checks
    // alpha against its formula): the same logits bit for bit.
    void ntk_method_is_a_fixed_alpha()
    {
        const auto m = Model::load(k_dir + "/qwen3/hf");
        const std::vector<int32_t> tokens = load_reference("qwen3").seqs.front().tokens;
        Settings method, alpha;
        method.rope.scaling = RopeScalingType::Ntk;
        method.rope.scaling_factor = 4.0f;
        alpha.rope.ntk_alpha = 4.0f;
        Session a(*m, {128, 2, method}), b(*m, {128, 2, alpha}), plain(*m, {128, 2});
        const auto la = a.eval(tokens, true), lb = b.eval(tokens, true);
        QVERIFY(std::equal(la.begin(), la.end(), lb.begin(), lb.end()));
        const auto lp = plain.eval(tokens, true);
        QVERIFY(!std::equal(la.begin(), la.end(), lp.begin(), lp.end()));
    }

    void longrope_switches_at_the_original_context()
    {
        // The phi3 fixture's two sequences: 40 tokens (long factors) and 12 (short), both
        // matched above; choosing the short factors for the long one is off.
        const auto m = Model::load(k_dir + "/phi3/hf");
        QCOMPARE(m->hparams().rope.type, RopeScalingType::LongRope);
        QCOMPARE(m->hparams().rope.orig_ctx, 32);
        const Reference ref = load_reference("phi3");
        Settings st;
        st.rope.scaling_orig_ctx = 64; // the method stays the file's; the switch moves past 40
        st.rope.scaling = RopeScalingType::LongRope;
        QVERIFY(compare_logits(*m, ref.seqs[0], ref.n_vocab, st) > 10 * k_tol);
        QVERIFY(compare_logits(*m, ref.seqs[0], ref.n_vocab) <= k_tol);
    }

    // make-model writes each family's tensors and keys as the loader (checked above against
    // transformers through llama.cpp's naming) reads them: small shapes of every family load
    // with their features and run.
    void random_models_of_every_family()
    {
        QTemporaryDir tmp;
        for (ArchFamily fam : {ArchFamily::Llama, ArchFamily::Qwen2, ArchFamily::Qwen3, ArchFamily::Gemma3,
                               ArchFamily::Phi3}) {
            RandomModelSpec spec;
            spec.family = fam;
            spec.n_embd = 64;
            spec.n_layer = 6;
            spec.n_head = 4;
            spec.n_head_kv = 2;
            spec.head_dim = fam == ArchFamily::Qwen3 || fam == ArchFamily::Gemma3 ? 32 : 0;
            spec.n_ff = 128;
            spec.n_vocab = 300;
            spec.n_ctx = 256;
            spec.type = DType::Q8_0;
            spec.tied_embeddings = fam != ArchFamily::Phi3;
            if (fam == ArchFamily::Llama) {
                spec.rope.type = RopeScalingType::Llama3;
                spec.rope.factor = 8;
                spec.rope.orig_ctx = 64;
            }
            if (fam == ArchFamily::Gemma3 || fam == ArchFamily::Phi3)
                spec.sliding_window = 16;
            if (fam == ArchFamily::Gemma3)
                spec.rope_base_swa = 10000;
            const std::string path = tmp.filePath(QString::fromStdString(std::string(to_string(fam)) + ".gguf"))
                                         .toStdString();
            write_random_model_file(path, spec);
            const auto m = Model::load(path);
            const HParams &hp = m->hparams();
            QCOMPARE(hp.family, fam);
            QCOMPARE(hp.head_dim(), spec.head_dim ? spec.head_dim : 16);
            QCOMPARE(hp.tied_embeddings, spec.tied_embeddings);
            QCOMPARE(hp.qkv_bias, fam == ArchFamily::Qwen2);
            QCOMPARE(hp.qk_norm, fam == ArchFamily::Qwen3 || fam == ArchFamily::Gemma3);
            QCOMPARE(hp.sliding_window, spec.sliding_window);
            if (fam == ArchFamily::Gemma3) {
                QCOMPARE(hp.swa_layers, (std::vector<uint8_t>{1, 1, 1, 1, 1, 0}));
                QCOMPARE(hp.rope_base_swa, 10000.0f);
            }
            if (fam == ArchFamily::Llama) {
                QCOMPARE(hp.rope.type, RopeScalingType::Llama3);
                QCOMPARE(hp.rope.freq_factors.size(), size_t(8));
                QCOMPARE(hp.rope.freq_factors.front(), 1.0f); // the highest frequency is kept
                QCOMPARE(hp.rope.freq_factors.back(), 8.0f);  // the lowest divided by the factor
            }
            Session s(*m, {64, 2});
            const std::vector<int32_t> prompt{1, 50, 60, 70, 80};
            const auto l = s.eval(prompt);
            QVERIFY(std::all_of(l.begin(), l.end(), [](float x) { return std::isfinite(x); }));
        }
    }

    void refusals_name_what_is_missing()
    {
        QTemporaryDir tmp;
        // A mixture-of-experts model type.
        std::string e = load_error(hf_variant(tmp, "llama", {{"model_type", "mixtral"}}));
        QVERIFY2(e.find("mixtral") != std::string::npos && e.find("mixture-of-experts") != std::string::npos,
                 e.c_str());
        QVERIFY(e.find('\n') == std::string::npos);
        // Tensors the family does not use: qwen3's q/k norms read as llama.
        QTemporaryDir tmp2;
        e = load_error(hf_variant(tmp2, "qwen3", {{"model_type", "llama"}}));
        QVERIFY2(e.find("self_attn.k_norm.weight") != std::string::npos && e.find("does not use") != std::string::npos,
                 e.c_str());
        // LongRoPE asked of a model without factors.
        const auto m = Model::load(k_dir + "/llama/hf");
        Settings st;
        st.rope.scaling = RopeScalingType::LongRope;
        QVERIFY_THROWS_EXCEPTION(InvalidArgument, Session(*m, {64, 1, st}));
    }
};

QTEST_GUILESS_MAIN(TestArchitectures)
#include "tst_architectures.moc"
