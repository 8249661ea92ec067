// AppSettings: every field through an ini file and back; recent models ordered, deduplicated,
// capped, missing files dropped; bad values on disk fall back to the defaults and are reported;
// the file is backed up before its first rewrite; a settings file that is not a regular file or
// is too large is neither read nor written; an unwritable one is said.
#include "core/app_settings.h"
#include "core/model_paths.h"

#include <QCoreApplication>
#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QFileInfo>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QtTest>

#include <sys/stat.h>

using namespace longscope::ui;
using longscope::ComputeBackend;
using longscope::KvMode;
using longscope::OverflowPolicy;

class TestAppSettings : public QObject {
    Q_OBJECT

private:
    QTemporaryDir m_dir;
    QString ini() const { return m_dir.filePath(QStringLiteral("longscope.ini")); }

    QString touch(const QString &name)
    {
        const QString path = m_dir.filePath(name);
        QFile f(path);
        f.open(QIODevice::WriteOnly);
        return path;
    }

private slots:
    void init() { QFile::remove(ini()); }

    void defaultsWhenEmpty()
    {
        QSettings qs(ini(), QSettings::IniFormat);
        AppSettings s(&qs);
        const GenerationParams g = s.loadGenerationParams();
        const GenerationParams d;
        QCOMPARE(g.max_new_tokens, d.max_new_tokens);
        QCOMPARE(g.temperature, d.temperature);
        QCOMPARE(g.do_sample, d.do_sample);
        const longscope::Settings e = s.loadEngineSettings();
        QCOMPARE(e.kv_mode, KvMode::Static);
        QCOMPARE(e.rope.ntk_alpha, 1.0f);
        // The app manages the context by default (the engine's own default refuses).
        QCOMPARE(e.overflow, OverflowPolicy::DropOldestTurns);
        QVERIFY(g.random_seed);
        QVERIFY(s.loadSystemPrompt().isEmpty());
        QVERIFY(s.loadRecentModels().isEmpty());
        QVERIFY(s.loadLastModel().isEmpty());
        QVERIFY(s.loadWindowGeometry().isEmpty());
        QVERIFY(s.loadWindowState().isEmpty());
    }

    void roundTrip()
    {
        GenerationParams g;
        g.max_new_tokens = 77;
        g.temperature = 0.65f;
        g.top_p = 0.5f;
        g.top_k = 7;
        g.do_sample = false;
        g.repetition_penalty = 1.3f;
        g.seed = 0xfedcba9876543210ULL;
        g.random_seed = false;
        longscope::Settings e;
        e.rope.ntk_alpha = 2.5f;
        e.rope.ntk_auto = true;
        e.rope.store_kv_before_rope = true;
        e.attention.memory_efficient = true;
        e.attention.causal_flash = true;
        e.kv_mode = KvMode::Vmm;
        e.context_limit = 8192;
        e.overflow = OverflowPolicy::DropOldestTurns;
        e.backend = ComputeBackend::Cuda;
        const QString model = touch(QStringLiteral("m.gguf"));
        const QByteArray geometry("\x01\x02\x00\xff geometry", 13);
        const QByteArray state("\x00state\xff", 7);
        const QString prompt = QStringLiteral("You are helpful.\nLine two, ünïcödé = \"quoted\"; [brackets]");
        {
            QSettings qs(ini(), QSettings::IniFormat);
            AppSettings s(&qs);
            s.saveGenerationParams(g);
            s.saveEngineSettings(e);
            s.saveSystemPrompt(prompt);
            s.saveLastModel(model);
            s.addRecentModel(model);
            s.saveWindowGeometry(geometry);
            s.saveWindowState(state);
            s.sync();
            QCOMPARE(qs.status(), QSettings::NoError);
        }
        QSettings qs(ini(), QSettings::IniFormat);
        AppSettings s(&qs);
        const GenerationParams g2 = s.loadGenerationParams();
        QCOMPARE(g2.max_new_tokens, g.max_new_tokens);
        QCOMPARE(g2.temperature, g.temperature);
        QCOMPARE(g2.top_p, g.top_p);
        QCOMPARE(g2.top_k, g.top_k);
        QCOMPARE(g2.do_sample, g.do_sample);
        QCOMPARE(g2.repetition_penalty, g.repetition_penalty);
        QCOMPARE(g2.seed, g.seed);
        QCOMPARE(g2.random_seed, g.random_seed);
        const longscope::Settings e2 = s.loadEngineSettings();
        QCOMPARE(e2.rope.ntk_alpha, e.rope.ntk_alpha);
        QCOMPARE(e2.rope.ntk_auto, e.rope.ntk_auto);
        QCOMPARE(e2.rope.store_kv_before_rope, e.rope.store_kv_before_rope);
        QCOMPARE(e2.attention.memory_efficient, e.attention.memory_efficient);
        QCOMPARE(e2.attention.causal_flash, e.attention.causal_flash);
        QCOMPARE(e2.kv_mode, e.kv_mode);
        QCOMPARE(e2.context_limit, e.context_limit);
        QCOMPARE(e2.overflow, e.overflow);
        QCOMPARE(e2.backend, e.backend);
        QVERIFY(e2 == e);
        QCOMPARE(s.loadSystemPrompt(), prompt);
        QCOMPARE(s.loadLastModel(), model);
        QCOMPARE(s.loadRecentModels(), QStringList{model});
        QCOMPARE(s.loadWindowGeometry(), geometry);
        QCOMPARE(s.loadWindowState(), state);
    }

