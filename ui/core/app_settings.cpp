#include "core/app_settings.h"

#include "core/read_file.h"
#include "core/settings_json.h"
#include "core/store_files.h"

#include <QCoreApplication>
#include <QFileInfo>
#include <QJsonDocument>
#include <QJsonObject>
#include <QStandardPaths>

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

// A value as a message shows it: quoted, cut short.
QString quoted(const QVariant &v)
{
    QString text = v.toString();
    if (text.isEmpty() && !v.canConvert<QString>())
        return QStringLiteral("a %1").arg(QString::fromLatin1(v.typeName()));
    if (text.size() > 60)
        text = text.left(60) + QStringLiteral("… (%1 characters)").arg(text.size());
    return QLatin1Char('"') + text + QLatin1Char('"');
}

std::optional<bool> boolFrom(const QVariant &v)
{
    if (v.typeId() == QMetaType::Bool)
        return v.toBool();
    const QString t = v.toString().trimmed().toLower();
    if (t == QLatin1String("true"))
        return true;
    if (t == QLatin1String("false"))
        return false;
    return std::nullopt;
}

auto intAtLeast(int min)
{
    return [min](const QVariant &v) -> std::optional<int> {
        bool ok = false;
        const int i = v.toInt(&ok);
        return ok && i >= min ? std::optional<int>(i) : std::nullopt;
    };
}

template <typename Valid>
auto finiteFloat(Valid valid)
{
    return [valid](const QVariant &v) -> std::optional<float> {
        bool ok = false;
        const float f = v.toFloat(&ok);
        return ok && std::isfinite(f) && valid(f) ? std::optional<float>(f) : std::nullopt;
    };
}

std::optional<quint64> seedFrom(const QVariant &v)
{
    bool ok = false;
    const quint64 seed = v.toULongLong(&ok);
    return ok ? std::optional<quint64>(seed) : std::nullopt;
}

QString number(double v) { return QString::number(v); }

} // namespace

AppSettings::AppSettings()
{
    readOriginal(defaultFilePath());
    if (m_unusable.isEmpty()) {
        m_owned = std::make_unique<QSettings>();
    } else {
        m_scratch = std::make_unique<QTemporaryDir>();
        m_owned = std::make_unique<QSettings>(m_scratch->filePath(QStringLiteral("settings.conf")), QSettings::IniFormat);
    }
    m_settings = m_owned.get();
}

AppSettings::AppSettings(QSettings *settings) : m_settings(settings)
{
    readOriginal(settings->fileName());
}

AppSettings::~AppSettings() = default;

QString AppSettings::defaultFilePath()
{
    // QSettings' own rule on Unix: the XDG configuration folder, the organisation, the
    // application with ".conf".
    QString org = QCoreApplication::organizationName();
    if (org.isEmpty())
        org = QStringLiteral("Unknown Organization");
    return QStandardPaths::writableLocation(QStandardPaths::GenericConfigLocation) + QLatin1Char('/') + org +
           QLatin1Char('/') + QCoreApplication::applicationName() + QStringLiteral(".conf");
}

void AppSettings::readOriginal(const QString &path)
{
    const QFileInfo fi(path);
    if (!fi.exists() && !fi.isSymLink())
        return; // no settings yet
    QString error;
    m_original = readRegularFile(path, kMaxFileBytes, &error);
    if (!m_original) {
        m_unusable = error;
        report(QStringLiteral("%1; the settings are neither read nor saved").arg(error));
    }
}

void AppSettings::report(const QString &problem) const
{
    if (m_problems.contains(problem))
        return;
    m_problems << problem;
    qWarning("settings: %s", qPrintable(problem));
}

bool AppSettings::backUpOnce()
{
    if (!m_unusable.isEmpty())
        return m_scratch != nullptr; // the stand-in may be written, never the file
    if (!m_backupTried) {
        m_backupTried = true;
        QString error;
        if (m_original && !writeFileAtomically(m_settings->fileName() + QStringLiteral(".bak"), *m_original, &error)) {
            m_backupFailed = true;
            report(QStringLiteral("%1; the settings are not saved, so that the file is not rewritten without a copy")
                       .arg(error));
        }
    }
    return !m_backupFailed;
}

