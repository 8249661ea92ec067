// The engine worker on a real QThread with the bundled stories260K: loading (success,
// failure keeping the old model), streaming, stopping, settings switched mid-generation,
// cache reuse across chat turns, books streamed chunk by chunk, a clean shutdown.
#include "support/cuda_status.h"
#include "support/test_size.h"
#include "threaded_worker.h"

#include "core/book.h"
#include "core/engine_worker.h"

#include "longscope/backend.h"

#include <QFile>
#include <QSemaphore>
#include <QTemporaryDir>
#include <QThread>
#include <QtTest>

using namespace longscope::ui;
using longscope::test::ThreadedWorker;
using longscope::KvMode;
using longscope::OverflowPolicy;
using longscope::StepMetrics;

namespace {

const QString k_model = QStringLiteral(LONGSCOPE_BUNDLED_MODEL);
const QString k_alice = QStringLiteral(LONGSCOPE_TEST_DATA "/books/pg11-alice-in-wonderland.txt");

GenerationParams greedy(int max_new)
{
    GenerationParams p;
    p.max_new_tokens = max_new;
    p.do_sample = false;
    p.repetition_penalty = 1.0f;
    return p;
}

ChatRequest userSays(const QString &text, const GenerationParams &params)
{
    ChatRequest r;
    r.turns.push_back({ChatTurn::Role::User, text});
    r.params = params;
    return r;
}

// Records the worker's signals in the test thread. The connections are queued (the recorder
// lives here, the worker on its thread), so everything is read and written on one thread and
// arrives in emission order; QSignalSpy would append from the worker thread, and its wait()
// misses a signal that comes before the wait starts.
class Events : public QObject {
public:
    struct Applied {
        qint64 step;
        int position;
        longscope::Settings settings;
    };

    explicit Events(EngineWorker *w)
    {
        connect(w, &EngineWorker::loadStarted, this, [this](const QString &p) { loadStarted << p; });
        connect(w, &EngineWorker::loadProgress, this, [this](double f) { loadProgress << f; });
        connect(w, &EngineWorker::modelLoaded, this, [this](const ModelSummary &s) { loaded << s; });
        connect(w, &EngineWorker::loadFailed, this,
                [this](const QString &p, const QString &m) { loadFailed << qMakePair(p, m); });
        connect(w, &EngineWorker::generationStarted, this, [this] { ++generationStarted; });
        connect(w, &EngineWorker::promptFitted, this,
                [this](int n, int dropped, bool truncated) { fitted << std::make_tuple(n, dropped, truncated); });
        connect(w, &EngineWorker::chatFormatUsed, this,
                [this](const QString &f, const QString &note) { formats << qMakePair(f, note); });
        connect(w, &EngineWorker::tokenStreamed, this, [this](const QString &t) { tokens << t; });
        connect(w, &EngineWorker::generationFinished, this, [this](const GenerationSummary &s) { finished << s; });
        connect(w, &EngineWorker::streamProgress, this,
                [this](int done, int total) { streamProgress << qMakePair(done, total); });
        connect(w, &EngineWorker::streamFinished, this,
                [this](bool stopped, int n) { streamFinished << qMakePair(stopped, n); });
        connect(w, &EngineWorker::stepMetrics, this, [this](const StepMetrics &m) { steps << m; });
        connect(w, &EngineWorker::settingsApplied, this,
                [this](qint64 step, int pos, const longscope::Settings &st) { applied << Applied{step, pos, st}; });
        connect(w, &EngineWorker::errorOccurred, this, [this](const QString &e) { errors << e; });
    }

    template <typename List>
    static bool waitFor(const List &list, int count = 1, int ms = 120000)
    {
        return QTest::qWaitFor([&] { return list.size() >= count; }, ms);
    }

    QStringList loadStarted;
    QList<double> loadProgress;
    QList<ModelSummary> loaded;
    QList<QPair<QString, QString>> loadFailed;
    int generationStarted = 0;
    QList<std::tuple<int, int, bool>> fitted;
    QList<QPair<QString, QString>> formats;
    QStringList tokens;
    QList<GenerationSummary> finished;
    QList<QPair<int, int>> streamProgress;
    QList<QPair<bool, int>> streamFinished;
    QList<StepMetrics> steps;
    QList<Applied> applied;
    QStringList errors;
};

} // namespace

class TestEngineWorker : public QObject {
    Q_OBJECT

private:
    ThreadedWorker *m_tw = nullptr;
    EngineWorker *w() { return m_tw->worker; }

    template <typename F>
    void post(F f)
    {
        QMetaObject::invokeMethod(w(), std::move(f), Qt::QueuedConnection);
    }

    // Runs a chat request through a queued call and waits for it to finish; `ev` (when
    // given) records what it emitted.
    GenerationSummary chat(const ChatRequest &req, Events *ev = nullptr)
    {
        Events own(w());
        Events &e = ev ? *ev : own;
        EngineWorker *worker = w();
        post([worker, req] { worker->generateChat(req); });
        if (!Events::waitFor(e.finished))
            return GenerationSummary{FinishReason::Error, QStringLiteral("<timeout>")};
        return e.finished.first();
    }

