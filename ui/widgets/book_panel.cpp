#include "widgets/book_panel.h"

#include <QFileInfo>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QProgressBar>
#include <QPushButton>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>

namespace longscope::ui {

namespace {

QLabel *wrapped(QWidget *parent)
{
    auto *l = new QLabel(parent);
    l->setWordWrap(true);
    l->setTextInteractionFlags(Qt::TextSelectableByMouse);
    return l;
}

} // namespace

BookPanel::BookPanel(QWidget *parent) : QGroupBox(tr("Book"), parent)
{
    m_title = wrapped(this);
    QFont tf = m_title->font();
    tf.setBold(true);
    tf.setPointSizeF(tf.pointSizeF() * 1.1);
    m_title->setFont(tf);
    m_author = wrapped(this);
    m_size = wrapped(this);
    m_fit = wrapped(this);
    m_result = wrapped(this);

    m_progress = new QProgressBar(this);
    m_progress->setTextVisible(true);
    m_progress->hide();
    m_cancel = new QPushButton(tr("Cancel"), this);
    m_cancel->hide();
    // The progress row keeps its room when hidden: the buttons under it stay where the
    // pointer is when streaming starts and ends.
    for (QWidget *w : {static_cast<QWidget *>(m_progress), static_cast<QWidget *>(m_cancel)}) {
        QSizePolicy p = w->sizePolicy();
        p.setRetainSizeWhenHidden(true);
        w->setSizePolicy(p);
    }

    m_stream = new QPushButton(tr("Stream into context"), this);
    m_stream->setToolTip(tr("Append the book to the context chunk by chunk; the plots follow"));
    m_continue = new QPushButton(tr("Continue"), this);
    m_continue->setToolTip(tr("Let the model continue the text in the context"));
    m_continue->setEnabled(false);
    m_close = new QPushButton(tr("Close"), this);
    m_close->setToolTip(tr("Forget this book (the context keeps what was streamed)"));

    auto *progressRow = new QHBoxLayout;
    progressRow->addWidget(m_progress, 1);
    progressRow->addWidget(m_cancel);
    auto *buttons = new QHBoxLayout;
    buttons->addWidget(m_stream);
    buttons->addWidget(m_continue);
    buttons->addStretch(1);
    buttons->addWidget(m_close);

    auto *v = new QVBoxLayout(this);
    v->setSpacing(4);
    v->addWidget(m_title);
    v->addWidget(m_author);
    v->addWidget(m_size);
    v->addWidget(m_fit);
    v->addLayout(progressRow);
    v->addWidget(m_result);
    v->addSpacing(4);
    v->addLayout(buttons);

    connect(m_stream, &QPushButton::clicked, this, &BookPanel::streamRequested);
    connect(m_continue, &QPushButton::clicked, this, &BookPanel::continueRequested);
    connect(m_cancel, &QPushButton::clicked, this, &BookPanel::cancelRequested);
    connect(m_close, &QPushButton::clicked, this, &BookPanel::closeRequested);
}

void BookPanel::setBook(const Book &book)
{
    m_book = book;
    m_exactTokens = -1;
    m_streamed = false;
    m_title->setText(book.title.isEmpty() ? QFileInfo(book.path).fileName() : book.title);
    m_author->setText(book.author.isEmpty() ? QString() : tr("by %1").arg(book.author));
    m_author->setVisible(!book.author.isEmpty());
    m_result->setText(notStreamedText());
    m_progress->hide();
    m_continue->setEnabled(false);
    setToolTip(book.path + (book.stripped ? tr("\nProject Gutenberg header and footer removed") : QString()));
    updateFit();
}

void BookPanel::setContext(int limit, int used, double charsPerToken)
{
    m_limit = limit;
    m_used = used;
    m_charsPerToken = charsPerToken > 0 ? charsPerToken : 4.0;
    updateFit();
}

int BookPanel::estimatedTokens() const
{
    if (m_exactTokens >= 0)
        return m_exactTokens;
    return int(std::ceil(double(m_book.text.size()) / m_charsPerToken));
}

void BookPanel::updateFit()
{
    const qsizetype chars = m_book.text.size();
    const QString tokens = m_exactTokens >= 0 ? tr("%L1 tokens").arg(m_exactTokens)
                                              : tr("about %L1 tokens (estimated)").arg(estimatedTokens());
    m_size->setText(tr("%L1 characters, %2").arg(chars).arg(tokens));
    if (m_limit <= 0) {
        m_fit->setText(tr("Load a model to see how it fits."));
        return;
    }
    const int room = std::max(0, m_limit - m_used);
    const int need = estimatedTokens();
    QString text = tr("The context has %L1 of its %L2 tokens free.").arg(room).arg(m_limit);
    if (need > room) {
        const double times = room > 0 ? double(need) / room : 0;
        text += QLatin1Char(' ') +
                (room > 0 ? tr("The book needs about %1 times that: its head and tail are streamed, the middle left "
                               "out (raise the context limit to keep more).")
                                .arg(times, 0, 'f', times < 10 ? 1 : 0)
                          : tr("No room: clear the conversation or raise the limit."));
    } else {
        text += QLatin1Char(' ') + tr("The book fits.");
    }
    m_fit->setText(text);
}

void BookPanel::setTextTokens(int tokens)
{
    m_exactTokens = tokens;
    updateFit();
}

QString BookPanel::notStreamedText()
{
    return tr("Not in the context yet: Stream into context to chat about it.");
}

void BookPanel::resetContext()
{
    // A new model reads the book with other tokens, a new conversation holds none of it.
    m_exactTokens = -1;
    m_streamed = false;
    m_used = 0;
    m_result->setText(notStreamedText());
    setActionsEnabled(m_enabled);
    updateFit();
}

void BookPanel::setStreaming(bool streaming)
{
    m_streaming = streaming;
    m_progress->setVisible(streaming);
    m_cancel->setVisible(streaming);
    m_cancel->setEnabled(streaming);
    if (streaming) {
        m_progress->setRange(0, 0); // busy until the first progress report
        m_result->setText(tr("Streaming…"));
    }
    setActionsEnabled(m_enabled);
}

void BookPanel::setProgress(int done, int total)
{
    m_progress->setRange(0, std::max(1, total));
    m_progress->setValue(std::clamp(done, 0, std::max(1, total)));
    m_progress->setFormat(tr("%L1 / %L2 tokens").arg(done).arg(total));
}

void BookPanel::setStreamed(int tokensStreamed, int inContext, bool stopped, bool truncated)
{
    m_streamed = !stopped || tokensStreamed > 0;
    QString text;
    if (stopped)
        text = tr("Stopped after %L1 tokens; the context holds %L2.").arg(tokensStreamed).arg(inContext);
    else if (truncated)
        text = tr("Streamed its head and tail, %L1 of its %L2 tokens; the context holds %L3. Chat about it or press "
                  "Continue.")
                   .arg(tokensStreamed)
                   .arg(estimatedTokens())
                   .arg(inContext);
    else
        text = tr("Streamed %L1 tokens; the context holds %L2. Chat about it or press Continue.")
                   .arg(tokensStreamed)
                   .arg(inContext);
    m_result->setText(text);
    setActionsEnabled(m_enabled);
}

void BookPanel::setActionsEnabled(bool enabled)
{
    m_enabled = enabled;
    m_stream->setEnabled(enabled && !m_streaming && hasBook());
    m_continue->setEnabled(enabled && !m_streaming && m_streamed);
    m_close->setEnabled(!m_streaming);
}

} // namespace longscope::ui
