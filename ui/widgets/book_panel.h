// The book that was opened (File > Open Book… or a dropped .txt): title, author, size in
// characters and tokens against the context limit, and the actions: stream it into the
// context (a progress bar with Cancel while it goes), then continue the text.
#pragma once

#include "core/book.h"

#include <QGroupBox>

class QLabel;
class QProgressBar;
class QPushButton;

namespace longscope::ui {

class BookPanel : public QGroupBox {
    Q_OBJECT

public:
    explicit BookPanel(QWidget *parent = nullptr);

    void setBook(const Book &book);
    const Book &book() const { return m_book; }
    bool hasBook() const { return !m_book.path.isEmpty(); }

    // The context the book would go into, and a rough chars-per-token ratio for the
    // estimate shown until the exact count is known.
    void setContext(int limit, int used, double charsPerToken);
    // The context was emptied or the model changed: nothing is streamed, the token count is
    // an estimate again.
    void resetContext();
    // The book's length in tokens as the loaded model's tokenizer counts it (else estimated).
    void setTextTokens(int tokens);
    int estimatedTokens() const;

    void setStreaming(bool streaming);
    void setProgress(int done, int total);
    // The stream ended: `tokensStreamed` of the book are in a context holding `inContext`.
    void setStreamed(int tokensStreamed, int inContext, bool stopped, bool truncated);
    void setActionsEnabled(bool enabled);

    QPushButton *streamButton() const { return m_stream; }
    QPushButton *continueButton() const { return m_continue; }
    QPushButton *cancelButton() const { return m_cancel; }
    QProgressBar *progressBar() const { return m_progress; }

signals:
    void streamRequested();
    void continueRequested();
    void cancelRequested();
    void closeRequested();

private:
    static QString notStreamedText();
    void updateFit();

    Book m_book;
    QLabel *m_title = nullptr;
    QLabel *m_author = nullptr;
    QLabel *m_size = nullptr;
    QLabel *m_fit = nullptr;
    QLabel *m_result = nullptr;
    QProgressBar *m_progress = nullptr;
    QPushButton *m_stream = nullptr;
    QPushButton *m_continue = nullptr;
    QPushButton *m_cancel = nullptr;
    QPushButton *m_close = nullptr;
    int m_limit = 0;
    int m_used = 0;
    double m_charsPerToken = 4.0;
    int m_exactTokens = -1; // known once the whole book was streamed
    bool m_streaming = false;
    bool m_enabled = true;
    bool m_streamed = false;
};

} // namespace longscope::ui
