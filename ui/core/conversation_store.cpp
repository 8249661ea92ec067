#include "core/conversation_store.h"

#include "core/read_file.h"
#include "core/store_files.h"

#include <QDir>
#include <QFileInfo>
#include <QSaveFile>
#include <QStandardPaths>

#include <algorithm>

namespace longscope::ui {

namespace {

// A conversation file larger than this is not read (a hostile or runaway file).
constexpr qint64 k_max_file_bytes = 256LL * 1024 * 1024;

void setError(QString *error, const QString &message) { setStoreError(error, message); }

const QString k_suffix = QStringLiteral(".json");

} // namespace

ConversationStore::ConversationStore(const QString &dir, QObject *parent)
    : QObject(parent), m_dir(dir.isEmpty() ? defaultDirectory() : dir)
{
    QDir().mkpath(m_dir);
}

QString ConversationStore::defaultDirectory()
{
    return QStandardPaths::writableLocation(QStandardPaths::AppDataLocation) + QStringLiteral("/conversations");
}

QString ConversationStore::filePath(const QString &id) const
{
    return QDir(m_dir).filePath(id + k_suffix);
}

bool ConversationStore::contains(const QString &id) const
{
    return Conversation::isValidId(id) && QFileInfo(filePath(id)).isFile();
}

static std::optional<Conversation> readConversationFile(const QString &path, QString *error)
{
    const std::optional<QByteArray> bytes = readRegularFile(path, k_max_file_bytes, error);
    if (!bytes)
        return std::nullopt;
    QString why;
    std::optional<Conversation> c = Conversation::fromJsonBytes(*bytes, &why);
    if (!c) {
        setError(error, QStringLiteral("%1: %2").arg(path, why));
        return std::nullopt;
    }
    // The file name is the id: a file claiming another id is rejected, so that saving or
    // removing by id always touches this very file.
    if (QFileInfo(path).fileName() != c->id() + k_suffix) {
        setError(error, QStringLiteral("%1: its id \"%2\" does not match the file name").arg(path, c->id()));
        return std::nullopt;
    }
    return c;
}

QVector<ConversationInfo> ConversationStore::list()
{
    m_errors.clear();
    QVector<ConversationInfo> out;
    const QDir dir(m_dir);
    const QFileInfoList files =
        dir.entryInfoList(QStringList{QStringLiteral("*.json")}, QDir::Files | QDir::Readable | QDir::Hidden, QDir::Name);
    for (const QFileInfo &fi : files) {
        if (!Conversation::isValidId(fi.completeBaseName())) {
            m_errors << QStringLiteral("%1: not a conversation file name").arg(fi.filePath());
            continue;
        }
        QString error;
        const std::optional<Conversation> c = readConversationFile(fi.filePath(), &error);
        if (!c) {
            m_errors << error;
            continue;
        }
        out.push_back({c->id(), c->title(), c->created(), c->updated(), int(c->messages().size())});
    }
    std::stable_sort(out.begin(), out.end(), [](const ConversationInfo &a, const ConversationInfo &b) {
        if (a.updated != b.updated)
            return a.updated > b.updated;
        return a.id < b.id;
    });
    return out;
}

std::optional<Conversation> ConversationStore::load(const QString &id, QString *error)
{
    m_errors.clear();
    if (!Conversation::isValidId(id)) {
        const QString msg = QStringLiteral("invalid conversation id \"%1\"").arg(id);
        m_errors << msg;
        setError(error, msg);
        return std::nullopt;
    }
    QString why;
    std::optional<Conversation> c = readConversationFile(filePath(id), &why);
    if (!c) {
        m_errors << why;
        setError(error, why);
    }
    return c;
}

bool ConversationStore::writeFileAtomically(const QString &path, const QByteArray &bytes, QString *error)
{
    return longscope::ui::writeFileAtomically(path, bytes, error);
}

bool ConversationStore::save(const Conversation &conversation, QString *error)
{
    m_errors.clear();
    if (!Conversation::isValidId(conversation.id())) {
        const QString msg = QStringLiteral("invalid conversation id \"%1\"").arg(conversation.id());
        m_errors << msg;
        setError(error, msg);
        return false;
    }
    QDir().mkpath(m_dir);
    QString why;
    if (!writeFileAtomically(filePath(conversation.id()), conversation.toJsonBytes(), &why)) {
        m_errors << why;
        setError(error, why);
        return false;
    }
    emit conversationSaved(conversation.id());
    return true;
}

bool ConversationStore::remove(const QString &id, QString *error)
{
    m_errors.clear();
    const QString msg = removeStoredFile(filePath(id), Conversation::isValidId(id), QStringLiteral("conversation"), id);
    if (!msg.isEmpty()) {
        m_errors << msg;
        setError(error, msg);
        return false;
    }
    emit conversationRemoved(id);
    return true;
}

bool ConversationStore::exportMarkdown(const Conversation &c, const QString &path, QString *error)
{
    return writeFileAtomically(path, c.toMarkdown().toUtf8(), error);
}

bool ConversationStore::exportJson(const Conversation &c, const QString &path, QString *error)
{
    return writeFileAtomically(path, c.toJsonBytes(), error);
}

bool ConversationStore::exportMarkdown(const QString &id, const QString &path, QString *error)
{
    const std::optional<Conversation> c = load(id, error);
    return c && exportMarkdown(*c, path, error);
}

bool ConversationStore::exportJson(const QString &id, const QString &path, QString *error)
{
    const std::optional<Conversation> c = load(id, error);
    return c && exportJson(*c, path, error);
}

} // namespace longscope::ui
