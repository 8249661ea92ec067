#include "core/book_controller.h"

#include "core/inference_worker.h"

#include <algorithm>

namespace longscope::ui {

BookController::BookController(QObject *parent) : QObject(parent) {}

void BookController::setWorker(InferenceWorker *worker)
{
    if (m_worker)
        disconnect(m_worker, nullptr, this, nullptr);
    m_worker = worker;
    if (!worker)
        return;
    connect(worker, &InferenceWorker::streamFitted, this, [this](int textTokens, int kept) {
        m_textTokens = textTokens;
        m_total = kept;
    });
    connect(worker, &InferenceWorker::streamProgress, this, &BookController::onProgress);
    connect(worker, &InferenceWorker::streamFinished, this, &BookController::onFinished);
}

bool BookController::mayNotFit(const QString &text, int room)
{
    const qsizetype worstCase = text.toUtf8().size() + 2;
    return worstCase > room;
}

int BookController::chunkFor(int room)
{
    return std::clamp(room / 16, kMinChunk, kMaxChunk);
}

void BookController::stream(const QString &text, int room)
{
    m_room = room;
    m_done = 0;
    m_total = 0;
    m_textTokens = -1;
    m_streaming = true;
    if (m_worker)
        m_worker->queueStream(text, chunkFor(room));
}

void BookController::onProgress(int done, int total)
{
    m_done = done;
    m_total = total;
    emit progress(done, total);
}

void BookController::onFinished(bool stopped, int tokensInContext)
{
    m_streaming = false;
    emit finished(stopped, tokensInContext);
}

} // namespace longscope::ui
