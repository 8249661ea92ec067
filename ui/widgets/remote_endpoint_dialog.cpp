#include "widgets/remote_endpoint_dialog.h"

#include <QComboBox>
#include <QDialogButtonBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>

namespace longscope::ui {

RemoteEndpointDialog::RemoteEndpointDialog(SecretStore &store, QWidget *parent) : QDialog(parent), m_store(store)
{
    setWindowTitle(tr("Remote server"));
    m_url = new QLineEdit(this);
    m_url->setPlaceholderText(QStringLiteral("http://gpu-host:8000/v1"));
    m_url->setToolTip(tr("The base URL of an OpenAI-compatible server: vLLM, SGLang, TGI, llama-server or "
                         "longscope-cli serve"));
    m_key = new QLineEdit(this);
    m_key->setEchoMode(QLineEdit::Password);
    m_key->setPlaceholderText(tr("none"));
    m_key->setToolTip(tr("Kept in the system keychain, never in the settings file"));
    m_models = new QComboBox(this);
    m_models->setEnabled(false);
    m_fetch = new QPushButton(tr("Fetch models"), this);
    m_url->setAccessibleName(tr("Server URL"));
    m_key->setAccessibleName(tr("API key"));
    m_models->setAccessibleName(tr("Model on the server"));
    m_fetch->setAccessibleName(tr("Fetch the server's models"));
    m_status = new QLabel(this);
    m_status->setWordWrap(true);
    m_status->setTextInteractionFlags(Qt::TextSelectableByMouse);

    auto *modelRow = new QWidget(this);
    auto *mh = new QHBoxLayout(modelRow);
    mh->setContentsMargins(0, 0, 0, 0);
    mh->addWidget(m_models, 1);
    mh->addWidget(m_fetch);

    auto *buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, this);
    m_ok = buttons->button(QDialogButtonBox::Ok);
    m_ok->setEnabled(false);

    auto *form = new QFormLayout(this);
    form->addRow(tr("Server URL"), m_url);
    form->addRow(tr("API key"), m_key);
    form->addRow(tr("Model"), modelRow);
    form->addRow(m_status);
    form->addRow(buttons);

    connect(m_fetch, &QPushButton::clicked, this, &RemoteEndpointDialog::fetchModels);
    connect(m_url, &QLineEdit::returnPressed, this, &RemoteEndpointDialog::fetchModels);
    connect(buttons, &QDialogButtonBox::accepted, this, &RemoteEndpointDialog::accept);
    connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
    connect(&m_worker, &RemoteWorker::modelsListed, this, &RemoteEndpointDialog::showModels);
    connect(&m_worker, &RemoteWorker::errorOccurred, this, [this](const QString &message) {
        m_status->setText(message);
        m_fetch->setEnabled(true);
    });
}

void RemoteEndpointDialog::setEndpoint(const RemoteEndpoint &endpoint)
{
    m_endpoint = endpoint;
    m_url->setText(endpoint.base_url);
    m_models->clear();
    if (!endpoint.model.isEmpty())
        m_models->addItem(endpoint.model, endpoint.model);
    if (endpoint.has_key)
        m_store.read(endpoint.base_url, [this](const QString &secret, const QString &error) {
            m_key->setText(secret);
            if (!error.isEmpty())
                m_status->setText(error);
        });
}

RemoteEndpoint RemoteEndpointDialog::endpoint() const { return m_endpoint; }

void RemoteEndpointDialog::fetchModels()
{
    m_status->setText(tr("Asking %1 for its models…").arg(m_url->text().trimmed()));
    m_fetch->setEnabled(false);
    m_worker.setEndpoint(m_url->text().trimmed(), m_key->text(), {});
    m_worker.listModels();
}

void RemoteEndpointDialog::showModels(const QVector<RemoteModelInfo> &models)
{
    m_fetch->setEnabled(true);
    const QString previous = m_models->currentData().toString();
    m_models->clear();
    for (const RemoteModelInfo &m : models) {
        const QString label = m.context_length > 0 ? tr("%1 (context %2)").arg(m.id).arg(m.context_length) : m.id;
        m_models->addItem(label, m.id);
    }
    if (const int i = m_models->findData(previous); i >= 0)
        m_models->setCurrentIndex(i);
    m_models->setEnabled(!models.isEmpty());
    m_ok->setEnabled(!models.isEmpty());
    m_status->setText(models.isEmpty() ? tr("The server lists no model.") : tr("%n model(s).", nullptr, int(models.size())));
}

void RemoteEndpointDialog::accept()
{
    m_endpoint.base_url = m_url->text().trimmed();
    m_endpoint.model = m_models->currentData().toString();
    m_endpoint.has_key = !m_key->text().isEmpty();
    auto done = [this](const QString &error) {
        if (!error.isEmpty()) {
            m_status->setText(error);
            return;
        }
        QDialog::accept();
    };
    if (m_endpoint.has_key)
        m_store.write(m_endpoint.base_url, m_key->text(), done);
    else
        m_store.remove(m_endpoint.base_url, done);
}

} // namespace longscope::ui
