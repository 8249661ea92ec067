#include "core/conversation.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonParseError>
#include <QRegularExpression>
#include <QUuid>

#include <cmath>

namespace longscope::ui {

namespace {

// Limits on what a file may hold, so a hostile file cannot make the app choke.
constexpr int k_max_messages = 100000;
constexpr qsizetype k_max_text = 16 * 1024 * 1024;

QString isoDate(const QDateTime &t)
{
    return t.isValid() ? t.toUTC().toString(Qt::ISODateWithMs) : QString();
}

bool parseDate(const QJsonValue &v, QDateTime *out)
{
    if (!v.isString())
        return false;
    QDateTime t = QDateTime::fromString(v.toString(), Qt::ISODateWithMs);
    if (!t.isValid())
        t = QDateTime::fromString(v.toString(), Qt::ISODate);
    if (!t.isValid())
        return false;
    *out = t.toUTC();
    return true;
}

bool fail(QString *error, const QString &message)
{
    if (error)
        *error = message;
    return false;
}

QString markdownHeading(Message::Role role)
{
    switch (role) {
    case Message::Role::User: return QStringLiteral("User");
    case Message::Role::Assistant: return QStringLiteral("Assistant");
    case Message::Role::SystemNote: return QStringLiteral("Note");
    }
    return QString();
}

} // namespace

QString roleToString(Message::Role role)
{
    switch (role) {
    case Message::Role::User: return QStringLiteral("user");
    case Message::Role::Assistant: return QStringLiteral("assistant");
    case Message::Role::SystemNote: return QStringLiteral("system_note");
    }
    return QString();
}

std::optional<Message::Role> roleFromString(const QString &s)
{
    if (s == QLatin1String("user"))
        return Message::Role::User;
    if (s == QLatin1String("assistant"))
        return Message::Role::Assistant;
    if (s == QLatin1String("system_note"))
        return Message::Role::SystemNote;
    return std::nullopt;
}

Conversation::Conversation()
    : m_id(QUuid::createUuid().toString(QUuid::WithoutBraces)), m_created(QDateTime::currentDateTimeUtc()),
      m_updated(m_created)
{
}

QString Conversation::titleFromText(const QString &text)
{
    QString t = text.simplified(); // one line, single spaces
    if (t.size() <= kTitleLength)
        return t;
    t.truncate(kTitleLength);
    // Cut at a word boundary when one is reasonably close.
    const qsizetype space = t.lastIndexOf(QLatin1Char(' '));
    if (space > kTitleLength / 2)
        t.truncate(space);
    return t + QChar(0x2026);
}

QString Conversation::title() const
{
    if (!m_title.trimmed().isEmpty())
        return m_title.trimmed();
    for (const Message &m : m_messages) {
        if (m.role == Message::Role::User) {
            const QString t = titleFromText(m.text);
            if (!t.isEmpty())
                return t;
        }
    }
    return QStringLiteral("New conversation");
}

void Conversation::touch() { m_updated = QDateTime::currentDateTimeUtc(); }

void Conversation::appendMessage(Message::Role role, const QString &text, const QDateTime &timestamp)
{
    appendMessage(Message{role, text, timestamp});
}

void Conversation::appendMessage(const Message &message)
{
    Message m = message;
    if (!m.timestamp.isValid())
        m.timestamp = QDateTime::currentDateTimeUtc();
    m_messages.push_back(m);
    touch();
}

void Conversation::appendToLast(const QString &text)
{
    if (m_messages.isEmpty())
        return;
    m_messages.last().text += text;
    touch();
}

void Conversation::removeLastMessage()
{
    if (!m_messages.isEmpty()) {
        m_messages.removeLast();
        touch();
    }
}

void Conversation::clearMessages()
{
    m_messages.clear();
    touch();
}

QVector<ChatTurn> Conversation::chatTurns() const
{
    QVector<ChatTurn> turns;
    for (const Message &m : m_messages) {
        if (m.role == Message::Role::SystemNote)
            continue;
        turns.push_back({m.role == Message::Role::User ? ChatTurn::Role::User : ChatTurn::Role::Assistant, m.text});
    }
    return turns;
}

bool Conversation::isValidId(const QString &id)
{
    static const QRegularExpression re(QStringLiteral("^[A-Za-z0-9_-]{1,64}$"));
    return re.match(id).hasMatch();
}

QJsonObject Conversation::toJson() const
{
    QJsonObject o;
    o[QStringLiteral("version")] = kFormatVersion;
    o[QStringLiteral("id")] = m_id;
    if (!m_title.isEmpty())
        o[QStringLiteral("title")] = m_title;
    o[QStringLiteral("created")] = isoDate(m_created);
    o[QStringLiteral("updated")] = isoDate(m_updated);
    o[QStringLiteral("system_prompt")] = m_system_prompt;
    o[QStringLiteral("model_path")] = m_model_path;
    o[QStringLiteral("settings")] = m_settings;
    QJsonArray messages;
    for (const Message &m : m_messages) {
        QJsonObject mo;
        mo[QStringLiteral("role")] = roleToString(m.role);
        mo[QStringLiteral("text")] = m.text;
        mo[QStringLiteral("timestamp")] = isoDate(m.timestamp);
        messages.append(mo);
    }
    o[QStringLiteral("messages")] = messages;
    if (!m_plots.isEmpty())
        o[QStringLiteral("plots")] = m_plots.toJson();
    return o;
}

QByteArray Conversation::toJsonBytes() const
{
    return QJsonDocument(toJson()).toJson(QJsonDocument::Indented);
}

std::optional<Conversation> Conversation::fromJson(const QJsonObject &json, QString *error)
{
    auto bad = [&](const QString &msg) -> std::optional<Conversation> {
        fail(error, msg);
        return std::nullopt;
    };
    const QJsonValue version = json.value(QStringLiteral("version"));
    if (!version.isDouble())
        return bad(QStringLiteral("no format version"));
    const double v = version.toDouble(); // compared as a double: int(v) is undefined out of range
    if (!(v >= 1 && v <= kFormatVersion) || v != std::floor(v))
        return bad(QStringLiteral("unsupported format version %1").arg(v));

    Conversation c;
    const QJsonValue id = json.value(QStringLiteral("id"));
    if (!id.isString() || !isValidId(id.toString()))
        return bad(QStringLiteral("missing or invalid id"));
    c.m_id = id.toString();

    const QJsonValue title = json.value(QStringLiteral("title"));
    if (!title.isUndefined() && !title.isNull()) {
        if (!title.isString() || title.toString().size() > 4096)
            return bad(QStringLiteral("invalid title"));
        c.m_title = title.toString();
    }
    if (!parseDate(json.value(QStringLiteral("created")), &c.m_created))
        return bad(QStringLiteral("missing or invalid creation date"));
    if (!parseDate(json.value(QStringLiteral("updated")), &c.m_updated))
        return bad(QStringLiteral("missing or invalid update date"));

    auto optionalString = [&](const char *key, QString *out) {
        const QJsonValue val = json.value(QLatin1String(key));
        if (val.isUndefined() || val.isNull())
            return true;
        if (!val.isString() || val.toString().size() > k_max_text)
            return false;
        *out = val.toString();
        return true;
    };
    if (!optionalString("system_prompt", &c.m_system_prompt))
        return bad(QStringLiteral("invalid system prompt"));
    if (!optionalString("model_path", &c.m_model_path))
        return bad(QStringLiteral("invalid model path"));

    const QJsonValue settings = json.value(QStringLiteral("settings"));
    if (!settings.isUndefined() && !settings.isNull()) {
        if (!settings.isObject())
            return bad(QStringLiteral("invalid settings snapshot"));
        c.m_settings = settings.toObject();
    }

    const QJsonValue messages = json.value(QStringLiteral("messages"));
    if (!messages.isArray())
        return bad(QStringLiteral("missing message list"));
    const QJsonArray arr = messages.toArray();
    if (arr.size() > k_max_messages)
        return bad(QStringLiteral("too many messages (%1)").arg(arr.size()));
    c.m_messages.reserve(arr.size());
    for (qsizetype i = 0; i < arr.size(); ++i) {
        if (!arr[i].isObject())
            return bad(QStringLiteral("message %1 is not an object").arg(i + 1));
        const QJsonObject mo = arr[i].toObject();
        const QJsonValue role = mo.value(QStringLiteral("role"));
        const std::optional<Message::Role> r = role.isString() ? roleFromString(role.toString()) : std::nullopt;
        if (!r)
            return bad(QStringLiteral("message %1 has an unknown role").arg(i + 1));
        const QJsonValue text = mo.value(QStringLiteral("text"));
        if (!text.isString() || text.toString().size() > k_max_text)
            return bad(QStringLiteral("message %1 has no valid text").arg(i + 1));
        Message m;
        m.role = *r;
        m.text = text.toString();
        const QJsonValue ts = mo.value(QStringLiteral("timestamp"));
        if (!ts.isUndefined() && !ts.isNull() && !(ts.isString() && ts.toString().isEmpty()) &&
            !parseDate(ts, &m.timestamp))
            return bad(QStringLiteral("message %1 has an invalid timestamp").arg(i + 1));
        c.m_messages.push_back(m);
    }
    const QJsonValue plots = json.value(QStringLiteral("plots"));
    if (!plots.isUndefined() && !plots.isNull()) {
        QString why;
        std::optional<PlotHistory> h = plots.isObject() ? PlotHistory::fromJson(plots.toObject(), &why) : std::nullopt;
        if (!h)
            return bad(why.isEmpty() ? QStringLiteral("plots: not an object") : why);
        c.m_plots = std::move(*h);
    }
    if (error)
        error->clear();
    return c;
}

std::optional<Conversation> Conversation::fromJsonBytes(const QByteArray &bytes, QString *error)
{
    QJsonParseError pe;
    const QJsonDocument doc = QJsonDocument::fromJson(bytes, &pe);
    if (pe.error != QJsonParseError::NoError) {
        fail(error, QStringLiteral("malformed JSON at offset %1: %2").arg(pe.offset).arg(pe.errorString()));
        return std::nullopt;
    }
    if (!doc.isObject()) {
        fail(error, QStringLiteral("not a JSON object"));
        return std::nullopt;
    }
    return fromJson(doc.object(), error);
}

QString Conversation::toMarkdown() const
{
    QString md;
    md += QStringLiteral("# %1\n\n").arg(title());
    md += QStringLiteral("- Created: %1\n").arg(isoDate(m_created));
    md += QStringLiteral("- Updated: %1\n").arg(isoDate(m_updated));
    if (!m_model_path.isEmpty())
        md += QStringLiteral("- Model: `%1`\n").arg(m_model_path);
    md += QLatin1Char('\n');
    if (!m_system_prompt.trimmed().isEmpty()) {
        md += QStringLiteral("## System prompt\n\n");
        // Quoted, so Markdown in the prompt does not restructure the document.
        const QStringList lines = m_system_prompt.trimmed().split(QLatin1Char('\n'));
        for (const QString &line : lines)
            md += (line.isEmpty() ? QStringLiteral(">") : QStringLiteral("> ") + line) + QLatin1Char('\n');
        md += QLatin1Char('\n');
    }
    for (const Message &m : m_messages) {
        md += QStringLiteral("## %1\n\n").arg(markdownHeading(m.role));
        md += m.text.trimmed() + QStringLiteral("\n\n");
    }
    return md;
}

} // namespace longscope::ui