    void reset(const longscope::Settings &s = {})
    {
        w()->setSettings(s);
        EngineWorker *worker = w();
        QMetaObject::invokeMethod(worker, [worker] { worker->resetContext(); }, Qt::BlockingQueuedConnection);
    }

private slots:
    void initTestCase()
    {
        QVERIFY2(QFile::exists(k_model), qPrintable(k_model));
        m_tw = new ThreadedWorker;
        Events ev(w());
        // The string-based queued call, as a UI might make it.
        QVERIFY(QMetaObject::invokeMethod(w(), "loadModel", Qt::QueuedConnection, Q_ARG(QString, k_model)));
        QVERIFY(Events::waitFor(ev.loaded));
        QCOMPARE(ev.loadStarted, QStringList{k_model});
        QVERIFY(!ev.loadProgress.isEmpty());
        QCOMPARE(ev.loadProgress.last(), 1.0);
        const ModelSummary s = ev.loaded.first();
        QCOMPARE(s.path, k_model);
        QCOMPARE(s.format, QStringLiteral("GGUF v3"));
        QCOMPARE(s.n_vocab, 512);
        QCOMPARE(s.n_layer, 5);
        QCOMPARE(s.n_ctx_train, 512);
        QVERIFY(s.weight_bytes > 0);
        QCOMPARE(s.backend, QStringLiteral("CPU (2 threads)"));
        QVERIFY(!s.gpu_status.isEmpty());
    }

    void cleanupTestCase()
    {
        delete m_tw;
        m_tw = nullptr;
    }

    void streamsDeterministicText()
    {
        reset();
        Events ev(w());
        const GenerationSummary a = chat(userSays(QStringLiteral("Once upon a time"), greedy(40)), &ev);
        QCOMPARE(ev.generationStarted, 1);
        QCOMPARE(ev.fitted.size(), 1);
        QCOMPARE(a.reason, FinishReason::MaxTokens);
        QCOMPARE(a.generated_tokens, 40);
        QVERIFY(!ev.tokens.isEmpty());
        QCOMPARE(ev.tokens.join(QString()), a.text);
        QVERIFY(!a.text.isEmpty());
        QVERIFY2(!a.text.front().isSpace(), "the reply starts with its first word");
        QVERIFY(a.prompt_tokens > 0);
        QCOMPARE(std::get<0>(ev.fitted.first()), a.prompt_tokens);
        QVERIFY(a.decode_tokens_per_second > 0);
        // One prefill step, then one step per token.
        QCOMPARE(ev.steps.size(), 1 + 40);
        QCOMPARE(ev.steps.first().n_tokens, a.prompt_tokens);
        QCOMPARE(ev.steps.last().position, a.prompt_tokens + 40);

        // The same request on a fresh context gives the same text.
        reset();
        const GenerationSummary b = chat(userSays(QStringLiteral("Once upon a time"), greedy(40)));
        QCOMPARE(b.text, a.text);
    }

    void stopEndsGeneration()
    {
        reset();
        EngineWorker *worker = w();
        // Direct: runs on the worker thread at the token itself, so the test does not depend
        // on how fast this tiny model outruns the event loop.
        auto conn = connect(worker, &EngineWorker::tokenStreamed, worker, [worker] { worker->requestStop(); },
                            Qt::DirectConnection);
        const GenerationSummary s = chat(userSays(QStringLiteral("Tom had a red ball"), greedy(100000)));
        disconnect(conn);
        QCOMPARE(s.reason, FinishReason::Stopped);
        QVERIFY2(s.generated_tokens <= 3, qPrintable(QString::number(s.generated_tokens)));
    }

    void stopFromQueuedSlot()
    {
        // The way the UI stops: a queued slot in the UI thread. The limit is large so the
        // generation is still running when the slot gets to run.
        longscope::Settings big;
        big.context_limit = 8192;
        reset(big);
        EngineWorker *worker = w();
        auto conn = connect(worker, &EngineWorker::tokenStreamed, this, [worker] { worker->requestStop(); });
        const GenerationSummary s = chat(userSays(QStringLiteral("Lily went"), greedy(100000)));
        disconnect(conn);
        QVERIFY(s.reason == FinishReason::Stopped || s.reason == FinishReason::ContextFull);
        if (s.reason == FinishReason::Stopped)
            QVERIFY(s.generated_tokens < 8000);
    }

