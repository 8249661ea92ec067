// A chat conversation as the app keeps it: the turns, the system prompt, the model it was
// held with, a snapshot of the settings and its plots; serialised to versioned JSON (what the store
// writes) and exported as readable Markdown.
#pragma once

#include "core/engine_worker.h"
#include "core/plot_history.h"

#include <QDateTime>
#include <QJsonObject>
#include <QString>
#include <QVector>

#include <optional>

namespace longscope::ui {

struct Message {
    enum class Role { User, Assistant, SystemNote };
    Role role = Role::User;
    QString text;
    QDateTime timestamp; // UTC
    int reasoningTokens = 0; // tokens streamed while the reply was thinking (not saved)
};

// "user", "assistant", "system_note" (the JSON spelling).
QString roleToString(Message::Role role);
std::optional<Message::Role> roleFromString(const QString &s);

class Conversation {
public:
    static constexpr int kFormatVersion = 1;
    static constexpr int kTitleLength = 60;

    // A new, empty conversation: a fresh id (QUuid without braces), created = updated = now.
    Conversation();

    QString id() const { return m_id; }
    void setId(const QString &id) { m_id = id; }

    // The explicit title when set, else the first user message trimmed to ~60 characters
    // (one line, an ellipsis when cut), else "New conversation".
    QString title() const;
    void setTitle(const QString &title) { m_title = title; }
    static QString titleFromText(const QString &text);

    QDateTime created() const { return m_created; }
    void setCreated(const QDateTime &t) { m_created = t; }
    QDateTime updated() const { return m_updated; }
    void setUpdated(const QDateTime &t) { m_updated = t; }
    void touch(); // updated = now

    QString systemPrompt() const { return m_system_prompt; }
    void setSystemPrompt(const QString &s) { m_system_prompt = s; }

    const QVector<Message> &messages() const { return m_messages; }
    void setMessages(const QVector<Message> &messages) { m_messages = messages; }
    // Appends a message stamped now (when `timestamp` is invalid) and touches the conversation.
    void appendMessage(Message::Role role, const QString &text, const QDateTime &timestamp = {});
    void appendMessage(const Message &message);
    // Appends to the last message's text (streaming); no-op when there is none.
    void appendToLast(const QString &text);
    void removeLastMessage();
    void clearMessages();
    bool isEmpty() const { return m_messages.isEmpty(); }

    QString modelPath() const { return m_model_path; }
    void setModelPath(const QString &p) { m_model_path = p; }

    QJsonObject settingsSnapshot() const { return m_settings; }
    void setSettingsSnapshot(const QJsonObject &s) { m_settings = s; }

    // The live plots of the conversation's last run, shown again when it is reopened.
    const PlotHistory &plotHistory() const { return m_plots; }
    void setPlotHistory(const PlotHistory &plots) { m_plots = plots; }

    // The user/assistant turns for a ChatRequest (system notes left out).
    QVector<ChatTurn> chatTurns() const;

    QJsonObject toJson() const;
    // Validates everything (version, id, types, roles, dates); nullopt with `error` set on
    // bad input. Never throws.
    static std::optional<Conversation> fromJson(const QJsonObject &json, QString *error = nullptr);
    // Parses bytes (a whole file); nullopt with `error` on malformed JSON or bad content.
    static std::optional<Conversation> fromJsonBytes(const QByteArray &bytes, QString *error = nullptr);
    QByteArray toJsonBytes() const; // indented

    // "# Title", dates and model, the system prompt, then "## User" / "## Assistant" /
    // "## Note" sections per message.
    QString toMarkdown() const;

    // Whether `id` is acceptable as a stored id (letters, digits, '-', '_'; 1..64 chars), so
    // it can name a file safely.
    static bool isValidId(const QString &id);

private:
    QString m_id;
    QString m_title;
    QDateTime m_created;
    QDateTime m_updated;
    QString m_system_prompt;
    QVector<Message> m_messages;
    QString m_model_path;
    QJsonObject m_settings;
    PlotHistory m_plots;
};

} // namespace longscope::ui