QString AppSettings::unwritableReason() const
{
    if (!m_unusable.isEmpty())
        return QStringLiteral("Settings are not saved: %1").arg(m_unusable);
    if (m_backupFailed || !m_settings->isWritable())
        return QStringLiteral("Settings are not saved: %1 is not writable").arg(m_settings->fileName());
    return {};
}

template <typename T, typename Parse>
T AppSettings::checked(const QString &key, T fallback, const QString &fallbackText, Parse parse) const
{
    if (!m_settings->contains(key))
        return fallback;
    const QVariant v = m_settings->value(key);
    if (const std::optional<T> got = parse(v))
        return *got;
    report(QStringLiteral("%1: %2 is not valid; the default %3 is used").arg(key, quoted(v), fallbackText));
    return fallback;
}

void AppSettings::sync() { m_settings->sync(); }

GenerationParams AppSettings::loadGenerationParams() const
{
    const GenerationParams d;
    GenerationParams p;
    p.max_new_tokens = checked(k_gen + "maxNewTokens", d.max_new_tokens, number(d.max_new_tokens), intAtLeast(1));
    p.temperature = checked(k_gen + "temperature", d.temperature, number(d.temperature),
                            finiteFloat([](float f) { return f >= 0; }));
    p.top_p = checked(k_gen + "topP", d.top_p, number(d.top_p), finiteFloat([](float f) { return f > 0 && f <= 1; }));
    p.top_k = checked(k_gen + "topK", d.top_k, number(d.top_k), intAtLeast(0));
    p.do_sample = checked(k_gen + "doSample", d.do_sample, d.do_sample ? QStringLiteral("true") : QStringLiteral("false"),
                          boolFrom);
    p.repetition_penalty = checked(k_gen + "repetitionPenalty", d.repetition_penalty, number(d.repetition_penalty),
                                   finiteFloat([](float f) { return f > 0; }));
    p.seed = checked(k_gen + "seed", d.seed, QString::number(d.seed), seedFrom);
    p.random_seed = checked(k_gen + "randomSeed", d.random_seed,
                            d.random_seed ? QStringLiteral("true") : QStringLiteral("false"), boolFrom);
    return p;
}

void AppSettings::saveGenerationParams(const GenerationParams &p)
{
    if (!backUpOnce())
        return;
    QSettings &s = *m_settings;
    s.setValue(k_gen + "maxNewTokens", p.max_new_tokens);
    s.setValue(k_gen + "temperature", double(p.temperature));
    s.setValue(k_gen + "topP", double(p.top_p));
    s.setValue(k_gen + "topK", p.top_k);
    s.setValue(k_gen + "doSample", p.do_sample);
    s.setValue(k_gen + "repetitionPenalty", double(p.repetition_penalty));
    s.setValue(k_gen + "seed", QVariant::fromValue<quint64>(p.seed));
    s.setValue(k_gen + "randomSeed", p.random_seed);
}

// Each field that is valid on its own; a bad one falls back to its default without taking
// the others with it, and is reported under `key`.
longscope::Settings AppSettings::validFields(const QString &key, const QJsonObject &json) const
{
    const QJsonObject defaults = settingsToJson(defaultEngineSettings());
    QJsonObject valid;
    for (auto it = json.begin(); it != json.end(); ++it) {
        QString why;
        if (settingsFromJson(QJsonObject{{it.key(), it.value()}}, &why)) {
            valid.insert(it.key(), it.value());
            continue;
        }
        const QJsonValue d = defaults.value(it.key());
        report(QStringLiteral("%1: %2 is not valid (%3); %4")
                   .arg(key, quoted(it.value().toVariant()), why,
                        d.isUndefined() ? QStringLiteral("it is ignored")
                                        : QStringLiteral("the default %1 is used").arg(quoted(d.toVariant()))));
    }
    // The app's default policy manages the context: older turns dropped, a book's head and
    // tail kept (the engine's own default refuses).
    if (!valid.contains(QStringLiteral("overflow")))
        valid.insert(QStringLiteral("overflow"), defaults.value(QStringLiteral("overflow")));
    return settingsFromJson(valid).value_or(defaultEngineSettings());
}

