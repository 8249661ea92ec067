// The reasoning block of a reply in the chat view: while the model thinks, the reasoning
// streams in live under "Thinking…"; once it answers, a clickable "Thought for N tokens"
// (an anchor thought:ROW) stands for it, expanding to the reasoning and collapsing again.
#pragma once

#include "core/thought.h"

#include <QColor>
#include <QString>
#include <QUrl>

#include <optional>

class QTextCursor;
class QTextCharFormat;

namespace longscope::ui {

// The label: "Thinking… (N tokens)", "▸ Thought for N tokens" or "▾ Thought for N tokens" (no
// count when it is not known: a reply loaded from a saved conversation).
QString thoughtLabel(const ThoughtSplit &thought, int tokens, bool expanded);

// Writes the block (label, and the reasoning while thinking or expanded) at the cursor.
void insertThought(QTextCursor &cursor, int row, const ThoughtSplit &thought, int tokens, bool expanded,
                   const QTextCharFormat &base, const QColor &muted);

// The link of row's label, and the row a clicked link names (nullopt for other links).
QUrl thoughtLink(int row);
std::optional<int> thoughtRow(const QUrl &link);

} // namespace longscope::ui
