// The model in words, where the window shows it: the banner's model header and View > Model
// Info. Both read the worker's ModelSummary and the long-context settings in effect, so the
// RoPE scaling said is the one the next step runs with; the family, tokenizer,
// end-of-generation and RoPE texts are the engine's (longscope/model_description.h), the same
// as `longscope-cli info` prints.
#pragma once

#include "core/engine_worker.h"

#include <QDialog>
#include <QVector>

class QTextBrowser;

namespace longscope::ui {

struct ModelFact {
    QString label; // "Tokenizer"
    QString value; // "byte-level BPE (pre-tokenizer qwen2), 151,936 tokens"
};

// Every line of Model Info, in order (empty without a model: `summary.name` empty).
QVector<ModelFact> modelFacts(const ModelSummary &summary, const longscope::Settings &settings);

// The banner's header: the name, then the format, family and size, then the tokenizer, the
// end-of-generation tokens and the RoPE scaling in use (rich text, escaped).
QString modelHeaderHtml(const ModelSummary &summary, const longscope::Settings &settings);

class ModelInfoDialog : public QDialog {
    Q_OBJECT

public:
    explicit ModelInfoDialog(QWidget *parent = nullptr);

    void setModel(const ModelSummary &summary, const longscope::Settings &settings);
    // What the dialog shows, as plain text ("Label: value" per line).
    QString text() const;
    QTextBrowser *view() const { return m_view; }

private:
    QTextBrowser *m_view = nullptr;
    QString m_text;
};

} // namespace longscope::ui
