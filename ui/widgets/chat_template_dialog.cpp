#include "widgets/chat_template_dialog.h"

#include "longscope/chat.h"

#include <QComboBox>
#include <QDialogButtonBox>
#include <QFontDatabase>
#include <QFormLayout>
#include <QLabel>
#include <QPlainTextEdit>
#include <QPointer>
#include <QPushButton>
#include <QSettings>
#include <QVBoxLayout>

namespace longscope::ui {

namespace {

constexpr int kTypingPauseMs = 300;
const QString kCustom = QStringLiteral("custom");
const QString kModel = QStringLiteral("model");

QString describe(const RenderedPrompt &p)
{
    if (p.format == QLatin1String("model"))
        return ChatTemplateDialog::tr("The model's own template");
    if (p.format == QLatin1String("custom"))
        return ChatTemplateDialog::tr("A custom template");
    return ChatTemplateDialog::tr("The built-in %1 format").arg(p.format) +
           (p.note.isEmpty() ? QString() : QStringLiteral(": ") + p.note);
}

} // namespace

ChatTemplateDialog::ChatTemplateDialog(const QString &modelName, const QString &modelTemplate,
                                       const QStringList &builtins, const ChatTemplateChoice &current,
                                       Renderer renderer, QWidget *parent)
    : QDialog(parent), m_modelTemplate(modelTemplate), m_renderer(std::move(renderer)), m_valid(current)
{
    setWindowTitle(tr("Chat Template — %1").arg(modelName));
    const QFont mono = QFontDatabase::systemFont(QFontDatabase::FixedFont);

    m_source = new QComboBox(this);
    m_source->addItem(modelTemplate.isEmpty() ? tr("The model's own (it has none: a built-in is chosen)")
                                              : tr("The model's own template"),
                      kModel);
    for (const QString &name : builtins)
        m_source->addItem(tr("Built-in: %1").arg(name), name);
    m_source->addItem(tr("Custom template"), kCustom);
    m_source->setAccessibleName(tr("Template source"));

    m_inUse = new QLabel(this);
    m_inUse->setWordWrap(true);
    m_template = new QPlainTextEdit(this);
    m_template->setFont(mono);
    m_template->setLineWrapMode(QPlainTextEdit::NoWrap);
    m_template->setPlaceholderText(tr("Jinja chat template: messages, add_generation_prompt, bos_token, ..."));
    m_template->setAccessibleName(tr("Template text"));
    // Tab moves on to the next control; the template is Jinja, typed without tabs.
    m_template->setTabChangesFocus(true);
    m_error = new QLabel(this);
    m_error->setWordWrap(true);
    m_error->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_error->setStyleSheet(QStringLiteral("color: #c0392b"));
    m_error->hide();
    m_tokens = new QLabel(this);
    m_prompt = new QPlainTextEdit(this);
    m_prompt->setReadOnly(true);
    m_prompt->setFont(mono);
    m_prompt->setAccessibleName(tr("Rendered prompt"));
    m_prompt->setTabChangesFocus(true);

    m_buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, this);
    connect(m_buttons, &QDialogButtonBox::accepted, this, &QDialog::accept);
    connect(m_buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);

    auto *form = new QFormLayout;
    form->addRow(tr("Template:"), m_source);
    form->addRow(tr("In use:"), m_inUse);
    auto *layout = new QVBoxLayout(this);
    layout->addLayout(form);
    layout->addWidget(new QLabel(tr("Template text (editable as a custom template):"), this));
    layout->addWidget(m_template, 2);
    layout->addWidget(m_error);
    layout->addWidget(new QLabel(tr("The current conversation as the model receives it:"), this));
    layout->addWidget(m_prompt, 3);
    layout->addWidget(m_tokens);
    layout->addWidget(m_buttons);
    resize(760, 640);

    m_typing.setSingleShot(true);
    m_typing.setInterval(kTypingPauseMs);
    connect(&m_typing, &QTimer::timeout, this, &ChatTemplateDialog::renderNow);
    connect(m_source, &QComboBox::currentIndexChanged, this, &ChatTemplateDialog::onSourceChanged);
    connect(m_template, &QPlainTextEdit::textChanged, this, [this] {
        if (m_template->isReadOnly())
            return;
        m_lastCustom = m_template->toPlainText();
        m_typing.start();
    });
    setChoice(current);
    renderNow();
}

void ChatTemplateDialog::setChoice(const ChatTemplateChoice &choice)
{
    const QString data = choice.kind == ChatTemplateChoice::Kind::Custom    ? kCustom
                         : choice.kind == ChatTemplateChoice::Kind::Builtin ? choice.builtin
                                                                            : kModel;
    if (choice.kind == ChatTemplateChoice::Kind::Custom)
        m_lastCustom = choice.custom;
    const int index = m_source->findData(data);
    m_source->blockSignals(true);
    m_source->setCurrentIndex(index < 0 ? 0 : index);
    m_source->blockSignals(false);
    onSourceChanged();
}

