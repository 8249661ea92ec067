#include "widgets/long_context_panel.h"

#include "core/context_limit.h"

#include <QCheckBox>
#include <QComboBox>
#include <QStandardItemModel>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QFrame>
#include <QHBoxLayout>
#include <QLabel>
#include <QSpinBox>

#include <algorithm>
#include <utility>

namespace longscope::ui {

namespace {

// The CUDA entry of the backend box is enabled only where the probe found a usable GPU; a
// disabled entry cannot be picked, and the line under the box says why.
void setCudaChoice(QComboBox *box, bool available)
{
    auto *model = qobject_cast<QStandardItemModel *>(box->model());
    if (QStandardItem *item = model ? model->item(1) : nullptr)
        item->setEnabled(available);
}

constexpr int kMaxContextLimit = 1 << 20;
constexpr int kModelsOwnScaling = -1; // the method box's data for "the model's own"
constexpr double kMaxRopeFactor = 1024.0;

// The method box's choices: the model's own, then every method, each with what it does.
struct RopeChoice {
    int method;
    const char *label;
    const char *tip;
};
const RopeChoice k_ropeChoices[] = {
    {kModelsOwnScaling, QT_TRANSLATE_NOOP("LongContextPanel", "model's own"),
     QT_TRANSLATE_NOOP("LongContextPanel", "The scaling the model file asks for")},
    {int(RopeScalingType::None), QT_TRANSLATE_NOOP("LongContextPanel", "none"),
     QT_TRANSLATE_NOOP("LongContextPanel", "RoPE as trained, no position scaling")},
    {int(RopeScalingType::Linear), QT_TRANSLATE_NOOP("LongContextPanel", "linear"),
     QT_TRANSLATE_NOOP("LongContextPanel", "Positions divided by the factor (position interpolation)")},
    {int(RopeScalingType::Ntk), QT_TRANSLATE_NOOP("LongContextPanel", "NTK"),
     QT_TRANSLATE_NOOP("LongContextPanel", "NTK-aware base: base × factor^(d/(d−2)) at every length")},
    {int(RopeScalingType::Dynamic), QT_TRANSLATE_NOOP("LongContextPanel", "dynamic NTK"),
     QT_TRANSLATE_NOOP("LongContextPanel", "The NTK base grows once the sequence passes the original context")},
    {int(RopeScalingType::Yarn), QT_TRANSLATE_NOOP("LongContextPanel", "YaRN"),
     QT_TRANSLATE_NOOP("LongContextPanel", "Per-dimension blend of interpolation and extrapolation, with an "
                                           "attention factor")},
    {int(RopeScalingType::Llama3), QT_TRANSLATE_NOOP("LongContextPanel", "llama3"),
     QT_TRANSLATE_NOOP("LongContextPanel", "Llama 3.1: low frequencies divided by the factor, high ones kept, "
                                           "a smooth blend between")},
    {int(RopeScalingType::LongRope), QT_TRANSLATE_NOOP("LongContextPanel", "LongRoPE"),
     QT_TRANSLATE_NOOP("LongContextPanel", "Phi-3's short and long per-dimension factors (only for models that "
                                           "carry them)")},
};

// The methods whose original context matters (the others ignore it).
bool usesOriginalContext(int method)
{
    return method == int(RopeScalingType::Dynamic) || method == int(RopeScalingType::Yarn) ||
           method == int(RopeScalingType::Llama3) || method == int(RopeScalingType::LongRope);
}

QLabel *mutedLabel(QWidget *parent)
{
    auto *l = new QLabel(parent);
    l->setWordWrap(true);
    l->setTextInteractionFlags(Qt::TextSelectableByMouse);
    QPalette p = l->palette();
    p.setColor(QPalette::WindowText, p.color(QPalette::PlaceholderText));
    l->setPalette(p);
    return l;
}

} // namespace

QWidget *LongContextPanel::createRopeScalingRow()
{
    m_ropeScaling = new QComboBox(this);
    for (const RopeChoice &c : k_ropeChoices) {
        m_ropeScaling->addItem(tr(c.label), c.method);
        m_ropeScaling->setItemData(m_ropeScaling->count() - 1, tr(c.tip), Qt::ToolTipRole);
    }
    // The first entry names the model's scaling, which may be long: it does not widen the panel.
    m_ropeScaling->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
    m_ropeScaling->setMinimumContentsLength(10);
    m_ropeScaling->setToolTip(tr("How RoPE positions are scaled past the trained context; a switch applies at the "
                                 "next step"));
    m_ropeScaling->setAccessibleName(tr("RoPE scaling method"));
    m_ropeFactor = new QDoubleSpinBox(this);
    m_ropeFactor->setRange(0.0, kMaxRopeFactor);
    m_ropeFactor->setDecimals(2);
    m_ropeFactor->setSingleStep(0.5);
    m_ropeFactor->setPrefix(tr("×"));
    m_ropeFactor->setSpecialValueText(tr("model's ×"));
    m_ropeFactor->setKeyboardTracking(false);
    m_ropeFactor->setToolTip(tr("The scaling factor (at least 1); the lowest value keeps the model's own"));
    m_ropeFactor->setAccessibleName(tr("RoPE scaling factor"));
    m_ropeOrigCtx = new QSpinBox(this);
    m_ropeOrigCtx->setRange(0, kMaxContextLimit);
    m_ropeOrigCtx->setSingleStep(256);
    m_ropeOrigCtx->setPrefix(tr("from "));
    m_ropeOrigCtx->setSpecialValueText(tr("model's ctx"));
    m_ropeOrigCtx->setKeyboardTracking(false);
    m_ropeOrigCtx->setToolTip(tr("The original (pre-extension) context the method scales from, in tokens; the "
                                 "lowest value keeps the model's own (else its trained context)"));
    m_ropeOrigCtx->setAccessibleName(tr("RoPE original context"));
    auto *row = new QWidget(this);
    auto *h = new QHBoxLayout(row);
    h->setContentsMargins(0, 0, 0, 0);
    h->addWidget(m_ropeFactor, 1);
    h->addWidget(m_ropeOrigCtx, 1);

    connect(m_ropeScaling, &QComboBox::currentIndexChanged, this, &LongContextPanel::emitChanged);
    connect(m_ropeFactor, &QDoubleSpinBox::valueChanged, this, [this](double value) {
        // Factors below 1 do not exist: the step from 1 goes to "the model's", and back.
        if (value > 0.0 && value < 1.0) {
            m_ropeFactor->setValue(m_lastRopeFactor >= 1.0 ? 0.0 : 1.0);
            return;
        }
        m_lastRopeFactor = value;
        emitChanged();
    });
    connect(m_ropeOrigCtx, &QSpinBox::valueChanged, this, &LongContextPanel::emitChanged);
    return row;
}

LongContextPanel::LongContextPanel(QWidget *parent) : QGroupBox(tr("Long context"), parent)
{
    QWidget *ropeRow = createRopeScalingRow();
    m_alpha = new QDoubleSpinBox(this);
    m_alpha->setRange(1.0, 64.0);
    m_alpha->setDecimals(2);
    m_alpha->setSingleStep(0.25);
    m_alpha->setKeyboardTracking(false);
    m_alpha->setToolTip(tr("NTK-aware RoPE scaling: base' = base × α^(d/(d−2)). 1 leaves RoPE as trained."));
    m_autoAlpha = new QCheckBox(tr("auto"), this);
    m_autoAlpha->setToolTip(tr("α = max(1, 1.1 × (L / (trained context / 2) − 1)), recomputed every step"));
    m_effectiveAlpha = mutedLabel(this);
    m_effectiveAlpha->setText(tr("in effect: α = 1.00"));

    m_keysBeforeRope = new QCheckBox(tr("Cache keys before RoPE"), this);
    m_keysBeforeRope->setToolTip(tr("Keys are rotated with the current base inside attention, so cached keys stay right when α changes"));
    m_memoryEfficient = new QCheckBox(tr("Memory-efficient attention"), this);
    m_memoryEfficient->setToolTip(tr("Tiled attention with an online softmax: no score matrix, the prompt evaluated in chunks"));
    m_causalFlash = new QCheckBox(tr("Causal flash"), this);
    m_causalFlash->setToolTip(tr("Causality from positions; key tiles above the diagonal are skipped"));

    m_kvMode = new QComboBox(this);
    m_kvMode->addItem(tr("none — recompute everything"), int(KvMode::None));
    m_kvMode->addItem(tr("concat — grow by copying"), int(KvMode::Concat));
    m_kvMode->addItem(tr("static — preallocated"), int(KvMode::Static));
    m_kvMode->addItem(tr("vmm — reserved, paged in"), int(KvMode::Vmm));
    m_kvMode->setToolTip(tr("How the KV cache holds keys and values; switching migrates the cache"));

    // Keys and values are stored in a type each; a switch converts the cached rows at the
    // next step (the memory plot shows the new size).
    const auto kvTypeBox = [this](const QString &what) {
        auto *box = new QComboBox(this);
        box->addItem(tr("f32 — exact"), int(KvType::F32));
        box->addItem(tr("f16 — half"), int(KvType::F16));
        box->addItem(tr("q8_0 — 8.5 bits"), int(KvType::Q8_0));
        box->addItem(tr("q4_0 — 4.5 bits"), int(KvType::Q4_0));
        box->setToolTip(tr("How cached %1 are stored; quantized types need a head size that is a multiple of 32 "
                           "and the CPU backend").arg(what));
        return box;
    };
    m_kvTypeK = kvTypeBox(tr("keys"));
    m_kvTypeV = kvTypeBox(tr("values"));

    m_contextLimit = new QSpinBox(this);
    m_contextLimit->setRange(0, kMaxContextLimit);
    m_contextLimit->setSingleStep(256);
    m_contextLimit->setSuffix(tr(" tokens"));
    m_contextLimit->setSpecialValueText(tr("model default"));
    // Typing "4096" must not send 4, 40 and 409 to a running generation on the way.
    m_contextLimit->setKeyboardTracking(false);
    m_contextLimit->setToolTip(tr("The context limit; it may exceed the trained context (use NTK α then)"));
    m_trained = mutedLabel(this);

    m_overflow = new QComboBox(this);
    m_overflow->addItem(tr("Error"), int(OverflowPolicy::Error));
    m_overflow->addItem(tr("Keep head and tail"), int(OverflowPolicy::HeadTail));
    m_overflow->addItem(tr("Drop oldest turns"), int(OverflowPolicy::DropOldestTurns));
    m_overflow->addItem(tr("Shift, keeping sinks"), int(OverflowPolicy::Shift));
    m_overflow->setToolTip(tr("What happens when a prompt does not fit in the context limit"));
    m_sinks = new QSpinBox(this);
    m_sinks->setRange(0, kMaxContextLimit - 1);
    m_sinks->setSuffix(tr(" sink tokens"));
    m_sinks->setKeyboardTracking(false);
    m_sinks->setToolTip(tr("Shift: the first tokens are never dropped (attention sinks); when the context is full, "
                           "half of the rest goes, oldest first, and chat and streaming go on"));

    m_backendChoice = new QComboBox(this);
    m_backendChoice->addItem(tr("CPU"), int(ComputeBackend::Cpu));
    m_backendChoice->addItem(tr("CUDA (GPU)"), int(ComputeBackend::Cuda));
    m_backendChoice->setToolTip(tr("Where the model runs; a switch moves the context to the other backend at the next step"));
    setCudaChoice(m_backendChoice, false);

    m_backend = new QLabel(tr("no model"), this);
    m_backend->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_backend->setWordWrap(true);
    m_gpuStatus = mutedLabel(this);

    m_applied = mutedLabel(this);
    // Never empty: a line that appeared with the first change would push the rows below it
    // from under the pointer.
    m_applied->setText(tr("No change pending"));
    m_alpha->setAccessibleName(tr("NTK alpha"));
    m_kvMode->setAccessibleName(tr("KV cache"));
    m_contextLimit->setAccessibleName(tr("Context limit"));
    m_overflow->setAccessibleName(tr("On overflow"));
    m_backendChoice->setAccessibleName(tr("Backend"));

    auto *alphaRow = new QWidget(this);
    auto *ah = new QHBoxLayout(alphaRow);
    ah->setContentsMargins(0, 0, 0, 0);
    ah->addWidget(m_alpha, 1);
    ah->addWidget(m_autoAlpha);

    auto *form = new QFormLayout(this);
    form->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);
    form->addRow(tr("RoPE scaling"), m_ropeScaling);
    form->addRow(QString(), ropeRow);
    form->addRow(tr("NTK alpha"), alphaRow);
    form->addRow(QString(), m_effectiveAlpha);
    form->addRow(QString(), m_keysBeforeRope);
    form->addRow(QString(), m_memoryEfficient);
    form->addRow(QString(), m_causalFlash);
    form->addRow(tr("KV cache"), m_kvMode);
    form->addRow(tr("Cached keys"), m_kvTypeK);
    form->addRow(tr("Cached values"), m_kvTypeV);
    form->addRow(tr("Context limit"), m_contextLimit);
    form->addRow(QString(), m_trained);
    form->addRow(tr("On overflow"), m_overflow);
    form->addRow(QString(), m_sinks);
    auto *line = new QFrame(this);
    line->setFrameShape(QFrame::HLine);
    line->setFrameShadow(QFrame::Sunken);
    form->addRow(line);
    form->addRow(tr("Backend"), m_backendChoice);
    form->addRow(QString(), m_backend);
    form->addRow(QString(), m_gpuStatus);
    form->addRow(QString(), m_applied);

