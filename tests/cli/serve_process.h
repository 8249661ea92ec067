// `longscope-cli serve` started as a user starts it (QProcess, a free loopback port, stopped
// with SIGTERM), and blocking HTTP calls to it over QNetworkAccessManager, for the suites of
// the remote client and the server's metrics.
#pragma once

#include <QByteArray>
#include <QElapsedTimer>
#include <QEventLoop>
#include <QJsonDocument>
#include <QJsonObject>
#include <QNetworkAccessManager>
#include <QNetworkReply>
#include <QNetworkRequest>
#include <QProcess>
#include <QProcessEnvironment>
#include <QRegularExpression>
#include <QStringList>
#include <QTimer>
#include <QUrl>

namespace longscope::test {

// The server the client suites talk to: `longscope-cli serve` started here, or, when
// $LONGSCOPE_TEST_REMOTE_URL is set (scripts/check-remote-llama-cpp), a server already running
// on loopback, of the kind $LONGSCOPE_TEST_REMOTE_KIND names ("llama.cpp"), whose key is
// $LONGSCOPE_TEST_REMOTE_KEY. Checks that need Longscope's own answers skip on another server.
class ServeProcess {
public:
    ServeProcess() : m_external(qEnvironmentVariable("LONGSCOPE_TEST_REMOTE_URL")) {}
    ServeProcess(const ServeProcess &) = delete;
    ServeProcess &operator=(const ServeProcess &) = delete;
    ~ServeProcess() { stop(); }

    // Starts it with `args` after "serve --port 0"; false (the log says why) when it does not
    // listen within 30 s.
    bool start(const QStringList &args)
    {
        if (external())
            return true;
        QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
        env.remove("LONGSCOPE_MODEL");
        env.remove("LONGSCOPE_API_KEY");
        m_process.setProcessEnvironment(env);
        m_process.setProcessChannelMode(QProcess::SeparateChannels);
        m_process.start(QStringLiteral(LONGSCOPE_CLI_PATH), QStringList{"serve", "--port", "0"} + args);
        if (!m_process.waitForStarted())
            return false;
        static const QRegularExpression listening(R"(listening on http://127\.0\.0\.1:(\d+))");
        QElapsedTimer t;
        t.start();
        while (t.elapsed() < 30000 && m_process.state() != QProcess::NotRunning) {
            m_process.waitForReadyRead(50);
            m_log += m_process.readAllStandardError();
            const auto m = listening.match(QString::fromUtf8(m_log));
            if (m.hasMatch()) {
                m_port = m.captured(1).toInt();
                return true;
            }
        }
        return false;
    }

    void stop()
    {
        if (m_process.state() == QProcess::NotRunning)
            return;
        m_process.terminate();
        if (!m_process.waitForFinished(15000)) {
            m_process.kill();
            m_process.waitForFinished();
        }
    }

    int port() const { return m_port; }
    QString url() const { return external() ? m_external : QStringLiteral("http://127.0.0.1:%1").arg(m_port); }
    bool external() const { return !m_external.isEmpty(); }
    // "longscope", or the kind of the external server.
    QString kind() const { return external() ? qEnvironmentVariable("LONGSCOPE_TEST_REMOTE_KIND") : "longscope"; }
    // The key the server expects: `own` for the one started here.
    QByteArray key(const QByteArray &own) const
    {
        return external() ? qEnvironmentVariable("LONGSCOPE_TEST_REMOTE_KEY").toUtf8() : own;
    }
    QByteArray log()
    {
        m_log += m_process.readAllStandardError();
        return m_log;
    }

private:
    QString m_external;
    QProcess m_process;
    QByteArray m_log;
    int m_port = 0;
};

struct HttpReply {
    int status = 0; // 0: no answer
    QByteArray body;
    QJsonObject json() const { return QJsonDocument::fromJson(body).object(); }
};

// One request (GET without a body, POST with one), waited for at most `timeout_ms`.
inline HttpReply http(const QString &url, const QByteArray &body = {}, const QByteArray &key = {},
                      int timeout_ms = 60000)
{
    QNetworkAccessManager nam;
    QNetworkRequest rq{QUrl(url)};
    rq.setHeader(QNetworkRequest::ContentTypeHeader, "application/json");
    if (!key.isEmpty())
        rq.setRawHeader("Authorization", "Bearer " + key);
    QNetworkReply *reply = body.isEmpty() ? nam.get(rq) : nam.post(rq, body);
    QEventLoop loop;
    QObject::connect(reply, &QNetworkReply::finished, &loop, &QEventLoop::quit);
    QTimer::singleShot(timeout_ms, &loop, &QEventLoop::quit);
    loop.exec();
    HttpReply r;
    if (reply->isFinished()) {
        r.status = reply->attribute(QNetworkRequest::HttpStatusCodeAttribute).toInt();
        r.body = reply->readAll();
    }
    reply->abort();
    reply->deleteLater();
    return r;
}

} // namespace longscope::test