    void settingsChangeMidGeneration()
    {
        longscope::Settings before;
        before.kv_mode = KvMode::Static;
        reset(before);
        longscope::Settings after = before;
        after.kv_mode = KvMode::Vmm;
        after.attention.memory_efficient = true;

        EngineWorker *worker = w();
        int seen = 0; // touched on the worker thread only
        auto conn = connect(
            worker, &EngineWorker::tokenStreamed, worker,
            [&seen, worker, after] {
                if (++seen == 5)
                    worker->setSettings(after);
            },
            Qt::DirectConnection);
        Events ev(w());
        const GenerationSummary s = chat(userSays(QStringLiteral("Once upon a time"), greedy(30)), &ev);
        disconnect(conn);
        QCOMPARE(s.reason, FinishReason::MaxTokens);
        QCOMPARE(ev.applied.size(), 1);
        const Events::Applied applied = ev.applied.first();
        QCOMPARE(applied.settings.kv_mode, KvMode::Vmm);
        QVERIFY(applied.settings.attention.memory_efficient);
        QVERIFY(applied.position > s.prompt_tokens);

        bool found = false;
        for (const StepMetrics &m : ev.steps) {
            if (m.step < applied.step) {
                QCOMPARE(m.settings.kv_mode, KvMode::Static);
                QVERIFY(!m.settings.attention.memory_efficient);
            } else {
                QCOMPARE(m.settings.kv_mode, KvMode::Vmm);
                QVERIFY(m.settings.attention.memory_efficient);
                if (m.step == applied.step) {
                    found = true;
                    QCOMPARE(m.position, applied.position + 1);
                }
            }
        }
        QVERIFY2(found, "a step carries the index settingsApplied announced");
        QCOMPARE(w()->settings().kv_mode, KvMode::Vmm);

        // The output is the same as without the switch (the modes are equivalent).
        reset(before);
        const GenerationSummary plain = chat(userSays(QStringLiteral("Once upon a time"), greedy(30)));
        QCOMPARE(s.text, plain.text);
    }

    void settingsWhileIdleApplyAtNextEval()
    {
        reset();
        Events ev(w());
        longscope::Settings s;
        s.kv_mode = KvMode::Concat;
        w()->setSettings(s);
        QTest::qWait(50);
        QVERIFY(ev.applied.isEmpty()); // nothing ran yet
        chat(userSays(QStringLiteral("Once upon a time"), greedy(3)), &ev);
        QCOMPARE(ev.applied.size(), 1);
        QCOMPARE(ev.applied.first().step, ev.steps.first().step);
        for (const StepMetrics &m : ev.steps)
            QCOMPARE(m.settings.kv_mode, KvMode::Concat);
    }

    void contextLimitChangesBetweenTurns()
    {
        longscope::Settings big;
        big.context_limit = 2048;
        reset(big);
        const GenerationSummary a = chat(userSays(QStringLiteral("Once upon a time"), greedy(60)));
        QCOMPARE(a.reason, FinishReason::MaxTokens);

        // Below what the context holds: the next chat starts over instead of failing.
        longscope::Settings small;
        small.context_limit = 48;
        w()->setSettings(small);
        Events ev(w());
        const GenerationSummary b = chat(userSays(QStringLiteral("Tom had a red ball"), greedy(8)), &ev);
        QVERIFY2(ev.errors.isEmpty(), qPrintable(ev.errors.join(QLatin1Char('\n'))));
        QCOMPARE(b.reason, FinishReason::MaxTokens);
        QCOMPARE(ev.applied.size(), 1);
        QCOMPARE(ev.steps.first().settings.context_limit, 48);

        // Back to 0: the model's trained context again (512), not the last limit.
        w()->setSettings(longscope::Settings{});
        Events ev2(w());
        chat(userSays(QStringLiteral("Tom had a red ball"), greedy(4)), &ev2);
        QCOMPARE(ev2.steps.first().settings.context_limit, 512);
    }

    void invalidSettingsRejected()
    {
        reset();
        Events ev(w());
        longscope::Settings bad;
        bad.rope.ntk_alpha = 0.5f;
        w()->setSettings(bad); // validated on the calling thread
        QCOMPARE(ev.errors.size(), 1);
        QCOMPARE(w()->settings().rope.ntk_alpha, 1.0f);
    }

    // The CUDA backend asked for. Without a usable GPU (the probe says so): switching a running
    // session is refused with the probe's reason and the chat goes on, on the CPU, with the
    // same text; loading a model with CUDA asked for loads it on the CPU and says why. With a
    // GPU: the switch takes effect and the greedy text is the CPU's.
    void cudaBackendRequested()
    {
        const bool cuda = longscope::test::cuda_status().available;
        reset();
        const GenerationSummary cpu = chat(userSays(QStringLiteral("Once upon a time"), greedy(30)));
        QCOMPARE(cpu.reason, FinishReason::MaxTokens);

        longscope::Settings s;
        s.backend = longscope::ComputeBackend::Cuda;
        Events ev(w());
        reset(s);
        const GenerationSummary on = chat(userSays(QStringLiteral("Once upon a time"), greedy(30)), &ev);
        QCOMPARE(on.reason, FinishReason::MaxTokens);
        QCOMPARE(on.text, cpu.text);
        if (!cuda) {
            QVERIFY2(!ev.errors.isEmpty() && ev.errors.first().contains(QLatin1String("CUDA")),
                     qPrintable(ev.errors.join(QLatin1Char('|'))));
            QCOMPARE(w()->settings().backend, longscope::ComputeBackend::Cpu);
        } else {
            QVERIFY2(ev.errors.isEmpty(), qPrintable(ev.errors.join(QLatin1Char('|'))));
        }

        // A model loaded while CUDA is asked for.
        w()->setSettings(s);
        Events load(w());
        EngineWorker *worker = w();
        post([worker] { worker->loadModel(k_model); });
        QVERIFY(Events::waitFor(load.loaded));
        const ModelSummary m = load.loaded.first();
        QCOMPARE(m.cuda_available, cuda);
        if (!cuda) {
            QCOMPARE(m.backend, QStringLiteral("CPU (2 threads)"));
            QVERIFY2(m.gpu_status.startsWith(QLatin1String("CUDA could not be used, running on the CPU: ")),
                     qPrintable(m.gpu_status));
            QCOMPARE(w()->settings().backend, longscope::ComputeBackend::Cpu);
        } else {
            QCOMPARE(m.backend, QStringLiteral("CUDA (GPU)"));
        }
        reset();
    }

