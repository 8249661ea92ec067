// The generation controls of gradio_demo's right column: Max New Tokens, Top P,
// Temperature, Top K, Do Sample, Repetition Penalty, plus a Seed.
#pragma once

#include "core/engine_worker.h"

#include <QGroupBox>

class QCheckBox;
class QDoubleSpinBox;
class QLabel;
class QSlider;
class QSpinBox;

namespace longscope::ui {

class GenerationPanel : public QGroupBox {
    Q_OBJECT

public:
    explicit GenerationPanel(QWidget *parent = nullptr);

    GenerationParams params() const;
    // Values are clamped to the controls' ranges; emits no paramsChanged.
    void setParams(const GenerationParams &params);

    QSpinBox *maxNewTokensBox() const { return m_maxNewTokens; }
    QDoubleSpinBox *temperatureBox() const { return m_temperature; }
    QCheckBox *doSampleBox() const { return m_doSample; }
    QSpinBox *seedBox() const { return m_seed; }
    QCheckBox *fixedSeedBox() const { return m_fixedSeed; }
    QLabel *roomLabel() const { return m_room; }

    // The tokens the context has free now (-1: unknown, no model): Max new tokens is shown
    // capped to them.
    void setFreeContext(int freeTokens);
    // Max new tokens as a reply gets it now: capped to the free context.
    int effectiveMaxNewTokens() const;

signals:
    void paramsChanged(const longscope::ui::GenerationParams &params);

private:
    void emitChanged();
    void updateEnabled();
    void updateRoom();

    QSpinBox *m_maxNewTokens = nullptr;
    QDoubleSpinBox *m_topP = nullptr;
    QDoubleSpinBox *m_temperature = nullptr;
    QSpinBox *m_topK = nullptr;
    QCheckBox *m_doSample = nullptr;
    QDoubleSpinBox *m_repetitionPenalty = nullptr;
    QSpinBox *m_seed = nullptr;
    QCheckBox *m_fixedSeed = nullptr;
    QLabel *m_room = nullptr;
    int m_free = -1;
    bool m_updating = false;
};

} // namespace longscope::ui