longscope::Settings AppSettings::loadEngineSettings() const
{
    const QSettings &s = *m_settings;
    if (!s.contains(k_engineJson))
        return validFields(k_eng + QStringLiteral("*"), legacyEngineJson(s));
    QJsonParseError error{};
    const QJsonDocument doc = QJsonDocument::fromJson(s.value(k_engineJson).toString().toUtf8(), &error);
    if (error.error != QJsonParseError::NoError || !doc.isObject()) {
        report(QStringLiteral("%1: %2 is not a JSON object; the defaults are used")
                   .arg(k_engineJson, quoted(s.value(k_engineJson))));
        return defaultEngineSettings();
    }
    return validFields(k_engineJson, doc.object());
}

void AppSettings::saveEngineSettings(const longscope::Settings &e)
{
    if (!backUpOnce())
        return;
    QSettings &s = *m_settings;
    s.setValue(k_engineJson, QString::fromUtf8(QJsonDocument(settingsToJson(e)).toJson(QJsonDocument::Compact)));
    for (const LegacyKey &k : k_legacyKeys)
        s.remove(k_eng + QLatin1String(k.key));
}

QString AppSettings::loadSystemPrompt() const
{
    const QString key = QStringLiteral("chat/systemPrompt");
    const QString prompt = m_settings->value(key).toString();
    if (prompt.size() <= kMaxSystemPromptChars)
        return prompt;
    report(QStringLiteral("%1: %2 characters, more than the %3 kept; the first %3 are used")
               .arg(key)
               .arg(prompt.size())
               .arg(kMaxSystemPromptChars));
    return prompt.left(kMaxSystemPromptChars);
}

void AppSettings::saveSystemPrompt(const QString &prompt)
{
    if (backUpOnce())
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
    if (backUpOnce())
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

void AppSettings::saveLastModel(const QString &path)
{
    if (backUpOnce())
        m_settings->setValue(QStringLiteral("models/last"), path);
}

QVector<RemoteEndpoint> AppSettings::loadRemoteEndpoints() const
{
    const QJsonDocument doc = QJsonDocument::fromJson(m_settings->value(QStringLiteral("remote/endpoints")).toByteArray());
    return endpointsFromJson(doc.array());
}

void AppSettings::addRemoteEndpoint(const RemoteEndpoint &endpoint)
{
    QVector<RemoteEndpoint> list = loadRemoteEndpoints();
    list.removeIf([&](const RemoteEndpoint &e) { return e.base_url == endpoint.base_url && e.model == endpoint.model; });
    list.prepend(endpoint);
    if (list.size() > kMaxRecentModels)
        list.resize(kMaxRecentModels);
    if (backUpOnce())
        m_settings->setValue(QStringLiteral("remote/endpoints"),
                             QJsonDocument(endpointsToJson(list)).toJson(QJsonDocument::Compact));
}

QByteArray AppSettings::loadWindowGeometry() const
{
    return m_settings->value(QStringLiteral("window/geometry")).toByteArray();
}

void AppSettings::saveWindowGeometry(const QByteArray &geometry)
{
    if (backUpOnce())
        m_settings->setValue(QStringLiteral("window/geometry"), geometry);
}

QByteArray AppSettings::loadWindowState() const
{
    return m_settings->value(QStringLiteral("window/state")).toByteArray();
}

void AppSettings::saveWindowState(const QByteArray &state)
{
    if (backUpOnce())
        m_settings->setValue(QStringLiteral("window/state"), state);
}

QByteArray AppSettings::loadSplitterState(const QString &name) const
{
    return m_settings->value(QStringLiteral("window/splitter/") + name).toByteArray();
}

void AppSettings::saveSplitterState(const QString &name, const QByteArray &state)
{
    if (backUpOnce())
        m_settings->setValue(QStringLiteral("window/splitter/") + name, state);
}

bool AppSettings::loadPanelShown(const QString &name, bool fallback) const
{
    return checked(QStringLiteral("window/show/") + name, fallback,
                   fallback ? QStringLiteral("true") : QStringLiteral("false"), boolFrom);
}

void AppSettings::savePanelShown(const QString &name, bool shown)
{
    if (backUpOnce())
        m_settings->setValue(QStringLiteral("window/show/") + name, shown);
}

longscope::Settings AppSettings::defaultEngineSettings()
{
    longscope::Settings s;
    s.overflow = OverflowPolicy::DropOldestTurns;
    return s;
}

} // namespace longscope::ui
