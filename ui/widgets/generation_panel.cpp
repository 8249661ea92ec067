#include "widgets/generation_panel.h"

#include <QCheckBox>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QSignalBlocker>
#include <QSlider>
#include <QSpinBox>

#include <climits>
#include <cmath>

namespace longscope::ui {

namespace {

// A slider next to a spin box, kept in step; the spin box holds the value.
QWidget *withSlider(QSpinBox *spin, QWidget *parent)
{
    auto *row = new QWidget(parent);
    auto *h = new QHBoxLayout(row);
    h->setContentsMargins(0, 0, 0, 0);
    auto *slider = new QSlider(Qt::Horizontal, row);
    slider->setRange(spin->minimum(), spin->maximum());
    slider->setValue(spin->value());
    slider->setFocusPolicy(Qt::NoFocus);
    QObject::connect(slider, &QSlider::valueChanged, spin, &QSpinBox::setValue);
    QObject::connect(spin, &QSpinBox::valueChanged, slider, [slider](int v) {
        QSignalBlocker b(slider);
        slider->setValue(v);
    });
    spin->setMinimumWidth(72);
    h->addWidget(slider, 1);
    h->addWidget(spin);
    return row;
}

QWidget *withSlider(QDoubleSpinBox *spin, QWidget *parent)
{
    auto *row = new QWidget(parent);
    auto *h = new QHBoxLayout(row);
    h->setContentsMargins(0, 0, 0, 0);
    auto *slider = new QSlider(Qt::Horizontal, row);
    const double scale = std::pow(10.0, spin->decimals());
    slider->setRange(int(std::lround(spin->minimum() * scale)), int(std::lround(spin->maximum() * scale)));
    slider->setValue(int(std::lround(spin->value() * scale)));
    slider->setFocusPolicy(Qt::NoFocus);
    QObject::connect(slider, &QSlider::valueChanged, spin, [spin, scale](int v) { spin->setValue(v / scale); });
    QObject::connect(spin, &QDoubleSpinBox::valueChanged, slider, [slider, scale](double v) {
        QSignalBlocker b(slider);
        slider->setValue(int(std::lround(v * scale)));
    });
    spin->setMinimumWidth(72);
    h->addWidget(slider, 1);
    h->addWidget(spin);
    return row;
}

QDoubleSpinBox *doubleBox(double lo, double hi, double step, int decimals, double value, QWidget *parent)
{
    auto *b = new QDoubleSpinBox(parent);
    b->setRange(lo, hi);
    b->setSingleStep(step);
    b->setDecimals(decimals);
    b->setValue(value);
    return b;
}

} // namespace

GenerationPanel::GenerationPanel(QWidget *parent) : QGroupBox(tr("Generation"), parent)
{
    const GenerationParams defaults;

    m_maxNewTokens = new QSpinBox(this);
    m_maxNewTokens->setRange(0, 4096);
    m_maxNewTokens->setSingleStep(16);
    m_maxNewTokens->setValue(defaults.max_new_tokens);
    m_maxNewTokens->setToolTip(tr("The most tokens one reply may have"));

    m_topP = doubleBox(0.0, 1.0, 0.01, 2, defaults.top_p, this);
    m_topP->setToolTip(tr("Nucleus sampling: keep the smallest set of tokens whose probability reaches P"));
    m_temperature = doubleBox(0.0, 1.0, 0.01, 2, defaults.temperature, this);
    m_temperature->setToolTip(tr("0 is greedy; higher values are more varied"));
    m_topK = new QSpinBox(this);
    m_topK->setRange(1, 40);
    m_topK->setValue(defaults.top_k);
    m_topK->setToolTip(tr("Sample among the K most likely tokens"));
    m_doSample = new QCheckBox(tr("Do sample"), this);
    m_doSample->setChecked(defaults.do_sample);
    m_doSample->setToolTip(tr("Off: always take the most likely token (greedy)"));
    m_repetitionPenalty = doubleBox(1.0, 3.0, 0.05, 2, defaults.repetition_penalty, this);
    m_repetitionPenalty->setToolTip(tr("Above 1 discourages tokens already in the context"));
    m_seed = new QSpinBox(this);
    m_seed->setRange(0, INT_MAX);
    m_seed->setValue(int(defaults.seed));
    m_seed->setToolTip(tr("The same seed and settings give the same text"));
    m_seed->setAccessibleName(tr("Seed"));
    m_fixedSeed = new QCheckBox(tr("Fixed"), this);
    m_fixedSeed->setChecked(!defaults.random_seed);
    m_fixedSeed->setToolTip(tr("Off: every reply (Regenerate too) draws a new seed. On: the seed in the box is used"));
    m_fixedSeed->setAccessibleName(tr("Fixed seed"));
    m_room = new QLabel(this);
    m_room->setWordWrap(false);
    QPalette rp = m_room->palette();
    rp.setColor(QPalette::WindowText, rp.color(QPalette::PlaceholderText));
    m_room->setPalette(rp);
    m_room->setAccessibleName(tr("Free context"));
    m_maxNewTokens->setAccessibleName(tr("Max new tokens"));
    m_topP->setAccessibleName(tr("Top P"));
    m_temperature->setAccessibleName(tr("Temperature"));
    m_topK->setAccessibleName(tr("Top K"));
    m_repetitionPenalty->setAccessibleName(tr("Repetition penalty"));
    m_doSample->setAccessibleName(tr("Do sample"));
    auto *seedRow = new QWidget(this);
    auto *sh = new QHBoxLayout(seedRow);
    sh->setContentsMargins(0, 0, 0, 0);
    sh->addWidget(m_seed, 1);
    sh->addWidget(m_fixedSeed);

    auto *form = new QFormLayout(this);
    form->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);
    form->setRowWrapPolicy(QFormLayout::DontWrapRows);
    form->addRow(tr("Max new tokens"), withSlider(m_maxNewTokens, this));
    form->addRow(QString(), m_room);
    form->addRow(tr("Top P"), withSlider(m_topP, this));
    form->addRow(tr("Temperature"), withSlider(m_temperature, this));
    form->addRow(tr("Top K"), withSlider(m_topK, this));
    form->addRow(tr("Repetition penalty"), withSlider(m_repetitionPenalty, this));
    form->addRow(QString(), m_doSample);
    form->addRow(tr("Seed"), seedRow);

