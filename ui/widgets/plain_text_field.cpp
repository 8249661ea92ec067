#include "widgets/plain_text_field.h"

#include <QMimeData>

namespace longscope::ui {

bool hasLongUnbrokenRun(QStringView text)
{
    qsizetype run = 0;
    for (const QChar c : text) {
        run = c.isSpace() ? 0 : run + 1;
        if (run > kLongestWrappedRun)
            return true;
    }
    return false;
}

PlainTextField::PlainTextField(QWidget *parent) : QPlainTextEdit(parent) {}

void PlainTextField::setText(const QString &text)
{
    setWordWrapMode(hasLongUnbrokenRun(text) ? QTextOption::WrapAnywhere : QTextOption::WrapAtWordBoundaryOrAnywhere);
    setPlainText(text);
}

void PlainTextField::insertFromMimeData(const QMimeData *source)
{
    if (source->hasText() && hasLongUnbrokenRun(source->text()))
        setWordWrapMode(QTextOption::WrapAnywhere);
    QPlainTextEdit::insertFromMimeData(source);
}

} // namespace longscope::ui
