// The long-context panel with a remote engine: what the server cannot switch per request is
// greyed with the reason; a Longscope server keeps the per-request switches; going back to a
// local model restores the panel as it was.
#include "offscreen.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QLabel>
#include <QSpinBox>
#include <QtTest>

#include "widgets/long_context_panel.h"

using longscope::ui::LongContextPanel;

class TestLongContextRemote : public QObject {
    Q_OBJECT

private slots:
    void remote_greys_what_the_server_fixes()
    {
        LongContextPanel p;
        const QString kvTip = p.kvModeBox()->toolTip();
        QVERIFY(p.kvModeBox()->isEnabled() && p.alphaBox()->isEnabled());

        const QString why = QStringLiteral("vLLM fixes RoPE scaling when it starts");
        p.setRemote(true, false, why);
        QVERIFY(p.isRemote());
        for (QWidget *w : QList<QWidget *>{p.alphaBox(), p.autoAlphaBox(), p.keysBeforeRopeBox(), p.memoryEfficientBox(),
                                           p.causalFlashBox(), p.kvModeBox()}) {
            QVERIFY(!w->isEnabled());
            QCOMPARE(w->toolTip(), why);
        }
        for (QWidget *w : QList<QWidget *>{p.contextLimitBox(), p.overflowBox(), p.backendBox(), p.ropeScalingBox(),
                                           p.ropeFactorBox(), p.ropeOriginalContextBox()})
            QVERIFY(!w->isEnabled());
        QCOMPARE(p.appliedLabel()->text(), why);
        // Unchecking auto alpha must not bring the alpha box back while remote.
        p.autoAlphaBox()->setChecked(true);
        p.autoAlphaBox()->setChecked(false);
        QVERIFY(!p.alphaBox()->isEnabled());
        // Nor choosing a method the factor box.
        p.ropeScalingBox()->setCurrentIndex(p.ropeScalingBox()->findData(int(longscope::RopeScalingType::Yarn)));
        QVERIFY(!p.ropeFactorBox()->isEnabled() && !p.ropeOriginalContextBox()->isEnabled());

        // A Longscope server: the per-request switches come back, the server's own stay grey.
        p.setRemote(true, true);
        QVERIFY(p.kvModeBox()->isEnabled() && p.alphaBox()->isEnabled() && p.causalFlashBox()->isEnabled());
        // The RoPE method is not sent with requests: it stays the server's.
        QVERIFY(!p.ropeScalingBox()->isEnabled() && !p.ropeFactorBox()->isEnabled() &&
                !p.ropeOriginalContextBox()->isEnabled());
        QCOMPARE(p.kvModeBox()->toolTip(), kvTip);
        QVERIFY(!p.contextLimitBox()->isEnabled() && !p.backendBox()->isEnabled());

        p.setRemote(false);
        QVERIFY(!p.isRemote());
        QVERIFY(p.contextLimitBox()->isEnabled() && p.backendBox()->isEnabled() && p.kvModeBox()->isEnabled());
        // Local again with YaRN chosen: the method, its factor and original context.
        QVERIFY(p.ropeScalingBox()->isEnabled() && p.ropeFactorBox()->isEnabled() &&
                p.ropeOriginalContextBox()->isEnabled());
        QCOMPARE(p.kvModeBox()->toolTip(), kvTip);
        QVERIFY(p.appliedLabel()->text().isEmpty());
    }
};

QTEST_MAIN(TestLongContextRemote)
#include "tst_long_context_remote.moc"
