#include "core/app_settings.h"

#include "core/settings_json.h"

#include <QFileInfo>
#include <QJsonDocument>
#include <QJsonObject>

#include <cmath>

namespace longscope::ui {

namespace {

const QString k_gen = QStringLiteral("generation/");
const QString k_eng = QStringLiteral("longContext/");

// The long-context settings: settingsToJson() as one compact JSON string.
const QString k_engineJson = k_eng + QStringLiteral("settings");

// Before that, each setting had a key of its own: [key, JSON name, kind].
enum class LegacyKind { Number, Bool, Text };
struct LegacyKey {
    const char *key;
    const char *json;
    LegacyKind kind;
};
constexpr LegacyKey k_legacyKeys[] = {
    {"ntkAlpha", "ntk_alpha", LegacyKind::Number},
    {"ntkAuto", "ntk_auto", LegacyKind::Bool},
    {"keysBeforeRope", "store_kv_before_rope", LegacyKind::Bool},
    {"memoryEfficient", "memory_efficient", LegacyKind::Bool},
    {"causalFlash", "causal_flash", LegacyKind::Bool},
    {"kvMode", "kv_mode", LegacyKind::Text},
    {"contextLimit", "context_limit", LegacyKind::Number},
    {"overflow", "overflow", LegacyKind::Text},
};

QJsonObject legacyEngineJson(const QSettings &s)
{
    QJsonObject json;
    for (const LegacyKey &k : k_legacyKeys) {
        const QVariant v = s.value(k_eng + QLatin1String(k.key));
        if (!v.isValid())
            continue;
        switch (k.kind) {
        case LegacyKind::Number: {
            bool ok = false;
            const double d = v.toDouble(&ok);
            if (ok)
                json.insert(QLatin1String(k.json), d);
            break;
        }
        case LegacyKind::Bool: json.insert(QLatin1String(k.json), v.toBool()); break;
        case LegacyKind::Text: json.insert(QLatin1String(k.json), v.toString()); break;
        }
    }
    return json;
}

// Each field that is valid on its own; a bad one falls back to its default without taking
// the others with it.
longscope::Settings validFields(const QJsonObject &json)
{
    QJsonObject valid;
    for (auto it = json.begin(); it != json.end(); ++it)
        if (settingsFromJson(QJsonObject{{it.key(), it.value()}}))
            valid.insert(it.key(), it.value());
    return settingsFromJson(valid).value_or(longscope::Settings{});
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
    const QSettings &s = *m_settings;
    if (!s.contains(k_engineJson))
        return validFields(legacyEngineJson(s));
    const QJsonDocument doc = QJsonDocument::fromJson(s.value(k_engineJson).toString().toUtf8());
    return validFields(doc.object());
}

void AppSettings::saveEngineSettings(const longscope::Settings &e)
{
    QSettings &s = *m_settings;
    s.setValue(k_engineJson, QString::fromUtf8(QJsonDocument(settingsToJson(e)).toJson(QJsonDocument::Compact)));
    for (const LegacyKey &k : k_legacyKeys)
        s.remove(k_eng + QLatin1String(k.key));
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
