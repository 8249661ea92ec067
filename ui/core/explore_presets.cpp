#include "core/explore_presets.h"

#include "core/settings_json.h"

namespace longscope::ui {

QString exploreLabel(const longscope::Settings &s)
{
    // What differs from the presets' base (memory-efficient causal attention, static KV) is
    // named too, so different settings never share a label.
    QString label = alphaText(s);
    if (s.rope.store_kv_before_rope)
        label += QStringLiteral(" · keys before RoPE");
    if (!s.attention.memory_efficient)
        label += QStringLiteral(" · naive attention");
    if (!s.attention.causal_flash)
        label += QStringLiteral(" · no causal flash");
    if (s.kv_mode != KvMode::Static)
        label += QStringLiteral(" · KV %1").arg(QString::fromUtf8(to_string(s.kv_mode).data(), qsizetype(to_string(s.kv_mode).size())));
    return label;
}

QVector<ExplorePreset> explorePresets()
{
    QVector<ExplorePreset> out;
    const struct {
        float alpha;
        bool automatic;
    } alphas[] = {{1.0f, false}, {2.0f, false}, {4.0f, false}, {1.0f, true}};
    for (const auto &a : alphas) {
        for (const bool before : {false, true}) {
            longscope::Settings s;
            s.rope.ntk_alpha = a.alpha;
            s.rope.ntk_auto = a.automatic;
            s.rope.store_kv_before_rope = before;
            s.attention.memory_efficient = true;
            s.attention.causal_flash = true;
            s.kv_mode = KvMode::Static;
            out.append({exploreLabel(s), s});
        }
    }
    return out;
}

} // namespace longscope::ui
