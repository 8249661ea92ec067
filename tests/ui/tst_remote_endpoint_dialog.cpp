// Adding a remote server in the app: the dialog fetches the models of a real `longscope-cli
// serve` with the URL and key typed, says why when it cannot, and on OK keeps the key in
// the secret store and only the URL and model in the endpoint (what the settings hold).
#include "offscreen.h"

#include <QComboBox>
#include <QJsonDocument>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSignalSpy>
#include <QtTest>

#include "../cli/serve_process.h"
#include "focus_chain.h"
#include "widgets/remote_endpoint_dialog.h"

using namespace longscope::ui;

class TestRemoteEndpointDialog : public QObject {
    Q_OBJECT

    longscope::test::ServeProcess m_server;
    QByteArray m_key = m_server.key("sk-dialog-test");

private slots:
    void initTestCase()
    {
        QVERIFY2(m_server.start({"--ctx", "512", "--api-key", "sk-dialog-test", "--threads", "1"}),
                 m_server.log().constData());
    }

    void wrong_key_says_so()
    {
        MemorySecretStore store;
        RemoteEndpointDialog d(store);
        d.urlEdit()->setText(m_server.url() + "/v1");
        d.keyEdit()->setText("sk-wrong");
        d.fetchButton()->click();
        QTRY_VERIFY_WITH_TIMEOUT(d.statusLabel()->text().contains("401"), 10000);
        QVERIFY(!d.okButton()->isEnabled());
        QCOMPARE(d.modelBox()->count(), 0);
    }

    void models_fetched_and_key_stored_apart()
    {
        MemorySecretStore store;
        RemoteEndpointDialog d(store);
        d.urlEdit()->setText(m_server.url() + "/v1");
        QCOMPARE(d.keyEdit()->echoMode(), QLineEdit::Password);
        d.keyEdit()->setText(QString::fromLatin1(m_key));
        d.fetchButton()->click();
        QTRY_VERIFY_WITH_TIMEOUT(d.modelBox()->count() == 1, 10000);
        QVERIFY(d.okButton()->isEnabled());
        const QString model = d.modelBox()->currentData().toString();
        if (m_server.kind() == QLatin1String("longscope")) {
            QCOMPARE(model, QStringLiteral("stories260K"));
            QVERIFY(d.modelBox()->currentText().contains("context 512"));
        }

        QSignalSpy accepted(&d, &QDialog::accepted);
        d.okButton()->click();
        QTRY_COMPARE(accepted.size(), 1);
        const RemoteEndpoint e = d.endpoint();
        QCOMPARE(e.base_url, m_server.url() + "/v1");
        QCOMPARE(e.model, model);
        QVERIFY(e.has_key);
        QString stored;
        store.read(e.base_url, [&](const QString &s, const QString &) { stored = s; });
        QTRY_COMPARE(stored, QString::fromLatin1(m_key));
        QVERIFY(!QJsonDocument(endpointsToJson({e})).toJson().contains(m_key));

        // Editing it again reads the key back from the store.
        RemoteEndpointDialog again(store);
        again.setEndpoint(e);
        QTRY_COMPARE(again.keyEdit()->text(), QString::fromLatin1(m_key));
        QCOMPARE(again.modelBox()->currentData().toString(), model);
    }

    // Every control of the dialog is reached by Tab, top to bottom, and has a name for a
    // screen reader (the models box and Fetch once there are models to choose).
    void keyboard_reaches_every_named_control()
    {
        using namespace longscope::test;
        MemorySecretStore store;
        RemoteEndpointDialog d(store);
        d.show();
        d.urlEdit()->setText(m_server.url() + "/v1");
        d.keyEdit()->setText(QString::fromLatin1(m_key));
        d.fetchButton()->click();
        QTRY_VERIFY_WITH_TIMEOUT(d.modelBox()->count() == 1, 10000);
        const QList<QWidget *> chain = tabChain(&d);
        for (QWidget *c : {static_cast<QWidget *>(d.urlEdit()), static_cast<QWidget *>(d.keyEdit()),
                           static_cast<QWidget *>(d.modelBox()), static_cast<QWidget *>(d.fetchButton()),
                           static_cast<QWidget *>(d.okButton())})
            QVERIFY2(chain.contains(c), qPrintable(describeControl(c)));
        QVERIFY2(unnamedControls(chain).isEmpty(), qPrintable(unnamedControls(chain).join(QStringLiteral(", "))));
        QVERIFY2(tabOrderProblems(chain, &d).isEmpty(), qPrintable(tabOrderProblems(chain, &d).join(QStringLiteral("; "))));
    }

    void cleanupTestCase() { m_server.stop(); }
};

QTEST_MAIN(TestRemoteEndpointDialog)
#include "tst_remote_endpoint_dialog.moc"
