// A plain-text field that stays responsive with any text. Qt's default wrapping (at word
// boundaries, else anywhere) lays a paragraph out in time quadratic in its longest run without
// a break opportunity: a 1 MB system prompt without a space took minutes to show. The field
// wraps anywhere when it receives such a run (set whole or pasted), else at word boundaries.
#pragma once

#include <QPlainTextEdit>
#include <QStringView>

namespace longscope::ui {

// A run of more characters than this without white space is wrapped anywhere.
inline constexpr qsizetype kLongestWrappedRun = 1000;

bool hasLongUnbrokenRun(QStringView text);

class PlainTextField : public QPlainTextEdit {
    Q_OBJECT

public:
    explicit PlainTextField(QWidget *parent = nullptr);

    // Replaces the whole text, with the wrap mode it needs.
    void setText(const QString &text);

protected:
    void insertFromMimeData(const QMimeData *source) override;
};

} // namespace longscope::ui
