#include "widgets/chat_input.h"

#include <QKeyEvent>
#include <QMimeData>
#include <QUrl>

namespace longscope::ui {

ChatInput::ChatInput(QWidget *parent) : PlainTextField(parent)
{
    setPlaceholderText(tr("Type a message — Enter sends, Shift+Enter starts a new line"));
    setTabChangesFocus(true);
    setAccessibleName(tr("Message"));
}

QSize ChatInput::sizeHint() const
{
    const QSize base = QPlainTextEdit::sizeHint();
    const int lines = 4;
    const int h = fontMetrics().lineSpacing() * lines + 2 * (frameWidth() + 4);
    return {base.width(), h};
}

void ChatInput::keyPressEvent(QKeyEvent *event)
{
    const bool enter = event->key() == Qt::Key_Return || event->key() == Qt::Key_Enter;
    // Shift+Enter (and Ctrl+Enter for those used to it elsewhere) keeps its editing meaning.
    if (enter && !(event->modifiers() & (Qt::ShiftModifier | Qt::ControlModifier))) {
        event->accept();
        emit sendRequested();
        return;
    }
    if (enter && (event->modifiers() & Qt::ShiftModifier)) {
        insertPlainText(QStringLiteral("\n"));
        event->accept();
        return;
    }
    QPlainTextEdit::keyPressEvent(event);
}

bool ChatInput::canInsertFromMimeData(const QMimeData *source) const
{
    return source->hasUrls() || QPlainTextEdit::canInsertFromMimeData(source);
}

void ChatInput::insertFromMimeData(const QMimeData *source)
{
    QStringList paths;
    if (source->hasUrls()) {
        for (const QUrl &url : source->urls()) {
            if (url.isLocalFile())
                paths.append(url.toLocalFile());
        }
    }
    if (!paths.isEmpty()) {
        emit filesDropped(paths);
        return;
    }
    PlainTextField::insertFromMimeData(source);
}

} // namespace longscope::ui