    connect(m_alpha, &QDoubleSpinBox::valueChanged, this, &LongContextPanel::emitChanged);
    connect(m_autoAlpha, &QCheckBox::toggled, this, &LongContextPanel::emitChanged);
    connect(m_keysBeforeRope, &QCheckBox::toggled, this, &LongContextPanel::emitChanged);
    connect(m_memoryEfficient, &QCheckBox::toggled, this, &LongContextPanel::emitChanged);
    connect(m_causalFlash, &QCheckBox::toggled, this, &LongContextPanel::emitChanged);
    connect(m_kvMode, &QComboBox::currentIndexChanged, this, &LongContextPanel::emitChanged);
    connect(m_kvTypeK, &QComboBox::currentIndexChanged, this, &LongContextPanel::emitChanged);
    connect(m_kvTypeV, &QComboBox::currentIndexChanged, this, &LongContextPanel::emitChanged);
    connect(m_contextLimit, &QSpinBox::valueChanged, this, &LongContextPanel::emitChanged);
    connect(m_overflow, &QComboBox::currentIndexChanged, this, &LongContextPanel::emitChanged);
    connect(m_sinks, &QSpinBox::valueChanged, this, &LongContextPanel::emitChanged);
    connect(m_backendChoice, &QComboBox::currentIndexChanged, this, &LongContextPanel::emitChanged);

