#include "widgets/model_info_dialog.h"

#include <QDialogButtonBox>
#include <QPushButton>
#include <QTextBrowser>
#include <QVBoxLayout>

namespace longscope::ui {

namespace {

QString mib(qint64 bytes)
{
    const double m = double(bytes) / (1024.0 * 1024.0);
    return ModelInfoDialog::tr("%L1 MiB").arg(m, 0, 'f', m < 10 ? 2 : 0);
}

QString gray(const QString &text)
{
    return QStringLiteral("<span style='color:gray'>%1</span>").arg(text);
}

} // namespace

QVector<ModelFact> modelFacts(const ModelSummary &s, const longscope::Settings &settings)
{
    if (s.name.isEmpty())
        return {};
    const auto tr = [](const char *text) { return ModelInfoDialog::tr(text); };
    QVector<ModelFact> facts{
        {tr("Model"), s.name},
        {tr("File"), s.path},
        {tr("Format"), s.format},
        {tr("Family"), s.family},
        {tr("Tokenizer"), ModelInfoDialog::tr("%1, %L2 tokens").arg(s.tokenizer).arg(s.n_vocab)},
        {tr("End of generation"), s.end_of_generation},
        {tr("RoPE scaling"), ropeScalingInUse(s, settings)},
        {tr("Trained context"), ModelInfoDialog::tr("%L1 tokens").arg(s.n_ctx_train)},
        {tr("Layers"), QString::number(s.n_layer)},
        {tr("Weights"), mib(s.weight_bytes)},
        {tr("Chat template"), s.chat_template.isEmpty() ? tr("none in the file (a built-in format is used)")
                                                        : tr("the file's own")},
        {tr("Backend"), s.backend},
    };
    if (!s.gpu_status.isEmpty())
        facts.append({tr("GPU"), s.gpu_status});
    return facts;
}

QString modelHeaderHtml(const ModelSummary &s, const longscope::Settings &settings)
{
    if (s.name.isEmpty())
        return {};
    const QString sizes = ModelInfoDialog::tr("%1 · %2 · %L3 layers · %L4-token trained context · %5 · %6")
                              .arg(s.format, s.family.toHtmlEscaped())
                              .arg(s.n_layer)
                              .arg(s.n_ctx_train)
                              .arg(mib(s.weight_bytes), s.backend.toHtmlEscaped());
    const QString words = ModelInfoDialog::tr("%1 · ends at %2 · RoPE %3")
                              .arg(s.tokenizer.toHtmlEscaped(), s.end_of_generation.toHtmlEscaped(),
                                   ropeScalingInUse(s, settings).toHtmlEscaped());
    return QStringLiteral("<b>%1</b><br>%2<br>%3").arg(s.name.toHtmlEscaped(), gray(sizes), gray(words));
}

ModelInfoDialog::ModelInfoDialog(QWidget *parent) : QDialog(parent)
{
    setWindowTitle(tr("Model Info"));
    m_view = new QTextBrowser(this);
    m_view->setOpenLinks(false);
    m_view->setAccessibleName(tr("Model information"));
    auto *buttons = new QDialogButtonBox(QDialogButtonBox::Close, this);
    connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
    auto *layout = new QVBoxLayout(this);
    layout->addWidget(m_view, 1);
    layout->addWidget(buttons);
    resize(620, 420);
}

void ModelInfoDialog::setModel(const ModelSummary &summary, const longscope::Settings &settings)
{
    const QVector<ModelFact> facts = modelFacts(summary, settings);
    if (facts.isEmpty()) {
        setWindowTitle(tr("Model Info"));
        m_text = tr("No model is loaded.");
        m_view->setPlainText(m_text);
        return;
    }
    setWindowTitle(tr("Model Info — %1").arg(summary.name));
    QString html = QStringLiteral("<table cellspacing='4'>");
    QStringList lines;
    for (const ModelFact &f : facts) {
        html += QStringLiteral("<tr><td><b>%1</b></td><td>%2</td></tr>").arg(f.label.toHtmlEscaped(), f.value.toHtmlEscaped());
        lines << QStringLiteral("%1: %2").arg(f.label, f.value);
    }
    m_text = lines.join(QLatin1Char('\n'));
    m_view->setHtml(html + QStringLiteral("</table>"));
}

QString ModelInfoDialog::text() const
{
    return m_text;
}

} // namespace longscope::ui