    void everyKvModeAndPolicy()
    {
        for (KvMode m : {KvMode::None, KvMode::Concat, KvMode::Static, KvMode::Vmm}) {
            for (OverflowPolicy p : {OverflowPolicy::Error, OverflowPolicy::HeadTail, OverflowPolicy::DropOldestTurns}) {
                QSettings qs(ini(), QSettings::IniFormat);
                AppSettings s(&qs);
                longscope::Settings e;
                e.kv_mode = m;
                e.overflow = p;
                s.saveEngineSettings(e);
                QCOMPARE(s.loadEngineSettings().kv_mode, m);
                QCOMPARE(s.loadEngineSettings().overflow, p);
            }
        }
    }

    void badValuesFallBack()
    {
        {
            QSettings qs(ini(), QSettings::IniFormat);
            qs.setValue(QStringLiteral("longContext/ntkAlpha"), 0.25);
            qs.setValue(QStringLiteral("longContext/kvMode"), QStringLiteral("quantum"));
            qs.setValue(QStringLiteral("longContext/overflow"), 17);
            qs.setValue(QStringLiteral("longContext/contextLimit"), -5);
            qs.setValue(QStringLiteral("generation/temperature"), QStringLiteral("hot"));
            qs.setValue(QStringLiteral("generation/topP"), 7.0);
            qs.setValue(QStringLiteral("generation/maxNewTokens"), -1);
        }
        QSettings qs(ini(), QSettings::IniFormat);
        AppSettings s(&qs);
        const longscope::Settings e = s.loadEngineSettings();
        QCOMPARE(e.rope.ntk_alpha, 1.0f);
        QCOMPARE(e.kv_mode, KvMode::Static);
        QCOMPARE(e.overflow, OverflowPolicy::DropOldestTurns);
        QCOMPARE(e.context_limit, 0);
        e.validate();
        const GenerationParams g = s.loadGenerationParams();
        const GenerationParams d;
        QCOMPARE(g.top_p, d.top_p);
        QCOMPARE(g.max_new_tokens, d.max_new_tokens);
        QVERIFY(g.temperature >= 0);
    }

    // Each value that is not valid is reported with its key, the value found and the default
    // used; valid ones beside it are not.
    void badValuesReported()
    {
        {
            QSettings qs(ini(), QSettings::IniFormat);
            qs.setValue(QStringLiteral("generation/temperature"), QStringLiteral("hot"));
            qs.setValue(QStringLiteral("generation/topP"), 7.0);
            qs.setValue(QStringLiteral("generation/maxNewTokens"), -1);
            qs.setValue(QStringLiteral("generation/doSample"), QStringLiteral("maybe"));
            qs.setValue(QStringLiteral("generation/topK"), 40);
            qs.setValue(QStringLiteral("longContext/settings"), QStringLiteral(R"({"ntk_alpha": 0.25, "kv_mode": "vmm"})"));
        }
        QSettings qs(ini(), QSettings::IniFormat);
        AppSettings s(&qs);
        const GenerationParams d;
        const GenerationParams g = s.loadGenerationParams();
        QCOMPARE(g.top_k, 40);
        QCOMPARE(g.do_sample, d.do_sample);
        QCOMPARE(s.loadEngineSettings().kv_mode, KvMode::Vmm);
        const QStringList problems = s.problems();
        const QString all = problems.join(QLatin1Char('\n'));
        QCOMPARE(problems.size(), 5);
        for (const QString &want :
             {QStringLiteral("generation/temperature: \"hot\" is not valid; the default %1 is used").arg(double(d.temperature)),
              QStringLiteral("generation/topP: \"7\" is not valid; the default %1 is used").arg(double(d.top_p)),
              QStringLiteral("generation/maxNewTokens: \"-1\" is not valid; the default %1 is used").arg(d.max_new_tokens),
              QStringLiteral("generation/doSample: \"maybe\" is not valid; the default %1 is used")
                  .arg(d.do_sample ? QStringLiteral("true") : QStringLiteral("false"))})
            QVERIFY2(problems.contains(want), qPrintable(want + QStringLiteral("\nnot in\n") + all));
        QVERIFY2(all.contains(QLatin1String("longContext/settings: \"0.25\" is not valid")) &&
                     all.contains(QLatin1String("the default \"1\" is used")),
                 qPrintable(all));
        // Loading again reports nothing new.
        s.loadGenerationParams();
        QCOMPARE(s.problems().size(), 5);
    }

