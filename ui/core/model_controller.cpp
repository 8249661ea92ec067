#include "core/model_controller.h"

#include "core/app_settings.h"
#include "core/model_paths.h"

#include <QFileInfo>

namespace longscope::ui {

ModelController::ModelController(AppSettings *settings, QObject *parent) : QObject(parent), m_settings(settings)
{
    registerMetaTypes();
}

void ModelController::setWorker(EngineWorker *worker)
{
    if (m_worker)
        disconnect(m_worker, nullptr, this, nullptr);
    m_worker = worker;
    if (!worker)
        return;
    connect(worker, &EngineWorker::loadStarted, this, &ModelController::loadStarted);
    connect(worker, &EngineWorker::loadProgress, this, &ModelController::loadProgress);
    connect(worker, &EngineWorker::modelLoaded, this, &ModelController::onLoaded);
    connect(worker, &EngineWorker::loadFailed, this, &ModelController::loadFailed);
    connect(worker, &EngineWorker::backendChanged, this, &ModelController::onBackendChanged);
}

void ModelController::load(const QString &path)
{
    m_cancelled = false;
    if (m_worker)
        QMetaObject::invokeMethod(m_worker, [w = m_worker.data(), path] { w->loadModel(path); }, Qt::QueuedConnection);
}

void ModelController::cancel()
{
    m_cancelled = true;
    if (m_worker)
        m_worker->cancelLoad();
}

QString ModelController::fallbackFor(const QString &failedPath) const
{
    const QString bundled = bundledModelPath();
    if (m_loaded || bundled.isEmpty() || QFileInfo(failedPath) == QFileInfo(bundled))
        return {};
    return bundled;
}

void ModelController::onLoaded(const ModelSummary &summary)
{
    m_loaded = true;
    m_summary = summary;
    m_settings->addRecentModel(summary.path);
    m_settings->saveLastModel(summary.path);
    emit loaded(summary);
}

void ModelController::onBackendChanged(const ModelSummary &summary)
{
    m_summary.backend = summary.backend;
    m_summary.gpu_status = summary.gpu_status;
    m_summary.cuda_available = summary.cuda_available;
    m_summary.cpu_warning = summary.cpu_warning;
    emit backendChanged(summary);
}

} // namespace longscope::ui
