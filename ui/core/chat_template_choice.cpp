#include "core/chat_template_choice.h"

#include <QCryptographicHash>
#include <QSettings>

namespace longscope::ui {

namespace {

// One group per model: the path's hash keeps any path a valid key; the path itself is stored
// too, so that a hash collision cannot hand one model another's template.
QString groupOf(const QString &modelPath)
{
    return QStringLiteral("chatTemplates/") +
           QString::fromLatin1(QCryptographicHash::hash(modelPath.toUtf8(), QCryptographicHash::Sha1).toHex());
}

} // namespace

ChatTemplateChoice loadChatTemplateChoice(const QSettings &settings, const QString &modelPath)
{
    const QString g = groupOf(modelPath) + QLatin1Char('/');
    ChatTemplateChoice c;
    if (settings.value(g + QStringLiteral("path")).toString() != modelPath)
        return c;
    const QString kind = settings.value(g + QStringLiteral("kind")).toString();
    if (kind == QLatin1String("builtin")) {
        c.builtin = settings.value(g + QStringLiteral("format")).toString();
        if (!c.builtin.isEmpty())
            c.kind = ChatTemplateChoice::Kind::Builtin;
    } else if (kind == QLatin1String("custom")) {
        c.custom = settings.value(g + QStringLiteral("template")).toString();
        if (!c.custom.isEmpty())
            c.kind = ChatTemplateChoice::Kind::Custom;
    }
    return c;
}

void saveChatTemplateChoice(QSettings &settings, const QString &modelPath, const ChatTemplateChoice &choice)
{
    const QString g = groupOf(modelPath);
    settings.remove(g);
    if (choice.kind == ChatTemplateChoice::Kind::Model)
        return;
    settings.beginGroup(g);
    settings.setValue(QStringLiteral("path"), modelPath);
    if (choice.kind == ChatTemplateChoice::Kind::Builtin) {
        settings.setValue(QStringLiteral("kind"), QStringLiteral("builtin"));
        settings.setValue(QStringLiteral("format"), choice.builtin);
    } else {
        settings.setValue(QStringLiteral("kind"), QStringLiteral("custom"));
        settings.setValue(QStringLiteral("template"), choice.custom);
    }
    settings.endGroup();
}

} // namespace longscope::ui