    // Before the first write the file as it was is copied to FILE.bak, once: the later writes
    // of the same run leave the copy alone.
    void backedUpBeforeRewrite()
    {
        {
            QSettings qs(ini(), QSettings::IniFormat);
            qs.setValue(QStringLiteral("generation/temperature"), QStringLiteral("hot"));
            qs.setValue(QStringLiteral("chat/systemPrompt"), QStringLiteral("Be brief."));
        }
        QFile::remove(ini() + QStringLiteral(".bak"));
        QFile f(ini());
        QVERIFY(f.open(QIODevice::ReadOnly));
        const QByteArray before = f.readAll();
        f.close();
        QVERIFY(before.contains("hot"));
        {
            QSettings qs(ini(), QSettings::IniFormat);
            AppSettings s(&qs);
            s.saveGenerationParams(s.loadGenerationParams()); // the default replaces "hot"
            s.sync();
            s.saveSystemPrompt(QStringLiteral("Be verbose."));
            s.sync();
            QCOMPARE(qs.status(), QSettings::NoError);
            QVERIFY(s.unwritableReason().isEmpty());
        }
        QFile bak(ini() + QStringLiteral(".bak"));
        QVERIFY(bak.open(QIODevice::ReadOnly));
        QCOMPARE(bak.readAll(), before);
        QSettings qs(ini(), QSettings::IniFormat);
        QCOMPARE(qs.value(QStringLiteral("chat/systemPrompt")).toString(), QStringLiteral("Be verbose."));
    }

    // A settings file under a regular file cannot be written: said, and nothing fails.
    void unwritableSettingsSaid()
    {
        const QString blocker = touch(QStringLiteral("blocker"));
        QSettings qs(blocker + QStringLiteral("/longscope.ini"), QSettings::IniFormat);
        AppSettings s(&qs);
        s.saveSystemPrompt(QStringLiteral("x"));
        QVERIFY2(s.unwritableReason().contains(QLatin1String("not writable")), qPrintable(s.unwritableReason()));
        QVERIFY(s.unwritableReason().contains(qs.fileName()));
    }

    // The application's own settings file, when it is a link to /dev/zero, a FIFO or a huge
    // file, is neither read nor written (quickly), and what the run saves stays in memory.
    void specialDefaultFileNeitherReadNorWritten()
    {
        QStandardPaths::setTestModeEnabled(true);
        QCoreApplication::setOrganizationName(QStringLiteral("LongscopeTest"));
        QCoreApplication::setApplicationName(QStringLiteral("tst_app_settings"));
        const QString path = AppSettings::defaultFilePath();
        QCOMPARE(QSettings().fileName(), path);
        QVERIFY(QDir().mkpath(QFileInfo(path).absolutePath()));
        const QString fifo = m_dir.filePath(QStringLiteral("settings.fifo"));
        QVERIFY(::mkfifo(QFile::encodeName(fifo).constData(), 0600) == 0);
        const QString huge = m_dir.filePath(QStringLiteral("huge.conf"));
        {
            QFile f(huge);
            QVERIFY(f.open(QIODevice::WriteOnly) && f.resize(AppSettings::kMaxFileBytes + 1));
        }
        const struct {
            QString target;
            const char *words;
        } cases[] = {{QStringLiteral("/dev/zero"), "not a regular file"}, {fifo, "not a regular file"}, {huge, "too large"}};
        for (const auto &c : cases) {
            QFile::remove(path);
            QVERIFY(QFile::link(c.target, path));
            QElapsedTimer timer;
            timer.start();
            {
                AppSettings s;
                QVERIFY2(s.problems().join(QLatin1Char(' ')).contains(QLatin1String(c.words)),
                         qPrintable(s.problems().join(QLatin1Char(' '))));
                QVERIFY(s.unwritableReason().contains(QLatin1String(c.words)));
                s.saveSystemPrompt(QStringLiteral("kept for this run"));
                QCOMPARE(s.loadSystemPrompt(), QStringLiteral("kept for this run"));
                s.sync();
            }
            QVERIFY2(timer.elapsed() < 10000, qPrintable(QString::number(timer.elapsed())));
            QVERIFY(QFileInfo(path).isSymLink());
            QCOMPARE(QFileInfo(path).symLinkTarget(), QFileInfo(c.target).absoluteFilePath());
        }
        QCOMPARE(QFileInfo(huge).size(), AppSettings::kMaxFileBytes + 1);
        QFile::remove(path);
    }

