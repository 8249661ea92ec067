#include "widgets/explore_needle_controls.h"

#include <QComboBox>
#include <QFormLayout>
#include <QLabel>
#include <QLineEdit>
#include <QSpinBox>

#include <cmath>

namespace longscope::ui {

namespace {

constexpr int kMaxLength = 1 << 24;

QStringList items(const QString &text) { return text.split(QLatin1Char(','), Qt::SkipEmptyParts); }

} // namespace

ExploreNeedleControls::ExploreNeedleControls(QWidget *parent) : QGroupBox(tr("Needle in a haystack"), parent)
{
    setObjectName(QStringLiteral("exploreNeedleControls"));
    m_task = new QComboBox(this);
    m_task->addItem(tr("Pass key in filler text"), int(longscope::NeedleTask::Passkey));
    m_task->addItem(tr("Fact sentence in the book"), int(longscope::NeedleTask::Book));
    m_task->setToolTip(tr("The haystack: repeated filler sentences with a five-digit pass key, or the book's "
                          "opening with a sentence about a cat's name inserted"));
    m_lengths = new QLineEdit(QStringLiteral("256, 512, 1024"), this);
    m_lengths->setAccessibleName(tr("Prompt lengths"));
    m_lengths->setToolTip(tr("Prompt lengths in tokens, separated by commas (beyond the trained context is allowed)"));
    m_depths = new QLineEdit(QStringLiteral("0, 0.25, 0.5, 0.75, 1"), this);
    m_depths->setAccessibleName(tr("Needle depths"));
    m_depths->setToolTip(tr("Where the needle goes in the haystack, 0 (start) to 1 (end), separated by commas"));
    m_trials = new QSpinBox(this);
    m_trials->setRange(1, 1000);
    m_trials->setValue(1);
    m_trials->setAccessibleName(tr("Trials per cell"));
    m_trials->setToolTip(tr("Needles per cell, each with its own answer: the cell shows the mean probability"));
    m_hint = new QLabel(this);
    m_hint->setWordWrap(true);
    QPalette p = m_hint->palette();
    p.setColor(QPalette::WindowText, p.color(QPalette::PlaceholderText));
    m_hint->setPalette(p);
    auto *form = new QFormLayout(this);
    form->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);
    form->addRow(tr("Haystack"), m_task);
    form->addRow(tr("Lengths"), m_lengths);
    form->addRow(tr("Depths"), m_depths);
    form->addRow(tr("Trials"), m_trials);
    form->addRow(QString(), m_hint);

    connect(m_task, &QComboBox::currentIndexChanged, this, [this] { emit changed(); });
    connect(m_lengths, &QLineEdit::textEdited, this, [this] { m_lengthsTyped = true; });
    for (QLineEdit *e : {m_lengths, m_depths})
        connect(e, &QLineEdit::textChanged, this, [this] {
            updateHint();
            emit changed();
        });
    connect(m_trials, &QSpinBox::valueChanged, this, [this] {
        updateHint();
        emit changed();
    });
    updateHint();
}

void ExploreNeedleControls::setTrainedContext(int nCtxTrain)
{
    if (m_lengthsTyped || nCtxTrain < 2)
        return;
    setLengths({nCtxTrain / 2, nCtxTrain, nCtxTrain * 2});
}

longscope::NeedleTask ExploreNeedleControls::task() const
{
    return longscope::NeedleTask(m_task->currentData().toInt());
}

void ExploreNeedleControls::setTask(longscope::NeedleTask task) { m_task->setCurrentIndex(m_task->findData(int(task))); }

void ExploreNeedleControls::setLengths(const QVector<int> &lengths)
{
    QStringList parts;
    for (int l : lengths)
        parts << QString::number(l);
    m_lengths->setText(parts.join(QStringLiteral(", ")));
}

void ExploreNeedleControls::setDepths(const QVector<double> &depths)
{
    QStringList parts;
    for (double d : depths)
        parts << QString::number(d, 'g', 6);
    m_depths->setText(parts.join(QStringLiteral(", ")));
}

void ExploreNeedleControls::setTrials(int trials) { m_trials->setValue(trials); }

std::optional<NeedleRequest> ExploreNeedleControls::request(QString *error) const
{
    const auto fail = [&](const QString &why) {
        if (error)
            *error = why;
        return std::nullopt;
    };
    NeedleRequest r;
    r.task = task();
    r.trials = m_trials->value();
    for (const QString &item : items(m_lengths->text())) {
        bool ok = false;
        const int l = item.trimmed().toInt(&ok);
        if (!ok || l < 1 || l > kMaxLength)
            return fail(tr("Lengths: “%1” is not a whole number of tokens from 1 to %L2.").arg(item.trimmed()).arg(kMaxLength));
        r.lengths.append(l);
    }
    for (const QString &item : items(m_depths->text())) {
        bool ok = false;
        const double d = item.trimmed().toDouble(&ok);
        if (!ok || !std::isfinite(d))
            return fail(tr("Depths: “%1” is not a number.").arg(item.trimmed()));
        if (d < 0 || d > 1)
            return fail(tr("Depths: %1 is outside 0..1 (0 is the haystack's start, 1 its end).").arg(item.trimmed()));
        r.depths.append(d);
    }
    if (r.lengths.isEmpty())
        return fail(tr("Lengths: give at least one prompt length."));
    if (r.depths.isEmpty())
        return fail(tr("Depths: give at least one needle depth."));
    if (r.lengths.size() * r.depths.size() > longscope::k_max_needle_cells)
        return fail(tr("The grid has %L1 cells, more than %L2.")
                        .arg(r.lengths.size() * r.depths.size())
                        .arg(longscope::k_max_needle_cells));
    return r;
}

void ExploreNeedleControls::updateHint()
{
    QString why;
    const std::optional<NeedleRequest> r = request(&why);
    if (!r) {
        m_hint->setText(why);
        return;
    }
    m_hint->setText(tr("%L1 × %L2 cells, %L3 trial(s) each, per setting")
                        .arg(r->lengths.size())
                        .arg(r->depths.size())
                        .arg(r->trials));
}

} // namespace longscope::ui