    void failedLoadKeepsOldModel()
    {
        reset();
        QTemporaryDir dir;
        const QString corrupt = dir.filePath(QStringLiteral("corrupt.gguf"));
        {
            QFile f(corrupt);
            QVERIFY(f.open(QIODevice::WriteOnly));
            QByteArray junk("GGUF\x03\x00\x00\x00", 8);
            junk += QByteArray(200, '\xff');
            f.write(junk);
        }
        for (const QString &path : {QStringLiteral("/nonexistent/model.gguf"), corrupt, dir.path()}) {
            Events ev(w());
            EngineWorker *worker = w();
            post([worker, path] { worker->loadModel(path); });
            QVERIFY(Events::waitFor(ev.loadFailed));
            QCOMPARE(ev.loaded.size(), 0);
            QCOMPARE(ev.loadFailed.first().first, path);
            QVERIFY(!ev.loadFailed.first().second.isEmpty());

            const GenerationSummary s = chat(userSays(QStringLiteral("Once upon a time"), greedy(10)));
            QCOMPARE(s.reason, FinishReason::MaxTokens);
            QVERIFY(!s.text.isEmpty());
        }
    }

    // A Hugging Face directory whose config.json nests 100000 levels deep (200 KB) is refused
    // with a message, not a stack overflow, and the model loaded before stays.
    void deeplyNestedConfigFailsCleanly()
    {
        reset();
        QTemporaryDir dir;
        const QString hf = QStringLiteral(LONGSCOPE_TEST_DATA "/stories260K/hf");
        for (const QString &name : {QStringLiteral("model.safetensors"), QStringLiteral("tokenizer.model")})
            QVERIFY(QFile::copy(hf + QLatin1Char('/') + name, dir.filePath(name)));
        {
            QFile f(dir.filePath(QStringLiteral("config.json")));
            QVERIFY(f.open(QIODevice::WriteOnly));
            f.write("{\"model_type\": \"llama\", \"hidden_size\": " + QByteArray(100000, '[') + QByteArray(100000, ']') +
                    "}");
        }
        Events ev(w());
        EngineWorker *worker = w();
        const QString path = dir.path();
        post([worker, path] { worker->loadModel(path); });
        QVERIFY(Events::waitFor(ev.loadFailed));
        QCOMPARE(ev.loaded.size(), 0);
        const QString message = ev.loadFailed.first().second;
        QVERIFY2(message.contains(QLatin1String("config.json")) && message.contains(QLatin1String("nested deeper")),
                 qPrintable(message));
        const GenerationSummary s = chat(userSays(QStringLiteral("Once upon a time"), greedy(10)));
        QCOMPARE(s.reason, FinishReason::MaxTokens);
    }

    void cancelledLoadKeepsOldModel()
    {
        Events ev(w());
        EngineWorker *worker = w();
        auto conn = connect(worker, &EngineWorker::loadProgress, worker, [worker] { worker->cancelLoad(); },
                            Qt::DirectConnection);
        post([worker] { worker->loadModel(k_model); });
        QVERIFY(Events::waitFor(ev.loadFailed));
        disconnect(conn);
        QCOMPARE(ev.loaded.size(), 0);
        QVERIFY(ev.loadFailed.first().second.contains(QStringLiteral("cancel")));
        reset();
        const GenerationSummary s = chat(userSays(QStringLiteral("Once upon a time"), greedy(5)));
        QCOMPARE(s.reason, FinishReason::MaxTokens);
    }

    void secondTurnReusesCache()
    {
        reset();
        const ChatRequest first = userSays(QStringLiteral("Once upon a time"), greedy(20));
        const GenerationSummary a = chat(first);
        QCOMPARE(a.reason, FinishReason::MaxTokens);

        ChatRequest second = first;
        second.turns.push_back({ChatTurn::Role::Assistant, a.text});
        second.turns.push_back({ChatTurn::Role::User, QStringLiteral("What happened next?")});
        Events ev(w());
        const GenerationSummary b = chat(second, &ev);
        QCOMPARE(b.reason, FinishReason::MaxTokens);
        QCOMPARE(ev.fitted.size(), 1);
        const int promptTokens = std::get<0>(ev.fitted.first());
        QCOMPARE(promptTokens, b.prompt_tokens);
        QVERIFY(!ev.steps.isEmpty());
        const StepMetrics &prefill = ev.steps.first();
        QVERIFY2(prefill.n_tokens < promptTokens / 2,
                 qPrintable(QStringLiteral("turn 2 evaluated %1 of its %2 prompt tokens")
                                .arg(prefill.n_tokens)
                                .arg(promptTokens)));
        QCOMPARE(prefill.position, promptTokens);

        // The reply equals the one a fresh context gives.
        reset();
        const GenerationSummary fresh = chat(second);
        QCOMPARE(fresh.text, b.text);
    }

