#include "widgets/chat_view.h"

#include "core/chat_model.h"
#include "widgets/plain_text_field.h"
#include "widgets/thought_block.h"

#include <QDateTime>
#include <QDesktopServices>
#include <QEvent>
#include <QFontDatabase>
#include <QScrollBar>
#include <QTextBlock>
#include <QTextCursor>
#include <QTextDocument>
#include <QTextFrame>

namespace longscope::ui {

struct ChatView::Colors {
    QColor userBg, userBorder, userLabel;
    QColor modelBg, modelBorder, modelLabel;
    QColor noteBg, noteBorder, noteLabel;
    QColor codeBg, muted;
};

namespace {

constexpr int kRenderIntervalMs = 33;
constexpr qreal kBubbleIndent = 56;

bool isDark(const QPalette &p)
{
    return p.color(QPalette::Base).lightness() < 128;
}

// Inline Markdown: **bold**, __bold__, *italic*, _italic_ (not inside words), `code`.
void insertInline(QTextCursor &cursor, const QString &line, const QTextCharFormat &base,
                  const QColor &codeBg)
{
    bool bold = false;
    bool italic = false;
    QString run;
    auto flushRun = [&]() {
        if (run.isEmpty())
            return;
        QTextCharFormat f = base;
        f.setFontWeight(bold ? QFont::Bold : base.fontWeight());
        f.setFontItalic(italic || base.fontItalic());
        cursor.insertText(run, f);
        run.clear();
    };
    const int n = int(line.size());
    for (int i = 0; i < n; ++i) {
        const QChar c = line[i];
        if (c == QLatin1Char('`')) {
            const int end = int(line.indexOf(QLatin1Char('`'), i + 1));
            if (end > i + 1) {
                flushRun();
                QTextCharFormat f = base;
                f.setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
                f.setBackground(codeBg);
                cursor.insertText(line.mid(i + 1, end - i - 1), f);
                i = end;
                continue;
            }
        }
        if ((c == QLatin1Char('*') || c == QLatin1Char('_')) && i + 1 < n && line[i + 1] == c) {
            // Only toggle when a closing marker exists (opening) or we are inside bold.
            if (bold || line.indexOf(QString(2, c), i + 2) > i + 2) {
                flushRun();
                bold = !bold;
                ++i;
                continue;
            }
        }
        if (c == QLatin1Char('*') || c == QLatin1Char('_')) {
            const bool prevWord = i > 0 && line[i - 1].isLetterOrNumber();
            const bool nextWord = i + 1 < n && line[i + 1].isLetterOrNumber();
            const bool opens = !italic && !prevWord && nextWord && line.indexOf(c, i + 1) > i + 1;
            const bool closes = italic && prevWord && !nextWord;
            if (opens || closes) {
                flushRun();
                italic = !italic;
                continue;
            }
        }
        run += c;
    }
    flushRun();
}

struct LineKind {
    enum Kind { Text, Heading, Bullet, Numbered, Quote } kind = Text;
    int level = 0;
    QString text;
    QString marker;
};

LineKind classify(const QString &line)
{
    LineKind k;
    const QString t = line.trimmed();
    int hashes = 0;
    while (hashes < t.size() && t[hashes] == QLatin1Char('#'))
        ++hashes;
    if (hashes >= 1 && hashes <= 4 && hashes < t.size() && t[hashes] == QLatin1Char(' ')) {
        k.kind = LineKind::Heading;
        k.level = hashes;
        k.text = t.mid(hashes + 1);
        return k;
    }
    if (t.startsWith(QLatin1String("- ")) || t.startsWith(QLatin1String("* ")) ||
        t.startsWith(QLatin1String("+ "))) {
        k.kind = LineKind::Bullet;
        k.text = t.mid(2);
        k.marker = QStringLiteral("•  ");
        return k;
    }
    int digits = 0;
    while (digits < t.size() && t[digits].isDigit())
        ++digits;
    if (digits > 0 && digits < 4 && digits + 1 < t.size() &&
        (t[digits] == QLatin1Char('.') || t[digits] == QLatin1Char(')')) &&
        t[digits + 1] == QLatin1Char(' ')) {
        k.kind = LineKind::Numbered;
        k.marker = t.left(digits + 1) + QStringLiteral("  ");
        k.text = t.mid(digits + 2);
        return k;
    }
    if (t.startsWith(QLatin1String("> "))) {
        k.kind = LineKind::Quote;
        k.text = t.mid(2);
        return k;
    }
    k.text = line;
    return k;
}

QString roleLabel(Message::Role role)
{
    switch (role) {
    case Message::Role::User:
        return ChatView::tr("You");
    case Message::Role::Assistant:
        return ChatView::tr("Model");
    case Message::Role::SystemNote:
        return ChatView::tr("Note");
    }
    return {};
}

} // namespace

ChatView::ChatView(QWidget *parent) : QTextBrowser(parent)
{
    setReadOnly(true);
    setOpenLinks(false); // web links open in the browser, thought: links toggle a reasoning block
    connect(this, &QTextBrowser::anchorClicked, this, &ChatView::onAnchorClicked);
    setUndoRedoEnabled(false);
    document()->setUndoRedoEnabled(false);
    document()->setDocumentMargin(12);
    setAccessibleName(tr("Conversation"));
    setPlaceholderText(tr("Start a conversation: type below and press Enter."));

    m_renderTimer.setSingleShot(true);
    m_renderTimer.setInterval(kRenderIntervalMs);
    connect(&m_renderTimer, &QTimer::timeout, this, &ChatView::flush);

    connect(verticalScrollBar(), &QScrollBar::valueChanged, this, &ChatView::onScrollValueChanged);
    connect(verticalScrollBar(), &QScrollBar::rangeChanged, this, &ChatView::onScrollRangeChanged);
}

void ChatView::setModel(ChatModel *model)
{
    if (m_model)
        disconnect(m_model, nullptr, this, nullptr);
    m_model = model;
    if (m_model) {
        connect(m_model, &QAbstractItemModel::rowsInserted, this, &ChatView::onRowsInserted);
        connect(m_model, &QAbstractItemModel::dataChanged, this, &ChatView::onDataChanged);
        connect(m_model, &QAbstractItemModel::rowsRemoved, this, &ChatView::onRowsRemoved);
        connect(m_model, &QAbstractItemModel::modelReset, this, &ChatView::onModelReset);
        connect(m_model, &QAbstractItemModel::layoutChanged, this, &ChatView::onModelReset);
    }
    rebuild();
}

ChatView::Colors ChatView::colors() const
{
    Colors c;
    if (isDark(palette())) {
        c.userBg = QColor(0x1f, 0x3a, 0x5f);
        c.userBorder = QColor(0x2f, 0x55, 0x88);
        c.userLabel = QColor(0x9c, 0xc3, 0xff);
        c.modelBg = QColor(0x2a, 0x2d, 0x33);
        c.modelBorder = QColor(0x3d, 0x41, 0x49);
        c.modelLabel = QColor(0x8f, 0xd6, 0xa8);
        c.noteBg = QColor(0x4a, 0x40, 0x1c);
        c.noteBorder = QColor(0x6b, 0x5c, 0x25);
        c.noteLabel = QColor(0xf0, 0xd0, 0x70);
        c.codeBg = QColor(0x1b, 0x1d, 0x21);
        c.muted = QColor(0x9a, 0xa0, 0xa6);
    } else {
        c.userBg = QColor(0xe3, 0xef, 0xff);
        c.userBorder = QColor(0xb8, 0xd3, 0xf7);
        c.userLabel = QColor(0x1a, 0x56, 0xb0);
        c.modelBg = QColor(0xf6, 0xf7, 0xf9);
        c.modelBorder = QColor(0xdc, 0xdf, 0xe4);
        c.modelLabel = QColor(0x1e, 0x7a, 0x46);
        c.noteBg = QColor(0xff, 0xf6, 0xd8);
        c.noteBorder = QColor(0xf0, 0xd8, 0x8a);
        c.noteLabel = QColor(0x8a, 0x64, 0x00);
        c.codeBg = QColor(0xea, 0xec, 0xef);
        c.muted = QColor(0x70, 0x76, 0x7d);
    }
    return c;
}

void ChatView::flush()
{
    m_renderTimer.stop();
    const QVector<int> rows = std::exchange(m_dirtyRows, {});
    for (int row : rows)
        renderRow(row);
}

void ChatView::changeEvent(QEvent *event)
{
    QTextBrowser::changeEvent(event);
    if (event->type() == QEvent::PaletteChange || event->type() == QEvent::FontChange)
        rebuild();
}

void ChatView::onRowsInserted(const QModelIndex &parent, int first, int last)
{
    if (parent.isValid())
        return;
    if (first != m_frames.size()) { // inserted in the middle: not how the chat grows
        rebuild();
        return;
    }
    flush();
    for (int row = first; row <= last; ++row)
        appendFrame(row);
}

void ChatView::onDataChanged(const QModelIndex &topLeft, const QModelIndex &bottomRight)
{
    for (int row = topLeft.row(); row <= bottomRight.row(); ++row) {
        if (!m_dirtyRows.contains(row))
            m_dirtyRows.append(row);
    }
    if (!m_renderTimer.isActive())
        m_renderTimer.start();
}

void ChatView::onRowsRemoved()
{
    const int count = m_model ? m_model->count() : 0;
    m_expandedThoughts.removeIf([count](int row) { return row >= count; });
    rebuild();
}

void ChatView::onModelReset()
{
    m_expandedThoughts.clear();
    rebuild();
}

void ChatView::onScrollValueChanged(int value)
{
    if (m_rebuilding)
        return;
    m_follow = value >= verticalScrollBar()->maximum() - 4;
}

void ChatView::onScrollRangeChanged(int, int max)
{
    if (m_follow)
        verticalScrollBar()->setValue(max);
}

void ChatView::rebuild()
{
    m_rebuilding = true;
    m_renderTimer.stop();
    m_dirtyRows.clear();
    m_frames.clear();
    document()->clear();
    setWrapAnywhere(false);
    m_rebuilding = false;
    m_follow = true;
    if (!m_model)
        return;
    for (int row = 0; row < m_model->count(); ++row)
        appendFrame(row);
    verticalScrollBar()->setValue(verticalScrollBar()->maximum());
}

void ChatView::appendFrame(int row)
{
    const Colors c = colors();
    const Message m = m_model->at(row);

    QTextFrameFormat ff;
    ff.setPadding(10);
    ff.setBorder(1);
    ff.setBorderStyle(QTextFrameFormat::BorderStyle_Solid);
    ff.setTopMargin(m_frames.isEmpty() ? 0 : 4);
    ff.setBottomMargin(4);
    switch (m.role) {
    case Message::Role::User:
        ff.setBackground(c.userBg);
        ff.setBorderBrush(c.userBorder);
        ff.setLeftMargin(kBubbleIndent);
        break;
    case Message::Role::Assistant:
        ff.setBackground(c.modelBg);
        ff.setBorderBrush(c.modelBorder);
        ff.setRightMargin(kBubbleIndent);
        break;
    case Message::Role::SystemNote:
        ff.setBackground(c.noteBg);
        ff.setBorderBrush(c.noteBorder);
        ff.setLeftMargin(kBubbleIndent / 2);
        ff.setRightMargin(kBubbleIndent / 2);
        break;
    }

    QTextCursor cursor(document());
    cursor.movePosition(QTextCursor::End);
    if (!m_frames.isEmpty() || !document()->isEmpty()) {
        // Frames are separated by the root frame's blocks; keep that block tiny.
        QTextBlockFormat sep;
        sep.setLineHeight(1, QTextBlockFormat::FixedHeight);
        cursor.setBlockFormat(sep);
    }
    QTextFrame *frame = cursor.insertFrame(ff);
    m_frames.append(frame);
    fillFrame(frame, row);
}

void ChatView::renderRow(int row)
{
    if (!m_model || row < 0 || row >= m_frames.size() || row >= m_model->count())
        return;
    fillFrame(m_frames[row], row);
}

void ChatView::setThoughtExpanded(int row, bool expanded)
{
    if (expanded == isThoughtExpanded(row))
        return;
    if (expanded)
        m_expandedThoughts.insert(row);
    else
        m_expandedThoughts.remove(row);
    renderRow(row);
}

void ChatView::onAnchorClicked(const QUrl &link)
{
    if (const auto row = thoughtRow(link))
        setThoughtExpanded(*row, !isThoughtExpanded(*row));
    else
        QDesktopServices::openUrl(link);
}

void ChatView::setWrapAnywhere(bool anywhere)
{
    m_wrapAnywhere = anywhere;
    setWordWrapMode(anywhere ? QTextOption::WrapAnywhere : QTextOption::WrapAtWordBoundaryOrAnywhere);
}

void ChatView::fillFrame(QTextFrame *frame, int row)
{
    const Colors c = colors();
    const Message m = m_model->at(row);
    // Before the text goes in, so that it is laid out once, in the mode it needs.
    if (!m_wrapAnywhere && hasLongUnbrokenRun(m.text))
        setWrapAnywhere(true);

    QTextCursor cursor = frame->firstCursorPosition();
    cursor.beginEditBlock();
    cursor.setPosition(frame->lastPosition(), QTextCursor::KeepAnchor);
    cursor.removeSelectedText();

    const QFont base = font();
    QTextCharFormat text;
    text.setFont(base);
    text.setForeground(palette().color(QPalette::Text));

    // Role label line.
    QTextBlockFormat labelBlock;
    labelBlock.setBottomMargin(4);
    cursor.setBlockFormat(labelBlock);
    QTextCharFormat label = text;
    label.setFontWeight(QFont::Bold);
    label.setFontPointSize(base.pointSizeF() > 0 ? base.pointSizeF() * 0.9 : 9);
    label.setForeground(m.role == Message::Role::User        ? c.userLabel
                        : m.role == Message::Role::Assistant ? c.modelLabel
                                                             : c.noteLabel);
    cursor.insertText(roleLabel(m.role), label);
    if (m.timestamp.isValid()) {
        QTextCharFormat ts = label;
        ts.setFontWeight(QFont::Normal);
        ts.setForeground(c.muted);
        cursor.insertText(QStringLiteral("   ") + m.timestamp.toLocalTime().toString(QStringLiteral("HH:mm")), ts);
    }

    QString body = m.text;
    bool thought = false;
    if (m.role == Message::Role::Assistant) {
        const ThoughtSplit t = splitThought(m.text);
        if (t.hasReasoning) {
            insertThought(cursor, row, t, m.reasoningTokens, isThoughtExpanded(row), text, c.muted);
            body = t.answer;
            thought = true;
        }
    }
    if (body.isEmpty() && m.role == Message::Role::Assistant && !thought) {
        QTextCharFormat waiting = text;
        waiting.setForeground(c.muted);
        waiting.setFontItalic(true);
        cursor.insertBlock(QTextBlockFormat(), waiting);
        cursor.insertText(tr("…"), waiting);
        cursor.endEditBlock();
        return;
    }

    const QFont mono = QFontDatabase::systemFont(QFontDatabase::FixedFont);
    bool inCode = false;
    bool gap = false;
    const QStringList lines = body.split(QLatin1Char('\n'));
    for (const QString &line : lines) {
        if (line.trimmed().startsWith(QLatin1String("```"))) {
            inCode = !inCode;
            gap = !inCode;
            continue;
        }
        QTextBlockFormat bf;
        if (inCode) {
            bf.setBackground(c.codeBg);
            bf.setLeftMargin(4);
            bf.setNonBreakableLines(true);
            QTextCharFormat code = text;
            code.setFont(mono);
            cursor.insertBlock(bf, code);
            cursor.insertText(line, code);
            continue;
        }
        if (line.trimmed().isEmpty()) {
            gap = true;
            continue;
        }
        if (gap)
            bf.setTopMargin(6);
        gap = false;
        const LineKind k = classify(line);
        QTextCharFormat cf = text;
        switch (k.kind) {
        case LineKind::Heading:
            cf.setFontWeight(QFont::Bold);
            cf.setFontPointSize(base.pointSizeF() * (k.level == 1 ? 1.3 : k.level == 2 ? 1.15 : 1.05));
            bf.setTopMargin(6);
            break;
        case LineKind::Bullet:
        case LineKind::Numbered:
            bf.setLeftMargin(14);
            bf.setTextIndent(-12);
            break;
        case LineKind::Quote:
            bf.setLeftMargin(12);
            cf.setForeground(c.muted);
            break;
        case LineKind::Text:
            break;
        }
        cursor.insertBlock(bf, cf);
        if (!k.marker.isEmpty())
            cursor.insertText(k.marker, cf);
        insertInline(cursor, k.text, cf, c.codeBg);
    }
    cursor.endEditBlock();
}

} // namespace longscope::ui
