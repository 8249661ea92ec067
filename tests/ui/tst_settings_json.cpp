// Settings as the app stores and compares them: one JSON form (saved runs, conversations,
// app settings) that carries every field, backend included; one equality that sees every
// field; the default context limit.
#include "core/context_limit.h"
#include "core/settings_json.h"

#include "longscope/engine.h"
#include "longscope/settings.h"

#include <QJsonObject>
#include <QtTest>

#include <functional>
#include <vector>

using namespace longscope::ui;
using longscope::ComputeBackend;
using longscope::KvMode;
using longscope::OverflowPolicy;
using longscope::Settings;

namespace {

// Each changes one field away from its default.
const std::vector<std::pair<const char *, std::function<void(Settings &)>>> &fieldChanges()
{
    static const std::vector<std::pair<const char *, std::function<void(Settings &)>>> changes{
        {"ntk_alpha", [](Settings &s) { s.rope.ntk_alpha = 2.5f; }},
        {"ntk_auto", [](Settings &s) { s.rope.ntk_auto = true; }},
        {"store_kv_before_rope", [](Settings &s) { s.rope.store_kv_before_rope = true; }},
        {"rope_scaling", [](Settings &s) { s.rope.scaling = longscope::RopeScalingType::Yarn; }},
        {"rope_factor", [](Settings &s) { s.rope.scaling_factor = 8.0f; }},
        {"rope_orig_ctx", [](Settings &s) { s.rope.scaling_orig_ctx = 1024; }},
        {"memory_efficient", [](Settings &s) { s.attention.memory_efficient = true; }},
        {"causal_flash", [](Settings &s) { s.attention.causal_flash = true; }},
        {"reproduce_padding_bug", [](Settings &s) { s.attention.reproduce_padding_bug = true; }},
        {"kv_mode", [](Settings &s) { s.kv_mode = KvMode::Vmm; }},
        {"kv_type_k", [](Settings &s) { s.kv_type_k = longscope::KvType::Q8_0; }},
        {"kv_type_v", [](Settings &s) { s.kv_type_v = longscope::KvType::Q4_0; }},
        {"context_limit", [](Settings &s) { s.context_limit = 8192; }},
        {"overflow", [](Settings &s) { s.overflow = OverflowPolicy::DropOldestTurns; }},
        {"sink_tokens", [](Settings &s) { s.sink_tokens = 8; }},
        {"shift_discard", [](Settings &s) { s.shift_discard = 100; }},
        {"backend", [](Settings &s) { s.backend = ComputeBackend::Cuda; }},
    };
    return changes;
}

} // namespace

class TestSettingsJson : public QObject {
    Q_OBJECT

private slots:
    void roundTripsEveryField()
    {
        Settings all;
        for (const auto &[name, change] : fieldChanges()) {
            Settings one;
            change(one);
            QVERIFY2(!(one == Settings{}), name);
            const QJsonObject json = settingsToJson(one);
            QVERIFY2(json.contains(QLatin1String(name)), name);
            QString error;
            const std::optional<Settings> back = settingsFromJson(json, &error);
            QVERIFY2(back, qPrintable(error));
            QVERIFY2(*back == one, name);
            change(all);
        }
        const std::optional<Settings> back = settingsFromJson(settingsToJson(all));
        QVERIFY(back);
        QVERIFY(*back == all);
        QCOMPARE(back->backend, ComputeBackend::Cuda);
        QCOMPARE(settingsToJson(all).value(QStringLiteral("backend")).toString(), QStringLiteral("cuda"));
        // Every key the JSON holds is one of the fields above.
        QCOMPARE(qsizetype(settingsToJson(all).size()), qsizetype(fieldChanges().size()));
    }

    void badValuesAreNamed()
    {
        const auto why = [](const char *key, const QJsonValue &v) {
            QString error;
            return settingsFromJson(QJsonObject{{QLatin1String(key), v}}, &error) ? QString() : error;
        };
        QCOMPARE(why("rope_scaling", QStringLiteral("sideways")), QStringLiteral("settings: unknown rope_scaling \"sideways\""));
        QCOMPARE(why("rope_factor", -1.0), QStringLiteral("settings: rope_factor must be a number from 0 (the file's) up"));
        QCOMPARE(why("rope_factor", QStringLiteral("4")), QStringLiteral("settings: rope_factor must be a number from 0 (the file's) up"));
        QCOMPARE(why("rope_orig_ctx", 10.5), QStringLiteral("settings: rope_orig_ctx must be a whole number of tokens"));
        // null: the model file's own scaling.
        QCOMPARE(why("rope_scaling", QJsonValue(QJsonValue::Null)), QString());
        QVERIFY(!settingsFromJson(QJsonObject{{QStringLiteral("rope_scaling"), QJsonValue(QJsonValue::Null)}})->rope.scaling);
    }