    void dropOldestTurnsReported()
    {
        longscope::Settings s;
        s.context_limit = 64;
        s.overflow = OverflowPolicy::DropOldestTurns;
        reset(s);
        ChatRequest req;
        req.params = greedy(8);
        for (int i = 0; i < 6; ++i) {
            req.turns.push_back({ChatTurn::Role::User, QStringLiteral("Tell me a story about a cat and a dog %1").arg(i)});
            req.turns.push_back({ChatTurn::Role::Assistant, QStringLiteral("The cat and the dog played in the sun.")});
        }
        req.turns.push_back({ChatTurn::Role::User, QStringLiteral("And then?")});
        Events ev(w());
        const GenerationSummary g = chat(req, &ev);
        QCOMPARE(g.reason, FinishReason::MaxTokens);
        QVERIFY(g.dropped_turns > 0);
        QCOMPARE(std::get<1>(ev.fitted.first()), g.dropped_turns);
        QVERIFY(g.prompt_tokens <= 64 - 8);
        // stories260K has no chat template: the built-in plain format, and the note says why.
        QCOMPARE(ev.formats.size(), 1);
        QCOMPARE(ev.formats.first().first, QStringLiteral("plain"));
        QVERIFY(ev.formats.first().second.contains(QStringLiteral("no chat template")));
    }

    void chatOverflowWithErrorPolicy()
    {
        longscope::Settings s;
        s.context_limit = 32;
        reset(s);
        Events ev(w());
        const GenerationSummary g =
            chat(userSays(QStringLiteral("A very long message about a little girl named Lily who loved to play "
                                         "outside in the park with her friends every day."),
                          greedy(8)),
                 &ev);
        QCOMPARE(g.reason, FinishReason::Error);
        QCOMPARE(ev.errors.size(), 1);
        // The error names the cause (the reply's reserve, the policy) and the fixes.
        QVERIFY2(ev.errors.first().contains(QStringLiteral("Max new tokens")), qPrintable(ev.errors.first()));
        QVERIFY2(ev.errors.first().contains(QStringLiteral("drop oldest turns")), qPrintable(ev.errors.first()));
    }

    // The app's defaults on the bundled model (a 512-token context, Max new tokens 512, drop
    // the oldest turns): a reply gets what the prompt leaves free instead of an error, and
    // the next question still fits.
    void defaultMaxNewTokensCappedToTheFreeContext()
    {
        longscope::Settings s;
        s.overflow = OverflowPolicy::DropOldestTurns;
        reset(s);
        GenerationParams p = greedy(512);
        ChatRequest req = userSays(QStringLiteral("Once upon a time"), p);
        const GenerationSummary first = chat(req);
        QVERIFY2(first.reason != FinishReason::Error, qPrintable(first.text));
        QVERIFY(first.generated_tokens > 0);
        QVERIFY(first.prompt_tokens + first.generated_tokens <= 512);
        // Max new tokens (512) was more than the context had free after the prompt.
        QCOMPARE(first.reply_room, 512 - first.prompt_tokens);
        QVERIFY(first.generated_tokens <= first.reply_room);

        req.turns.push_back({ChatTurn::Role::Assistant, first.text});
        req.turns.push_back({ChatTurn::Role::User, QStringLiteral("What happened next?")});
        Events ev(w());
        const GenerationSummary second = chat(req, &ev);
        QVERIFY2(ev.errors.isEmpty(), qPrintable(ev.errors.join(QLatin1Char('\n'))));
        QVERIFY(second.reason != FinishReason::Error);
        QVERIFY(second.generated_tokens > 0);
        QVERIFY(second.prompt_tokens + second.generated_tokens <= 512);
    }

    // A book streamed in at the defaults (its head and tail, a quarter of the context left
    // free), then a question with Max new tokens 512: the reply gets the room that is left.
    void bookThenQuestionAtDefaults()
    {
        longscope::Settings s;
        s.overflow = OverflowPolicy::DropOldestTurns;
        reset(s);
        const QString text = loadBook(k_alice)->text;
        EngineWorker *worker = w();
        {
            Events ev(w());
            post([worker, text] { worker->streamText(text, 128); });
            QVERIFY(Events::waitFor(ev.streamFinished));
            QVERIFY2(ev.errors.isEmpty(), qPrintable(ev.errors.join(QLatin1Char('\n'))));
            QCOMPARE(ev.streamFinished.first(), qMakePair(false, 384));
        }
        Events ev(w());
        const GenerationSummary g = chat(userSays(QStringLiteral("Who is Alice?"), greedy(512)), &ev);
        QVERIFY2(ev.errors.isEmpty(), qPrintable(ev.errors.join(QLatin1Char('\n'))));
        QVERIFY(g.reason != FinishReason::Error);
        QVERIFY(g.generated_tokens > 0);
        QVERIFY(g.prompt_tokens > 384); // the book is the prompt's prefix
        QVERIFY(g.prompt_tokens + g.generated_tokens <= 512);
    }

