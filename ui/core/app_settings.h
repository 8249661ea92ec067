// The app's persistent settings over QSettings: generation parameters, long-context
// settings, the system prompt, recent and last models, window geometry and state.
#pragma once

#include "core/engine_worker.h"
#include "longscope/settings.h"

#include <QByteArray>
#include <QSettings>
#include <QString>
#include <QStringList>

#include <memory>

namespace longscope::ui {

class AppSettings {
public:
    static constexpr int kMaxRecentModels = 8;

    AppSettings();                             // the application's QSettings
    explicit AppSettings(QSettings *settings); // not owned (tests: an ini file)
    ~AppSettings();
    AppSettings(const AppSettings &) = delete;
    AppSettings &operator=(const AppSettings &) = delete;

    QSettings *settings() const { return m_settings; }
    void sync();

    GenerationParams loadGenerationParams() const;
    void saveGenerationParams(const GenerationParams &p);

    // Values out of range on disk fall back to the defaults (validate() never throws on
    // what this returns).
    longscope::Settings loadEngineSettings() const;
    void saveEngineSettings(const longscope::Settings &s);

    QString loadSystemPrompt() const;
    void saveSystemPrompt(const QString &prompt);

    // Most recent first, at most kMaxRecentModels, no duplicates; paths that no longer exist
    // are left out.
    QStringList loadRecentModels() const;
    void saveRecentModels(const QStringList &paths);
    // Puts `path` first (moving it if present) and caps the list.
    void addRecentModel(const QString &path);

    QString loadLastModel() const;
    void saveLastModel(const QString &path);

    QByteArray loadWindowGeometry() const;
    void saveWindowGeometry(const QByteArray &geometry);
    QByteArray loadWindowState() const;
    void saveWindowState(const QByteArray &state);

private:
    std::unique_ptr<QSettings> m_owned;
    QSettings *m_settings = nullptr;
};

} // namespace longscope::ui
