// A loopback HTTP server that answers every request with one canned response, for the
// client's failures (errors, dropped streams, silence) without a real server.
#pragma once

#include <QByteArray>
#include <QHostAddress>
#include <QList>
#include <QString>
#include <QTcpServer>
#include <QTcpSocket>

namespace longscope::test {

// Answers every connection with `response` (then closes), or with nothing when it is empty.
class CannedServer : public QTcpServer {
public:
    explicit CannedServer(QByteArray response) : m_response(std::move(response))
    {
        connect(this, &QTcpServer::newConnection, this, [this] {
            while (QTcpSocket *s = nextPendingConnection()) {
                m_sockets.push_back(s);
                connect(s, &QTcpSocket::readyRead, s, [this, s] {
                    s->readAll();
                    if (m_response.isEmpty())
                        return; // silent
                    s->write(m_response);
                    s->flush();
                    s->disconnectFromHost();
                });
            }
        });
        listen(QHostAddress::LocalHost);
    }
    QString url() const { return QStringLiteral("http://127.0.0.1:%1").arg(serverPort()); }

private:
    QByteArray m_response;
    QList<QTcpSocket *> m_sockets;
};

inline QByteArray http_response(int status, const QByteArray &type, const QByteArray &body, bool close_early = false)
{
    QByteArray r = "HTTP/1.1 " + QByteArray::number(status) + " X\r\nContent-Type: " + type + "\r\n";
    if (close_early) // a stream the server drops: chunked, never finished
        return r + "Transfer-Encoding: chunked\r\n\r\n" + QByteArray::number(body.size(), 16) + "\r\n" + body + "\r\n";
    return r + "Content-Length: " + QByteArray::number(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
}

} // namespace longscope::test