    setSettings(longscope::Settings{});
    setTrainedContext(0);
}

longscope::Settings LongContextPanel::settings() const
{
    longscope::Settings s = m_base;
    const int method = m_ropeScaling->currentData().toInt();
    s.rope.scaling = method == kModelsOwnScaling ? std::nullopt : std::optional(RopeScalingType(method));
    s.rope.scaling_factor = s.rope.scaling && method != int(RopeScalingType::None) ? float(m_ropeFactor->value()) : 0.0f;
    s.rope.scaling_orig_ctx = s.rope.scaling && usesOriginalContext(method) ? m_ropeOrigCtx->value() : 0;
    s.rope.ntk_alpha = float(m_alpha->value());
    s.rope.ntk_auto = m_autoAlpha->isChecked();
    s.rope.store_kv_before_rope = m_keysBeforeRope->isChecked();
    s.attention.memory_efficient = m_memoryEfficient->isChecked();
    s.attention.causal_flash = m_causalFlash->isChecked();
    s.kv_mode = KvMode(m_kvMode->currentData().toInt());
    s.kv_type_k = KvType(m_kvTypeK->currentData().toInt());
    s.kv_type_v = KvType(m_kvTypeV->currentData().toInt());
    s.context_limit = m_contextLimit->value();
    s.overflow = OverflowPolicy(m_overflow->currentData().toInt());
    s.sink_tokens = m_sinks->value();
    s.backend = ComputeBackend(m_backendChoice->currentData().toInt());
    return s;
}