    // A book streamed with one model, then another model (a vocabulary of 128 tokens, the
    // book's ids go up to 511): the chat starts from an empty context, nothing of the old
    // model's tokens in it.
    void modelSwitchForgetsTheBook()
    {
        longscope::Settings s;
        s.overflow = OverflowPolicy::DropOldestTurns;
        reset(s);
        const QString text = loadBook(k_alice)->text.left(3000);
        const QString other = QStringLiteral(LONGSCOPE_TEST_DATA "/arch/llama/model.gguf");
        EngineWorker *worker = w();
        {
            Events ev(w());
            post([worker, text] { worker->streamText(text, 128); });
            QVERIFY(Events::waitFor(ev.streamFinished));
            QVERIFY(ev.streamFinished.first().second > 100);
        }
        {
            Events ev(w());
            post([worker, other] { worker->loadModel(other); });
            QVERIFY(Events::waitFor(ev.loaded));
            QCOMPARE(ev.loaded.first().n_vocab, 128);
        }
        {
            Events ev(w());
            const GenerationSummary g = chat(userSays(QStringLiteral("hi"), greedy(8)), &ev);
            QVERIFY2(ev.errors.isEmpty(), qPrintable(ev.errors.join(QLatin1Char('\n'))));
            QVERIFY(g.reason != FinishReason::Error);
            QVERIFY(g.prompt_tokens < 64); // the conversation only
        }
        // Back to the bundled model for the tests after this one.
        Events ev(w());
        post([worker] { worker->loadModel(k_model); });
        QVERIFY(Events::waitFor(ev.loaded));
        QCOMPARE(ev.loaded.first().n_vocab, 512);
    }

    void chatWithoutTurnsIsAnError()
    {
        reset();
        Events ev(w());
        ChatRequest empty;
        empty.params = greedy(5);
        const GenerationSummary s = chat(empty, &ev);
        QCOMPARE(s.reason, FinishReason::Error);
        QCOMPARE(ev.errors.size(), 1);
    }

    void streamsBookThenContinues()
    {
        longscope::Settings s;
        s.context_limit = 4096;
        reset(s);
        QString error;
        const std::optional<Book> book = loadBook(k_alice, &error);
        QVERIFY2(book, qPrintable(error));
        // Reduced (under a sanitizer): still several chunks and past 256 tokens.
        const QString text = book->text.left(longscope::test::sized(3000, 1000));

        Events ev(w());
        EngineWorker *worker = w();
        post([worker, text] { worker->streamText(text, 128); });
        QVERIFY(Events::waitFor(ev.streamFinished));
        QVERIFY(ev.streamProgress.size() >= 3);
        const int total = ev.streamProgress.last().second;
        QVERIFY(total > 256);
        int last = -1;
        for (const auto &p : ev.streamProgress) {
            QCOMPARE(p.second, total);
            QVERIFY(p.first >= last);
            last = p.first;
        }
        QCOMPARE(last, total);
        QCOMPARE(ev.streamFinished.first(), qMakePair(false, total));
        QCOMPARE(ev.steps.size(), (total + 127) / 128);
        for (const StepMetrics &m : ev.steps)
            QVERIFY(m.n_tokens <= 128);

        // Then the text goes on from where the book stops.
        Events gen(w());
        post([worker] { worker->continueText(greedy(10)); });
        QVERIFY(Events::waitFor(gen.finished));
        const GenerationSummary summary = gen.finished.first();
        QCOMPARE(summary.reason, FinishReason::MaxTokens);
        QCOMPARE(summary.prompt_tokens, total);
        QCOMPARE(summary.generated_tokens, 10);
        QCOMPARE(gen.tokens.join(QString()), summary.text);
        QCOMPARE(gen.steps.size(), 10); // no prefill: the cache holds the book
    }

    void streamStoppable()
    {
        longscope::Settings s;
        s.context_limit = 4096;
        reset(s);
        const QString text = loadBook(k_alice)->text.left(6000);
        EngineWorker *worker = w();
        auto conn = connect(
            worker, &EngineWorker::streamProgress, worker,
            [worker](int done) {
                if (done > 0)
                    worker->requestStop();
            },
            Qt::DirectConnection);
        Events ev(w());
        post([worker, text] { worker->streamText(text, 64); });
        QVERIFY(Events::waitFor(ev.streamFinished));
        disconnect(conn);
        QCOMPARE(ev.streamFinished.first(), qMakePair(true, 64));
    }

