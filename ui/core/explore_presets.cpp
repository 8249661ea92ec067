#include "core/explore_presets.h"

#include "core/settings_json.h"

#include <QJsonDocument>
#include <QJsonObject>

#include <functional>

namespace longscope::ui {

namespace {

QString qs(std::string_view s) { return QString::fromUtf8(s.data(), qsizetype(s.size())); }

// What the legend says about one field when it differs from the base; one line per field of
// longscope::Settings that changes a measurement.
const std::function<QString(const longscope::Settings &, const longscope::Settings &)> k_labelParts[] = {
    [](const auto &s, const auto &) { return ropeScalingText(s); },
    [](const auto &s, const auto &) { return s.rope.store_kv_before_rope ? QStringLiteral("keys before RoPE") : QString(); },
    [](const auto &s, const auto &b) {
        return s.attention.memory_efficient == b.attention.memory_efficient ? QString()
               : s.attention.memory_efficient ? QStringLiteral("mem-efficient")
                                              : QStringLiteral("naive attention");
    },
    [](const auto &s, const auto &b) {
        return s.attention.causal_flash == b.attention.causal_flash ? QString()
               : s.attention.causal_flash ? QStringLiteral("causal flash")
                                          : QStringLiteral("no causal flash");
    },
    [](const auto &s, const auto &b) {
        return s.attention.reproduce_padding_bug == b.attention.reproduce_padding_bug ? QString()
                                                                                      : QStringLiteral("padding bug");
    },
    [](const auto &s, const auto &b) {
        return s.kv_mode == b.kv_mode ? QString() : QStringLiteral("KV %1").arg(qs(to_string(s.kv_mode)));
    },
    [](const auto &s, const auto &b) {
        if (s.kv_type_k == b.kv_type_k && s.kv_type_v == b.kv_type_v)
            return QString();
        return QStringLiteral("K %1 V %2").arg(qs(to_string(s.kv_type_k)), qs(to_string(s.kv_type_v)));
    },
    [](const auto &s, const auto &b) {
        if (s.overflow == OverflowPolicy::Shift)
            return shiftText(s);
        return s.overflow == b.overflow ? QString() : QStringLiteral("overflow %1").arg(qs(to_string(s.overflow)));
    },
    [](const auto &s, const auto &b) {
        return s.backend == b.backend ? QString() : QString(qs(to_string(s.backend))).toUpper();
    },
};

// The groups, as settings JSON over the base.
struct GroupData {
    const char *name;
    const char *description;
    std::initializer_list<const char *> entries;
    bool across_text = false; // ExplorePresetGroup::acrossText
};

const GroupData k_groups[] = {
    {"NTK alpha and key placement", "NTK alpha 1, 2, 4 and auto, keys cached after and before RoPE",
     {R"({"ntk_alpha": 1})", R"({"ntk_alpha": 1, "store_kv_before_rope": true})", R"({"ntk_alpha": 2})",
      R"({"ntk_alpha": 2, "store_kv_before_rope": true})", R"({"ntk_alpha": 4})",
      R"({"ntk_alpha": 4, "store_kv_before_rope": true})", R"({"ntk_auto": true})",
      R"({"ntk_auto": true, "store_kv_before_rope": true})"}},
    // LongRoPE is left out: it needs factors only Phi-3 files carry (the model's own entry
    // runs it there).
    {"RoPE scaling methods", "The model's own RoPE, none, and linear, NTK, dynamic, YaRN and llama3 scaling by 4",
     {R"({})", R"({"rope_scaling": "none"})", R"({"rope_scaling": "linear", "rope_factor": 4})",
      R"({"rope_scaling": "ntk", "rope_factor": 4})", R"({"rope_scaling": "dynamic", "rope_factor": 4})",
      R"({"rope_scaling": "yarn", "rope_factor": 4})", R"({"rope_scaling": "llama3", "rope_factor": 4})"}},
    {"Attention kernels", "Naive attention, memory-efficient, memory-efficient with causal flash",
     {R"({"memory_efficient": false, "causal_flash": false})", R"({"causal_flash": false})", R"({})"}},
    {"KV cache layouts", "No cache, grown by copying, static, reserved virtual memory",
     {R"({"kv_mode": "static"})", R"({"kv_mode": "vmm"})", R"({"kv_mode": "concat"})", R"({"kv_mode": "none"})"}},
    {"KV cache precision", "Keys and values stored as F32 (the default), F16, Q8_0 or Q4_0",
     {R"({})", R"({"kv_type_k": "f16", "kv_type_v": "f16"})", R"({"kv_type_k": "q8_0", "kv_type_v": "q8_0"})",
      R"({"kv_type_k": "q8_0", "kv_type_v": "q4_0"})", R"({"kv_type_k": "q4_0", "kv_type_v": "q4_0"})"}},
    {"Sinks vs truncation",
     "Past the context: error stops, truncation restarts the window, shift keeps 4 or 0 sinks and drops half the "
     "rest (or one token per step); plotted across the text",
     {R"({"overflow": "error"})", R"({"overflow": "head-tail"})", R"({"overflow": "shift", "sink_tokens": 4})",
      R"({"overflow": "shift", "sink_tokens": 0})", R"({"overflow": "shift", "sink_tokens": 4, "shift_discard": 1})",
      R"({"overflow": "shift", "sink_tokens": 0, "shift_discard": 1})"},
     true},
};

// The entry's settings, or nullopt when the settings cannot hold it (a field or value that
// does not exist yet): every field it names must read back as written.
std::optional<longscope::Settings> presetSettings(const char *entry)
{
    const QJsonObject fragment = QJsonDocument::fromJson(QByteArray(entry)).object();
    QJsonObject json = settingsToJson(explorePresetBase());
    for (auto it = fragment.begin(); it != fragment.end(); ++it)
        json.insert(it.key(), it.value());
    const std::optional<longscope::Settings> s = settingsFromJson(json);
    if (!s)
        return std::nullopt;
    const QJsonObject back = settingsToJson(*s);
    for (auto it = fragment.begin(); it != fragment.end(); ++it)
        if (!back.contains(it.key()) || back.value(it.key()) != it.value())
            return std::nullopt;
    return s;
}

} // namespace

longscope::Settings explorePresetBase()
{
    longscope::Settings s;
    s.attention.memory_efficient = true;
    s.attention.causal_flash = true;
    s.kv_mode = KvMode::Static;
    // Past the context the window restarts (as every run did before the policy counted), so
    // a setting's curve is averaged over all the windows of the book it scores.
    s.overflow = OverflowPolicy::DropOldestTurns;
    return s;
}

QString exploreLabel(const longscope::Settings &s)
{
    const longscope::Settings base = explorePresetBase();
    QString label = alphaText(s);
    for (const auto &part : k_labelParts)
        if (const QString text = part(s, base); !text.isEmpty())
            label += QStringLiteral(" · ") + text;
    return label;
}

bool sameExploreSettings(const longscope::Settings &a, const longscope::Settings &b)
{
    const auto entry = [](longscope::Settings s) {
        s.context_limit = 0;
        if (s.rope.ntk_auto)
            s.rope.ntk_alpha = 1.0f;
        return s;
    };
    return entry(a) == entry(b);
}

QVector<ExplorePresetGroup> explorePresetGroups()
{
    QVector<ExplorePresetGroup> out;
    for (const GroupData &g : k_groups) {
        ExplorePresetGroup group{QString::fromUtf8(g.name), QString::fromUtf8(g.description), {}, g.across_text};
        for (const char *entry : g.entries)
            if (const std::optional<longscope::Settings> s = presetSettings(entry))
                group.presets.append({exploreLabel(*s), *s});
        if (!group.presets.isEmpty())
            out.append(group);
    }
    return out;
}

QVector<ExplorePreset> explorePresets() { return explorePresetGroups().front().presets; }

} // namespace longscope::ui
