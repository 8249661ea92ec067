// An EngineWorker (2 threads) living on a QThread of its own, as the app runs it: stopped,
// its thread quit and joined, and deleted cleanly when this goes; a model loaded on it.
#pragma once

#include "core/engine_worker.h"

#include <QObject>
#include <QTest>
#include <QThread>

namespace longscope::test {

struct ThreadedWorker {
    QThread thread;
    ui::EngineWorker *worker = nullptr;

    ThreadedWorker()
    {
        worker = new ui::EngineWorker(2);
        worker->moveToThread(&thread);
        thread.start();
    }
    ~ThreadedWorker()
    {
        worker->requestStop();
        thread.quit();
        thread.wait();
        delete worker;
    }

    // Loads `path` on the worker's thread and waits up to timeoutMs for modelLoaded, received
    // here (queued), so a load that ends before the wait starts is not missed.
    bool loadModel(const QString &path, int timeoutMs)
    {
        QObject receiver;
        bool loaded = false;
        QObject::connect(worker, &ui::EngineWorker::modelLoaded, &receiver, [&loaded] { loaded = true; });
        QMetaObject::invokeMethod(worker, [w = worker, path] { w->loadModel(path); }, Qt::QueuedConnection);
        return QTest::qWaitFor([&loaded] { return loaded; }, timeoutMs);
    }
};

} // namespace longscope::test
