#include "core/settings_json.h"

#include <QJsonValue>
#include <QStringList>

#include <cmath>
#include <string>
#include <utility>

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
                       {QStringLiteral("rope_scaling"), s.rope.scaling ? QJsonValue(qs(to_string(*s.rope.scaling)))
                                                                       : QJsonValue(QJsonValue::Null)},
                       {QStringLiteral("rope_factor"), double(s.rope.scaling_factor)},
                       {QStringLiteral("rope_orig_ctx"), s.rope.scaling_orig_ctx},
                       {QStringLiteral("memory_efficient"), s.attention.memory_efficient},
                       {QStringLiteral("causal_flash"), s.attention.causal_flash},
                       {QStringLiteral("reproduce_padding_bug"), s.attention.reproduce_padding_bug},
                       {QStringLiteral("kv_mode"), qs(to_string(s.kv_mode))},
                       {QStringLiteral("kv_type_k"), qs(to_string(s.kv_type_k))},
                       {QStringLiteral("kv_type_v"), qs(to_string(s.kv_type_v))},
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
    if (const QJsonValue method = json.value(QStringLiteral("rope_scaling")); !method.isUndefined() && !method.isNull()) {
        const auto type = parse_rope_scaling(method.toString().toStdString());
        if (!type) {
            setError(error, QStringLiteral("settings: unknown rope_scaling \"%1\"").arg(method.toString()));
            return std::nullopt;
        }
        s.rope.scaling = *type;
    }
    if (const QJsonValue factor = json.value(QStringLiteral("rope_factor")); !factor.isUndefined()) {
        const double f = factor.toDouble(-1);
        if (!factor.isDouble() || !std::isfinite(f) || f < 0 || f > 1e6) {
            setError(error, QStringLiteral("settings: rope_factor must be a number from 0 (the file's) up"));
            return std::nullopt;
        }
        s.rope.scaling_factor = float(f);
    }
    if (const QJsonValue orig = json.value(QStringLiteral("rope_orig_ctx")); !orig.isUndefined()) {
        const double o = orig.toDouble(-1);
        if (!orig.isDouble() || o < 0 || o > double(1 << 24) || o != std::floor(o)) {
            setError(error, QStringLiteral("settings: rope_orig_ctx must be a whole number of tokens"));
            return std::nullopt;
        }
        s.rope.scaling_orig_ctx = int(o);
    }
    if (const QJsonValue kv = json.value(QStringLiteral("kv_mode")); !kv.isUndefined()) {
        const auto mode = parse_kv_mode(kv.toString().toStdString());
        if (!mode) {
            setError(error, QStringLiteral("settings: unknown kv_mode \"%1\"").arg(kv.toString()));
            return std::nullopt;
        }
        s.kv_mode = *mode;
    }
    for (const auto &[key, field] : {std::pair{"kv_type_k", &s.kv_type_k}, std::pair{"kv_type_v", &s.kv_type_v}}) {
        const QJsonValue v = json.value(QLatin1String(key));
        if (v.isUndefined())
            continue;
        const auto type = parse_kv_type(v.toString().toStdString());
        if (!type) {
            setError(error, QStringLiteral("settings: unknown %1 \"%2\" (f32, f16, q8_0 or q4_0)")
                                .arg(QLatin1String(key), v.toString()));
            return std::nullopt;
        }
        *field = *type;
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
        m.kv_type_k = s.kv_type_k;
        m.kv_type_v = s.kv_type_v;
        // Error and shift stream the text through one context (error stops where it is full,
        // shift with its sinks and discard goes on); the other policies restart the window.
        m.overflow = s.overflow == OverflowPolicy::Error ? s.overflow : OverflowPolicy::HeadTail;
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

QString ropeScalingText(const longscope::Settings &s)
{
    if (!s.rope.scaling)
        return {};
    QString text = QStringLiteral("RoPE %1").arg(qs(to_string(*s.rope.scaling)));
    if (s.rope.scaling_factor > 0)
        text += QStringLiteral(" ×%1").arg(double(s.rope.scaling_factor), 0, 'g', 4);
    if (s.rope.scaling_orig_ctx > 0)
        text += QStringLiteral(" from %1").arg(s.rope.scaling_orig_ctx);
    return text;
}

QString describeSettings(const longscope::Settings &s)
{
    QStringList parts{alphaText(s)};
    if (!ropeScalingText(s).isEmpty())
        parts << ropeScalingText(s);
    parts << (s.rope.store_kv_before_rope ? QStringLiteral("keys before RoPE") : QStringLiteral("keys after RoPE"));
    parts << (s.attention.memory_efficient ? QStringLiteral("mem-efficient") : QStringLiteral("naive attention"));
    if (s.attention.causal_flash)
        parts << QStringLiteral("causal flash");
    parts << QStringLiteral("KV %1").arg(qs(to_string(s.kv_mode)));
    if (s.kv_type_k != longscope::KvType::F32 || s.kv_type_v != longscope::KvType::F32)
        parts << QStringLiteral("K %1 V %2").arg(qs(to_string(s.kv_type_k)), qs(to_string(s.kv_type_v)));
    if (s.overflow == OverflowPolicy::Shift)
        parts << shiftText(s);
    return parts.join(QStringLiteral(" · "));
}

QString shiftText(const longscope::Settings &s)
{
    QString text = QStringLiteral("shift, %1 sinks").arg(s.sink_tokens);
    if (s.shift_discard > 0)
        text += QStringLiteral(", drop %1").arg(s.shift_discard);
    return text;
}

} // namespace longscope::ui
