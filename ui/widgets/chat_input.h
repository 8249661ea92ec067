// The message box under the conversation: Enter sends, Shift+Enter starts a new line.
#pragma once

#include "widgets/plain_text_field.h"

namespace longscope::ui {

class ChatInput : public PlainTextField {
    Q_OBJECT

public:
    explicit ChatInput(QWidget *parent = nullptr);

    QSize sizeHint() const override;

signals:
    void sendRequested();
    // Local files dropped on the box (a book or a model), instead of their paths as text.
    void filesDropped(const QStringList &paths);

protected:
    void keyPressEvent(QKeyEvent *event) override;
    bool canInsertFromMimeData(const QMimeData *source) const override;
    void insertFromMimeData(const QMimeData *source) override;
};

} // namespace longscope::ui