    void stopCancelsQueuedJob()
    {
        // Stop pressed while a chat waits behind a book being streamed: both are cancelled.
        // (With one shared flag that each job cleared when it started, the chat ran on.)
        longscope::Settings s;
        s.context_limit = 4096;
        reset(s);
        const QString text = loadBook(k_alice)->text.left(6000);
        EngineWorker *worker = w();
        Events ev(w());
        // Holds the worker until both jobs are queued, so the stop below comes while the
        // chat is queued whatever the speed of the model.
        QSemaphore gate;
        post([&gate] { gate.acquire(); });
        // The Stop comes from the worker thread at the book's first chunk.
        auto conn = connect(
            worker, &EngineWorker::streamProgress, worker,
            [worker](int done) {
                if (done > 0)
                    worker->requestStop();
            },
            Qt::DirectConnection);
        const quint64 book = worker->queueStream(text, 64);
        const quint64 reply = worker->queueChat(userSays(QStringLiteral("Once upon a time"), greedy(100000)));
        QVERIFY(reply > book);
        gate.release();
        QVERIFY(Events::waitFor(ev.finished));
        disconnect(conn);
        QCOMPARE(ev.streamFinished.first(), qMakePair(true, 64));
        QCOMPARE(ev.generationStarted, 1);
        QCOMPARE(ev.finished.first().reason, FinishReason::Stopped);
        QCOMPARE(ev.finished.first().generated_tokens, 0);
        QVERIFY(ev.tokens.isEmpty());
        QVERIFY(ev.errors.isEmpty());

        // A job queued after the Stop runs as usual.
        Events after(w());
        worker->queueChat(userSays(QStringLiteral("Once upon a time"), greedy(5)));
        QVERIFY(Events::waitFor(after.finished));
        QCOMPARE(after.finished.first().reason, FinishReason::MaxTokens);
        QCOMPARE(after.finished.first().generated_tokens, 5);
    }

    void stopCancelsQueuedPerplexityRun()
    {
        reset();
        const QString text = loadBook(k_alice)->text.left(4000);
        EngineWorker *worker = w();
        QList<PerplexityRunResult> results;
        auto done = connect(worker, &EngineWorker::perplexityFinished, this,
                            [&results](const QString &, const PerplexityRunResult &r) { results << r; });
        QSemaphore gate;
        post([&gate] { gate.acquire(); });
        worker->queuePerplexity(text, longscope::Settings{}, 128, 16, QStringLiteral("first"));
        worker->queuePerplexity(text, longscope::Settings{}, 128, 16, QStringLiteral("second"));
        worker->requestStop(); // both are still queued
        gate.release();
        QVERIFY(QTest::qWaitFor([&] { return results.size() == 2; }, 120000));
        disconnect(done);
        for (const PerplexityRunResult &r : results) {
            QVERIFY(r.cancelled);
            QVERIFY(!r.failed());
            QCOMPARE(r.n_scored, 0);
        }
    }

    void tooLongTextWithErrorPolicy()
    {
        longscope::Settings s;
        s.context_limit = 256;
        s.overflow = OverflowPolicy::Error;
        reset(s);
        const QString text = loadBook(k_alice)->text.left(5000);
        EngineWorker *worker = w();
        {
            Events ev(w());
            post([worker, text] { worker->streamText(text, 64); });
            QVERIFY(Events::waitFor(ev.streamFinished));
            QCOMPARE(ev.errors.size(), 1);
            QVERIFY2(ev.errors.first().contains(QStringLiteral("256")), qPrintable(ev.errors.first()));
            QCOMPARE(ev.streamFinished.first(), qMakePair(true, 0));
        }

        // Head and tail: the text is cut to leave a quarter of the context free (64 of 256).
        s.overflow = OverflowPolicy::HeadTail;
        reset(s);
        {
            Events ev(w());
            post([worker, text] { worker->streamText(text, 64); });
            QVERIFY(Events::waitFor(ev.streamFinished));
            QVERIFY(ev.errors.isEmpty());
            QCOMPARE(ev.streamFinished.first(), qMakePair(false, 192));
        }

        // A chat continues from the streamed text: the book stays as the prompt's prefix and
        // only the conversation is evaluated.
        {
            Events gen(w());
            post([worker] { worker->generateChat(userSays(QStringLiteral("Who is in the story?"), greedy(10))); });
            QVERIFY(Events::waitFor(gen.finished));
            QVERIFY(gen.errors.isEmpty());
            QVERIFY(gen.finished.first().prompt_tokens > 192);
            QVERIFY(!gen.steps.isEmpty());
            QVERIFY(gen.steps.first().n_tokens < gen.finished.first().prompt_tokens - 150);
            QVERIFY(gen.finished.first().generated_tokens > 0);
        }

        // Filling the rest: a long continuation ends with ContextFull.
        Events gen(w());
        post([worker] { worker->continueText(greedy(400)); });
        QVERIFY(Events::waitFor(gen.finished));
        QCOMPARE(gen.finished.first().reason, FinishReason::ContextFull);
        QVERIFY(gen.finished.first().generated_tokens > 0);
    }

