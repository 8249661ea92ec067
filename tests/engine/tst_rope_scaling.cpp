// config.json rope_scaling (linear, dynamic) and GGUF llama.rope.scaling.* are honoured:
// the engine against the independent reference with the scaling applied there by formula.
#include "support/comparisons.h"
#include "support/gguf_writer.h"
#include "support/llama2c_reference.h"
#include "support/model_files.h"

#include "longscope/engine.h"

#include <QTemporaryDir>
#include <QtTest>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

using namespace longscope;
namespace fs = std::filesystem;

using longscope::test::max_diff;

namespace {

const std::string hf_src = LONGSCOPE_TEST_DATA "/stories260K/hf";
const std::string ref_bin = LONGSCOPE_TEST_DATA "/stories260K/stories260K.bin";
constexpr double k_base = 10000.0;
constexpr int k_head_dim = 8; // stories260K: 64 wide, 8 heads

// An HF directory equal to the shipped one except for the config fields given.
std::string hf_variant(const QTemporaryDir &tmp, const std::string &name, const nlohmann::json &patch)
{
    const fs::path dir = fs::path(tmp.path().toStdString()) / name;
    fs::create_directories(dir);
    for (const auto &e : fs::directory_iterator(hf_src))
        fs::copy_file(e.path(), dir / e.path().filename(), fs::copy_options::overwrite_existing);
    std::ifstream in(dir / "config.json");
    nlohmann::json cfg = nlohmann::json::parse(in);
    cfg.merge_patch(patch);
    std::ofstream(dir / "config.json") << cfg.dump(2);
    return dir.string();
}

// Engine logits after the prompt and after each continuation token.
std::vector<std::vector<float>> engine_trace(const Model &m, const std::vector<int32_t> &prompt,
                                             const std::vector<int32_t> &cont)
{
    Session s(m, {1024, 2});
    std::vector<std::vector<float>> out;
    auto l = s.eval(prompt);
    out.emplace_back(l.begin(), l.end());
    for (int32_t id : cont) {
        auto n = s.eval(std::span<const int32_t>(&id, 1));
        out.emplace_back(n.begin(), n.end());
    }
    return out;
}

// Reference logits for the same sequence. `base_for(L)` is the RoPE base used while the
// sequence is L tokens long; the prompt is rotated with the base for its full length, as an
// implementation that evaluates the prompt in one batch does.
std::vector<std::vector<float>> reference_trace(const std::vector<int32_t> &prompt,
                                                const std::vector<int32_t> &cont, double pos_scale,
                                                const std::function<double(int)> &base_for)
{
    auto ref = longscope_test::Llama2cReference::load(ref_bin);
    std::vector<std::vector<float>> out;
    ref.set_rope(base_for(int(prompt.size())), pos_scale);
    std::vector<float> l;
    for (size_t i = 0; i < prompt.size(); ++i)
        l = ref.forward(prompt[i], int(i));
    out.push_back(l);
    int pos = int(prompt.size());
    for (int32_t id : cont) {
        ref.set_rope(base_for(pos + 1), pos_scale);
        out.push_back(ref.forward(id, pos++));
    }
    return out;
}


std::vector<int32_t> greedy_tokens(const Model &m, const std::vector<int32_t> &prompt, int n)
{
    Session s(m, {1024, 2});
    GenerateRequest req;
    req.prompt = prompt;
    req.max_new_tokens = n;
    req.sampling.temperature = 0;
    req.stop_at_eos = false;
    return generate(s, req).tokens;
}

} // namespace

