#include "widgets/thought_block.h"

#include <QCoreApplication>
#include <QTextBlockFormat>
#include <QTextCharFormat>
#include <QTextCursor>

namespace longscope::ui {

namespace {
const QString k_scheme = QStringLiteral("thought");

QString tr(const char *text, int n = -1) { return QCoreApplication::translate("ChatView", text, nullptr, n); }
} // namespace

QString thoughtLabel(const ThoughtSplit &thought, int tokens, bool expanded)
{
    if (thought.thinking)
        return tokens > 0 ? tr("Thinking… (%n tokens)", tokens) : tr("Thinking…");
    const QString arrow = expanded ? QStringLiteral("▾ ") : QStringLiteral("▸ ");
    return arrow + (tokens > 0 ? tr("Thought for %n tokens", tokens) : tr("Thought"));
}

void insertThought(QTextCursor &cursor, int row, const ThoughtSplit &thought, int tokens, bool expanded,
                   const QTextCharFormat &base, const QColor &muted)
{
    QTextCharFormat label = base;
    label.setForeground(muted);
    if (!thought.thinking) {
        label.setAnchor(true);
        label.setAnchorHref(thoughtLink(row).toString());
        label.setFontUnderline(false);
    }
    QTextBlockFormat labelBlock;
    labelBlock.setTopMargin(2);
    cursor.insertBlock(labelBlock, label);
    cursor.insertText(thoughtLabel(thought, tokens, expanded), label);
    if (!thought.thinking && !expanded)
        return;

    QTextCharFormat reasoning = base;
    reasoning.setForeground(muted);
    reasoning.setFontItalic(true);
    QTextBlockFormat indented;
    indented.setLeftMargin(12);
    for (const QString &line : thought.reasoning.split(QLatin1Char('\n'))) {
        cursor.insertBlock(indented, reasoning);
        cursor.insertText(line, reasoning);
    }
}

QUrl thoughtLink(int row) { return QUrl(k_scheme + QLatin1Char(':') + QString::number(row)); }

std::optional<int> thoughtRow(const QUrl &link)
{
    if (link.scheme() != k_scheme)
        return std::nullopt;
    bool ok = false;
    const int row = link.path().toInt(&ok);
    return ok && row >= 0 ? std::optional<int>(row) : std::nullopt;
}

} // namespace longscope::ui
