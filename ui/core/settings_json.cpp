#include "core/settings_json.h"

#include <QJsonValue>
#include <QStringList>

#include <cmath>
#include <string>

namespace longscope::ui {

namespace {

QString qs(std::string_view s) { return QString::fromUtf8(s.data(), qsizetype(s.size())); }

void setError(QString *error, const QString &message)
{
    if (error)
        *error = message;
}

} // namespace

QJsonObject settingsToJson(const longscope::Settings &s)
{
    return QJsonObject{{QStringLiteral("ntk_alpha"), double(s.rope.ntk_alpha)},
                       {QStringLiteral("ntk_auto"), s.rope.ntk_auto},
                       {QStringLiteral("store_kv_before_rope"), s.rope.store_kv_before_rope},
                       {QStringLiteral("memory_efficient"), s.attention.memory_efficient},
                       {QStringLiteral("causal_flash"), s.attention.causal_flash},
                       {QStringLiteral("reproduce_padding_bug"), s.attention.reproduce_padding_bug},
                       {QStringLiteral("kv_mode"), qs(to_string(s.kv_mode))},
                       {QStringLiteral("context_limit"), s.context_limit},
                       {QStringLiteral("overflow"), qs(to_string(s.overflow))},
                       {QStringLiteral("sink_tokens"), s.sink_tokens},
                       {QStringLiteral("shift_discard"), s.shift_discard},
                       {QStringLiteral("backend"), qs(to_string(s.backend))}};
}

std::optional<longscope::Settings> settingsFromJson(const QJsonObject &json, QString *error)
{
    longscope::Settings s;
    const auto boolean = [&](const char *key, bool &out) {
        const QJsonValue v = json.value(QLatin1String(key));
        if (v.isUndefined())
            return true;
        if (!v.isBool()) {
            setError(error, QStringLiteral("settings: \"%1\" is not true or false").arg(QLatin1String(key)));
            return false;
        }
        out = v.toBool();
        return true;
    };
    const QJsonValue alpha = json.value(QStringLiteral("ntk_alpha"));
    if (!alpha.isUndefined()) {
        const double a = alpha.toDouble(-1);
        if (!alpha.isDouble() || !std::isfinite(a) || a < 1.0 || a > 1e6) {
            setError(error, QStringLiteral("settings: ntk_alpha must be a number of at least 1"));
            return std::nullopt;
        }
        s.rope.ntk_alpha = float(a);
    }
    if (!boolean("ntk_auto", s.rope.ntk_auto) || !boolean("store_kv_before_rope", s.rope.store_kv_before_rope) ||
        !boolean("memory_efficient", s.attention.memory_efficient) ||
        !boolean("causal_flash", s.attention.causal_flash) ||
        !boolean("reproduce_padding_bug", s.attention.reproduce_padding_bug))
        return std::nullopt;
    if (const QJsonValue kv = json.value(QStringLiteral("kv_mode")); !kv.isUndefined()) {
        const auto mode = parse_kv_mode(kv.toString().toStdString());
        if (!mode) {
            setError(error, QStringLiteral("settings: unknown kv_mode \"%1\"").arg(kv.toString()));
            return std::nullopt;
        }
        s.kv_mode = *mode;
    }
    if (const QJsonValue limit = json.value(QStringLiteral("context_limit")); !limit.isUndefined()) {
        const double l = limit.toDouble(-1);
        if (!limit.isDouble() || l < 0 || l > double(1 << 24) || l != std::floor(l)) {
            setError(error, QStringLiteral("settings: context_limit must be a whole number of tokens"));
            return std::nullopt;
        }
        s.context_limit = int(l);
    }
    if (const QJsonValue ov = json.value(QStringLiteral("overflow")); !ov.isUndefined()) {
        const auto policy = parse_overflow(ov.toString().toStdString());
        if (!policy) {
            setError(error, QStringLiteral("settings: unknown overflow \"%1\"").arg(ov.toString()));
            return std::nullopt;
        }
        s.overflow = *policy;
    }
    for (auto [key, out] : {std::pair{"sink_tokens", &s.sink_tokens}, std::pair{"shift_discard", &s.shift_discard}}) {
        const QJsonValue v = json.value(QLatin1String(key));
        if (v.isUndefined())
            continue;
        const double n = v.toDouble(-1);
        if (!v.isDouble() || n < 0 || n > double(1 << 24) || n != std::floor(n)) {
            setError(error, QStringLiteral("settings: %1 must be a whole number of tokens").arg(QLatin1String(key)));
            return std::nullopt;
        }
        *out = int(n);
    }
    if (const QJsonValue be = json.value(QStringLiteral("backend")); !be.isUndefined()) {
        const auto backend = parse_backend(be.toString().toStdString());
        if (!backend) {
            setError(error, QStringLiteral("settings: unknown backend \"%1\"").arg(be.toString()));
            return std::nullopt;
        }
        s.backend = *backend;
    }
    return s;
}

bool sameMeasurement(const longscope::Settings &a, const longscope::Settings &b)
{
    const auto measured = [](longscope::Settings s) {
        longscope::Settings m;
        m.rope = s.rope;
        if (s.rope.ntk_auto)
            m.rope.ntk_alpha = 1.0f;
        m.attention.memory_efficient = s.attention.memory_efficient;
        m.attention.causal_flash = s.attention.causal_flash;
        m.kv_mode = s.kv_mode;
        // Under the shift policy the text streams through one context: another measurement.
        if (s.overflow == OverflowPolicy::Shift) {
            m.overflow = s.overflow;
            m.sink_tokens = s.sink_tokens;
            m.shift_discard = s.shift_discard;
        }
        return m;
    };
    return measured(a) == measured(b);
}

QString alphaText(const longscope::Settings &s)
{
    return s.rope.ntk_auto ? QStringLiteral("α auto") : QStringLiteral("α %1").arg(double(s.rope.ntk_alpha), 0, 'g', 4);
}

QString describeSettings(const longscope::Settings &s)
{
    QStringList parts{alphaText(s)};
    parts << (s.rope.store_kv_before_rope ? QStringLiteral("keys before RoPE") : QStringLiteral("keys after RoPE"));
    parts << (s.attention.memory_efficient ? QStringLiteral("mem-efficient") : QStringLiteral("naive attention"));
    if (s.attention.causal_flash)
        parts << QStringLiteral("causal flash");
    parts << QStringLiteral("KV %1").arg(qs(to_string(s.kv_mode)));
    if (s.overflow == OverflowPolicy::Shift)
        parts << QStringLiteral("shift, %1 sinks").arg(s.sink_tokens);
    return parts.join(QStringLiteral(" · "));
}

} // namespace longscope::ui
