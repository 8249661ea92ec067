// "Chat template…": which template renders this model's conversations (its own, a built-in
// format, or a custom Jinja template), and the current conversation's prompt exactly as the
// model receives it (special tokens as text, a BOS the tokenizer adds in front). The user picks
// a built-in format or edits a custom template; a template that fails shows the renderer's
// error inline and is not taken (the previous choice stays). OK keeps the choice for this
// model (remembered per model path).
#pragma once

#include "core/chat_template_choice.h"
#include "core/engine_worker.h"

#include <QDialog>
#include <QTimer>

#include <functional>

class QComboBox;
class QLabel;
class QPlainTextEdit;
class QDialogButtonBox;
class QSettings;

namespace longscope::ui {

class ChatTemplateDialog : public QDialog {
    Q_OBJECT

public:
    // Asks for `choice` to be rendered over the current conversation; the answer comes back
    // through showRendered() (at once or later).
    using Renderer = std::function<void(const ChatTemplateChoice &choice)>;

    ChatTemplateDialog(const QString &modelName, const QString &modelTemplate, const QStringList &builtins,
                       const ChatTemplateChoice &current, Renderer renderer, QWidget *parent = nullptr);

    // The choice being looked at, and the one that renders (what OK keeps).
    ChatTemplateChoice candidate() const;
    ChatTemplateChoice accepted() const { return m_valid; }

    // The rendering of `choice` (ignored when the candidate has changed since).
    void showRendered(const ChatTemplateChoice &choice, const RenderedPrompt &prompt);

    // For tests: the widgets.
    QComboBox *sourceBox() const { return m_source; }
    QPlainTextEdit *templateEdit() const { return m_template; }
    QPlainTextEdit *promptView() const { return m_prompt; }
    QLabel *errorLabel() const { return m_error; }
    QLabel *inUseLabel() const { return m_inUse; }
    // Renders the candidate now instead of after the typing pause.
    void renderNow();

signals:
    void choiceAccepted(const longscope::ui::ChatTemplateChoice &choice);

protected:
    void done(int result) override;

private:
    void onSourceChanged();
    void setChoice(const ChatTemplateChoice &choice);

    QString m_modelTemplate;
    Renderer m_renderer;
    ChatTemplateChoice m_valid;        // the last choice that rendered
    bool m_candidateValid = false;     // the candidate rendered without error
    QComboBox *m_source = nullptr;     // the model's own, each built-in, custom
    QPlainTextEdit *m_template = nullptr;
    QLabel *m_error = nullptr;
    QLabel *m_inUse = nullptr;
    QLabel *m_tokens = nullptr;
    QPlainTextEdit *m_prompt = nullptr;
    QDialogButtonBox *m_buttons = nullptr;
    QTimer m_typing;
    QString m_lastCustom;              // the custom text kept while another source is picked
};

// Opens the dialog for the loaded model over the conversation `turns` (rendered by `worker`);
// OK stores the choice for the model's path in `settings`. Returns at once (the dialog is
// modeless and deletes itself).
ChatTemplateDialog *openChatTemplateDialog(QWidget *parent, EngineWorker *worker, const QVector<ChatTurn> &turns,
                                           QSettings &settings, const ModelSummary &model,
                                           const QString &systemPrompt);

} // namespace longscope::ui
