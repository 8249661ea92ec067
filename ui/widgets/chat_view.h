// The conversation view: a read-only rich-text view of a ChatModel. Each message is a
// coloured block (a QTextFrame) with a role label; the text gets a light Markdown rendering
// (**bold**, *italic*, `code`, fenced code blocks, headings, lists). A streaming reply only
// re-renders its own frame, coalesced to ~30 Hz, and the view stays scrolled to the bottom
// unless the user has scrolled up. A conversation holding a run of text without white space
// longer than kLongestWrappedRun is wrapped anywhere (Qt lays out such a run at word
// boundaries in time quadratic in its length: a 1 MB message would take minutes to show).
#pragma once

// Complete, for the QPointer below.
#include "core/chat_model.h"

#include <QPointer>
#include <QSet>
#include <QTextBrowser>
#include <QTimer>
#include <QVector>

class QTextCursor;
class QTextFrame;

namespace longscope::ui {

class ChatView : public QTextBrowser {
    Q_OBJECT

public:
    explicit ChatView(QWidget *parent = nullptr);

    void setModel(ChatModel *model);
    ChatModel *model() const { return m_model; }

    // Renders pending streamed text now (the view otherwise catches up on a timer).
    void flush();
    // Whether new text keeps the view scrolled to the bottom (false once the user scrolls up).
    bool isFollowingBottom() const { return m_follow; }
    // A reply's reasoning (<think>...</think>) is shown collapsed; clicking its label expands it.
    bool isThoughtExpanded(int row) const { return m_expandedThoughts.contains(row); }
    // Whether lines break anywhere (a message holds a long unbroken run), not at word boundaries.
    bool wrapsAnywhere() const { return m_wrapAnywhere; }
    void setThoughtExpanded(int row, bool expanded);

protected:
    void changeEvent(QEvent *event) override;

private slots:
    void onRowsInserted(const QModelIndex &parent, int first, int last);
    void onDataChanged(const QModelIndex &topLeft, const QModelIndex &bottomRight);
    void onRowsRemoved();
    void onModelReset();
    void onScrollValueChanged(int value);
    void onScrollRangeChanged(int min, int max);
    void onAnchorClicked(const QUrl &link);

private:
    struct Colors;
    Colors colors() const;
    void rebuild();
    void appendFrame(int row);
    void renderRow(int row);
    void fillFrame(QTextFrame *frame, int row);
    void setWrapAnywhere(bool anywhere);

    QPointer<ChatModel> m_model;
    QVector<QTextFrame *> m_frames; // one per model row
    QTimer m_renderTimer;
    QVector<int> m_dirtyRows;
    QSet<int> m_expandedThoughts;
    bool m_follow = true;
    bool m_rebuilding = false;
    bool m_wrapAnywhere = false;
};

} // namespace longscope::ui