void LongContextPanel::setSettings(const longscope::Settings &s)
{
    m_updating = true;
    m_base = s;
    const int method = m_ropeScaling->findData(s.rope.scaling ? int(*s.rope.scaling) : kModelsOwnScaling);
    m_ropeScaling->setCurrentIndex(method < 0 ? 0 : method);
    m_ropeFactor->setValue(s.rope.scaling_factor >= 1.0f ? std::min(kMaxRopeFactor, double(s.rope.scaling_factor)) : 0.0);
    m_lastRopeFactor = m_ropeFactor->value();
    m_ropeOrigCtx->setValue(std::clamp(s.rope.scaling_orig_ctx, 0, kMaxContextLimit));
    m_alpha->setValue(std::max(1.0, double(s.rope.ntk_alpha)));
    m_autoAlpha->setChecked(s.rope.ntk_auto);
    m_keysBeforeRope->setChecked(s.rope.store_kv_before_rope);
    m_memoryEfficient->setChecked(s.attention.memory_efficient);
    m_causalFlash->setChecked(s.attention.causal_flash);
    const int kv = m_kvMode->findData(int(s.kv_mode));
    m_kvMode->setCurrentIndex(kv < 0 ? 2 : kv);
    for (const auto &[box, type] : {std::pair{m_kvTypeK, s.kv_type_k}, std::pair{m_kvTypeV, s.kv_type_v}}) {
        const int i = box->findData(int(type));
        box->setCurrentIndex(i < 0 ? 0 : i);
    }
    m_contextLimit->setValue(std::clamp(s.context_limit, 0, kMaxContextLimit));
    const int ov = m_overflow->findData(int(s.overflow));
    m_overflow->setCurrentIndex(ov < 0 ? 0 : ov);
    m_sinks->setValue(std::clamp(s.sink_tokens, 0, kMaxContextLimit - 1));
    const int be = m_backendChoice->findData(int(s.backend));
    m_backendChoice->setCurrentIndex(be < 0 ? 0 : be);
    m_updating = false;
    updateEnabled();
}

