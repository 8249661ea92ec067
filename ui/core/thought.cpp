#include "core/thought.h"

#include "longscope/chat.h"

namespace longscope::ui {

ThoughtSplit splitThought(const QString &reply)
{
    const QByteArray utf8 = reply.toUtf8();
    const qsizetype open = utf8.indexOf("<think>");
    const qsizetype close = utf8.indexOf("</think>");
    ReplyFormat format;
    format.reasoning = true;
    format.starts_in_reasoning = close >= 0 && (open < 0 || open > close);

    ReplySplitter splitter(format);
    splitter.feed(std::string_view(utf8.constData(), size_t(utf8.size())));
    ThoughtSplit out;
    out.thinking = splitter.in_reasoning();
    splitter.finish();
    out.reasoning = QString::fromStdString(splitter.reasoning());
    out.answer = QString::fromStdString(splitter.content());
    out.hasReasoning = out.thinking || !out.reasoning.isEmpty() || format.starts_in_reasoning ||
                       (open >= 0 && QString::fromUtf8(utf8.left(open)).trimmed().isEmpty());
    return out;
}

} // namespace longscope::ui