void ChatTemplateDialog::onSourceChanged()
{
    const QString data = m_source->currentData().toString();
    const bool custom = data == kCustom;
    m_template->blockSignals(true);
    m_template->setReadOnly(!custom);
    if (custom) // starts from the model's own template when nothing was written yet
        m_template->setPlainText(m_lastCustom.isEmpty() ? m_modelTemplate : m_lastCustom);
    else if (data == kModel)
        m_template->setPlainText(m_modelTemplate);
    else
        m_template->setPlainText(tr("(the built-in %1 format)").arg(data));
    m_template->blockSignals(false);
    if (custom && m_lastCustom.isEmpty())
        m_lastCustom = m_template->toPlainText();
    renderNow();
}

ChatTemplateChoice ChatTemplateDialog::candidate() const
{
    ChatTemplateChoice c;
    const QString data = m_source->currentData().toString();
    if (data == kCustom) {
        c.kind = ChatTemplateChoice::Kind::Custom;
        c.custom = m_lastCustom;
    } else if (data != kModel) {
        c.kind = ChatTemplateChoice::Kind::Builtin;
        c.builtin = data;
    }
    return c;
}

void ChatTemplateDialog::renderNow()
{
    m_typing.stop();
    m_candidateValid = false;
    m_buttons->button(QDialogButtonBox::Ok)->setEnabled(false);
    const ChatTemplateChoice c = candidate();
    if (c.kind == ChatTemplateChoice::Kind::Custom && c.custom.trimmed().isEmpty()) {
        RenderedPrompt empty;
        empty.error = tr("the custom template is empty");
        showRendered(c, empty);
        return;
    }
    if (m_renderer)
        m_renderer(c);
}

void ChatTemplateDialog::showRendered(const ChatTemplateChoice &choice, const RenderedPrompt &prompt)
{
    if (!(choice == candidate()))
        return; // an answer for what was shown before
    if (!prompt.error.isEmpty()) {
        // The previous template stays in use; the error is shown where the text is edited.
        m_error->setText(tr("This template cannot be used: %1").arg(prompt.error));
        m_error->show();
        m_candidateValid = false;
        m_buttons->button(QDialogButtonBox::Ok)->setEnabled(false);
        return;
    }
    m_error->hide();
    m_error->clear();
    m_candidateValid = true;
    m_valid = choice;
    m_buttons->button(QDialogButtonBox::Ok)->setEnabled(true);
    m_inUse->setText(describe(prompt));
    m_prompt->setPlainText(prompt.text);
    m_tokens->setText(tr("%n tokens", nullptr, prompt.tokens));
}

void ChatTemplateDialog::done(int result)
{
    if (result == QDialog::Accepted) {
        if (!m_candidateValid)
            return; // an invalid template is not taken
        emit choiceAccepted(m_valid);
    }
    QDialog::done(result);
}

ChatTemplateDialog *openChatTemplateDialog(QWidget *parent, EngineWorker *worker, const QVector<ChatTurn> &turns,
                                           QSettings &settings, const ModelSummary &model,
                                           const QString &systemPrompt)
{
    ChatRequest request;
    request.system_prompt = systemPrompt;
    request.turns = turns;
    QStringList builtins;
    for (const std::string &name : builtin_chat_formats())
        builtins << QString::fromStdString(name);

    // Each rendering is a job on the worker; its answer is matched to the choice it was for.
    auto pending = std::make_shared<QHash<quint64, ChatTemplateChoice>>();
    QPointer<EngineWorker> w(worker);
    auto *dialog = new ChatTemplateDialog(
        model.name, model.chat_template, builtins, loadChatTemplateChoice(settings, model.path),
        [w, request, pending](const ChatTemplateChoice &choice) {
            if (!w)
                return;
            ChatRequest r = request;
            r.chat_template = choice.templateText();
            r.chat_format = choice.formatName();
            pending->insert(w->queueRenderChat(r), choice);
        },
        parent);
    dialog->setAttribute(Qt::WA_DeleteOnClose);
    QObject::connect(worker, &EngineWorker::chatPromptRendered, dialog,
                     [dialog, pending](quint64 job, const RenderedPrompt &prompt) {
                         if (auto it = pending->find(job); it != pending->end()) {
                             dialog->showRendered(*it, prompt);
                             pending->erase(it);
                         }
                     });
    const QString path = model.path;
    QObject::connect(dialog, &ChatTemplateDialog::choiceAccepted, dialog,
                     [&settings, path](const ChatTemplateChoice &choice) {
                         saveChatTemplateChoice(settings, path, choice);
                     });
    dialog->renderNow(); // the worker is connected now
    dialog->show();
    return dialog;
}

} // namespace longscope::ui