    void shiftPolicyStreamsAndChatsPastTheContext()
    {
        // A text 5x the context streams in whole, a chat about it and a long continuation go
        // on: no context error, no ContextFull, the context never above its limit.
        longscope::Settings s;
        s.context_limit = 256;
        s.overflow = OverflowPolicy::Shift;
        reset(s);
        const QString text = loadBook(k_alice)->text.left(5000);
        EngineWorker *worker = w();
        {
            Events ev(w());
            post([worker, text] { worker->streamText(text, 64); });
            QVERIFY(Events::waitFor(ev.streamFinished));
            QVERIFY2(ev.errors.isEmpty(), qPrintable(ev.errors.value(0)));
            QCOMPARE(ev.streamFinished.first().first, false);
            QVERIFY(ev.streamFinished.first().second <= 256);
            QVERIFY(ev.streamFinished.first().second > 4);
        }
        {
            Events gen(w());
            post([worker] { worker->generateChat(userSays(QStringLiteral("Who is in the story?"), greedy(10))); });
            QVERIFY(Events::waitFor(gen.finished));
            QVERIFY2(gen.errors.isEmpty(), qPrintable(gen.errors.value(0)));
            QVERIFY(gen.finished.first().generated_tokens > 0);
        }
        // Continuations (each may end at a generated end of text) until more tokens than the
        // context holds went in.
        int generated = 0;
        for (int round = 0; round < 60 && generated <= 256; ++round) {
            Events gen(w());
            GenerationParams p = greedy(200);
            p.do_sample = true; // sampled, so a generated end of text is not met again at once
            p.temperature = 1.0f;
            p.seed = quint64(round + 1);
            post([worker, p] { worker->continueText(p); });
            QVERIFY(Events::waitFor(gen.finished));
            QVERIFY2(gen.errors.isEmpty(), qPrintable(gen.errors.value(0)));
            QVERIFY(gen.finished.first().reason != FinishReason::ContextFull);
            for (const StepMetrics &m : gen.steps)
                QVERIFY(m.position <= 256);
            generated += gen.finished.first().generated_tokens;
        }
        QVERIFY(generated > 256);
    }

    void loadsHuggingFaceDirectory()
    {
        reset();
        const GenerationSummary gguf = chat(userSays(QStringLiteral("Once upon a time"), greedy(20)));
        const QString hf = QStringLiteral(LONGSCOPE_TEST_DATA "/stories260K/hf");
        EngineWorker *worker = w();
        {
            Events ev(w());
            post([worker, hf] { worker->loadModel(hf); });
            QVERIFY(Events::waitFor(ev.loaded));
            QCOMPARE(ev.loaded.first().format, QStringLiteral("Hugging Face"));
            QCOMPARE(ev.loaded.first().n_vocab, 512);
        }
        // The same model in another format: the same greedy reply.
        const GenerationSummary fromHf = chat(userSays(QStringLiteral("Once upon a time"), greedy(20)));
        QCOMPARE(fromHf.text, gguf.text);
        Events ev(w());
        post([worker] { worker->loadModel(k_model); });
        QVERIFY(Events::waitFor(ev.loaded));
    }

    void continueOnEmptyContext()
    {
        reset();
        Events ev(w());
        EngineWorker *worker = w();
        post([worker] { worker->continueText(greedy(10)); });
        QVERIFY(Events::waitFor(ev.finished));
        QCOMPARE(ev.finished.first().reason, FinishReason::Error);
        QCOMPARE(ev.errors.size(), 1);
        QVERIFY(ev.errors.first().contains(QStringLiteral("nothing to continue")));
    }

    void noModelIsAnError()
    {
        ThreadedWorker tw;
        Events ev(tw.worker);
        EngineWorker *worker = tw.worker;
        const ChatRequest req = userSays(QStringLiteral("hi"), greedy(5));
        QMetaObject::invokeMethod(worker, [worker, req] { worker->generateChat(req); }, Qt::QueuedConnection);
        QVERIFY(Events::waitFor(ev.finished));
        QCOMPARE(ev.finished.first().reason, FinishReason::Error);
        QMetaObject::invokeMethod(worker, [worker] { worker->streamText(QStringLiteral("text"), 8); },
                                  Qt::QueuedConnection);
        QVERIFY(Events::waitFor(ev.streamFinished));
        QCOMPARE(ev.errors.size(), 2);
    }

    void destroyMidGeneration()
    {
        QElapsedTimer timer;
        timer.start();
        auto *tw = new ThreadedWorker;
        EngineWorker *worker = tw->worker;
        longscope::Settings s;
        s.context_limit = 16384;
        worker->setSettings(s);
        Events ev(worker);
        QMetaObject::invokeMethod(worker, [worker] { worker->loadModel(k_model); }, Qt::QueuedConnection);
        QVERIFY(Events::waitFor(ev.loaded));
        const ChatRequest req = userSays(QStringLiteral("Once upon a time"), greedy(100000));
        QMetaObject::invokeMethod(worker, [worker, req] { worker->generateChat(req); }, Qt::QueuedConnection);
        QVERIFY(Events::waitFor(ev.tokens));
        // What the main window does on close: stop, quit, wait.
        worker->requestStop();
        tw->thread.quit();
        QVERIFY(tw->thread.wait(5000));
        delete tw;
        QVERIFY(timer.elapsed() < 15000);
    }
};

QTEST_GUILESS_MAIN(TestEngineWorker)
#include "tst_engine_worker.moc"