    // A system prompt on disk longer than the cap is cut, and said.
    void hugeSystemPromptCut()
    {
        {
            QSettings qs(ini(), QSettings::IniFormat);
            qs.setValue(QStringLiteral("chat/systemPrompt"), QString(AppSettings::kMaxSystemPromptChars + 5, QLatin1Char('x')));
        }
        QSettings qs(ini(), QSettings::IniFormat);
        AppSettings s(&qs);
        QCOMPARE(s.loadSystemPrompt().size(), AppSettings::kMaxSystemPromptChars);
        QVERIFY2(s.problems().join(QLatin1Char(' ')).contains(QLatin1String("chat/systemPrompt")),
                 qPrintable(s.problems().join(QLatin1Char(' '))));
    }

    void legacyKeysRead()
    {
        // Settings saved before they were one JSON string, each under a key of its own.
        {
            QSettings qs(ini(), QSettings::IniFormat);
            qs.setValue(QStringLiteral("longContext/ntkAlpha"), 2.5);
            qs.setValue(QStringLiteral("longContext/ntkAuto"), true);
            qs.setValue(QStringLiteral("longContext/keysBeforeRope"), true);
            qs.setValue(QStringLiteral("longContext/memoryEfficient"), true);
            qs.setValue(QStringLiteral("longContext/causalFlash"), true);
            qs.setValue(QStringLiteral("longContext/kvMode"), QStringLiteral("vmm"));
            qs.setValue(QStringLiteral("longContext/contextLimit"), 8192);
            qs.setValue(QStringLiteral("longContext/overflow"), QStringLiteral("head-tail"));
        }
        QSettings qs(ini(), QSettings::IniFormat);
        AppSettings s(&qs);
        longscope::Settings want;
        want.rope.ntk_alpha = 2.5f;
        want.rope.ntk_auto = true;
        want.rope.store_kv_before_rope = true;
        want.attention.memory_efficient = true;
        want.attention.causal_flash = true;
        want.kv_mode = KvMode::Vmm;
        want.context_limit = 8192;
        want.overflow = OverflowPolicy::HeadTail;
        QVERIFY(s.loadEngineSettings() == want);
        // Saving again writes the one JSON form, which then wins.
        want.backend = ComputeBackend::Cuda;
        s.saveEngineSettings(want);
        QVERIFY(!qs.contains(QStringLiteral("longContext/ntkAlpha")));
        QVERIFY(s.loadEngineSettings() == want);
    }

    void recentModels()
    {
        QSettings qs(ini(), QSettings::IniFormat);
        AppSettings s(&qs);
        QStringList paths;
        for (int i = 0; i < 10; ++i)
            paths << touch(QStringLiteral("model%1.gguf").arg(i));
        for (const QString &p : paths)
            s.addRecentModel(p);
        QStringList recent = s.loadRecentModels();
        QCOMPARE(recent.size(), AppSettings::kMaxRecentModels);
        QCOMPARE(recent.first(), paths[9]); // most recent first
        QCOMPARE(recent.last(), paths[2]);

        // Opening one again moves it to the front, without a duplicate.
        s.addRecentModel(paths[5]);
        recent = s.loadRecentModels();
        QCOMPARE(recent.size(), AppSettings::kMaxRecentModels);
        QCOMPARE(recent.first(), paths[5]);
        QCOMPARE(recent.count(paths[5]), 1);
        QCOMPARE(recent[1], paths[9]);

        // A directory (a Hugging Face model) counts as existing; a deleted file is dropped.
        s.addRecentModel(m_dir.path());
        QFile::remove(paths[9]);
        recent = s.loadRecentModels();
        QCOMPARE(recent.first(), m_dir.path());
        QVERIFY(!recent.contains(paths[9]));

        s.saveRecentModels({paths[1], paths[1], QString(), paths[0]});
        QCOMPARE(s.loadRecentModels(), (QStringList{paths[1], paths[0]}));
    }

    void bundledModel()
    {
        const QString path = bundledModelPath();
        QVERIFY(!path.isEmpty());
        QVERIFY(QFileInfo(path).isFile());
        QCOMPARE(QFileInfo(path).fileName(), QStringLiteral("stories260K.gguf"));
    }
};

QTEST_GUILESS_MAIN(TestAppSettings)
#include "tst_app_settings.moc"
