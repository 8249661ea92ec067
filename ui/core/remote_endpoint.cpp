#include "core/remote_endpoint.h"

#include <QJsonObject>
#include <QTimer>

#include <qt6keychain/keychain.h>

namespace longscope::ui {

namespace {

const QString k_service = QStringLiteral("Longscope");

// Answers on the event loop, as the keychain does, so callers see one behaviour.
void later(std::function<void()> f) { QTimer::singleShot(0, [f = std::move(f)] { f(); }); }

QString job_error(const QKeychain::Job *job)
{
    return QStringLiteral("the system keychain failed: %1").arg(job->errorString());
}

} // namespace

QJsonArray endpointsToJson(const QVector<RemoteEndpoint> &endpoints)
{
    QJsonArray out;
    for (const RemoteEndpoint &e : endpoints)
        out.append(QJsonObject{{"base_url", e.base_url}, {"model", e.model}, {"has_key", e.has_key}});
    return out;
}

QVector<RemoteEndpoint> endpointsFromJson(const QJsonArray &array)
{
    QVector<RemoteEndpoint> out;
    for (const QJsonValue &v : array) {
        const QJsonObject o = v.toObject();
        if (!o["base_url"].isString() || o["base_url"].toString().isEmpty())
            continue;
        out.push_back({o["base_url"].toString(), o["model"].toString(), o["has_key"].toBool()});
    }
    return out;
}

void KeychainStore::write(const QString &url, const QString &secret, Done done)
{
    auto *job = new QKeychain::WritePasswordJob(k_service);
    job->setKey(url);
    job->setTextData(secret);
    QObject::connect(job, &QKeychain::Job::finished, [done](QKeychain::Job *j) {
        done(j->error() == QKeychain::NoError ? QString() : job_error(j));
    });
    job->start();
}

void KeychainStore::read(const QString &url, Read done)
{
    auto *job = new QKeychain::ReadPasswordJob(k_service);
    job->setKey(url);
    QObject::connect(job, &QKeychain::Job::finished, [done](QKeychain::Job *j) {
        if (j->error() == QKeychain::EntryNotFound)
            done({}, {});
        else if (j->error() != QKeychain::NoError)
            done({}, job_error(j));
        else
            done(static_cast<QKeychain::ReadPasswordJob *>(j)->textData(), {});
    });
    job->start();
}

void KeychainStore::remove(const QString &url, Done done)
{
    auto *job = new QKeychain::DeletePasswordJob(k_service);
    job->setKey(url);
    QObject::connect(job, &QKeychain::Job::finished, [done](QKeychain::Job *j) {
        done(j->error() == QKeychain::NoError || j->error() == QKeychain::EntryNotFound ? QString() : job_error(j));
    });
    job->start();
}

void MemorySecretStore::write(const QString &url, const QString &secret, Done done)
{
    m_secrets[url] = secret;
    later([done] { done({}); });
}

void MemorySecretStore::read(const QString &url, Read done)
{
    auto it = m_secrets.find(url);
    const QString secret = it == m_secrets.end() ? QString() : it->second;
    later([done, secret] { done(secret, {}); });
}

void MemorySecretStore::remove(const QString &url, Done done)
{
    m_secrets.erase(url);
    later([done] { done({}); });
}

} // namespace longscope::ui