    void absentFieldsTakeDefaults()
    {
        const std::optional<Settings> s = settingsFromJson(QJsonObject{});
        QVERIFY(s);
        QVERIFY(*s == Settings{});
    }

    void equalitySeesEveryField()
    {
        QVERIFY(Settings{} == Settings{});
        for (const auto &[name, change] : fieldChanges()) {
            Settings a;
            Settings b;
            change(b);
            QVERIFY2(!(a == b), name);
            QVERIFY2(a != b, name);
            change(a);
            QVERIFY2(a == b, name);
        }
    }

    void sameMeasurementIgnoresWhatPerplexityDoesNotDependOn()
    {
        Settings a;
        a.rope.ntk_auto = true;
        Settings b = a;
        b.rope.ntk_alpha = 4.0f; // unused with auto
        b.context_limit = 1024;  // a run sets its own
        b.backend = ComputeBackend::Cuda;
        QVERIFY(sameMeasurement(a, b));
        // Head-tail and drop-oldest both restart the window: one measurement; error stops the
        // stream where the context is full: another.
        a.overflow = OverflowPolicy::HeadTail;
        b.overflow = OverflowPolicy::DropOldestTurns;
        QVERIFY(sameMeasurement(a, b));
        b.overflow = OverflowPolicy::Error;
        QVERIFY(!sameMeasurement(a, b));
        b.overflow = OverflowPolicy::HeadTail;
        QVERIFY(!(a == b));
        b.rope.store_kv_before_rope = true;
        QVERIFY(!sameMeasurement(a, b));
        Settings c;
        Settings d;
        d.rope.ntk_alpha = 2.0f; // not auto: alpha counts
        QVERIFY(!sameMeasurement(c, d));
        d = c;
        d.kv_mode = KvMode::Concat;
        QVERIFY(!sameMeasurement(c, d));
        d = c;
        d.kv_type_k = longscope::KvType::F16;
        QVERIFY(!sameMeasurement(c, d));
        // Under the shift policy the text streams through one context, with its sinks.
        d = c;
        d.overflow = OverflowPolicy::Shift;
        QVERIFY(!sameMeasurement(c, d));
        Settings e = d;
        e.sink_tokens = 0;
        QVERIFY(!sameMeasurement(d, e));
        c.sink_tokens = 0; // not shifting: the sinks do not count
        QVERIFY(sameMeasurement(c, Settings{}));
    }

    void badSinkCountsAreRefused()
    {
        for (const char *key : {"sink_tokens", "shift_discard"})
            for (const QJsonValue &bad : {QJsonValue(-1), QJsonValue(2.5), QJsonValue(QStringLiteral("4"))}) {
                QString error;
                QVERIFY(!settingsFromJson(QJsonObject{{QLatin1String(key), bad}}, &error));
                QVERIFY2(error.contains(QLatin1String(key)), qPrintable(error));
            }
    }

    void badKvTypesAreNamed()
    {
        for (const char *key : {"kv_type_k", "kv_type_v"})
            for (const QJsonValue &bad : {QJsonValue(QStringLiteral("q5_0")), QJsonValue(8), QJsonValue(true)}) {
                QString error;
                QVERIFY(!settingsFromJson(QJsonObject{{QLatin1String(key), bad}}, &error));
                QVERIFY2(error.contains(QLatin1String(key)), qPrintable(error));
            }
        const std::optional<Settings> ok = settingsFromJson(QJsonObject{{QStringLiteral("kv_type_v"), QStringLiteral("f16")}});
        QVERIFY(ok && ok->kv_type_v == longscope::KvType::F16 && ok->kv_type_k == longscope::KvType::F32);
    }

    void defaultContextLimit()
    {
        QCOMPARE(longscope::ui::defaultContextLimit(512), 512);
        QCOMPARE(longscope::ui::defaultContextLimit(32768), longscope::k_default_ctx_cap);
        QCOMPARE(effectiveContextLimit(0, 512), 512);
        QCOMPARE(effectiveContextLimit(0, 100000), longscope::k_default_ctx_cap);
        QCOMPARE(effectiveContextLimit(8192, 512), 8192);
    }
};

QTEST_GUILESS_MAIN(TestSettingsJson)
#include "tst_settings_json.moc"