class TestRopeScaling : public QObject {
    Q_OBJECT
    QTemporaryDir m_tmp;

private slots:
    void linear_matches_reference_data()
    {
        QTest::addColumn<double>("factor");
        QTest::newRow("factor 2") << 2.0;
        QTest::newRow("factor 4") << 4.0;
    }
    void linear_matches_reference()
    {
        QFETCH(double, factor);
        auto m = Model::load(hf_variant(m_tmp, "linear" + std::to_string(int(factor)),
                                        {{"rope_scaling", {{"type", "linear"}, {"factor", factor}}}}));
        QCOMPARE(m->hparams().rope_scaling, RopeScalingType::Linear);
        auto prompt = m->tokenizer().encode("Once upon a time", true);
        auto cont = greedy_tokens(*m, prompt, 120);
        auto e = engine_trace(*m, prompt, cont);
        auto r = reference_trace(prompt, cont, 1.0 / factor, [](int) { return k_base; });
        for (size_t i = 0; i < e.size(); ++i)
            QVERIFY2(max_diff(e[i], r[i]) < 1e-3, qPrintable(QString("step %1: %2").arg(i).arg(max_diff(e[i], r[i]))));
        // And it is a real change: the unscaled model differs.
        auto plain = Model::load(hf_src);
        QVERIFY(greedy_tokens(*plain, prompt, 120) != cont);
    }

    void dynamic_matches_reference()
    {
        // A trained length of 16 makes the dynamic base grow within a short test.
        const int train = 16;
        const double f = 2.0;
        auto m = Model::load(hf_variant(m_tmp, "dynamic",
                                        {{"max_position_embeddings", train},
                                         {"rope_scaling", {{"rope_type", "dynamic"}, {"factor", f}}}}));
        QCOMPARE(m->hparams().rope_scaling, RopeScalingType::Dynamic);
        auto prompt = m->tokenizer().encode("Once upon a time", true);
        auto cont = greedy_tokens(*m, prompt, 60);
        // Hugging Face's dynamic NTK: base * ((f * L / L_train) - (f - 1))^(d / (d - 2)) for L > L_train.
        auto base_for = [&](int L) {
            if (L <= train)
                return k_base;
            const double d = k_head_dim;
            return k_base * std::pow(f * L / train - (f - 1), d / (d - 2));
        };
        auto e = engine_trace(*m, prompt, cont);
        auto r = reference_trace(prompt, cont, 1.0, base_for);
        for (size_t i = 0; i < e.size(); ++i)
            QVERIFY2(max_diff(e[i], r[i]) < 1e-3, qPrintable(QString("step %1: %2").arg(i).arg(max_diff(e[i], r[i]))));
        // Up to the trained length it is exactly the unscaled model.
        auto plain = Model::load(hf_src);
        auto ep = engine_trace(*plain, prompt, std::vector<int32_t>(cont.begin(), cont.begin() + (train - int(prompt.size()))));
        for (size_t i = 0; i < ep.size(); ++i)
            QCOMPARE(ep[i], e[i]);
    }

    void gguf_linear_equals_hf_linear()
    {
        auto src = GgufFile::open(LONGSCOPE_BUNDLED_MODEL);
        test::GgufWriter w;
        test::copy_metadata(*src, w);
        w.add_string("llama.rope.scaling.type", "linear");
        w.add_f32("llama.rope.scaling.factor", 4.0f);
        for (const GgufTensorInfo &t : src->tensors())
            w.add_tensor(t.name, t.shape, uint32_t(t.type),
                         std::string(reinterpret_cast<const char *>(t.data), t.nbytes));
        const std::string path = m_tmp.filePath("linear4.gguf").toStdString();
        QVERIFY(w.write(path));
        auto g = Model::load(path);
        QCOMPARE(g->hparams().rope_scaling, RopeScalingType::Linear);
        QCOMPARE(g->hparams().rope_scaling_factor, 4.0f);
        auto h = Model::load(hf_variant(m_tmp, "linear4b", {{"rope_scaling", {{"type", "linear"}, {"factor", 4.0}}}}));
        auto prompt = g->tokenizer().encode("Tom and Lily went to the", true);
        QCOMPARE(greedy_tokens(*g, prompt, 150), greedy_tokens(*h, prompt, 150));
    }
};

QTEST_APPLESS_MAIN(TestRopeScaling)
#include "tst_rope_scaling.moc"
