// Adding a remote engine: the server's base URL, its API key (kept in the secret store, the
// system keychain in the app, never in the settings) and a model picked from the server's
// /v1/models, fetched with the URL and key as typed.
#pragma once

#include "core/remote_endpoint.h"
#include "core/remote_worker.h"

#include <QDialog>

class QComboBox;
class QLabel;
class QLineEdit;
class QPushButton;

namespace longscope::ui {

class RemoteEndpointDialog : public QDialog {
    Q_OBJECT

public:
    explicit RemoteEndpointDialog(SecretStore &store, QWidget *parent = nullptr);

    // An endpoint to edit: its URL and model (its key is read from the store).
    void setEndpoint(const RemoteEndpoint &endpoint);
    // After accept(): the URL, the model picked, and whether a key was stored.
    RemoteEndpoint endpoint() const;

    QLineEdit *urlEdit() const { return m_url; }
    QLineEdit *keyEdit() const { return m_key; }
    QComboBox *modelBox() const { return m_models; }
    QPushButton *fetchButton() const { return m_fetch; }
    QPushButton *okButton() const { return m_ok; }
    QLabel *statusLabel() const { return m_status; }

public slots:
    // GET /v1/models with the URL and key as typed.
    void fetchModels();
    // Stores the key (or removes it when the field is empty), then closes.
    void accept() override;

private:
    void showModels(const QVector<RemoteModelInfo> &models);

    SecretStore &m_store;
    RemoteWorker m_worker;
    QLineEdit *m_url = nullptr;
    QLineEdit *m_key = nullptr;
    QComboBox *m_models = nullptr;
    QPushButton *m_fetch = nullptr;
    QPushButton *m_ok = nullptr;
    QLabel *m_status = nullptr;
    RemoteEndpoint m_endpoint;
};

} // namespace longscope::ui
