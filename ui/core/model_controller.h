// Which model is loaded: loading one on the worker (queued behind what runs), cancelling
// it, what the worker reports about it (the summary, a backend change), the recent and
// last models remembered, and the bundled model to fall back to. The window shows the
// progress dialog, the banner and the errors.
#pragma once

#include "core/engine_worker.h"

#include <QObject>
#include <QPointer>
#include <QString>

namespace longscope::ui {

class AppSettings;

class ModelController : public QObject {
    Q_OBJECT

public:
    // `settings`: where the recent and last models are remembered (not owned).
    explicit ModelController(AppSettings *settings, QObject *parent = nullptr);

    // Connects the worker's loading signals; the worker lives on its own thread.
    void setWorker(EngineWorker *worker);

    bool isLoaded() const { return m_loaded; }
    // The loaded model (the last one reported: the backend fields follow backendChanged).
    const ModelSummary &summary() const { return m_summary; }

    // Queues a load of `path` (a GGUF file or a Hugging Face directory). The model loaded
    // now stays until the new one is ready; a failed load keeps it.
    void load(const QString &path);
    // Abandons the load in progress (thread-safe on the worker's side).
    void cancel();
    bool wasCancelled() const { return m_cancelled; }

    // After `failedPath` failed to load with nothing loaded: the bundled model to try
    // instead, or empty when there is none or it was the bundled one that failed.
    QString fallbackFor(const QString &failedPath) const;

signals:
    void loadStarted(const QString &path);
    void loadProgress(double fraction);
    void loaded(const longscope::ui::ModelSummary &summary);
    void loadFailed(const QString &path, const QString &message);
    // The backend in use changed (a switch took effect, or CUDA failed and the CPU took over).
    void backendChanged(const longscope::ui::ModelSummary &summary);

private:
    void onLoaded(const ModelSummary &summary);
    void onBackendChanged(const ModelSummary &summary);

    AppSettings *m_settings;
    QPointer<EngineWorker> m_worker;
    bool m_loaded = false;
    bool m_cancelled = false;
    ModelSummary m_summary;
};

} // namespace longscope::ui
