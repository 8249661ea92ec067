// The app's persistent settings over QSettings: generation parameters, long-context
// settings, the system prompt, recent and last models, window geometry and state.
//
// Nothing is lost silently: a value on disk that is not valid is reported (problems(): which
// key, what value, what default is used instead), and before the first write of a run the file
// as it was is copied to FILE.bak, since the window's saves at exit rewrite the whole file.
// The settings file is read only if it is a regular file no larger than kMaxFileBytes.
#pragma once

#include "core/engine_worker.h"
#include "core/remote_endpoint.h"
#include "longscope/settings.h"

#include <QByteArray>
#include <QJsonObject>
#include <QSettings>
#include <QString>
#include <QStringList>
#include <QTemporaryDir>

#include <memory>
#include <optional>

namespace longscope::ui {

class AppSettings {
public:
    static constexpr int kMaxRecentModels = 8;
    static constexpr qint64 kMaxFileBytes = 64LL * 1024 * 1024;
    // A longer system prompt on disk is cut to this many characters (and reported).
    static constexpr qsizetype kMaxSystemPromptChars = 1 << 20;

    // The application's settings file (defaultFilePath()). One that is not a regular file or
    // is too large is neither read nor written: the settings live in memory for this run.
    AppSettings();
    explicit AppSettings(QSettings *settings); // not owned (tests: an ini file)
    ~AppSettings();
    AppSettings(const AppSettings &) = delete;
    AppSettings &operator=(const AppSettings &) = delete;

    // Where QSettings keeps this application's settings.
    static QString defaultFilePath();

    QSettings *settings() const { return m_settings; }
    void sync();

    // What loading found wrong, one line each, in the order found ("generation/topP: "7" is
    // not valid; the default 0.95 is used"), and a settings file that could not be read or
    // backed up.
    QStringList problems() const { return m_problems; }
    // Empty when changes reach the settings file; else why they cannot (one line).
    QString unwritableReason() const;

    GenerationParams loadGenerationParams() const;
    void saveGenerationParams(const GenerationParams &p);

    // Values out of range on disk fall back to the defaults (validate() never throws on
    // what this returns).
    longscope::Settings loadEngineSettings() const;
    // The engine's defaults with the app's overflow policy (drop the oldest turns, keep a
    // book's head and tail): what loadEngineSettings() gives for a fresh file.
    static longscope::Settings defaultEngineSettings();
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

    // The remote servers used, most recent first (URL and model; their keys are in the
    // keychain, never here). Adding one already listed moves it first.
    QVector<RemoteEndpoint> loadRemoteEndpoints() const;
    void addRemoteEndpoint(const RemoteEndpoint &endpoint);

    QByteArray loadWindowGeometry() const;
    void saveWindowGeometry(const QByteArray &geometry);
    QByteArray loadWindowState() const;
    void saveWindowState(const QByteArray &state);
    // A splitter's sizes by name ("chatColumns", "chatRows"); empty when none was saved.
    QByteArray loadSplitterState(const QString &name) const;
    void saveSplitterState(const QString &name, const QByteArray &state);
    // Whether a collapsible part of the window ("sidePanel", "plots") is shown.
    bool loadPanelShown(const QString &name, bool fallback = true) const;
    void savePanelShown(const QString &name, bool shown);

private:
    void report(const QString &problem) const;
    // Before the first write: the file as it was to FILE.bak. False (reported) when the copy
    // failed: nothing is written then.
    bool backUpOnce();
    void readOriginal(const QString &path);
    template <typename T, typename Parse>
    T checked(const QString &key, T fallback, const QString &fallbackText, Parse parse) const;
    longscope::Settings validFields(const QString &key, const QJsonObject &json) const;

    std::unique_ptr<QTemporaryDir> m_scratch; // the in-memory stand-in for an unusable file
    std::unique_ptr<QSettings> m_owned;
    QSettings *m_settings = nullptr;
    std::optional<QByteArray> m_original; // the file's bytes when opened; nullopt: no file
    QString m_unusable;                   // why the file is neither read nor written
    bool m_backupTried = false;
    bool m_backupFailed = false;
    mutable QStringList m_problems;
};

} // namespace longscope::ui
