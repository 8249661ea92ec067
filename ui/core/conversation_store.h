// Conversations on disk: one "<id>.json" per conversation in a directory, each written
// atomically with QSaveFile (a crash mid-write keeps the old file). Corrupt or hostile files
// are skipped and reported through lastErrors(), never fatal.
#pragma once

#include "core/conversation.h"

#include <QDateTime>
#include <QObject>
#include <QString>
#include <QStringList>
#include <QVector>

#include <optional>

namespace longscope::ui {

// What the conversation list shows, without holding every message.
struct ConversationInfo {
    QString id;
    QString title;
    QDateTime created;
    QDateTime updated;
    int message_count = 0;
};

class ConversationStore : public QObject {
    Q_OBJECT

public:
    // `dir` is created when missing. Empty: defaultDirectory().
    explicit ConversationStore(const QString &dir = QString(), QObject *parent = nullptr);

    // QStandardPaths::AppDataLocation + "/conversations".
    static QString defaultDirectory();
    QString directory() const { return m_dir; }
    QString filePath(const QString &id) const;

    // Every readable conversation, most recently updated first. Unreadable files are
    // skipped; lastErrors() then names them.
    QVector<ConversationInfo> list();
    std::optional<Conversation> load(const QString &id, QString *error = nullptr);
    bool save(const Conversation &conversation, QString *error = nullptr);
    bool remove(const QString &id, QString *error = nullptr);
    bool contains(const QString &id) const;

    bool exportMarkdown(const QString &id, const QString &path, QString *error = nullptr);
    bool exportJson(const QString &id, const QString &path, QString *error = nullptr);
    // Exports a conversation held in memory (for one not saved yet).
    static bool exportMarkdown(const Conversation &c, const QString &path, QString *error = nullptr);
    static bool exportJson(const Conversation &c, const QString &path, QString *error = nullptr);

    // Errors of the last list() / load() / save() / remove() call, one line each.
    QStringList lastErrors() const { return m_errors; }

    // Atomic write (QSaveFile: write then commit).
    static bool writeFileAtomically(const QString &path, const QByteArray &bytes, QString *error = nullptr);

signals:
    void conversationSaved(const QString &id);
    void conversationRemoved(const QString &id);

private:
    QString m_dir;
    QStringList m_errors;
};

} // namespace longscope::ui
