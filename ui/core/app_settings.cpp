#include "core/app_settings.h"

#include <QFileInfo>

#include <cmath>

namespace longscope::ui {

namespace {

const QString k_gen = QStringLiteral("generation/");
const QString k_eng = QStringLiteral("longContext/");

QString kvModeName(KvMode m) { return QString::fromLatin1(to_string(m).data(), qsizetype(to_string(m).size())); }
QString overflowName(OverflowPolicy p)
{
    return QString::fromLatin1(to_string(p).data(), qsizetype(to_string(p).size()));
}

} // namespace

AppSettings::AppSettings() : m_owned(std::make_unique<QSettings>()), m_settings(m_owned.get()) {}

AppSettings::AppSettings(QSettings *settings) : m_settings(settings) {}

AppSettings::~AppSettings() = default;

void AppSettings::sync() { m_settings->sync(); }

GenerationParams AppSettings::loadGenerationParams() const
{
    const GenerationParams d;
    GenerationParams p;
    const QSettings &s = *m_settings;
    p.max_new_tokens = s.value(k_gen + "maxNewTokens", d.max_new_tokens).toInt();
    if (p.max_new_tokens < 1)
        p.max_new_tokens = d.max_new_tokens;
    p.temperature = s.value(k_gen + "temperature", d.temperature).toFloat();
    if (!std::isfinite(p.temperature) || p.temperature < 0)
        p.temperature = d.temperature;
    p.top_p = s.value(k_gen + "topP", d.top_p).toFloat();
    if (!std::isfinite(p.top_p) || p.top_p <= 0 || p.top_p > 1)
        p.top_p = d.top_p;
    p.top_k = s.value(k_gen + "topK", d.top_k).toInt();
    if (p.top_k < 0)
        p.top_k = d.top_k;
    p.do_sample = s.value(k_gen + "doSample", d.do_sample).toBool();
    p.repetition_penalty = s.value(k_gen + "repetitionPenalty", d.repetition_penalty).toFloat();
    if (!std::isfinite(p.repetition_penalty) || p.repetition_penalty <= 0)
        p.repetition_penalty = d.repetition_penalty;
    p.seed = s.value(k_gen + "seed", QVariant::fromValue<quint64>(d.seed)).toULongLong();
    return p;
}

void AppSettings::saveGenerationParams(const GenerationParams &p)
{
    QSettings &s = *m_settings;
    s.setValue(k_gen + "maxNewTokens", p.max_new_tokens);
    s.setValue(k_gen + "temperature", double(p.temperature));
    s.setValue(k_gen + "topP", double(p.top_p));
    s.setValue(k_gen + "topK", p.top_k);
    s.setValue(k_gen + "doSample", p.do_sample);
    s.setValue(k_gen + "repetitionPenalty", double(p.repetition_penalty));
    s.setValue(k_gen + "seed", QVariant::fromValue<quint64>(p.seed));
}

longscope::Settings AppSettings::loadEngineSettings() const
{
    const longscope::Settings d;
    longscope::Settings e;
    const QSettings &s = *m_settings;
    e.rope.ntk_alpha = s.value(k_eng + "ntkAlpha", d.rope.ntk_alpha).toFloat();
    if (!std::isfinite(e.rope.ntk_alpha) || e.rope.ntk_alpha < 1.0f)
        e.rope.ntk_alpha = d.rope.ntk_alpha;
    e.rope.ntk_auto = s.value(k_eng + "ntkAuto", d.rope.ntk_auto).toBool();
    e.rope.store_kv_before_rope = s.value(k_eng + "keysBeforeRope", d.rope.store_kv_before_rope).toBool();
    e.attention.memory_efficient = s.value(k_eng + "memoryEfficient", d.attention.memory_efficient).toBool();
    e.attention.causal_flash = s.value(k_eng + "causalFlash", d.attention.causal_flash).toBool();
    const auto kv = parse_kv_mode(s.value(k_eng + "kvMode", kvModeName(d.kv_mode)).toString().toStdString());
    e.kv_mode = kv ? *kv : d.kv_mode;
    e.context_limit = s.value(k_eng + "contextLimit", d.context_limit).toInt();
    if (e.context_limit < 0 || e.context_limit > (1 << 24))
        e.context_limit = d.context_limit;
    const auto ov = parse_overflow(s.value(k_eng + "overflow", overflowName(d.overflow)).toString().toStdString());
    e.overflow = ov ? *ov : d.overflow;
    return e;
}

void AppSettings::saveEngineSettings(const longscope::Settings &e)
{
    QSettings &s = *m_settings;
    s.setValue(k_eng + "ntkAlpha", double(e.rope.ntk_alpha));
    s.setValue(k_eng + "ntkAuto", e.rope.ntk_auto);
    s.setValue(k_eng + "keysBeforeRope", e.rope.store_kv_before_rope);
    s.setValue(k_eng + "memoryEfficient", e.attention.memory_efficient);
    s.setValue(k_eng + "causalFlash", e.attention.causal_flash);
    s.setValue(k_eng + "kvMode", kvModeName(e.kv_mode));
    s.setValue(k_eng + "contextLimit", e.context_limit);
    s.setValue(k_eng + "overflow", overflowName(e.overflow));
}

QString AppSettings::loadSystemPrompt() const
{
    return m_settings->value(QStringLiteral("chat/systemPrompt")).toString();
}

void AppSettings::saveSystemPrompt(const QString &prompt)
{
    m_settings->setValue(QStringLiteral("chat/systemPrompt"), prompt);
}

static QStringList normaliseRecent(const QStringList &paths, bool dropMissing)
{
    QStringList out;
    for (const QString &p : paths) {
        if (p.isEmpty() || out.contains(p))
            continue;
        if (dropMissing && !QFileInfo::exists(p))
            continue;
        out << p;
        if (out.size() == AppSettings::kMaxRecentModels)
            break;
    }
    return out;
}

QStringList AppSettings::loadRecentModels() const
{
    return normaliseRecent(m_settings->value(QStringLiteral("models/recent")).toStringList(), true);
}

void AppSettings::saveRecentModels(const QStringList &paths)
{
    m_settings->setValue(QStringLiteral("models/recent"), normaliseRecent(paths, false));
}

void AppSettings::addRecentModel(const QString &path)
{
    if (path.isEmpty())
        return;
    QStringList list = m_settings->value(QStringLiteral("models/recent")).toStringList();
    list.removeAll(path);
    list.prepend(path);
    saveRecentModels(list);
}

QString AppSettings::loadLastModel() const { return m_settings->value(QStringLiteral("models/last")).toString(); }

void AppSettings::saveLastModel(const QString &path) { m_settings->setValue(QStringLiteral("models/last"), path); }

QByteArray AppSettings::loadWindowGeometry() const
{
    return m_settings->value(QStringLiteral("window/geometry")).toByteArray();
}

void AppSettings::saveWindowGeometry(const QByteArray &geometry)
{
    m_settings->setValue(QStringLiteral("window/geometry"), geometry);
}

QByteArray AppSettings::loadWindowState() const
{
    return m_settings->value(QStringLiteral("window/state")).toByteArray();
}

void AppSettings::saveWindowState(const QByteArray &state)
{
    m_settings->setValue(QStringLiteral("window/state"), state);
}

} // namespace longscope::ui
