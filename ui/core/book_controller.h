// Streaming a book into the worker's context: the chunk size for the room left, the job
// queued to the worker, its progress and how far it got. The window owns the book panel
// that shows all this and the chat note that reports it.
#pragma once

#include <QObject>
#include <QPointer>
#include <QString>

namespace longscope::ui {

class InferenceWorker;

class BookController : public QObject {
    Q_OBJECT

public:
    static constexpr int kMaxChunk = 256;
    static constexpr int kMinChunk = 32;

    explicit BookController(QObject *parent = nullptr);

    // Connects the worker's streaming signals (the local engine on its own thread, or a
    // remote server, where the text goes ahead of the chat as a long prompt).
    void setWorker(InferenceWorker *worker);

    // Whether `text` may not fit in `room` free tokens: every UTF-8 byte is at most one token
    // (byte fallback), plus BOS and the prefix space.
    static bool mayNotFit(const QString &text, int room);
    // Chunks of 256 tokens; smaller when the room is small, so progress and plots still move.
    static int chunkFor(int room);

    // Queues `text` to the worker; `room`: the free tokens in the context now.
    void stream(const QString &text, int room);
    bool isStreaming() const { return m_streaming; }
    int tokensDone() const { return m_done; }
    int tokensTotal() const { return m_total; }
    // The text's length in tokens as the model's tokenizer counts it (-1 until the worker
    // says), and whether only its head and tail went in.
    int textTokens() const { return m_textTokens; }
    bool wasTruncated() const { return m_textTokens > m_total; }

signals:
    void progress(int done, int total);
    // `stopped`: the text did not go in whole (Stop, or an error reported before).
    void finished(bool stopped, int tokensInContext);

private:
    void onProgress(int done, int total);
    void onFinished(bool stopped, int tokensInContext);

    QPointer<InferenceWorker> m_worker;
    bool m_streaming = false;
    int m_room = 0;
    int m_done = 0;
    int m_total = 0;
    int m_textTokens = -1;
};

} // namespace longscope::ui
