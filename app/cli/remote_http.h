// The CLI's transport to an OpenAI-compatible server: cpp-httplib under the protocol code of
// remote/ (the app has its own, over QNetworkAccessManager). Every failure is a
// remote::ClientError with one clear sentence.
#pragma once

#include "remote/openai_client.h"

#include <functional>
#include <string>

namespace longscope::cli {

class RemoteHttp {
public:
    // Throws ClientError(BadUrl). `timeout_s` bounds connecting and each wait for data.
    RemoteHttp(const std::string &url, std::string api_key, double timeout_s);

    const remote::BaseUrl &base() const { return m_base; }
    const std::string &url() const { return m_url; }

    // GET a path (remote::BaseUrl::api or root); the body of a 200.
    std::string get(const std::string &path, const std::string &model = {}) const;
    // POST JSON; the body of a 200.
    std::string post(const std::string &path, const remote::json &body, const std::string &model) const;
    // POST a streaming request: `on_text` gets each piece of text as it comes (false stops the
    // stream: the connection is closed). Returns the stream's state; throws ClientError for an
    // HTTP error, a failed connection, a timeout or a dropped stream.
    remote::StreamState stream(const std::string &path, const remote::json &body, const std::string &model,
                               const std::function<bool(const std::string &)> &on_text) const;

    // The model to use: `wanted` when the server lists it (ModelNotFound naming the ones it
    // has otherwise), the first listed when `wanted` is empty.
    remote::RemoteModel pick_model(const std::string &wanted) const;

private:
    std::string m_url;
    remote::BaseUrl m_base;
    std::string m_key;
    double m_timeout_s;
};

} // namespace longscope::cli