void LongContextPanel::setModelScaling(const QString &own, bool hasLongRopeFactors)
{
    m_ropeScaling->setItemText(0, own.isEmpty() ? tr(k_ropeChoices[0].label)
                                                : tr("model's own: %1").arg(own));
    m_ropeScaling->setItemData(0, own.isEmpty() ? tr(k_ropeChoices[0].tip) : tr("The model file asks for %1").arg(own),
                               Qt::ToolTipRole);
    auto *model = qobject_cast<QStandardItemModel *>(m_ropeScaling->model());
    if (QStandardItem *item = model ? model->item(m_ropeScaling->findData(int(RopeScalingType::LongRope))) : nullptr)
        item->setEnabled(hasLongRopeFactors);
}

void LongContextPanel::setTrainedContext(int n)
{
    m_trainedContext = n;
    if (n <= 0) {
        m_trained->setText(tr("trained context: no model loaded"));
        m_contextLimit->setSpecialValueText(tr("model default"));
        return;
    }
    const int def = defaultContextLimit(n);
    m_trained->setText(tr("trained context: %L1 tokens").arg(n));
    m_contextLimit->setSpecialValueText(tr("default (%L1)").arg(def));
}

void LongContextPanel::setBackend(const QString &backend, const QString &gpuStatus, bool cudaAvailable)
{
    setCudaChoice(m_backendChoice, cudaAvailable);
    m_backend->setText(backend.isEmpty() ? tr("no model") : backend);
    m_gpuStatus->setText(gpuStatus);
    m_gpuStatus->setVisible(!gpuStatus.isEmpty());
}

void LongContextPanel::setEffectiveAlpha(double alpha)
{
    m_effectiveAlpha->setText(tr("in effect: α = %1").arg(alpha, 0, 'f', 2));
}

void LongContextPanel::setPending()
{
    m_applied->setText(tr("Change sent: applies at the next step"));
}

void LongContextPanel::setApplied(int position)
{
    m_applied->setText(tr("✓ Applied at token %L1").arg(position));
}

void LongContextPanel::emitChanged()
{
    updateEnabled();
    if (m_updating)
        return;
    emit settingsChanged(settings());
}

void LongContextPanel::updateEnabled()
{
    m_alpha->setEnabled(!m_autoAlpha->isChecked() && !m_alphaLocked);
    const int method = m_ropeScaling->currentData().toInt();
    const bool ropeLocked = m_remote && !m_ropeScaling->isEnabled();
    m_ropeFactor->setEnabled(!ropeLocked && method != kModelsOwnScaling && method != int(RopeScalingType::None));
    m_ropeOrigCtx->setEnabled(!ropeLocked && usesOriginalContext(method));
    m_sinks->setEnabled(OverflowPolicy(m_overflow->currentData().toInt()) == OverflowPolicy::Shift && !m_remote);
}

void LongContextPanel::setRemote(bool remote, bool perRequest, const QString &reason)
{
    m_remote = remote;
    const QString fixed = tr("Fixed by the server when it starts");
    const QList<QWidget *> perRequestToggles{m_alpha, m_autoAlpha, m_keysBeforeRope, m_memoryEfficient, m_causalFlash,
                                             m_kvMode};
    // The RoPE method is not sent with remote requests (yet): the server's, like the limit.
    const QList<QWidget *> serverOwned{m_ropeScaling, m_ropeFactor, m_ropeOrigCtx, m_contextLimit, m_overflow,
                                       m_sinks,       m_kvTypeK,    m_kvTypeV,     m_backendChoice};
    auto lock = [&](QWidget *w, bool locked, const QString &why) {
        if (!m_localTips.contains(w))
            m_localTips.insert(w, w->toolTip());
        w->setEnabled(!locked);
        w->setToolTip(locked ? why : m_localTips.value(w));
    };
    for (QWidget *w : perRequestToggles)
        lock(w, remote && !perRequest, reason.isEmpty() ? fixed : reason);
    for (QWidget *w : serverOwned)
        lock(w, remote, fixed);
    m_alphaLocked = remote && !perRequest;
    updateEnabled();
    m_applied->setText(remote ? (perRequest ? tr("Remote server: these switches go with each request; the context "
                                                 "limit and backend are the server's")
                                            : reason)
                              : QString());
}

} // namespace longscope::ui