    connect(m_maxNewTokens, &QSpinBox::valueChanged, this, &GenerationPanel::emitChanged);
    connect(m_topP, &QDoubleSpinBox::valueChanged, this, &GenerationPanel::emitChanged);
    connect(m_temperature, &QDoubleSpinBox::valueChanged, this, &GenerationPanel::emitChanged);
    connect(m_topK, &QSpinBox::valueChanged, this, &GenerationPanel::emitChanged);
    connect(m_doSample, &QCheckBox::toggled, this, &GenerationPanel::emitChanged);
    connect(m_repetitionPenalty, &QDoubleSpinBox::valueChanged, this, &GenerationPanel::emitChanged);
    connect(m_seed, &QSpinBox::valueChanged, this, &GenerationPanel::emitChanged);
    connect(m_fixedSeed, &QCheckBox::toggled, this, &GenerationPanel::emitChanged);
    setFreeContext(-1);
    updateEnabled();
}

GenerationParams GenerationPanel::params() const
{
    GenerationParams p;
    p.max_new_tokens = m_maxNewTokens->value();
    p.top_p = float(m_topP->value());
    p.temperature = float(m_temperature->value());
    p.top_k = m_topK->value();
    p.do_sample = m_doSample->isChecked();
    p.repetition_penalty = float(m_repetitionPenalty->value());
    p.seed = quint64(m_seed->value());
    p.random_seed = !m_fixedSeed->isChecked();
    return p;
}

void GenerationPanel::setParams(const GenerationParams &p)
{
    m_updating = true;
    m_maxNewTokens->setValue(p.max_new_tokens);
    m_topP->setValue(p.top_p);
    m_temperature->setValue(p.temperature);
    m_topK->setValue(p.top_k);
    m_doSample->setChecked(p.do_sample);
    m_repetitionPenalty->setValue(p.repetition_penalty);
    m_seed->setValue(int(std::min<quint64>(p.seed, INT_MAX)));
    m_fixedSeed->setChecked(!p.random_seed);
    m_updating = false;
    updateEnabled();
}

void GenerationPanel::setFreeContext(int freeTokens)
{
    m_free = freeTokens;
    updateRoom();
}

int GenerationPanel::effectiveMaxNewTokens() const
{
    return m_free < 0 ? m_maxNewTokens->value() : std::min(m_maxNewTokens->value(), m_free);
}

void GenerationPanel::updateRoom()
{
    // One line, always there (its row never appears or vanishes under the pointer).
    if (m_free < 0)
        m_room->setText(tr("capped to the free context"));
    else if (m_free == 0)
        m_room->setText(tr("full: older turns make way"));
    else if (m_maxNewTokens->value() > m_free)
        m_room->setText(tr("capped: %L1 tokens free now").arg(m_free));
    else
        m_room->setText(tr("%L1 tokens free in the context").arg(m_free));
    m_room->setToolTip(tr("A reply never runs past the context limit: it gets at most the tokens the context has "
                          "free after the prompt, and older turns make way for the next message"));
}

void GenerationPanel::emitChanged()
{
    updateEnabled();
    updateRoom();
    if (!m_updating)
        emit paramsChanged(params());
}

void GenerationPanel::updateEnabled()
{
    // Greedy decoding ignores the sampling knobs; say so by greying them.
    const bool sample = m_doSample->isChecked();
    for (QWidget *w : {static_cast<QWidget *>(m_topP), static_cast<QWidget *>(m_temperature),
                       static_cast<QWidget *>(m_topK), static_cast<QWidget *>(m_seed)})
        w->parentWidget() == this ? w->setEnabled(sample) : w->parentWidget()->setEnabled(sample);
    m_seed->setEnabled(m_fixedSeed->isChecked());
}

} // namespace longscope::ui
