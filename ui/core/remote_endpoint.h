// Remote engines the app drives instead of a local model file: OpenAI-compatible servers
// (vLLM, SGLang, TGI, llama.cpp's llama-server, `longscope-cli serve`). An endpoint is a base
// URL and a model name, kept in the settings; its API key is kept apart, in the system
// keychain (QtKeychain), and never written to the settings.
#pragma once

#include <QJsonArray>
#include <QObject>
#include <QString>
#include <QVector>

#include <functional>
#include <map>

namespace longscope::ui {

struct RemoteEndpoint {
    QString base_url; // as the user typed it: http://HOST:PORT or .../v1
    QString model;    // picked from the server's /v1/models
    bool has_key = false; // a key is in the keychain for this URL
};

// The endpoints as they go into the settings (no key, whatever the endpoint holds), and back;
// entries that are not objects with a base_url are skipped.
QJsonArray endpointsToJson(const QVector<RemoteEndpoint> &endpoints);
QVector<RemoteEndpoint> endpointsFromJson(const QJsonArray &array);

// Where API keys are kept, by endpoint URL. Asynchronous, as the system keychain is: each
// call answers once through its callback (on the calling thread's event loop), with the
// error as a sentence when it failed.
class SecretStore {
public:
    virtual ~SecretStore() = default;
    using Done = std::function<void(const QString &error)>;
    using Read = std::function<void(const QString &secret, const QString &error)>;
    virtual void write(const QString &url, const QString &secret, Done done) = 0;
    virtual void read(const QString &url, Read done) = 0; // "" without error: none stored
    virtual void remove(const QString &url, Done done) = 0;
};

// The system keychain through QtKeychain (the Secret Service or KWallet on Linux, the
// Keychain on macOS, the Credential Store on Windows), service "Longscope".
class KeychainStore : public SecretStore {
public:
    void write(const QString &url, const QString &secret, Done done) override;
    void read(const QString &url, Read done) override;
    void remove(const QString &url, Done done) override;
};

// In memory, for the tests and for a session that must not touch the keychain.
class MemorySecretStore : public SecretStore {
public:
    void write(const QString &url, const QString &secret, Done done) override;
    void read(const QString &url, Read done) override;
    void remove(const QString &url, Done done) override;

private:
    std::map<QString, QString> m_secrets;
};

} // namespace longscope::ui
