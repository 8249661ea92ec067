// The long-context controls: the RoPE scaling method (the model's own, none, linear, NTK,
// dynamic, YaRN, llama3, LongRoPE, with a factor and an original context), NTK alpha (fixed,
// or auto with the alpha in effect shown), keys cached before RoPE, memory-efficient attention, causal flash, the KV cache mode, the
// context limit (may exceed the trained context) and the overflow policy, plus the backend
// in use and why CUDA is not. Every change is emitted at once so the worker can apply it at
// the next step; the panel then shows when it did.
#pragma once

#include "longscope/settings.h"

#include <QGroupBox>
#include <QHash>

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QSpinBox;

namespace longscope::ui {

class LongContextPanel : public QGroupBox {
    Q_OBJECT

public:
    explicit LongContextPanel(QWidget *parent = nullptr);

    longscope::Settings settings() const;
    // Emits no settingsChanged. Fields without a control here are kept and returned as set.
    void setSettings(const longscope::Settings &settings);

    // The model's own RoPE scaling ("linear x2"; empty: no model), named by the first choice of
    // the method box, and whether it carries LongRoPE factors (the LongRoPE choice is enabled
    // only then).
    void setModelScaling(const QString &own, bool hasLongRopeFactors);

    // The model's trained context (shown next to the limit; 0: no model).
    void setTrainedContext(int n_ctx_train);
    int trainedContext() const { return m_trainedContext; }
    // What the session runs on ("CPU (2 threads)", "CUDA: ..."), why CUDA is or is not usable,
    // and whether the CUDA choice may be picked (it stays disabled when the probe says no).
    void setBackend(const QString &backend, const QString &gpuStatus, bool cudaAvailable = false);
    // The alpha the last step ran with (StepMetrics::ntk_alpha).
    void setEffectiveAlpha(double alpha);
    // A remote engine: the toggles it cannot switch per request are greyed, `reason` their
    // tooltip and the line under the backend. `perRequest` (a Longscope server, which takes
    // NTK alpha, keys before RoPE, the attention switches and the KV mode as request fields)
    // leaves those enabled; the context limit, the overflow policy and the backend are the
    // server's either way. `remote` false gives the local panel back.
    void setRemote(bool remote, bool perRequest = false, const QString &reason = {});
    bool isRemote() const { return m_remote; }
    // A change was sent and waits for the next step / took effect at this token position.
    void setPending();
    void setApplied(int position);

    QComboBox *ropeScalingBox() const { return m_ropeScaling; }
    QDoubleSpinBox *ropeFactorBox() const { return m_ropeFactor; }
    QSpinBox *ropeOriginalContextBox() const { return m_ropeOrigCtx; }
    QDoubleSpinBox *alphaBox() const { return m_alpha; }
    QCheckBox *autoAlphaBox() const { return m_autoAlpha; }
    QCheckBox *keysBeforeRopeBox() const { return m_keysBeforeRope; }
    QCheckBox *memoryEfficientBox() const { return m_memoryEfficient; }
    QCheckBox *causalFlashBox() const { return m_causalFlash; }
    QComboBox *kvModeBox() const { return m_kvMode; }
    QComboBox *kvTypeKBox() const { return m_kvTypeK; }
    QComboBox *kvTypeVBox() const { return m_kvTypeV; }
    QSpinBox *contextLimitBox() const { return m_contextLimit; }
    QComboBox *overflowBox() const { return m_overflow; }
    QSpinBox *sinksBox() const { return m_sinks; }
    QComboBox *backendBox() const { return m_backendChoice; }
    QLabel *effectiveAlphaLabel() const { return m_effectiveAlpha; }
    QLabel *appliedLabel() const { return m_applied; }

signals:
    void settingsChanged(const longscope::Settings &settings);

private:
    void emitChanged();
    // Alpha off under auto, the sink count off unless the policy shifts, the factor and
    // original context off unless a method that uses them is chosen.
    void updateEnabled();
    QWidget *createRopeScalingRow();

    QComboBox *m_ropeScaling = nullptr;
    QDoubleSpinBox *m_ropeFactor = nullptr;
    QSpinBox *m_ropeOrigCtx = nullptr;
    double m_lastRopeFactor = 0.0;
    QDoubleSpinBox *m_alpha = nullptr;
    QCheckBox *m_autoAlpha = nullptr;
    QLabel *m_effectiveAlpha = nullptr;
    QCheckBox *m_keysBeforeRope = nullptr;
    QCheckBox *m_memoryEfficient = nullptr;
    QCheckBox *m_causalFlash = nullptr;
    QComboBox *m_kvMode = nullptr;
    QComboBox *m_kvTypeK = nullptr;
    QComboBox *m_kvTypeV = nullptr;
    QSpinBox *m_contextLimit = nullptr;
    QLabel *m_trained = nullptr;
    QComboBox *m_overflow = nullptr;
    QSpinBox *m_sinks = nullptr;
    QComboBox *m_backendChoice = nullptr;
    QLabel *m_backend = nullptr;
    QLabel *m_gpuStatus = nullptr;
    QLabel *m_applied = nullptr;
    longscope::Settings m_base; // fields without a control
    int m_trainedContext = 0;
    bool m_updating = false;
    bool m_remote = false;
    bool m_alphaLocked = false;
    QHash<QWidget *, QString> m_localTips; // the tooltips a remote engine replaced
};

} // namespace longscope::ui
